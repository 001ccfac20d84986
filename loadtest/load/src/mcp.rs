//! The MCP side of a virtual client: connecting with rmcp's Streamable HTTP
//! client, calling a tool, and naming every way a call can fail so the
//! report can count failures by kind.

use std::collections::HashMap;
use std::fmt;
use std::sync::LazyLock;

use rmcp::model::{CallToolRequestParams, CallToolResult, ProtocolVersion};
use rmcp::service::{ClientInitializeError, RunningService, ServiceError};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::{
    HttpStatusError, StreamableHttpClientTransportConfig, StreamableHttpError,
};
use rmcp::{ClientLifecycleMode, ClientServiceExt as _, RoleClient};
use serde_json::{Map, Value};

/// An initialized MCP client holding one API key.
pub type Client = RunningService<RoleClient, ()>;

/// Which MCP lifecycle the virtual clients use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Lifecycle {
    /// `initialize` and an `MCP-Session-Id` (revisions up to 2025-11-25),
    /// what today's connector hosts and SDKs do.
    #[default]
    Session,
    /// 2026-07-28: `server/discover` once, then self-contained requests
    /// without a session.
    Stateless,
}

/// Why a request did not succeed, as counted in the report.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ErrorKind {
    /// An HTTP status without a usable JSON-RPC body (429, 5xx, 401, …).
    Http(u16),
    /// A JSON-RPC error response (protocol faults; mneme's rate limit is
    /// a 429 and counted as `http_429`).
    JsonRpc(i32),
    /// A tool result with `isError: true`; the `code` of its JSON body.
    Tool(String),
    /// No answer within `--timeout`.
    Timeout,
    /// The connection failed or broke (refused, reset, closed stream).
    Transport,
    /// An answer that is not what the tool promises.
    Unexpected,
    /// Open loop only: due while `--max-in-flight` requests were
    /// outstanding, and still unsent when the run ended.
    NotSent,
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Http(status) => write!(f, "http_{status}"),
            Self::JsonRpc(code) => write!(f, "jsonrpc_{code}"),
            Self::Tool(code) => write!(f, "tool_{code}"),
            Self::Timeout => f.write_str("timeout"),
            Self::Transport => f.write_str("transport"),
            Self::Unexpected => f.write_str("unexpected_result"),
            Self::NotSent => f.write_str("not_sent"),
        }
    }
}

/// A failed request: its kind (the report's key) and a message for the
/// first example of each kind.
#[derive(Debug, Clone)]
pub struct Failure {
    pub kind: ErrorKind,
    pub message: String,
}

impl Failure {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }

    pub fn timeout(after: std::time::Duration) -> Self {
        Self::new(ErrorKind::Timeout, format!("no answer within {after:?}"))
    }
}

/// The HTTP client of every virtual client: its connections are pooled,
/// as a connector host's egress pools them. rmcp's default client opens a
/// connection per request (it turns pooling off, to dodge delayed-ACK
/// stalls on connections whose last response was not read to the end);
/// with it the load generator measured TCP handshakes and teardowns, a
/// tenth of the machine's CPU at 2,000 calls/s. mneme ends every response
/// stream and sets `TCP_NODELAY`, so pooled connections do not stall.
static HTTP: LazyLock<reqwest::Client> = LazyLock::new(|| {
    reqwest::Client::builder()
        .tcp_nodelay(true)
        .build()
        .expect("the HTTP client builds")
});

/// Connects and runs the lifecycle's handshake.
pub async fn connect(url: &str, api_key: &str, lifecycle: Lifecycle) -> Result<Client, Failure> {
    let transport = StreamableHttpClientTransport::with_client(
        HTTP.clone(),
        StreamableHttpClientTransportConfig::with_uri(url.to_owned()).auth_header(api_key),
    );
    let mode = match lifecycle {
        Lifecycle::Session => ClientLifecycleMode::Initialize,
        Lifecycle::Stateless => ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        },
    };
    ().serve_with_lifecycle(transport, mode)
        .await
        .map_err(|error| classify_initialize_error(&error))
}

/// Ends the client's session (`DELETE`) while the server still runs. The
/// only error is a client task that already ended, which has nothing left
/// to close.
pub async fn close(client: Client) {
    let _ = client.cancel().await;
}

