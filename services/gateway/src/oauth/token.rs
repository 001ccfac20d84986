//! `POST /token` (authorization code with PKCE, refresh-token rotation)
//! and `POST /revoke` (RFC 7009).
//!
//! Refresh tokens are rotated on every use and kept as families: a token
//! that was already replaced and comes back means someone holds a copy, so
//! its whole family is revoked and the client must sign in again.

use std::collections::HashMap;

use axum::Json;
use axum::extract::{Form, FromRequest, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use chrono::Utc;
use mneme_store::TenantTx;
use mneme_store::oauth::{self, RefreshToken};
use serde_json::json;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use uuid::Uuid;

use super::authorize::Grant;
use super::clients::Client;
use super::{AccessClaims, OAuth, digest, random_token};
use crate::App;

fn oauth_error(status: StatusCode, error: &str, description: &str) -> Response {
    let mut response = (
        status,
        Json(json!({"error": error, "error_description": description})),
    )
        .into_response();
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, "no-store".parse().expect("valid"));
    if status == StatusCode::UNAUTHORIZED {
        headers.insert(
            header::WWW_AUTHENTICATE,
            r#"Basic realm="mneme""#.parse().expect("valid"),
        );
    }
    response
}

/// 503 for a store or cache failure, logged with what failed.
fn unavailable(error: &dyn std::fmt::Display, what: &str) -> Response {
    tracing::error!(%error, "{what}");
    oauth_error(
        StatusCode::SERVICE_UNAVAILABLE,
        "temporarily_unavailable",
        "try again shortly",
    )
}

fn invalid_grant(description: &str) -> Response {
    oauth_error(StatusCode::BAD_REQUEST, "invalid_grant", description)
}

/// `client_id` and secret from HTTP Basic or the form.
fn client_credentials(
    headers: &HeaderMap,
    form: &HashMap<String, String>,
) -> (Option<String>, Option<String>) {
    let basic = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Basic "))
        .and_then(|v| STANDARD.decode(v.trim()).ok())
        .and_then(|v| String::from_utf8(v).ok())
        .and_then(|v| {
            let (id, secret) = v.split_once(':')?;
            let decode = |s: &str| percent_decode(s);
            Some((decode(id), decode(secret)))
        });
    match basic {
        Some((id, secret)) => (Some(id), Some(secret)),
        None => (
            form.get("client_id").cloned(),
            form.get("client_secret").cloned(),
        ),
    }
}

/// `application/x-www-form-urlencoded` decoding of one Basic credential
/// part (RFC 6749 §2.3.1).
fn percent_decode(text: &str) -> String {
    reqwest::Url::parse(&format!("http://x/?v={text}"))
        .ok()
        .and_then(|u| u.query_pairs().next().map(|(_, v)| v.into_owned()))
        .unwrap_or_else(|| text.to_owned())
}

/// The authenticated client, or 401 `invalid_client` (which tells hosts to
/// register again).
async fn authenticate_client(
    oauth: &OAuth,
    headers: &HeaderMap,
    form: &HashMap<String, String>,
) -> Result<std::sync::Arc<Client>, Response> {
    let (client_id, secret) = client_credentials(headers, form);
    let Some(client_id) = client_id.filter(|id| !id.is_empty()) else {
        return Err(oauth_error(
            StatusCode::UNAUTHORIZED,
            "invalid_client",
            "client_id is required",
        ));
    };
    let client = oauth
        .clients
        .find(&oauth.store, &client_id)
        .await
        .map_err(|_| {
            oauth_error(
                StatusCode::UNAUTHORIZED,
                "invalid_client",
                "unknown client; register again",
            )
        })?;
    if let Some(expected) = &client.secret_hash {
        let presented = secret.map(|s| digest(&s)).unwrap_or_default();
        if !bool::from(presented.ct_eq(expected)) {
            return Err(oauth_error(
                StatusCode::UNAUTHORIZED,
                "invalid_client",
                "wrong client secret",
            ));
        }
    }
    Ok(client)
}

fn pkce_matches(verifier: &str, challenge: &str) -> bool {
    let computed = URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()));
    (43..=128).contains(&verifier.len())
        && bool::from(computed.as_bytes().ct_eq(challenge.as_bytes()))
}

/// What the token endpoint hands out for one key and scope.
struct Issue<'a> {
    client_id: &'a str,
    tenant_id: Uuid,
    key_id: Uuid,
    subject: &'a str,
    scope: &'a str,
    resource: &'a str,
    family_id: Uuid,
}

