//! Consolidation: the per-tenant lease and run history
//! (`consolidation_state`, `consolidation_runs`) and the SQL of each
//! maintenance stage.
//!
//! Every stage is one or a few statements on the fragments of the
//! transaction's tenant and returns how many rows it changed. Stages take
//! `now` as a parameter (never the database clock), so tests can run them
//! at any instant and a dry run is the same statements rolled back.

use chrono::{DateTime, Utc};
use serde::Serialize;
use uuid::Uuid;

use crate::fragments::{STORED_COLUMNS, StoredFragment};
use crate::{Result, TenantTx};

/// Takes the tenant's consolidation lease when a run is due: locks the
/// tenant's state row without waiting (another pod holding it means "not
/// mine") and, when the last run started more than `interval` before
/// `now`, marks a new run as started. A tenant that is plainly not due is
/// answered from a plain read, so polls lock (and dirty) nothing. The lease
/// lasts as long as `tx`: commit it with [`finish_lease`] after the run.
pub async fn try_lease(
    tx: &TenantTx<'_>,
    now: DateTime<Utc>,
    interval: std::time::Duration,
) -> Result<bool> {
    let interval = chrono::Duration::from_std(interval).unwrap_or(chrono::Duration::MAX);
    let due = |last: Option<DateTime<Utc>>| last.is_none_or(|last| now - last >= interval);
    let last: Option<Option<DateTime<Utc>>> = tx
        .query_opt(
            "SELECT last_started_at FROM mneme.consolidation_state WHERE tenant_id = $1",
            &[&tx.tenant_id()],
        )
        .await?
        .map(|row| row.get(0));
    match last {
        Some(last) if !due(last) => return Ok(false),
        Some(_) => {}
        None => {
            tx.execute(
                "INSERT INTO mneme.consolidation_state (tenant_id) VALUES ($1)
                 ON CONFLICT DO NOTHING",
                &[&tx.tenant_id()],
            )
            .await?;
        }
    }
    // Due: take the lock, then check again (another pod may have run it
    // between the read and the lock).
    let Some(row) = tx
        .query_opt(
            "SELECT last_started_at FROM mneme.consolidation_state
              WHERE tenant_id = $1 FOR UPDATE SKIP LOCKED",
            &[&tx.tenant_id()],
        )
        .await?
    else {
        return Ok(false);
    };
    if !due(row.get(0)) {
        return Ok(false);
    }
    tx.execute(
        "UPDATE mneme.consolidation_state SET last_started_at = $2, runs = runs + 1
          WHERE tenant_id = $1",
        &[&tx.tenant_id(), &now],
    )
    .await?;
    Ok(true)
}

/// Takes the tenant's lease for a run on demand, due or not; false when
/// another run holds it. Like [`try_lease`], the lease lasts as long as
/// `tx`.
pub async fn take_lease(tx: &TenantTx<'_>, now: DateTime<Utc>) -> Result<bool> {
    try_lease(tx, now, std::time::Duration::ZERO).await
}

/// Records the end of the leased run; the caller then commits the lease.
pub async fn finish_lease(tx: &TenantTx<'_>, finished_at: DateTime<Utc>) -> Result<()> {
    tx.execute(
        "UPDATE mneme.consolidation_state SET last_finished_at = $2 WHERE tenant_id = $1",
        &[&tx.tenant_id(), &finished_at],
    )
    .await?;
    Ok(())
}

/// What one stage did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StageResult {
    pub stage: &'static str,
    /// Rows changed (or, in a dry run, that would have changed).
    pub affected: u64,
    pub millis: u64,
    pub error: Option<String>,
    /// Why the stage did not run (e.g. it needs a language model and none
    /// is configured).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
}

/// One run of every stage for one tenant.
#[derive(Debug, Clone)]
pub struct Run {
    pub id: Uuid,
    /// `schedule` or `manual`.
    pub trigger: &'static str,
    pub dry_run: bool,
    pub stages: Vec<StageResult>,
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
}

impl Run {
    pub fn failed(&self) -> bool {
        self.stages.iter().any(|s| s.error.is_some())
    }
}

/// Stores `run` in the run history.
pub async fn record_run(tx: &TenantTx<'_>, run: &Run) -> Result<()> {
    let stages = serde_json::to_value(&run.stages).unwrap_or_default();
    let status = if run.failed() { "failed" } else { "finished" };
    tx.execute(
        "INSERT INTO mneme.consolidation_runs
             (tenant_id, id, trigger, dry_run, status, stages, started_at, finished_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        &[
            &tx.tenant_id(),
            &run.id,
            &run.trigger,
            &run.dry_run,
            &status,
            &stages,
            &run.started_at,
            &run.finished_at,
        ],
    )
    .await?;
    Ok(())
}

/// Thresholds of the stages; see `docs/OPERATIONS.md` for what each does.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StageRules {
    /// Hard deletes happen only to fragments older than this.
    pub gc_grace_days: i32,
    /// Most fragments one run hard-deletes.
    pub gc_max_per_run: i64,
    /// Most search documents one run tokenises again.
    pub search_reindex_per_run: i64,
    pub search_event_retention_days: i32,
    /// Days after which surfacing queries are blanked, and events deleted.
    pub surfacing_query_retention_days: i32,
    pub surfacing_stats_retention_days: i32,
    pub anchor_min_accesses: i32,
    pub anchor_min_importance: f32,
    /// Days in which a fragment's activation halves.
    pub activation_half_life_days: f64,
    /// Reflection fragments (`source = reflect`) of each key and type that
    /// the purge always keeps, newest first.
    pub reflections_kept: i64,
    pub contradiction: ContradictionRules,
    pub dedup: DedupRules,
    pub compression: CompressionRules,
}

