//! `GET/POST /authorize`: the page where a person lets a connector act as
//! one of their tenant's API keys.
//!
//! The page names the client and the host its code will go to. A person
//! signs in with email and password and picks the key the connector acts
//! as (owners and admins: any active key of the tenant; everyone: a new key
//! made for the connector), or pastes an API key, which is then the key.
//! A cookie-bound, HMAC-signed token protects every form against
//! cross-site submission, the password step's result travels signed the
//! same way, and the page cannot be framed. Failed sign-ins count per
//! address and per account.
//!
//! Errors about the client or its redirect URI are shown on the page (a
//! code must never go to an unverified address); every other error goes
//! back to the client as `error=` on its redirect URI, with `state` and
//! `iss` (RFC 9207).

use std::collections::HashMap;

use axum::extract::{Form, FromRequest, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use subtle::ConstantTimeEq;

use super::{DEFAULT_SCOPE, OAuth, SCOPES, clients::Client, digest, random_token};
use crate::App;

/// The authorization request's parameters (RFC 6749 §4.1.1, PKCE, RFC 8707).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
pub(super) struct AuthorizeParams {
    #[serde(default)]
    response_type: String,
    #[serde(default)]
    client_id: String,
    #[serde(default)]
    redirect_uri: String,
    #[serde(default)]
    code_challenge: String,
    #[serde(default)]
    code_challenge_method: String,
    state: Option<String>,
    scope: Option<String>,
    resource: Option<String>,
}

/// What an authorization code stands for, stored in Redis under its hash.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Grant {
    pub(super) client_id: String,
    pub(super) redirect_uri: String,
    pub(super) code_challenge: String,
    pub(super) resource: String,
    pub(super) scope: String,
    pub(super) tenant_id: uuid::Uuid,
    pub(super) key_id: uuid::Uuid,
    pub(super) subject: String,
}

fn cookie_name(oauth: &OAuth) -> &'static str {
    if oauth.secure_cookies {
        "__Host-mneme-authorize"
    } else {
        "mneme-authorize"
    }
}

/// The form's anti-forgery token: an HMAC over the cookie's nonce and the
/// request, so a form only works in the browser that loaded it and for the
/// request it was shown for.
fn csrf_token(oauth: &OAuth, nonce: &str, params: &AuthorizeParams) -> String {
    let mut mac = <Hmac<Sha256>>::new_from_slice(&oauth.csrf_key).expect("any key length");
    mac.update(nonce.as_bytes());
    mac.update(&serde_json::to_vec(params).expect("params serialize"));
    URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
}

pub(crate) fn cookie_value<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(n, _)| *n == name)
        .map(|(_, v)| v)
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}

/// Headers of every page: never framed, no scripts, forms only to here and
/// (for the redirect after submitting) to the client.
fn page_headers(response: &mut Response, redirect_origin: Option<&str>) {
    let form_action = match redirect_origin {
        Some(origin) => format!("'self' {origin}"),
        None => "'self'".into(),
    };
    let csp = format!(
        "default-src 'none'; style-src 'unsafe-inline'; form-action {form_action}; frame-ancestors 'none'; base-uri 'none'"
    );
    let headers = response.headers_mut();
    if let Ok(value) = HeaderValue::from_str(&csp) {
        headers.insert(header::CONTENT_SECURITY_POLICY, value);
    }
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
}

fn error_page(status: StatusCode, message: &str) -> Response {
    let body = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>mneme</title></head>\
         <body style=\"font-family:sans-serif;max-width:32rem;margin:4rem auto\">\
         <h1>Cannot connect</h1><p>{}</p></body></html>",
        escape(message)
    );
    let mut response = (status, Html(body)).into_response();
    page_headers(&mut response, None);
    response
}

fn origin_of(uri: &str) -> Option<String> {
    let url = reqwest::Url::parse(uri).ok()?;
    Some(url.origin().ascii_serialization())
}

