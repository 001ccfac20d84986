//! The OAuth flow as a connector drives it: discovery from a 401, client
//! registration (RFC 7591) or a client-ID metadata document, the sign-in and
//! consent page, the token endpoint with PKCE, MCP calls with the access
//! token, refresh-token rotation and reuse detection — and the refusals
//! that keep it safe.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use mneme_e2e_tests::{CapturedLogs, Stack};
use mneme_test_support::{ALL_PERMISSIONS, create_tenant};
use reqwest::redirect::Policy;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

const CALLBACK: &str = "http://127.0.0.1:9/callback";

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(Policy::none())
        .build()
        .unwrap()
}

/// What a connector learns from the 401 and the metadata documents.
struct Endpoints {
    authorize: String,
    token: String,
    register: String,
    revoke: String,
    resource: String,
}

async fn discover(stack: &Stack) -> Endpoints {
    let unauthorized = http()
        .post(stack.mcp_url())
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
        .send()
        .await
        .unwrap();
    assert_eq!(unauthorized.status(), 401);
    let challenge = unauthorized.headers()["www-authenticate"]
        .to_str()
        .unwrap()
        .to_owned();
    let metadata_url = challenge
        .split("resource_metadata=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("the challenge names the resource metadata");
    assert!(
        metadata_url.starts_with("http://"),
        "absolute: {metadata_url}"
    );
    assert!(challenge.contains("scope=\""), "{challenge}");
    let resource: Value = http()
        .get(metadata_url)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(resource["resource"], stack.mcp_url());
    let issuer = resource["authorization_servers"][0].as_str().unwrap();
    let server: Value = http()
        .get(format!("{issuer}/.well-known/oauth-authorization-server"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(server["code_challenge_methods_supported"], json!(["S256"]));
    assert_eq!(server["client_id_metadata_document_supported"], true);
    assert_eq!(
        server["authorization_response_iss_parameter_supported"],
        true
    );
    let jwks: Value = http()
        .get(server["jwks_uri"].as_str().unwrap())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(jwks["keys"][0]["alg"], "EdDSA");
    let endpoint = |name: &str| server[name].as_str().unwrap().to_owned();
    Endpoints {
        authorize: endpoint("authorization_endpoint"),
        token: endpoint("token_endpoint"),
        register: endpoint("registration_endpoint"),
        revoke: endpoint("revocation_endpoint"),
        resource: stack.mcp_url(),
    }
}

/// `POST /register` of the test connector; bound to `bearer`'s key when
/// one is given.
fn registration(endpoints: &Endpoints, bearer: Option<&str>) -> reqwest::RequestBuilder {
    let request = http().post(&endpoints.register).json(&json!({
        "client_name": "Test connector",
        "redirect_uris": [CALLBACK],
        "token_endpoint_auth_method": "none",
    }));
    match bearer {
        Some(key) => request.bearer_auth(key),
        None => request,
    }
}

async fn register(endpoints: &Endpoints, bearer: Option<&str>) -> String {
    let response = registration(endpoints, bearer).send().await.unwrap();
    assert_eq!(response.status(), 201);
    let body: Value = response.json().await.unwrap();
    body["client_id"].as_str().unwrap().to_owned()
}

fn pkce() -> (String, String) {
    let verifier = URL_SAFE_NO_PAD.encode(rand_bytes());
    let challenge = URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()));
    (verifier, challenge)
}

fn rand_bytes() -> [u8; 48] {
    let mut bytes = [0u8; 48];
    for (i, b) in uuid::Uuid::new_v4()
        .as_bytes()
        .iter()
        .chain(uuid::Uuid::new_v4().as_bytes())
        .chain(uuid::Uuid::new_v4().as_bytes())
        .enumerate()
    {
        bytes[i] = *b;
    }
    bytes
}

/// The sign-in page as a browser gets it: the form's hidden fields and the
/// cookie the form is bound to.
#[derive(Clone)]
struct Page {
    status: u16,
    html: String,
    fields: HashMap<String, String>,
    cookie: Option<String>,
    /// The browser's address as a proxy in front of mneme names it
    /// (`X-Forwarded-For`; mneme believes it with
    /// `MNEME_TRUSTED_PROXY_HOPS=1`). `None`: the test's own address.
    forwarded_for: Option<String>,
}

fn hidden_fields(html: &str) -> HashMap<String, String> {
    html.split("<input type=\"hidden\" ")
        .skip(1)
        .filter_map(|tag| {
            let name = tag.split("name=\"").nth(1)?.split('"').next()?;
            let value = tag.split("value=\"").nth(1)?.split('"').next()?;
            Some((
                name.to_owned(),
                value.replace("&amp;", "&").replace("&quot;", "\""),
            ))
        })
        .collect()
}

async fn open_page(
    endpoints: &Endpoints,
    client_id: &str,
    redirect_uri: &str,
    challenge: &str,
) -> Page {
    page_of(
        get_authorize(
            endpoints,
            &[
                ("response_type", "code"),
                ("client_id", client_id),
                ("redirect_uri", redirect_uri),
                ("code_challenge", challenge),
                ("code_challenge_method", "S256"),
                ("state", "xyz"),
                ("scope", "memory:read memory:write offline_access"),
                ("resource", &endpoints.resource),
                ("prompt", "consent"),
            ],
        )
        .await,
    )
    .await
}

/// `GET /authorize` with exactly `params`.
async fn get_authorize(endpoints: &Endpoints, params: &[(&str, &str)]) -> reqwest::Response {
    http()
        .get(&endpoints.authorize)
        .query(params)
        .send()
        .await
        .unwrap()
}

/// The page a browser shows for an answer of `/authorize`.
async fn page_of(response: reqwest::Response) -> Page {
    let status = response.status().as_u16();
    if status == 200 {
        let csp = response.headers()["content-security-policy"]
            .to_str()
            .unwrap();
        assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    }
    let cookie = response
        .headers()
        .get("set-cookie")
        .map(|c| c.to_str().unwrap().split(';').next().unwrap().to_owned());
    let html = response.text().await.unwrap();
    Page {
        status,
        fields: hidden_fields(&html),
        html,
        cookie,
        forwarded_for: None,
    }
}

/// The `error` an answer of `/authorize` redirects back to the client with.
fn redirected_error(response: &reqwest::Response) -> Option<String> {
    let location = reqwest::Url::parse(response.headers().get("location")?.to_str().ok()?).ok()?;
    query(&location, "error")
}

/// Submits the page; the `Location` of the answer, or the page shown again.
async fn submit(
    endpoints: &Endpoints,
    page: &Page,
    api_key: &str,
    decision: &str,
) -> Result<reqwest::Url, (u16, String)> {
    followed(
        post_page(
            endpoints,
            page,
            &[("api_key", api_key), ("decision", decision)],
        )
        .await,
    )
    .await
}

/// Posts the page's form (its hidden fields, `extra`, and its cookie when
/// the browser kept one).
async fn post_page(
    endpoints: &Endpoints,
    page: &Page,
    extra: &[(&str, &str)],
) -> reqwest::Response {
    let mut form = page.fields.clone();
    for (name, value) in extra {
        form.insert((*name).into(), (*value).into());
    }
    let mut request = http().post(&endpoints.authorize).form(&form);
    if let Some(cookie) = &page.cookie {
        request = request.header("cookie", cookie);
    }
    if let Some(address) = &page.forwarded_for {
        request = request.header("x-forwarded-for", address);
    }
    request.send().await.unwrap()
}

/// Where a form answer redirects the browser to, or the page it shows.
async fn followed(response: reqwest::Response) -> Result<reqwest::Url, (u16, String)> {
    if response.status().is_redirection() {
        let location = response.headers()["location"].to_str().unwrap();
        return Ok(reqwest::Url::parse(location).unwrap());
    }
    Err((response.status().as_u16(), response.text().await.unwrap()))
}

fn query(url: &reqwest::Url, name: &str) -> Option<String> {
    url.query_pairs()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

async fn token(endpoints: &Endpoints, form: &[(&str, &str)]) -> (u16, Value) {
    let response = http()
        .post(&endpoints.token)
        .form(form)
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

/// Redeems an authorization code with its PKCE verifier.
async fn redeem(
    endpoints: &Endpoints,
    code: &str,
    client_id: &str,
    verifier: &str,
) -> (u16, Value) {
    token(
        endpoints,
        &[
            ("grant_type", "authorization_code"),
            ("code", code),
            ("client_id", client_id),
            ("redirect_uri", CALLBACK),
            ("code_verifier", verifier),
        ],
    )
    .await
}

/// Runs sign-in and consent; the authorization code.
async fn authorize(
    endpoints: &Endpoints,
    client_id: &str,
    api_key: &str,
    challenge: &str,
) -> String {
    let page = open_page(endpoints, client_id, CALLBACK, challenge).await;
    assert_eq!(page.status, 200, "{}", page.html);
    assert!(page.html.contains("Test connector") || page.html.contains("127.0.0.1"));
    let location = submit(endpoints, &page, api_key, "allow")
        .await
        .expect("a redirect to the client");
    assert_eq!(location.as_str().split('?').next().unwrap(), CALLBACK);
    assert_eq!(query(&location, "state").as_deref(), Some("xyz"));
    assert!(query(&location, "iss").is_some(), "RFC 9207 iss");
    query(&location, "code").expect("a code")
}

/// Signs in with `api_key` and redeems the code: the token answer.
async fn tokens_for(endpoints: &Endpoints, client_id: &str, api_key: &str) -> Value {
    let (verifier, challenge) = pkce();
    let code = authorize(endpoints, client_id, api_key, &challenge).await;
    let (status, tokens) = redeem(endpoints, &code, client_id, &verifier).await;
    assert_eq!(status, 200, "{tokens}");
    tokens
}

/// Presents `refresh_token` at the token endpoint as `client_id`.
async fn refresh(endpoints: &Endpoints, client_id: &str, refresh_token: &str) -> (u16, Value) {
    token(
        endpoints,
        &[
            ("grant_type", "refresh_token"),
            ("refresh_token", refresh_token),
            ("client_id", client_id),
        ],
    )
    .await
}

/// Asks `/revoke` to revoke `token` as `client_id`: the status and the
/// JSON answer (`null` when empty).
async fn revoke(endpoints: &Endpoints, client_id: &str, token: &str) -> (u16, Value) {
    let response = http()
        .post(&endpoints.revoke)
        .form(&[("token", token), ("client_id", client_id)])
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let body = response.text().await.unwrap();
    (status, serde_json::from_str(&body).unwrap_or(Value::Null))
}

/// Refresh rotates `refresh_token` (a new refresh token, a working access
/// token); presenting the replaced token again is refused and revokes the
/// whole family, the rotated token too. The rotated tokens.
async fn rotate_then_reuse(
    stack: &Stack,
    endpoints: &Endpoints,
    client_id: &str,
    refresh_token: &str,
) -> Value {
    let (status, rotated) = refresh(endpoints, client_id, refresh_token).await;
    assert_eq!(status, 200, "{rotated}");
    let second = rotated["refresh_token"].as_str().unwrap();
    assert_ne!(second, refresh_token);
    let access = rotated["access_token"].as_str().unwrap().to_owned();
    assert_eq!(recall_status(stack, access).await, 200);
    let (status, reused) = refresh(endpoints, client_id, refresh_token).await;
    assert_eq!(
        (status, reused["error"].as_str()),
        (400, Some("invalid_grant")),
        "{reused}"
    );
    let (status, revoked) = refresh(endpoints, client_id, second).await;
    assert_eq!(
        (status, revoked["error_description"].as_str()),
        (400, Some("the refresh token was revoked")),
        "the whole family is revoked: {revoked}"
    );
    rotated
}

#[tokio::test]
async fn a_connector_registers_signs_in_calls_tools_and_refreshes_and_a_reused_refresh_token_revokes_the_family()
 {
    let logs = CapturedLogs::start();
    let stack = Stack::start("hash", &[("MNEME_AUTH_CACHE_SECS", "0")]).await;
    let acme = create_tenant(&stack.db.store(), "acme", ALL_PERMISSIONS).await;
    let endpoints = discover(&stack).await;
    let client_id = register(&endpoints, None).await;
    let (verifier, challenge) = pkce();
    let wasted_code = authorize(&endpoints, &client_id, &acme.api_key, &challenge).await;

    // A wrong verifier does not redeem the code, and…
    let (status, body) = token(
        &endpoints,
        &[
            ("grant_type", "authorization_code"),
            ("code", &wasted_code),
            ("client_id", &client_id),
            ("redirect_uri", CALLBACK),
            (
                "code_verifier",
                "a-wrong-verifier-that-is-long-enough-to-pass-the-length-check",
            ),
        ],
    )
    .await;
    assert_eq!(
        (status, body["error"].as_str()),
        (400, Some("invalid_grant"))
    );
    // …codes work once: the failed attempt used it up.
    let (status, _) = redeem(&endpoints, &wasted_code, &client_id, &verifier).await;
    assert_eq!(status, 400, "a code is single-use");

    let code = authorize(&endpoints, &client_id, &acme.api_key, &challenge).await;
    let (status, tokens) = token(
        &endpoints,
        &[
            ("grant_type", "authorization_code"),
            ("code", &code),
            ("client_id", &client_id),
            ("redirect_uri", CALLBACK),
            ("code_verifier", &verifier),
            ("resource", &endpoints.resource),
        ],
    )
    .await;
    assert_eq!(status, 200, "{tokens}");
    assert_eq!(tokens["token_type"], "Bearer");
    assert_eq!(tokens["scope"], "memory:read memory:write");
    let access = tokens["access_token"].as_str().unwrap();

    // The access token works like the key it acts as.
    let mcp = stack.mcp(access).await;
    let id = mcp
        .remember_new("The connector stored this through OAuth.", "oauth", "fact")
        .await;
    let recalled = mcp
        .ok("recall", json!({"text": "stored through OAuth"}))
        .await;
    assert_eq!(mneme_e2e_tests::fragment_ids(&recalled)[0], id);

    // Refresh rotates; presenting a replaced token revokes the family.
    let first_refresh = tokens["refresh_token"].as_str().unwrap();
    let rotated = rotate_then_reuse(&stack, &endpoints, &client_id, first_refresh).await;
    let second_refresh = rotated["refresh_token"].as_str().unwrap();

    // An unknown client must register again.
    let (status, body) = refresh(&endpoints, "nobody", second_refresh).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (401, Some("invalid_client"))
    );

    // Revoking the key stops its tokens at once.
    let mut db = stack.db.store().client().await.unwrap();
    let tx = mneme_store::TenantTx::begin(&mut db, acme.tenant_id)
        .await
        .unwrap();
    assert!(
        mneme_store::api_keys::revoke(&tx, acme.key_id)
            .await
            .unwrap()
    );
    tx.commit().await.unwrap();
    let refused = http()
        .post(stack.mcp_url())
        .bearer_auth(rotated["access_token"].as_str().unwrap())
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);

    // Nothing that grants access was logged, at debug level, refusals
    // included.
    logs.assert_free_of(&[
        ("API key typed into the page", &acme.api_key),
        ("used-up authorization code", &wasted_code),
        ("authorization code", &code),
        ("PKCE verifier", &verifier),
        ("access token", access),
        ("refresh token", first_refresh),
        ("rotated refresh token", second_refresh),
        (
            "rotated access token",
            rotated["access_token"].as_str().unwrap(),
        ),
    ]);
}

#[tokio::test]
async fn the_page_refuses_unknown_redirects_foreign_keys_forged_forms_and_denials_go_back_to_the_client()
 {
    let stack = Stack::start("hash", &[]).await;
    let store = stack.db.store();
    let acme = create_tenant(&store, "acme", ALL_PERMISSIONS).await;
    let globex = create_tenant(&store, "globex", ALL_PERMISSIONS).await;
    let endpoints = discover(&stack).await;
    let (_, challenge) = pkce();

    // A redirect URI the client never registered: shown, never followed.
    let client_id = register(&endpoints, None).await;
    let page = open_page(
        &endpoints,
        &client_id,
        "https://evil.example/steal",
        &challenge,
    )
    .await;
    assert_eq!(page.status, 400);
    assert!(page.fields.is_empty());

    // An unknown client.
    let page = open_page(&endpoints, "not-registered", CALLBACK, &challenge).await;
    assert_eq!(page.status, 400);

    // A client bound to acme's key cannot be used with globex's.
    let bound = register(&endpoints, Some(&acme.api_key)).await;
    let page = open_page(&endpoints, &bound, CALLBACK, &challenge).await;
    let (status, html) = submit(&endpoints, &page, &globex.api_key, "allow")
        .await
        .unwrap_err();
    assert_eq!(status, 200);
    assert!(html.contains("another API key"), "{html}");

    // A form without its cookie (a cross-site submission) is refused.
    let page = open_page(&endpoints, &client_id, CALLBACK, &challenge).await;
    let forged = Page {
        cookie: None,
        ..page
    };
    let (status, _) = submit(&endpoints, &forged, &acme.api_key, "allow")
        .await
        .unwrap_err();
    assert_eq!(status, 403);

    // A wrong key is shown again; a denial returns access_denied.
    let page = open_page(&endpoints, &client_id, CALLBACK, &challenge).await;
    let (_, html) = submit(
        &endpoints,
        &page,
        "mn_wrongkeywrong_wrongwrongwrongwrongwrongwrong",
        "allow",
    )
    .await
    .unwrap_err();
    assert!(html.contains("not valid"), "{html}");
    let denied = submit(&endpoints, &page, "", "deny").await.unwrap();
    assert_eq!(query(&denied, "error").as_deref(), Some("access_denied"));

    // PKCE is required, and the resource must be this server.
    let without_pkce = get_authorize(
        &endpoints,
        &[
            ("response_type", "code"),
            ("client_id", &client_id),
            ("redirect_uri", CALLBACK),
        ],
    )
    .await;
    assert_eq!(
        redirected_error(&without_pkce).as_deref(),
        Some("invalid_request")
    );
    let other_resource = get_authorize(
        &endpoints,
        &[
            ("response_type", "code"),
            ("client_id", &client_id),
            ("redirect_uri", CALLBACK),
            ("code_challenge", &challenge),
            ("code_challenge_method", "S256"),
            ("resource", "https://other.example/mcp"),
        ],
    )
    .await;
    assert_eq!(
        redirected_error(&other_resource).as_deref(),
        Some("invalid_target")
    );
    let no_resource = get_authorize(
        &endpoints,
        &[
            ("response_type", "code"),
            ("client_id", &client_id),
            ("redirect_uri", CALLBACK),
            ("code_challenge", &challenge),
            ("code_challenge_method", "S256"),
        ],
    )
    .await;
    assert_eq!(
        redirected_error(&no_resource).as_deref(),
        Some("invalid_target")
    );
}

/// The test's own web server of client metadata documents, on loopback.
/// It counts the requests of every path and serves `/client.json` (a valid
/// document), `/moved.json` (a redirect to `/moved-target.json`, a valid
/// document for `/moved.json`'s URL) and `/big.json` (a valid document of
/// more than 5 KB).
struct DocumentServer {
    addr: std::net::SocketAddr,
    hits: Arc<Mutex<HashMap<String, usize>>>,
}

impl DocumentServer {
    async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let hits: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
        let counted = hits.clone();
        let app = axum::Router::new().fallback(move |uri: axum::http::Uri| {
            *counted
                .lock()
                .unwrap()
                .entry(uri.path().to_owned())
                .or_default() += 1;
            async move { serve_document(addr, uri.path()) }
        });
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self { addr, hits }
    }

    /// The URL (the client_id) of the document at `path`.
    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// How many requests asked for `path`.
    fn hits(&self, path: &str) -> usize {
        self.hits.lock().unwrap().get(path).copied().unwrap_or(0)
    }

    /// How many requests the server answered.
    fn total_hits(&self) -> usize {
        self.hits.lock().unwrap().values().sum()
    }
}

