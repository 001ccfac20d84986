//! The MCP endpoint: rmcp's Streamable HTTP service with mneme's tools.
//!
//! Tool names, JSON schemas and MCP result shapes live only here; tools
//! translate between JSON and the gRPC contract and call the backends.
//! Argument errors and domain errors are tool results with `isError: true`
//! (MCP 2025-11-25, SEP-1303), so the model can read and correct them;
//! only protocol faults become JSON-RPC errors (see
//! [`mneme_core::ErrorCode::jsonrpc_code`]).

mod memory_tools;

use std::sync::Arc;

use http::request::Parts;
use mneme_core::{Error, Principal};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::IntoCallToolResult;
use rmcp::model::{
    CallToolResponse, CallToolResult, ContentBlock, Implementation, JsonObject, ServerCapabilities,
    ServerConfig,
};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ServerHandler, tool_handler};
use serde::de::DeserializeOwned;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::backends::Backends;

/// Instructions sent in `initialize`: how an agent should use the tools.
const INSTRUCTIONS: &str = "mneme is your long-term memory. Call `recall` before answering \
questions about the user, their projects, preferences or past decisions. Call `remember` \
for each durable, self-contained fact worth keeping (one fact per call, pronouns resolved, \
concrete names and numbers). Call `forget` for memories that are wrong or obsolete.";

/// The MCP server: one instance per session, sharing the backend clients.
#[derive(Debug, Clone)]
pub(crate) struct MemoryServer {
    backends: Backends,
    tool_router: ToolRouter<Self>,
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for MemoryServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(
                Implementation::new("mneme", env!("CARGO_PKG_VERSION"))
                    .with_title("mneme long-term memory"),
            )
            .with_instructions(INSTRUCTIONS)
    }
}

/// The Streamable HTTP service mounted at `/mcp`.
pub(crate) fn service(
    backends: Backends,
    config: &mneme_config::GatewayConfig,
    shutdown: CancellationToken,
) -> StreamableHttpService<MemoryServer, LocalSessionManager> {
    let mut http = StreamableHttpServerConfig::default()
        .with_allowed_hosts(config.allowed_hosts.clone())
        .with_max_request_body_bytes(config.max_body_bytes)
        .with_cancellation_token(shutdown);
    http = if config.allowed_origins.is_empty() {
        http.disable_allowed_origins()
    } else {
        http.with_allowed_origins(config.allowed_origins.clone())
            .enforce_origin_validation()
    };
    StreamableHttpService::new(
        move || {
            Ok(MemoryServer {
                backends: backends.clone(),
                tool_router: MemoryServer::tool_router(),
            })
        },
        Arc::new(LocalSessionManager::default()),
        http,
    )
}

/// A tool failure, reported as the MCP layer prescribes for its code.
#[derive(Debug)]
pub(crate) struct ToolError(pub(crate) Error);

impl From<Error> for ToolError {
    fn from(error: Error) -> Self {
        Self(error)
    }
}

impl IntoCallToolResult for ToolError {
    fn into_call_tool_result(self) -> Result<CallToolResponse, rmcp::ErrorData> {
        let Error { code, message } = self.0;
        let body = json!({"error": {"code": code.as_str(), "message": message}});
        match code.jsonrpc_code() {
            None => Ok(CallToolResult::error(vec![ContentBlock::text(body.to_string())]).into()),
            Some(jsonrpc) => Err(rmcp::ErrorData::new(
                rmcp::model::ErrorCode(jsonrpc),
                message,
                Some(body),
            )),
        }
    }
}

/// The principal the auth middleware stored for this HTTP request.
fn principal(parts: &Parts) -> Result<&Principal, ToolError> {
    parts
        .extensions
        .get::<Principal>()
        .ok_or_else(|| ToolError(Error::unauthenticated("request is not authenticated")))
}

/// Parses tool arguments; failures are tool errors, not protocol errors.
fn arguments<T: DeserializeOwned>(arguments: JsonObject) -> Result<T, ToolError> {
    serde_json::from_value(serde_json::Value::Object(arguments))
        .map_err(|e| ToolError(Error::invalid_argument(format!("invalid arguments: {e}"))))
}