/// Sends the client an OAuth error on its (verified) redirect URI.
fn redirect_error(
    oauth: &OAuth,
    params: &AuthorizeParams,
    error: &str,
    description: &str,
) -> Response {
    let mut url = match reqwest::Url::parse(&params.redirect_uri) {
        Ok(url) => url,
        Err(_) => return error_page(StatusCode::BAD_REQUEST, description),
    };
    {
        let mut query = url.query_pairs_mut();
        query.append_pair("error", error);
        query.append_pair("error_description", description);
        if let Some(state) = &params.state {
            query.append_pair("state", state);
        }
        query.append_pair("iss", &oauth.issuer);
    }
    Redirect::to(url.as_str()).into_response()
}

/// The requested scope, as mneme grants it: known scopes only (others such
/// as `offline_access` or `openid` are tolerated and ignored); none means
/// the default.
fn requested_scope(scope: Option<&str>) -> String {
    let known: Vec<&str> = scope
        .unwrap_or_default()
        .split_whitespace()
        .filter(|s| SCOPES.iter().any(|(name, _)| name == s))
        .collect();
    if known.is_empty() {
        DEFAULT_SCOPE.to_owned()
    } else {
        known.join(" ")
    }
}

fn same_resource(requested: &str, ours: &str) -> bool {
    requested.trim_end_matches('/') == ours.trim_end_matches('/')
}

/// Checks a request; the client when it may proceed, else the response.
async fn check(
    oauth: &OAuth,
    params: &AuthorizeParams,
) -> Result<std::sync::Arc<Client>, Response> {
    if params.client_id.is_empty() {
        return Err(error_page(
            StatusCode::BAD_REQUEST,
            "The request names no client (client_id).",
        ));
    }
    let client = oauth
        .clients
        .find(&oauth.store, &params.client_id)
        .await
        .map_err(|reason| {
            error_page(
                StatusCode::BAD_REQUEST,
                &format!("The application asking to connect is not known to mneme ({reason}). Remove the connector and add it again."),
            )
        })?;
    if params.redirect_uri.is_empty() || !client.allows_redirect(&params.redirect_uri) {
        return Err(error_page(
            StatusCode::BAD_REQUEST,
            "The application's return address (redirect_uri) is not one it registered.",
        ));
    }
    if params.response_type != "code" {
        return Err(redirect_error(
            oauth,
            params,
            "unsupported_response_type",
            "response_type must be code",
        ));
    }
    if params.code_challenge.is_empty() || params.code_challenge_method != "S256" {
        return Err(redirect_error(
            oauth,
            params,
            "invalid_request",
            "PKCE with code_challenge_method=S256 is required",
        ));
    }
    if params.resource.is_none() && oauth.config.require_resource {
        return Err(redirect_error(
            oauth,
            params,
            "invalid_target",
            "resource is required (RFC 8707): send resource=<this server's MCP endpoint>",
        ));
    }
    if let Some(resource) = &params.resource
        && !same_resource(resource, &oauth.resource)
    {
        return Err(redirect_error(
            oauth,
            params,
            "invalid_target",
            "resource must be this server's MCP endpoint",
        ));
    }
    Ok(client)
}

fn scope_descriptions(scope: &str) -> String {
    scope
        .split_whitespace()
        .map(|s| match s {
            "memory:read" => "<li>read your memories</li>",
            "memory:write" => "<li>store, change and forget memories</li>",
            "memory:admin" => "<li>administer your memory (consolidation, all tools)</li>",
            _ => "",
        })
        .collect()
}

/// The request's parameters as hidden form fields, with the form's
/// anti-forgery token.
fn hidden_fields(oauth: &OAuth, params: &AuthorizeParams, nonce: &str) -> String {
    [
        ("response_type", params.response_type.as_str()),
        ("client_id", params.client_id.as_str()),
        ("redirect_uri", params.redirect_uri.as_str()),
        ("code_challenge", params.code_challenge.as_str()),
        (
            "code_challenge_method",
            params.code_challenge_method.as_str(),
        ),
        ("state", params.state.as_deref().unwrap_or_default()),
        ("scope", params.scope.as_deref().unwrap_or_default()),
        ("resource", params.resource.as_deref().unwrap_or_default()),
        ("csrf", &csrf_token(oauth, nonce, params)),
    ]
    .iter()
    .map(|(name, value)| hidden(name, value))
    .collect()
}

