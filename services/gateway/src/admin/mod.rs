//! The admin dashboard (`/admin`) and the JSON API it runs on
//! (`/admin/api/`), for people: platform admins and a tenant's owners,
//! admins and members. `docs/ADMIN.md` is the reference.
//!
//! Layout:
//! - this module: the routes, who is asking ([`Actor`], checked afresh on
//!   every request), which tenant a request acts in ([`InTenant`]), and the
//!   audit trail of every change;
//! - `session`: sign-in and sign-out, the session cookie and the CSRF check;
//! - `assets`: the dashboard's static files, embedded in the binary;
//! - `tenancy`: tenants, users, API keys and key groups;
//! - `memory`: the memory browser, amend/forget, export/import, the graph;
//! - `activity`: overview, MCP sessions, analytics, surfacing, upstreams,
//!   consolidation, usage, this pod's metrics and the audit log;
//! - `table`: every API route with who may call it; the router, the role
//!   checks and the OpenAPI document are all built from it;
//! - `openapi`: `/admin/api/openapi.json`.
//!
//! Isolation: a tenant user's requests only ever open transactions of
//! their own tenant, so another tenant's objects are absent (404), the same
//! answer as for objects that do not exist.

mod activity;
mod assets;
mod memory;
mod openapi;
mod session;
mod table;
mod tenancy;

use std::net::IpAddr;

use axum::extract::{FromRequestParts, Query};
use axum::http::request::Parts;
use axum::http::{HeaderValue, header};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use mneme_core::principal::DEFAULT_AGENT_ID;
use mneme_core::{Error, ErrorCode, Permission, Principal};
use mneme_store::admin_audit::{self, Actor as AuditActor};
use mneme_store::{TenantTx, users::Role};
use serde::Deserialize;
use serde_json::Value;
use uuid::Uuid;

use crate::App;
use crate::error::ApiError;

pub(crate) use activity::{History, SAMPLE_EVERY};
pub(crate) use session::Signed;
use table::Access;

/// The admin routes: the dashboard's pages and the API behind sign-in.
pub(crate) fn routes(app: &App) -> Router<App> {
    // Every route but signing in and the API's description needs a session.
    let api = table::api(Router::new(), |access| access != Access::Anyone).layer(
        middleware::from_fn_with_state(app.clone(), session::require_actor),
    );
    let api = table::api(api, |access| access == Access::Anyone)
        .fallback(|| async { ApiError(Error::new(ErrorCode::NotFound, "no such admin API route")) })
        .layer(middleware::map_response(api_headers));
    Router::new()
        .nest("/admin/api", api)
        .merge(assets::routes())
}

/// No admin answer is cached, framed or sniffed.
async fn api_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("default-src 'none'; frame-ancestors 'none'"),
    );
    response
}

/// What the person signed in may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Standing {
    Platform,
    Tenant(Role),
}

impl Standing {
    fn name(self) -> &'static str {
        match self {
            Standing::Platform => "platform",
            Standing::Tenant(role) => role.as_str(),
        }
    }

    /// Platform admins and a tenant's owners and admins manage it.
    fn manages(self) -> bool {
        match self {
            Standing::Platform => true,
            Standing::Tenant(role) => role.manages_keys(),
        }
    }
}

/// The person behind a dashboard request, verified on this request.
#[derive(Debug, Clone)]
pub(crate) struct Actor {
    pub(crate) signed: Signed,
    pub(crate) standing: Standing,
    pub(crate) ip: Option<IpAddr>,
}

impl Actor {
    /// Fails with 403 unless the person manages the tenant.
    pub(crate) fn require_manage(&self) -> Result<(), Error> {
        if self.standing.manages() {
            Ok(())
        } else {
            Err(Error::permission_denied(
                "only the tenant's owners and admins may do this",
            ))
        }
    }

    pub(crate) fn require_platform(&self) -> Result<(), Error> {
        if self.standing == Standing::Platform {
            Ok(())
        } else {
            Err(Error::permission_denied("only platform admins may do this"))
        }
    }

    fn audit_actor(&self) -> AuditActor {
        AuditActor {
            name: self.signed.email.clone(),
            kind: match self.standing {
                Standing::Platform => "platform",
                Standing::Tenant(_) => "user",
            },
            ip: self.ip,
        }
    }

