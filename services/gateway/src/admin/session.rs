//! Dashboard sign-in: email and password (a platform admin's or a tenant
//! user's) for a random session token in a cookie. Redis keeps the session
//! under the token's hash; every request re-reads the person's status and
//! role from PostgreSQL, so disabling someone or changing their role takes
//! effect on their next click. State changes must carry the session's CSRF
//! token in `X-CSRF-Token` (the cookie alone proves nothing: browsers send
//! it with cross-site form posts).

use axum::Json;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use mneme_core::Error;
use mneme_store::users::Role;
use mneme_store::{TenantTx, platform_admins, users};
use serde::{Deserialize, Serialize};
use serde_json::json;
use subtle::ConstantTimeEq;
use uuid::Uuid;

use super::{Actor, Reply, Standing};
use crate::App;
use crate::error::ApiError;
use crate::limits::Failures;
use crate::oauth::{cookie_value, digest, random_token};

/// Who signed in, as the session in Redis remembers it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Signed {
    pub(crate) platform: bool,
    pub(crate) id: Uuid,
    pub(crate) email: String,
    pub(crate) tenant_id: Option<Uuid>,
    csrf: String,
}

fn cookie_name(app: &App) -> &'static str {
    if secure(app) {
        "__Host-mneme-admin"
    } else {
        "mneme-admin"
    }
}

fn secure(app: &App) -> bool {
    app.public_url.starts_with("https://")
}

fn cookie(app: &App, value: &str, max_age: u64) -> HeaderValue {
    let secure = if secure(app) { "; Secure" } else { "" };
    HeaderValue::from_str(&format!(
        "{}={value}; Path=/; HttpOnly; SameSite=Lax; Max-Age={max_age}{secure}",
        cookie_name(app)
    ))
    .expect("cookie values are visible ASCII")
}

fn session_key(token: &str) -> String {
    hex::encode(digest(token))
}

