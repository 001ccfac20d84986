//! rmcp clients of a tenant's upstream MCP servers, one per (tenant,
//! upstream) and gateway pod, with everything that keeps a slow or dead
//! upstream from hurting the caller or anyone else:
//!
//! - connections are opened lazily, single-flight, through the SSRF guard
//!   (a client pinned to checked addresses, no redirects), within the
//!   connect timeout, and replaced when the upstream's stored version
//!   changes or the connection closed;
//! - a call has a per-attempt timeout and an overall deadline; transport
//!   failures are retried with exponential backoff, but a tool that is not
//!   read-only is never retried once its request may have reached the
//!   upstream (after a timeout or a dropped connection), since it may
//!   already have run;
//! - a single-probe circuit breaker per upstream ([`Breaker`]) fails calls
//!   fast after repeated failures; any completed round trip (including a
//!   tool error or a JSON-RPC error) counts as healthy;
//! - a semaphore bounds the calls in flight per upstream;
//! - the upstream's `tools/list` is cached for a TTL and dropped early when
//!   the upstream announces `notifications/tools/list_changed`, which
//!   [`Pool::with_tool_changes`] also reports by tenant.
//!
//! Headers are handed to the transport and never logged; errors carry
//! messages that are safe to show the tenant.
//!
//! Besides the two HTTP transports a tenant may register, the pool speaks
//! stdio to a local child process ([`TransportKind::Stdio`]). Only the local
//! proxy (`mneme proxy`, on the user's own machine) builds such specs from
//! its own configuration file: [`TransportKind::parse`] never yields it, so
//! nothing a tenant stores or submits can make the hosted gateway start a
//! program. A child's stderr goes to the pool's process's stderr (or
//! nowhere), never to its stdout, which may be an MCP channel itself.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http::{HeaderName, HeaderValue};
use mneme_core::breaker::{Admit, Breaker, BreakerState};
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, Implementation,
    ResultType, Tool,
};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, RoleClient, ServiceError, ServiceExt};
use tokio::sync::{Semaphore, mpsc};
use uuid::Uuid;

use crate::sealed::Headers;
use crate::ssrf::{SsrfError, UrlPolicy};

/// Longest delay between two retries.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// How mneme talks to an upstream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TransportKind {
    /// MCP Streamable HTTP (2025-03-26 and later).
    StreamableHttp,
    /// The legacy HTTP+SSE transport (2024-11-05).
    Sse,
    /// MCP over the stdin and stdout of a child process started by the
    /// pool. The command travels inside the variant (not as a field of
    /// [`UpstreamSpec`]) so that specs built for HTTP upstreams stay as
    /// they are; see the module documentation for why only the local proxy
    /// builds it.
    Stdio(Arc<StdioCommand>),
}

impl TransportKind {
    /// From the stored name (`streamable_http`, `sse`). `stdio` is not
    /// parsed on purpose: a stored or submitted name must never start a
    /// program on the gateway.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "streamable_http" => Some(Self::StreamableHttp),
            "sse" => Some(Self::Sse),
            _ => None,
        }
    }

    pub fn as_str(&self) -> &'static str {
        match self {
            Self::StreamableHttp => "streamable_http",
            Self::Sse => "sse",
            Self::Stdio(_) => "stdio",
        }
    }
}

/// Where a child process's stderr goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ChildStderr {
    /// To this process's stderr (diagnostics the user can read).
    #[default]
    Inherit,
    /// Discarded.
    Discard,
}

/// The program behind a [`TransportKind::Stdio`] upstream.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct StdioCommand {
    /// The program, looked up on `PATH` when it has no slash.
    pub program: String,
    pub args: Vec<String>,
    /// Added to the inherited environment (values may be secrets: never
    /// logged).
    pub env: BTreeMap<String, String>,
    /// The working directory; `None` keeps this process's.
    pub cwd: Option<String>,
    pub stderr: ChildStderr,
}

