//! The MCP endpoint: rmcp's Streamable HTTP service in front of the tool
//! registry.
//!
//! `tools/list` shows the tools the caller may use; `tools/call` runs one
//! through [`Registry::call`], which checks permission and mode on every
//! call. Argument and domain errors are tool results with `isError: true`
//! (MCP 2025-11-25, SEP-1303) so the model can read and correct them; only
//! protocol faults become JSON-RPC errors (see
//! [`mneme_core::ErrorCode::jsonrpc_code`]).

use std::sync::Arc;
use tracing::Instrument;

use mneme_core::{Error, Principal};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CompleteRequestParams, CompleteResult,
    ContentBlock, GetPromptRequestParams, GetPromptResponse, Implementation,
    InitializeRequestParams, InitializeResult, ListPromptsResult, ListResourceTemplatesResult,
    ListResourcesResult, ListToolsResult, PaginatedRequestParams, ProgressNotificationParam,
    ProgressToken, ReadResourceRequestParams, ReadResourceResponse, ServerCapabilities,
    ServerConfig, Tool,
};
use rmcp::service::{Peer, RequestContext};
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::activity::ActivityLog;
use crate::backends::Backends;
use crate::catalog::{self, PublicLimits};
use crate::session::{NegotiatedVersion, Sessions};
use crate::tools::{ProgressSink, REGISTRY, ToolContext};

/// Instructions sent in `initialize`: how an agent should use the tools.
const INSTRUCTIONS: &str = "mneme is your long-term memory. Call `recall` before answering \
questions about the user, their projects, preferences or past decisions. Call `remember` \
for each durable, self-contained fact worth keeping (one fact per call, pronouns resolved, \
concrete names and numbers). Call `forget` for memories that are wrong or obsolete.";

/// The MCP server: one instance per session, sharing the backend clients.
#[derive(Debug, Clone)]
pub(crate) struct McpServer {
    backends: Backends,
    surfacer: Arc<crate::surfacing::Surfacer>,
    proxy: Arc<crate::proxy::Proxy>,
    activity: Option<ActivityLog>,
    public_url: Arc<str>,
    limits: PublicLimits,
}

/// The principal the auth middleware stored on the HTTP request.
fn principal(context: &RequestContext<RoleServer>) -> Result<Principal, ErrorData> {
    context
        .extensions
        .get::<http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<Principal>())
        .cloned()
        .ok_or_else(|| {
            ErrorData::new(
                rmcp::model::ErrorCode(-32001),
                "request is not authenticated",
                None,
            )
        })
}

/// Forwards tool progress as `notifications/progress` to the client.
struct McpProgress {
    peer: Peer<RoleServer>,
    token: ProgressToken,
}

impl ProgressSink for McpProgress {
    fn report(
        &self,
        done: u64,
        total: Option<u64>,
        message: Option<String>,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>> {
        Box::pin(async move {
            let mut param = ProgressNotificationParam::new(self.token.clone(), done as f64);
            param.total = total.map(|t| t as f64);
            param.message = message;
            // A client that went away does not fail the tool call.
            let _ = self.peer.notify_progress(param).await;
        })
    }
}

/// An error answering a request other than `tools/call`.
fn request_error(error: Error) -> ErrorData {
    let Error { code, message } = error;
    let data = json!({"code": code.as_str(), "message": message});
    ErrorData::new(
        rmcp::model::ErrorCode(code.jsonrpc_request_code()),
        message,
        Some(data),
    )
}

/// A tool error as MCP reports it: a tool result for argument and domain
/// errors, a JSON-RPC error for protocol faults.
pub(crate) fn tool_error(error: Error) -> Result<CallToolResult, ErrorData> {
    let Error { code, message } = error;
    let mut body = json!({"error": {"code": code.as_str(), "message": message}});
    if let Some(trace_id) = mneme_telemetry::trace::current_trace_id() {
        body["error"]["trace_id"] = trace_id.into();
    }
    match code.jsonrpc_code() {
        None => Ok(CallToolResult::error(vec![ContentBlock::text(
            body.to_string(),
        )])),
        Some(jsonrpc) => Err(ErrorData::new(
            rmcp::model::ErrorCode(jsonrpc),
            message,
            Some(body),
        )),
    }
}

impl McpServer {
    fn tool_context(
        &self,
        principal: Principal,
        progress: Option<Arc<dyn ProgressSink>>,
    ) -> ToolContext {
        ToolContext {
            backends: self.backends.clone(),
            surfacer: self.surfacer.clone(),
            proxy: self.proxy.clone(),
            principal,
            progress,
            public_url: self.public_url.clone(),
        }
    }
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        // Logging is declared for the protocol revisions that still have it
        // (up to 2025-11-25), so clients may set a level; see `set_level`.
        #[allow(deprecated)]
        let capabilities = ServerCapabilities::builder()
            .enable_logging()
            .enable_completions()
            .enable_tools()
            .enable_tool_list_changed()
            .enable_prompts()
            .enable_resources()
            .build();
        ServerConfig::new(capabilities)
            .with_server_info(
                Implementation::new("mneme", env!("CARGO_PKG_VERSION"))
                    .with_title("mneme long-term memory"),
            )
            .with_instructions(INSTRUCTIONS)
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        context.peer.set_peer_info(request.clone());
        let result = self.negotiate_initialize(&request)?;
        if let Ok(principal) = principal(&context) {
            self.proxy.watch(principal.tenant_id, context.peer.clone());
        }
        // The session middleware records what was negotiated.
        if let Some(slot) = context
            .extensions
            .get::<http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<NegotiatedVersion>())
        {
            slot.set(&result.protocol_version);
        }
        Ok(result)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let principal = principal(&context)?;
        let mut tools: Vec<Tool> = REGISTRY
            .visible(&principal)
            .map(|tool| tool.to_mcp())
            .collect();
        tools.extend(self.proxy.list_tools(&principal).await);
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        Ok(ListPromptsResult::with_all_items(catalog::prompts()))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        catalog::prompt(&request.name, &request.arguments)
            .map(Into::into)
            .map_err(request_error)
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let principal = principal(&context)?;
        Ok(ListResourcesResult::with_all_items(catalog::resources(
            &principal,
        )))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let principal = principal(&context)?;
        catalog::read(
            &request.uri,
            self.tool_context(principal, None),
            &self.limits,
        )
        .await
        .map(Into::into)
        .map_err(request_error)
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let principal = principal(&context)?;
        Ok(ListResourceTemplatesResult::with_all_items(
            catalog::resource_templates(&principal),
        ))
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        let principal = principal(&context)?;
        catalog::complete(
            &request.r#ref,
            &request.argument,
            self.tool_context(principal, None),
        )
        .await
        .map(CompleteResult::new)
        .map_err(request_error)
    }

    /// mneme sends no log notifications (its logs are for its operators,
    /// not for callers), so every level is already honoured: there is
    /// nothing to filter and nothing to remember.
    #[allow(deprecated)]
    async fn set_level(
        &self,
        _request: rmcp::model::SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        Ok(())
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        REGISTRY.get(name).map(|tool| tool.to_mcp())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let parent = context
            .extensions
            .get::<http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<crate::RequestSpan>())
            .map_or_else(tracing::Span::none, |span| span.0.clone());
        let span = tracing::info_span!(parent: &parent, "tool_call", tool = %request.name);
        self.call_tool_in_span(request, context)
            .instrument(span)
            .await
    }
}

