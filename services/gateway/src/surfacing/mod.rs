//! The active-surfacing engine: from one tool call to an injected block of
//! relevant memories (or a reason why not).
//!
//! The pure steps (extraction, gates, buckets, rendering, tuning) live in
//! `mneme-surfacing`; this module runs them in the seed's order against the
//! shared state:
//!
//! 1. switches: global, per upstream;
//! 2. `exclude_tools` globs, write tools (MCP annotations first);
//! 3. the query: template → `_context_query` → paths → semantic keys → tool
//!    name; a query that looks like a secret is neither searched nor stored;
//! 4. the tenant's rate window (Redis), the query cooldown (Redis);
//! 5. the circuit breaker (per tenant, this pod), then gRPC `Surface` under
//!    a hard timeout, asking for candidates above the threshold (tuned per
//!    tenant, server and tool) without demoted or invalidated memories;
//! 6. dedup against what this key and agent saw within the dedup TTL;
//! 7. the block, capped, with its `surfacing_id`; the event is stored and
//!    the delivered memories and query recorded for dedup and cooldown.
//!
//! Every step fails open: a skipped surfacing leaves the tool result as it
//! was, and nothing here can fail the call it decorates.
//!
//! `feedback` and `stats` serve the `stm_surfacing_feedback` and
//! `stm_surfacing_stats` tools; `http` serves `POST /v1/surface`.

pub(crate) mod http;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mneme_cache::Cache;
use mneme_cache::surfacing::SurfacingScope;
use mneme_config::SurfacingConfig;
use mneme_core::breaker::{Admit, Breaker};
use mneme_core::principal::resolve_agent_id;
use mneme_core::{Error, ErrorCode, Permission, Principal};
use mneme_proto::v1::{SurfaceCandidate, SurfaceRequest};
use mneme_store::surfacing::{self as events, Counts, NewEvent, StatsFilter};
use mneme_store::{Store, TenantTx};
use mneme_surfacing::extract::{Extracted, Templates, extract_query};
use mneme_surfacing::feedback::{FeedbackInput, Rating, parse_feedback};
use mneme_surfacing::gate::{
    DEFAULT_WRITE_TOOL_PATTERNS, ToolAnnotations, ToolPatterns, in_cooldown, is_write_tool,
};
use mneme_surfacing::model::{self, Budget};
use mneme_surfacing::privacy;
use mneme_surfacing::relevance::{self, bucket};
use mneme_surfacing::render::{BlockOptions, InjectionMode, Memory, render_block};
use mneme_surfacing::tuner::{self, Direction, FeedbackCounts, TunerSettings};
use rand::RngCore;
use uuid::Uuid;

use crate::backends::Backends;
use crate::metrics::METRICS;

/// The tool agents rate surfacings with.
pub(crate) const FEEDBACK_TOOL: &str = "stm_surfacing_feedback";
/// How long a pod trusts a tuned threshold it read.
const THRESHOLD_CACHE: Duration = Duration::from_secs(30);
/// Candidates asked for per memory injected: dedup may drop some.
const OVERFETCH: usize = 3;

/// Where a tool call came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    /// A call through mneme's MCP proxy.
    Proxy,
    /// A host's hook (Claude Code PostToolUse).
    Hook,
    /// `POST /v1/surface` with a tool event of the caller's own.
    Api,
}

impl Source {
    fn as_str(self) -> &'static str {
        match self {
            Source::Proxy => "proxy",
            Source::Hook => "hook",
            Source::Api => "api",
        }
    }
}

/// One tool call to surface on.
#[derive(Debug, Clone)]
pub(crate) struct ToolCall {
    /// The upstream's prefix; `builtin` for a host's own tools.
    pub(crate) server: String,
    pub(crate) tool: String,
    /// The arguments, `_context_query` already taken out.
    pub(crate) arguments: serde_json::Map<String, serde_json::Value>,
    pub(crate) context_query: Option<String>,
    pub(crate) annotations: ToolAnnotations,
    pub(crate) agent_id: Option<String>,
    pub(crate) session_id: Option<String>,
    /// The client's model or context window, for the size of the block.
    pub(crate) model: Option<String>,
    pub(crate) context_window: Option<u32>,
    pub(crate) trace_id: Option<String>,
    /// False when the tenant turned surfacing off for this upstream.
    pub(crate) upstream_enabled: bool,
    pub(crate) source: Source,
}

