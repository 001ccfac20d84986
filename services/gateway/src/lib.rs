//! The gateway: mneme's stateless HTTP front door.
//!
//! It terminates MCP over Streamable HTTP at `/mcp` (rmcp), authenticates
//! every request, and forwards each tool call over gRPC to the recall and
//! remember services with the caller's principal signed into the metadata.
//! Any gateway pod can serve any request.
//!
//! Layout:
//! - [`run`] / [`serve`]: process wiring and the router.
//! - `auth`: bearer-credential middleware → [`mneme_core::Principal`].
//! - `tools`: the tool registry (schemas, permissions, handlers).
//! - `mcp`: the MCP server over the registry.
//! - `catalog`: MCP prompts and resources.
//! - `rest`: `POST /v1/tools/{name}` and `/openapi.json` over the registry.
//! - `backends`: gRPC clients of the backend services; `discovery` balances
//!   them over every address of a backend host (headless Services).
//! - `health`: `/health` (liveness) and `/ready` (dependencies).
//! - `error`: HTTP error bodies for non-MCP routes.
//!
//! - `session`: MCP sessions shared by all pods (Redis), same-id recovery.
//! - `limits`: rate limits and daily quotas (Redis, local fallback).
//! - `oauth`: the OAuth 2.1 authorization server (metadata, registration,
//!   sign-in and consent, tokens) whose access tokens `auth` accepts.
//! - `hygiene`: Origin/Host checks, CORS, the answer to a panicked handler.
//! - `sse`: the legacy HTTP+SSE transport (`/sse`, `/message`).
//! - `jsonrpc`: the peek at each MCP message and the gateway's own
//!   JSON-RPC refusals.
//! - `metrics`: the gateway's Prometheus metrics.
//! - `surfacing`: the active-surfacing engine and `POST /v1/surface`.
//! - `proxy`: tenants' upstream MCP servers behind mneme (`prefix__tool`),
//!   and `/v1/upstreams`.
//! - `admin`: the admin dashboard (`/admin`) and its API (`/admin/api/`),
//!   for people signed in with email and password.
//!
//! Middleware, outermost first: HTTP metrics → request id → trace → CORS → panic guard →
//! body limit → timeout → (on OAuth, admin and REST routes) 503 when the
//! database goes silent → (on MCP routes) Origin/Host check →
//! authentication → message peek → token scope → rate limits → (on `/mcp`) session
//! binding → rmcp.
#![forbid(unsafe_code)]

mod activity;
mod admin;
mod auth;
mod backends;
mod catalog;
mod discovery;
mod error;
mod health;
mod hygiene;
mod jsonrpc;
mod limits;
mod mcp;
mod metrics;
mod oauth;
mod proxy;
mod rest;
mod session;
mod sse;
mod surfacing;
mod tools;

use std::future::{Future, IntoFuture};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::http::{HeaderName, StatusCode};
use axum::middleware;
use axum::serve::ListenerExt;
use mneme_cache::Cache;
use mneme_config::Config;
use mneme_proto::principal::PrincipalSigner;
use mneme_store::Store;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceBuilder;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::timeout::TimeoutLayer;
use tower_http::trace::TraceLayer;

pub use backends::{BackendSettings, Backends, ProgressFuture};
pub use tools::reference::tools_markdown;

/// Shared state of the gateway's handlers: one reference count to clone,
/// as axum does for every stateful middleware of every request.
#[derive(Debug, Clone)]
pub struct App(Arc<AppState>);

impl std::ops::Deref for App {
    type Target = AppState;

    fn deref(&self) -> &AppState {
        &self.0
    }
}

/// What [`App`] shares.
#[derive(Debug)]
pub struct AppState {
    store: Store,
    cache: Cache,
    keys: auth::KeyResolver,
    backends: Backends,
    sessions: Arc<session::SessionLayer>,
    limiter: Arc<limits::Limiter>,
    oauth: oauth::Shared,
    sse: Arc<sse::SseStreams>,
    surfacer: Arc<surfacing::Surfacer>,
    proxy: Arc<proxy::Proxy>,
    /// Sessions' tool calls, for automatic reflection (`None`: off, or no
    /// language model).
    activity: Option<activity::ActivityLog>,
    /// Work the requests left running (activity-log writes), which a
    /// stopping gateway lets finish.
    background: TaskTracker,
    admin: mneme_config::AdminConfig,
    /// This pod's request counters over the last hour, for the dashboard.
    admin_history: Arc<admin::History>,
    /// Cancelled when the gateway shuts down: ends open streams.
    shutdown: CancellationToken,
    /// The gateway's public base URL, for links in responses and documents.
    public_url: String,
    limits: catalog::PublicLimits,
    /// False once shutdown began: `/ready` fails first, so load balancers
    /// stop sending new requests while in-flight ones finish.
    accepting: Arc<AtomicBool>,
}

