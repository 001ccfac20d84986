//! A minimal upstream MCP server for the `surfacing` scenario: one
//! read-only tool, `echo`, that answers at once with its message. mneme
//! proxies it as `<prefix>__echo` and surfaces memories on its results, so
//! what a load test of proxied calls measures is mneme's part, not the
//! upstream's.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context as _;
use rmcp::handler::server::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// The upstream's name and tool prefix when the load test registers it.
pub const UPSTREAM_NAME: &str = "load";

/// The proxied tool the `surfacing` scenario calls by default.
pub const PROXIED_TOOL: &str = "load__echo";

#[derive(Debug, Clone, Copy)]
struct Echo;

fn echo_tool() -> Tool {
    let schema = json!({
        "type": "object",
        "properties": {"message": {"type": "string"}},
        "required": ["message"],
    });
    let Value::Object(schema) = schema else {
        unreachable!("a JSON object literal")
    };
    // Read-only: mneme surfaces memories on read tools only.
    Tool::new(
        "echo",
        "Answers with the message it was sent.",
        Arc::new(schema),
    )
    .with_annotations(ToolAnnotations::new().read_only(true))
}

impl ServerHandler for Echo {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(vec![echo_tool()]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if request.name != "echo" {
            return Err(ErrorData::invalid_params(
                format!("no tool {}", request.name),
                None,
            ));
        }
        let message = request
            .arguments
            .as_ref()
            .and_then(|arguments| arguments.get("message"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        Ok(CallToolResult::success(vec![ContentBlock::text(message)]).into())
    }
}

/// Serves the echo upstream on `listener` until the task is aborted;
/// returns its MCP URL and the task.
pub fn spawn(listener: TcpListener) -> anyhow::Result<(String, JoinHandle<()>)> {
    let addr: SocketAddr = listener.local_addr().context("the listener's address")?;
    let mut config = StreamableHttpServerConfig::default();
    if !addr.ip().is_loopback() {
        // Reached by its network address: rmcp's default allows only
        // loopback `Host` headers. An echo holds nothing worth protecting.
        config = config.disable_allowed_hosts();
    }
    let service = StreamableHttpService::new(
        || Ok(Echo),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    let router = axum::Router::new().nest_service("/mcp", service);
    let task = tokio::spawn(async move {
        if let Err(error) = axum::serve(listener, router).await {
            eprintln!("the echo upstream stopped: {error}");
        }
    });
    Ok((format!("http://{addr}/mcp"), task))
}