fn unauthenticated() -> ApiError {
    ApiError(Error::unauthenticated("sign in to the dashboard first"))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SignIn {
    #[serde(default)]
    email: String,
    #[serde(default)]
    password: String,
}

/// An account that may sign in: a platform admin or a tenant user.
enum Account {
    Platform(platform_admins::PlatformAdmin),
    User(users::User),
}

/// `POST /admin/api/session`.
pub(crate) async fn sign_in(State(app): State<App>, request: Request) -> Response {
    let ip = app.limiter.client_ip(&request);
    let body = axum::body::to_bytes(request.into_body(), 64 * 1024).await;
    let form: SignIn = match body.ok().and_then(|b| serde_json::from_slice(&b).ok()) {
        Some(form) => form,
        None => {
            return ApiError(Error::invalid_argument(
                "send {\"email\": ..., \"password\": ...} as JSON",
            ))
            .into_response();
        }
    };
    match sign_in_with(&app, form, ip).await {
        Ok(response) => response,
        Err(response) => response,
    }
}

async fn sign_in_with(
    app: &App,
    form: SignIn,
    ip: Option<std::net::IpAddr>,
) -> Result<Response, Response> {
    let account_subject =
        Failures::Account(hex::encode(digest(&users::normalize_email(&form.email))));
    let subjects: Vec<Failures> = ip
        .map(Failures::Address)
        .into_iter()
        .chain([account_subject])
        .collect();
    for subject in &subjects {
        if let Some(refusal) = app.limiter.check_failures(subject).await {
            return Err(refusal);
        }
    }
    let found = async {
        let mut db = app.store.client().await?;
        if let Some((admin, hash)) = platform_admins::for_sign_in(&db, &form.email).await? {
            return Ok(Some((Account::Platform(admin), hash)));
        }
        Ok::<_, mneme_store::StoreError>(
            users::for_sign_in(&mut db, &form.email)
                .await?
                .map(|(user, hash)| (Account::User(user), hash)),
        )
    }
    .await
    .map_err(|e| ApiError::from(e).into_response())?;
    let stored = found.as_ref().map(|(_, hash)| hash.clone());
    let password = form.password;
    // Verified even without an account, so timing does not tell which
    // emails exist.
    let matches = tokio::task::spawn_blocking(move || {
        mneme_core::password::verify(&password, stored.as_deref())
    })
    .await
    .unwrap_or(false);
    let Some((account, _)) = found.filter(|_| matches) else {
        for subject in &subjects {
            app.limiter.record_failure(subject).await;
        }
        return Err(ApiError(Error::unauthenticated(
            "that email and password do not match an account",
        ))
        .into_response());
    };
    let signed = match &account {
        Account::Platform(admin) => Signed {
            platform: true,
            id: admin.id,
            email: admin.email.clone(),
            tenant_id: None,
            csrf: random_token(),
        },
        Account::User(user) => Signed {
            platform: false,
            id: user.id,
            email: user.email.clone(),
            tenant_id: Some(user.tenant_id),
            csrf: random_token(),
        },
    };
    // A disabled tenant's people cannot sign in either.
    let standing = standing(app, &signed)
        .await
        .map_err(IntoResponse::into_response)?
        .ok_or_else(|| {
            ApiError(Error::unauthenticated(
                "that email and password do not match an account",
            ))
            .into_response()
        })?;
    let token = random_token();
    let ttl = app.admin.session_ttl;
    app.cache
        .put_admin_session(
            &session_key(&token),
            &serde_json::to_string(&signed).expect("a session serializes"),
            ttl,
        )
        .await
        .map_err(|error| {
            tracing::error!(%error, "dashboard session not stored");
            ApiError(Error::unavailable(
                "sign-in is unavailable right now; retry shortly",
            ))
            .into_response()
        })?;
    let recorded = async {
        let mut db = app.store.client().await?;
        match &account {
            Account::Platform(admin) => platform_admins::record_sign_in(&db, admin.id).await,
            Account::User(user) => {
                let tx = TenantTx::begin(&mut db, user.tenant_id).await?;
                users::record_sign_in(&tx, user.id).await?;
                tx.commit().await
            }
        }
    }
    .await;
    if let Err(error) = recorded {
        tracing::warn!(%error, "sign-in time not recorded");
    }
    let body = describe(app, &signed, standing)
        .await
        .map_err(|e| e.into_response())?;
    let mut response = Json(body).into_response();
    response.headers_mut().append(
        header::SET_COOKIE,
        cookie(app, &token, ttl.as_secs().max(1)),
    );
    Ok(response)
}

/// The `{me, csrfToken}` answer.
async fn describe(
    app: &App,
    signed: &Signed,
    standing: Standing,
) -> Result<serde_json::Value, ApiError> {
    let tenant = match signed.tenant_id {
        Some(id) => {
            let db = app.store.client().await?;
            mneme_store::tenants::find(&db, id).await?
        }
        None => None,
    };
    Ok(json!({
        "me": {
            "email": signed.email,
            "kind": if signed.platform { "platform" } else { "user" },
            "role": standing.name(),
            "tenantId": signed.tenant_id,
            "tenantName": tenant.map(|t| t.name),
        },
        "csrfToken": signed.csrf,
    }))
}

/// `GET /admin/api/session`.
pub(crate) async fn current(State(app): State<App>, actor: Actor) -> Reply {
    Ok(Json(describe(&app, &actor.signed, actor.standing).await?).into_response())
}

/// `DELETE /admin/api/session`: signs out (the session ends on every pod).
pub(crate) async fn sign_out(State(app): State<App>, headers: HeaderMap) -> Response {
    if let Some(token) = cookie_value(&headers, cookie_name(&app))
        && let Err(error) = app.cache.delete_admin_session(&session_key(token)).await
    {
        tracing::warn!(%error, "dashboard session not deleted");
    }
    let mut response = StatusCode::NO_CONTENT.into_response();
    response
        .headers_mut()
        .append(header::SET_COOKIE, cookie(&app, "", 0));
    response
}

/// The person's current standing, or `None` when they may no longer sign
/// in (disabled, deleted, tenant suspended).
async fn standing(app: &App, signed: &Signed) -> Result<Option<Standing>, ApiError> {
    let mut db = app.store.client().await?;
    if signed.platform {
        return Ok(platform_admins::is_active(&db, signed.id)
            .await?
            .then_some(Standing::Platform));
    }
    let Some(tenant_id) = signed.tenant_id else {
        return Ok(None);
    };
    let active_tenant = mneme_store::tenants::find(&db, tenant_id)
        .await?
        .is_some_and(|t| t.status == "active");
    if !active_tenant {
        return Ok(None);
    }
    let tx = TenantTx::begin(&mut db, tenant_id).await?;
    let role: Option<Role> = users::is_active(&tx, signed.id).await?;
    Ok(role.map(Standing::Tenant))
}

/// Middleware of every API route but sign-in: a live session, a person who
/// may still use it and, on state changes, the session's CSRF token.
pub(crate) async fn require_actor(
    State(app): State<App>,
    mut request: Request,
    next: Next,
) -> Response {
    let ip = app.limiter.client_ip(&request);
    let token = cookie_value(request.headers(), cookie_name(&app)).map(str::to_owned);
    let Some(token) = token.filter(|t| !t.is_empty()) else {
        return unauthenticated().into_response();
    };
    let raw = match app
        .cache
        .admin_session(&session_key(&token), app.admin.session_ttl)
        .await
    {
        Ok(Some(raw)) => raw,
        Ok(None) => return unauthenticated().into_response(),
        Err(error) => {
            tracing::error!(%error, "dashboard session not readable");
            return ApiError(Error::unavailable(
                "the dashboard is unavailable right now; retry shortly",
            ))
            .into_response();
        }
    };
    let Ok(signed) = serde_json::from_str::<Signed>(&raw) else {
        return unauthenticated().into_response();
    };
    let changes_state = !matches!(*request.method(), Method::GET | Method::HEAD);
    if changes_state {
        let presented = request
            .headers()
            .get("x-csrf-token")
            .map(|v| v.as_bytes())
            .unwrap_or_default();
        if !bool::from(presented.ct_eq(signed.csrf.as_bytes())) {
            return ApiError(Error::permission_denied(
                "missing or wrong X-CSRF-Token header (take it from GET /admin/api/session)",
            ))
            .into_response();
        }
    }
    let standing = match standing(&app, &signed).await {
        Ok(Some(standing)) => standing,
        Ok(None) => {
            let _ = app.cache.delete_admin_session(&session_key(&token)).await;
            return unauthenticated().into_response();
        }
        Err(error) => return error.into_response(),
    };
    request.extensions_mut().insert(Actor {
        signed,
        standing,
        ip,
    });
    next.run(request).await
}
