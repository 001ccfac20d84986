//! Scheduled consolidation: the maintenance stages, run per tenant by
//! whichever consolidator holds the tenant's lease.
//!
//! - [`STAGES`] is the ordered list of stages; adding one is one entry
//!   there and one arm in `Stage::run`.
//! - [`Consolidator::run_tenant`] runs every stage for one tenant, each in
//!   a tenant transaction of its own (a failing stage is recorded and the
//!   next one still runs), and records the run in `consolidation_runs`. A
//!   dry run executes the same statements and rolls each one back, so it
//!   reports exactly what a real run would change.
//! - [`Consolidator::run`] is the schedule: every poll it walks the active
//!   tenants and consolidates those whose last run is older than the
//!   interval and whose lease no other consolidator holds (see
//!   `mneme_store::consolidation::try_lease`). Any number of consolidators
//!   can run; each tenant is consolidated by one of them at a time, and a
//!   tenant whose consolidator dies is taken over at the next poll.

use std::sync::{Arc, LazyLock};
use std::time::Instant;

use chrono::{DateTime, Utc};
use mneme_config::ConsolidationConfig;
use mneme_core::contradiction;
use mneme_core::text::Tokenizer;
use mneme_store::consolidation::{
    self, CompressionRules, ContradictionRules, DedupRules, Review, Run, SimilarPair, StageResult,
    StageRules,
};
use mneme_store::feedback::{self, LinkLesson};
use mneme_store::{Store, TenantTx, fragments, links, tenants};
use mneme_telemetry::metrics::register;
use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, Opts};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::llm::{self, Llm, LlmError};
use crate::split;

static STAGE_AFFECTED: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register(
        IntCounterVec::new(
            Opts::new(
                "mneme_consolidation_affected_total",
                "Rows changed by consolidation stages (real runs only), by stage.",
            ),
            &["stage"],
        )
        .expect("valid metric"),
    )
});
static STAGE_ERRORS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register(
        IntCounterVec::new(
            Opts::new(
                "mneme_consolidation_errors_total",
                "Failed consolidation stages, by stage.",
            ),
            &["stage"],
        )
        .expect("valid metric"),
    )
});
static RUNS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register(
        IntCounterVec::new(
            Opts::new(
                "mneme_consolidation_runs_total",
                "Consolidations of a tenant, by trigger (schedule, manual), dry run and outcome (finished, failed).",
            ),
            &["trigger", "dry_run", "outcome"],
        )
        .expect("valid metric"),
    )
});
static STAGE_SECONDS: LazyLock<HistogramVec> = LazyLock::new(|| {
    register(
        HistogramVec::new(
            HistogramOpts::new(
                "mneme_consolidation_stage_seconds",
                "Duration of consolidation stages for one tenant, by stage.",
            ),
            &["stage"],
        )
        .expect("valid metric"),
    )
});

/// One maintenance stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    TtlTransition,
    Decay,
    FeedbackCalibration,
    SplitLong,
    Dedup,
    Compression,
    ExpiredDelete,
    ReflectionPurge,
    Utility,
    AnchorPromotion,
    ContradictionDetection,
    ContradictionAdjudication,
    SupersessionReview,
    QualityReview,
    SearchEventsGc,
    SurfacingRetention,
    OAuthTokenGc,
    SearchReindex,
}

/// The stages, in the order they run: tiers, decay and feedback first, so
/// garbage collection and utility see this run's importance; splitting
/// before de-duplication, so a part that restates an existing fragment is
/// merged into it once it has its embedding.
pub const STAGES: &[Stage] = &[
    Stage::TtlTransition,
    Stage::Decay,
    Stage::FeedbackCalibration,
    Stage::SplitLong,
    Stage::Dedup,
    Stage::Compression,
    Stage::ExpiredDelete,
    Stage::ReflectionPurge,
    Stage::Utility,
    Stage::AnchorPromotion,
    Stage::ContradictionDetection,
    Stage::ContradictionAdjudication,
    Stage::SupersessionReview,
    Stage::QualityReview,
    Stage::SearchEventsGc,
    Stage::SurfacingRetention,
    Stage::OAuthTokenGc,
    Stage::SearchReindex,
];

impl Stage {
    /// Stages that need a language model (skipped without one).
    pub fn needs_model(self) -> bool {
        matches!(
            self,
            Stage::SplitLong
                | Stage::ContradictionAdjudication
                | Stage::SupersessionReview
                | Stage::QualityReview
        )
    }

