//! `/v1/upstreams`: a tenant's administrators register, change and remove
//! the upstream MCP servers its agents reach through mneme. Needs the
//! `admin` permission. Headers go in and never come out: responses name
//! the headers that are set, not their values.
//!
//! - `GET /v1/upstreams`: every upstream, with this pod's view of its health.
//! - `POST /v1/upstreams`: register (`name`, `url`, optional `prefix`,
//!   `transport`, `headers` and settings).
//! - `GET|PATCH|DELETE /v1/upstreams/{name}`: read, change (absent fields
//!   stay, `null` returns a setting to the default), remove.
//!
//! Every change bumps the upstream's version and is announced to all pods,
//! which reload the tenant's registry and reconnect.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Json, Router};
use mneme_core::{Error, ErrorCode, Permission, Principal};
use mneme_mcp_upstream::registration::{UpstreamInput, new_settings};
use mneme_store::TenantTx;
use mneme_store::upstreams::{self, Upstream};
use serde::Serialize;
use serde_json::Value;

use crate::App;
use crate::error::ApiError;

pub(crate) fn routes() -> Router<App> {
    Router::new()
        .route("/v1/upstreams", get(list).post(create))
        .route(
            "/v1/upstreams/{name}",
            get(show).patch(update).delete(remove),
        )
}

/// An upstream as the API shows it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct UpstreamView {
    id: String,
    name: String,
    prefix: String,
    transport: String,
    url: String,
    /// Names of the headers that are set; values are never shown.
    header_names: Vec<String>,
    enabled: bool,
    surfacing_enabled: bool,
    exclude_tools: Vec<String>,
    compression: Option<String>,
    max_result_chars: Option<i32>,
    cache_ttl_secs: Option<i32>,
    connect_timeout_ms: Option<i32>,
    call_timeout_ms: Option<i32>,
    overall_timeout_ms: Option<i32>,
    max_retries: Option<i32>,
    breaker_failures: Option<i32>,
    breaker_reset_ms: Option<i32>,
    max_concurrency: Option<i32>,
    tool_overrides: Value,
    version: i64,
    created_at: String,
    updated_at: String,
    /// This pod's view: `connected` and the breaker state, once used.
    #[serde(skip_serializing_if = "Option::is_none")]
    health: Option<Value>,
    /// This pod's figures per tool since it started.
    stats: std::collections::BTreeMap<String, crate::proxy::ToolStats>,
}

fn view(app: &App, tenant_id: uuid::Uuid, upstream: Upstream) -> UpstreamView {
    let health = app.proxy.health(tenant_id, upstream.id).map(|h| {
        serde_json::json!({
            "connected": h.connected,
            "breaker": format!("{:?}", h.breaker).to_lowercase(),
        })
    });
    let stats = app.proxy.stats(tenant_id, upstream.id);
    let s = upstream.settings;
    UpstreamView {
        id: upstream.id.to_string(),
        name: upstream.name,
        prefix: s.prefix,
        transport: s.transport,
        url: s.url,
        header_names: upstream.headers.names,
        enabled: s.enabled,
        surfacing_enabled: s.surfacing_enabled,
        exclude_tools: s.exclude_tools,
        compression: s.compression,
        max_result_chars: s.max_result_chars,
        cache_ttl_secs: s.cache_ttl_secs,
        connect_timeout_ms: s.connect_timeout_ms,
        call_timeout_ms: s.call_timeout_ms,
        overall_timeout_ms: s.overall_timeout_ms,
        max_retries: s.max_retries,
        breaker_failures: s.breaker_failures,
        breaker_reset_ms: s.breaker_reset_ms,
        max_concurrency: s.max_concurrency,
        tool_overrides: s.tool_overrides,
        version: upstream.version,
        created_at: upstream.created_at.to_rfc3339(),
        updated_at: upstream.updated_at.to_rfc3339(),
        health,
        stats,
    }
}

/// An upstream as the API shows it, as JSON (for the admin dashboard).
pub(crate) fn view_json(app: &App, tenant_id: uuid::Uuid, upstream: Upstream) -> Value {
    json(view(app, tenant_id, upstream))
}

/// The same answer whether the upstream does not exist or belongs to
/// another tenant (row-level security makes both look absent).
fn not_found(name: &str) -> Error {
    Error::new(ErrorCode::NotFound, format!("no upstream named `{name}`"))
}

fn conflict(error: &mneme_store::StoreError) -> Option<Error> {
    error.is_unique_violation().then(|| {
        Error::new(
            ErrorCode::Conflict,
            "another upstream of this tenant already has this name or prefix",
        )
    })
}

async fn changed(app: &App, principal: &Principal) {
    app.proxy.reload(principal.tenant_id).await;
    app.cache
        .announce_upstreams_changed(&principal.tenant_id.to_string())
        .await;
}

fn answer(result: Result<(StatusCode, Value), Error>) -> Response {
    match result {
        Ok((status, body)) => (status, Json(body)).into_response(),
        Err(error) => ApiError(error).into_response(),
    }
}

fn json(value: impl Serialize) -> Value {
    mneme_core::json::to_value(&value).unwrap_or(Value::Null)
}