impl std::fmt::Debug for StdioCommand {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StdioCommand")
            .field("program", &self.program)
            .field("args", &self.args)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("cwd", &self.cwd)
            .field("stderr", &self.stderr)
            .finish()
    }
}

/// The numbers that bound work against one upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub connect_timeout: Duration,
    pub call_timeout: Duration,
    pub overall_timeout: Duration,
    pub max_retries: u32,
    pub retry_backoff: Duration,
    /// Zero: no breaker.
    pub breaker_failures: u32,
    pub breaker_reset: Duration,
    pub max_concurrency: usize,
    pub tools_ttl: Duration,
    /// Largest response message accepted from the upstream.
    pub max_response_bytes: usize,
}

/// One upstream as the pool needs it (headers in clear, in memory only).
#[derive(Clone)]
pub struct UpstreamSpec {
    pub tenant_id: Uuid,
    pub id: Uuid,
    /// The stored version; a different one replaces the connection.
    pub version: i64,
    pub transport: TransportKind,
    pub url: String,
    pub headers: Headers,
    pub limits: Limits,
}

impl std::fmt::Debug for UpstreamSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamSpec")
            .field("tenant_id", &self.tenant_id)
            .field("id", &self.id)
            .field("version", &self.version)
            .field("transport", &self.transport)
            .field("url", &self.url)
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// Why a call did not produce an upstream result. Messages are safe to show
/// the tenant: they never contain headers or what a blocked address said.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    #[error("the upstream is failing; mneme stopped calling it for {retry_after_secs} s")]
    BreakerOpen { retry_after_secs: u64 },
    #[error("the upstream did not answer within {0:?}")]
    Timeout(Duration),
    #[error("the upstream is unreachable: {0}")]
    Unavailable(String),
    #[error("{0}")]
    Blocked(#[from] SsrfError),
    /// The upstream answered with a JSON-RPC error (its code and message).
    #[error("the upstream refused the call: {message}")]
    Refused { code: i32, message: String },
}

/// What a pod knows about one upstream's health.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Health {
    pub connected: bool,
    pub breaker: BreakerState,
}

/// Reserved or hop-by-hop header names a tenant may not set: they would
/// break the transport or smuggle requests.
const FORBIDDEN_HEADERS: &[&str] = &[
    "accept",
    "connection",
    "content-length",
    "content-type",
    "host",
    "last-event-id",
    "mcp-protocol-version",
    "mcp-session-id",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// Checks headers a tenant wants sent to its upstream.
pub fn check_headers(headers: &Headers) -> Result<(), String> {
    if headers.len() > 20 {
        return Err("at most 20 headers".into());
    }
    for (name, value) in headers {
        let parsed = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| format!("`{name}` is not a valid header name"))?;
        if FORBIDDEN_HEADERS.contains(&parsed.as_str()) {
            return Err(format!(
                "the header `{name}` is set by mneme and cannot be set"
            ));
        }
        if value.len() > 8192 || HeaderValue::from_str(value).is_err() {
            return Err(format!(
                "the value of `{name}` must be visible ASCII of at most 8192 bytes"
            ));
        }
    }
    Ok(())
}

/// The client side of one connection: notes `tools/list_changed`, and
/// passes it on to whoever watches the pool's tool changes.
struct Listener {
    tools_stale: Arc<AtomicBool>,
    tenant_id: Uuid,
    changes: Option<mpsc::UnboundedSender<Uuid>>,
}

impl ClientHandler for Listener {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.tools_stale.store(true, Ordering::Release);
        if let Some(changes) = &self.changes {
            // Nobody listening any more is no failure.
            let _ = changes.send(self.tenant_id);
        }
    }

    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("mneme-proxy", env!("CARGO_PKG_VERSION"))
                .with_title("mneme MCP proxy"),
        )
    }
}

type Connection = RunningService<RoleClient, Listener>;