async fn issue(app: &App, grant: Issue<'_>) -> Response {
    let oauth = &app.oauth;
    // The key must still be usable: revoked keys and suspended tenants get
    // no new tokens.
    match app.keys.resolve_id(grant.tenant_id, grant.key_id).await {
        Ok(Some(_)) => {}
        Ok(None) => return invalid_grant("the API key behind this grant was revoked or expired"),
        Err(error) => {
            return unavailable(&error, "key lookup failed at the token endpoint");
        }
    }
    let now = Utc::now();
    let ttl = oauth.config.access_token_ttl;
    let access_token = oauth.keys.sign(&AccessClaims {
        iss: oauth.issuer.clone(),
        aud: grant.resource.to_owned(),
        sub: grant.subject.to_owned(),
        exp: now.timestamp() + ttl.as_secs() as i64,
        iat: now.timestamp(),
        jti: Uuid::new_v4().to_string(),
        client_id: grant.client_id.to_owned(),
        scope: grant.scope.to_owned(),
        tenant_id: grant.tenant_id,
        key_id: grant.key_id,
    });
    let refresh_token = random_token();
    let record = RefreshToken {
        id: Uuid::now_v7(),
        family_id: grant.family_id,
        tenant_id: grant.tenant_id,
        key_id: grant.key_id,
        client_id: grant.client_id.to_owned(),
        subject: grant.subject.to_owned(),
        scope: grant.scope.to_owned(),
        resource: grant.resource.to_owned(),
        expires_at: now
            + chrono::Duration::from_std(oauth.config.refresh_token_ttl)
                .unwrap_or(chrono::Duration::days(90)),
        replaced_at: None,
        revoked_at: None,
    };
    let stored = async {
        let mut db = oauth.store.client().await?;
        let tx = TenantTx::begin(&mut db, grant.tenant_id).await?;
        oauth::insert_refresh_token(&tx, &record, &digest(&refresh_token)).await?;
        tx.commit().await
    }
    .await;
    if let Err(error) = stored {
        return unavailable(&error, "refresh token not stored");
    }
    (
        [
            (header::CACHE_CONTROL, "no-store"),
            (header::PRAGMA, "no-cache"),
        ],
        Json(json!({
            "access_token": access_token,
            "token_type": "Bearer",
            "expires_in": ttl.as_secs(),
            "refresh_token": refresh_token,
            "scope": grant.scope,
        })),
    )
        .into_response()
}

async fn read_form(request: Request) -> Result<(HeaderMap, HashMap<String, String>), Response> {
    let headers = request.headers().clone();
    match Form::<HashMap<String, String>>::from_request(request, &()).await {
        Ok(Form(form)) => Ok((headers, form)),
        Err(_) => Err(oauth_error(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "send application/x-www-form-urlencoded parameters",
        )),
    }
}

/// The form of a request to the token or revocation endpoint, and the
/// client it authenticates.
async fn client_request(
    oauth: &OAuth,
    request: Request,
) -> Result<(HashMap<String, String>, std::sync::Arc<Client>), Response> {
    let (headers, form) = read_form(request).await?;
    let client = authenticate_client(oauth, &headers, &form).await?;
    Ok((form, client))
}

/// `POST /token`.
pub(super) async fn token(State(app): State<App>, request: Request) -> Response {
    let oauth = &app.oauth;
    let (form, client) = match client_request(oauth, request).await {
        Ok(read) => read,
        Err(response) => return response,
    };
    let param = |name: &str| form.get(name).map(String::as_str).unwrap_or_default();
    if let Some(resource) = form.get("resource")
        && resource.trim_end_matches('/') != oauth.resource.trim_end_matches('/')
    {
        return oauth_error(
            StatusCode::BAD_REQUEST,
            "invalid_target",
            "resource must be this server's MCP endpoint",
        );
    }
    match param("grant_type") {
        "authorization_code" => {
            let code = param("code");
            let taken = oauth
                .cache
                .take_oauth_code(&hex::encode(digest(code)))
                .await;
            let grant: Grant = match taken {
                Ok(Some(raw)) => match serde_json::from_str(&raw) {
                    Ok(grant) => grant,
                    Err(_) => return invalid_grant("unreadable authorization code"),
                },
                Ok(None) => {
                    return invalid_grant("unknown, expired or already used authorization code");
                }
                Err(error) => {
                    return unavailable(&error, "authorization codes unavailable");
                }
            };
            if grant.client_id != client.client_id {
                // Worded like an unknown code: another client learns
                // nothing of whether the code exists.
                return invalid_grant("unknown, expired or already used authorization code");
            }
            if grant.redirect_uri != param("redirect_uri") {
                return invalid_grant("redirect_uri differs from the authorization request's");
            }
            if !pkce_matches(param("code_verifier"), &grant.code_challenge) {
                return invalid_grant("code_verifier does not match the code_challenge");
            }
            issue(
                &app,
                Issue {
                    client_id: &grant.client_id,
                    tenant_id: grant.tenant_id,
                    key_id: grant.key_id,
                    subject: &grant.subject,
                    scope: &grant.scope,
                    resource: &grant.resource,
                    family_id: Uuid::now_v7(),
                },
            )
            .await
        }
        "refresh_token" => refresh(&app, &client, param("refresh_token"), form.get("scope")).await,
        "" => oauth_error(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "grant_type is required",
        ),
        _ => oauth_error(
            StatusCode::BAD_REQUEST,
            "unsupported_grant_type",
            "use authorization_code or refresh_token",
        ),
    }
}