impl App {
    /// `internal_token` also keys the session ids, so every pod of one
    /// deployment must share it.
    pub fn new(
        store: Store,
        cache: Cache,
        backends: Backends,
        config: &Config,
        internal_token: &str,
    ) -> anyhow::Result<Self> {
        let gateway = &config.gateway;
        let oauth = oauth::OAuth::new(config, store.clone(), cache.clone(), internal_token)?;
        let background = TaskTracker::new();
        Ok(Self(Arc::new(AppState {
            oauth: Arc::new(oauth),
            keys: auth::KeyResolver::new(store.clone(), gateway.auth_cache),
            sessions: Arc::new(session::SessionLayer::new(
                cache.clone(),
                internal_token,
                &gateway.sessions,
            )),
            limiter: Arc::new(limits::Limiter::new(
                cache.clone(),
                gateway.rate_limits.clone(),
                gateway.trusted_proxy_hops,
            )),
            surfacer: Arc::new(surfacing::Surfacer::new(
                config.surfacing.clone(),
                backends.clone(),
                cache.clone(),
                store.clone(),
            )?),
            proxy: Arc::new(
                proxy::Proxy::new(
                    config.proxy.clone(),
                    gateway.request_timeout,
                    store.clone(),
                    cache.clone(),
                )
                .map_err(|e| anyhow::anyhow!("{e}"))?,
            ),
            activity: activity::ActivityLog::new(
                cache.clone(),
                &config.auto_reflect,
                !config.consolidation.llm.is_empty(),
                mneme_cache::SessionLifetime {
                    min: gateway.sessions.min_ttl,
                    max: gateway.sessions.ttl,
                },
                background.clone(),
            ),
            background,
            admin: gateway.admin.clone(),
            admin_history: Arc::default(),
            store,
            cache,
            backends,
            sse: Arc::default(),
            shutdown: CancellationToken::new(),
            public_url: gateway.public_url.clone(),
            limits: catalog::PublicLimits::from_config(config),
            accepting: Arc::new(AtomicBool::new(true)),
        })))
    }
}

const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The gateway's router, with its middleware.
pub fn router(app: App, config: &mneme_config::GatewayConfig) -> Router {
    let max_body = config.max_body_bytes;
    let read_call = move |request, next| jsonrpc::read_call(request, next, max_body);
    let authenticate = || middleware::from_fn_with_state(app.clone(), auth::require_principal);
    let limit = || middleware::from_fn_with_state(app.clone(), limits::limit);
    let require_scope = || middleware::from_fn_with_state(app.clone(), auth::require_scope);
    let mcp = Router::new()
        .nest_service("/mcp", mcp::service(&app, config, app.shutdown.clone()))
        .layer(middleware::from_fn_with_state(
            app.clone(),
            session::bind_session,
        ))
        .layer(limit())
        .layer(require_scope())
        .layer(middleware::from_fn(read_call));
    let sse = sse::routes()
        .layer(limit())
        .layer(require_scope())
        .layer(middleware::from_fn(read_call));
    let lists = hygiene::AllowLists::new(config);
    let mcp_routes = Router::new()
        .merge(mcp)
        .merge(sse)
        .layer(authenticate())
        .layer(middleware::from_fn_with_state(
            lists.clone(),
            hygiene::check_origin_and_host,
        ));
    let rest = rest::routes()
        .merge(surfacing::http::routes())
        .merge(proxy::admin::routes())
        .layer(limit())
        .layer(require_scope())
        .layer(authenticate());
    // Plain HTTP APIs answer 503 at once when the database goes silent
    // under them; MCP calls get their tool error from the backends, which
    // cut theirs (`mneme_proto::server`), and a credential check of its own
    // (`auth`).
    let http_apis = Router::new()
        .merge(oauth::routes())
        .merge(admin::routes(&app))
        .merge(rest)
        .layer(middleware::from_fn_with_state(
            app.store.answering(),
            health::fail_when_database_silent,
        ));
    Router::new()
        .merge(health::routes())
        .merge(http_apis)
        .merge(mcp_routes)
        .with_state(app)
        .layer(
            ServiceBuilder::new()
                .layer(middleware::from_fn(metrics::track_http))
                .layer(middleware::from_fn(hygiene::close_after_refusal))
                .layer(SetRequestIdLayer::new(REQUEST_ID, MakeRequestUuid))
                .layer(TraceLayer::new_for_http().make_span_with(request_span))
                .layer(middleware::from_fn(keep_request_span))
                .layer(PropagateRequestIdLayer::new(REQUEST_ID))
                .layer(hygiene::cors(&lists))
                .layer(CatchPanicLayer::custom(hygiene::panic_response))
                .layer(RequestBodyLimitLayer::new(config.max_body_bytes))
                .layer(TimeoutLayer::with_status_code(
                    StatusCode::GATEWAY_TIMEOUT,
                    config.request_timeout,
                )),
        )
}