    pub fn name(self) -> &'static str {
        match self {
            Stage::TtlTransition => "ttl_transition",
            Stage::Decay => "decay",
            Stage::FeedbackCalibration => "feedback_calibration",
            Stage::SplitLong => "split_long",
            Stage::ReflectionPurge => "reflection_purge",
            Stage::Dedup => "dedup",
            Stage::Compression => "compression",
            Stage::ExpiredDelete => "expired_delete",
            Stage::Utility => "utility",
            Stage::AnchorPromotion => "anchor_promotion",
            Stage::ContradictionDetection => "contradiction_detection",
            Stage::ContradictionAdjudication => "contradiction_adjudication",
            Stage::SupersessionReview => "supersession_review",
            Stage::QualityReview => "quality_review",
            Stage::SearchEventsGc => "search_events_gc",
            Stage::SurfacingRetention => "surfacing_retention",
            Stage::OAuthTokenGc => "oauth_token_gc",
            Stage::SearchReindex => "search_reindex",
        }
    }

    async fn run(
        self,
        tx: &TenantTx<'_>,
        now: DateTime<Utc>,
        rules: &StageRules,
    ) -> mneme_store::Result<u64> {
        match self {
            Stage::TtlTransition => consolidation::ttl_transition(tx, now).await,
            Stage::Decay => consolidation::decay(tx, now, rules).await,
            Stage::FeedbackCalibration => consolidation::feedback_calibration(tx, now).await,
            Stage::ReflectionPurge => consolidation::reflection_purge(tx, now, rules).await,
            Stage::Dedup => merge_duplicates(tx, now, rules).await,
            Stage::Compression => compress_old_groups(tx, now, rules).await,
            Stage::ExpiredDelete => consolidation::expired_delete(tx, now, rules).await,
            Stage::Utility => consolidation::utility(tx, now).await,
            Stage::AnchorPromotion => consolidation::anchor_promotion(tx, rules).await,
            Stage::ContradictionDetection => detect_contradictions(tx, now, rules).await,
            // Their work is the model's answers: see `Consolidator::prepare`.
            Stage::SplitLong
            | Stage::ContradictionAdjudication
            | Stage::SupersessionReview
            | Stage::QualityReview => Ok(0),
            Stage::SearchEventsGc => consolidation::search_events_gc(tx, now, rules).await,
            // Blanked queries and deleted events, together.
            Stage::SurfacingRetention => mneme_store::surfacing::apply_retention(
                tx,
                rules.surfacing_query_retention_days,
                rules.surfacing_stats_retention_days,
            )
            .await
            .map(|(blanked, deleted)| blanked + deleted),
            // Expired refresh tokens can never be used again.
            Stage::OAuthTokenGc => mneme_store::oauth::delete_expired_refresh_tokens(tx, now).await,
            Stage::SearchReindex => rewrite_stale_search_documents(tx, rules).await,
        }
    }
}

/// An error with its causes ("database: db error: column … does not exist").
fn describe(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(inner) = cause {
        text.push_str(": ");
        text.push_str(&inner.to_string());
        cause = inner.source();
    }
    text
}

/// How long a link quarantined by contradiction detection is protected from
/// another quarantine (the reconsolidation rate limit).
const QUARANTINE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(60);

/// Checks new fragments against similar older ones of their key and topic:
/// pairs the rules of `mneme_core::contradiction` find contradictory get a
/// `contradicts` link (newer → older), the `related`/`temporal` links
/// between them are quarantined and the older one loses half its
/// importance; very similar undecided pairs are queued as `pending` for a
/// model. Returns the pairs recorded.
async fn detect_contradictions(
    tx: &TenantTx<'_>,
    now: DateTime<Utc>,
    rules: &StageRules,
) -> mneme_store::Result<u64> {
    let pairs = consolidation::similar_older_pairs(
        tx,
        now,
        Review::Contradiction,
        rules.contradiction.per_run,
        rules.contradiction.similarity,
    )
    .await?;
    let mut recorded = 0;
    for pair in &pairs {
        match contradiction::judge(&pair.newer, &pair.older) {
            Some(reason) => {
                consolidation::record_contradiction_candidate(
                    tx,
                    pair,
                    "contradiction",
                    Some(reason.as_str()),
                    now,
                )
                .await?;
                apply_contradiction(tx, pair, "contradiction_detection").await?;
                recorded += 1;
            }
            None if pair.similarity >= rules.contradiction.ambiguous_similarity => {
                consolidation::record_contradiction_candidate(tx, pair, "pending", None, now)
                    .await?;
                recorded += 1;
            }
            None => {}
        }
    }
    Ok(recorded)
}

