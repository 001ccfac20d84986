//! The MCP proxy: a tenant's upstream MCP servers behind mneme, their tools
//! exposed as `prefix__tool` next to mneme's own, every call shaped and
//! surfaced.
//!
//! - The tenant's registry (`upstream_servers`) is read once per pod and
//!   kept until an `upstreams-changed` announcement (Redis pub/sub, from the
//!   admin API or the CLI) or [`REGISTRY_TTL`]; connection state lives in
//!   [`mneme_mcp_upstream::pool::Pool`], which replaces a connection when
//!   the upstream's stored version changes.
//! - `tools/list`: each enabled upstream's tools, renamed, described
//!   `[proxied] …`, `_context_query` advertised; filtered by the caller's
//!   permission and mode like mneme's own tools (a proxied tool that is not
//!   annotated read-only needs `write`).
//! - `tools/call`, in order: find the upstream by prefix (an unknown prefix
//!   reads exactly like an unknown tool, so one tenant cannot learn whether
//!   another's upstream exists) → access check → `_context_query` taken out
//!   → result cache (read-only tools only) → upstream call (timeouts,
//!   retries, breaker) → size guards → clean → `none` / `truncate`, or
//!   `progressive` (lossless, so not cleaned) → surfacing → result. Results that are errors, or carry
//!   no text, pass through intact; `structuredContent` is kept.
//!
//! [`admin`] serves `/v1/upstreams`; [`stats`] keeps this pod's figures per
//! upstream and tool for it.

pub(crate) mod admin;
mod stats;

pub(crate) use stats::ToolStats;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::join_all;
use mneme_cache::Cache;
use mneme_config::ProxyConfig;
use mneme_core::{Error, ErrorCode, Principal};
use mneme_mcp_upstream::naming::{self, split_exposed};
use mneme_mcp_upstream::pool::{CallError, Pool, TransportKind, UpstreamSpec};
use mneme_mcp_upstream::registration::{self, ToolOverride};
use mneme_mcp_upstream::sealed::HeaderKey;
use mneme_mcp_upstream::shape;
use mneme_mcp_upstream::ssrf::UrlPolicy;
use mneme_store::upstreams::{self, Upstream};
use mneme_store::{Store, TenantTx};
use mneme_surfacing::extract::take_context_query;
use mneme_surfacing::gate::{ToolAnnotations, ToolPatterns};
use mneme_surfacing::render::{InjectionMode, inject_text};
use rand::RngCore;
use rmcp::RoleServer;
use rmcp::model::{CallToolRequestParams, CallToolResult, ContentBlock, JsonObject, Tool};
use rmcp::service::Peer;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tracing::Instrument;
use uuid::Uuid;

use crate::metrics::METRICS;
use crate::surfacing::{Outcome, Source, Surfacer, ToolCall};

/// How long a pod trusts a tenant's registry without an announcement.
const REGISTRY_TTL: Duration = Duration::from_secs(60);
/// Longest a `tools/list` waits for one upstream; a slower one is left
/// out of this listing rather than holding up the others.
const LIST_WAIT: Duration = Duration::from_secs(5);
/// The tool that reads further chunks of a progressive result.
pub(crate) const READ_MORE_TOOL: &str = "stm_proxy_read_more";

/// One usable upstream of a tenant.
struct Active {
    row: Upstream,
    spec: UpstreamSpec,
    overrides: BTreeMap<String, ToolOverride>,
    exclude: ToolPatterns,
}

impl Active {
    fn compression<'a>(&'a self, tool: &str, config: &'a ProxyConfig) -> &'a str {
        self.overrides
            .get(tool)
            .and_then(|o| o.compression.as_deref())
            .or(self.row.settings.compression.as_deref())
            .unwrap_or(config.compression.as_str())
    }

    fn max_result_chars(&self, tool: &str, config: &ProxyConfig) -> usize {
        self.overrides
            .get(tool)
            .and_then(|o| o.max_result_chars)
            .map(|n| n as usize)
            .or(self
                .row
                .settings
                .max_result_chars
                .and_then(|n| usize::try_from(n).ok()))
            .unwrap_or(config.max_result_chars)
    }