fn hidden(name: &str, value: &str) -> String {
    format!(
        "<input type=\"hidden\" name=\"{name}\" value=\"{}\">",
        escape(value)
    )
}

/// A page of the flow: the client and what it asks for, then `form`.
fn page_with(
    oauth: &OAuth,
    client: &Client,
    params: &AuthorizeParams,
    nonce: &str,
    problem: Option<&str>,
    form: &str,
) -> Response {
    let scope = requested_scope(params.scope.as_deref());
    let redirect_host = reqwest::Url::parse(&params.redirect_uri)
        .ok()
        .and_then(|u| u.host_str().map(str::to_owned))
        .unwrap_or_default();
    let problem = problem
        .map(|p| {
            format!(
                "<p role=\"alert\" style=\"color:#b00020\">{}</p>",
                escape(p)
            )
        })
        .unwrap_or_default();
    let body = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width\"><title>Connect to mneme</title></head>\
         <body style=\"font-family:sans-serif;max-width:32rem;margin:4rem auto;line-height:1.4\">\
         <h1>Connect {name} to mneme</h1>\
         <p><strong>{name}</strong> (returning to <strong>{host}</strong>) asks to:</p><ul>{scopes}</ul>\
         {problem}<form method=\"post\" action=\"/authorize\">{hidden}{form}</form></body></html>",
        name = escape(&client.name),
        host = escape(&redirect_host),
        scopes = scope_descriptions(&scope),
        hidden = hidden_fields(oauth, params, nonce),
    );
    let mut response = Html(body).into_response();
    page_headers(&mut response, origin_of(&params.redirect_uri).as_deref());
    let secure = if oauth.secure_cookies { "; Secure" } else { "" };
    let cookie = format!(
        "{}={nonce}; Path=/; HttpOnly; SameSite=Lax; Max-Age=1800{secure}",
        cookie_name(oauth)
    );
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().append(header::SET_COOKIE, value);
    }
    response
}

const DECIDE_BUTTONS: &str = "<p><button type=\"submit\" name=\"decision\" value=\"allow\">Continue</button> \
     <button type=\"submit\" name=\"decision\" value=\"deny\" formnovalidate>Deny</button></p>";

/// The sign-in step: email and password, or an API key to act as.
fn render(
    oauth: &OAuth,
    client: &Client,
    params: &AuthorizeParams,
    nonce: &str,
    problem: Option<&str>,
) -> Response {
    let form = format!(
        "<fieldset><legend>Sign in</legend>\
         <label>Email<br><input type=\"email\" name=\"email\" autocomplete=\"username\" style=\"width:100%\"></label><br>\
         <label>Password<br><input type=\"password\" name=\"password\" autocomplete=\"current-password\" style=\"width:100%\"></label>\
         </fieldset><p>or</p>\
         <fieldset><legend>Use an API key</legend>\
         <label>API key it will act as<br><input type=\"password\" name=\"api_key\" autocomplete=\"off\" \
         style=\"width:100%\" placeholder=\"mn_…\"></label></fieldset>\
         <p>The connector gets at most the permissions of the key it acts as; revoke the key to cut it off.</p>\
         {DECIDE_BUTTONS}"
    );
    page_with(oauth, client, params, nonce, problem, &form)
}

/// Who signed in with a password, carried from the sign-in step to the key
/// choice, signed for this browser and request, valid for ten minutes.
#[derive(Debug, Serialize, Deserialize)]
struct SignedIn {
    user_id: uuid::Uuid,
    tenant_id: uuid::Uuid,
    manages_keys: bool,
    expires: i64,
}