/// Tokenises again, at most `search_reindex_per_run` per run, the search
/// documents written by older rules (see
/// [`SEARCH_DOCUMENT_VERSION`](mneme_core::text::SEARCH_DOCUMENT_VERSION)).
/// Until then they match as they always did.
async fn rewrite_stale_search_documents(
    tx: &TenantTx<'_>,
    rules: &StageRules,
) -> mneme_store::Result<u64> {
    let stale = fragments::lock_stale_search_documents(tx, rules.search_reindex_per_run).await?;
    if stale.is_empty() {
        return Ok(0);
    }
    let tokenizer = Tokenizer::default();
    let ids: Vec<Uuid> = stale.iter().map(|d| d.id).collect();
    let documents: Vec<String> = stale
        .iter()
        .map(|d| tokenizer.search_document(&d.topic, &d.keywords, &d.content))
        .collect();
    fragments::store_search_documents(tx, &ids, &documents).await
}

/// Merges near-duplicates: each new fragment (once) against its most
/// similar older fragments of the same key and topic. A pair is a duplicate
/// when it is at least `dedup.similarity` similar, shares at least
/// `dedup.min_overlap` of its lexemes, and no contradiction rule fires
/// (other numbers or a negation make a different statement, however
/// similar); the older one is then superseded by the newer. Returns the
/// fragments merged.
async fn merge_duplicates(
    tx: &TenantTx<'_>,
    now: DateTime<Utc>,
    rules: &StageRules,
) -> mneme_store::Result<u64> {
    let dedup = &rules.dedup;
    let pairs = consolidation::similar_older_pairs(
        tx,
        now,
        Review::Duplicate,
        dedup.per_run,
        dedup.similarity,
    )
    .await?;
    let tokenizer = Tokenizer::default();
    let mut merged_away: Vec<uuid::Uuid> = Vec::new();
    for pair in &pairs {
        if merged_away.contains(&pair.older_id) || merged_away.contains(&pair.newer_id) {
            continue;
        }
        if contradiction::judge(&pair.newer, &pair.older).is_some()
            || lexical_overlap(&tokenizer, &pair.newer, &pair.older) < dedup.min_overlap
        {
            continue;
        }
        if consolidation::merge_duplicate(tx, pair).await? {
            merged_away.push(pair.older_id);
        }
    }
    Ok(merged_away.len() as u64)
}

/// Compression of old fragment groups: among old, unimportant fragments
/// (see [`consolidation::compression_pairs`]), the most important one not
/// yet folded gathers its similar neighbours of the same key and topic
/// that no contradiction rule sets apart; a group of at least
/// `min_group` keeps that one and folds the others into it (superseded,
/// links moved, history kept). Returns how many were folded.
async fn compress_old_groups(
    tx: &TenantTx<'_>,
    now: DateTime<Utc>,
    rules: &StageRules,
) -> mneme_store::Result<u64> {
    let pairs = consolidation::compression_pairs(tx, now, &rules.compression).await?;
    let mut taken = std::collections::HashSet::new();
    let mut folded = 0;
    for by_seed in pairs.chunk_by(|a, b| a.seed_id == b.seed_id) {
        let seed = &by_seed[0];
        if taken.contains(&seed.seed_id) {
            continue;
        }
        let members: Vec<_> = by_seed
            .iter()
            .filter(|pair| !taken.contains(&pair.neighbour_id))
            .filter(|pair| contradiction::judge(&pair.seed, &pair.neighbour).is_none())
            .collect();
        if members.len() + 1 < rules.compression.min_group {
            continue;
        }
        taken.insert(seed.seed_id);
        for member in members {
            taken.insert(member.neighbour_id);
            if consolidation::fold_into(tx, seed.key_id, member.neighbour_id, seed.seed_id).await? {
                folded += 1;
            }
        }
    }
    Ok(folded)
}

/// Jaccard overlap of the two texts' lexeme sets.
fn lexical_overlap(tokenizer: &Tokenizer, a: &str, b: &str) -> f64 {
    let a: std::collections::HashSet<String> = tokenizer.lexemes(a).into_iter().collect();
    let b: std::collections::HashSet<String> = tokenizer.lexemes(b).into_iter().collect();
    let union = a.union(&b).count();
    if union == 0 {
        return 0.0;
    }
    a.intersection(&b).count() as f64 / union as f64
}

/// What follows from two memories contradicting each other: a
/// `contradicts` link (newer → older), quarantine of the `related` and
/// `temporal` links between them, and half the older one's importance.
async fn apply_contradiction(
    tx: &TenantTx<'_>,
    pair: &SimilarPair,
    reason: &str,
) -> mneme_store::Result<()> {
    links::upsert(
        tx,
        &[pair.key_id],
        pair.newer_id,
        pair.older_id,
        "contradicts",
        1.0,
    )
    .await?;
    feedback::reconsolidate_links(
        tx,
        pair.key_id,
        &[pair.newer_id, pair.older_id],
        &["related", "temporal"],
        LinkLesson::QUARANTINE,
        reason,
        QUARANTINE_INTERVAL,
    )
    .await?;
    consolidation::weaken_contradicted(tx, pair.older_id).await?;
    Ok(())
}