/// One `tools/call`; a tool error (`isError: true`) is a failure too.
pub async fn call_tool(
    client: &Client,
    tool: &str,
    arguments: Map<String, Value>,
) -> Result<CallToolResult, Failure> {
    let result = client
        .call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments))
        .await
        .map_err(|error| classify_service_error(&error))?;
    if result.is_error == Some(true) {
        return Err(classify_tool_error(&result));
    }
    Ok(result)
}

/// The text of a result's text blocks, joined.
pub fn result_text(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text())
        .map(|t| t.text.as_str())
        .collect()
}

/// The structured result, or the JSON of the first text block.
pub fn structured(result: &CallToolResult) -> Result<Value, Failure> {
    if let Some(value) = &result.structured_content {
        return Ok(value.clone());
    }
    serde_json::from_str(&result_text(result)).map_err(|e| {
        Failure::new(
            ErrorKind::Unexpected,
            format!("neither structured content nor JSON text: {e}"),
        )
    })
}

/// mneme's tool errors carry `{"error": {"code", "message"}}` as text.
pub fn classify_tool_error(result: &CallToolResult) -> Failure {
    let text = result_text(result);
    let code = serde_json::from_str::<Value>(&text)
        .ok()
        .and_then(|body| body["error"]["code"].as_str().map(str::to_owned))
        .unwrap_or_else(|| "unknown".to_owned());
    Failure::new(ErrorKind::Tool(code), text)
}

pub fn classify_service_error(error: &ServiceError) -> Failure {
    let message = error.to_string();
    let kind = match error {
        ServiceError::McpError(data) => ErrorKind::JsonRpc(data.code.0),
        ServiceError::Timeout { .. } => ErrorKind::Timeout,
        ServiceError::TransportSend(transport) => transport_kind(transport.error.as_ref()),
        ServiceError::TransportClosed | ServiceError::Cancelled { .. } => ErrorKind::Transport,
        _ => ErrorKind::Unexpected,
    };
    Failure::new(kind, message)
}

pub fn classify_initialize_error(error: &ClientInitializeError) -> Failure {
    let message = error.to_string();
    let kind = match error {
        ClientInitializeError::JsonRpcError(data) => ErrorKind::JsonRpc(data.code.0),
        ClientInitializeError::TransportError { error, .. } => transport_kind(error.error.as_ref()),
        ClientInitializeError::ConnectionClosed(_) => ErrorKind::Transport,
        _ => ErrorKind::Unexpected,
    };
    Failure::new(kind, message)
}

