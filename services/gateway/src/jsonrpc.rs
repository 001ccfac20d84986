//! What the gateway needs to know about an MCP request before rmcp parses
//! it (method, tool, requested protocol version), and JSON-RPC error
//! responses for the refusals the gateway makes itself (rate limits,
//! unknown sessions, version mismatches).
//!
//! rmcp stays the parser of record: a body that is not JSON passes through
//! untouched, and rmcp answers it. A body that repeats a name in an object is
//! refused here, since the two parsers could read it differently.

use axum::body::{Body, to_bytes};
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::time::Instant;

use crate::metrics::METRICS;

/// The request's `_meta` key that marks the 2026-07-28 (stateless) era.
const MODERN_VERSION_META: &str = "io.modelcontextprotocol/protocolVersion";

/// The parts of one JSON-RPC message the gateway routes and limits by.
#[derive(Debug, Clone, Default)]
pub(crate) struct McpCall {
    pub(crate) method: Option<String>,
    pub(crate) id: Option<Value>,
    /// `params.name` of a `tools/call`.
    pub(crate) tool: Option<String>,
    /// `params.protocolVersion` of an `initialize`.
    pub(crate) initialize_version: Option<String>,
    /// Carries the per-request protocol version of the 2026-07-28 era.
    pub(crate) modern: bool,
}

impl McpCall {
    pub(crate) fn is_initialize(&self) -> bool {
        self.method.as_deref() == Some("initialize")
    }

    fn from_message(message: &Value) -> Self {
        let params = message.get("params");
        let text = |value: Option<&Value>| value.and_then(Value::as_str).map(str::to_owned);
        let method = text(message.get("method"));
        Self {
            tool: (method.as_deref() == Some("tools/call"))
                .then(|| text(params.and_then(|p| p.get("name"))))
                .flatten(),
            initialize_version: (method.as_deref() == Some("initialize"))
                .then(|| text(params.and_then(|p| p.get("protocolVersion"))))
                .flatten(),
            modern: params
                .and_then(|p| p.get("_meta"))
                .and_then(|meta| meta.get(MODERN_VERSION_META))
                .is_some(),
            id: message.get("id").cloned(),
            method,
        }
    }

    /// Label value for metrics: the method when it is one of MCP's, else
    /// `other` (clients choose method names; labels must stay bounded).
    pub(crate) fn method_label(&self) -> &'static str {
        const KNOWN: &[&str] = &[
            "initialize",
            "ping",
            "server/discover",
            "tools/list",
            "tools/call",
            "prompts/list",
            "prompts/get",
            "resources/list",
            "resources/read",
            "resources/templates/list",
            "completion/complete",
            "logging/setLevel",
            "notifications/initialized",
            "notifications/cancelled",
        ];
        match self.method.as_deref() {
            None => "none",
            Some(method) => KNOWN
                .iter()
                .find(|known| **known == method)
                .copied()
                .unwrap_or("other"),
        }
    }
}

/// Middleware on `/mcp`: [`peek`]s at the message, then times the response
/// by method and status (`mneme_mcp_request_seconds`).
pub(crate) async fn read_call(request: Request, next: Next, limit: usize) -> Response {
    let request = match peek(request, limit).await {
        Ok(request) => request,
        Err(refusal) => return refusal,
    };
    let method = request
        .extensions()
        .get::<McpCall>()
        .map_or("none", McpCall::method_label);
    let started = Instant::now();
    let response = next.run(request).await;
    METRICS
        .requests
        .with_label_values(&[method, response.status().as_str()])
        .observe(started.elapsed().as_secs_f64());
    response
}

/// Reads the body of a POST, records its [`McpCall`] in the request
/// extensions and puts the body back. `limit` bounds the bytes read (the
/// body-limit layer has already refused larger declared bodies).
async fn peek(request: Request, limit: usize) -> Result<Request, Response> {
    if request.method() != axum::http::Method::POST {
        return Ok(request);
    }
    let (mut parts, body) = request.into_parts();
    let bytes = match to_bytes(body, limit).await {
        Ok(bytes) => bytes,
        Err(_) => {
            METRICS
                .rejected
                .with_label_values(&["body_too_large"])
                .inc();
            return Err((StatusCode::PAYLOAD_TOO_LARGE, "request body too large").into_response());
        }
    };
    match mneme_core::json::from_slice(&bytes) {
        Ok(message) => {
            parts.extensions.insert(McpCall::from_message(&message));
        }
        // A repeated name: this module and rmcp could read different
        // methods or tools from the body (see `mneme_core::json`).
        Err(error) if error.is_data() => {
            METRICS.rejected.with_label_values(&["repeated_name"]).inc();
            return Err(error_response(
                StatusCode::BAD_REQUEST,
                PARSE_ERROR,
                &format!("Parse error: {error}"),
                None,
            ));
        }
        // Not JSON: rmcp answers it.
        Err(_) => {}
    }
    Ok(Request::from_parts(parts, Body::from(bytes)))
}

/// A JSON-RPC error answered by the gateway itself.
pub(crate) fn error_response(
    status: StatusCode,
    code: i64,
    message: &str,
    id: Option<&Value>,
) -> Response {
    let body = json!({
        "jsonrpc": "2.0",
        "id": id.cloned().unwrap_or(Value::Null),
        "error": {"code": code, "message": message},
    });
    let mut response = (status, axum::Json(body)).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// JSON-RPC's "Parse error".
pub(crate) const PARSE_ERROR: i64 = -32700;

/// JSON-RPC code of the gateway's own refusals (the MCP transport's
/// "server error" range).
pub(crate) const SERVER_ERROR: i64 = -32000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_tool_calls_initialize_and_the_modern_era() {
        let call = McpCall::from_message(&json!({
            "jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": "recall", "arguments": {}}
        }));
        assert_eq!(call.tool.as_deref(), Some("recall"));
        assert_eq!(call.method_label(), "tools/call");
        assert!(!call.modern && !call.is_initialize());

        let init = McpCall::from_message(&json!({
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18"}
        }));
        assert!(init.is_initialize());
        assert_eq!(init.initialize_version.as_deref(), Some("2025-06-18"));

        let modern = McpCall::from_message(&json!({
            "jsonrpc": "2.0", "id": 2, "method": "x/unknown",
            "params": {"_meta": {MODERN_VERSION_META: "2026-07-28"}}
        }));
        assert!(modern.modern);
        assert_eq!(modern.method_label(), "other");
    }
}