    fn cache_ttl(&self, tool: &str, config: &ProxyConfig) -> Duration {
        self.overrides
            .get(tool)
            .and_then(|o| o.cache_ttl_secs)
            .map(u64::from)
            .or(self
                .row
                .settings
                .cache_ttl_secs
                .and_then(|n| u64::try_from(n).ok()))
            .map_or(config.cache_ttl, Duration::from_secs)
    }

    fn hidden(&self, tool: &str) -> bool {
        self.overrides.get(tool).is_some_and(|o| o.hidden)
    }
}

/// A tenant's usable upstreams, by prefix.
#[derive(Default)]
struct Registry {
    by_prefix: BTreeMap<String, Arc<Active>>,
}

/// See the module documentation.
pub(crate) struct Proxy {
    config: ProxyConfig,
    store: Store,
    cache: Cache,
    pool: Pool,
    header_key: Option<HeaderKey>,
    policy: UrlPolicy,
    /// Longest a proxied call may take (just below the request timeout).
    call_cap: Duration,
    registries: moka::future::Cache<Uuid, Arc<Registry>>,
    /// Sessions held by this pod, by tenant: told when the tenant's
    /// upstreams (and so their tool lists) change.
    sessions: std::sync::Mutex<std::collections::HashMap<Uuid, Vec<Peer<RoleServer>>>>,
    stats: stats::Stats,
    /// Tenants whose upstream announced new tools; taken once by the
    /// gateway's listener task.
    tool_changes: std::sync::Mutex<Option<tokio::sync::mpsc::UnboundedReceiver<Uuid>>>,
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy").finish_non_exhaustive()
    }
}

/// A proxied tool as listed, with what the call path needs to know.
struct Listed {
    tool: Tool,
    read_only: bool,
}

/// Arguments of `stm_proxy_read_more`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReadMoreArgs {
    /// The `key` named in the footer of a chunked result.
    pub(crate) key: String,
    /// Character offset to continue from (the footer's `offset`).
    #[serde(default)]
    pub(crate) offset: u64,
    /// Characters to return (default: the chunk size of the result).
    pub(crate) limit: Option<u64>,
}

/// One further chunk of a progressive result.
#[derive(Debug, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ReadMoreResult {
    /// The chunk followed by its footer; split on the footer token
    /// (`\n---\n[progressive: chars=`) and concatenate to rebuild the result.
    pub(crate) text: String,
    pub(crate) start: u64,
    pub(crate) end: u64,
    pub(crate) total_chars: u64,
    /// Where the next chunk starts; absent after the last one.
    pub(crate) next_offset: Option<u64>,
    /// Memories relevant to the original call that were not shown yet (in
    /// `section` injection mode only), as a `<surfaced-memories>` block.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) surfaced_memories: Option<String>,
}

/// What a progressive result came from, kept beside it so that reading a
/// continuation can surface again (`section` injection mode).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Continuation {
    prefix: String,
    tool: String,
    arguments: JsonObject,
    context_query: Option<String>,
    read_only: Option<bool>,
    destructive: Option<bool>,
}

/// The text of a result, as shaping sees it.
#[derive(Debug, Serialize, Deserialize)]
struct CachedResult {
    content: Vec<ContentBlock>,
    structured_content: Option<serde_json::Value>,
}