/// The span of one request: its ids tie every log line of the request
/// together, to the `X-Request-Id` the client sees and to the trace the
/// caller's `traceparent` started (or a new one).
fn request_span(request: &axum::http::Request<axum::body::Body>) -> tracing::Span {
    let request_id = request
        .headers()
        .get(REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let span = tracing::info_span!(
        "request",
        method = %request.method(),
        path = %request.uri().path(),
        request_id,
        trace_id = tracing::field::Empty,
    );
    mneme_telemetry::trace::continue_trace_from(&span, request.headers());
    if let Some(trace_id) = mneme_telemetry::trace::trace_id_of(&span) {
        span.record("trace_id", trace_id);
    }
    span
}

/// The request's span, kept on the request so work that runs outside it
/// (rmcp handles each MCP message on a task of its own) can join it.
#[derive(Debug, Clone)]
pub(crate) struct RequestSpan(pub(crate) tracing::Span);

async fn keep_request_span(
    mut request: axum::extract::Request,
    next: middleware::Next,
) -> axum::response::Response {
    request
        .extensions_mut()
        .insert(RequestSpan(tracing::Span::current()));
    next.run(request).await
}

/// Serves the gateway on `listener` until `shutdown`, then lets in-flight
/// requests finish.
pub async fn serve(
    app: App,
    config: &Config,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let stop = app.shutdown.clone();
    let router = router(app.clone(), &config.gateway);
    tracing::info!(addr = %listener.local_addr()?, mcp = %config.gateway.mcp_url(), "gateway listening");
    // Small responses must not wait on Nagle's algorithm.
    let listener = listener.tap_io(|tcp| {
        if let Err(error) = tcp.set_nodelay(true) {
            tracing::debug!(%error, "TCP_NODELAY could not be set");
        }
    });
    let accepting = app.accepting.clone();
    let grace = config.gateway.shutdown_grace;
    let flusher = spawn_usage_flusher(&app, config.gateway.rate_limits.usage_flush, stop.clone());
    spawn_revocation_listener(&app, stop.clone()).await;
    spawn_upstream_listener(&app, stop.clone()).await;
    let server = axum::serve(
        listener,
        router.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown({
        let stop = stop.clone();
        async move {
            shutdown.await;
            accepting.store(false, Ordering::SeqCst);
            tracing::info!(grace_secs = grace.as_secs(), "gateway draining");
            // Ends open MCP streams (clients reconnect after the SSE retry
            // delay, to another pod) so the graceful shutdown can complete.
            stop.cancel();
        }
    })
    .into_future();
    tokio::pin!(server);
    let result = tokio::select! {
        result = &mut server => result,
        () = async { stop.cancelled().await; tokio::time::sleep(grace).await } => {
            tracing::warn!("in-flight requests outlived the shutdown grace period");
            Ok(())
        }
    };
    // The last tallied tool calls reach `api_key_usage`, and the last
    // calls' activity Redis, before exit.
    let _ = flusher.await;
    app.limiter.flush_usage(&app.store).await;
    mneme_proto::server::finish_background(&app.background).await;
    result?;
    Ok(())
}

/// The pod's housekeeping: tallied tool calls into `api_key_usage` every
/// `every`, OAuth clients unused for `MNEME_OAUTH_CLIENT_IDLE_DAYS`
/// pruned hourly (every pod may do it; the delete is idempotent), and the
/// request counters sampled for the dashboard's charts.
fn spawn_usage_flusher(
    app: &App,
    every: Duration,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    let limiter = app.limiter.clone();
    let store = app.store.clone();
    let client_idle = app.oauth.config.client_idle;
    let history = app.admin_history.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut prune = tokio::time::interval(CLIENT_PRUNE_INTERVAL);
        prune.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut sample = tokio::time::interval(admin::SAMPLE_EVERY);
        sample.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tokio::select! {
                _ = tick.tick() => limiter.flush_usage(&store).await,
                _ = prune.tick() => prune_oauth_clients(&store, client_idle).await,
                _ = sample.tick() => history.sample(),
                () = stop.cancelled() => return,
            }
        }
    })
}