/// Tries the model gets on a pair before the pair is parked.
const VERDICT_ATTEMPTS: i16 = 3;

/// What a language model answered for one stage, applied in the stage's
/// transaction.
#[derive(Debug)]
enum ModelWork {
    None,
    Contradictions(Vec<(SimilarPair, Verdict)>),
    /// `reviewed`: new fragments fully answered (marked, not asked again);
    /// `superseded`: pairs whose newer fragment replaces the older.
    Supersessions {
        reviewed: Vec<Uuid>,
        superseded: Vec<SimilarPair>,
    },
    /// `checked`: long fragments answered (marked, not asked again), split
    /// or not; `splits`: those cut into valid parts.
    Splits {
        checked: Vec<Uuid>,
        splits: Vec<split::Split>,
    },
    /// Fragments answered, with the verdict (`None`: the answer held none).
    Quality(Vec<(Uuid, Option<bool>)>),
}

/// Answers of one round of questions: each question's item with the JSON
/// object the model answered, the items that got none (with why), and why
/// the round stopped early.
#[derive(Debug)]
struct Answers<T> {
    answered: Vec<(T, serde_json::Value)>,
    failed: Vec<(T, String)>,
    stopped: Option<String>,
}

/// What the language model said to one question
/// ([`Consolidator::ask_model`]).
#[derive(Debug, Clone, PartialEq)]
pub enum ModelReply {
    /// No language model is configured.
    NoModel,
    /// The JSON object it answered.
    Answer(serde_json::Value),
    /// This question failed, and why: a failed call, an answer without JSON.
    Failed(String),
    /// Not asked, and why: every provider is paused after repeated
    /// failures, or the tenant's token budget of the day is spent. Asking
    /// later may work; the question itself is not at fault.
    Paused(String),
}

/// Answers of one round of questions about pairs.
#[derive(Debug, Default)]
struct ModelAnswers {
    verdicts: Vec<(SimilarPair, String)>,
    failed: Vec<(SimilarPair, String)>,
    stopped: Option<String>,
}

const QUALITY_INSTRUCTIONS: &str = "You review a note an AI agent stored to use in later work. \
    It is sound when it is specific (names the things and numbers it is about), self-contained \
    (understandable without the conversation it came from), plausible, and still useful later \
    (not a passing state, a guess or a remark about the conversation). Answer with JSON only: \
    {\"verdict\": \"sound\" | \"unsound\"}.";

const SUPERSESSION_INSTRUCTIONS: &str = "You compare two notes an AI agent stored about the same \
    topic, the second written later. Decide whether the second replaces the first: an update that \
    makes the first outdated (a new value, a changed decision, a fix that ends a problem). Notes \
    that add to each other do not replace. Answer with JSON only: \
    {\"verdict\": \"supersedes\" | \"independent\"}.";

/// A model's verdict on a pending pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Contradiction,
    Compatible,
}

const JUDGE_INSTRUCTIONS: &str = "You compare two notes an AI agent stored about the same topic, \
    the second written later. Decide whether they contradict each other (both cannot be true at \
    once) or are compatible (they can both be true, or one refines the other). Answer with JSON \
    only: {\"verdict\": \"contradiction\" | \"compatible\"}.";

/// Applies what a model answered; returns the fragments (or candidates)
/// changed.
async fn apply_model_work(
    tx: &TenantTx<'_>,
    work: ModelWork,
    now: DateTime<Utc>,
) -> mneme_store::Result<u64> {
    let mut affected = 0;
    match work {
        ModelWork::None => {}
        ModelWork::Contradictions(verdicts) => {
            for (pair, verdict) in &verdicts {
                let status = match verdict {
                    Verdict::Contradiction => "contradiction",
                    Verdict::Compatible => "compatible",
                };
                let settled =
                    consolidation::decide_contradiction_candidate(tx, pair, status, "llm", now)
                        .await?;
                if settled > 0 && *verdict == Verdict::Contradiction {
                    apply_contradiction(tx, pair, "contradiction_adjudication").await?;
                }
                affected += settled;
            }
        }
        ModelWork::Supersessions {
            reviewed,
            superseded,
        } => {
            for pair in &superseded {
                let done = mneme_store::fragments::supersede(
                    tx,
                    pair.key_id,
                    &[pair.older_id],
                    pair.newer_id,
                )
                .await?;
                affected += done.len() as u64;
            }
            consolidation::mark_reviewed(tx, Review::Supersession, &reviewed, now).await?;
        }
        ModelWork::Splits { checked, splits } => {
            for one in &splits {
                affected += split::apply(tx, one, now).await?;
            }
            consolidation::mark_reviewed(tx, Review::Split, &checked, now).await?;
        }
        ModelWork::Quality(verdicts) => {
            for (id, sound) in verdicts {
                affected += consolidation::record_quality_verdict(tx, id, sound, now).await?;
            }
        }
    }
    Ok(affected)
}