impl Proxy {
    /// `request_timeout` caps every upstream's overall timeout: the client
    /// should read a tool error, not a 504 from the gateway.
    pub(crate) fn new(
        config: ProxyConfig,
        request_timeout: Duration,
        store: Store,
        cache: Cache,
    ) -> Result<Self, mneme_mcp_upstream::sealed::SealError> {
        let header_key = config
            .header_key
            .as_ref()
            .map(|key| HeaderKey::from_base64(key.expose()))
            .transpose()?;
        let policy = UrlPolicy {
            allow_private: config.allow_private_upstreams,
            resolve_timeout: config.connect_timeout.min(Duration::from_secs(5)),
        };
        let (pool, tool_changes) = Pool::with_tool_changes(policy);
        Ok(Self {
            pool,
            tool_changes: std::sync::Mutex::new(Some(tool_changes)),
            registries: moka::future::Cache::builder()
                .max_capacity(100_000)
                .time_to_live(REGISTRY_TTL)
                .build(),
            sessions: std::sync::Mutex::default(),
            stats: stats::Stats::new(config.idle),
            config,
            call_cap: request_timeout.saturating_sub(Duration::from_millis(500)),
            store,
            cache,
            header_key,
            policy,
        })
    }

    pub(crate) fn config(&self) -> &ProxyConfig {
        &self.config
    }

    pub(crate) fn policy(&self) -> &UrlPolicy {
        &self.policy
    }

    pub(crate) fn header_key(&self) -> Option<&HeaderKey> {
        self.header_key.as_ref()
    }

    /// Forgets what this pod knew of a tenant's upstreams (after an
    /// announcement or a change made through this pod) and tells the
    /// tenant's sessions on this pod that their tool list changed.
    pub(crate) async fn reload(&self, tenant_id: Uuid) {
        self.registries.invalidate(&tenant_id).await;
        self.tell_sessions(tenant_id).await;
    }

    /// The receiver of tenants whose upstreams announced new tools (once).
    pub(crate) fn take_tool_changes(&self) -> Option<tokio::sync::mpsc::UnboundedReceiver<Uuid>> {
        self.tool_changes.lock().expect("tool changes lock").take()
    }

    /// Sends `notifications/tools/list_changed` to the tenant's sessions
    /// on this pod.
    pub(crate) async fn tell_sessions(&self, tenant_id: Uuid) {
        let peers = {
            let mut sessions = self.sessions.lock().expect("sessions lock");
            let Some(peers) = sessions.get_mut(&tenant_id) else {
                return;
            };
            peers.retain(|peer| !peer.is_transport_closed());
            peers.clone()
        };
        for peer in peers {
            // A session that went away meanwhile is no failure.
            let _ = peer.notify_tool_list_changed().await;
        }
    }

    /// Remembers a session of a tenant, to tell it of upstream changes.
    pub(crate) fn watch(&self, tenant_id: Uuid, peer: Peer<RoleServer>) {
        let mut sessions = self.sessions.lock().expect("sessions lock");
        let peers = sessions.entry(tenant_id).or_default();
        peers.retain(|peer| !peer.is_transport_closed());
        peers.push(peer);
    }

    /// Closes idle connections and updates the connection gauge.
    pub(crate) fn housekeeping(&self) {
        let closed = self.pool.close_idle(self.config.idle);
        if closed > 0 {
            tracing::debug!(closed, "idle upstream connections closed");
        }
        METRICS
            .proxy_connections
            .set(i64::try_from(self.pool.connected()).unwrap_or(i64::MAX));
    }

    /// This pod's figures of one upstream's tools.
    pub(crate) fn stats(
        &self,
        tenant_id: Uuid,
        id: Uuid,
    ) -> std::collections::BTreeMap<String, ToolStats> {
        self.stats.of(tenant_id, id)
    }

    pub(crate) fn health(
        &self,
        tenant_id: Uuid,
        id: Uuid,
    ) -> Option<mneme_mcp_upstream::pool::Health> {
        self.pool.health(tenant_id, id)
    }

    async fn registry(&self, tenant_id: Uuid) -> Arc<Registry> {
        let loaded = self
            .registries
            .try_get_with(tenant_id, self.load(tenant_id))
            .await;
        loaded.unwrap_or_else(|error| {
            tracing::warn!(%error, "upstream registry could not be read; no upstreams this time");
            Arc::new(Registry::default())
        })
    }