fn serve_document(addr: std::net::SocketAddr, path: &str) -> axum::response::Response {
    use axum::response::IntoResponse;
    let document = |client_path: &str| {
        json!({
            "client_id": format!("http://{addr}{client_path}"),
            "client_name": "Metadata document client",
            "redirect_uris": [CALLBACK],
            "token_endpoint_auth_method": "none",
        })
    };
    match path {
        "/client.json" => axum::Json(document(path)).into_response(),
        "/moved.json" => axum::response::Redirect::temporary("/moved-target.json").into_response(),
        "/moved-target.json" => axum::Json(document("/moved.json")).into_response(),
        "/big.json" => {
            let mut big = document(path);
            big["padding"] = json!("x".repeat(6 * 1024));
            axum::Json(big).into_response()
        }
        _ => axum::http::StatusCode::NOT_FOUND.into_response(),
    }
}

#[tokio::test]
async fn a_client_id_metadata_document_client_signs_in_refreshes_and_reuse_revokes_the_family_with_the_document_fetched_once()
 {
    let documents = DocumentServer::start().await;
    let client_id = documents.url("/client.json");
    // The allowance lets mneme fetch the test's loopback document.
    let stack = Stack::start("hash", &[("MNEME_OUTBOUND_ALLOW_PRIVATE", "true")]).await;
    let acme = create_tenant(&stack.db.store(), "acme", ALL_PERMISSIONS).await;
    let endpoints = discover(&stack).await;
    let (verifier, challenge) = pkce();
    let page = open_page(&endpoints, &client_id, CALLBACK, &challenge).await;
    assert_eq!(page.status, 200, "{}", page.html);
    assert!(page.html.contains("Metadata document client"));
    let location = submit(&endpoints, &page, &acme.api_key, "allow")
        .await
        .unwrap();
    let code = query(&location, "code").unwrap();
    let (status, tokens) = redeem(&endpoints, &code, &client_id, &verifier).await;
    assert_eq!(status, 200, "{tokens}");
    let mcp = stack.mcp(tokens["access_token"].as_str().unwrap()).await;
    mcp.ok("recall", json!({"text": "anything"})).await;

    // Refresh rotates; presenting a replaced token revokes the family.
    let refresh_token = tokens["refresh_token"].as_str().unwrap();
    rotate_then_reuse(&stack, &endpoints, &client_id, refresh_token).await;

    // A second authorization of the same client signs in afresh, with the
    // document from the cache: fetched once for both, their tokens and
    // the refreshes.
    let tokens = tokens_for(&endpoints, &client_id, &acme.api_key).await;
    let (status, _) = refresh(
        &endpoints,
        &client_id,
        tokens["refresh_token"].as_str().unwrap(),
    )
    .await;
    assert_eq!(status, 200, "a new family after the revoked one");
    assert_eq!(documents.hits("/client.json"), 1, "cached");
}