const CLIENT_PRUNE_INTERVAL: Duration = Duration::from_secs(3600);

/// Drops revoked keys from this pod's credential caches as soon as
/// `mneme keys revoke` announces them (the caches' lifetime bounds the
/// delay when Redis is down).
async fn spawn_revocation_listener(app: &App, stop: CancellationToken) {
    let mut listener = match app.cache.key_revocation_listener().await {
        Ok(listener) => listener,
        Err(error) => {
            tracing::warn!(%error, "key revocations apply when caches expire");
            return;
        }
    };
    let keys = app.keys.clone();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                revoked = listener.recv() => match revoked {
                    Some(id) => {
                        if let Ok(key_id) = id.parse() {
                            keys.forget_key(key_id);
                        }
                    }
                    None => return,
                },
                () = stop.cancelled() => return,
            }
        }
    });
}

/// Reloads a tenant's upstream registry on this pod as soon as another
/// pod (or the CLI) announces a change (without Redis the registry expires
/// on its own within a minute), and passes an upstream's own
/// `tools/list_changed` on to the tenant's sessions.
async fn spawn_upstream_listener(app: &App, stop: CancellationToken) {
    // Without Redis at start-up, registries still expire on their own and
    // the rest of the loop (upstream tool changes, housekeeping) runs.
    let mut announcements = match app.cache.upstreams_changed_listener().await {
        Ok(listener) => Some(listener),
        Err(error) => {
            tracing::warn!(%error, "upstream changes apply when registries expire");
            None
        }
    };
    let proxy = app.proxy.clone();
    let mut tool_changes = proxy.take_tool_changes();
    tokio::spawn(async move {
        let mut housekeeping = tokio::time::interval(Duration::from_secs(30));
        housekeeping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                changed = async {
                    match announcements.as_mut() {
                        Some(listener) => listener.recv().await,
                        None => std::future::pending().await,
                    }
                } => match changed {
                    Some(tenant) => {
                        if let Ok(tenant_id) = tenant.parse() {
                            proxy.reload(tenant_id).await;
                        }
                    }
                    // The subscriber ended: keep the rest of the loop.
                    None => announcements = None,
                },
                Some(tenant_id) = async {
                    match tool_changes.as_mut() {
                        Some(changes) => changes.recv().await,
                        None => std::future::pending().await,
                    }
                } => proxy.tell_sessions(tenant_id).await,
                _ = housekeeping.tick() => proxy.housekeeping(),
                () = stop.cancelled() => return,
            }
        }
    });
}

async fn prune_oauth_clients(store: &Store, idle: Duration) {
    let cutoff =
        chrono::Utc::now() - chrono::Duration::from_std(idle).unwrap_or(chrono::Duration::days(90));
    let pruned = async {
        let db = store.client().await?;
        mneme_store::oauth::prune_clients(&db, cutoff).await
    }
    .await;
    match pruned {
        Ok(0) => {}
        Ok(count) => tracing::info!(count, "unused OAuth clients pruned"),
        Err(error) => tracing::warn!(%error, "OAuth client pruning failed"),
    }
}

/// Runs the gateway as its own process.
pub async fn run(
    config: Config,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let token = config.require_internal_token()?;
    let store = Store::open(&config).await?;
    let backends = Backends::new(
        &BackendSettings::from_config(&config.gateway),
        PrincipalSigner::new(token.expose()),
    )?;
    let cache = Cache::from_config(&config.redis).await?;
    let app = App::new(store, cache, backends, &config, token.expose())?;
    Box::pin(serve(app, &config, listener, shutdown)).await
}

/// How long `/ready` waits on each dependency.
const READY_TIMEOUT: Duration = Duration::from_secs(2);
