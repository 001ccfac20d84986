//! The admin API (`/admin/api/`) over real HTTP: sign-in, CSRF, tenant
//! isolation (a tenant admin of A gets 404 for B's objects), every
//! documented route tried by every role against the role its OpenAPI entry
//! names (a member cannot manage, an admin cannot touch owners, only
//! platform admins manage tenants), keys whose secrets work on `/mcp`,
//! import and export through the normal write path and the key's quota,
//! sessions, the audit log, and a platform admin across tenants.

use mneme_e2e_tests::Stack;
use mneme_store::users::Role;
use mneme_test_support::{ALL_PERMISSIONS, TestTenant, create_tenant};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use uuid::Uuid;

const PASSWORD: &str = "correct horse battery staple";

async fn add_user(stack: &Stack, tenant_id: Uuid, email: &str, role: Role) {
    mneme_test_support::create_user(&stack.db.store(), tenant_id, email, role, PASSWORD).await;
}

async fn add_platform_admin(stack: &Stack, email: &str) {
    let db = stack.db.store().client().await.unwrap();
    let hash = mneme_core::password::hash(PASSWORD).unwrap();
    mneme_store::platform_admins::create(&db, email, &hash)
        .await
        .unwrap();
}

/// A signed-in dashboard session: its cookie and CSRF token.
struct Person {
    base: String,
    cookie: String,
    csrf: String,
    http: reqwest::Client,
}

/// Asks to sign in as `email` with `password`.
async fn try_sign_in(stack: &Stack, email: &str, password: &str) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("http://{}/admin/api/session", stack.http_addr))
        .json(&json!({"email": email, "password": password}))
        .send()
        .await
        .unwrap()
}

impl Person {
    async fn sign_in(stack: &Stack, email: &str) -> Person {
        Person::sign_in_with(stack, email, PASSWORD).await
    }

    async fn sign_in_with(stack: &Stack, email: &str, password: &str) -> Person {
        let response = try_sign_in(stack, email, password).await;
        assert_eq!(response.status(), 200, "{email} signs in");
        let set_cookie = response.headers()["set-cookie"]
            .to_str()
            .unwrap()
            .to_owned();
        assert!(set_cookie.contains("HttpOnly"), "{set_cookie}");
        assert!(set_cookie.contains("SameSite=Lax"), "{set_cookie}");
        let cookie = set_cookie.split(';').next().unwrap().to_owned();
        let body: Value = response.json().await.unwrap();
        Person {
            base: format!("http://{}/admin/api", stack.http_addr),
            cookie,
            csrf: body["csrfToken"].as_str().unwrap().to_owned(),
            http: reqwest::Client::new(),
        }
    }