    async fn load(&self, tenant_id: Uuid) -> Result<Arc<Registry>, mneme_store::StoreError> {
        let mut db = self.store.client().await?;
        let tx = TenantTx::begin(&mut db, tenant_id).await?;
        let rows = upstreams::list(&tx).await?;
        drop(tx);
        self.pool
            .retain_tenant(tenant_id, &rows.iter().map(|r| r.id).collect::<Vec<_>>());
        let mut registry = Registry::default();
        for row in rows.into_iter().filter(|r| r.settings.enabled) {
            let headers = match &self.header_key {
                Some(key) => key.open(tenant_id, row.headers.sealed.as_deref()),
                None if row.headers.sealed.is_none() => Ok(Default::default()),
                None => Err(mneme_mcp_upstream::sealed::SealError::BadKey),
            };
            let Ok(headers) = headers else {
                tracing::warn!(upstream = %row.id, "upstream headers do not open; upstream skipped");
                continue;
            };
            let Some(transport) = TransportKind::parse(&row.settings.transport) else {
                continue;
            };
            let overrides =
                registration::tool_overrides(&row.settings.tool_overrides).unwrap_or_default();
            let exclude = ToolPatterns::new(&row.settings.exclude_tools)
                .unwrap_or_else(|_| ToolPatterns::new(&[]).expect("no patterns compile"));
            let spec = UpstreamSpec {
                tenant_id,
                id: row.id,
                version: row.version,
                transport,
                url: row.settings.url.clone(),
                headers,
                limits: self.capped(registration::limits(&row.settings, &self.config)),
            };
            registry.by_prefix.insert(
                row.settings.prefix.clone(),
                Arc::new(Active {
                    row,
                    spec,
                    overrides,
                    exclude,
                }),
            );
        }
        Ok(Arc::new(registry))
    }

    fn capped(
        &self,
        mut limits: mneme_mcp_upstream::pool::Limits,
    ) -> mneme_mcp_upstream::pool::Limits {
        limits.overall_timeout = limits.overall_timeout.min(self.call_cap);
        limits.call_timeout = limits.call_timeout.min(limits.overall_timeout);
        limits.connect_timeout = limits.connect_timeout.min(limits.overall_timeout);
        limits
    }

    /// Whether an upstream tool is offered: not hidden, and its exposed
    /// name within the limit.
    fn exposes(&self, upstream: &Active, tool: &Tool) -> bool {
        !upstream.hidden(&tool.name)
            && naming::exposable(
                &upstream.row.settings.prefix,
                &tool.name,
                self.config.client_prefix_chars,
            )
            .is_ok()
    }

    /// The proxied tools of one upstream, as listed to clients.
    async fn listed(&self, upstream: &Active) -> Result<Vec<Listed>, CallError> {
        let tools = self.pool.tools(&upstream.spec).await?;
        let prefix = &upstream.row.settings.prefix;
        Ok(tools
            .iter()
            .filter(|tool| self.exposes(upstream, tool))
            .map(|tool| {
                let exposed = naming::exposed_name(prefix, &tool.name);
                let suffix = (upstream.compression(&tool.name, &self.config) == "progressive")
                    .then_some("Chunked: use stm_proxy_read_more for more");
                let description = naming::describe(
                    &exposed,
                    tool.description.as_deref(),
                    upstream
                        .overrides
                        .get(tool.name.as_ref())
                        .and_then(|o| o.description.as_deref()),
                    self.config.max_description_chars,
                    suffix,
                );
                let mut listed = tool.clone();
                listed.name = exposed.into();
                listed.description = Some(description.into());
                if self.config.advertise_context_query {
                    listed.input_schema = Arc::new(naming::with_context_query(&tool.input_schema));
                }
                Listed {
                    tool: listed,
                    read_only: read_only(tool),
                }
            })
            .collect())
    }