async fn refresh(app: &App, client: &Client, presented: &str, scope: Option<&String>) -> Response {
    let oauth = &app.oauth;
    let found = async {
        let mut db = oauth.store.client().await?;
        oauth::find_refresh_token(&mut db, &digest(presented)).await
    }
    .await;
    let stored = match found {
        Ok(Some(stored)) => stored,
        Ok(None) => return invalid_grant("unknown refresh token"),
        Err(error) => {
            return unavailable(&error, "refresh token lookup failed");
        }
    };
    if stored.client_id != client.client_id {
        // Worded like an unknown token: another client learns nothing of
        // whether the token exists.
        return invalid_grant("unknown refresh token");
    }
    if stored.revoked_at.is_some() {
        return invalid_grant("the refresh token was revoked");
    }
    if stored.expires_at < Utc::now() {
        return invalid_grant("the refresh token expired");
    }
    let rotated = async {
        let mut db = oauth.store.client().await?;
        let tx = TenantTx::begin(&mut db, stored.tenant_id).await?;
        let fresh = stored.replaced_at.is_none() && oauth::mark_replaced(&tx, stored.id).await?;
        if !fresh {
            oauth::revoke_family(&tx, stored.family_id).await?;
        }
        tx.commit().await?;
        Ok::<_, mneme_store::StoreError>(fresh)
    }
    .await;
    match rotated {
        Ok(true) => {}
        Ok(false) => {
            tracing::warn!(client = %client.client_id, "a replaced refresh token was presented again; its family is revoked");
            crate::metrics::METRICS
                .isolation_blocked
                .with_label_values(&["refresh_token_reuse"])
                .inc();
            return invalid_grant("the refresh token was already used; sign in again");
        }
        Err(error) => {
            return unavailable(&error, "refresh token rotation failed");
        }
    }
    // A narrower scope may be asked for, never a wider one.
    let granted: Vec<&str> = stored.scope.split_whitespace().collect();
    let scope = match scope.filter(|s| !s.trim().is_empty()) {
        Some(requested) => {
            let requested: Vec<&str> = requested.split_whitespace().collect();
            if requested.iter().any(|s| !granted.contains(s)) {
                return oauth_error(
                    StatusCode::BAD_REQUEST,
                    "invalid_scope",
                    "a refresh cannot widen the scope",
                );
            }
            requested.join(" ")
        }
        None => stored.scope.clone(),
    };
    issue(
        app,
        Issue {
            client_id: &stored.client_id,
            tenant_id: stored.tenant_id,
            key_id: stored.key_id,
            subject: &stored.subject,
            scope: &scope,
            resource: &stored.resource,
            family_id: stored.family_id,
        },
    )
    .await
}

/// `POST /revoke`: a refresh token revokes its family. Unknown tokens and
/// access tokens (short-lived, not stored) are accepted silently, as RFC
/// 7009 asks.
pub(super) async fn revoke(State(app): State<App>, request: Request) -> Response {
    let oauth = &app.oauth;
    let (form, client) = match client_request(oauth, request).await {
        Ok(read) => read,
        Err(response) => return response,
    };
    let token = form.get("token").map(String::as_str).unwrap_or_default();
    let revoked = async {
        let mut db = oauth.store.client().await?;
        let Some(stored) = oauth::find_refresh_token(&mut db, &digest(token)).await? else {
            return Ok(());
        };
        if stored.client_id != client.client_id {
            return Ok(());
        }
        let tx = TenantTx::begin(&mut db, stored.tenant_id).await?;
        oauth::revoke_family(&tx, stored.family_id).await?;
        tx.commit().await
    }
    .await;
    if let Err(error) = revoked {
        return unavailable(&error, "revocation failed");
    }
    StatusCode::OK.into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The challenge was computed independently (Python's hashlib and
    /// base64.urlsafe_b64encode).
    #[test]
    fn pkce_s256_matches_an_independently_computed_challenge() {
        let verifier = "dBjftJeZ4CVP-mJ0kDFiyjpoSw4zFGgtt2w8Yu3BYjI";
        let challenge = "zmM4MSFoAXUmHp5JGndb-I83EDcjz6KBX3vDYzTnhHU";
        assert!(pkce_matches(verifier, challenge));
        assert!(!pkce_matches(
            "dBjftJeZ4CVP-mJ0kDFiyjpoSw4zFGgtt2w8Yu3BYjJ",
            challenge
        ));
        assert!(
            !pkce_matches("short", challenge),
            "verifiers have 43 to 128 characters"
        );
    }
}