const SIGNED_IN_TTL_SECS: i64 = 600;

fn sign_ticket(oauth: &OAuth, nonce: &str, params: &AuthorizeParams, who: &SignedIn) -> String {
    let payload = URL_SAFE_NO_PAD.encode(serde_json::to_vec(who).expect("serializes"));
    let mac = csrf_token(oauth, &format!("{nonce}.{payload}"), params);
    format!("{payload}.{mac}")
}

fn read_ticket(
    oauth: &OAuth,
    nonce: &str,
    params: &AuthorizeParams,
    ticket: &str,
) -> Option<SignedIn> {
    let (payload, mac) = ticket.split_once('.')?;
    let expected = csrf_token(oauth, &format!("{nonce}.{payload}"), params);
    if !bool::from(expected.as_bytes().ct_eq(mac.as_bytes())) {
        return None;
    }
    let who: SignedIn = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).ok()?).ok()?;
    (who.expires > chrono::Utc::now().timestamp()).then_some(who)
}

/// The key-choice step after a password sign-in: owners and admins pick
/// any active key of the tenant or a new one; members get a new key.
async fn render_key_choice(
    app: &App,
    client: &Client,
    params: &AuthorizeParams,
    nonce: &str,
    who: &SignedIn,
    problem: Option<&str>,
) -> Response {
    let oauth = &app.oauth;
    let keys = if who.manages_keys {
        match tenant_keys(oauth, who.tenant_id).await {
            Ok(keys) => keys,
            Err(error) => {
                tracing::error!(%error, "keys not listed for the consent page");
                return error_page(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "mneme cannot list your keys right now; try again shortly.",
                );
            }
        }
    } else {
        Vec::new()
    };
    let mut options: String = keys
        .iter()
        .map(|key| {
            let permissions: Vec<&str> = key.permissions.iter().map(|p| p.as_str()).collect();
            format!(
                "<label><input type=\"radio\" name=\"key\" value=\"{}\"> {} ({})</label><br>",
                key.id,
                escape(&key.name),
                permissions.join(", ")
            )
        })
        .collect();
    options.push_str(
        "<label><input type=\"radio\" name=\"key\" value=\"new\" checked> a new key for this connector</label><br>",
    );
    let form = format!(
        "{}<fieldset><legend>Act as</legend>{options}</fieldset>{DECIDE_BUTTONS}",
        hidden("ticket", &sign_ticket(oauth, nonce, params, who))
    );
    page_with(oauth, client, params, nonce, problem, &form)
}

async fn tenant_keys(
    oauth: &OAuth,
    tenant_id: uuid::Uuid,
) -> Result<Vec<mneme_store::api_keys::ApiKey>, mneme_store::StoreError> {
    let mut db = oauth.store.client().await?;
    let tx = mneme_store::TenantTx::begin(&mut db, tenant_id).await?;
    let now = chrono::Utc::now();
    Ok(mneme_store::api_keys::list(&tx)
        .await?
        .into_iter()
        .filter(|key| key.status == "active" && key.expires_at.is_none_or(|at| at > now))
        .collect())
}

/// `GET /authorize`: the sign-in and consent page.
pub(super) async fn page(
    State(app): State<App>,
    Query(params): Query<AuthorizeParams>,
) -> Response {
    let oauth = &app.oauth;
    match check(oauth, &params).await {
        Ok(client) => render(oauth, &client, &params, &random_token(), None),
        Err(response) => response,
    }
}

/// The scopes of `requested` a key with `permissions` can exercise.
fn grantable(requested: &str, permissions: &[mneme_core::Permission]) -> Vec<String> {
    requested
        .split_whitespace()
        .filter(|scope| {
            SCOPES.iter().any(|(name, permission)| {
                name == scope
                    && (permissions.contains(permission)
                        || permissions.contains(&mneme_core::Permission::Admin))
            })
        })
        .map(str::to_owned)
        .collect()
}