    /// The tenant's proxied tools the principal may call. Upstreams that
    /// do not answer in time are left out of this listing.
    pub(crate) async fn list_tools(&self, principal: &Principal) -> Vec<Tool> {
        let registry = self.registry(principal.tenant_id).await;
        let listings = join_all(registry.by_prefix.values().map(|upstream| async move {
            let wait = upstream.spec.limits.connect_timeout.min(LIST_WAIT);
            match tokio::time::timeout(wait, self.listed(upstream)).await {
                Ok(Ok(tools)) => tools,
                Ok(Err(error)) => {
                    tracing::info!(upstream = %upstream.row.id, %error, "upstream tools not listed");
                    Vec::new()
                }
                Err(_) => {
                    tracing::info!(upstream = %upstream.row.id, "upstream tools not listed in time");
                    Vec::new()
                }
            }
        }))
        .await;
        listings
            .into_iter()
            .flatten()
            .filter(|listed| {
                crate::tools::authorize_proxied(&listed.tool.name, listed.read_only, principal)
                    .is_ok()
            })
            .map(|listed| listed.tool)
            .collect()
    }

    /// Runs a proxied call; `None` when `name` is no tool of the tenant's
    /// upstreams (the caller answers "unknown tool", the same answer as for
    /// any other unknown name).
    pub(crate) async fn call(
        &self,
        surfacer: &Surfacer,
        principal: &Principal,
        name: &str,
        arguments: JsonObject,
    ) -> Option<Result<CallToolResult, Error>> {
        let (prefix, tool_name) = split_exposed(name)?;
        let registry = self.registry(principal.tenant_id).await;
        let upstream = registry.by_prefix.get(prefix)?.clone();
        if upstream.hidden(tool_name) {
            return None;
        }
        // The upstream's own entry (cached): renaming and describing every
        // tool, as listing does, is not needed to call one.
        let tools = match self.pool.tools(&upstream.spec).await {
            Ok(tools) => tools,
            Err(error) => return Some(Ok(failure(&error, "none"))),
        };
        let tool = tools
            .iter()
            .find(|t| t.name == tool_name && self.exposes(&upstream, t))?;
        if let Err(error) = crate::tools::authorize_proxied(name, read_only(tool), principal) {
            return Some(Err(error));
        }
        // Upstreams are named by id in traces: names are the tenant's words.
        let span = tracing::info_span!("proxy_call", upstream = %upstream.row.id, tool = tool_name);
        Some(Ok(self
            .run(surfacer, principal, &upstream, tool, tool_name, arguments)
            .instrument(span)
            .await))
    }

    /// The call pipeline once the tool is found and allowed.
    async fn run(
        &self,
        surfacer: &Surfacer,
        principal: &Principal,
        upstream: &Active,
        tool: &Tool,
        tool_name: &str,
        mut arguments: JsonObject,
    ) -> CallToolResult {
        let started = Instant::now();
        let context_query = take_context_query(&mut arguments);
        let compression = upstream.compression(tool_name, &self.config).to_owned();
        let annotations = tool.annotations.as_ref();
        let annotations = ToolAnnotations {
            read_only: annotations.and_then(|a| a.read_only_hint),
            destructive: annotations.and_then(|a| a.destructive_hint),
        };
        let (mut result, outcome) = match self
            .fetch(
                upstream,
                tool_name,
                &arguments,
                read_only(tool),
                &compression,
            )
            .await
        {
            Ok(fetched) => fetched,
            Err(result) => {
                self.stats.record(
                    (upstream.spec.tenant_id, upstream.row.id),
                    tool_name,
                    stats::Ended::Failed,
                    (0, 0),
                    started.elapsed(),
                );
                return result;
            }
        };
        let chars_in = text_chars(&result);
        let continuation = Continuation {
            prefix: upstream.row.settings.prefix.clone(),
            tool: tool_name.to_owned(),
            arguments: arguments.clone(),
            context_query: context_query.clone(),
            read_only: annotations.read_only,
            destructive: annotations.destructive,
        };
        let mut progressive = false;
        if result.is_error != Some(true) {
            progressive = self
                .shape(
                    principal,
                    upstream,
                    &continuation,
                    &compression,
                    &mut result,
                )
                .await;
        }
        let ended = match outcome {
            "cached" => stats::Ended::Cached,
            "tool_error" => stats::Ended::ToolError,
            _ => stats::Ended::Ok,
        };
        self.stats.record(
            (upstream.spec.tenant_id, upstream.row.id),
            tool_name,
            ended,
            (chars_in, text_chars(&result)),
            started.elapsed(),
        );
        METRICS
            .proxy_calls
            .with_label_values(&[outcome, compression.as_str()])
            .inc();
        METRICS
            .proxy_seconds
            .with_label_values(&[outcome])
            .observe(started.elapsed().as_secs_f64());
        if result.is_error != Some(true) {
            let prefix = upstream.row.settings.prefix.clone();
            let call = ToolCall {
                upstream_enabled: upstream.row.settings.surfacing_enabled
                    && !upstream.exclude.matches(&prefix, tool_name),
                server: prefix,
                tool: tool_name.to_owned(),
                arguments,
                context_query,
                annotations,
                agent_id: Some(principal.agent_id.clone()),
                session_id: principal.session_id.clone(),
                model: None,
                context_window: None,
                trace_id: None,
                source: Source::Proxy,
            };
            inject(surfacer, principal, call, &mut result, progressive).await;
        }
        tracing::debug!(
            outcome,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "proxied call"
        );
        result
    }