/// Which old fragments compression folds together.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CompressionRules {
    pub age_days: i32,
    pub max_importance: f32,
    pub similarity: f32,
    /// Fragments a group needs, the kept one included.
    pub min_group: usize,
    pub per_run: i64,
}

/// An old fragment and one of its similar old neighbours of the same key
/// and topic, both compression candidates.
#[derive(Debug, Clone)]
pub struct CompressionPair {
    pub key_id: Uuid,
    pub seed_id: Uuid,
    pub seed: String,
    pub neighbour_id: Uuid,
    pub neighbour: String,
}

/// Thresholds of semantic de-duplication.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DedupRules {
    pub similarity: f32,
    /// Share of lexemes the two texts must share (Jaccard): similarity
    /// alone merges sentences that differ in one telling word.
    pub min_overlap: f64,
    pub per_run: i64,
}

/// Moves fragments between TTL tiers.
///
/// - to `permanent`: preferences; fragments with at least 5 links made by
///   agents (mneme's own `automatic` links say nothing of a memory's worth);
///   importance ≥ 0.8 with a positive quality verdict, or without one when
///   anchored or at importance ≥ 0.9.
/// - `hot` → `warm` after 7 days without access; `short` → `cold` after 1
///   day without access (the reference demoted neither).
/// - `warm` → `cold` below importance 0.3 or after 30 days without access.
/// - `permanent` → `cold` ("parole") for non-anchors, non-preferences below
///   importance 0.5 after 180 days without access.
pub async fn ttl_transition(tx: &TenantTx<'_>, now: DateTime<Utc>) -> Result<u64> {
    Ok(tx
        .execute(
            "WITH linked AS (
                 SELECT f.id, (SELECT count(*) FROM mneme.fragment_links l
                                WHERE l.tenant_id = f.tenant_id AND l.deleted_at IS NULL
                                  AND NOT l.automatic
                                  AND (l.from_id = f.id OR l.to_id = f.id)) AS links
                   FROM mneme.fragments f
                  WHERE f.tenant_id = $1 AND f.valid_to IS NULL),
             target AS (
                 SELECT f.id,
                        CASE
                          WHEN f.ttl_tier <> 'permanent' AND (
                                   f.type = 'preference' OR k.links >= 5
                                   OR (f.importance >= 0.8 AND (f.quality_verified IS TRUE
                                       OR (f.quality_verified IS NULL
                                           AND (f.is_anchor OR f.importance >= 0.9))))) THEN 'permanent'
                          WHEN f.ttl_tier = 'hot'
                               AND COALESCE(f.accessed_at, f.created_at) < $2::timestamptz - interval '7 days' THEN 'warm'
                          WHEN f.ttl_tier = 'short'
                               AND COALESCE(f.accessed_at, f.created_at) < $2::timestamptz - interval '1 day' THEN 'cold'
                          WHEN f.ttl_tier = 'warm' AND (f.importance < 0.3
                               OR COALESCE(f.accessed_at, f.created_at) < $2::timestamptz - interval '30 days') THEN 'cold'
                          WHEN f.ttl_tier = 'permanent' AND NOT f.is_anchor AND f.type <> 'preference'
                               AND f.importance < 0.5 AND k.links < 5
                               AND COALESCE(f.accessed_at, f.created_at) < $2::timestamptz - interval '180 days' THEN 'cold'
                        END AS tier
                   FROM mneme.fragments f JOIN linked k ON k.id = f.id
                  WHERE f.tenant_id = $1 AND f.valid_to IS NULL)
             UPDATE mneme.fragments f SET ttl_tier = t.tier
               FROM target t
              WHERE f.tenant_id = $1 AND f.id = t.id AND t.tier IS NOT NULL AND f.ttl_tier <> t.tier",
            &[&tx.tenant_id(), &now],
        )
        .await?)
}

