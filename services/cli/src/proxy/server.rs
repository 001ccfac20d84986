//! The local proxy at work: one MCP server (towards the desktop client) in
//! front of the LTM and the configured upstreams.
//!
//! - `tools/list`: the LTM's tools as the LTM lists them, then every
//!   upstream's tools as `prefix__tool` (`[proxied]` descriptions,
//!   `_context_query` advertised), then `stm_proxy_read_more`, served here.
//!   A source that does not answer is left out of this listing, never
//!   failing it.
//! - `tools/call`, by name: `stm_proxy_read_more` reads the local store
//!   (a key it does not know is passed to the LTM, which may have issued
//!   it through its own proxy); `prefix__tool` of a configured upstream runs
//!   the pipeline of the hosted gateway (`_context_query` taken out →
//!   upstream call → clean → none / truncate, or progressive, which is
//!   lossless and so not cleaned → surfacing through the LTM → result);
//!   any other name goes to the LTM unchanged. Results that are errors pass
//!   through intact, as do non-text content and `structuredContent`.
//! - Every request first checks the file's modification stamp and reloads
//!   it when it changed. An invalid file is reported on stderr and the last
//!   good configuration stays. Each upstream's connection has a version
//!   that moves when its connection settings change, and the pool replaces
//!   a connection whose version moved; removed upstreams are closed.
//!
//! All connections (LTM included) go through one
//! [`mneme_mcp_upstream::pool::Pool`]: timeouts, retries of read-only
//! calls, a breaker, and child processes for stdio servers.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use futures::future::join_all;
use mneme_mcp_upstream::naming::{self, split_exposed};
use mneme_mcp_upstream::pool::{CallError, Pool, UpstreamSpec};
use mneme_mcp_upstream::sealed::Headers;
use mneme_mcp_upstream::shape;
use mneme_surfacing::extract::take_context_query;
use rand::RngCore;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorCode,
    Implementation, JsonObject, ListToolsResult, PaginatedRequestParams, ServerCapabilities,
    ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::{Peer, RequestContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde::Deserialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::config::{self, Compression, LtmSettings, Settings, UpstreamSettings};
use super::progressive;
use super::surface;

/// The tool that reads further chunks of a progressive result.
pub const READ_MORE_TOOL: &str = "stm_proxy_read_more";
/// Guard against a runaway upstream, applied before shaping.
const MAX_UPSTREAM_CHARS: usize = 10_000_000;
/// Longest a `tools/list` waits for one source (the LTM or an upstream); a
/// slower one is left out of that listing rather than failing it (clients
/// give up on the whole list after about a minute). The connection keeps
/// being made by the warm-up, so the next listing usually has it.
const LIST_WAIT: Duration = Duration::from_secs(30);
/// How long a token from `mneme login` is used before the stored
/// credentials are looked at again (they are refreshed a minute before
/// they expire, so this must stay well under a minute).
const TOKEN_RECHECK: Duration = Duration::from_secs(20);

const INSTRUCTIONS: &str = "mneme is your long-term memory. Call `recall` before answering \
questions about the user, their projects, preferences or past decisions, and `remember` for each \
durable, self-contained fact worth keeping. Tools named `prefix__tool` are the user's other MCP \
servers, reached through mneme: their results may end with a <surfaced-memories> block of \
related memories. A result that ends with a `[progressive: …]` footer continues with \
`stm_proxy_read_more`.";

/// A configured upstream with its connection spec (version included).
struct Upstream {
    settings: Arc<UpstreamSettings>,
    spec: UpstreamSpec,
}

/// The configuration in force.
struct Active {
    settings: Settings,
    /// By prefix.
    upstreams: BTreeMap<String, Arc<Upstream>>,
}

/// The file's modification time and length: a change of either reloads.
type Stamp = Option<(SystemTime, u64)>;

struct Current {
    stamp: Stamp,
    active: Arc<Active>,
}

/// See the module documentation.
pub struct Proxy {
    path: PathBuf,
    current: tokio::sync::Mutex<Current>,
    pool: Pool,
    /// (fingerprint, version) by connection id.
    versions: Mutex<HashMap<Uuid, (String, i64)>>,
    store: Mutex<progressive::Store>,
    http: reqwest::Client,
    /// The token from `mneme login` and when it was read.
    token: tokio::sync::Mutex<Option<(String, Instant)>>,
    /// Sent with surfacing requests so the LTM deduplicates per session.
    session_id: String,
    /// Whether the LTM lists a `stm_proxy_read_more` of its own.
    ltm_reads_more: AtomicBool,
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

fn stamp(path: &std::path::Path) -> Stamp {
    let metadata = std::fs::metadata(path).ok()?;
    Some((metadata.modified().ok()?, metadata.len()))
}

/// A stable id per connection, derived from a name (so the pool finds the
/// same entry across reloads).
fn connection_id(kind: &str, name: &str) -> Uuid {
    let digest = Sha256::digest(format!("{kind}\0{name}").as_bytes());
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    Uuid::from_bytes(bytes)
}

fn ltm_id() -> Uuid {
    connection_id("ltm", "")
}

/// The version of a connection: moves when its fingerprint changes, so
/// the pool replaces the connection.
fn version(versions: &Mutex<HashMap<Uuid, (String, i64)>>, id: Uuid, fingerprint: &str) -> i64 {
    let mut versions = versions.lock().unwrap_or_else(|e| e.into_inner());
    let entry = versions
        .entry(id)
        .or_insert_with(|| (fingerprint.to_owned(), 1));
    if entry.0 != fingerprint {
        fingerprint.clone_into(&mut entry.0);
        entry.1 += 1;
    }
    entry.1
}

/// Builds the specs of `settings` and closes the connections of upstreams
/// it no longer has.
fn activate(
    pool: &Pool,
    versions: &Mutex<HashMap<Uuid, (String, i64)>>,
    settings: Settings,
) -> Arc<Active> {
    let mut upstreams = BTreeMap::new();
    for (prefix, upstream) in &settings.upstreams {
        let id = connection_id("upstream", &upstream.name);
        let spec = UpstreamSpec {
            tenant_id: Uuid::nil(),
            id,
            version: version(versions, id, &upstream.fingerprint),
            transport: upstream.transport.clone(),
            url: upstream.url.clone(),
            headers: upstream.headers.clone(),
            limits: upstream.limits,
        };
        upstreams.insert(
            prefix.clone(),
            Arc::new(Upstream {
                settings: upstream.clone(),
                spec,
            }),
        );
    }
    let mut keep: Vec<Uuid> = upstreams.values().map(|u| u.spec.id).collect();
    keep.push(ltm_id());
    pool.retain_tenant(Uuid::nil(), &keep);
    Arc::new(Active {
        settings,
        upstreams,
    })
}

/// A tool error in the shape mneme uses: `{"error": {"code", "message"}}`.
fn tool_error(code: &str, message: &str) -> CallToolResult {
    let body = json!({"error": {"code": code, "message": message}});
    CallToolResult::error(vec![ContentBlock::text(body.to_string())])
}

fn unknown_tool(name: &str) -> CallToolResult {
    tool_error(
        "not_found",
        &format!("unknown tool `{name}`: tools/list names the available tools"),
    )
}

/// `stm_proxy_read_more` as listed (the hosted tool's contract).
fn read_more_tool() -> Tool {
    let input = json!({
        "type": "object",
        "properties": {
            "key": {"type": "string", "description": "The `key` named in the footer of a chunked result."},
            "offset": {"type": "integer", "minimum": 0, "default": 0,
                       "description": "Character offset to continue from (the footer's `offset`)."},
            "limit": {"type": ["integer", "null"], "minimum": 1,
                      "description": "Characters to return (default: the chunk size of the result)."}
        },
        "required": ["key"],
        "additionalProperties": false
    });
    let output = json!({
        "type": "object",
        "properties": {
            "text": {"type": "string"},
            "start": {"type": "integer"},
            "end": {"type": "integer"},
            "totalChars": {"type": "integer"},
            "nextOffset": {"type": ["integer", "null"]}
        },
        "required": ["text", "start", "end", "totalChars"]
    });
    let input = input.as_object().cloned().unwrap_or_default();
    let output = output.as_object().cloned().unwrap_or_default();
    Tool::new(
        READ_MORE_TOOL,
        "Continue reading a proxied tool result that ended with a `[progressive: …]` footer: \
         pass the footer's `key` and `offset`. Each answer holds the next chunk followed by a \
         new footer; split every part on `\\n---\\n[progressive: chars=` and join the pieces to \
         rebuild the full result exactly. Keys expire after 30 minutes without a read.",
        Arc::new(input),
    )
    .with_title("Read more of a long tool result")
    .with_raw_output_schema(Arc::new(output))
    .with_annotations(
        ToolAnnotations::new()
            .read_only(true)
            .destructive(false)
            .open_world(false),
    )
}

/// Arguments of `stm_proxy_read_more`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReadMoreArgs {
    key: String,
    #[serde(default)]
    offset: u64,
    limit: Option<u64>,
}

impl Proxy {
    /// Reads the file at `path`; `Err` lists its problems.
    pub fn start(path: PathBuf) -> anyhow::Result<Self> {
        let stamp = stamp(&path);
        let (settings, report) = config::load(&path);
        for warning in &report.warnings {
            tracing::warn!("{}: {warning}", path.display());
        }
        let Some(settings) = settings else {
            let problems: Vec<String> = report.problems.iter().map(ToString::to_string).collect();
            anyhow::bail!(
                "{} is not usable:\n  {}",
                path.display(),
                problems.join("\n  ")
            );
        };
        let http = reqwest::Client::builder()
            .connect_timeout(surface::TIMEOUT)
            .build()?;
        let pool = Pool::new(config::url_policy());
        let versions = Mutex::new(HashMap::new());
        let active = activate(&pool, &versions, settings);
        Ok(Self {
            path,
            current: tokio::sync::Mutex::new(Current { stamp, active }),
            pool,
            versions,
            store: Mutex::new(progressive::Store::default()),
            http,
            token: tokio::sync::Mutex::new(None),
            session_id: Uuid::new_v4().to_string(),
            ltm_reads_more: AtomicBool::new(false),
        })
    }

    /// The configuration in force, reloaded first when the file changed.
    async fn active(&self, peer: Option<&Peer<RoleServer>>) -> Arc<Active> {
        let mut current = self.current.lock().await;
        let now = stamp(&self.path);
        if now == current.stamp {
            return current.active.clone();
        }
        // Remembered even when the new file is invalid, so its problems are
        // logged once, not on every request.
        current.stamp = now;
        let (settings, report) = config::load(&self.path);
        for warning in &report.warnings {
            tracing::warn!("{}: {warning}", self.path.display());
        }
        let Some(settings) = settings else {
            for problem in &report.problems {
                tracing::error!("{}: {problem}", self.path.display());
            }
            tracing::error!(
                "{} has problems; the last good configuration stays in force",
                self.path.display()
            );
            return current.active.clone();
        };
        current.active = activate(&self.pool, &self.versions, settings);
        tracing::info!("{} reloaded", self.path.display());
        let active = current.active.clone();
        drop(current);
        if let Some(peer) = peer {
            // The client may not listen for it; nothing depends on it.
            let _ = peer.notify_tool_list_changed().await;
        }
        active
    }

    /// Starts every connection in the background, so that the client's
    /// first `tools/list` does not wait for `npx` to fetch a server.
    pub fn warm_up(self: &Arc<Self>) {
        let proxy = self.clone();
        tokio::spawn(async move {
            let active = proxy.active(None).await;
            let ltm = async {
                if let Ok(spec) = proxy.ltm_spec(&active.settings.ltm).await {
                    let _ = proxy.pool.tools(&spec).await;
                }
            };
            let upstreams = join_all(
                active
                    .upstreams
                    .values()
                    .map(|upstream| proxy.pool.tools(&upstream.spec)),
            );
            let (_, listed) = futures::join!(ltm, upstreams);
            for (upstream, listed) in active.upstreams.values().zip(listed) {
                if let Err(error) = listed {
                    tracing::warn!(upstream = %upstream.settings.name, %error, "upstream not reachable yet");
                }
            }
        });
    }

    /// The headers that authenticate a request to the LTM: the file's, and
    /// `Authorization: Bearer` with the API key or `mneme login`'s token
    /// (unless the file sets Authorization itself).
    async fn ltm_headers(&self, ltm: &LtmSettings) -> Result<Headers, String> {
        let mut headers = ltm.headers.clone();
        if !ltm.uses_bearer()
            || headers
                .keys()
                .any(|h| h.eq_ignore_ascii_case("authorization"))
        {
            return Ok(headers);
        }
        let token = match &ltm.api_key {
            Some(key) => key.clone(),
            None => self.login_token().await?,
        };
        headers.insert("Authorization".to_owned(), format!("Bearer {token}"));
        Ok(headers)
    }

    async fn login_token(&self) -> Result<String, String> {
        let mut cached = self.token.lock().await;
        if let Some((token, read_at)) = cached.as_ref()
            && read_at.elapsed() < TOKEN_RECHECK
        {
            return Ok(token.clone());
        }
        let token = async {
            let path = crate::login::credentials_path()?;
            crate::login::bearer(&path).await
        }
        .await
        .map_err(|error| {
            format!(
                "no `ltm.apiKey` in the proxy's file and no usable sign-in ({error:#}); \
                 run `mneme login` or set `ltm.apiKey`"
            )
        })?;
        *cached = Some((token.clone(), Instant::now()));
        Ok(token)
    }

    /// The LTM's connection spec with current credentials (a new token is
    /// a new version, hence a new connection).
    async fn ltm_spec(&self, ltm: &LtmSettings) -> Result<UpstreamSpec, String> {
        let headers = self.ltm_headers(ltm).await?;
        let credentials = serde_json::to_string(&headers).unwrap_or_default();
        let fingerprint = hex::encode(Sha256::digest(
            format!("{}\0{credentials}", ltm.fingerprint).as_bytes(),
        ));
        let id = ltm_id();
        Ok(UpstreamSpec {
            tenant_id: Uuid::nil(),
            id,
            version: version(&self.versions, id, &fingerprint),
            transport: ltm.transport.clone(),
            url: ltm.url.clone(),
            headers,
            limits: ltm.limits,
        })
    }

    /// An upstream tool as the client sees it; `None` when it is hidden or
    /// its exposed name would be too long.
    fn expose(settings: &Settings, upstream: &Upstream, tool: &Tool) -> Option<Tool> {
        let prefix = &upstream.settings.prefix;
        if upstream.settings.hidden(&tool.name)
            || naming::exposable(prefix, &tool.name, settings.client_prefix_chars).is_err()
        {
            return None;
        }
        let exposed = naming::exposed_name(prefix, &tool.name);
        let suffix = (upstream.settings.compression(&tool.name) == Compression::Progressive)
            .then_some("Chunked: use stm_proxy_read_more for more");
        let description = naming::describe(
            &exposed,
            tool.description.as_deref(),
            upstream.settings.description_override(&tool.name),
            settings.max_description_chars,
            suffix,
        );
        let mut listed = tool.clone();
        listed.name = exposed.into();
        listed.description = Some(description.into());
        if settings.advertise_context_query {
            listed.input_schema = Arc::new(naming::with_context_query(&tool.input_schema));
        }
        Some(listed)
    }

    /// `tools/list`: see the module documentation.
    pub async fn list_tools(&self, peer: Option<&Peer<RoleServer>>) -> Vec<Tool> {
        let active = self.active(peer).await;
        let ltm = async {
            let spec = self.ltm_spec(&active.settings.ltm).await?;
            match tokio::time::timeout(LIST_WAIT, self.pool.tools(&spec)).await {
                Ok(listed) => listed.map_err(|error| error.to_string()),
                Err(_) => Err(format!("no answer within {LIST_WAIT:?}")),
            }
        };
        let upstreams = join_all(active.upstreams.values().map(|upstream| async {
            let listed = tokio::time::timeout(LIST_WAIT, self.pool.tools(&upstream.spec))
                .await
                .map_err(|_| format!("no answer within {LIST_WAIT:?}"))
                .and_then(|listed| listed.map_err(|error| error.to_string()));
            match listed {
                Ok(tools) => tools
                    .iter()
                    .filter_map(|tool| Self::expose(&active.settings, upstream, tool))
                    .collect(),
                Err(error) => {
                    tracing::warn!(upstream = %upstream.settings.name, %error, "upstream tools not listed");
                    Vec::new()
                }
            }
        }));
        let (ltm, upstreams) = futures::join!(ltm, upstreams);
        let proxied: Vec<Tool> = upstreams.into_iter().flatten().collect();
        let mut tools = Vec::new();
        match ltm {
            Ok(ltm_tools) => {
                self.ltm_reads_more.store(
                    ltm_tools.iter().any(|t| t.name == READ_MORE_TOOL),
                    Ordering::Relaxed,
                );
                for tool in ltm_tools.iter() {
                    // Local names win: the client could not reach the
                    // LTM's tool of the same name anyway.
                    if tool.name == READ_MORE_TOOL || proxied.iter().any(|p| p.name == tool.name) {
                        continue;
                    }
                    tools.push(tool.clone());
                }
            }
            Err(error) => tracing::warn!(%error, "the LTM's tools are not listed"),
        }
        tools.extend(proxied);
        tools.push(read_more_tool());
        tools
    }

    /// `tools/call`: see the module documentation.
    pub async fn call_tool(
        &self,
        request: CallToolRequestParams,
        peer: Option<&Peer<RoleServer>>,
    ) -> Result<CallToolResult, ErrorData> {
        let active = self.active(peer).await;
        let name = request.name.to_string();
        if name == READ_MORE_TOOL {
            return self.read_more(&active, request).await;
        }
        if let Some((prefix, tool)) = split_exposed(&name)
            && let Some(upstream) = active.upstreams.get(prefix)
        {
            let arguments = request.arguments.unwrap_or_default();
            return Ok(self.proxied(&active, upstream, tool, arguments).await);
        }
        self.forward(&active, request).await
    }

    /// A call for the LTM, sent as it came.
    async fn forward(
        &self,
        active: &Active,
        request: CallToolRequestParams,
    ) -> Result<CallToolResult, ErrorData> {
        let spec = match self.ltm_spec(&active.settings.ltm).await {
            Ok(spec) => spec,
            Err(error) => return Ok(tool_error("unavailable", &error)),
        };
        // Retrying is safe only for tools the LTM says are read-only.
        let read_only = self.pool.tools(&spec).await.ok().is_some_and(|tools| {
            tools
                .iter()
                .find(|t| t.name == request.name)
                .and_then(|t| t.annotations.as_ref()?.read_only_hint)
                .unwrap_or(false)
        });
        match self.pool.call(&spec, request, read_only).await {
            Ok(result) => Ok(result),
            // The LTM's own JSON-RPC error stays one, with its code.
            Err(CallError::Refused { code, message }) => {
                Err(ErrorData::new(ErrorCode(code), message, None))
            }
            Err(error) => Ok(tool_error(
                "unavailable",
                &format!("the long-term memory: {error}"),
            )),
        }
    }

    /// The pipeline of a proxied call.
    async fn proxied(
        &self,
        active: &Active,
        upstream: &Upstream,
        tool_name: &str,
        mut arguments: JsonObject,
    ) -> CallToolResult {
        let exposed = naming::exposed_name(&upstream.settings.prefix, tool_name);
        let tools = match self.pool.tools(&upstream.spec).await {
            Ok(tools) => tools,
            Err(error) => return tool_error("unavailable", &error.to_string()),
        };
        let Some(tool) = tools
            .iter()
            .find(|t| t.name == tool_name)
            .and_then(|t| Self::expose(&active.settings, upstream, t).map(|_| t))
        else {
            return unknown_tool(&exposed);
        };
        let context_query = take_context_query(&mut arguments);
        let annotations = tool.annotations.as_ref();
        let read_only = annotations.and_then(|a| a.read_only_hint);
        let destructive = annotations.and_then(|a| a.destructive_hint);
        let mut params = CallToolRequestParams::new(tool_name.to_owned());
        params.arguments = Some(arguments.clone());
        let mut result = match self
            .pool
            .call(&upstream.spec, params, read_only.unwrap_or(false))
            .await
        {
            Ok(result) => result,
            Err(error) => return tool_error("unavailable", &error.to_string()),
        };
        let text_chars: usize = result
            .content
            .iter()
            .filter_map(|c| c.as_text())
            .map(|t| t.text.chars().count())
            .sum();
        if text_chars > MAX_UPSTREAM_CHARS {
            return tool_error(
                "unavailable",
                &format!(
                    "the upstream's result is larger than the proxy accepts \
                     ({MAX_UPSTREAM_CHARS} characters at most); ask for less"
                ),
            );
        }
        if result.is_error == Some(true) {
            return result;
        }
        let progressive = self.shape(active, upstream, tool_name, &mut result);
        let settings = &upstream.settings;
        if settings.surfacing_enabled && !settings.exclude.matches(&settings.prefix, tool_name) {
            let request = surface::Request {
                server: &settings.prefix,
                tool: tool_name,
                arguments: &arguments,
                context_query: context_query.as_deref(),
                read_only,
                destructive,
                agent_id: active.settings.ltm.agent_id.as_deref(),
                session_id: &self.session_id,
            };
            self.surface(active, &request, &mut result, progressive)
                .await;
        }
        result
    }

    /// Cleans and compresses the text of a result in place; true when it
    /// became the first chunk of a progressive delivery.
    fn shape(
        &self,
        active: &Active,
        upstream: &Upstream,
        tool: &str,
        result: &mut CallToolResult,
    ) -> bool {
        let compression = upstream.settings.compression(tool);
        let budget = upstream.settings.max_result_chars(tool);
        let text_blocks = result
            .content
            .iter()
            .filter(|c| c.as_text().is_some())
            .count();
        let mut progressive = false;
        for block in &mut result.content {
            let Some(text) = block.as_text() else {
                continue;
            };
            let shaped = match shape::plan(&text.text, compression, budget, text_blocks) {
                shape::Plan::Send(shaped) => shaped,
                shape::Plan::Deliver => match self.store_progressive(active, &text.text) {
                    Some(first) => {
                        progressive = true;
                        first
                    }
                    None => shape::shorten(&text.text, budget),
                },
            };
            *block = ContentBlock::text(shaped);
        }
        progressive
    }

    /// Keeps a long text for `stm_proxy_read_more` and returns its first
    /// chunk.
    fn store_progressive(&self, active: &Active, text: &str) -> Option<String> {
        let mut bytes = [0u8; 12];
        rand::rng().fill_bytes(&mut bytes);
        let key = hex::encode(bytes);
        let first = shape::chunk(
            text,
            &key,
            0,
            active.settings.chunk_chars,
            progressive::TTL.as_secs(),
        )?;
        self.store
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, text);
        Some(first.text)
    }

    /// Adds the LTM's surfaced memories; fails open.
    async fn surface(
        &self,
        active: &Active,
        request: &surface::Request<'_>,
        result: &mut CallToolResult,
        progressive: bool,
    ) {
        let ltm = &active.settings.ltm;
        let Some(url) = &ltm.surface_url else {
            return;
        };
        let asked = tokio::time::timeout(surface::TIMEOUT, async {
            let headers = self.ltm_headers(ltm).await?;
            surface::ask(&self.http, url, &headers, request).await
        })
        .await;
        let surfaced = match asked {
            Ok(Ok(Some(surfaced))) => surfaced,
            Ok(Ok(None)) => return,
            Ok(Err(error)) => {
                tracing::info!(%error, "no surfacing for this call");
                return;
            }
            Err(_) => {
                tracing::info!("surfacing took too long; the result goes without it");
                return;
            }
        };
        let mode = active.settings.injection_mode.unwrap_or(surfaced.mode);
        surface::inject(
            result,
            surface::Surfaced {
                block: surfaced.block,
                mode,
            },
            progressive,
        );
    }

    /// `stm_proxy_read_more`.
    async fn read_more(
        &self,
        active: &Active,
        request: CallToolRequestParams,
    ) -> Result<CallToolResult, ErrorData> {
        let arguments = Value::Object(request.arguments.clone().unwrap_or_default());
        let args: ReadMoreArgs = match serde_json::from_value(arguments) {
            Ok(args) => args,
            Err(error) => {
                return Ok(tool_error(
                    "invalid_argument",
                    &format!("invalid arguments: {error}"),
                ));
            }
        };
        if args.limit == Some(0) {
            return Ok(tool_error("invalid_argument", "`limit` must be at least 1"));
        }
        let content = self
            .store
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&args.key);
        let Some(content) = content else {
            // A result chunked by the LTM's own proxy has the LTM's key.
            if self.ltm_reads_more.load(Ordering::Relaxed) {
                return self.forward(active, request).await;
            }
            return Ok(tool_error(
                "not_found",
                &format!(
                    "progressive delivery key `{}` is unknown or expired; call the tool again",
                    args.key
                ),
            ));
        };
        let chunk_chars = active.settings.chunk_chars;
        let limit = args
            .limit
            .map_or(chunk_chars, |l| usize::try_from(l).unwrap_or(usize::MAX))
            .min(config::DEFAULT_MAX_RESULT_CHARS.max(chunk_chars));
        let offset = usize::try_from(args.offset).unwrap_or(usize::MAX);
        let Some(chunk) = shape::chunk(
            &content,
            &args.key,
            offset,
            limit,
            progressive::TTL.as_secs(),
        ) else {
            return Ok(tool_error(
                "invalid_argument",
                &format!(
                    "offset {offset} is past the end ({} characters); there is no more content",
                    content.chars().count()
                ),
            ));
        };
        Ok(CallToolResult::structured(json!({
            "text": chunk.text,
            "start": chunk.start,
            "end": chunk.end,
            "totalChars": chunk.total_chars,
            "nextOffset": chunk.next_offset,
        })))
    }
}