/// Runs consolidations.
#[derive(Debug, Clone)]
pub struct Consolidator {
    store: Store,
    settings: ConsolidationConfig,
    llm: Option<Arc<Llm>>,
}

impl Consolidator {
    pub fn new(store: Store, settings: ConsolidationConfig) -> Self {
        let llm = Llm::new(&settings.llm)
            .inspect_err(|error| tracing::error!(%error, "cannot build the language model client"))
            .ok()
            .flatten()
            .map(Arc::new);
        Self {
            store,
            settings,
            llm,
        }
    }

    /// Asks the model `instructions` about each question's prompt, within
    /// the tenant's daily token budget, outside any transaction (no pooled
    /// connection waits on a model). Every provider paused ends the round
    /// silently; a spent budget is reported as `stopped`. Tokens spent are
    /// recorded, dry run or not.
    async fn ask<T>(
        &self,
        llm: &Llm,
        tenant_id: Uuid,
        now: DateTime<Utc>,
        instructions: &str,
        questions: Vec<(T, String)>,
    ) -> mneme_store::Result<Answers<T>> {
        let day = now.date_naive();
        let mut used = {
            let mut client = self.store.client().await?;
            let tx = TenantTx::begin(&mut client, tenant_id).await?;
            consolidation::llm_tokens_used(&tx, day).await?
        };
        let budget = self.settings.llm_tenant_daily_tokens;
        let (mut spent, mut calls) = (0i64, 0i32);
        let mut answers = Answers {
            answered: Vec::new(),
            failed: Vec::new(),
            stopped: None,
        };
        for (item, prompt) in questions {
            if budget > 0 && used >= budget {
                answers.stopped = Some("token budget of the day spent".to_owned());
                break;
            }
            let answer = match llm.complete(instructions, &prompt).await {
                Ok(answer) => answer,
                Err(LlmError::BreakerOpen) => break,
                Err(error) => {
                    tracing::warn!(%error, "language model call failed; the question waits");
                    answers.failed.push((item, error.to_string()));
                    continue;
                }
            };
            let tokens = i64::try_from(answer.tokens).unwrap_or(i64::MAX);
            used = used.saturating_add(tokens);
            spent = spent.saturating_add(tokens);
            calls += 1;
            match llm::json_object(&answer.text) {
                Some(json) => answers.answered.push((item, json)),
                None => answers
                    .failed
                    .push((item, "the answer held no JSON object".to_owned())),
            }
        }
        if calls > 0 {
            let mut client = self.store.client().await?;
            let tx = TenantTx::begin(&mut client, tenant_id).await?;
            consolidation::record_llm_usage(&tx, day, spent, calls).await?;
            tx.commit().await?;
        }
        Ok(answers)
    }

    /// Whether a language model is configured.
    pub fn has_model(&self) -> bool {
        self.llm.is_some()
    }

    /// Asks the configured language model one question for `tenant_id`,
    /// within the tenant's daily token budget (for jobs outside the
    /// consolidation stages, such as automatic reflection of sessions).
    pub async fn ask_model(
        &self,
        tenant_id: Uuid,
        instructions: &str,
        prompt: String,
    ) -> mneme_store::Result<ModelReply> {
        let Some(llm) = &self.llm else {
            return Ok(ModelReply::NoModel);
        };
        let mut answers = self
            .ask(llm, tenant_id, Utc::now(), instructions, vec![((), prompt)])
            .await?;
        Ok(match (answers.answered.pop(), answers.failed.pop()) {
            (Some(((), json)), _) => ModelReply::Answer(json),
            (None, Some(((), why))) => ModelReply::Failed(why),
            (None, None) => ModelReply::Paused(answers.stopped.unwrap_or_else(|| {
                "every language model is paused after repeated failures".to_owned()
            })),
        })
    }