/// Decay since the last run (or access, or creation), as of `now`:
/// importance halves per type half-life, stretched up to twice by recent
/// activation (`importance · 2^(−Δt / (half-life · clamp(1 + 0.5·activation,
/// 1, 2)))`, at least 0.05; anchors and permanent fragments keep theirs),
/// and activation halves every `activation_half_life_days` for every
/// fragment (the reference never decayed it). A fragment is decayed at
/// most once a day, so runs every few hours do not rewrite every row.
pub async fn decay(tx: &TenantTx<'_>, now: DateTime<Utc>, rules: &StageRules) -> Result<u64> {
    Ok(tx
        .execute(
            "UPDATE mneme.fragments f
                SET importance = CASE WHEN f.is_anchor OR f.ttl_tier = 'permanent' THEN f.importance
                    ELSE GREATEST(0.05, LEAST(f.importance, f.importance * power(2.0,
                        -(extract(epoch FROM $2::timestamptz - COALESCE(f.last_decay_at, f.accessed_at, f.created_at))
                          / 86400.0)
                        / ((CASE f.type WHEN 'procedure' THEN 30 WHEN 'fact' THEN 60
                                        WHEN 'decision' THEN 90 WHEN 'error' THEN 45
                                        WHEN 'preference' THEN 120 WHEN 'relation' THEN 90
                                        ELSE 60 END)
                           * LEAST(2.0, GREATEST(1.0, 1.0 + 0.5 * f.ema_activation))))))::real END,
                    ema_activation = (f.ema_activation * power(2.0,
                        -(extract(epoch FROM $2::timestamptz - COALESCE(f.last_decay_at, f.accessed_at, f.created_at))
                          / 86400.0) / $3::float8))::real,
                    last_decay_at = $2
              WHERE f.tenant_id = $1 AND f.valid_to IS NULL
                AND COALESCE(f.last_decay_at, f.accessed_at, f.created_at)
                    <= $2::timestamptz - interval '1 day'",
            &[&tx.tenant_id(), &now, &rules.activation_half_life_days],
        )
        .await?)
}

/// Hard-deletes forgettable fragments older than the grace period, at most
/// `gc_max_per_run` per run, never anchors, permanent or superseded ones
/// (history): (a) utility below 0.15 and 60 days without access; (b) facts
/// and decisions below importance 0.2, never accessed, unlinked, older than
/// 30 days; (c) importance below 0.1, 90 days without access, fewer than 2
/// links (links made by agents, as in [`ttl_transition`]); (d) resolved errors below importance 0.3 older than 30 days.
/// Links, versions and evidence go with them (cascade).
pub async fn expired_delete(
    tx: &TenantTx<'_>,
    now: DateTime<Utc>,
    rules: &StageRules,
) -> Result<u64> {
    Ok(tx
        .execute(
            "WITH candidates AS (
                 SELECT f.id
                   FROM mneme.fragments f
                   LEFT JOIN LATERAL (
                        SELECT count(*) AS links FROM mneme.fragment_links l
                         WHERE l.tenant_id = f.tenant_id AND l.deleted_at IS NULL
                           AND NOT l.automatic
                           AND (l.from_id = f.id OR l.to_id = f.id)) k ON true
                  WHERE f.tenant_id = $1 AND f.valid_to IS NULL AND NOT f.is_anchor
                    AND f.ttl_tier <> 'permanent'
                    AND f.created_at < $2::timestamptz - make_interval(days => $3)
                    AND (
                         (f.utility_score < 0.15
                          AND COALESCE(f.accessed_at, f.created_at) < $2::timestamptz - interval '60 days')
                      OR (f.type IN ('fact', 'decision') AND f.importance < 0.2
                          AND f.access_count = 0 AND k.links = 0
                          AND f.created_at < $2::timestamptz - interval '30 days')
                      OR (f.importance < 0.1 AND k.links < 2
                          AND COALESCE(f.accessed_at, f.created_at) < $2::timestamptz - interval '90 days'
                          AND f.created_at < $2::timestamptz - interval '90 days')
                      OR (f.type = 'error' AND f.resolution_status = 'resolved'
                          AND f.importance < 0.3 AND f.created_at < $2::timestamptz - interval '30 days'))
                  ORDER BY f.importance, f.created_at, f.id
                  LIMIT $4)
             DELETE FROM mneme.fragments f USING candidates c
              WHERE f.tenant_id = $1 AND f.id = c.id",
            &[
                &tx.tenant_id(),
                &now,
                &rules.gc_grace_days,
                &rules.gc_max_per_run,
            ],
        )
        .await?)
}

/// Recomputes utility: `importance · (1 + ln(max(accesses, 1))) /
/// max(1, age in months)^0.3`.
pub async fn utility(tx: &TenantTx<'_>, now: DateTime<Utc>) -> Result<u64> {
    Ok(tx
        .execute(
            "UPDATE mneme.fragments f
                SET utility_score = (f.importance * (1 + ln(GREATEST(f.access_count, 1)))
                    / power(GREATEST(1.0, extract(epoch FROM $2::timestamptz - f.created_at) / 2592000.0), 0.3))::real
              WHERE f.tenant_id = $1 AND f.valid_to IS NULL
                AND f.utility_score IS DISTINCT FROM (f.importance * (1 + ln(GREATEST(f.access_count, 1)))
                    / power(GREATEST(1.0, extract(epoch FROM $2::timestamptz - f.created_at) / 2592000.0), 0.3))::real",
            &[&tx.tenant_id(), &now],
        )
        .await?)
}