    async fn call(&self, method: Method, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        let mut request = self
            .http
            .request(method.clone(), format!("{}{path}", self.base))
            .header("cookie", &self.cookie);
        if method != Method::GET {
            request = request.header("x-csrf-token", &self.csrf);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status();
        let text = response.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    async fn get(&self, path: &str) -> (StatusCode, Value) {
        self.call(Method::GET, path, None).await
    }

    async fn ok(&self, method: Method, path: &str, body: Option<Value>) -> Value {
        let (status, body) = self.call(method.clone(), path, body).await;
        assert!(status.is_success(), "{method} {path}: {status} {body}");
        body
    }

    /// `POST /memory/import` of an NDJSON body as `key`.
    async fn import(&self, key: &str, ndjson: String) -> (StatusCode, Value) {
        let response = self
            .http
            .post(format!("{}/memory/import?key={key}", self.base))
            .header("cookie", &self.cookie)
            .header("x-csrf-token", &self.csrf)
            .header("content-type", "application/x-ndjson")
            .body(ndjson)
            .send()
            .await
            .unwrap();
        (
            response.status(),
            response.json().await.unwrap_or(Value::Null),
        )
    }

    /// The user `email` of the tenant, as `GET /users` lists it.
    async fn user_id(&self, email: &str) -> String {
        let users = self.ok(Method::GET, "/users", None).await;
        users["users"]
            .as_array()
            .unwrap()
            .iter()
            .find(|u| u["email"] == email)
            .unwrap_or_else(|| panic!("no user {email} in {users}"))["id"]
            .as_str()
            .unwrap()
            .to_owned()
    }
}

async fn remember_via_rest(stack: &Stack, key: &str, content: &str) -> (StatusCode, Value) {
    let response = reqwest::Client::new()
        .post(format!("http://{}/v1/tools/remember", stack.http_addr))
        .bearer_auth(key)
        .json(&json!({"content": content, "topic": "admin-test", "type": "fact"}))
        .send()
        .await
        .unwrap();
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

struct World {
    stack: Stack,
    a: TestTenant,
    b: TestTenant,
}

async fn world() -> World {
    let stack = Stack::start("hash", &[]).await;
    let store = stack.db.store();
    let a = create_tenant(&store, "acme", ALL_PERMISSIONS).await;
    let b = create_tenant(&store, "globex", ALL_PERMISSIONS).await;
    add_user(&stack, a.tenant_id, "owner@acme.test", Role::Owner).await;
    add_user(&stack, a.tenant_id, "member@acme.test", Role::Member).await;
    add_user(&stack, b.tenant_id, "owner@globex.test", Role::Owner).await;
    World { stack, a, b }
}

#[tokio::test]
async fn sign_in_sessions_and_csrf() {
    let w = world().await;
    let base = format!("http://{}/admin/api", w.stack.http_addr);
    let http = reqwest::Client::new();
    let wrong = try_sign_in(&w.stack, "owner@acme.test", "not the password").await;
    assert_eq!(wrong.status(), 401);
    let body: Value = wrong.json().await.unwrap();
    assert_eq!(body["error"]["code"], "unauthenticated");
    // No cookie: 401, in the API's error shape.
    let anonymous = http.get(format!("{base}/keys")).send().await.unwrap();
    assert_eq!(anonymous.status(), 401);
    assert_eq!(anonymous.headers()["cache-control"], "no-store");

    let owner = Person::sign_in(&w.stack, "owner@acme.test").await;
    let me = owner.ok(Method::GET, "/session", None).await;
    assert_eq!(me["me"]["role"], "owner");
    assert_eq!(me["me"]["tenantName"], "acme");

    // A change without the CSRF token is refused, and changes nothing.
    let forged = http
        .post(format!("{base}/keys"))
        .header("cookie", &owner.cookie)
        .json(&json!({"name": "forged", "permissions": ["read"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), 403);
    let keys = owner.ok(Method::GET, "/keys", None).await;
    assert!(!keys.to_string().contains("forged"));

    // Signing out ends the session on the server, not just in the browser.
    let out = owner.call(Method::DELETE, "/session", None).await;
    assert_eq!(out.0, 204);
    assert_eq!(owner.get("/keys").await.0, 401);

    // Disabling a person ends their sessions at their next request.
    let member = Person::sign_in(&w.stack, "member@acme.test").await;
    assert_eq!(member.get("/overview").await.0, 200);
    let owner = Person::sign_in(&w.stack, "owner@acme.test").await;
    let member_id = owner.user_id("member@acme.test").await;
    owner
        .ok(
            Method::PATCH,
            &format!("/users/{member_id}"),
            Some(json!({"status": "disabled"})),
        )
        .await;
    assert_eq!(member.get("/overview").await.0, 401);
    // The last owner cannot be demoted.
    let own_id = owner.user_id("owner@acme.test").await;
    let (status, body) = owner
        .call(
            Method::PATCH,
            &format!("/users/{own_id}"),
            Some(json!({"role": "admin"})),
        )
        .await;
    assert_eq!(status, 409, "{body}");
    let _ = w.b;
    w.stack.shutdown().await.unwrap();
}

#[tokio::test]
async fn keys_created_in_the_dashboard_work_and_revocation_is_immediate() {
    let w = world().await;
    let owner = Person::sign_in(&w.stack, "owner@acme.test").await;
    let created = owner
        .ok(
            Method::POST,
            "/keys",
            Some(json!({
                "name": "ci-agent",
                "permissions": ["read", "write"],
                "fragmentLimit": 2,
                "defaultMode": "onboarding",
            })),
        )
        .await;
    let secret = created["secret"].as_str().unwrap().to_owned();
    assert!(secret.starts_with("mn_"), "{created}");
    let key_id = created["key"]["id"].as_str().unwrap().to_owned();
    assert_eq!(created["key"]["fragmentLimit"], 2);
    assert_eq!(created["key"]["defaultMode"], "onboarding");
    // The secret is never shown again.
    let listed = owner.ok(Method::GET, "/keys", None).await;
    assert!(!listed.to_string().contains(&secret));
    let shown = owner
        .ok(Method::GET, &format!("/keys/{key_id}"), None)
        .await;
    assert!(!shown.to_string().contains(&secret));
    assert!(shown["rateLimit"]["limit"].as_u64().unwrap() > 0, "{shown}");

    // The key works, and its quota holds.
    assert_eq!(
        remember_via_rest(&w.stack, &secret, "The CI agent runs nightly.")
            .await
            .0,
        200
    );
    assert_eq!(
        remember_via_rest(&w.stack, &secret, "The CI agent uses two cores.")
            .await
            .0,
        200
    );
    let (status, body) =
        remember_via_rest(&w.stack, &secret, "The CI agent keeps logs for a week.").await;
    assert_eq!(status, 403, "{body}");
    // Raising the quota in the dashboard lets it write again.
    let changed = owner
        .ok(
            Method::PATCH,
            &format!("/keys/{key_id}"),
            Some(json!({"fragmentLimit": null})),
        )
        .await;
    assert_eq!(changed["key"]["fragmentLimit"], Value::Null);
    assert_eq!(
        remember_via_rest(&w.stack, &secret, "The CI agent keeps logs for a week.")
            .await
            .0,
        200
    );
    // Bad input is refused with a clear message, and changes nothing.
    let (status, body) = owner
        .call(
            Method::PATCH,
            &format!("/keys/{key_id}"),
            Some(json!({"permissions": [], "name": "renamed"})),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "invalid_argument");
    let shown = owner
        .ok(Method::GET, &format!("/keys/{key_id}"), None)
        .await;
    assert_eq!(shown["key"]["name"], "ci-agent");

    // Revoked: the next request with the key fails at once.
    owner
        .ok(Method::POST, &format!("/keys/{key_id}/revoke"), None)
        .await;
    assert_eq!(
        remember_via_rest(&w.stack, &secret, "After revocation.")
            .await
            .0,
        401
    );

    // Every change is in the audit log, with who made it.
    let audit = owner.ok(Method::GET, "/audit", None).await;
    let actions: Vec<&str> = audit["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    for action in ["key.create", "key.update", "key.revoke"] {
        assert!(actions.contains(&action), "{action} in {actions:?}");
    }
    assert!(
        audit["entries"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["actor"] == "owner@acme.test")
    );
    w.stack.shutdown().await.unwrap();
}

/// A misspelt field must not answer 200 without changing anything, and a
/// value the database would refuse is a 400, not a 500.
#[tokio::test]
async fn bodies_with_unknown_fields_or_impossible_values_are_refused_by_name() {
    let w = world().await;
    let owner = Person::sign_in(&w.stack, "owner@acme.test").await;
    let user = owner.ok(Method::GET, "/users", None).await["users"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let key = w.a.key_id.to_string();
    for (method, path, body, named) in [
        (
            Method::PATCH,
            format!("/users/{user}"),
            json!({"stauts": "disabled"}),
            "stauts",
        ),
        (
            Method::POST,
            "/groups".to_owned(),
            json!({"name": "team", "colour": "red"}),
            "colour",
        ),
        (
            Method::POST,
            "/consolidation/run".to_owned(),
            json!({"dry_run": true}),
            "dry_run",
        ),
        (
            Method::PATCH,
            format!("/keys/{key}"),
            json!({"rateLimit": 0}),
            "rateLimit",
        ),
    ] {
        let (status, answer) = owner.call(method, &path, Some(body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {answer}");
        assert_eq!(answer["error"]["code"], "invalid_argument", "{answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains(named), "{path}: {message}");
    }
    let users = owner.ok(Method::GET, "/users", None).await;
    assert_eq!(users["users"][0]["status"], "active", "{users}");
    let groups = owner.ok(Method::GET, "/groups", None).await;
    assert_eq!(groups["groups"], json!([]), "{groups}");
    w.stack.shutdown().await.unwrap();
}

#[tokio::test]
async fn tenant_admins_see_only_their_tenant() {
    let w = world().await;
    let a_owner = Person::sign_in(&w.stack, "owner@acme.test").await;
    let b_owner = Person::sign_in(&w.stack, "owner@globex.test").await;
    // Objects of A: a key, a group, a memory, a session.
    let a_key = w.a.key_id.to_string();
    let group = a_owner
        .ok(Method::POST, "/groups", Some(json!({"name": "team"})))
        .await["group"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let mcp = w.stack.mcp(&w.a.api_key).await;
    let memory = mcp
        .remember_new("Acme deploys on Fridays.", "deploy", "fact")
        .await;
    let sessions = a_owner.ok(Method::GET, "/sessions", None).await;
    let session = sessions["sessions"][0]["id"].as_str().unwrap().to_owned();
    let a_tenant = w.a.tenant_id.to_string();
    let a_user = a_owner.ok(Method::GET, "/users", None).await["users"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();

    // B's owner: every route on A's objects answers 404, like a missing one.
    let probes: Vec<(Method, String, Option<Value>)> = vec![
        (Method::GET, format!("/keys/{a_key}"), None),
        (
            Method::PATCH,
            format!("/keys/{a_key}"),
            Some(json!({"name": "x"})),
        ),
        (Method::POST, format!("/keys/{a_key}/revoke"), None),
        (Method::DELETE, format!("/groups/{group}"), None),
        (
            Method::PUT,
            format!("/groups/{group}/members/{a_key}"),
            None,
        ),
        (
            Method::DELETE,
            format!("/groups/{group}/members/{a_key}"),
            None,
        ),
        (
            Method::PATCH,
            format!("/users/{a_user}"),
            Some(json!({"status": "disabled"})),
        ),
        (Method::GET, format!("/memory/{memory}"), None),
        (
            Method::PATCH,
            format!("/memory/{memory}"),
            Some(json!({"importance": 0.1})),
        ),
        (Method::DELETE, format!("/memory/{memory}"), None),
        (Method::DELETE, format!("/sessions/{session}"), None),
        (Method::GET, format!("/sessions/{session}"), None),
        (Method::POST, format!("/sessions/{session}/reflect"), None),
        (Method::GET, format!("/memory/export?key={a_key}"), None),
        (Method::GET, format!("/keys?tenant={a_tenant}"), None),
        (Method::GET, format!("/memory?tenant={a_tenant}"), None),
        (Method::GET, format!("/overview?tenant={a_tenant}"), None),
        (Method::GET, format!("/audit?tenant={a_tenant}"), None),
    ];
    let missing = Uuid::now_v7();
    for (method, path, body) in probes {
        let (status, answer) = b_owner.call(method.clone(), &path, body.clone()).await;
        assert_eq!(status, 404, "{method} {path} as B: {answer}");
        assert_eq!(answer["error"]["code"], "not_found", "{method} {path}");
        // Exactly what a missing object answers.
        let missing_path = path.replace(&a_key, &missing.to_string());
        let missing_path = missing_path.replace(&memory, &missing.to_string());
        if missing_path != path {
            let (status, _) = a_owner.call(method.clone(), &missing_path, body).await;
            assert_eq!(status, 404, "{method} {missing_path} as A");
        }
    }
    // B's lists hold nothing of A's.
    for path in [
        "/keys",
        "/memory",
        "/sessions",
        "/groups",
        "/users",
        "/audit",
        "/graph",
        "/session-reflections",
    ] {
        let (status, body) = b_owner.get(path).await;
        assert_eq!(status, 200, "{path}");
        let text = body.to_string();
        assert!(
            !text.contains(&a_key) && !text.contains(&memory) && !text.contains(&session),
            "{path} as B shows A's objects: {text}"
        );
        assert!(!text.contains("acme"), "{path}: {text}");
    }
    // A's objects are untouched.
    assert_eq!(a_owner.get(&format!("/memory/{memory}")).await.0, 200);
    assert_eq!(a_owner.get(&format!("/keys/{a_key}")).await.0, 200);

    // What members, admins and owners may do on every route is swept in
    // `every_route_enforces_the_role_its_document_names`.
    let tenants = a_owner.ok(Method::GET, "/tenants", None).await;
    assert_eq!(tenants["tenants"].as_array().unwrap().len(), 1);

    // A session's working memory is visible, and kept for good on request.
    mcp.ok(
        "remember",
        json!({"content": "The release branch is frozen until Monday.", "topic": "release",
               "type": "fact", "scope": "session"}),
    )
    .await;
    let detail = a_owner
        .ok(Method::GET, &format!("/sessions/{session}"), None)
        .await;
    assert_eq!(
        detail["workingMemory"].as_array().unwrap().len(),
        1,
        "{detail}"
    );
    let reflected = a_owner
        .ok(Method::POST, &format!("/sessions/{session}/reflect"), None)
        .await;
    assert!(
        !reflected["fragments"].as_array().unwrap().is_empty(),
        "{reflected}"
    );
    let kept = a_owner.ok(Method::GET, "/memory?q=frozen", None).await;
    assert!(!kept["items"].as_array().unwrap().is_empty(), "{kept}");

    // The session ends for its client when A's owner terminates it.
    a_owner
        .ok(Method::DELETE, &format!("/sessions/{session}"), None)
        .await;
    let after = reqwest::Client::new()
        .post(w.stack.mcp_url())
        .bearer_auth(&w.a.api_key)
        .header("mcp-session-id", &session)
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 9, "method": "tools/list"}))
        .send()
        .await
        .unwrap();
    assert_eq!(after.status(), 404);
    let listed = a_owner.ok(Method::GET, "/sessions", None).await;
    assert!(!listed.to_string().contains(&session));
    w.stack.shutdown().await.unwrap();
}

/// One operation of `/admin/api/openapi.json`.
struct Documented {
    method: Method,
    /// Below `/admin/api`.
    path: String,
    /// Who may call it (`x-mneme-access`).
    access: String,
    /// Whether it takes `?tenant=` (platform admins name the tenant).
    in_tenant: bool,
}

/// Every operation the admin API's OpenAPI document lists.
async fn documented_routes(stack: &Stack) -> Vec<Documented> {
    let document: Value =
        reqwest::get(format!("http://{}/admin/api/openapi.json", stack.http_addr))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
    let mut routes = Vec::new();
    for (path, operations) in document["paths"].as_object().unwrap() {
        for (method, operation) in operations.as_object().unwrap() {
            routes.push(Documented {
                method: Method::from_bytes(method.to_uppercase().as_bytes()).unwrap(),
                path: path.strip_prefix("/admin/api").unwrap().to_owned(),
                access: operation["x-mneme-access"]
                    .as_str()
                    .unwrap_or_else(|| panic!("{method} {path} names no access level"))
                    .to_owned(),
                in_tenant: operation["parameters"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|p| p["name"] == "tenant"),
            });
        }
    }
    routes
}

/// Whether a person of `role` ("member", "admin", "owner", "platform") may
/// call a route documented with `access`.
fn admits(access: &str, role: &str) -> bool {
    match access {
        "anyone" | "signed in" | "any role" => true,
        "manage" => role != "member",
        "platform" => role == "platform",
        other => panic!("unknown access level `{other}`: teach the role sweep"),
    }
}

/// The ids of tenant A's objects that a path's `{…}` are aimed at.
struct Aim {
    tenant: String,
    user: String,
    key: String,
    group: String,
    memory: String,
    session: String,
}

impl Aim {
    fn at(&self, path: &str) -> String {
        if !path.contains('{') {
            return path.to_owned();
        }
        let id = match path.split('/').nth(1).unwrap_or_default() {
            "tenants" => &self.tenant,
            "users" => &self.user,
            "keys" => &self.key,
            "groups" => &self.group,
            "memory" => &self.memory,
            "sessions" => &self.session,
            other => panic!("no object of A to aim /{other}/… at: add one to `Aim`"),
        };
        let aimed = path.replace("{id}", id).replace("{key_id}", &self.key);
        assert!(
            !aimed.contains('{'),
            "{path} has a placeholder `Aim` does not fill"
        );
        aimed
    }
}

/// Every route of the OpenAPI document, tried by every kind of person on
/// A's real objects: no session gets 401; whoever the route's
/// `x-mneme-access` leaves out gets `403 permission_denied` and changes
/// nothing; whoever it admits reads successfully. A new route is swept as
/// soon as it is documented (and every route is: see the gateway's
/// `table` module).
#[tokio::test]
async fn every_route_enforces_the_role_its_document_names() {
    let w = world().await;
    add_user(&w.stack, w.a.tenant_id, "admin@acme.test", Role::Admin).await;
    add_platform_admin(&w.stack, "ops@mneme.test").await;
    let owner = Person::sign_in(&w.stack, "owner@acme.test").await;
    let people = [
        (
            "member",
            Person::sign_in(&w.stack, "member@acme.test").await,
        ),
        ("admin", Person::sign_in(&w.stack, "admin@acme.test").await),
        ("owner", Person::sign_in(&w.stack, "owner@acme.test").await),
        (
            "platform",
            Person::sign_in(&w.stack, "ops@mneme.test").await,
        ),
    ];
    let mcp = w.stack.mcp(&w.a.api_key).await;
    let memory = mcp
        .remember_new("Acme sends its invoices on the first.", "billing", "fact")
        .await;
    let key = w.a.key_id.to_string();
    let group = owner
        .ok(Method::POST, "/groups", Some(json!({"name": "team"})))
        .await["group"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    owner
        .ok(Method::PUT, &format!("/groups/{group}/members/{key}"), None)
        .await;
    let aim = Aim {
        tenant: w.a.tenant_id.to_string(),
        // The owner: what a member or an admin may least touch.
        user: owner.user_id("owner@acme.test").await,
        key,
        group,
        memory,
        session: owner.ok(Method::GET, "/sessions", None).await["sessions"][0]["id"]
            .as_str()
            .unwrap()
            .to_owned(),
    };
    // Every change is audited (and so is an export, a read).
    let changes = || async {
        let audit = owner.ok(Method::GET, "/audit", None).await;
        let entries = audit["entries"].as_array().unwrap().clone();
        entries
            .into_iter()
            .filter(|e| e["action"] != "memory.export")
            .collect::<Vec<_>>()
    };
    let changes_before = changes().await;

    let routes = documented_routes(&w.stack).await;
    assert!(routes.len() >= 40, "{} documented operations", routes.len());
    let mut refusals = 0;
    for route in &routes {
        let (method, access) = (&route.method, route.access.as_str());
        let what = format!("{method} {}", route.path);
        let path = aim.at(&route.path);
        if access != "anyone" {
            let anonymous = reqwest::Client::new()
                .request(method.clone(), format!("{}{path}", owner.base))
                .send()
                .await
                .unwrap();
            assert_eq!(anonymous.status(), 401, "{what} without a session");
        }
        for (role, person) in &people {
            let path = if *role == "platform" && route.in_tenant {
                format!("{path}?tenant={}", aim.tenant)
            } else {
                path.clone()
            };
            if !admits(access, role) {
                // Refused before the body is read: any body will do.
                let body = (*method != Method::GET).then(|| json!({}));
                let (status, body) = person.call(method.clone(), &path, body).await;
                assert_eq!(status, 403, "{what} as {role} ({access}): {body}");
                assert_eq!(body["error"]["code"], "permission_denied", "{what}");
                refusals += 1;
            } else if *method == Method::GET {
                let (status, body) = person.get(&path).await;
                assert!(
                    status.is_success(),
                    "{what} as {role} ({access}): {status} {body}"
                );
            }
        }
    }
    assert!(refusals >= 25, "only {refusals} refusals");
    // Nothing refused changed anything.
    assert_eq!(changes().await, changes_before);

    // `/metrics`: the pod's per-tool figures (of all its tenants) are the
    // platform admins' alone; the tenant's people see the pod's health.
    let (_, ops) = &people[3];
    let pod = ops
        .ok(
            Method::GET,
            &format!("/metrics?tenant={}", aim.tenant),
            None,
        )
        .await;
    assert!(
        pod["tools"]
            .as_array()
            .is_some_and(|tools| tools.iter().any(|t| t["tool"] == "remember")),
        "{pod}"
    );
    for (role, person) in &people[..3] {
        let seen = person.ok(Method::GET, "/metrics", None).await;
        assert!(seen["requests"].as_u64().is_some_and(|n| n > 0), "{seen}");
        assert!(
            seen.get("tools").is_none() && !seen.to_string().contains("remember"),
            "a tenant {role} sees the pod's tools: {seen}"
        );
    }
    w.stack.shutdown().await.unwrap();
}

#[tokio::test]
async fn tenant_admins_manage_people_but_never_owners() {
    const NEW_PASSWORD: &str = "a brand new passphrase for the member";
    let w = world().await;
    add_user(&w.stack, w.a.tenant_id, "admin@acme.test", Role::Admin).await;
    let admin = Person::sign_in(&w.stack, "admin@acme.test").await;
    let owner_id = admin.user_id("owner@acme.test").await;
    let member_id = admin.user_id("member@acme.test").await;

    // An admin neither resets, demotes nor disables an owner, nor makes one.
    for (user, change) in [
        (&owner_id, json!({"password": NEW_PASSWORD})),
        (&owner_id, json!({"role": "member"})),
        (&owner_id, json!({"status": "disabled"})),
        (&member_id, json!({"role": "owner"})),
    ] {
        let (status, body) = admin
            .call(
                Method::PATCH,
                &format!("/users/{user}"),
                Some(change.clone()),
            )
            .await;
        assert_eq!(status, 403, "{change} on {user}: {body}");
        assert_eq!(body["error"]["code"], "permission_denied");
    }
    let (status, body) = admin
        .call(
            Method::POST,
            "/users",
            Some(json!({"email": "owner2@acme.test", "role": "owner", "password": PASSWORD})),
        )
        .await;
    assert_eq!(status, 403, "{body}");
    let users = admin.ok(Method::GET, "/users", None).await;
    let by_email = |email: &str| {
        users["users"]
            .as_array()
            .unwrap()
            .iter()
            .find(|u| u["email"] == email)
            .cloned()
    };
    let owner = by_email("owner@acme.test").unwrap();
    assert_eq!(
        (&owner["role"], &owner["status"]),
        (&json!("owner"), &json!("active"))
    );
    assert_eq!(by_email("member@acme.test").unwrap()["role"], "member");
    assert!(by_email("owner2@acme.test").is_none(), "{users}");
    assert_eq!(
        try_sign_in(&w.stack, "owner@acme.test", NEW_PASSWORD)
            .await
            .status(),
        401
    );
    Person::sign_in(&w.stack, "owner@acme.test").await;

    // An admin resets a member's password: the new one signs in, the old
    // one no longer does.
    admin
        .ok(
            Method::PATCH,
            &format!("/users/{member_id}"),
            Some(json!({"password": NEW_PASSWORD})),
        )
        .await;
    assert_eq!(
        try_sign_in(&w.stack, "member@acme.test", PASSWORD)
            .await
            .status(),
        401
    );
    let member = Person::sign_in_with(&w.stack, "member@acme.test", NEW_PASSWORD).await;
    let me = member.ok(Method::GET, "/session", None).await;
    assert_eq!(me["me"]["email"], "member@acme.test");
    // The reset is audited, as a reset: the password is not.
    let audit = admin.ok(Method::GET, "/audit", None).await;
    assert!(
        audit["entries"].as_array().unwrap().iter().any(|e| {
            e["action"] == "user.update"
                && e["target"] == "member@acme.test"
                && e["actor"] == "admin@acme.test"
                && e["detail"]["passwordReset"] == true
        }),
        "{audit}"
    );
    assert!(!audit.to_string().contains(NEW_PASSWORD));
    w.stack.shutdown().await.unwrap();
}

/// The import writes in batches of up to 200 lines, each one transaction
/// checked against the key's fragment limit. A file that outgrows the
/// limit stores the batches that fit and reports, line by line, what was
/// stored (with ids) and what the quota refused.
#[tokio::test]
async fn an_import_past_a_keys_fragment_limit_reports_what_was_stored_and_what_was_refused() {
    // More lines than one batch, so that part of the file fits.
    const LIMIT: usize = 201;
    const LINES: usize = LIMIT + 2;
    let w = world().await;
    let owner = Person::sign_in(&w.stack, "owner@acme.test").await;
    let created = owner
        .ok(
            Method::POST,
            "/keys",
            Some(json!({"name": "importer", "permissions": ["read", "write"],
                        "fragmentLimit": LIMIT})),
        )
        .await;
    let key = created["key"]["id"].as_str().unwrap().to_owned();
    let ndjson: String = (1..=LINES)
        .map(|i| {
            format!(
                "{}\n",
                json!({"content": format!("Warehouse {i} ships orders from dock {}.", i * 7),
                       "topic": "warehouses", "type": "fact"})
            )
        })
        .collect();
    let (status, report) = owner.import(&key, ndjson).await;
    assert_eq!(status, 200, "{report}");
    let results = report["results"].as_array().unwrap();
    assert_eq!(results.len(), LINES, "every line is reported: {report}");
    let imported = report["imported"].as_u64().unwrap() as usize;
    let failed = report["failed"].as_u64().unwrap() as usize;
    assert!(
        imported > 0 && failed > 0,
        "part of the file fits, part does not: {report}"
    );
    assert!(imported <= LIMIT, "{report}");
    assert_eq!(
        (imported + failed, report["duplicates"].as_u64()),
        (LINES, Some(0))
    );
    let stored: Vec<&str> = results
        .iter()
        .filter(|r| r["status"] == "created")
        .map(|r| r["id"].as_str().expect("a stored line's id"))
        .collect();
    assert_eq!(stored.len(), imported);
    for refused in results.iter().filter(|r| r["status"] != "created") {
        assert_eq!(refused["status"], "rejected", "{refused}");
        let error = refused["error"].as_str().unwrap_or_default();
        assert!(error.contains("limit"), "a quota refusal: {refused}");
    }
    // What the report says was stored is stored, and nothing more.
    let shown = owner.ok(Method::GET, &format!("/keys/{key}"), None).await;
    assert_eq!(shown["key"]["fragments"], imported, "{shown}");
    for id in [stored[0], stored[stored.len() - 1]] {
        assert_eq!(owner.get(&format!("/memory/{id}")).await.0, 200, "{id}");
    }
    let audit = owner.ok(Method::GET, "/audit", None).await;
    assert_eq!(audit["entries"][0]["action"], "memory.import", "{audit}");
    assert_eq!(audit["entries"][0]["detail"]["imported"], imported);
    w.stack.shutdown().await.unwrap();
}

#[tokio::test]
async fn memory_browse_amend_forget_export_and_import() {
    let w = world().await;
    let owner = Person::sign_in(&w.stack, "owner@acme.test").await;
    let mcp = w.stack.mcp(&w.a.api_key).await;
    let first = mcp
        .remember_new("The staging database runs PostgreSQL 15.", "infra", "fact")
        .await;
    for i in 0..4 {
        mcp.remember_new(
            &format!("Runbook step {i} restarts the worker pool."),
            "runbook",
            "procedure",
        )
        .await;
    }
    // Search, filters and cursor pagination reach every memory once.
    let found = owner.ok(Method::GET, "/memory?q=postgresql", None).await;
    assert_eq!(found["items"].as_array().unwrap().len(), 1, "{found}");
    assert_eq!(found["items"][0]["id"], first.as_str());
    let mut seen = Vec::new();
    let mut cursor = String::new();
    loop {
        let page = owner
            .ok(
                Method::GET,
                &format!("/memory?type=procedure&limit=2&cursor={cursor}"),
                None,
            )
            .await;
        for item in page["items"].as_array().unwrap() {
            seen.push(item["id"].as_str().unwrap().to_owned());
        }
        match page["nextCursor"].as_str() {
            Some(next) => cursor = next.to_owned(),
            None => break,
        }
    }
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 4);
    let (status, body) = owner.get("/memory?cursor=garbage").await;
    assert_eq!(status, 400, "{body}");

    // Amend keeps the earlier version; forget removes it from the browser.
    owner
        .ok(
            Method::PATCH,
            &format!("/memory/{first}"),
            Some(
                json!({"content": "The staging database runs PostgreSQL 16.", "reason": "upgrade"}),
            ),
        )
        .await;
    let detail = owner
        .ok(Method::GET, &format!("/memory/{first}"), None)
        .await;
    assert_eq!(
        detail["fragment"]["content"],
        "The staging database runs PostgreSQL 16."
    );
    assert_eq!(
        detail["versions"][0]["content"],
        "The staging database runs PostgreSQL 15."
    );

    // Export, then import into tenant B's key: lines arrive through the
    // normal write path (one invalid line is reported, the rest stored),
    // and importing the same file again stores nothing twice.
    let export = reqwest::Client::new()
        .get(format!(
            "http://{}/admin/api/memory/export",
            w.stack.http_addr
        ))
        .header("cookie", &owner.cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(export.status(), 200);
    assert_eq!(export.headers()["content-type"], "application/x-ndjson");
    let ndjson = export.text().await.unwrap();
    assert_eq!(ndjson.lines().count(), 5, "{ndjson}");
    let b_owner = Person::sign_in(&w.stack, "owner@globex.test").await;
    // The export's own fields (`id`, `keyId`, `createdAt`) are read or
    // set by the import; a misspelt field is refused as `remember` refuses it.
    let import = format!(
        "{ndjson}{{\"content\": \"no topic or type\"}}\n\
         {{\"content\": \"The cache is warmed at deploy time.\", \"topic\": \"ops\", \"type\": \"fact\", \"importanse\": 0.9}}\n"
    );
    let b_key = w.b.key_id.to_string();
    let (_, result) = b_owner.import(&b_key, import.clone()).await;
    assert_eq!(result["imported"], 5, "{result}");
    assert_eq!(result["failed"], 2, "{result}");
    assert_eq!(result["results"][5]["line"], 6);
    assert_eq!(result["results"][5]["status"], "rejected");
    assert_eq!(result["results"][6]["status"], "rejected");
    let error = result["results"][6]["error"].as_str().unwrap();
    assert!(error.contains("unknown field `importanse`"), "{error}");
    let (_, again) = b_owner.import(&b_key, import).await;
    assert_eq!(again["imported"], 0, "{again}");
    assert_eq!(again["duplicates"], 5, "{again}");
    let b_memories = b_owner.ok(Method::GET, "/memory?limit=100", None).await;
    assert_eq!(b_memories["items"].as_array().unwrap().len(), 5);
    // Importing as another tenant's key is as impossible as a missing key.
    let (status, _) = b_owner
        .call(
            Method::POST,
            &format!("/memory/import?key={}", w.a.key_id),
            None,
        )
        .await;
    assert_eq!(status, 404);

    owner
        .ok(Method::DELETE, &format!("/memory/{first}"), None)
        .await;
    assert_eq!(owner.get(&format!("/memory/{first}")).await.0, 404);
    let overview = owner.ok(Method::GET, "/memory/overview", None).await;
    assert_eq!(overview["total"], 4, "{overview}");
    let graph = owner.ok(Method::GET, "/graph", None).await;
    assert_eq!(graph["nodes"].as_array().unwrap().len(), 4, "{graph}");
    w.stack.shutdown().await.unwrap();
}

#[tokio::test]
async fn platform_admins_act_in_any_tenant_they_name() {
    let w = world().await;
    add_platform_admin(&w.stack, "ops@mneme.test").await;
    let ops = Person::sign_in(&w.stack, "ops@mneme.test").await;
    let me = ops.ok(Method::GET, "/session", None).await;
    assert_eq!(me["me"]["kind"], "platform");
    let tenants = ops.ok(Method::GET, "/tenants", None).await;
    assert_eq!(tenants["tenants"].as_array().unwrap().len(), 2);
    // Tenant-scoped routes need the tenant named.
    assert_eq!(ops.get("/keys").await.0, 400);
    assert_eq!(
        ops.get(&format!("/keys?tenant={}", Uuid::now_v7())).await.0,
        404
    );
    let keys = ops
        .ok(
            Method::GET,
            &format!("/keys?tenant={}", w.b.tenant_id),
            None,
        )
        .await;
    assert_eq!(keys["keys"][0]["id"], w.b.key_id.to_string());

    let created = ops
        .ok(Method::POST, "/tenants", Some(json!({"name": "initech"})))
        .await;
    let initech = created["tenant"]["id"].as_str().unwrap().to_owned();
    let (status, _) = ops
        .call(
            Method::POST,
            "/tenants",
            Some(json!({"name": "Not A Slug"})),
        )
        .await;
    assert_eq!(status, 400);
    ops.ok(
        Method::POST,
        &format!("/users?tenant={initech}"),
        Some(json!({"email": "boss@initech.test", "role": "owner", "password": PASSWORD})),
    )
    .await;
    let boss = Person::sign_in(&w.stack, "boss@initech.test").await;
    assert_eq!(boss.get("/overview").await.0, 200);
    // A person signed in when their tenant is suspended is out at their next request.
    let a_owner = Person::sign_in(&w.stack, "owner@acme.test").await;
    // Suspending a tenant stops its keys and its people at once.
    ops.ok(
        Method::PATCH,
        &format!("/tenants/{}", w.a.tenant_id),
        Some(json!({"status": "suspended"})),
    )
    .await;
    let owner_a = reqwest::Client::new()
        .post(format!("http://{}/admin/api/session", w.stack.http_addr))
        .json(&json!({"email": "owner@acme.test", "password": PASSWORD}))
        .send()
        .await
        .unwrap();
    assert_eq!(owner_a.status(), 401);
    assert_eq!(a_owner.get("/overview").await.0, 401);
    assert_eq!(
        remember_via_rest(&w.stack, &w.a.api_key, "A suspended tenant writes.")
            .await
            .0,
        401
    );
    let audit = ops
        .ok(Method::GET, &format!("/audit?tenant={initech}"), None)
        .await;
    let actions: Vec<&str> = audit["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert!(
        actions.contains(&"tenant.create") && actions.contains(&"user.create"),
        "{actions:?}"
    );
    assert!(audit["entries"][0]["actorKind"] == "platform");
    w.stack.shutdown().await.unwrap();
}

#[tokio::test]
async fn every_documented_route_answers_and_the_dashboard_is_served_with_a_strict_policy() {
    let w = world().await;
    let http = reqwest::Client::new();
    let base = format!("http://{}", w.stack.http_addr);
    let page = http.get(format!("{base}/admin")).send().await.unwrap();
    assert_eq!(page.status(), 200);
    let csp = page.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"),
        "{csp}"
    );
    assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    let html = page.text().await.unwrap();
    assert!(!html.contains("<script>"), "no inline script");
    for asset in ["app.js", "app.css", "graph.js", "charts.js"] {
        let response = http
            .get(format!("{base}/admin/assets/{asset}"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{asset}");
    }

    let document: Value = http
        .get(format!("{base}/admin/api/openapi.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let owner = Person::sign_in(&w.stack, "owner@acme.test").await;
    let paths = document["paths"].as_object().unwrap();
    assert!(paths.len() >= 25, "{}", paths.len());
    for (path, operations) in paths {
        for (method, _) in operations.as_object().unwrap() {
            if path == "/admin/api/session" {
                continue;
            }
            let concrete = path
                .trim_start_matches("/admin/api")
                .replace("{id}", &Uuid::now_v7().to_string())
                .replace("{key_id}", &Uuid::now_v7().to_string());
            let method = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            let (status, body) = owner.call(method.clone(), &concrete, Some(json!({}))).await;
            assert_ne!(status, 405, "{method} {path}");
            let unknown_route = body["error"]["message"] == "no such admin API route";
            assert!(
                !unknown_route,
                "{method} {path} is documented but not routed"
            );
            if !path.ends_with("/export") {
                assert!(body.is_object(), "{method} {path} answers JSON: {body}");
            }
        }
    }
    w.stack.shutdown().await.unwrap();
}