    /// [`Self::ask`] about pairs of notes, keeping the `verdict` of each
    /// answer.
    async fn ask_about_pairs(
        &self,
        llm: &Llm,
        tenant_id: Uuid,
        now: DateTime<Utc>,
        instructions: &str,
        pairs: Vec<SimilarPair>,
    ) -> mneme_store::Result<ModelAnswers> {
        let questions = pairs
            .into_iter()
            .map(|pair| {
                let prompt = format!("First note: {}\nSecond note: {}", pair.older, pair.newer);
                (pair, prompt)
            })
            .collect();
        let answers = self
            .ask(llm, tenant_id, now, instructions, questions)
            .await?;
        let mut pairs = ModelAnswers {
            failed: answers.failed,
            stopped: answers.stopped,
            ..ModelAnswers::default()
        };
        for (pair, json) in answers.answered {
            match json["verdict"].as_str() {
                Some(verdict) => pairs.verdicts.push((pair, verdict.to_owned())),
                None => pairs
                    .failed
                    .push((pair, "the answer held no verdict".to_owned())),
            }
        }
        Ok(pairs)
    }

    /// What the model-backed `stage` needs from the model, before its
    /// transaction opens; `ModelWork::None` for the other stages.
    async fn prepare(
        &self,
        stage: Stage,
        llm: &Llm,
        tenant_id: Uuid,
        now: DateTime<Utc>,
    ) -> mneme_store::Result<(ModelWork, Option<String>)> {
        match stage {
            Stage::ContradictionAdjudication => {
                let pending = {
                    let mut client = self.store.client().await?;
                    let tx = TenantTx::begin(&mut client, tenant_id).await?;
                    consolidation::pending_contradictions(
                        &tx,
                        self.settings.contradiction_adjudications_per_run,
                    )
                    .await?
                };
                let answers = self
                    .ask_about_pairs(llm, tenant_id, now, JUDGE_INSTRUCTIONS, pending)
                    .await?;
                if !answers.failed.is_empty() {
                    // Failed attempts are real even in a dry run.
                    let mut client = self.store.client().await?;
                    let tx = TenantTx::begin(&mut client, tenant_id).await?;
                    for (pair, error) in &answers.failed {
                        if consolidation::contradiction_attempt_failed(
                            &tx,
                            pair,
                            error,
                            VERDICT_ATTEMPTS,
                        )
                        .await?
                        {
                            tracing::warn!(newer = %pair.newer_id, older = %pair.older_id, "contradiction candidate parked: no verdict after repeated attempts");
                        }
                    }
                    tx.commit().await?;
                }
                let verdicts = answers
                    .verdicts
                    .into_iter()
                    .filter_map(|(pair, verdict)| match verdict.as_str() {
                        "contradiction" => Some((pair, Verdict::Contradiction)),
                        "compatible" => Some((pair, Verdict::Compatible)),
                        _ => None,
                    })
                    .collect();
                Ok((ModelWork::Contradictions(verdicts), answers.stopped))
            }
            Stage::SupersessionReview => {
                let (mut reviewed, pairs) = {
                    let mut client = self.store.client().await?;
                    let tx = TenantTx::begin(&mut client, tenant_id).await?;
                    consolidation::supersession_candidates(
                        &tx,
                        self.settings.supersession_per_run,
                        self.settings.supersession_min_similarity,
                        self.settings.supersession_max_similarity,
                    )
                    .await?
                };
                let asked: Vec<Uuid> = pairs.iter().map(|p| p.newer_id).collect();
                let answers = self
                    .ask_about_pairs(llm, tenant_id, now, SUPERSESSION_INSTRUCTIONS, pairs)
                    .await?;
                // A fragment is reviewed once every pair of it got a verdict;
                // failures and a round cut short (budget, breakers) leave it
                // for the next run.
                let answered: Vec<Uuid> =
                    answers.verdicts.iter().map(|(p, _)| p.newer_id).collect();
                let count = |ids: &[Uuid], id: &Uuid| ids.iter().filter(|x| *x == id).count();
                reviewed.retain(|id| count(&asked, id) == count(&answered, id));
                let superseded = answers
                    .verdicts
                    .into_iter()
                    .filter(|(_, verdict)| verdict == "supersedes")
                    .map(|(pair, _)| pair)
                    .collect();
                Ok((
                    ModelWork::Supersessions {
                        reviewed,
                        superseded,
                    },
                    answers.stopped,
                ))
            }
            Stage::SplitLong => {
                let long = {
                    let mut client = self.store.client().await?;
                    let tx = TenantTx::begin(&mut client, tenant_id).await?;
                    consolidation::split_candidates(
                        &tx,
                        self.settings.split_min_chars,
                        self.settings.split_per_run,
                    )
                    .await?
                };
                let questions = long
                    .into_iter()
                    .map(|fragment| {
                        let prompt = fragment.content.clone();
                        (fragment, prompt)
                    })
                    .collect();
                let answers = self
                    .ask(llm, tenant_id, now, split::SPLIT_INSTRUCTIONS, questions)
                    .await?;
                // Failed calls are asked again next run; an answer, usable or
                // not, settles the fragment.
                let tokenizer = Tokenizer::default();
                let mut checked = Vec::new();
                let mut splits = Vec::new();
                for (original, json) in answers.answered {
                    checked.push(original.id);
                    match split::parts_of(
                        &original,
                        &json,
                        &self.settings.fragment_limits,
                        &tokenizer,
                    ) {
                        Ok(parts) => splits.push(split::Split { original, parts }),
                        Err(reason) => {
                            tracing::info!(fragment.id = %original.id, reason, "long fragment left whole");
                        }
                    }
                }
                Ok((ModelWork::Splits { checked, splits }, answers.stopped))
            }
            Stage::QualityReview => {
                let waiting = {
                    let mut client = self.store.client().await?;
                    let tx = TenantTx::begin(&mut client, tenant_id).await?;
                    consolidation::quality_candidates(
                        &tx,
                        &self.settings.quality_types,
                        self.settings.quality_per_run,
                    )
                    .await?
                };
                let questions = waiting
                    .into_iter()
                    .map(|fragment| {
                        let prompt = format!(
                            "Type: {}\nNote: {}",
                            fragment.fragment_type, fragment.content
                        );
                        (fragment.id, prompt)
                    })
                    .collect();
                let answers = self
                    .ask(llm, tenant_id, now, QUALITY_INSTRUCTIONS, questions)
                    .await?;
                // Failed calls are asked again next run; an answer settles
                // the fragment, with or without a verdict.
                let verdicts = answers
                    .answered
                    .into_iter()
                    .map(|(id, json)| {
                        let sound = match json["verdict"].as_str() {
                            Some("sound") => Some(true),
                            Some("unsound") => Some(false),
                            _ => None,
                        };
                        (id, sound)
                    })
                    .collect();
                Ok((ModelWork::Quality(verdicts), answers.stopped))
            }
            _ => Ok((ModelWork::None, None)),
        }
    }

