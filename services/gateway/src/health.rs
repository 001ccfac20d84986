//! Liveness and readiness probes, and the answer of HTTP APIs whose
//! database stopped answering.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{Value, json};

use crate::{App, READY_TIMEOUT};

pub(crate) fn routes() -> Router<App> {
    Router::new()
        .route("/health", get(health))
        .route("/ready", get(ready))
}

/// The process is up. Deliberately checks nothing else, so a database
/// outage does not make Kubernetes restart healthy pods.
async fn health() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// The gateway can serve: it is not shutting down, PostgreSQL answers and every backend reports
/// SERVING. Names what is missing, never why (no internal detail).
async fn ready(State(app): State<App>) -> (StatusCode, Json<Value>) {
    if !app.accepting.load(std::sync::atomic::Ordering::SeqCst) {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "draining"})),
        );
    }
    let database = tokio::time::timeout(READY_TIMEOUT, app.store.ping())
        .await
        .is_ok_and(|r| r.is_ok());
    let mut missing: Vec<&str> = app.backends.unhealthy().await;
    if !database {
        missing.push("database");
    }
    if missing.is_empty() {
        (StatusCode::OK, Json(json!({"status": "ready"})))
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "unavailable", "unavailable": missing})),
        )
    }
}

/// Answers 503 `unavailable` a request still waiting for its response
/// when the database stops answering (`mneme_store::Store::answering`),
/// instead of letting it wait out `MNEME_REQUEST_TIMEOUT_MS`.
pub(crate) async fn fail_when_database_silent(
    State(mut database): State<tokio::sync::watch::Receiver<bool>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    // Biased: an answer ready at once (a static page, metadata) is served
    // even while the database is silent.
    tokio::select! {
        biased;
        response = next.run(request) => response,
        () = mneme_proto::server::until_silent(&mut database) => {
            crate::error::ApiError(mneme_core::Error::unavailable(
                "the database is not answering; retry shortly",
            ))
            .into_response()
        }
    }
}