/// One upstream's state on this pod.
struct Entry {
    version: i64,
    connection: tokio::sync::Mutex<Option<Arc<Connection>>>,
    breaker: Mutex<Breaker>,
    permits: Semaphore,
    tools: Mutex<Option<(Instant, Arc<Vec<Tool>>)>>,
    tools_stale: Arc<AtomicBool>,
    last_used: Mutex<Instant>,
}

impl Entry {
    fn new(spec: &UpstreamSpec) -> Self {
        let limits = spec.limits;
        Self {
            version: spec.version,
            connection: tokio::sync::Mutex::new(None),
            breaker: Mutex::new(Breaker::new(
                limits.breaker_failures,
                u64::try_from(limits.breaker_reset.as_millis()).unwrap_or(u64::MAX),
            )),
            permits: Semaphore::new(limits.max_concurrency.max(1)),
            tools: Mutex::new(None),
            tools_stale: Arc::new(AtomicBool::new(false)),
            last_used: Mutex::new(Instant::now()),
        }
    }
}

/// Outcome of one attempt.
enum Attempt {
    Done(Result<CallToolResult, CallError>),
    /// Nothing reached the upstream: safe to retry any tool.
    NotSent(String),
    /// The request may have reached the upstream.
    MaybeSent(CallError),
}

/// See the module documentation.
pub struct Pool {
    entries: Mutex<HashMap<(Uuid, Uuid), Arc<Entry>>>,
    policy: UrlPolicy,
    epoch: Instant,
    /// Tenants whose upstream announced a new tool list.
    changes: Option<mpsc::UnboundedSender<Uuid>>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

impl Pool {
    pub fn new(policy: UrlPolicy) -> Self {
        Self {
            entries: Mutex::new(HashMap::new()),
            policy,
            epoch: Instant::now(),
            changes: None,
        }
    }