/// Why nothing was injected. `CircuitOpen`, `Timeout` and `LookupFailed`
/// are faults (the last two count towards the circuit breaker); the rest
/// are the gates doing their job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Skip {
    Disabled,
    UpstreamDisabled,
    ExcludedTool,
    WriteTool,
    NoQuery,
    SensitiveQuery,
    RateLimited,
    Cooldown,
    CircuitOpen,
    Timeout,
    LookupFailed,
    NoResults,
    AllSeen,
    NothingFits,
}

impl Skip {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Skip::Disabled => "disabled",
            Skip::UpstreamDisabled => "upstream_disabled",
            Skip::ExcludedTool => "excluded_tool",
            Skip::WriteTool => "write_tool",
            Skip::NoQuery => "no_query",
            Skip::SensitiveQuery => "sensitive_query",
            Skip::RateLimited => "rate_limited",
            Skip::Cooldown => "cooldown",
            Skip::CircuitOpen => "circuit_open",
            Skip::Timeout => "timeout",
            Skip::LookupFailed => "lookup_failed",
            Skip::NoResults => "no_results",
            Skip::AllSeen => "all_seen",
            Skip::NothingFits => "nothing_fits",
        }
    }
}

/// A memory that was injected.
#[derive(Debug, Clone, serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SurfacedMemory {
    pub(crate) id: String,
    pub(crate) relevance: f32,
    /// `weak`, `related` or `strong`.
    pub(crate) bucket: String,
    /// The evidence behind `relevance`: cosine similarity (when both
    /// embeddings exist) and the share of the query's terms found.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) similarity: Option<f32>,
    pub(crate) lexical: f32,
    /// How far similarity and lexical share stand out from the query's
    /// other candidates.
    pub(crate) similarity_margin: f32,
    pub(crate) lexical_margin: f32,
}

/// An injection ready to apply.
#[derive(Debug, Clone)]
pub(crate) struct Surfacing {
    pub(crate) id: String,
    /// The whole `<surfaced-memories>` block.
    pub(crate) block: String,
    pub(crate) mode: InjectionMode,
    pub(crate) memories: Vec<SurfacedMemory>,
    pub(crate) min_score: f32,
    /// The extracted query (as stored: text or digest).
    pub(crate) query: String,
    pub(crate) stage: &'static str,
}

/// What one call produced.
#[derive(Debug, Clone)]
pub(crate) enum Outcome {
    Surfaced(Surfacing),
    Skipped(Skip),
}

/// The engine, shared by every request of a pod.
pub(crate) struct Surfacer {
    settings: SurfacingConfig,
    exclude: ToolPatterns,
    write_tools: ToolPatterns,
    templates: Templates,
    mode: InjectionMode,
    /// Per tenant: one tenant's failing lookups never stop another's.
    breakers: moka::sync::Cache<Uuid, Arc<Mutex<Breaker>>>,
    /// Tuned thresholds by (tenant, server, tool).
    thresholds: moka::sync::Cache<(Uuid, String, String), f32>,
    backends: Backends,
    cache: Cache,
    store: Store,
    /// The breakers' clock.
    epoch: Instant,
}

impl std::fmt::Debug for Surfacer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Surfacer").finish_non_exhaustive()
    }
}

/// A new `surfacing_id`: 12 random bytes, hex.
fn new_surfacing_id() -> String {
    let mut bytes = [0u8; 12];
    rand::rng().fill_bytes(&mut bytes);
    hex::encode(bytes)
}

impl Surfacer {
    pub(crate) fn new(
        settings: SurfacingConfig,
        backends: Backends,
        cache: Cache,
        store: Store,
    ) -> anyhow::Result<Self> {
        let write_patterns: Vec<String> = match &settings.write_tool_patterns {
            Some(patterns) => patterns.clone(),
            None => DEFAULT_WRITE_TOOL_PATTERNS
                .iter()
                .map(|p| (*p).to_owned())
                .collect(),
        };
        Ok(Self {
            exclude: ToolPatterns::new(&settings.exclude_tools)
                .map_err(|e| anyhow::anyhow!("MNEME_SURFACING_EXCLUDE_TOOLS: {e}"))?,
            write_tools: ToolPatterns::new(&write_patterns)
                .map_err(|e| anyhow::anyhow!("MNEME_SURFACING_WRITE_TOOL_PATTERNS: {e}"))?,
            templates: Templates::new(settings.query_templates.iter().cloned()),
            mode: settings
                .injection_mode
                .parse()
                .map_err(|_| anyhow::anyhow!("MNEME_SURFACING_INJECTION_MODE is invalid"))?,
            breakers: moka::sync::Cache::builder()
                .max_capacity(100_000)
                .time_to_idle(Duration::from_secs(3600))
                .build(),
            thresholds: moka::sync::Cache::builder()
                .max_capacity(100_000)
                .time_to_live(THRESHOLD_CACHE)
                .build(),
            settings,
            backends,
            cache,
            store,
            epoch: Instant::now(),
        })
    }