#[tokio::test]
async fn client_id_metadata_documents_that_redirect_or_exceed_5_kb_are_refused() {
    let documents = DocumentServer::start().await;
    let stack = Stack::start("hash", &[("MNEME_OUTBOUND_ALLOW_PRIVATE", "true")]).await;
    let endpoints = discover(&stack).await;
    let (_, challenge) = pkce();
    let refusal = |path: &str| {
        let client_id = documents.url(path);
        let endpoints = &endpoints;
        let challenge = &challenge;
        async move {
            let page = open_page(endpoints, &client_id, CALLBACK, challenge).await;
            assert_eq!(page.status, 400, "{}", page.html);
            assert!(page.fields.is_empty(), "no form: {}", page.html);
            page.html
        }
    };

    // A redirect is not followed, even to a valid document for the client.
    let html = refusal("/moved.json").await;
    assert!(
        html.contains("client metadata document answered 307"),
        "{html}"
    );
    assert_eq!(documents.hits("/moved.json"), 1);
    assert_eq!(documents.hits("/moved-target.json"), 0, "not followed");

    let html = refusal("/big.json").await;
    assert!(html.contains("larger than 5 KB"), "{html}");
    assert_eq!(documents.hits("/big.json"), 1);
}

#[tokio::test]
async fn without_the_allowance_client_id_metadata_documents_must_be_https_and_on_public_addresses()
{
    let documents = DocumentServer::start().await;
    let stack = Stack::start("hash", &[]).await;
    let endpoints = discover(&stack).await;
    let (_, challenge) = pkce();
    let port = documents.addr.port();
    for (client_id, reason) in [
        (
            documents.url("/client.json"),
            "a client metadata document must be served over https",
        ),
        // https, so only the address rule can refuse these.
        (
            format!("https://127.0.0.1:{port}/client.json"),
            "client metadata host resolves to a non-public address",
        ),
        (
            format!("https://localhost:{port}/client.json"),
            "client metadata host resolves to a non-public address",
        ),
    ] {
        let page = open_page(&endpoints, &client_id, CALLBACK, &challenge).await;
        assert_eq!(page.status, 400, "{client_id}: {}", page.html);
        assert!(page.html.contains(reason), "{client_id}: {}", page.html);
    }
    assert_eq!(documents.total_hits(), 0, "nothing was fetched");
}