    fn rules(&self) -> StageRules {
        StageRules {
            gc_grace_days: self.settings.gc_grace_days,
            gc_max_per_run: self.settings.gc_max_per_run,
            search_reindex_per_run: self.settings.search_reindex_per_run,
            search_event_retention_days: self.settings.search_event_retention_days,
            surfacing_query_retention_days: self.settings.surfacing_query_retention_days,
            surfacing_stats_retention_days: self.settings.surfacing_stats_retention_days,
            anchor_min_accesses: self.settings.anchor_min_accesses,
            anchor_min_importance: self.settings.anchor_min_importance,
            activation_half_life_days: self.settings.activation_half_life_days,
            reflections_kept: self.settings.reflections_kept,
            contradiction: ContradictionRules {
                similarity: self.settings.contradiction_similarity,
                ambiguous_similarity: self.settings.contradiction_ambiguous_similarity,
                per_run: self.settings.contradiction_per_run,
            },
            dedup: DedupRules {
                similarity: self.settings.dedup_similarity,
                min_overlap: self.settings.dedup_min_overlap,
                per_run: self.settings.dedup_per_run,
            },
            compression: CompressionRules {
                age_days: self.settings.compress_age_days,
                max_importance: self.settings.compress_max_importance,
                similarity: self.settings.compress_similarity,
                min_group: self.settings.compress_min_group,
                per_run: self.settings.compress_per_run,
            },
        }
    }