/// Anchors fragments used often and rated important.
pub async fn anchor_promotion(tx: &TenantTx<'_>, rules: &StageRules) -> Result<u64> {
    Ok(tx
        .execute(
            "UPDATE mneme.fragments f SET is_anchor = true
              WHERE f.tenant_id = $1 AND f.valid_to IS NULL AND NOT f.is_anchor
                AND f.access_count >= $2 AND f.importance >= $3",
            &[
                &tx.tenant_id(),
                &rules.anchor_min_accesses,
                &rules.anchor_min_importance,
            ],
        )
        .await?)
}

/// Deletes search events older than the retention.
pub async fn search_events_gc(
    tx: &TenantTx<'_>,
    now: DateTime<Utc>,
    rules: &StageRules,
) -> Result<u64> {
    Ok(tx
        .execute(
            "DELETE FROM mneme.search_events
              WHERE tenant_id = $1 AND created_at < $2::timestamptz - make_interval(days => $3)",
            &[&tx.tenant_id(), &now, &rules.search_event_retention_days],
        )
        .await?)
}

/// Share of importance one piece of tool feedback moves a fragment it names:
/// relevant and sufficient, relevant but insufficient, irrelevant.
pub const FEEDBACK_SUFFICIENT: f64 = 0.05;
pub const FEEDBACK_INSUFFICIENT: f64 = -0.025;
pub const FEEDBACK_IRRELEVANT: f64 = -0.05;
/// Feedback of one session beyond this many calls is ignored, so one
/// chatty session cannot swing importance.
pub const FEEDBACK_PER_SESSION: i64 = 20;

/// Applies the tool feedback not yet calibrated to the importance of the
/// fragments it names (fragments of the key that gave it; anchors
/// excluded; clipped to 0.05–1) and marks it calibrated, in one statement.
/// Returns the number of fragments changed.
pub async fn feedback_calibration(tx: &TenantTx<'_>, now: DateTime<Utc>) -> Result<u64> {
    Ok(tx
        .execute(
            "WITH consumed AS (
                 UPDATE mneme.tool_feedback SET calibrated_at = $2
                  WHERE tenant_id = $1 AND calibrated_at IS NULL
                 RETURNING id, key_id, session_id, relevant, sufficient, fragment_ids),
             ranked AS (
                 SELECT *, row_number() OVER (PARTITION BY key_id, session_id ORDER BY id) AS n
                   FROM consumed),
             deltas AS (
                 SELECT r.key_id, unnest(r.fragment_ids) AS fragment_id,
                        CASE WHEN NOT r.relevant THEN $3::float8
                             WHEN r.sufficient THEN $4::float8 ELSE $5::float8 END AS delta
                   FROM ranked r WHERE r.n <= $6),
             net AS (
                 SELECT key_id, fragment_id, sum(delta) AS delta FROM deltas GROUP BY 1, 2)
             UPDATE mneme.fragments f
                SET importance = LEAST(1.0, GREATEST(0.05, f.importance * (1 + n.delta)))::real
               FROM net n
              WHERE f.tenant_id = $1 AND f.id = n.fragment_id AND f.key_id = n.key_id
                AND NOT f.is_anchor AND f.valid_to IS NULL AND n.delta <> 0",
            &[
                &tx.tenant_id(),
                &now,
                &FEEDBACK_IRRELEVANT,
                &FEEDBACK_SUFFICIENT,
                &FEEDBACK_INSUFFICIENT,
                &FEEDBACK_PER_SESSION,
            ],
        )
        .await?)
}

/// Deletes old, unimportant session reflections (by `reflect` or automatic
/// reflection, counted together): of each key and type the
/// newest `reflections_kept` stay; of the others, those older than 30 days
/// below importance 0.3 go, at most 30 per run (never anchors or permanent
/// ones).
pub async fn reflection_purge(
    tx: &TenantTx<'_>,
    now: DateTime<Utc>,
    rules: &StageRules,
) -> Result<u64> {
    Ok(tx
        .execute(
            "WITH ranked AS (
                 SELECT id, created_at, importance, is_anchor, ttl_tier,
                        row_number() OVER (PARTITION BY key_id, type
                                           ORDER BY created_at DESC, id DESC) AS n
                   FROM mneme.fragments
                  WHERE tenant_id = $1 AND source IN ('reflect', 'auto_reflect')
                    AND valid_to IS NULL),
             victims AS (
                 SELECT id FROM ranked
                  WHERE n > $3 AND created_at < $2::timestamptz - interval '30 days'
                    AND importance < 0.3 AND NOT is_anchor AND ttl_tier <> 'permanent'
                  ORDER BY created_at, id
                  LIMIT 30)
             DELETE FROM mneme.fragments f USING victims v
              WHERE f.tenant_id = $1 AND f.id = v.id",
            &[&tx.tenant_id(), &now, &rules.reflections_kept],
        )
        .await?)
}