    /// Appends an audit entry to `tx` (committed with the change).
    pub(crate) async fn audit(
        &self,
        tx: &TenantTx<'_>,
        action: &str,
        target: impl std::fmt::Display,
        detail: Value,
    ) -> Result<(), Error> {
        admin_audit::record(
            tx,
            &self.audit_actor(),
            action,
            &target.to_string(),
            &detail,
        )
        .await?;
        Ok(())
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Actor {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<Actor>()
            .cloned()
            .ok_or_else(|| ApiError(Error::unauthenticated("sign in to the dashboard first")))
    }
}

#[derive(Debug, Deserialize)]
struct TenantParam {
    tenant: Option<String>,
}

/// The tenant a request acts in, with the person asking: a tenant user's
/// own tenant, or the one a platform admin names with `?tenant=`.
#[derive(Debug, Clone)]
pub(crate) struct InTenant {
    pub(crate) actor: Actor,
    pub(crate) tenant_id: Uuid,
}

impl InTenant {
    /// Records a change made outside a transaction of this module (by a
    /// backend service or in Redis) in an audit transaction of its own.
    pub(crate) async fn audit_done(
        &self,
        app: &App,
        action: &str,
        target: impl std::fmt::Display,
        detail: Value,
    ) -> Result<(), Error> {
        let mut db = app.store.client().await?;
        let tx = TenantTx::begin(&mut db, self.tenant_id).await?;
        self.actor.audit(&tx, action, target, detail).await?;
        tx.commit().await?;
        Ok(())
    }

    /// The authority a person acts with through the backends: `key_id`'s
    /// identity (what is written stays the key's), the person as the user,
    /// and `permissions`.
    pub(crate) fn acting_as(
        &self,
        key_id: Uuid,
        permissions: Vec<Permission>,
        session_id: Option<String>,
    ) -> Principal {
        Principal {
            tenant_id: self.tenant_id,
            key_id,
            group_key_ids: Vec::new(),
            user_id: Some(self.actor.signed.id),
            permissions,
            workspace: None,
            mode: None,
            session_id,
            agent_id: DEFAULT_AGENT_ID.to_owned(),
        }
    }
}

fn tenant_not_found() -> Error {
    Error::new(ErrorCode::NotFound, "no such tenant")
}

impl FromRequestParts<App> for InTenant {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, app: &App) -> Result<Self, Self::Rejection> {
        let actor = Actor::from_request_parts(parts, app).await?;
        let Query(param) = Query::<TenantParam>::from_request_parts(parts, app)
            .await
            .map_err(|e| ApiError(Error::invalid_argument(e.body_text())))?;
        let named = match param.tenant.as_deref().filter(|t| !t.is_empty()) {
            Some(raw) => Some(raw.parse::<Uuid>().map_err(|_| tenant_not_found())?),
            None => None,
        };
        let tenant_id = match (actor.standing, actor.signed.tenant_id) {
            (Standing::Platform, _) => {
                let id = named.ok_or_else(|| {
                    Error::invalid_argument("name the tenant to act in with ?tenant=<tenant id>")
                })?;
                let db = app.store.client().await?;
                if mneme_store::tenants::find(&db, id).await?.is_none() {
                    return Err(tenant_not_found().into());
                }
                id
            }
            (Standing::Tenant(_), Some(own)) => match named {
                // Another tenant's id looks exactly like one that does not exist.
                Some(other) if other != own => return Err(tenant_not_found().into()),
                _ => own,
            },
            (Standing::Tenant(_), None) => return Err(Error::internal().into()),
        };
        Ok(Self { actor, tenant_id })
    }
}

/// A JSON request body whose rejections answer in the API's error shape
/// (axum's own answer plain text).
#[derive(Debug)]
pub(crate) struct JsonBody<T>(pub(crate) T);

impl<T, S> axum::extract::FromRequest<S> for JsonBody<T>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(request: axum::extract::Request, state: &S) -> Result<Self, ApiError> {
        match Json::<T>::from_request(request, state).await {
            Ok(Json(value)) => Ok(Self(value)),
            Err(rejection) => Err(ApiError(Error::invalid_argument(rejection.body_text()))),
        }
    }
}

/// A handler's answer: JSON, or the error in the API's shape.
pub(crate) type Reply = Result<Response, ApiError>;

pub(crate) fn json(value: Value) -> Reply {
    Ok(Json(value).into_response())
}

pub(crate) fn not_found(what: &str) -> Error {
    Error::new(ErrorCode::NotFound, format!("no such {what}"))
}

/// Parses an id from the path; a malformed id is as absent as a missing one.
pub(crate) fn parse_id(raw: &str, what: &str) -> Result<Uuid, Error> {
    raw.parse().map_err(|_| not_found(what))
}
