//! The gRPC server every backend runs: its own services plus
//! `grpc.health.v1` (for load balancers and Kubernetes probes, without a
//! principal) and server reflection (for grpcurl and debugging). Calls still
//! waiting when the database stops answering are failed with UNAVAILABLE at
//! once ([`until_silent`]).

use std::convert::Infallible;
use std::future::Future;
use std::sync::LazyLock;
use std::time::Duration;

use prometheus::HistogramVec;
use tracing::Instrument;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_util::task::TaskTracker;
use tonic::body::Body;
use tonic::server::NamedService;
use tonic::service::Routes;
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;

/// Serves `routes` on `listener` until `shutdown` completes, then drains
/// in-flight calls. `services` are the fully qualified names reported as
/// SERVING by the health service; `database` tells whether the database
/// answers (`mneme_store::Store::answering`).
pub async fn serve(
    routes: Routes,
    services: &[&str],
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
    database: watch::Receiver<bool>,
) -> Result<(), tonic::transport::Error> {
    let (health_reporter, health_service) = tonic_health::server::health_reporter();
    for service in services {
        health_reporter
            .set_service_status(*service, tonic_health::ServingStatus::Serving)
            .await;
    }
    let reflection = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(crate::FILE_DESCRIPTOR_SET)
        .build_v1()
        .expect("the embedded descriptor set is valid");
    let routes = routes.add_service(health_service).add_service(reflection);
    let routes = tonic::service::Routes::from(
        routes
            .prepare()
            .into_axum_router()
            .layer(axum::middleware::from_fn_with_state(
                database,
                fail_when_silent,
            ))
            .layer(axum::middleware::from_fn(track_call)),
    );
    // `Server::tcp_nodelay` does not apply to a caller-supplied listener;
    // without TCP_NODELAY every small response waits ~40 ms on Nagle and
    // delayed ACKs.
    let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
    Server::builder()
        .add_routes(routes)
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await
}

/// Calls served, by method and gRPC status, with the time to the response
/// headers (for streams: to the first message).
static SERVER_CALLS: LazyLock<HistogramVec> = LazyLock::new(|| {
    mneme_telemetry::metrics::latency_histogram(
        "mneme_grpc_server_handled_seconds",
        "gRPC calls served, by method and status code (time to the response headers).",
        &["method", "code"],
    )
});

/// Serves one call inside a span that continues the caller's trace, and
/// records it: the method is the last segment of the path
/// (`/mneme.v1.RecallService/Recall`, bounded by the proto files), the
/// code comes from a trailers-only error answer's `grpc-status` header;
/// other answers count as `OK` (a stream that fails later is not seen).
async fn track_call(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let method = request
        .uri()
        .path()
        .rsplit('/')
        .next()
        .unwrap_or_default()
        .to_owned();
    let span = tracing::info_span!(
        "grpc",
        rpc.system = "grpc",
        rpc.method = %method,
        trace_id = tracing::field::Empty,
    );
    mneme_telemetry::trace::continue_trace_from(&span, request.headers());
    if let Some(trace_id) = mneme_telemetry::trace::trace_id_of(&span) {
        span.record("trace_id", trace_id);
    }
    let started = std::time::Instant::now();
    let response = next.run(request).instrument(span).await;
    let code = response
        .headers()
        .get("grpc-status")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<i32>().ok())
        .map_or(tonic::Code::Ok, tonic::Code::from);
    SERVER_CALLS
        .with_label_values(&[method.as_str(), &format!("{code:?}")])
        .observe(started.elapsed().as_secs_f64());
    response
}

/// Resolves once `answering` turns `false` (at once if it is), never if its
/// sender is gone.
pub async fn until_silent(answering: &mut watch::Receiver<bool>) {
    if answering.wait_for(|answering| !answering).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Answers UNAVAILABLE a call still waiting when the database stops
/// answering: its statements get no answer, and waiting out the caller's
/// deadline would hold the caller and a pooled connection for nothing.
/// Health and reflection are never cut.
async fn fail_when_silent(
    axum::extract::State(mut database): axum::extract::State<watch::Receiver<bool>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let path = request.uri().path();
    if path.starts_with("/grpc.health.") || path.starts_with("/grpc.reflection.") {
        return next.run(request).await;
    }
    // Biased: an answer ready at once (a static page, metadata) is served
    // even while the database is silent.
    tokio::select! {
        biased;
        response = next.run(request) => response,
        () = until_silent(&mut database) => {
            // With the error detail, so the gateway passes the message on.
            crate::error::to_status(mneme_core::Error::unavailable(
                "the database stopped answering during the call, so a write may or may not \
                 have taken effect; retry shortly (with an idempotencyKey a repeated write is \
                 safe)",
            ))
            .into_http()
        }
    }
}

/// Serves one gRPC service (plus health and reflection) until `shutdown`.
pub async fn serve_service<S>(
    service: S,
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
    database: watch::Receiver<bool>,
) -> Result<(), tonic::transport::Error>
where
    S: tower::Service<http::Request<Body>, Error = Infallible>
        + NamedService
        + Clone
        + Send
        + Sync
        + 'static,
    S::Response: axum::response::IntoResponse,
    S::Future: Send + 'static,
{
    serve(
        Routes::new(service),
        &[S::NAME],
        listener,
        shutdown,
        database,
    )
    .await
}

/// How long a stopping backend waits for the work its calls left running,
/// well inside a pod's termination grace period (30 s by default).
const BACKGROUND_DRAIN: Duration = Duration::from_secs(10);

/// Lets the work a backend's calls left running on `tasks` (writes after
/// the answer) finish, for at most ten seconds. Call it once the server has
/// stopped, so that nothing new arrives: otherwise the process exits under
/// them and they are lost.
pub async fn finish_background(tasks: &TaskTracker) {
    tasks.close();
    if tokio::time::timeout(BACKGROUND_DRAIN, tasks.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            unfinished = tasks.len(),
            "background work still running at shutdown; abandoned"
        );
    }
}

/// Runs one RPC handler with the request's verified principal, mapping the
/// domain result to a gRPC response or status.
pub async fn handle<T, R, F, Fut>(
    request: tonic::Request<T>,
    handler: F,
) -> Result<tonic::Response<R>, tonic::Status>
where
    F: FnOnce(mneme_core::Principal, T) -> Fut,
    Fut: Future<Output = mneme_core::Result<R>>,
{
    let principal = crate::principal::principal(&request)?;
    handler(principal, request.into_inner())
        .await
        .map(tonic::Response::new)
        .map_err(crate::error::to_status)
}