/// Thresholds of contradiction detection.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ContradictionRules {
    /// Older fragments of the same key and topic at least this similar are
    /// compared with a new one.
    pub similarity: f32,
    /// Undecided pairs at least this similar wait for a model's verdict.
    pub ambiguous_similarity: f32,
    /// New fragments checked per run.
    pub per_run: i64,
}

/// A fragment under review and one similar older fragment of its key and
/// topic.
#[derive(Debug, Clone)]
pub struct SimilarPair {
    pub key_id: Uuid,
    pub newer_id: Uuid,
    pub newer: String,
    pub older_id: Uuid,
    pub older: String,
    pub similarity: f32,
}

/// Which review a fragment is checked by once: each has its own mark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Review {
    Contradiction,
    Duplicate,
    Supersession,
    Split,
}

impl Review {
    fn checked_column(self) -> &'static str {
        match self {
            Review::Contradiction => "contradiction_checked_at",
            Review::Duplicate => "dedup_checked_at",
            Review::Supersession => "supersession_checked_at",
            Review::Split => "split_checked_at",
        }
    }
}

/// Marks fragments checked by `review`, so they are not asked about again.
pub async fn mark_reviewed(
    tx: &TenantTx<'_>,
    review: Review,
    ids: &[Uuid],
    now: DateTime<Utc>,
) -> Result<u64> {
    if ids.is_empty() {
        return Ok(0);
    }
    Ok(tx
        .execute(
            &format!(
                "UPDATE mneme.fragments SET {} = $3 WHERE tenant_id = $1 AND id = ANY($2)",
                review.checked_column()
            ),
            &[&tx.tenant_id(), &ids, &now],
        )
        .await?)
}

/// Takes up to `per_run` embedded, valid fragments not yet checked by
/// `review`, marks them checked, and returns them paired with their three
/// most similar older valid fragments of the same key and topic at or above
/// `similarity` (exact search: these sets are small and must not be
/// approximated).
pub async fn similar_older_pairs(
    tx: &TenantTx<'_>,
    now: DateTime<Utc>,
    review: Review,
    per_run: i64,
    similarity: f32,
) -> Result<Vec<SimilarPair>> {
    let checked = review.checked_column();
    let rows = tx
        .query(
            &format!(
                "WITH batch AS (
                     UPDATE mneme.fragments f SET {checked} = $2
                      WHERE f.tenant_id = $1 AND f.id IN (
                            SELECT id FROM mneme.fragments
                             WHERE tenant_id = $1 AND {checked} IS NULL
                               AND valid_to IS NULL AND embedding IS NOT NULL
                             ORDER BY created_at, id LIMIT $3)
                     RETURNING f.id, f.key_id, f.topic, f.content, f.embedding, f.created_at)
                 SELECT b.key_id, b.id, b.content, o.id, o.content, o.similarity
                   FROM batch b
                   CROSS JOIN LATERAL (
                        SELECT o.id, o.content, (1 - (o.embedding <=> b.embedding))::real AS similarity
                          FROM mneme.fragments o
                         WHERE o.tenant_id = $1 AND o.key_id = b.key_id AND o.topic = b.topic
                           AND o.valid_to IS NULL AND o.embedding IS NOT NULL AND o.id <> b.id
                           AND (o.created_at, o.id) < (b.created_at, b.id)
                         ORDER BY 1 - (o.embedding <=> b.embedding) DESC, o.id
                         LIMIT 3) o
                  WHERE o.similarity >= $4"
            ),
            &[&tx.tenant_id(), &now, &per_run, &similarity],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|row| SimilarPair {
            key_id: row.get(0),
            newer_id: row.get(1),
            newer: row.get(2),
            older_id: row.get(3),
            older: row.get(4),
            similarity: row.get(5),
        })
        .collect())
}

/// Merges a duplicate into the newer statement of it (see [`fold_into`]).
pub async fn merge_duplicate(tx: &TenantTx<'_>, pair: &SimilarPair) -> Result<bool> {
    fold_into(tx, pair.key_id, pair.older_id, pair.newer_id).await
}

