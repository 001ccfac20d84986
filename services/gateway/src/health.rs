//! Liveness and readiness probes.

use axum::extract::State;
use axum::http::StatusCode;
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