/// The MCP server the desktop client talks to.
#[derive(Debug, Clone)]
pub struct Server {
    proxy: Arc<Proxy>,
}

impl Server {
    pub fn new(proxy: Arc<Proxy>) -> Self {
        Self { proxy }
    }
}

impl ServerHandler for Server {
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_tool_list_changed()
            .build();
        ServerConfig::new(capabilities)
            .with_server_info(
                Implementation::new("mneme-proxy", env!("CARGO_PKG_VERSION"))
                    .with_title("mneme local proxy"),
            )
            .with_instructions(INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tools = self.proxy.list_tools(Some(&context.peer)).await;
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.proxy
            .call_tool(request, Some(&context.peer))
            .await
            .map(Into::into)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_move_only_when_the_connection_changes() {
        let versions = Mutex::new(HashMap::new());
        let fs = connection_id("upstream", "fs");
        assert_eq!(fs, connection_id("upstream", "fs"), "stable across reloads");
        assert_ne!(fs, connection_id("upstream", "git"));
        assert_ne!(ltm_id(), connection_id("upstream", ""));
        assert_eq!(version(&versions, fs, "a"), 1);
        assert_eq!(version(&versions, fs, "a"), 1);
        assert_eq!(version(&versions, fs, "b"), 2);
        // Going back is a change too: the pool holds the connection of "b".
        assert_eq!(version(&versions, fs, "a"), 3);
    }

    #[test]
    fn read_more_is_listed_with_the_hosted_contract() {
        let tool = read_more_tool();
        assert_eq!(tool.name, READ_MORE_TOOL);
        assert_eq!(tool.input_schema["required"], json!(["key"]));
        assert!(
            tool.output_schema
                .as_ref()
                .is_some_and(|s| s["properties"].get("nextOffset").is_some())
        );
    }
}