async fn list(State(app): State<App>, Extension(principal): Extension<Principal>) -> Response {
    answer(
        async {
            principal.require(Permission::Admin)?;
            let mut db = app.store.client().await?;
            let tx = TenantTx::begin(&mut db, principal.tenant_id).await?;
            let rows = upstreams::list(&tx).await?;
            let views: Vec<UpstreamView> = rows
                .into_iter()
                .map(|u| view(&app, principal.tenant_id, u))
                .collect();
            Ok((StatusCode::OK, serde_json::json!({"upstreams": views})))
        }
        .await,
    )
}

async fn show(
    State(app): State<App>,
    Extension(principal): Extension<Principal>,
    Path(name): Path<String>,
) -> Response {
    answer(
        async {
            principal.require(Permission::Admin)?;
            let mut db = app.store.client().await?;
            let tx = TenantTx::begin(&mut db, principal.tenant_id).await?;
            let upstream = upstreams::find(&tx, &name)
                .await?
                .ok_or_else(|| not_found(&name))?;
            Ok((
                StatusCode::OK,
                json(view(&app, principal.tenant_id, upstream)),
            ))
        }
        .await,
    )
}

fn invalid(message: String) -> Error {
    Error::invalid_argument(message)
}

fn parse_input(body: &Value) -> Result<UpstreamInput, Error> {
    serde_json::from_value(body.clone())
        .map_err(|e| Error::invalid_argument(format!("invalid upstream: {e}")))
}

async fn create(
    State(app): State<App>,
    Extension(principal): Extension<Principal>,
    body: Option<Json<Value>>,
) -> Response {
    answer(
        async {
            principal.require(Permission::Admin)?;
            let Json(body) =
                body.ok_or_else(|| Error::invalid_argument("send the upstream as a JSON body"))?;
            let input = parse_input(&body)?;
            let name = input
                .name
                .clone()
                .ok_or_else(|| Error::invalid_argument("an upstream needs a `name`"))?;
            let settings = input
                .apply(&name, new_settings(), app.proxy.policy())
                .map_err(invalid)?;
            let headers = input
                .sealed_headers(app.proxy.header_key(), principal.tenant_id)
                .map_err(invalid)?
                .unwrap_or_default();
            let mut db = app.store.client().await?;
            let tx = TenantTx::begin(&mut db, principal.tenant_id).await?;
            if upstreams::count(&tx).await? >= app.proxy.config().max_upstreams {
                return Err(Error::new(
                    ErrorCode::QuotaExceeded,
                    format!(
                        "a tenant may register at most {} upstreams",
                        app.proxy.config().max_upstreams
                    ),
                ));
            }
            let created = match upstreams::create(&tx, &name, &settings, &headers).await {
                Ok(created) => created,
                Err(error) => return Err(conflict(&error).unwrap_or_else(|| error.into())),
            };
            tx.commit().await?;
            changed(&app, &principal).await;
            tracing::info!(upstream = %created.id, "upstream registered");
            Ok((
                StatusCode::CREATED,
                json(view(&app, principal.tenant_id, created)),
            ))
        }
        .await,
    )
}

async fn update(
    State(app): State<App>,
    Extension(principal): Extension<Principal>,
    Path(name): Path<String>,
    body: Option<Json<Value>>,
) -> Response {
    answer(
        async {
            principal.require(Permission::Admin)?;
            let Json(body) =
                body.ok_or_else(|| Error::invalid_argument("send the changes as a JSON body"))?;
            let input = parse_input(&body)?;
            if input.name.as_ref().is_some_and(|n| *n != name) {
                return Err(Error::invalid_argument(
                    "an upstream cannot be renamed; register it under the new name",
                ));
            }
            let headers = input
                .sealed_headers(app.proxy.header_key(), principal.tenant_id)
                .map_err(invalid)?;
            let mut db = app.store.client().await?;
            let tx = TenantTx::begin(&mut db, principal.tenant_id).await?;
            let current = upstreams::find(&tx, &name)
                .await?
                .ok_or_else(|| not_found(&name))?;
            let settings = input
                .apply(&name, current.settings, app.proxy.policy())
                .map_err(invalid)?;
            let updated = match upstreams::update(&tx, &name, &settings, headers.as_ref()).await {
                Ok(updated) => updated.ok_or_else(|| not_found(&name))?,
                Err(error) => return Err(conflict(&error).unwrap_or_else(|| error.into())),
            };
            tx.commit().await?;
            changed(&app, &principal).await;
            Ok((
                StatusCode::OK,
                json(view(&app, principal.tenant_id, updated)),
            ))
        }
        .await,
    )
}

async fn remove(
    State(app): State<App>,
    Extension(principal): Extension<Principal>,
    Path(name): Path<String>,
) -> Response {
    answer(
        async {
            principal.require(Permission::Admin)?;
            let mut db = app.store.client().await?;
            let tx = TenantTx::begin(&mut db, principal.tenant_id).await?;
            if !upstreams::delete(&tx, &name).await? {
                return Err(not_found(&name));
            }
            tx.commit().await?;
            changed(&app, &principal).await;
            Ok((StatusCode::OK, serde_json::json!({"removed": name})))
        }
        .await,
    )
}