/// Old (not recalled for `age_days`), unimportant, valid, embedded
/// fragments (anchors and permanent ones never), at most `per_run` of
/// them, most important first; each paired with every other of them of the
/// same key and topic at or above `similarity`. Rows come by the first
/// one's rank, then the neighbour's, so a caller can group greedily.
pub async fn compression_pairs(
    tx: &TenantTx<'_>,
    now: DateTime<Utc>,
    rules: &CompressionRules,
) -> Result<Vec<CompressionPair>> {
    let rows = tx
        .query(
            "WITH ranked AS MATERIALIZED (
                 SELECT c.*, row_number() OVER (
                            ORDER BY c.importance DESC, c.last_seen DESC, c.id) AS rank
                   FROM (SELECT id, key_id, topic, content, embedding, importance,
                                COALESCE(accessed_at, created_at) AS last_seen
                           FROM mneme.fragments
                          WHERE tenant_id = $1 AND valid_to IS NULL AND embedding IS NOT NULL
                            AND NOT is_anchor AND ttl_tier <> 'permanent' AND importance < $3
                            AND COALESCE(accessed_at, created_at)
                                < $2::timestamptz - make_interval(days => $4)
                          ORDER BY importance DESC, COALESCE(accessed_at, created_at) DESC, id
                          LIMIT $5) c)
             SELECT s.key_id, s.id, s.content, m.id, m.content
               FROM ranked s
               JOIN ranked m ON m.key_id = s.key_id AND m.topic = s.topic AND m.id <> s.id
              WHERE 1 - (m.embedding <=> s.embedding) >= $6
              ORDER BY s.rank, m.rank",
            &[
                &tx.tenant_id(),
                &now,
                &rules.max_importance,
                &rules.age_days,
                &rules.per_run,
                &f64::from(rules.similarity),
            ],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|row| CompressionPair {
            key_id: row.get(0),
            seed_id: row.get(1),
            seed: row.get(2),
            neighbour_id: row.get(3),
            neighbour: row.get(4),
        })
        .collect())
}

/// Folds `merged_id` into `kept_id` (same key): the merged one is
/// superseded (valid until now, importance halved, a `superseded_by`
/// link), and its other links are copied to the kept one so the graph
/// keeps them. Returns whether it folded (false when either is gone).
pub async fn fold_into(
    tx: &TenantTx<'_>,
    key_id: Uuid,
    merged_id: Uuid,
    kept_id: Uuid,
) -> Result<bool> {
    let superseded = crate::fragments::supersede(tx, key_id, &[merged_id], kept_id).await?;
    if superseded.is_empty() {
        return Ok(false);
    }
    tx.execute(
        "INSERT INTO mneme.fragment_links
                (tenant_id, from_id, to_id, relation_type, weight, confidence, automatic)
         SELECT l.tenant_id,
                CASE WHEN l.from_id = $2 THEN $3 ELSE l.from_id END,
                CASE WHEN l.to_id = $2 THEN $3 ELSE l.to_id END,
                l.relation_type, l.weight, l.confidence, l.automatic
           FROM mneme.fragment_links l
          WHERE l.tenant_id = $1 AND (l.from_id = $2 OR l.to_id = $2) AND l.deleted_at IS NULL
            AND l.relation_type <> 'superseded_by'
            AND NOT (l.from_id = $3 OR l.to_id = $3)
         ON CONFLICT DO NOTHING",
        &[&tx.tenant_id(), &merged_id, &kept_id],
    )
    .await?;
    Ok(true)
}

/// Records the verdict on a pair: `contradiction` (with the rule that
/// found it) or `pending` (for a model to judge).
pub async fn record_contradiction_candidate(
    tx: &TenantTx<'_>,
    pair: &SimilarPair,
    status: &str,
    reason: Option<&str>,
    now: DateTime<Utc>,
) -> Result<()> {
    tx.execute(
        "INSERT INTO mneme.contradiction_candidates
             (tenant_id, newer_id, older_id, similarity, status, reason, created_at, decided_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7::timestamptz,
                 CASE WHEN $5::text = 'pending' THEN NULL ELSE $7::timestamptz END)
         ON CONFLICT (tenant_id, newer_id, older_id) DO NOTHING",
        &[
            &tx.tenant_id(),
            &pair.newer_id,
            &pair.older_id,
            &pair.similarity,
            &status,
            &reason,
            &now,
        ],
    )
    .await?;
    Ok(())
}

/// The older of two contradicting fragments loses half its importance
/// (not below 0.05; anchors keep theirs): the newer statement is the
/// likelier truth, but nothing is hidden.
pub async fn weaken_contradicted(tx: &TenantTx<'_>, older_id: Uuid) -> Result<u64> {
    Ok(tx
        .execute(
            "UPDATE mneme.fragments SET importance = GREATEST(0.05, importance * 0.5)
              WHERE tenant_id = $1 AND id = $2 AND NOT is_anchor",
            &[&tx.tenant_id(), &older_id],
        )
        .await?)
}

/// Pending contradiction candidates (oldest first) with both texts, for a
/// model to judge.
pub async fn pending_contradictions(tx: &TenantTx<'_>, limit: i64) -> Result<Vec<SimilarPair>> {
    let rows = tx
        .query(
            "SELECT n.key_id, c.newer_id, n.content, c.older_id, o.content, c.similarity
               FROM mneme.contradiction_candidates c
               JOIN mneme.fragments n ON n.tenant_id = c.tenant_id AND n.id = c.newer_id
               JOIN mneme.fragments o ON o.tenant_id = c.tenant_id AND o.id = c.older_id
              WHERE c.tenant_id = $1 AND c.status = 'pending'
                AND n.valid_to IS NULL AND o.valid_to IS NULL
              ORDER BY c.created_at, c.newer_id, c.older_id
              LIMIT $2",
            &[&tx.tenant_id(), &limit],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|row| SimilarPair {
            key_id: row.get(0),
            newer_id: row.get(1),
            newer: row.get(2),
            older_id: row.get(3),
            older: row.get(4),
            similarity: row.get(5),
        })
        .collect())
}