    /// The upstream result, from the cache when allowed; `Err` is the
    /// tool error to answer with.
    async fn fetch(
        &self,
        upstream: &Active,
        tool: &str,
        arguments: &JsonObject,
        read_only: bool,
        compression: &str,
    ) -> Result<(CallToolResult, &'static str), CallToolResult> {
        let ttl = upstream.cache_ttl(tool, &self.config);
        let tenant = upstream.spec.tenant_id.to_string();
        let digest = (read_only && !ttl.is_zero()).then(|| {
            let canonical = serde_json::to_string(arguments).unwrap_or_default();
            hex::encode(Sha256::digest(
                format!(
                    "{}\0{}\0{tool}\0{canonical}",
                    upstream.row.id, upstream.row.version
                )
                .as_bytes(),
            ))
        });
        if let Some(digest) = &digest
            && let Some(cached) = self.cache.cached_result(&tenant, digest).await
            && let Ok(cached) = serde_json::from_str::<CachedResult>(&cached)
        {
            let mut result = CallToolResult::success(cached.content);
            result.structured_content = cached.structured_content;
            return Ok((result, "cached"));
        }
        let mut params = CallToolRequestParams::new(tool.to_owned());
        params.arguments = Some(arguments.clone());
        let result = self
            .pool
            .call(&upstream.spec, params, read_only)
            .await
            .map_err(|error| failure(&error, compression))?;
        let envelope_bytes = serde_json::to_vec(&result).map_or(usize::MAX, |v| v.len());
        let text_chars: usize = result
            .content
            .iter()
            .filter_map(|c| c.as_text())
            .map(|t| t.text.chars().count())
            .sum();
        METRICS
            .proxy_chars
            .with_label_values(&["in"])
            .inc_by(text_chars as u64);
        if envelope_bytes > self.config.max_upstream_bytes
            || text_chars > self.config.max_upstream_chars
        {
            METRICS
                .proxy_calls
                .with_label_values(&["too_large", compression])
                .inc();
            return Err(tool_error(&format!(
                "the upstream's result is larger than this mneme accepts ({} characters, {} bytes \
                 at most); ask for less",
                self.config.max_upstream_chars, self.config.max_upstream_bytes
            )));
        }
        let outcome = if result.is_error == Some(true) {
            "tool_error"
        } else {
            "ok"
        };
        if let Some(digest) = &digest
            && result.is_error != Some(true)
            && text_chars <= self.config.cache_max_chars
            && result.content.iter().all(|c| c.as_text().is_some())
        {
            let cached = CachedResult {
                content: result.content.clone(),
                structured_content: result.structured_content.clone(),
            };
            if let Ok(value) = serde_json::to_string(&cached) {
                self.cache.cache_result(&tenant, digest, &value, ttl).await;
            }
        }
        Ok((result, outcome))
    }