/// `POST /authorize`: a sign-in, a key choice or a denial.
pub(super) async fn decide(State(app): State<App>, request: Request) -> Response {
    let oauth = &app.oauth;
    let client_ip = app.limiter.client_ip(&request);
    let headers = request.headers().clone();
    let Form(mut form): Form<HashMap<String, String>> = match Form::from_request(request, &()).await
    {
        Ok(form) => form,
        Err(_) => return error_page(StatusCode::BAD_REQUEST, "The form could not be read."),
    };
    let mut take = |name: &str| form.remove(name).unwrap_or_default();
    let optional = |value: String| (!value.is_empty()).then_some(value);
    let params = AuthorizeParams {
        response_type: take("response_type"),
        client_id: take("client_id"),
        redirect_uri: take("redirect_uri"),
        code_challenge: take("code_challenge"),
        code_challenge_method: take("code_challenge_method"),
        state: optional(take("state")),
        scope: optional(take("scope")),
        resource: optional(take("resource")),
    };
    let csrf = take("csrf");
    let decision = take("decision");
    let (api_key, email, password) = (take("api_key"), take("email"), take("password"));
    let (ticket, chosen_key) = (take("ticket"), take("key"));
    let client = match check(oauth, &params).await {
        Ok(client) => client,
        Err(response) => return response,
    };
    let Some(nonce) = cookie_value(&headers, cookie_name(oauth)).map(str::to_owned) else {
        return error_page(
            StatusCode::FORBIDDEN,
            "Your browser did not keep the sign-in page's cookie; open the connection again.",
        );
    };
    let expected = csrf_token(oauth, &nonce, &params);
    if !bool::from(expected.as_bytes().ct_eq(csrf.as_bytes())) {
        return error_page(
            StatusCode::FORBIDDEN,
            "This form was not issued for this request; open the connection again.",
        );
    }
    if decision != "allow" {
        return redirect_error(oauth, &params, "access_denied", "the person declined");
    }
    if !ticket.is_empty() {
        let Some(who) = read_ticket(oauth, &nonce, &params, &ticket) else {
            return render(
                oauth,
                &client,
                &params,
                &nonce,
                Some("Your sign-in expired; sign in again."),
            );
        };
        return act_as_chosen_key(&app, &client, &params, &nonce, &who, &chosen_key).await;
    }
    if !api_key.trim().is_empty() {
        return act_as_pasted_key(&app, &client, &params, &nonce, api_key.trim(), client_ip).await;
    }
    if !email.trim().is_empty() {
        return sign_in_with_password(&app, &client, &params, &nonce, &email, password, client_ip)
            .await;
    }
    render(
        oauth,
        &client,
        &params,
        &nonce,
        Some("Sign in with your email and password, or paste an API key."),
    )
}

async fn act_as_pasted_key(
    app: &App,
    client: &Client,
    params: &AuthorizeParams,
    nonce: &str,
    api_key: &str,
    client_ip: Option<std::net::IpAddr>,
) -> Response {
    let oauth = &app.oauth;
    if let Some(ip) = client_ip
        && let Some(refusal) = app.limiter.check_ip(ip).await
    {
        return refusal;
    }
    let found = match app.keys.resolve(api_key).await {
        Ok(Some(found)) => found,
        Ok(None) => {
            if let Some(ip) = client_ip {
                app.limiter.record_failed_auth(ip).await;
            }
            return render(
                oauth,
                client,
                params,
                nonce,
                Some("That API key is not valid, or it was revoked."),
            );
        }
        Err(error) => {
            tracing::error!(%error, "key lookup failed during authorization");
            return error_page(
                StatusCode::SERVICE_UNAVAILABLE,
                "mneme cannot check keys right now; try again shortly.",
            );
        }
    };
    let key = &found.key;
    grant_code(
        app,
        client,
        params,
        nonce,
        key.tenant_id,
        key.id,
        &key.permissions,
        format!("key:{}", key.id),
        None,
    )
    .await
}