/// Creates a person in `tenant` with `role` and a known password.
async fn create_user(
    stack: &Stack,
    tenant_id: uuid::Uuid,
    email: &str,
    role: mneme_store::users::Role,
) -> &'static str {
    const PASSWORD: &str = "a long enough password";
    mneme_test_support::create_user(&stack.db.store(), tenant_id, email, role, PASSWORD).await;
    PASSWORD
}

/// Submits the sign-in step with email and password; the next page.
async fn sign_in(endpoints: &Endpoints, page: &Page, email: &str, password: &str) -> Page {
    let extra = [
        ("email", email),
        ("password", password),
        ("decision", "allow"),
    ];
    let response = post_page(endpoints, page, &extra).await;
    let status = response.status().as_u16();
    let html = response.text().await.unwrap();
    Page {
        status,
        fields: hidden_fields(&html),
        html,
        cookie: page.cookie.clone(),
        forwarded_for: page.forwarded_for.clone(),
    }
}

/// Picks `key` (an id, or `new`) on the key-choice page.
async fn choose(
    endpoints: &Endpoints,
    page: &Page,
    key: &str,
) -> Result<reqwest::Url, (u16, String)> {
    followed(post_page(endpoints, page, &[("key", key), ("decision", "allow")]).await).await
}

#[tokio::test]
async fn people_sign_in_with_a_password_and_pick_the_key_the_connector_acts_as() {
    use mneme_store::users::Role;
    // Failed sign-ins are counted per fixed window: an hour-long one keeps
    // the eleven guesses below in one window even on a loaded machine (with
    // a minute, a boundary fell between them once in CI).
    let logs = CapturedLogs::start();
    let stack = Stack::start("hash", &[("MNEME_RATE_LIMIT_WINDOW_SECS", "3600")]).await;
    let store = stack.db.store();
    let acme = create_tenant(&store, "acme", ALL_PERMISSIONS).await;
    let globex = create_tenant(&store, "globex", ALL_PERMISSIONS).await;
    let owner_password =
        create_user(&stack, acme.tenant_id, "Owner@Acme.example", Role::Owner).await;
    let member_password =
        create_user(&stack, acme.tenant_id, "member@acme.example", Role::Member).await;
    let endpoints = discover(&stack).await;
    let client_id = register(&endpoints, None).await;
    let (verifier, challenge) = pkce();

    // A wrong password shows the page again, naming no account.
    let page = open_page(&endpoints, &client_id, CALLBACK, &challenge).await;
    let wrong = sign_in(
        &endpoints,
        &page,
        "owner@acme.example",
        "not the password at all",
    )
    .await;
    assert_eq!(wrong.status, 200);
    assert!(wrong.html.contains("do not match"), "{}", wrong.html);

    // The owner sees the tenant's keys and may pick one (emails are matched
    // without regard to case).
    let choice = sign_in(&endpoints, &page, "OWNER@acme.example", owner_password).await;
    assert!(
        choice.html.contains(&acme.key_id.to_string()),
        "{}",
        choice.html
    );
    assert!(choice.fields.contains_key("ticket"));
    // A key of another tenant is not among the choices, and picking its id
    // anyway fails.
    let (_, html) = choose(&endpoints, &choice, &globex.key_id.to_string())
        .await
        .unwrap_err();
    assert!(html.contains("does not exist"), "{html}");
    let location = choose(&endpoints, &choice, &acme.key_id.to_string())
        .await
        .unwrap();
    let code = query(&location, "code").unwrap();
    let (status, tokens) = redeem(&endpoints, &code, &client_id, &verifier).await;
    assert_eq!(status, 200, "{tokens}");
    stack
        .mcp(tokens["access_token"].as_str().unwrap())
        .await
        .ok("recall", json!({"text": "x"}))
        .await;

    // A member cannot pick existing keys: the connector gets a key of its own.
    let page = open_page(&endpoints, &client_id, CALLBACK, &challenge).await;
    let choice = sign_in(&endpoints, &page, "member@acme.example", member_password).await;
    assert!(!choice.html.contains(&acme.key_id.to_string()));
    let (_, html) = choose(&endpoints, &choice, &acme.key_id.to_string())
        .await
        .unwrap_err();
    assert!(html.contains("Only owners and admins"), "{html}");
    let location = choose(&endpoints, &choice, "new").await.unwrap();
    let code = query(&location, "code").unwrap();
    let (status, tokens) = redeem(&endpoints, &code, &client_id, &verifier).await;
    assert_eq!(status, 200, "{tokens}");
    let connector_keys = stack
        .db
        .count_rows(
            acme.tenant_id,
            "api_keys",
            "name LIKE 'connector: Test connector%'",
        )
        .await;
    assert_eq!(connector_keys, 1);
    let mcp = stack.mcp(tokens["access_token"].as_str().unwrap()).await;
    mcp.remember_new(
        "A member's connector writes with its own key.",
        "oauth",
        "fact",
    )
    .await;

    // Guessing one account's password is cut off after ten failures.
    let page = open_page(&endpoints, &client_id, CALLBACK, &challenge).await;
    let mut statuses = Vec::new();
    for _ in 0..11 {
        statuses.push(
            sign_in(
                &endpoints,
                &page,
                "member@acme.example",
                "a wrong guess, again",
            )
            .await
            .status,
        );
    }
    assert_eq!(statuses.last(), Some(&429), "{statuses:?}");

    // Neither the passwords nor the guesses were logged, at debug level.
    logs.assert_free_of(&[
        ("owner's password", owner_password),
        ("member's password", member_password),
        ("wrong password", "not the password at all"),
        ("guessed password", "a wrong guess, again"),
        (
            "member connector's access token",
            tokens["access_token"].as_str().unwrap(),
        ),
        (
            "member connector's refresh token",
            tokens["refresh_token"].as_str().unwrap(),
        ),
    ]);
}