/// Settles a pending candidate as `contradiction` or `compatible`.
pub async fn decide_contradiction_candidate(
    tx: &TenantTx<'_>,
    pair: &SimilarPair,
    status: &str,
    reason: &str,
    now: DateTime<Utc>,
) -> Result<u64> {
    Ok(tx
        .execute(
            "UPDATE mneme.contradiction_candidates
                SET status = $4, reason = $5, decided_at = $6
              WHERE tenant_id = $1 AND newer_id = $2 AND older_id = $3 AND status = 'pending'",
            &[
                &tx.tenant_id(),
                &pair.newer_id,
                &pair.older_id,
                &status,
                &reason,
                &now,
            ],
        )
        .await?)
}

/// Tokens the language model has spent on the tenant on `day`.
pub async fn llm_tokens_used(tx: &TenantTx<'_>, day: chrono::NaiveDate) -> Result<i64> {
    Ok(tx
        .query_opt(
            "SELECT tokens FROM mneme.llm_usage WHERE tenant_id = $1 AND day = $2",
            &[&tx.tenant_id(), &day],
        )
        .await?
        .map_or(0, |row| row.get(0)))
}

/// Adds `tokens` over `calls` calls to the tenant's usage of `day`.
pub async fn record_llm_usage(
    tx: &TenantTx<'_>,
    day: chrono::NaiveDate,
    tokens: i64,
    calls: i32,
) -> Result<()> {
    tx.execute(
        "INSERT INTO mneme.llm_usage (tenant_id, day, tokens, calls) VALUES ($1, $2, $3, $4)
         ON CONFLICT (tenant_id, day) DO UPDATE
            SET tokens = llm_usage.tokens + EXCLUDED.tokens, calls = llm_usage.calls + EXCLUDED.calls",
        &[&tx.tenant_id(), &day, &tokens, &calls],
    )
    .await?;
    Ok(())
}

/// Records that the model gave no verdict on a pending pair; after
/// `max_attempts` the pair is parked (`status = parked`) with the last
/// error and no longer asked about. Returns true when it was parked.
pub async fn contradiction_attempt_failed(
    tx: &TenantTx<'_>,
    pair: &SimilarPair,
    error: &str,
    max_attempts: i16,
) -> Result<bool> {
    let row = tx
        .query_opt(
            "UPDATE mneme.contradiction_candidates
                SET attempts = attempts + 1, error = left($4, 500),
                    status = CASE WHEN attempts + 1 >= $5::int2 THEN 'parked' ELSE status END
              WHERE tenant_id = $1 AND newer_id = $2 AND older_id = $3 AND status = 'pending'
             RETURNING status = 'parked'",
            &[
                &tx.tenant_id(),
                &pair.newer_id,
                &pair.older_id,
                &error,
                &max_attempts,
            ],
        )
        .await?;
    Ok(row.is_some_and(|row| row.get(0)))
}

/// Up to `per_run` embedded, valid fragments not yet reviewed for
/// supersession (all returned, so those without candidates get marked
/// too), and their pairs with the three most similar older valid
/// fragments of the same key, topic and type whose similarity lies in
/// `[min, max)`: related enough that one may update the other, not so
/// close that it is a duplicate. Read only; see [`mark_reviewed`].
pub async fn supersession_candidates(
    tx: &TenantTx<'_>,
    per_run: i64,
    min: f32,
    max: f32,
) -> Result<(Vec<Uuid>, Vec<SimilarPair>)> {
    let batch: Vec<Uuid> = tx
        .query(
            "SELECT id FROM mneme.fragments
              WHERE tenant_id = $1 AND supersession_checked_at IS NULL
                AND valid_to IS NULL AND embedding IS NOT NULL
              ORDER BY created_at, id LIMIT $2",
            &[&tx.tenant_id(), &per_run],
        )
        .await?
        .iter()
        .map(|row| row.get(0))
        .collect();
    if batch.is_empty() {
        return Ok((batch, Vec::new()));
    }
    let rows = tx
        .query(
            "SELECT b.key_id, b.id, b.content, o.id, o.content, o.similarity
               FROM mneme.fragments b
               CROSS JOIN LATERAL (
                    SELECT o.id, o.content, (1 - (o.embedding <=> b.embedding))::real AS similarity
                      FROM mneme.fragments o
                     WHERE o.tenant_id = $1 AND o.key_id = b.key_id AND o.topic = b.topic
                       AND o.type = b.type AND o.valid_to IS NULL AND o.embedding IS NOT NULL
                       AND o.id <> b.id AND (o.created_at, o.id) < (b.created_at, b.id)
                     ORDER BY 1 - (o.embedding <=> b.embedding) DESC, o.id
                     LIMIT 3) o
              WHERE b.tenant_id = $1 AND b.id = ANY($2)
                AND o.similarity >= $3 AND o.similarity < $4
              ORDER BY b.created_at, b.id, o.similarity DESC",
            &[&tx.tenant_id(), &batch, &min, &max],
        )
        .await?;
    let pairs = rows
        .iter()
        .map(|row| SimilarPair {
            key_id: row.get(0),
            newer_id: row.get(1),
            newer: row.get(2),
            older_id: row.get(3),
            older: row.get(4),
            similarity: row.get(5),
        })
        .collect();
    Ok((batch, pairs))
}