    /// A pool that also reports, by tenant id, every upstream that sends
    /// `notifications/tools/list_changed` (so sessions can be told).
    pub fn with_tool_changes(policy: UrlPolicy) -> (Self, mpsc::UnboundedReceiver<Uuid>) {
        let (sender, receiver) = mpsc::unbounded_channel();
        let mut pool = Self::new(policy);
        pool.changes = Some(sender);
        (pool, receiver)
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn entry(&self, spec: &UpstreamSpec) -> Arc<Entry> {
        let mut entries = self.entries.lock().expect("pool lock");
        let entry = entries
            .entry((spec.tenant_id, spec.id))
            .or_insert_with(|| Arc::new(Entry::new(spec)));
        if entry.version != spec.version {
            // Changed settings or headers: a fresh connection and breaker.
            *entry = Arc::new(Entry::new(spec));
        }
        *entry.last_used.lock().expect("entry lock") = Instant::now();
        entry.clone()
    }

    /// Drops every connection of a tenant whose upstreams are not in
    /// `keep` (removed upstreams).
    pub fn retain_tenant(&self, tenant_id: Uuid, keep: &[Uuid]) {
        self.entries
            .lock()
            .expect("pool lock")
            .retain(|(tenant, id), _| *tenant != tenant_id || keep.contains(id));
    }

    /// Closes connections unused for `idle`; returns how many.
    pub fn close_idle(&self, idle: Duration) -> usize {
        let mut entries = self.entries.lock().expect("pool lock");
        let before = entries.len();
        entries.retain(|_, entry| entry.last_used.lock().expect("entry lock").elapsed() < idle);
        before - entries.len()
    }

    /// Connected upstreams on this pod.
    pub fn connected(&self) -> usize {
        self.entries
            .lock()
            .expect("pool lock")
            .values()
            .filter(|entry| {
                entry
                    .connection
                    .try_lock()
                    .is_ok_and(|c| c.as_ref().is_some_and(|c| !c.is_closed()))
            })
            .count()
    }

    /// What this pod knows of an upstream's health.
    pub fn health(&self, tenant_id: Uuid, id: Uuid) -> Option<Health> {
        let entry = self
            .entries
            .lock()
            .expect("pool lock")
            .get(&(tenant_id, id))
            .cloned()?;
        let connected = entry
            .connection
            .try_lock()
            .map(|c| c.as_ref().is_some_and(|c| !c.is_closed()))
            .unwrap_or(true);
        let breaker = entry
            .breaker
            .lock()
            .expect("breaker lock")
            .state(self.now_ms());
        Some(Health { connected, breaker })
    }

    /// The upstream's tools, from the cache while fresh.
    pub async fn tools(&self, spec: &UpstreamSpec) -> Result<Arc<Vec<Tool>>, CallError> {
        let entry = self.entry(spec);
        if !entry.tools_stale.swap(false, Ordering::AcqRel)
            && let Some((at, tools)) = entry.tools.lock().expect("tools lock").as_ref()
            && at.elapsed() < spec.limits.tools_ttl
        {
            return Ok(tools.clone());
        }
        let admitted = self.admit(&entry, spec)?;
        let deadline = Instant::now() + spec.limits.overall_timeout;
        let result = async {
            let connection = self.connection(&entry, spec, deadline).await?;
            let remaining = deadline.saturating_duration_since(Instant::now());
            let wait = remaining.min(spec.limits.call_timeout);
            match tokio::time::timeout(wait, connection.peer().list_all_tools()).await {
                Err(_) => Err(CallError::Timeout(wait)),
                Ok(Err(ServiceError::McpError(error))) => Err(refused(&error)),
                Ok(Err(error)) => {
                    *entry.connection.lock().await = None;
                    Err(CallError::Unavailable(transport_message(&error)))
                }
                Ok(Ok(tools)) => Ok(Arc::new(tools)),
            }
        }
        .await;
        // A listing that answers shows the server is up, not that its tools
        // are: it must not wipe out a run of timed-out calls (an upstream
        // whose tools hang would never trip its breaker). It still closes a
        // half-open breaker as its probe.
        if result.is_err() || admitted == Admit::Probe {
            self.report(&entry, admitted, &result);
        }
        let tools = result?;
        *entry.tools.lock().expect("tools lock") = Some((Instant::now(), tools.clone()));
        Ok(tools)
    }

    /// Calls a tool of the upstream. `read_only` (from the tool's
    /// annotations) decides whether a call that may have reached the
    /// upstream may be repeated.
    pub async fn call(
        &self,
        spec: &UpstreamSpec,
        params: CallToolRequestParams,
        read_only: bool,
    ) -> Result<CallToolResult, CallError> {
        let entry = self.entry(spec);
        let admitted = self.admit(&entry, spec)?;
        let limits = spec.limits;
        let deadline = Instant::now() + limits.overall_timeout;
        let result = async {
            let _permit = tokio::time::timeout_at(deadline.into(), entry.permits.acquire())
                .await
                .map_err(|_| CallError::Timeout(limits.overall_timeout))?
                .map_err(|_| CallError::Unavailable("the pool is closing".into()))?;
            let mut backoff = limits.retry_backoff;
            let mut attempt = 0;
            loop {
                let last_error = match self.attempt(&entry, spec, &params, deadline).await {
                    Attempt::Done(result) => return result,
                    Attempt::MaybeSent(error) if !read_only => return Err(error),
                    Attempt::MaybeSent(error) => error,
                    Attempt::NotSent(message) => CallError::Unavailable(message),
                };
                attempt += 1;
                let retry_at = Instant::now() + backoff;
                if attempt > limits.max_retries || retry_at >= deadline {
                    return Err(last_error);
                }
                tracing::debug!(attempt, upstream = %spec.id, "retrying an upstream call");
                tokio::time::sleep_until(retry_at.into()).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
        .await;
        self.report(&entry, admitted, &result);
        result
    }

    async fn attempt(
        &self,
        entry: &Entry,
        spec: &UpstreamSpec,
        params: &CallToolRequestParams,
        deadline: Instant,
    ) -> Attempt {
        let connection = match self.connection(entry, spec, deadline).await {
            Ok(connection) => connection,
            Err(error @ (CallError::Blocked(_) | CallError::Refused { .. })) => {
                return Attempt::Done(Err(error));
            }
            Err(error) => return Attempt::NotSent(error.to_string()),
        };
        let remaining = deadline.saturating_duration_since(Instant::now());
        let wait = remaining.min(spec.limits.call_timeout);
        match tokio::time::timeout(wait, connection.peer().call_tool(params.clone())).await {
            Err(_) => Attempt::MaybeSent(CallError::Timeout(wait)),
            Ok(Ok(mut result)) => {
                // Clients of the 2026-07-28 era require `resultType` on every
                // result, and upstreams of older eras send none. Relayed
                // results carry it like mneme's own; rmcp's server strips it
                // again for sessions of older eras.
                result.result_type.get_or_insert(ResultType::COMPLETE);
                Attempt::Done(Ok(result))
            }
            Ok(Err(ServiceError::McpError(error))) => Attempt::Done(Err(refused(&error))),
            Ok(Err(error @ ServiceError::TransportSend(_))) => {
                *entry.connection.lock().await = None;
                Attempt::NotSent(transport_message(&error))
            }
            Ok(Err(error)) => {
                *entry.connection.lock().await = None;
                Attempt::MaybeSent(CallError::Unavailable(transport_message(&error)))
            }
        }
    }

    fn admit(&self, entry: &Entry, spec: &UpstreamSpec) -> Result<Admit, CallError> {
        if spec.limits.breaker_failures == 0 {
            return Ok(Admit::Yes);
        }
        match entry
            .breaker
            .lock()
            .expect("breaker lock")
            .admit(self.now_ms())
        {
            Admit::No => Err(CallError::BreakerOpen {
                retry_after_secs: spec.limits.breaker_reset.as_secs().max(1),
            }),
            admitted => Ok(admitted),
        }
    }

    /// Tells the breaker how an admitted call went: only faults of the
    /// transport count against the upstream.
    fn report<T>(&self, entry: &Entry, admitted: Admit, result: &Result<T, CallError>) {
        let healthy = !matches!(
            result,
            Err(CallError::Timeout(_) | CallError::Unavailable(_))
        );
        if admitted != Admit::No {
            entry
                .breaker
                .lock()
                .expect("breaker lock")
                .record(healthy, self.now_ms());
        }
    }

    /// The live connection, opened if needed (one opener at a time).
    async fn connection(
        &self,
        entry: &Entry,
        spec: &UpstreamSpec,
        deadline: Instant,
    ) -> Result<Arc<Connection>, CallError> {
        let wait = deadline.saturating_duration_since(Instant::now());
        let mut slot = tokio::time::timeout(wait, entry.connection.lock())
            .await
            .map_err(|_| CallError::Timeout(wait))?;
        if let Some(connection) = slot.as_ref()
            && !connection.is_closed()
        {
            return Ok(connection.clone());
        }
        let budget = spec
            .limits
            .connect_timeout
            .min(deadline.saturating_duration_since(Instant::now()));
        let connection = tokio::time::timeout(budget, self.connect(entry, spec))
            .await
            .map_err(|_| CallError::Timeout(budget))??;
        let connection = Arc::new(connection);
        *slot = Some(connection.clone());
        entry.tools_stale.store(true, Ordering::Release);
        Ok(connection)
    }

    async fn connect(&self, entry: &Entry, spec: &UpstreamSpec) -> Result<Connection, CallError> {
        let listener = Listener {
            tools_stale: entry.tools_stale.clone(),
            tenant_id: spec.tenant_id,
            changes: self.changes.clone(),
        };
        let unreachable = |error: String| CallError::Unavailable(error);
        // A local process is not subject to the SSRF guard: there is no
        // address to check, and only the local proxy builds such specs.
        if let TransportKind::Stdio(command) = &spec.transport {
            let transport = spawn(command).map_err(unreachable)?;
            return listener
                .serve(transport)
                .await
                .map_err(|error| unreachable(initialize_message(&error)));
        }
        let url = self.policy.check_syntax(&spec.url)?;
        let http = self
            .policy
            .pinned_client(&url, spec.limits.connect_timeout)
            .await?;
        match &spec.transport {
            TransportKind::StreamableHttp => {
                let mut headers = HashMap::new();
                for (name, value) in &spec.headers {
                    let (Ok(name), Ok(value)) = (
                        HeaderName::from_bytes(name.as_bytes()),
                        HeaderValue::from_str(value),
                    ) else {
                        continue;
                    };
                    headers.insert(name, value);
                }
                let config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
                    .custom_headers(headers)
                    .max_json_response_size(spec.limits.max_response_bytes)
                    .max_sse_event_size(spec.limits.max_response_bytes);
                let transport = StreamableHttpClientTransport::with_client(http, config);
                listener
                    .serve(transport)
                    .await
                    .map_err(|error| unreachable(initialize_message(&error)))
            }
            TransportKind::Sse => {
                let mut headers = http::HeaderMap::new();
                for (name, value) in &spec.headers {
                    if let (Ok(name), Ok(value)) = (
                        HeaderName::from_bytes(name.as_bytes()),
                        HeaderValue::from_str(value),
                    ) {
                        headers.insert(name, value);
                    }
                }
                let transport = crate::sse::connect(
                    http,
                    crate::sse::SseClientConfig {
                        url,
                        headers,
                        connect_timeout: spec.limits.connect_timeout,
                        post_timeout: spec.limits.call_timeout,
                        max_message_bytes: spec.limits.max_response_bytes,
                    },
                )
                .await
                .map_err(|error| unreachable(error.to_string()))?;
                listener
                    .serve(transport)
                    .await
                    .map_err(|error| unreachable(initialize_message(&error)))
            }
            TransportKind::Stdio(_) => Err(unreachable("a stdio upstream has no URL".into())),
        }
    }
}

/// Starts the child process of a stdio upstream. Its stdin and stdout carry
/// MCP; stderr goes where the command says, never to our stdout. The child
/// is killed when the connection is dropped (a replaced or removed
/// upstream), so no orphan keeps running.
fn spawn(command: &StdioCommand) -> Result<TokioChildProcess, String> {
    let mut process = tokio::process::Command::new(&command.program);
    process
        .args(&command.args)
        .envs(&command.env)
        .kill_on_drop(true);
    if let Some(dir) = &command.cwd {
        process.current_dir(dir);
    }
    let stderr = match command.stderr {
        ChildStderr::Inherit => std::process::Stdio::inherit(),
        ChildStderr::Discard => std::process::Stdio::null(),
    };
    TokioChildProcess::builder(process)
        .stderr(stderr)
        .spawn()
        .map(|(transport, _)| transport)
        .map_err(|error| format!("`{}` could not be started: {error}", command.program))
}

/// The upstream's JSON-RPC error, code kept.
fn refused(error: &rmcp::ErrorData) -> CallError {
    CallError::Refused {
        code: error.code.0,
        message: error.message.to_string(),
    }
}

/// A transport failure, described without anything the upstream sent.
fn transport_message(error: &ServiceError) -> String {
    match error {
        ServiceError::TransportClosed => "the connection closed".into(),
        ServiceError::TransportSend(_) => "the request could not be sent".into(),
        ServiceError::Timeout { .. } => "the request timed out".into(),
        ServiceError::Cancelled { .. } => "the request was cancelled".into(),
        _ => "the upstream answered with something mneme could not read".into(),
    }
}

/// Why `initialize` failed, in a sentence (status codes are useful to the
/// tenant; bodies and headers are not shown).
fn initialize_message(error: &rmcp::service::ClientInitializeError) -> String {
    let text = error.to_string();
    if let Some(challenge) = error.auth_challenge() {
        let _ = challenge;
        return "the upstream refused mneme's credentials (check the upstream's headers)".into();
    }
    // rmcp's messages name the failing step; keep the first line only.
    let first = text.lines().next().unwrap_or("initialize failed");
    format!(
        "initialize failed: {}",
        first.chars().take(200).collect::<String>()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_are_checked() {
        let ok = Headers::from([("Authorization".to_owned(), "Bearer abc".to_owned())]);
        assert!(check_headers(&ok).is_ok());
        for (name, value) in [
            ("Host", "evil"),
            ("mcp-session-id", "x"),
            ("Transfer-Encoding", "chunked"),
            ("bad name", "x"),
            ("X-Ok", "line\nbreak"),
        ] {
            let headers = Headers::from([(name.to_owned(), value.to_owned())]);
            assert!(check_headers(&headers).is_err(), "{name}");
        }
    }

    #[test]
    fn transports_round_trip_their_names() {
        for kind in [TransportKind::StreamableHttp, TransportKind::Sse] {
            assert_eq!(TransportKind::parse(kind.as_str()), Some(kind));
        }
        // A stored name never starts a program.
        let stdio = TransportKind::Stdio(Arc::default());
        assert_eq!(stdio.as_str(), "stdio");
        assert_eq!(TransportKind::parse("stdio"), None);
    }

    fn limits() -> Limits {
        Limits {
            connect_timeout: Duration::from_secs(10),
            call_timeout: Duration::from_secs(10),
            overall_timeout: Duration::from_secs(20),
            max_retries: 0,
            retry_backoff: Duration::from_millis(10),
            breaker_failures: 0,
            breaker_reset: Duration::from_secs(1),
            max_concurrency: 4,
            tools_ttl: Duration::from_secs(60),
            max_response_bytes: 1 << 20,
        }
    }

    fn stdio_spec(program: &str, args: &[&str]) -> UpstreamSpec {
        UpstreamSpec {
            tenant_id: Uuid::nil(),
            id: Uuid::nil(),
            version: 1,
            transport: TransportKind::Stdio(Arc::new(StdioCommand {
                program: program.to_owned(),
                args: args.iter().map(|a| (*a).to_owned()).collect(),
                stderr: ChildStderr::Discard,
                ..StdioCommand::default()
            })),
            url: String::new(),
            headers: Headers::new(),
            limits: limits(),
        }
    }

    #[tokio::test]
    async fn a_stdio_upstream_that_cannot_start_is_unavailable() {
        let pool = Pool::new(UrlPolicy {
            allow_private: false,
            resolve_timeout: Duration::from_secs(1),
        });
        let missing = stdio_spec("/nonexistent/mneme-test-program", &[]);
        match pool.tools(&missing).await {
            Err(CallError::Unavailable(message)) => {
                assert!(message.contains("could not be started"), "{message}");
            }
            other => panic!("expected Unavailable, got {other:?}"),
        }
        // A program that exits at once never completes `initialize`.
        let silent = stdio_spec("true", &[]);
        assert!(matches!(
            pool.tools(&silent).await,
            Err(CallError::Unavailable(_))
        ));
    }

    #[test]
    fn stdio_commands_hide_their_environment_values() {
        let command = StdioCommand {
            program: "server".into(),
            env: BTreeMap::from([("TOKEN".to_owned(), "secret-value".to_owned())]),
            ..StdioCommand::default()
        };
        let shown = format!("{command:?}");
        assert!(
            shown.contains("TOKEN") && !shown.contains("secret-value"),
            "{shown}"
        );
    }
}