async fn sign_in_with_password(
    app: &App,
    client: &Client,
    params: &AuthorizeParams,
    nonce: &str,
    email: &str,
    password: String,
    client_ip: Option<std::net::IpAddr>,
) -> Response {
    use crate::limits::Failures;
    let oauth = &app.oauth;
    let account = Failures::Account(hex::encode(digest(&mneme_store::users::normalize_email(
        email,
    ))));
    for subject in client_ip.map(Failures::Address).iter().chain([&account]) {
        if let Some(refusal) = app.limiter.check_failures(subject).await {
            return refusal;
        }
    }
    let found = async {
        let mut db = oauth.store.client().await?;
        mneme_store::users::for_sign_in(&mut db, email).await
    }
    .await;
    let found = match found {
        Ok(found) => found,
        Err(error) => {
            tracing::error!(%error, "user lookup failed during authorization");
            return error_page(
                StatusCode::SERVICE_UNAVAILABLE,
                "mneme cannot sign you in right now; try again shortly.",
            );
        }
    };
    let stored = found.as_ref().map(|(_, hash)| hash.clone());
    // Verified even without an account, so timing does not tell which
    // emails exist.
    let matches = tokio::task::spawn_blocking(move || {
        mneme_core::password::verify(&password, stored.as_deref())
    })
    .await
    .unwrap_or(false);
    let Some((user, _)) = found.filter(|_| matches) else {
        for subject in client_ip.map(Failures::Address).iter().chain([&account]) {
            app.limiter.record_failure(subject).await;
        }
        return render(
            oauth,
            client,
            params,
            nonce,
            Some("That email and password do not match an account."),
        );
    };
    let recorded = async {
        let mut db = oauth.store.client().await?;
        let tx = mneme_store::TenantTx::begin(&mut db, user.tenant_id).await?;
        mneme_store::users::record_sign_in(&tx, user.id).await?;
        tx.commit().await
    }
    .await;
    if let Err(error) = recorded {
        tracing::warn!(%error, "sign-in time not recorded");
    }
    let who = SignedIn {
        user_id: user.id,
        tenant_id: user.tenant_id,
        manages_keys: user.role.manages_keys(),
        expires: chrono::Utc::now().timestamp() + SIGNED_IN_TTL_SECS,
    };
    render_key_choice(app, client, params, nonce, &who, None).await
}

async fn act_as_chosen_key(
    app: &App,
    client: &Client,
    params: &AuthorizeParams,
    nonce: &str,
    who: &SignedIn,
    chosen: &str,
) -> Response {
    let oauth = &app.oauth;
    let subject = format!("user:{}", who.user_id);
    if chosen == "new" || chosen.is_empty() {
        let scope = requested_scope(params.scope.as_deref());
        // A new connector key holds what the connector asked for; admin
        // only when the person manages keys.
        let permissions: Vec<mneme_core::Permission> = crate::oauth::scope_permissions(&scope)
            .into_iter()
            .filter(|p| *p != mneme_core::Permission::Admin || who.manages_keys)
            .collect();
        if permissions.is_empty() {
            return render_key_choice(
                app,
                client,
                params,
                nonce,
                who,
                Some("The connector asks for nothing you may grant."),
            )
            .await;
        }
        let created = async {
            let mut db = oauth.store.client().await?;
            let tx = mneme_store::TenantTx::begin(&mut db, who.tenant_id).await?;
            let name: String = format!("connector: {} ({})", client.name, &random_token()[..6])
                .chars()
                .take(128)
                .collect();
            let (key, _secret) = mneme_store::api_keys::create(
                &tx,
                &mneme_store::api_keys::NewKey {
                    name,
                    permissions,
                    default_workspace: None,
                    fragment_limit: oauth.default_fragment_limit,
                    expires_at: None,
                },
            )
            .await?;
            tx.commit().await?;
            Ok::<_, mneme_store::StoreError>(key)
        }
        .await;
        return match created {
            Ok(key) => {
                grant_code(
                    app,
                    client,
                    params,
                    nonce,
                    key.tenant_id,
                    key.id,
                    &key.permissions,
                    subject,
                    Some(who),
                )
                .await
            }
            Err(error) => {
                tracing::error!(%error, "connector key not created");
                error_page(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "mneme cannot create the key right now; try again shortly.",
                )
            }
        };
    }
    let Ok(key_id) = chosen.parse::<uuid::Uuid>() else {
        return render_key_choice(app, client, params, nonce, who, Some("Choose a key.")).await;
    };
    if !who.manages_keys {
        return render_key_choice(
            app,
            client,
            params,
            nonce,
            who,
            Some("Only owners and admins may choose an existing key."),
        )
        .await;
    }
    // The key must be one of the signed-in person's tenant: a key id of
    // another tenant is not found under this tenant's row-level security.
    match app.keys.resolve_id(who.tenant_id, key_id).await {
        Ok(Some(found)) => {
            let key = &found.key;
            grant_code(
                app,
                client,
                params,
                nonce,
                key.tenant_id,
                key.id,
                &key.permissions,
                subject,
                Some(who),
            )
            .await
        }
        Ok(None) => {
            render_key_choice(
                app,
                client,
                params,
                nonce,
                who,
                Some("That key does not exist or is not active."),
            )
            .await
        }
        Err(error) => {
            tracing::error!(%error, "key lookup failed during authorization");
            error_page(
                StatusCode::SERVICE_UNAVAILABLE,
                "mneme cannot check keys right now; try again shortly.",
            )
        }
    }
}