    pub(crate) fn settings(&self) -> &SurfacingConfig {
        &self.settings
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn breaker(&self, tenant: Uuid) -> Arc<Mutex<Breaker>> {
        self.breakers.get_with(tenant, || {
            Arc::new(Mutex::new(Breaker::new(
                self.settings.breaker_failures,
                u64::try_from(self.settings.breaker_reset.as_millis()).unwrap_or(u64::MAX),
            )))
        })
    }

    fn record_breaker(&self, tenant: Uuid, ok: bool) {
        let breaker = self.breaker(tenant);
        let mut breaker = breaker.lock().unwrap_or_else(|e| e.into_inner());
        breaker.record(ok, self.now_ms());
    }

    /// The relevance threshold of (tenant, server, tool): tuned, else the
    /// default. A database failure falls back to the default.
    async fn min_score(&self, tenant: Uuid, server: &str, tool: &str) -> f32 {
        let default = self.settings.min_score;
        if !self.settings.tuner_enabled {
            return default;
        }
        let key = (tenant, server.to_owned(), tool.to_owned());
        if let Some(score) = self.thresholds.get(&key) {
            return score;
        }
        let read = async {
            let mut client = self.store.client().await?;
            let tx = TenantTx::begin(&mut client, tenant).await?;
            let threshold = events::threshold(&tx, server, tool).await?;
            tx.commit().await?;
            Ok::<_, mneme_store::StoreError>(threshold)
        };
        let score = match read.await {
            Ok(threshold) => threshold.map_or(default, |t| t.min_score),
            Err(error) => {
                tracing::warn!(%error, "reading the tuned surfacing threshold failed");
                return default;
            }
        };
        self.thresholds.insert(key, score);
        score
    }

    /// Runs the pipeline for one call. Never fails: see [`Outcome`].
    pub(crate) async fn surface(&self, principal: &Principal, call: ToolCall) -> Outcome {
        let started = Instant::now();
        let outcome = Box::pin(self.run(principal, call)).await;
        let label = match &outcome {
            Outcome::Surfaced(_) => "surfaced",
            Outcome::Skipped(skip) => skip.as_str(),
        };
        METRICS.surfacing.with_label_values(&[label]).inc();
        METRICS
            .surfacing_seconds
            .with_label_values(&[label])
            .observe(started.elapsed().as_secs_f64());
        outcome
    }

    async fn run(&self, principal: &Principal, call: ToolCall) -> Outcome {
        use Outcome::Skipped;
        let settings = &self.settings;
        if !settings.enabled || !principal.has(Permission::Read) {
            return Skipped(Skip::Disabled);
        }
        if !call.upstream_enabled {
            return Skipped(Skip::UpstreamDisabled);
        }
        if self.exclude.matches(&call.server, &call.tool) {
            return Skipped(Skip::ExcludedTool);
        }
        if is_write_tool(
            call.annotations,
            &self.write_tools,
            &call.server,
            &call.tool,
        ) {
            return Skipped(Skip::WriteTool);
        }
        let Some(Extracted { query, stage }) = extract_query(
            &call.server,
            &call.tool,
            &call.arguments,
            call.context_query.as_deref(),
            &self.templates,
            settings.min_signal,
        ) else {
            return Skipped(Skip::NoQuery);
        };
        if privacy::contains_sensitive(&query) {
            return Skipped(Skip::SensitiveQuery);
        }
        let Ok(agent) = resolve_agent_id(call.agent_id.as_deref(), principal) else {
            return Skipped(Skip::NoQuery);
        };
        let (tenant, key) = (
            principal.tenant_id.to_string(),
            principal.key_id.to_string(),
        );
        let scope = SurfacingScope {
            tenant: &tenant,
            key: &key,
            agent: &agent,
            server: &call.server,
            tool: &call.tool,
        };

        if !self
            .cache
            .take_surfacing_slot(&tenant, settings.rate_per_minute)
            .await
        {
            return Skipped(Skip::RateLimited);
        }
        let (recent, invalidated) = tokio::join!(
            self.cache.recent_surfacing_queries(&scope),
            self.cache.invalidated_memories(&scope)
        );
        let wall_ms = mneme_cache::surfacing::now_ms();
        if in_cooldown(
            &query,
            &recent,
            wall_ms,
            u64::try_from(settings.cooldown.as_millis()).unwrap_or(u64::MAX),
            settings.cooldown_similarity,
        ) {
            self.cache
                .return_surfacing_slot(&tenant, settings.rate_per_minute)
                .await;
            return Skipped(Skip::Cooldown);
        }
        let admitted = {
            let breaker = self.breaker(principal.tenant_id);
            let mut breaker = breaker.lock().unwrap_or_else(|e| e.into_inner());
            breaker.admit(self.now_ms())
        };
        if admitted == Admit::No {
            self.cache
                .return_surfacing_slot(&tenant, settings.rate_per_minute)
                .await;
            return Skipped(Skip::CircuitOpen);
        }

        let min_score = self
            .min_score(principal.tenant_id, &call.server, &call.tool)
            .await;
        let window = call
            .context_window
            .or_else(|| {
                call.model
                    .as_deref()
                    .and_then(model::context_window_for_model)
            })
            .or(settings.context_window);
        let budget = model::budget(
            window.map(model::tier_for_window),
            Budget {
                max_results: settings.max_results,
                max_injection_chars: settings.max_injection_chars,
                max_result_chars: 0,
            },
            window,
        );
        let request = SurfaceRequest {
            query: query.clone(),
            limit: u32::try_from(budget.max_results * OVERFETCH).unwrap_or(u32::MAX),
            workspace: None,
            agent_id: Some(agent.clone()),
            exclude_ids: invalidated.into_iter().collect(),
            demote_after: settings.demotion_threshold,
            min_relevance: min_score,
        };
        let lookup =
            tokio::time::timeout(settings.timeout, self.backends.surface(principal, request)).await;
        let candidates = match lookup {
            Ok(Ok(response)) => {
                self.record_breaker(principal.tenant_id, true);
                response.candidates
            }
            Ok(Err(error)) => {
                tracing::warn!(%error, "surfacing lookup failed");
                self.record_breaker(principal.tenant_id, false);
                return Skipped(Skip::LookupFailed);
            }
            Err(_) => {
                tracing::warn!(
                    timeout_ms = settings.timeout.as_millis() as u64,
                    "surfacing lookup timed out"
                );
                self.record_breaker(principal.tenant_id, false);
                return Skipped(Skip::Timeout);
            }
        };
        if candidates.is_empty() {
            return Skipped(Skip::NoResults);
        }
        let ids: Vec<String> = candidates.iter().map(|c| c.id.clone()).collect();
        let seen = self
            .cache
            .already_surfaced(&scope, &ids, settings.dedup_ttl)
            .await;
        let mut fresh: Vec<&SurfaceCandidate> = candidates
            .iter()
            .filter(|c| !seen.contains(&c.id))
            .take(budget.max_results)
            .collect();
        fresh.truncate(relevance::close_to_best(
            fresh.iter().map(|c| c.relevance),
            settings.gap_from_best,
        ));
        if fresh.is_empty() {
            return Skipped(Skip::AllSeen);
        }

        let id = new_surfacing_id();
        let memories: Vec<Memory> = fresh
            .iter()
            .map(|c| Memory {
                id: c.id.clone(),
                content: c.content.clone(),
                topic: Some(c.topic.clone()).filter(|t| !t.is_empty()),
                source: c.source.clone(),
                relevance: c.relevance,
            })
            .collect();
        let Some(rendered) = render_block(
            &memories,
            &BlockOptions {
                header: &settings.section_header,
                surfacing_id: Some(&id),
                feedback_tool: FEEDBACK_TOOL,
                floor: min_score,
                max_chars: budget.max_injection_chars,
                preview_chars: settings.preview_chars,
            },
        ) else {
            return Skipped(Skip::NothingFits);
        };
        let delivered: Vec<&SurfaceCandidate> = fresh
            .into_iter()
            .filter(|c| rendered.delivered.contains(&c.id))
            .collect();
        let stored_query = privacy::stored_query(&query, settings.persist_query_text);
        let memory_ids: Vec<Uuid> = delivered.iter().filter_map(|c| c.id.parse().ok()).collect();
        let relevances: Vec<f32> = delivered.iter().map(|c| c.relevance).collect();
        let event = NewEvent {
            id: &id,
            key_id: principal.key_id,
            agent_id: &agent,
            session_id: call.session_id.as_deref(),
            server: &call.server,
            tool: &call.tool,
            query: Some(&stored_query),
            query_stage: stage.as_str(),
            memory_ids: &memory_ids,
            relevances: &relevances,
            min_score,
            trace_id: call.trace_id.as_deref(),
            source: call.source.as_str(),
        };
        // Recorded before the answer, so a rating or a repeated call right
        // after it sees the event, the dedup and the cooldown.
        self.record(
            principal.tenant_id,
            &scope,
            &event,
            &query,
            &rendered.delivered,
        )
        .await;
        Outcome::Surfaced(Surfacing {
            memories: delivered
                .iter()
                .map(|c| SurfacedMemory {
                    id: c.id.clone(),
                    relevance: c.relevance,
                    bucket: bucket(c.relevance, min_score).as_str().to_owned(),
                    similarity: c.similarity,
                    lexical: c.lexical,
                    similarity_margin: c.similarity_margin,
                    lexical_margin: c.lexical_margin,
                })
                .collect(),
            id,
            block: rendered.block,
            mode: self.mode,
            min_score,
            query: stored_query,
            stage: stage.as_str(),
        })
    }

    /// Stores the event (without it the block cannot be rated) and records
    /// the delivered memories and the query for dedup and cooldown, both at
    /// once.
    async fn record(
        &self,
        tenant: Uuid,
        scope: &SurfacingScope<'_>,
        event: &NewEvent<'_>,
        query: &str,
        delivered: &[String],
    ) {
        let stored = async {
            let mut client = self.store.client().await?;
            let tx = TenantTx::begin(&mut client, tenant).await?;
            events::record_event(&tx, event).await?;
            tx.commit().await
        };
        let recorded = self.cache.record_surfacing(
            scope,
            query,
            delivered,
            self.settings.dedup_ttl,
            self.settings.cooldown,
        );
        let (stored, ()) = tokio::join!(stored, recorded);
        if let Err(error) = stored {
            tracing::warn!(%error, "recording the surfacing event failed");
        }
    }

    /// Records ratings of one of the caller's surfacing events; negative
    /// per-memory ratings invalidate those memories for the tool at once,
    /// and the tuner may move the tool's threshold.
    pub(crate) async fn feedback(
        &self,
        principal: &Principal,
        surfacing_id: &str,
        rating: Option<&str>,
        memory_id: Option<&str>,
        ratings: Option<&serde_json::Value>,
    ) -> Result<FeedbackOutcome, Error> {
        principal.require(Permission::Write)?;
        let not_found = || {
            Error::new(
                ErrorCode::NotFound,
                format!("surfacing event `{surfacing_id}` not found"),
            )
        };
        if surfacing_id.is_empty() || surfacing_id.len() > 64 {
            return Err(not_found());
        }
        let mut client = self.store.client().await?;
        let tx = TenantTx::begin(&mut client, principal.tenant_id).await?;
        let event = events::event(&tx, principal.key_id, surfacing_id)
            .await?
            .ok_or_else(not_found)?;
        let delivered: Vec<String> = event.memory_ids.iter().map(Uuid::to_string).collect();
        let input = parse_feedback(rating, memory_id, ratings, &delivered)
            .map_err(|e| Error::invalid_argument(e.to_string()))?;
        let rows: Vec<(Option<Uuid>, Rating)> = match &input {
            FeedbackInput::Event(rating) => vec![(None, *rating)],
            FeedbackInput::Memories(ratings) => ratings
                .iter()
                .map(|r| (r.memory_id.parse().ok(), r.rating))
                .collect(),
        };
        let stored: Vec<(Option<Uuid>, &str)> =
            rows.iter().map(|(m, r)| (*m, r.as_str())).collect();
        let recorded = events::record_feedback(&tx, &event, principal.key_id, &stored).await?;
        let adjustment = if self.settings.tuner_enabled && recorded.pending != Counts::default() {
            self.tune(&tx, &event.server, &event.tool, recorded.pending)
                .await?
        } else {
            None
        };
        tx.commit().await?;
        if adjustment.is_some() {
            self.thresholds.invalidate(&(
                principal.tenant_id,
                event.server.clone(),
                event.tool.clone(),
            ));
        }

        let negative: Vec<String> = rows
            .iter()
            .filter(|(memory, rating)| memory.is_some() && rating.is_negative())
            .filter_map(|(memory, _)| memory.map(|m| m.to_string()))
            .collect();
        if !negative.is_empty() {
            let (tenant, key) = (
                principal.tenant_id.to_string(),
                principal.key_id.to_string(),
            );
            let scope = SurfacingScope {
                tenant: &tenant,
                key: &key,
                agent: "",
                server: &event.server,
                tool: &event.tool,
            };
            let ttl = self.settings.dedup_ttl.max(Duration::from_secs(3600));
            self.cache.invalidate_memories(&scope, &negative, ttl).await;
        }
        Ok(FeedbackOutcome {
            recorded: recorded.stored,
            unchanged: recorded.unchanged,
            invalidated: negative,
            threshold: adjustment,
        })
    }

    /// Adds the ratings to the tool's pending counts and applies one tuner
    /// step when they call for it; returns the new threshold if it moved.
    async fn tune(
        &self,
        tx: &TenantTx<'_>,
        server: &str,
        tool: &str,
        counts: Counts,
    ) -> Result<Option<f32>, Error> {
        let s = &self.settings;
        let threshold = events::add_pending(tx, server, tool, s.min_score, counts).await?;
        let settings = TunerSettings {
            min_samples: s.tuner_min_samples,
            step: s.tuner_step,
            floor: s.tuner_floor,
            ceiling: s.tuner_ceiling,
            raise_above: s.tuner_raise_above,
            lower_above: s.tuner_lower_above,
            hysteresis: s.tuner_hysteresis,
        };
        let pending = threshold.pending;
        let count = |n: i32| u32::try_from(n).unwrap_or(0);
        let last = match threshold.last_direction.as_deref() {
            Some("raise") => Some(Direction::Raise),
            Some("lower") => Some(Direction::Lower),
            _ => None,
        };
        let Some(step) = tuner::decide(
            threshold.min_score,
            FeedbackCounts {
                helpful: count(pending.helpful),
                partially_helpful: count(pending.partially_helpful),
                not_relevant: count(pending.not_relevant),
                already_known: count(pending.already_known),
            },
            last,
            &settings,
        ) else {
            return Ok(None);
        };
        let direction = match step.direction {
            Direction::Raise => "raise",
            Direction::Lower => "lower",
        };
        tracing::info!(
            server,
            tool,
            from = step.from,
            to = step.to,
            direction,
            negative_share = step.negative_share,
            helpful_share = step.helpful_share,
            samples = step.samples,
            "surfacing threshold tuned"
        );
        events::apply_adjustment(
            tx,
            server,
            tool,
            &events::Adjustment {
                from: step.from,
                to: step.to,
                direction,
                negative_share: step.negative_share as f32,
                helpful_share: step.helpful_share as f32,
                samples: i32::try_from(step.samples).unwrap_or(i32::MAX),
            },
        )
        .await?;
        Ok(Some(step.to))
    }

    /// The figures of `stm_surfacing_stats`: the whole tenant for admin
    /// keys, the caller's own events otherwise.
    pub(crate) async fn stats(
        &self,
        principal: &Principal,
        tool: Option<&str>,
        since: Option<chrono::DateTime<chrono::Utc>>,
        recent: i64,
    ) -> Result<events::Stats, Error> {
        principal.require(Permission::Read)?;
        let key_id = (!principal.has(Permission::Admin)).then_some(principal.key_id);
        let mut client = self.store.client().await?;
        let tx = TenantTx::begin(&mut client, principal.tenant_id).await?;
        let stats = events::stats(
            &tx,
            StatsFilter {
                key_id,
                tool,
                since,
                recent,
            },
        )
        .await?;
        tx.commit().await?;
        Ok(stats)
    }
}

/// What a rating did.
#[derive(Debug, Clone)]
pub(crate) struct FeedbackOutcome {
    /// Ratings stored, new or replacing an earlier rating of the same memory
    /// (or block).
    pub(crate) recorded: usize,
    /// Ratings that repeated the stored one and changed nothing.
    pub(crate) unchanged: usize,
    /// Memories no longer surfaced for this key and tool.
    pub(crate) invalidated: Vec<String>,
    /// The tool's new threshold when this rating moved it.
    pub(crate) threshold: Option<f32>,
}