    /// Cleans and compresses the text of a result in place; true when it
    /// became the first chunk of a progressive delivery.
    async fn shape(
        &self,
        principal: &Principal,
        upstream: &Active,
        continuation: &Continuation,
        compression: &str,
        result: &mut CallToolResult,
    ) -> bool {
        let tool = continuation.tool.as_str();
        let budget = upstream.max_result_chars(tool, &self.config);
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
            let compression = shape::Compression::parse(compression).unwrap_or_default();
            let shaped = match shape::plan(&text.text, compression, budget, text_blocks) {
                shape::Plan::Send(shaped) => shaped,
                shape::Plan::Deliver => match self
                    .store_progressive(principal, &text.text, continuation)
                    .await
                {
                    Some(first) => {
                        progressive = true;
                        first
                    }
                    None => shape::shorten(&text.text, budget),
                },
            };
            METRICS
                .proxy_chars
                .with_label_values(&["out"])
                .inc_by(shaped.chars().count() as u64);
            *block = ContentBlock::text(shaped);
        }
        progressive
    }

    /// Stores a long text for `stm_proxy_read_more` and returns its first
    /// chunk; `None` when it could not be stored.
    async fn store_progressive(
        &self,
        principal: &Principal,
        text: &str,
        continuation: &Continuation,
    ) -> Option<String> {
        let mut bytes = [0u8; 12];
        rand::rng().fill_bytes(&mut bytes);
        let key = hex::encode(bytes);
        let (tenant, api_key) = (
            principal.tenant_id.to_string(),
            principal.key_id.to_string(),
        );
        let ttl = self.config.progressive_ttl;
        if !self
            .cache
            .store_progressive(&tenant, &api_key, &key, text, ttl)
            .await
        {
            return None;
        }
        if let Ok(context) = serde_json::to_string(continuation) {
            let context_key = format!("{key}:call");
            self.cache
                .store_progressive(&tenant, &api_key, &context_key, &context, ttl)
                .await;
        }
        shape::chunk(
            text,
            &key,
            0,
            self.config.chunk_chars,
            self.config.progressive_ttl.as_secs(),
        )
        .map(|chunk| chunk.text)
    }

    /// `stm_proxy_read_more`: a further chunk of a result this key received.
    pub(crate) async fn read_more(
        &self,
        surfacer: &Surfacer,
        principal: &Principal,
        args: ReadMoreArgs,
    ) -> Result<ReadMoreResult, Error> {
        if args.limit == Some(0) {
            return Err(Error::invalid_argument("`limit` must be at least 1"));
        }
        let not_found = || {
            Error::new(
                ErrorCode::NotFound,
                format!(
                    "progressive delivery key `{}` is unknown or expired; call the tool again",
                    args.key
                ),
            )
        };
        if args.key.len() > 64 || !args.key.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(not_found());
        }
        let content = self
            .cache
            .progressive(
                &principal.tenant_id.to_string(),
                &principal.key_id.to_string(),
                &args.key,
                self.config.progressive_ttl,
            )
            .await
            .ok_or_else(not_found)?;
        let limit = args
            .limit
            .map_or(self.config.chunk_chars, |l| {
                usize::try_from(l).unwrap_or(usize::MAX)
            })
            .min(self.config.max_result_chars.max(self.config.chunk_chars));
        let offset = usize::try_from(args.offset).unwrap_or(usize::MAX);
        let chunk = shape::chunk(
            &content,
            &args.key,
            offset,
            limit,
            self.config.progressive_ttl.as_secs(),
        )
        .ok_or_else(|| {
            Error::invalid_argument(format!(
                "offset {offset} is past the end ({} characters); there is no more content",
                content.chars().count()
            ))
        })?;
        let surfaced_memories = if surfacer.settings().injection_mode == "section" {
            self.surface_continuation(surfacer, principal, &args.key)
                .await
        } else {
            None
        };
        Ok(ReadMoreResult {
            text: chunk.text,
            start: chunk.start as u64,
            end: chunk.end as u64,
            total_chars: chunk.total_chars as u64,
            next_offset: chunk.next_offset.map(|n| n as u64),
            surfaced_memories,
        })
    }

    /// Surfaces again for the call a progressive result came from (the
    /// gates apply as usual: what this key and agent saw is not repeated).
    async fn surface_continuation(
        &self,
        surfacer: &Surfacer,
        principal: &Principal,
        key: &str,
    ) -> Option<String> {
        let context = self
            .cache
            .progressive(
                &principal.tenant_id.to_string(),
                &principal.key_id.to_string(),
                &format!("{key}:call"),
                self.config.progressive_ttl,
            )
            .await?;
        let continuation: Continuation = serde_json::from_str(&context).ok()?;
        let registry = self.registry(principal.tenant_id).await;
        // The upstream may have been removed or switched off meanwhile.
        let upstream = registry.by_prefix.get(&continuation.prefix)?;
        let call = ToolCall {
            upstream_enabled: upstream.row.settings.surfacing_enabled
                && !upstream
                    .exclude
                    .matches(&continuation.prefix, &continuation.tool),
            server: continuation.prefix,
            tool: continuation.tool,
            arguments: continuation.arguments,
            context_query: continuation.context_query,
            annotations: ToolAnnotations {
                read_only: continuation.read_only,
                destructive: continuation.destructive,
            },
            agent_id: Some(principal.agent_id.clone()),
            session_id: principal.session_id.clone(),
            model: None,
            context_window: None,
            trace_id: None,
            source: Source::Proxy,
        };
        match surfacer.surface(principal, call).await {
            Outcome::Surfaced(surfacing) => Some(surfacing.block),
            Outcome::Skipped(_) => None,
        }
    }
}