/// Issues the code for acting as `key_id` and sends the browser back to
/// the client.
#[allow(clippy::too_many_arguments)]
async fn grant_code(
    app: &App,
    client: &Client,
    params: &AuthorizeParams,
    nonce: &str,
    tenant_id: uuid::Uuid,
    key_id: uuid::Uuid,
    permissions: &[mneme_core::Permission],
    subject: String,
    signed_in: Option<&SignedIn>,
) -> Response {
    let oauth = &app.oauth;
    if let Some(bound) = client.bound_key
        && bound != (tenant_id, key_id)
    {
        let problem = Some("This connector was registered for another API key; use that key.");
        return match signed_in {
            Some(who) => render_key_choice(app, client, params, nonce, who, problem).await,
            None => render(oauth, client, params, nonce, problem),
        };
    }
    let granted = grantable(&requested_scope(params.scope.as_deref()), permissions);
    if granted.is_empty() {
        return render(
            oauth,
            client,
            params,
            nonce,
            Some("That key has none of the permissions the connector asks for."),
        );
    }
    let code = random_token();
    let grant = Grant {
        client_id: params.client_id.clone(),
        redirect_uri: params.redirect_uri.clone(),
        code_challenge: params.code_challenge.clone(),
        resource: oauth.resource.clone(),
        scope: granted.join(" "),
        tenant_id,
        key_id,
        subject,
    };
    let stored = oauth
        .cache
        .put_oauth_code(
            &hex::encode(digest(&code)),
            &serde_json::to_string(&grant).expect("a grant serializes"),
            oauth.config.code_ttl,
        )
        .await;
    if let Err(error) = stored {
        tracing::error!(%error, "authorization code not stored");
        return error_page(
            StatusCode::SERVICE_UNAVAILABLE,
            "mneme cannot complete sign-ins right now; try again shortly.",
        );
    }
    let mut url = match reqwest::Url::parse(&params.redirect_uri) {
        Ok(url) => url,
        Err(_) => return error_page(StatusCode::BAD_REQUEST, "Invalid redirect_uri."),
    };
    {
        let mut query = url.query_pairs_mut();
        query.append_pair("code", &code);
        if let Some(state) = &params.state {
            query.append_pair("state", state);
        }
        query.append_pair("iss", &oauth.issuer);
    }
    Redirect::to(url.as_str()).into_response()
}