#[tokio::test]
async fn a_narrow_scope_asks_for_step_up_and_tokens_for_another_resource_are_refused() {
    const INTERNAL: &str = "a-shared-internal-token-of-at-least-32-characters";
    let stack = Stack::start("hash", &[("MNEME_INTERNAL_TOKEN", INTERNAL)]).await;
    let acme = create_tenant(&stack.db.store(), "acme", ALL_PERMISSIONS).await;
    let endpoints = discover(&stack).await;
    let client_id = register(&endpoints, None).await;
    let (verifier, challenge) = pkce();

    // Read-only scope on a read-write key.
    let page = page_of(
        get_authorize(
            &endpoints,
            &[
                ("response_type", "code"),
                ("client_id", &client_id),
                ("redirect_uri", CALLBACK),
                ("code_challenge", &challenge),
                ("code_challenge_method", "S256"),
                ("scope", "memory:read"),
                ("resource", &endpoints.resource),
            ],
        )
        .await,
    )
    .await;
    let location = submit(&endpoints, &page, &acme.api_key, "allow")
        .await
        .unwrap();
    let code = query(&location, "code").unwrap();
    let (status, tokens) = redeem(&endpoints, &code, &client_id, &verifier).await;
    assert_eq!(
        (status, tokens["scope"].as_str()),
        (200, Some("memory:read")),
        "{tokens}"
    );
    let access = tokens["access_token"].as_str().unwrap().to_owned();

    let call = |tool: &str, body: Value| {
        http()
            .post(format!("http://{}/v1/tools/{tool}", stack.http_addr))
            .bearer_auth(&access)
            .json(&body)
            .send()
    };
    let read = call("recall", json!({"text": "anything"})).await.unwrap();
    assert_eq!(read.status(), 200);
    let write = call(
        "remember",
        json!({"content": "Step-up is needed to write.", "topic": "t", "type": "fact"}),
    )
    .await
    .unwrap();
    assert_eq!(write.status(), 403);
    let challenge = write.headers()["www-authenticate"].to_str().unwrap();
    assert!(
        challenge.contains(r#"error="insufficient_scope""#),
        "{challenge}"
    );
    assert!(challenge.contains(r#"scope="memory:write""#), "{challenge}");

    // The same token at another mneme (another resource, another signing
    // key or audience) is refused.
    let elsewhere = Stack::start("hash", &[("MNEME_INTERNAL_TOKEN", INTERNAL)]).await;
    let refused = http()
        .post(format!("http://{}/v1/tools/recall", elsewhere.http_addr))
        .bearer_auth(&access)
        .json(&json!({"text": "anything"}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);
    assert!(
        refused.headers()["www-authenticate"]
            .to_str()
            .unwrap()
            .contains("invalid_token")
    );
}

#[tokio::test]
async fn mneme_login_signs_the_cli_in_stores_its_tokens_privately_and_refreshes_them() {
    let stack = Stack::start("hash", &[]).await;
    let acme = create_tenant(&stack.db.store(), "acme", ALL_PERMISSIONS).await;
    let api_key = acme.api_key.clone();
    // The person in the browser: signs in with an API key and allows; the
    // browser then follows the redirect to the CLI's loopback listener.
    let opener: mneme::login::Opener = Box::new(move |url| {
        Box::pin(async move {
            let page = http().get(&url).send().await.unwrap();
            let cookie = page.headers()["set-cookie"]
                .to_str()
                .unwrap()
                .split(';')
                .next()
                .unwrap()
                .to_owned();
            let html = page.text().await.unwrap();
            let mut form = hidden_fields(&html);
            form.insert("api_key".into(), api_key);
            form.insert("decision".into(), "allow".into());
            let answer = http()
                .post(url.split('?').next().unwrap())
                .header("cookie", cookie)
                .form(&form)
                .send()
                .await
                .unwrap();
            let callback = answer.headers()["location"].to_str().unwrap().to_owned();
            assert!(callback.starts_with("http://127.0.0.1:"), "{callback}");
            let done = http().get(&callback).send().await.unwrap();
            assert_eq!(done.status(), 200);
        })
    });
    let credentials = mneme::login::login(&stack.mcp_url(), opener).await.unwrap();
    assert!(credentials.refresh_token.is_some());

    let dir = std::env::temp_dir().join(format!("mneme-login-{}", uuid::Uuid::new_v4().simple()));
    let path = dir.join("credentials.json");
    mneme::login::save(&credentials, &path).unwrap();
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "only the user may read stored tokens");

    // A fresh token is handed out as stored…
    let token = mneme::login::bearer(&path).await.unwrap();
    assert_eq!(token, credentials.access_token);
    stack
        .mcp(&token)
        .await
        .ok("recall", json!({"text": "anything"}))
        .await;
    // …one about to expire is refreshed first, and the rotated tokens stored.
    let mut expiring = credentials.clone();
    expiring.expires_at = chrono::Utc::now().timestamp();
    mneme::login::save(&expiring, &path).unwrap();
    let refreshed = mneme::login::bearer(&path).await.unwrap();
    assert_ne!(refreshed, credentials.access_token);
    let stored = mneme::login::load(&path).unwrap();
    assert_eq!(stored.access_token, refreshed);
    assert_ne!(stored.refresh_token, credentials.refresh_token, "rotated");
    stack
        .mcp(&refreshed)
        .await
        .ok("recall", json!({"text": "anything"}))
        .await;
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test]
async fn a_revoked_key_stops_its_tokens_and_itself_at_once_despite_the_credential_cache() {
    // An hour-long cache: only the revocation announcement can stop the key.
    let stack = Stack::start("hash", &[("MNEME_AUTH_CACHE_SECS", "3600")]).await;
    let acme = create_tenant(&stack.db.store(), "acme", ALL_PERMISSIONS).await;
    let recall = |credential: String| recall_status(&stack, credential);
    assert_eq!(
        recall(acme.api_key.clone()).await,
        200,
        "the key is now cached"
    );
    let endpoints = discover(&stack).await;
    let client_id = register(&endpoints, None).await;
    let (verifier, challenge) = pkce();
    let code = authorize(&endpoints, &client_id, &acme.api_key, &challenge).await;
    let (_, tokens) = redeem(&endpoints, &code, &client_id, &verifier).await;
    let access = tokens["access_token"].as_str().unwrap().to_owned();
    assert_eq!(
        recall(access.clone()).await,
        200,
        "the token's key is now cached"
    );

    let config = operator_config(&stack);
    mneme::admin::keys(
        &config,
        mneme::KeysCommand::Revoke {
            tenant: "acme".into(),
            id: acme.key_id.to_string(),
        },
    )
    .await
    .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    for credential in [acme.api_key.clone(), access] {
        while recall(credential.clone()).await != 401 {
            assert!(
                std::time::Instant::now() < deadline,
                "a revoked key's credential still works"
            );
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }
}

#[tokio::test]
async fn suspending_a_tenant_stops_its_keys_at_once_and_resuming_restores_them() {
    let stack = Stack::start("hash", &[("MNEME_AUTH_CACHE_SECS", "3600")]).await;
    let acme = create_tenant(&stack.db.store(), "acme", ALL_PERMISSIONS).await;
    let status = || recall_status(&stack, acme.api_key.clone());
    assert_eq!(status().await, 200, "the key is now cached");
    let config = operator_config(&stack);
    let tenants = |command| mneme::admin::tenants(&config, command);
    tenants(mneme::TenantsCommand::Suspend {
        name: "acme".into(),
    })
    .await
    .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while status().await != 401 {
        assert!(
            std::time::Instant::now() < deadline,
            "a suspended tenant's key still works"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    tenants(mneme::TenantsCommand::Resume {
        name: "acme".into(),
    })
    .await
    .unwrap();
    assert_eq!(status().await, 200, "resumed");
}

/// The configuration an operator's `mneme` command would run with against
/// `stack`.
fn operator_config(stack: &Stack) -> mneme_config::Config {
    let env: HashMap<String, String> = HashMap::from([
        ("MNEME_DATABASE_URL".into(), stack.db.app_url.clone()),
        ("MNEME_REDIS_URL".into(), stack.redis.url.clone()),
        ("MNEME_REDIS_PREFIX".into(), stack.redis.prefix.clone()),
    ]);
    mneme_config::Config::from_env(&env).unwrap()
}

/// The HTTP status of a `recall` through the REST facade with `credential`.
async fn recall_status(stack: &Stack, credential: String) -> u16 {
    http()
        .post(format!("http://{}/v1/tools/recall", stack.http_addr))
        .bearer_auth(credential)
        .json(&json!({"text": "anything"}))
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[tokio::test]
async fn an_expired_access_token_is_refused_and_a_refresh_brings_a_working_one() {
    let stack = Stack::start(
        "hash",
        &[
            ("MNEME_OAUTH_ACCESS_TOKEN_TTL_SECS", "1"),
            ("MNEME_OAUTH_CLOCK_SKEW_SECS", "0"),
        ],
    )
    .await;
    let acme = create_tenant(&stack.db.store(), "acme", ALL_PERMISSIONS).await;
    let endpoints = discover(&stack).await;
    let client_id = register(&endpoints, None).await;
    let (verifier, challenge) = pkce();
    let code = authorize(&endpoints, &client_id, &acme.api_key, &challenge).await;
    let (status, tokens) = redeem(&endpoints, &code, &client_id, &verifier).await;
    assert_eq!(status, 200, "{tokens}");
    assert_eq!(tokens["expires_in"], 1, "{tokens}");
    let recall = |access: String| {
        let url = format!("http://{}/v1/tools/recall", stack.http_addr);
        async move {
            http()
                .post(url)
                .bearer_auth(access)
                .json(&json!({"text": "anything"}))
                .send()
                .await
                .unwrap()
        }
    };
    let access = tokens["access_token"].as_str().unwrap().to_owned();
    assert_eq!(recall(access.clone()).await.status(), 200);

    // JWT expiry has one-second resolution: two seconds are past it.
    tokio::time::sleep(std::time::Duration::from_millis(2100)).await;
    let expired = recall(access).await;
    assert_eq!(expired.status(), 401);
    let challenge = expired.headers()["www-authenticate"].to_str().unwrap();
    assert!(
        challenge.contains(r#"error="invalid_token""#),
        "{challenge}"
    );
    assert!(challenge.contains("resource_metadata="), "{challenge}");

    let (status, refreshed) = refresh(
        &endpoints,
        &client_id,
        tokens["refresh_token"].as_str().unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{refreshed}");
    let fresh = refreshed["access_token"].as_str().unwrap().to_owned();
    assert_eq!(recall(fresh).await.status(), 200);
}

#[tokio::test]
async fn a_code_redeemed_with_another_or_no_redirect_uri_is_refused_and_used_up() {
    let stack = Stack::start("hash", &[]).await;
    let acme = create_tenant(&stack.db.store(), "acme", ALL_PERMISSIONS).await;
    let endpoints = discover(&stack).await;
    let client_id = register(&endpoints, None).await;
    let (verifier, challenge) = pkce();
    // A loopback URI: one the client may use, so only the exact match with
    // the authorization request's can refuse it.
    for redirect_uri in ["http://127.0.0.1:9/elsewhere", ""] {
        let code = authorize(&endpoints, &client_id, &acme.api_key, &challenge).await;
        let (status, body) = token(
            &endpoints,
            &[
                ("grant_type", "authorization_code"),
                ("code", &code),
                ("client_id", &client_id),
                ("redirect_uri", redirect_uri),
                ("code_verifier", &verifier),
            ],
        )
        .await;
        assert_eq!(
            (status, body["error"].as_str()),
            (400, Some("invalid_grant")),
            "{redirect_uri:?}: {body}"
        );
        assert_eq!(
            body["error_description"], "redirect_uri differs from the authorization request's",
            "{redirect_uri:?}: {body}"
        );
        let (status, body) = redeem(&endpoints, &code, &client_id, &verifier).await;
        assert_eq!(
            (status, body["error"].as_str()),
            (400, Some("invalid_grant")),
            "the refused redemption used the code up: {body}"
        );
    }
}

#[tokio::test]
async fn revoking_a_refresh_token_ends_its_family_only_and_revoking_an_access_token_is_accepted() {
    let stack = Stack::start("hash", &[]).await;
    let acme = create_tenant(&stack.db.store(), "acme", ALL_PERMISSIONS).await;
    let endpoints = discover(&stack).await;
    let client_id = register(&endpoints, None).await;
    let other_client = register(&endpoints, None).await;
    let family = tokens_for(&endpoints, &client_id, &acme.api_key).await;
    let another_family = tokens_for(&endpoints, &client_id, &acme.api_key).await;
    let (status, rotated) = refresh(
        &endpoints,
        &client_id,
        family["refresh_token"].as_str().unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{rotated}");
    let replaced = rotated["refresh_token"].as_str().unwrap();

    // Another client cannot revoke the token: it is told nothing (200, RFC
    // 7009 §2.2) and the token still refreshes.
    assert_eq!(
        revoke(&endpoints, &other_client, replaced).await,
        (200, Value::Null)
    );
    let (status, rotated) = refresh(&endpoints, &client_id, replaced).await;
    assert_eq!(status, 200, "{rotated}");
    let current = rotated["refresh_token"].as_str().unwrap();

    // Its own client revokes it: the token no longer refreshes, nor does
    // the family's replaced token (revoked with it, not merely reused).
    assert_eq!(
        revoke(&endpoints, &client_id, current).await,
        (200, Value::Null)
    );
    for presented in [current, replaced] {
        let (status, body) = refresh(&endpoints, &client_id, presented).await;
        assert_eq!(
            (
                status,
                body["error"].as_str(),
                body["error_description"].as_str()
            ),
            (
                400,
                Some("invalid_grant"),
                Some("the refresh token was revoked")
            ),
            "{body}"
        );
    }

    // An access token is accepted (200) but not revoked: access tokens are
    // not stored and end with their short lifetime. Its family stays
    // usable, like any other family of the client.
    let access = another_family["access_token"].as_str().unwrap();
    assert_eq!(
        revoke(&endpoints, &client_id, access).await,
        (200, Value::Null)
    );
    assert_eq!(recall_status(&stack, access.to_owned()).await, 200);
    let (status, body) = refresh(
        &endpoints,
        &client_id,
        another_family["refresh_token"].as_str().unwrap(),
    )
    .await;
    assert_eq!(status, 200, "another family is untouched: {body}");

    // Unknown tokens are accepted; unknown clients must register again.
    assert_eq!(
        revoke(&endpoints, &client_id, "no-such-token").await,
        (200, Value::Null)
    );
    let (status, body) = revoke(&endpoints, "nobody", access).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (401, Some("invalid_client"))
    );
}

#[tokio::test]
async fn registration_is_limited_per_address() {
    let stack = Stack::start(
        "hash",
        &[
            ("MNEME_RATE_LIMIT_REGISTER_IP", "3"),
            ("MNEME_RATE_LIMIT_WINDOW_SECS", "3600"),
            ("MNEME_TRUSTED_PROXY_HOPS", "1"),
        ],
    )
    .await;
    let endpoints = discover(&stack).await;
    let from = |address: &'static str| {
        registration(&endpoints, None)
            .header("x-forwarded-for", address)
            .send()
    };
    for _ in 0..3 {
        assert_eq!(from("203.0.113.7").await.unwrap().status(), 201);
    }
    let refused = from("203.0.113.7").await.unwrap();
    assert_eq!(refused.status(), 429);
    assert!(refused.headers().contains_key("retry-after"));
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["code"], "rate_limited", "{body}");
    assert_eq!(
        from("198.51.100.9").await.unwrap().status(),
        201,
        "another address still registers"
    );
}

#[tokio::test]
async fn failed_sign_ins_are_throttled_per_address_whatever_the_account() {
    let stack = Stack::start(
        "hash",
        &[
            ("MNEME_RATE_LIMIT_IP", "3"),
            ("MNEME_RATE_LIMIT_WINDOW_SECS", "3600"),
            ("MNEME_TRUSTED_PROXY_HOPS", "1"),
        ],
    )
    .await;
    let acme = create_tenant(&stack.db.store(), "acme", ALL_PERMISSIONS).await;
    let password = create_user(
        &stack,
        acme.tenant_id,
        "owner@acme.example",
        mneme_store::users::Role::Owner,
    )
    .await;
    let endpoints = discover(&stack).await;
    let client_id = register(&endpoints, None).await;
    let (_, challenge) = pkce();
    let page = open_page(&endpoints, &client_id, CALLBACK, &challenge).await;
    let from = |address: &str| Page {
        forwarded_for: Some(address.into()),
        ..page.clone()
    };
    let guesser = from("203.0.113.7");
    // Connector hosts share egress addresses, and each connection starts
    // its discovery with a request without credentials: those guess
    // nothing and must not use up the address's failures.
    for _ in 0..5 {
        let discovery = http()
            .post(stack.mcp_url())
            .header("x-forwarded-for", "198.51.100.9")
            .header("accept", "application/json, text/event-stream")
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
            .send()
            .await
            .unwrap();
        assert_eq!(discovery.status(), 401);
    }

    // Three wrong passwords, each for another account (far below the
    // per-account limit of ten)…
    for n in 0..3 {
        let wrong = sign_in(
            &endpoints,
            &guesser,
            &format!("guess{n}@acme.example"),
            "not the password at all",
        )
        .await;
        assert_eq!(wrong.status, 200, "{}", wrong.html);
        assert!(wrong.html.contains("do not match"), "{}", wrong.html);
    }
    // …and the address is refused before any check: the right password of
    // an account never guessed, and a valid API key.
    let refused = sign_in(&endpoints, &guesser, "owner@acme.example", password).await;
    assert_eq!(refused.status, 429, "{}", refused.html);
    let body: Value = serde_json::from_str(&refused.html).unwrap();
    assert_eq!(body["error"]["code"], "rate_limited", "{body}");
    let (status, _) = submit(&endpoints, &guesser, &acme.api_key, "allow")
        .await
        .unwrap_err();
    assert_eq!(status, 429);

    // Another address, after its discovery requests, signs the same person
    // in.
    let signed_in = sign_in(
        &endpoints,
        &from("198.51.100.9"),
        "owner@acme.example",
        password,
    )
    .await;
    assert_eq!(signed_in.status, 200, "{}", signed_in.html);
    assert!(
        signed_in.fields.contains_key("ticket"),
        "{}",
        signed_in.html
    );
}