/// Finds the HTTP status in a transport error's chain of causes: rmcp
/// reports 429 and 5xx as [`HttpStatusError`], other statuses as
/// "HTTP <status>: <body>", and the session and auth statuses as variants
/// of their own.
fn transport_kind(error: &(dyn std::error::Error + 'static)) -> ErrorKind {
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(cause) = current {
        if let Some(status) = cause.downcast_ref::<HttpStatusError>() {
            return ErrorKind::Http(status.status);
        }
        if let Some(http) = cause.downcast_ref::<StreamableHttpError<reqwest::Error>>() {
            match http {
                StreamableHttpError::HttpStatus(status) => return ErrorKind::Http(status.status),
                StreamableHttpError::AuthRequired(_) => return ErrorKind::Http(401),
                StreamableHttpError::InsufficientScope(_) => return ErrorKind::Http(403),
                StreamableHttpError::SessionExpired => return ErrorKind::Http(404),
                StreamableHttpError::UnexpectedServerResponse(text) => {
                    if let Some(status) = leading_status(text) {
                        return ErrorKind::Http(status);
                    }
                }
                _ => {}
            }
        }
        current = cause.source();
    }
    ErrorKind::Transport
}

/// `HTTP 413: …` → 413.
fn leading_status(text: &str) -> Option<u16> {
    let rest = text.strip_prefix("HTTP ")?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits
        .parse()
        .ok()
        .filter(|status| (100..600).contains(status))
}

/// Counts of failures by kind, with the first message of each kind.
#[derive(Debug, Clone, Default)]
pub struct FailureCounts {
    pub counts: HashMap<ErrorKind, u64>,
    pub examples: HashMap<ErrorKind, String>,
}

impl FailureCounts {
    pub fn add(&mut self, failure: &Failure) {
        *self.counts.entry(failure.kind.clone()).or_default() += 1;
        self.examples
            .entry(failure.kind.clone())
            .or_insert_with(|| failure.message.clone());
    }

    pub fn merge(&mut self, other: &Self) {
        for (kind, count) in &other.counts {
            *self.counts.entry(kind.clone()).or_default() += count;
        }
        for (kind, message) in &other.examples {
            self.examples
                .entry(kind.clone())
                .or_insert_with(|| message.clone());
        }
    }

    pub fn total(&self) -> u64 {
        self.counts.values().sum()
    }
}

#[cfg(test)]
mod tests {
    use std::any::TypeId;

    use rmcp::model::{ContentBlock, ErrorCode, ErrorData};
    use rmcp::transport::DynamicTransportError;

    use super::*;

    fn transport_error(error: StreamableHttpError<reqwest::Error>) -> ServiceError {
        ServiceError::TransportSend(DynamicTransportError::from_parts(
            "streamable-http",
            TypeId::of::<()>(),
            Box::new(error),
        ))
    }

    #[test]
    fn http_statuses_are_found_in_transport_errors() {
        let cases = [
            (
                transport_error(StreamableHttpError::HttpStatus(HttpStatusError::new(
                    429,
                    Some("7".into()),
                ))),
                ErrorKind::Http(429),
            ),
            (
                transport_error(StreamableHttpError::UnexpectedServerResponse(
                    "HTTP 413: body too large".into(),
                )),
                ErrorKind::Http(413),
            ),
            (
                transport_error(StreamableHttpError::SessionExpired),
                ErrorKind::Http(404),
            ),
            (
                transport_error(StreamableHttpError::UnexpectedEndOfStream),
                ErrorKind::Transport,
            ),
            (
                ServiceError::McpError(ErrorData::new(ErrorCode(-32000), "busy", None)),
                ErrorKind::JsonRpc(-32000),
            ),
            (
                ServiceError::Timeout {
                    timeout: std::time::Duration::from_secs(1),
                },
                ErrorKind::Timeout,
            ),
        ];
        for (error, kind) in cases {
            assert_eq!(classify_service_error(&error).kind, kind, "{error}");
        }
    }

    #[test]
    fn tool_errors_are_named_by_their_code() {
        let result = CallToolResult::error(vec![ContentBlock::text(
            r#"{"error":{"code":"quota_exceeded","message":"the key is full"}}"#,
        )]);
        let failure = classify_tool_error(&result);
        assert_eq!(failure.kind, ErrorKind::Tool("quota_exceeded".into()));
        assert_eq!(failure.kind.to_string(), "tool_quota_exceeded");
        let plain = CallToolResult::error(vec![ContentBlock::text("upstream exploded")]);
        assert_eq!(classify_tool_error(&plain).kind.to_string(), "tool_unknown");
    }

    #[test]
    fn kinds_have_stable_names() {
        assert_eq!(ErrorKind::Http(503).to_string(), "http_503");
        assert_eq!(ErrorKind::JsonRpc(-32601).to_string(), "jsonrpc_-32601");
        assert_eq!(ErrorKind::Timeout.to_string(), "timeout");
        assert_eq!(ErrorKind::NotSent.to_string(), "not_sent");
    }

    #[test]
    fn failure_counts_keep_the_first_example() {
        let mut counts = FailureCounts::default();
        counts.add(&Failure::new(ErrorKind::Http(429), "first"));
        counts.add(&Failure::new(ErrorKind::Http(429), "second"));
        let mut other = FailureCounts::default();
        other.add(&Failure::new(ErrorKind::Timeout, "slow"));
        other.add(&Failure::new(ErrorKind::Http(429), "third"));
        counts.merge(&other);
        assert_eq!(counts.counts[&ErrorKind::Http(429)], 3);
        assert_eq!(counts.examples[&ErrorKind::Http(429)], "first");
        assert_eq!(counts.total(), 4);
    }
}