/// Fragments longer than `min_chars` that no split review has looked at,
/// oldest first: still valid, not episodes (a story is long on purpose).
pub async fn split_candidates(
    tx: &TenantTx<'_>,
    min_chars: i32,
    per_run: i64,
) -> Result<Vec<StoredFragment>> {
    let rows = tx
        .query(
            &format!(
                "SELECT {STORED_COLUMNS} FROM mneme.fragments
                  WHERE tenant_id = $1 AND split_checked_at IS NULL AND valid_to IS NULL
                    AND type <> 'episode' AND char_length(content) > $2
                  ORDER BY created_at, id LIMIT $3"
            ),
            &[&tx.tenant_id(), &min_chars, &per_run],
        )
        .await?;
    Ok(rows.iter().map(StoredFragment::from).collect())
}

/// Ends the validity of a fragment that was split into parts, if it is
/// still valid and unchanged (`content_hash`); `false` when another writer
/// got there first, and the parts must not be stored.
pub async fn retire_split_original(
    tx: &TenantTx<'_>,
    id: Uuid,
    content_hash: &str,
    now: DateTime<Utc>,
) -> Result<bool> {
    Ok(tx
        .execute(
            "UPDATE mneme.fragments SET valid_to = $4, split_checked_at = $4
              WHERE tenant_id = $1 AND id = $2 AND content_hash = $3 AND valid_to IS NULL",
            &[&tx.tenant_id(), &id, &content_hash, &now],
        )
        .await?
        == 1)
}

/// A fragment waiting for its quality review.
#[derive(Debug, Clone, PartialEq)]
pub struct QualityCandidate {
    pub id: Uuid,
    pub fragment_type: String,
    pub content: String,
}

/// Valid fragments of `types` that no quality review has looked at, oldest
/// first.
pub async fn quality_candidates(
    tx: &TenantTx<'_>,
    types: &[String],
    per_run: i64,
) -> Result<Vec<QualityCandidate>> {
    if types.is_empty() {
        return Ok(Vec::new());
    }
    let rows = tx
        .query(
            "SELECT id, type, content FROM mneme.fragments
              WHERE tenant_id = $1 AND quality_checked_at IS NULL AND valid_to IS NULL
                AND type = ANY($2)
              ORDER BY created_at, id LIMIT $3",
            &[&tx.tenant_id(), &types, &per_run],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|row| QualityCandidate {
            id: row.get(0),
            fragment_type: row.get(1),
            content: row.get(2),
        })
        .collect())
}

/// Records a quality review of `id`, once: `Some(sound)` becomes
/// `quality_verified`, and an unsound fragment that is not an anchor loses
/// half its importance; `None` (an answer without a verdict) only marks it
/// reviewed. Returns the rows changed.
pub async fn record_quality_verdict(
    tx: &TenantTx<'_>,
    id: Uuid,
    sound: Option<bool>,
    now: DateTime<Utc>,
) -> Result<u64> {
    Ok(tx
        .execute(
            "UPDATE mneme.fragments
                SET quality_checked_at = $4,
                    quality_verified = COALESCE($3, quality_verified),
                    importance = CASE WHEN $3 IS FALSE AND NOT is_anchor
                                      THEN importance * 0.5 ELSE importance END
              WHERE tenant_id = $1 AND id = $2 AND quality_checked_at IS NULL",
            &[&tx.tenant_id(), &id, &sound, &now],
        )
        .await?)
}

/// A stored run, as the history shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedRun {
    pub id: Uuid,
    pub trigger: String,
    pub dry_run: bool,
    pub status: String,
    pub stages: serde_json::Value,
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
}

/// The tenant's newest runs.
pub async fn recent_runs(tx: &TenantTx<'_>, limit: i64) -> Result<Vec<RecordedRun>> {
    let rows = tx
        .query(
            "SELECT id, trigger, dry_run, status, stages, started_at, finished_at
               FROM mneme.consolidation_runs WHERE tenant_id = $1
              ORDER BY started_at DESC LIMIT $2",
            &[&tx.tenant_id(), &limit],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| RecordedRun {
            id: r.get("id"),
            trigger: r.get("trigger"),
            dry_run: r.get("dry_run"),
            status: r.get("status"),
            stages: r.get("stages"),
            started_at: r.get("started_at"),
            finished_at: r.get("finished_at"),
        })
        .collect())
}