/// Whether an upstream tool says it only reads (unannotated tools may
/// write).
fn read_only(tool: &Tool) -> bool {
    tool.annotations
        .as_ref()
        .and_then(|a| a.read_only_hint)
        .unwrap_or(false)
}

/// Characters of a result's text items.
fn text_chars(result: &CallToolResult) -> u64 {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text())
        .map(|t| t.text.chars().count() as u64)
        .sum()
}

/// Adds surfaced memories to a proxied result.
async fn inject(
    surfacer: &Surfacer,
    principal: &Principal,
    call: ToolCall,
    result: &mut CallToolResult,
    progressive: bool,
) {
    let Outcome::Surfaced(surfacing) = surfacer.surface(principal, call).await else {
        return;
    };
    let last_text = result.content.iter().rposition(|c| c.as_text().is_some());
    match (surfacing.mode, last_text) {
        // A prepended block would shift the offsets of a chunked result;
        // it goes after the footer instead, where splitting drops it.
        (InjectionMode::Prepend, Some(index)) if progressive => {
            append_block(result, index, &surfacing.block, InjectionMode::Append);
        }
        (InjectionMode::Section, _) | (_, None) => {
            result.content.push(ContentBlock::text(surfacing.block));
        }
        (mode, Some(index)) => append_block(result, index, &surfacing.block, mode),
    }
}

fn append_block(result: &mut CallToolResult, index: usize, block: &str, mode: InjectionMode) {
    if let Some(text) = result.content[index].as_text() {
        let injected = inject_text(&text.text, block, mode);
        result.content[index] = ContentBlock::text(injected);
    }
}

fn tool_error(message: &str) -> CallToolResult {
    let body = serde_json::json!({"error": {"code": "unavailable", "message": message}});
    CallToolResult::error(vec![ContentBlock::text(body.to_string())])
}

/// A failed upstream call as the tool result the agent reads.
fn failure(error: &CallError, compression: &str) -> CallToolResult {
    let outcome = match error {
        CallError::BreakerOpen { .. } => "breaker_open",
        CallError::Timeout(_) => "timeout",
        CallError::Unavailable(_) => "unavailable",
        CallError::Blocked(_) => "blocked",
        CallError::Refused { .. } => "refused",
    };
    METRICS
        .proxy_calls
        .with_label_values(&[outcome, compression])
        .inc();
    tool_error(&error.to_string())
}
