//! HTTP responses for errors outside MCP (MCP reports errors in JSON-RPC).

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use mneme_core::Error;
use serde_json::json;

/// An error answered as `{"error": {"code", "message", "trace_id"}}` with
/// the status of its [`mneme_core::ErrorCode`].
#[derive(Debug)]
pub(crate) struct ApiError(pub(crate) Error);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.0.code.http_status())
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut body = json!({"error": {"code": self.0.code.as_str(), "message": self.0.message}});
        // Quoting it to support finds the request's trace and logs.
        if let Some(trace_id) = mneme_telemetry::trace::current_trace_id() {
            body["error"]["trace_id"] = trace_id.into();
        }
        (status, Json(body)).into_response()
    }
}

impl From<Error> for ApiError {
    fn from(error: Error) -> Self {
        Self(error)
    }
}

impl From<mneme_store::StoreError> for ApiError {
    fn from(error: mneme_store::StoreError) -> Self {
        Self(error.into())
    }
}