    /// Runs every stage for `tenant_id` as of `now` and records the run.
    /// `progress` hears each stage's result as it finishes.
    pub async fn run_tenant(
        &self,
        tenant_id: Uuid,
        now: DateTime<Utc>,
        trigger: &'static str,
        dry_run: bool,
        progress: impl Fn(&StageResult),
    ) -> mneme_store::Result<Run> {
        let rules = self.rules();
        let started_at = Utc::now();
        let mut stages = Vec::with_capacity(STAGES.len());
        for stage in STAGES {
            let clock = Instant::now();
            if stage.needs_model() && self.llm.is_none() {
                let result = StageResult {
                    stage: stage.name(),
                    affected: 0,
                    millis: 0,
                    error: None,
                    skipped: Some("no llm configured".into()),
                };
                progress(&result);
                stages.push(result);
                continue;
            }
            let outcome = async {
                let (work, stopped) = match &self.llm {
                    Some(llm) => self.prepare(*stage, llm, tenant_id, now).await?,
                    None => (ModelWork::None, None),
                };
                let mut client = self.store.client().await?;
                let tx = TenantTx::begin(&mut client, tenant_id).await?;
                let affected =
                    stage.run(&tx, now, &rules).await? + apply_model_work(&tx, work, now).await?;
                if !dry_run {
                    tx.commit().await?;
                }
                Ok::<_, mneme_store::StoreError>((affected, stopped))
            }
            .await;
            let elapsed = clock.elapsed();
            let name = stage.name();
            STAGE_SECONDS
                .with_label_values(&[name])
                .observe(elapsed.as_secs_f64());
            let result = match outcome {
                Ok((affected, stopped)) => {
                    if !dry_run {
                        STAGE_AFFECTED.with_label_values(&[name]).inc_by(affected);
                    }
                    StageResult {
                        stage: name,
                        affected,
                        millis: elapsed.as_millis() as u64,
                        error: None,
                        skipped: stopped,
                    }
                }
                Err(error) => {
                    STAGE_ERRORS.with_label_values(&[name]).inc();
                    tracing::warn!(tenant.id = %tenant_id, stage = name, error = describe(&error), "consolidation stage failed");
                    StageResult {
                        stage: name,
                        affected: 0,
                        millis: elapsed.as_millis() as u64,
                        error: Some(describe(&error)),
                        skipped: None,
                    }
                }
            };
            progress(&result);
            stages.push(result);
        }
        let run = Run {
            id: Uuid::now_v7(),
            trigger,
            dry_run,
            stages,
            started_at,
            finished_at: Utc::now(),
        };
        let mut client = self.store.client().await?;
        let tx = TenantTx::begin(&mut client, tenant_id).await?;
        consolidation::record_run(&tx, &run).await?;
        tx.commit().await?;
        RUNS.with_label_values(&[
            trigger,
            if dry_run { "true" } else { "false" },
            if run.failed() { "failed" } else { "finished" },
        ])
        .inc();
        let affected: u64 = run.stages.iter().map(|s| s.affected).sum();
        tracing::info!(tenant.id = %tenant_id, dry_run, affected, failed = run.failed(), "tenant consolidated");
        Ok(run)
    }

    /// Consolidates `tenant_id` if it is due and no one else is doing it;
    /// returns whether it ran.
    pub async fn consolidate_if_due(
        &self,
        tenant_id: Uuid,
        now: DateTime<Utc>,
    ) -> mneme_store::Result<bool> {
        let mut lease_client = self.store.client().await?;
        let lease = TenantTx::begin(&mut lease_client, tenant_id).await?;
        if !consolidation::try_lease(&lease, now, self.settings.interval).await? {
            return Ok(false);
        }
        self.run_tenant(tenant_id, now, "schedule", false, |_| {})
            .await?;
        consolidation::finish_lease(&lease, Utc::now()).await?;
        lease.commit().await?;
        Ok(true)
    }

    /// Consolidates `tenant_id` now, whatever the schedule says. A real
    /// run takes the tenant's lease (`None` when another run holds it, so
    /// a manual run never overlaps a scheduled one); a dry run changes
    /// nothing and needs none.
    pub async fn run_now(
        &self,
        tenant_id: Uuid,
        dry_run: bool,
        progress: impl Fn(&StageResult),
    ) -> mneme_store::Result<Option<Run>> {
        let now = Utc::now();
        if dry_run {
            return self
                .run_tenant(tenant_id, now, "manual", true, progress)
                .await
                .map(Some);
        }
        let mut lease_client = self.store.client().await?;
        let lease = TenantTx::begin(&mut lease_client, tenant_id).await?;
        if !consolidation::take_lease(&lease, now).await? {
            return Ok(None);
        }
        let run = self
            .run_tenant(tenant_id, now, "manual", false, progress)
            .await?;
        consolidation::finish_lease(&lease, Utc::now()).await?;
        lease.commit().await?;
        Ok(Some(run))
    }

    /// One pass over every active tenant; returns how many were
    /// consolidated. A failing tenant is logged and skipped.
    pub async fn poll(&self, stop: &CancellationToken) -> mneme_store::Result<usize> {
        let tenant_ids = {
            let client = self.store.client().await?;
            tenants::active_ids(&client).await?
        };
        let mut consolidated = 0;
        for tenant_id in tenant_ids {
            if stop.is_cancelled() {
                break;
            }
            match self.consolidate_if_due(tenant_id, Utc::now()).await {
                Ok(true) => consolidated += 1,
                Ok(false) => {}
                Err(error) => {
                    tracing::warn!(tenant.id = %tenant_id, %error, "consolidation failed")
                }
            }
        }
        Ok(consolidated)
    }

    /// Polls every `poll` interval until `stop` fires.
    pub async fn run(self, stop: CancellationToken) {
        let mut ticks = tokio::time::interval(self.settings.poll);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = stop.cancelled() => break,
                _ = ticks.tick() => {
                    if let Err(error) = self.poll(&stop).await {
                        tracing::warn!(%error, "consolidation poll failed");
                    }
                }
            }
        }
        tracing::info!("consolidation scheduler stopped");
    }
}
