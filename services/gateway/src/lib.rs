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
//! - `backends`: gRPC clients of the backend services.
//! - `health`: `/health` (liveness) and `/ready` (dependencies).
//! - `error`: HTTP error bodies for non-MCP routes.
//!
//! Middleware, outermost first: request id → trace → panic guard → body
//! limit → (on `/mcp`) authentication.
#![forbid(unsafe_code)]

mod auth;
mod backends;
mod catalog;
mod error;
mod health;
mod mcp;
mod rest;
mod tools;

use std::future::Future;
use std::time::Duration;

use axum::Router;
use axum::http::HeaderName;
use axum::middleware;
use axum::serve::ListenerExt;
use mneme_config::Config;
use mneme_proto::principal::PrincipalSigner;
use mneme_store::Store;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tower::ServiceBuilder;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::TraceLayer;

pub use backends::{Backends, ProgressFuture};
pub use tools::reference::tools_markdown;

/// Shared state of the gateway's handlers. Cheap to clone.
#[derive(Debug, Clone)]
pub struct App {
    store: Store,
    keys: auth::KeyResolver,
    backends: Backends,
    /// The gateway's public base URL, for links in responses and documents.
    public_url: String,
    limits: catalog::PublicLimits,
}

impl App {
    pub fn new(store: Store, backends: Backends, config: &Config) -> Self {
        Self {
            keys: auth::KeyResolver::new(store.clone(), config.gateway.auth_cache),
            store,
            backends,
            public_url: config.gateway.public_url.clone(),
            limits: catalog::PublicLimits::from_config(config),
        }
    }
}

const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The gateway's router, with its middleware.
pub fn router(
    app: App,
    config: &mneme_config::GatewayConfig,
    shutdown: CancellationToken,
) -> Router {
    let authenticated = Router::new()
        .nest_service(
            "/mcp",
            mcp::service(app.backends.clone(), app.limits.clone(), config, shutdown),
        )
        .merge(rest::routes())
        .layer(middleware::from_fn_with_state(
            app.clone(),
            auth::require_principal,
        ));
    Router::new()
        .merge(health::routes())
        .merge(authenticated)
        .with_state(app)
        .layer(
            ServiceBuilder::new()
                .layer(SetRequestIdLayer::new(REQUEST_ID, MakeRequestUuid))
                .layer(TraceLayer::new_for_http())
                .layer(PropagateRequestIdLayer::new(REQUEST_ID))
                .layer(CatchPanicLayer::new())
                .layer(RequestBodyLimitLayer::new(config.max_body_bytes)),
        )
}

/// Serves the gateway on `listener` until `shutdown`, then lets in-flight
/// requests finish.
pub async fn serve(
    app: App,
    config: &Config,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let stop = CancellationToken::new();
    let router = router(app, &config.gateway, stop.clone());
    tracing::info!(addr = %listener.local_addr()?, mcp = %config.gateway.mcp_url(), "gateway listening");
    // Small responses must not wait on Nagle's algorithm.
    let listener = listener.tap_io(|tcp| {
        if let Err(error) = tcp.set_nodelay(true) {
            tracing::debug!(%error, "TCP_NODELAY could not be set");
        }
    });
    axum::serve(listener, router)
        .with_graceful_shutdown(async move {
            shutdown.await;
            // Ends open MCP streams so the graceful shutdown can complete.
            stop.cancel();
        })
        .await?;
    Ok(())
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
        &config.gateway.recall_url,
        &config.gateway.remember_url,
        PrincipalSigner::new(token.expose()),
        config.gateway.backend_timeout,
    )?;
    let app = App::new(store, backends, &config);
    serve(app, &config, listener, shutdown).await
}

/// How long `/ready` waits on each dependency.
const READY_TIMEOUT: Duration = Duration::from_secs(2);
