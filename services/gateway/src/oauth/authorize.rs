//! `GET/POST /authorize`: the page where a person lets a connector act as
//! one of their tenant's API keys.
//!
//! The page names the client and the host its code will go to, and asks
//! for the API key the connector should act as (it is the proof of who
//! signs in; email sign-in joins with tenant users). One form does sign-in
//! and consent; a cookie-bound, HMAC-signed token protects it against
//! cross-site submission, and the page cannot be framed.
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

fn cookie_value<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
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

fn render(
    oauth: &OAuth,
    client: &Client,
    params: &AuthorizeParams,
    nonce: &str,
    problem: Option<&str>,
) -> Response {
    let scope = requested_scope(params.scope.as_deref());
    let redirect_host = reqwest::Url::parse(&params.redirect_uri)
        .ok()
        .and_then(|u| u.host_str().map(str::to_owned))
        .unwrap_or_default();
    let hidden: String = [
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
    .map(|(name, value)| {
        format!(
            "<input type=\"hidden\" name=\"{name}\" value=\"{}\">",
            escape(value)
        )
    })
    .collect();
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
         {problem}\
         <form method=\"post\" action=\"/authorize\">{hidden}\
         <label>API key it will act as<br><input type=\"password\" name=\"api_key\" autocomplete=\"off\" \
         required style=\"width:100%\" placeholder=\"mn_…\"></label>\
         <p>The connector gets at most this key's permissions; revoke the key to cut it off.</p>\
         <button type=\"submit\" name=\"decision\" value=\"allow\">Allow</button> \
         <button type=\"submit\" name=\"decision\" value=\"deny\" formnovalidate>Deny</button>\
         </form></body></html>",
        name = escape(&client.name),
        host = escape(&redirect_host),
        scopes = scope_descriptions(&scope),
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

/// `POST /authorize`: the person's decision.
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
    let (csrf, api_key, decision) = (take("csrf"), take("api_key"), take("decision"));
    let client = match check(oauth, &params).await {
        Ok(client) => client,
        Err(response) => return response,
    };
    let Some(nonce) = cookie_value(&headers, cookie_name(oauth)) else {
        return error_page(
            StatusCode::FORBIDDEN,
            "Your browser did not keep the sign-in page's cookie; open the connection again.",
        );
    };
    let expected = csrf_token(oauth, nonce, &params);
    if !bool::from(expected.as_bytes().ct_eq(csrf.as_bytes())) {
        return error_page(
            StatusCode::FORBIDDEN,
            "This form was not issued for this request; open the connection again.",
        );
    }
    if decision != "allow" {
        return redirect_error(oauth, &params, "access_denied", "the person declined");
    }
    if let Some(ip) = client_ip
        && let Some(refusal) = app.limiter.check_ip(ip).await
    {
        return refusal;
    }
    let found = match app.keys.resolve(api_key.trim()).await {
        Ok(Some(found)) => found,
        Ok(None) => {
            if let Some(ip) = client_ip {
                app.limiter.record_failed_auth(ip).await;
            }
            return render(
                oauth,
                &client,
                &params,
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
    if let Some(bound) = client.bound_key
        && bound != (key.tenant_id, key.id)
    {
        return render(
            oauth,
            &client,
            &params,
            nonce,
            Some("This connector was registered for another API key; use that key."),
        );
    }
    // Grant only scopes the key can exercise.
    let granted: Vec<String> = requested_scope(params.scope.as_deref())
        .split_whitespace()
        .filter(|scope| {
            SCOPES.iter().any(|(name, permission)| {
                name == scope
                    && (key.permissions.contains(permission)
                        || key.permissions.contains(&mneme_core::Permission::Admin))
            })
        })
        .map(str::to_owned)
        .collect::<Vec<_>>();
    if granted.is_empty() {
        return render(
            oauth,
            &client,
            &params,
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
        tenant_id: key.tenant_id,
        key_id: key.id,
        subject: format!("key:{}", key.id),
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
