//! The admin API (`/admin/api/`) over real HTTP: sign-in, CSRF, roles, and
//! tenant isolation on every route (a tenant admin of A gets 404 for B's
//! objects, a member cannot manage), keys whose secrets work on `/mcp`,
//! import and export through the normal write path, sessions, the audit
//! log, and a platform admin across tenants.

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

/// A signed-in dashboard session: its cookie and CSRF token.
struct Person {
    base: String,
    cookie: String,
    csrf: String,
    http: reqwest::Client,
}

impl Person {
    async fn sign_in(stack: &Stack, email: &str) -> Person {
        let base = format!("http://{}/admin/api", stack.http_addr);
        let http = reqwest::Client::new();
        let response = http
            .post(format!("{base}/session"))
            .json(&json!({"email": email, "password": PASSWORD}))
            .send()
            .await
            .unwrap();
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
            base,
            cookie,
            csrf: body["csrfToken"].as_str().unwrap().to_owned(),
            http,
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
    let wrong = http
        .post(format!("{base}/session"))
        .json(&json!({"email": "owner@acme.test", "password": "not the password"}))
        .send()
        .await
        .unwrap();
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
    let users = owner.ok(Method::GET, "/users", None).await;
    let member_id = users["users"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["email"] == "member@acme.test")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    owner
        .ok(
            Method::PATCH,
            &format!("/users/{member_id}"),
            Some(json!({"status": "disabled"})),
        )
        .await;
    assert_eq!(member.get("/overview").await.0, 401);
    // The last owner cannot be demoted.
    let own_id = users["users"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["email"] == "owner@acme.test")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
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

#[tokio::test]
async fn tenant_admins_see_only_their_tenant_and_members_cannot_manage() {
    let w = world().await;
    let a_owner = Person::sign_in(&w.stack, "owner@acme.test").await;
    let b_owner = Person::sign_in(&w.stack, "owner@globex.test").await;
    let member = Person::sign_in(&w.stack, "member@acme.test").await;
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

    // A member reads but never manages.
    for path in [
        "/overview",
        "/memory",
        "/graph",
        &format!("/memory/{memory}"),
        "/sessions",
    ] {
        assert_eq!(member.get(path).await.0, 200, "member reads {path}");
    }
    let refused: Vec<(Method, String, Option<Value>)> = vec![
        (Method::GET, "/keys".into(), None),
        (
            Method::POST,
            "/keys".into(),
            Some(json!({"name": "m", "permissions": ["read"]})),
        ),
        (Method::POST, format!("/keys/{a_key}/revoke"), None),
        (Method::GET, "/users".into(), None),
        (
            Method::POST,
            "/users".into(),
            Some(json!({"email": "x@acme.test", "role": "owner", "password": PASSWORD})),
        ),
        (Method::POST, "/groups".into(), Some(json!({"name": "m"}))),
        (
            Method::PATCH,
            format!("/memory/{memory}"),
            Some(json!({"importance": 0.1})),
        ),
        (Method::DELETE, format!("/memory/{memory}"), None),
        (Method::DELETE, format!("/sessions/{session}"), None),
        (Method::POST, format!("/sessions/{session}/reflect"), None),
        (Method::GET, "/memory/export".into(), None),
        (
            Method::POST,
            "/consolidation/run".into(),
            Some(json!({"dryRun": true})),
        ),
        (Method::GET, "/audit".into(), None),
        (
            Method::POST,
            "/tenants".into(),
            Some(json!({"name": "evil"})),
        ),
    ];
    for (method, path, body) in refused {
        let (status, answer) = member.call(method.clone(), &path, body).await;
        assert_eq!(status, 403, "{method} {path} as a member: {answer}");
        assert_eq!(answer["error"]["code"], "permission_denied");
    }
    // A tenant owner is not a platform admin.
    let (status, _) = a_owner
        .call(Method::POST, "/tenants", Some(json!({"name": "another"})))
        .await;
    assert_eq!(status, 403);
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
    let import = format!("{ndjson}{{\"content\": \"no topic or type\"}}\n");
    let upload = |body: String| {
        reqwest::Client::new()
            .post(format!(
                "http://{}/admin/api/memory/import?key={}",
                w.stack.http_addr, w.b.key_id
            ))
            .header("cookie", &b_owner.cookie)
            .header("x-csrf-token", &b_owner.csrf)
            .header("content-type", "application/x-ndjson")
            .body(body)
            .send()
    };
    let result: Value = upload(import.clone()).await.unwrap().json().await.unwrap();
    assert_eq!(result["imported"], 5, "{result}");
    assert_eq!(result["failed"], 1, "{result}");
    assert_eq!(result["results"][5]["line"], 6);
    assert_eq!(result["results"][5]["status"], "rejected");
    let again: Value = upload(import).await.unwrap().json().await.unwrap();
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
    {
        let db = w.stack.db.store().client().await.unwrap();
        let hash = mneme_core::password::hash(PASSWORD).unwrap();
        mneme_store::platform_admins::create(&db, "ops@mneme.test", &hash)
            .await
            .unwrap();
    }
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