impl McpServer {
    async fn call_tool_in_span(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let principal = principal(&context)?;
        let arguments = request.arguments.unwrap_or_default();
        let logged = self
            .activity
            .as_ref()
            .filter(|_| principal.session_id.is_some())
            .map(|log| (log, ActivityLog::detail(&arguments)));
        let answer = self
            .answer(&request.name, &principal, arguments, &context)
            .await;
        if let Some((log, detail)) = logged {
            let failed = answer
                .as_ref()
                .map_or(true, |result| result.is_error == Some(true));
            log.record(&principal, &request.name, detail, failed);
        }
        answer.map(Into::into)
    }

    /// Runs one tool call: mneme's own tools through the registry, others
    /// through the tenant's upstream servers.
    async fn answer(
        &self,
        name: &str,
        principal: &Principal,
        arguments: rmcp::model::JsonObject,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        if REGISTRY.get(name).is_none() {
            return match self
                .proxy
                .call(&self.surfacer, principal, name, arguments)
                .await
            {
                Some(Ok(result)) => Ok(result),
                Some(Err(error)) => tool_error(error),
                // A wrong tool name is the model's mistake to correct, like
                // a wrong argument (SEP-1303): it gets a readable tool
                // error, not a protocol fault the host may hide from the
                // model. Another tenant's upstream reads the same.
                None => tool_error(Error::new(
                    mneme_core::ErrorCode::NotFound,
                    format!("unknown tool `{name}`: tools/list names the available tools"),
                )),
            };
        }
        let progress = context.meta.get_progress_token().map(|token| {
            Arc::new(McpProgress {
                peer: context.peer.clone(),
                token,
            }) as Arc<dyn ProgressSink>
        });
        let tool_context = self.tool_context(principal.clone(), progress);
        match REGISTRY.call(name, tool_context, arguments).await {
            Ok(value) => Ok(CallToolResult::structured(value)),
            Err(error) => tool_error(error),
        }
    }
}

/// The Streamable HTTP service mounted at `/mcp`: both protocol eras, with
/// legacy sessions in Redis (see [`crate::session`]).
pub(crate) fn service(
    app: &crate::App,
    config: &mneme_config::GatewayConfig,
    shutdown: CancellationToken,
) -> StreamableHttpService<McpServer, Sessions> {
    let mut http = StreamableHttpServerConfig::default()
        .with_allowed_hosts(config.allowed_hosts.clone())
        .with_max_request_body_bytes(config.max_body_bytes)
        .with_cancellation_token(shutdown);
    http.session_store = Some(app.sessions.states.clone());
    http = if config.allowed_origins.is_empty() {
        http.disable_allowed_origins()
    } else {
        http.with_allowed_origins(crate::hygiene::origins_with_explicit_ports(
            &config.allowed_origins,
        ))
        .enforce_origin_validation()
    };
    let server = McpServer::for_app(app);
    StreamableHttpService::new(
        move || Ok(server.clone()),
        app.sessions.sessions.clone(),
        http,
    )
}

impl McpServer {
    /// A server for one MCP connection of `app` (one per session).
    pub(crate) fn for_app(app: &crate::App) -> Self {
        Self {
            backends: app.backends.clone(),
            surfacer: app.surfacer.clone(),
            proxy: app.proxy.clone(),
            activity: app.activity.clone(),
            public_url: app.public_url.as_str().into(),
            limits: app.limits.clone(),
        }
    }
}
