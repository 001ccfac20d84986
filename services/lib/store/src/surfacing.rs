//! Active surfacing: `surfacing_events` (what was injected where),
//! `surfacing_feedback` (the agents' ratings), `surfacing_thresholds` (the
//! auto-tuned relevance threshold per server and tool, with the ratings
//! gathered since it last moved) and `surfacing_threshold_adjustments`.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::{Result, TenantTx};

/// Ratings that count against a memory (demotion, tuner).
const NEGATIVE: &str = "('not_relevant', 'already_known')";

/// One surfacing that injected memories.
#[derive(Debug, Clone)]
pub struct NewEvent<'a> {
    pub id: &'a str,
    pub key_id: Uuid,
    pub agent_id: &'a str,
    pub session_id: Option<&'a str>,
    pub server: &'a str,
    pub tool: &'a str,
    /// Text, digest or nothing, as the privacy settings decided.
    pub query: Option<&'a str>,
    pub query_stage: &'a str,
    pub memory_ids: &'a [Uuid],
    pub relevances: &'a [f32],
    pub min_score: f32,
    pub trace_id: Option<&'a str>,
    /// `proxy`, `hook` or `api`.
    pub source: &'a str,
}

pub async fn record_event(tx: &TenantTx<'_>, event: &NewEvent<'_>) -> Result<()> {
    tx.execute(
        "INSERT INTO mneme.surfacing_events
             (tenant_id, id, key_id, agent_id, session_id, server, tool, query, query_stage,
              memory_ids, relevances, min_score, trace_id, source)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)",
        &[
            &tx.tenant_id(),
            &event.id,
            &event.key_id,
            &event.agent_id,
            &event.session_id,
            &event.server,
            &event.tool,
            &event.query,
            &event.query_stage,
            &event.memory_ids,
            &event.relevances,
            &event.min_score,
            &event.trace_id,
            &event.source,
        ],
    )
    .await?;
    Ok(())
}

/// A recorded event, as feedback needs it.
#[derive(Debug, Clone)]
pub struct Event {
    pub id: String,
    pub server: String,
    pub tool: String,
    pub memory_ids: Vec<Uuid>,
    pub min_score: f32,
    pub created_at: DateTime<Utc>,
}

/// The event `id` when `key_id` recorded it, locked until the transaction
/// ends so that ratings of one event are recorded one call at a time
/// ([`record_feedback`] reads the ratings it replaces). Another key's event
/// reads as absent, so ids cannot be probed across keys.
pub async fn event(tx: &TenantTx<'_>, key_id: Uuid, id: &str) -> Result<Option<Event>> {
    let row = tx
        .query_opt(
            "SELECT id, server, tool, memory_ids, min_score, created_at
               FROM mneme.surfacing_events
              WHERE tenant_id = $1 AND key_id = $2 AND id = $3
                FOR UPDATE",
            &[&tx.tenant_id(), &key_id, &id],
        )
        .await?;
    Ok(row.map(|row| Event {
        id: row.get("id"),
        server: row.get("server"),
        tool: row.get("tool"),
        memory_ids: row.get("memory_ids"),
        min_score: row.get("min_score"),
        created_at: row.get("created_at"),
    }))
}

/// What [`record_feedback`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Recorded {
    /// Ratings stored: new, or replacing another rating of the same thing.
    pub stored: usize,
    /// Ratings equal to the one already stored (a retry): nothing changed.
    pub unchanged: usize,
    /// What the tool's pending tuner counts ([`add_pending`]) gain: each
    /// stored rating, less each rating it replaced that no tuner step has
    /// counted yet. Fields may be negative.
    pub pending: Counts,
}

/// Stores ratings of `event` (locked by [`event`]): `(None, rating)` rates
/// the whole event, `(Some(memory), rating)` one memory of it. Each of them
/// holds one rating: rating it again replaces the rating, or changes
/// nothing when it is the same, so a retried call counts once in the
/// statistics, in demotion and in the tuner.
pub async fn record_feedback(
    tx: &TenantTx<'_>,
    event: &Event,
    key_id: Uuid,
    ratings: &[(Option<Uuid>, &str)],
) -> Result<Recorded> {
    // A rating is still pending for the tuner when it was made after the
    // tool's last step: a step consumes the counts gathered before it, and
    // now() is the start of a transaction. A rating whose transaction began
    // before a step but added its count after it reads as consumed, so
    // replacing it leaves one count too many, never one too few.
    let earlier: HashMap<Option<Uuid>, (String, bool)> = tx
        .query(
            "SELECT f.memory_id, f.rating,
                    f.created_at > COALESCE(
                        (SELECT max(a.created_at) FROM mneme.surfacing_threshold_adjustments a
                          WHERE a.tenant_id = $1 AND a.server = $3 AND a.tool = $4),
                        '-infinity') AS pending
               FROM mneme.surfacing_feedback f
              WHERE f.tenant_id = $1 AND f.surfacing_id = $2",
            &[&tx.tenant_id(), &event.id, &event.server, &event.tool],
        )
        .await?
        .iter()
        .map(|row| {
            (
                row.get("memory_id"),
                (row.get("rating"), row.get("pending")),
            )
        })
        .collect();
    let mut recorded = Recorded::default();
    let mut memory_ids: Vec<Option<Uuid>> = Vec::with_capacity(ratings.len());
    let mut values: Vec<&str> = Vec::with_capacity(ratings.len());
    for &(memory_id, rating) in ratings {
        match earlier.get(&memory_id) {
            Some((before, _)) if before == rating => {
                recorded.unchanged += 1;
                continue;
            }
            Some((before, true)) => recorded.pending.add(before, -1),
            _ => {}
        }
        recorded.pending.add(rating, 1);
        recorded.stored += 1;
        memory_ids.push(memory_id);
        values.push(rating);
    }
    if recorded.stored > 0 {
        tx.execute(
            "INSERT INTO mneme.surfacing_feedback (tenant_id, surfacing_id, key_id, memory_id, rating)
             SELECT $1, $2, $3, m, r FROM unnest($4::uuid[], $5::text[]) AS t(m, r)
             ON CONFLICT (tenant_id, surfacing_id, memory_id) DO UPDATE
                SET rating = EXCLUDED.rating, key_id = EXCLUDED.key_id, created_at = now()",
            &[
                &tx.tenant_id(),
                &event.id,
                &key_id,
                &memory_ids,
                &values,
            ],
        )
        .await?;
    }
    Ok(recorded)
}

/// Memories `key_id` rated negative in at least `threshold` distinct
/// events; a negative rating of a whole event counts for every memory it
/// delivered.
pub async fn demoted(tx: &TenantTx<'_>, key_id: Uuid, threshold: i64) -> Result<Vec<Uuid>> {
    let rows = tx
        .query(
            &format!(
                "SELECT m.memory_id
                   FROM mneme.surfacing_feedback f
                   JOIN mneme.surfacing_events e
                     ON e.tenant_id = f.tenant_id AND e.id = f.surfacing_id
                  CROSS JOIN LATERAL unnest(
                        CASE WHEN f.memory_id IS NULL THEN e.memory_ids
                             ELSE ARRAY[f.memory_id] END) AS m(memory_id)
                  WHERE f.tenant_id = $1 AND f.key_id = $2 AND f.rating IN {NEGATIVE}
                  GROUP BY m.memory_id
                 HAVING count(DISTINCT f.surfacing_id) >= $3"
            ),
            &[&tx.tenant_id(), &key_id, &threshold],
        )
        .await?;
    Ok(rows.iter().map(|row| row.get(0)).collect())
}

/// Ratings counted by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub helpful: i32,
    pub partially_helpful: i32,
    pub not_relevant: i32,
    pub already_known: i32,
}

impl Counts {
    /// Adds `n` ratings by name; unknown names are ignored.
    pub fn add(&mut self, rating: &str, n: i32) {
        match rating {
            "helpful" => self.helpful += n,
            "partially_helpful" => self.partially_helpful += n,
            "not_relevant" => self.not_relevant += n,
            "already_known" => self.already_known += n,
            _ => {}
        }
    }

    pub fn total(&self) -> i32 {
        self.helpful + self.partially_helpful + self.not_relevant + self.already_known
    }
}

/// The tuned threshold of one (server, tool) and the ratings since it last
/// moved.
#[derive(Debug, Clone, PartialEq)]
pub struct Threshold {
    pub min_score: f32,
    pub pending: Counts,
    /// `raise` or `lower`: the direction of the last move.
    pub last_direction: Option<String>,
    pub adjustments: i32,
}

fn threshold_from(row: &tokio_postgres::Row) -> Threshold {
    Threshold {
        min_score: row.get("min_score"),
        pending: Counts {
            helpful: row.get("helpful"),
            partially_helpful: row.get("partially_helpful"),
            not_relevant: row.get("not_relevant"),
            already_known: row.get("already_known"),
        },
        last_direction: row.get("last_direction"),
        adjustments: row.get("adjustments"),
    }
}

/// The tuned threshold, if the tuner has ever seen feedback for the tool.
pub async fn threshold(tx: &TenantTx<'_>, server: &str, tool: &str) -> Result<Option<Threshold>> {
    let row = tx
        .query_opt(
            "SELECT * FROM mneme.surfacing_thresholds
              WHERE tenant_id = $1 AND server = $2 AND tool = $3",
            &[&tx.tenant_id(), &server, &tool],
        )
        .await?;
    Ok(row.as_ref().map(threshold_from))
}

/// Adds ratings to the pending counts (creating the row at `initial`; a
/// count never falls below zero) and returns the row, locked until the
/// transaction ends so concurrent feedback cannot apply the same step
/// twice.
pub async fn add_pending(
    tx: &TenantTx<'_>,
    server: &str,
    tool: &str,
    initial: f32,
    counts: Counts,
) -> Result<Threshold> {
    let row = tx
        .query_one(
            "INSERT INTO mneme.surfacing_thresholds
                 (tenant_id, server, tool, min_score, helpful, partially_helpful, not_relevant,
                  already_known)
             VALUES ($1, $2, $3, $4, GREATEST($5, 0), GREATEST($6, 0), GREATEST($7, 0),
                     GREATEST($8, 0))
             ON CONFLICT (tenant_id, server, tool) DO UPDATE SET
                 helpful = GREATEST(surfacing_thresholds.helpful + $5, 0),
                 partially_helpful = GREATEST(surfacing_thresholds.partially_helpful + $6, 0),
                 not_relevant = GREATEST(surfacing_thresholds.not_relevant + $7, 0),
                 already_known = GREATEST(surfacing_thresholds.already_known + $8, 0),
                 updated_at = now()
             RETURNING *",
            &[
                &tx.tenant_id(),
                &server,
                &tool,
                &initial,
                &counts.helpful,
                &counts.partially_helpful,
                &counts.not_relevant,
                &counts.already_known,
            ],
        )
        .await?;
    Ok(threshold_from(&row))
}

/// One move of a tuned threshold.
#[derive(Debug, Clone, Copy)]
pub struct Adjustment<'a> {
    pub from: f32,
    pub to: f32,
    /// `raise` or `lower`.
    pub direction: &'a str,
    pub negative_share: f32,
    pub helpful_share: f32,
    pub samples: i32,
}

/// Moves the threshold, clears the pending counts and logs the move.
pub async fn apply_adjustment(
    tx: &TenantTx<'_>,
    server: &str,
    tool: &str,
    adjustment: &Adjustment<'_>,
) -> Result<()> {
    tx.execute(
        "UPDATE mneme.surfacing_thresholds
            SET min_score = $4, helpful = 0, partially_helpful = 0, not_relevant = 0,
                already_known = 0, last_direction = $5, adjustments = adjustments + 1,
                updated_at = now()
          WHERE tenant_id = $1 AND server = $2 AND tool = $3",
        &[
            &tx.tenant_id(),
            &server,
            &tool,
            &adjustment.to,
            &adjustment.direction,
        ],
    )
    .await?;
    tx.execute(
        "INSERT INTO mneme.surfacing_threshold_adjustments
             (tenant_id, server, tool, from_score, to_score, negative_share, helpful_share, samples)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        &[
            &tx.tenant_id(),
            &server,
            &tool,
            &adjustment.from,
            &adjustment.to,
            &adjustment.negative_share,
            &adjustment.helpful_share,
            &adjustment.samples,
        ],
    )
    .await?;
    Ok(())
}

/// Per (server, tool) figures of the stats tool.
#[derive(Debug, Clone, Default)]
pub struct ToolStats {
    pub server: String,
    pub tool: String,
    pub events: i64,
    pub avg_memories: f64,
    pub ratings: Counts,
    pub min_score: Option<f32>,
    pub adjustments: i32,
}

/// One recent event of the stats tool.
#[derive(Debug, Clone)]
pub struct RecentEvent {
    pub id: String,
    pub server: String,
    pub tool: String,
    /// `None` once the retention period blanked it.
    pub query: Option<String>,
    pub memories: usize,
    pub max_relevance: Option<f32>,
    pub created_at: DateTime<Utc>,
}

/// What the stats tool reports.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    pub events: i64,
    pub ratings: Counts,
    pub tools: Vec<ToolStats>,
    pub recent: Vec<RecentEvent>,
}

/// Which events the stats cover.
#[derive(Debug, Clone, Copy)]
pub struct StatsFilter<'a> {
    /// `None`: every key of the tenant (admins).
    pub key_id: Option<Uuid>,
    /// Matches `tool` or `server__tool`.
    pub tool: Option<&'a str>,
    pub since: Option<DateTime<Utc>>,
    pub recent: i64,
}

pub async fn stats(tx: &TenantTx<'_>, filter: StatsFilter<'_>) -> Result<Stats> {
    const EVENTS: &str = "FROM mneme.surfacing_events e
        WHERE e.tenant_id = $1 AND ($2::uuid IS NULL OR e.key_id = $2)
          AND ($3::text IS NULL OR e.tool = $3 OR e.server || '__' || e.tool = $3)
          AND ($4::timestamptz IS NULL OR e.created_at >= $4)";
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 4] =
        [&tx.tenant_id(), &filter.key_id, &filter.tool, &filter.since];
    let tool_rows = tx
        .query(
            "SELECT e.server, e.tool, count(*) AS events,
                    avg(cardinality(e.memory_ids))::float8 AS avg_memories,
                    t.min_score, coalesce(t.adjustments, 0) AS adjustments
               FROM mneme.surfacing_events e
               LEFT JOIN mneme.surfacing_thresholds t
                 ON t.tenant_id = e.tenant_id AND t.server = e.server AND t.tool = e.tool
              WHERE e.tenant_id = $1 AND ($2::uuid IS NULL OR e.key_id = $2)
                AND ($3::text IS NULL OR e.tool = $3 OR e.server || '__' || e.tool = $3)
                AND ($4::timestamptz IS NULL OR e.created_at >= $4)
              GROUP BY e.server, e.tool, t.min_score, t.adjustments
              ORDER BY events DESC, e.server, e.tool",
            &params,
        )
        .await?;
    let rating_rows = tx
        .query(
            &format!(
                "SELECT e.server, e.tool, f.rating, count(*) AS n
                   FROM mneme.surfacing_feedback f
                   JOIN mneme.surfacing_events e
                     ON e.tenant_id = f.tenant_id AND e.id = f.surfacing_id
                  WHERE f.tenant_id = $1 AND e.id IN (SELECT e.id {EVENTS})
                  GROUP BY e.server, e.tool, f.rating"
            ),
            &params,
        )
        .await?;
    let recent_rows = tx
        .query(
            &format!(
                "SELECT e.id, e.server, e.tool, e.query, cardinality(e.memory_ids) AS memories,
                        (SELECT max(r) FROM unnest(e.relevances) AS r) AS max_relevance,
                        e.created_at
                   {EVENTS}
                  ORDER BY e.created_at DESC
                  LIMIT $5"
            ),
            &[
                &tx.tenant_id(),
                &filter.key_id,
                &filter.tool,
                &filter.since,
                &filter.recent,
            ],
        )
        .await?;

    let mut stats = Stats::default();
    for row in &tool_rows {
        stats.events += row.get::<_, i64>("events");
        stats.tools.push(ToolStats {
            server: row.get("server"),
            tool: row.get("tool"),
            events: row.get("events"),
            avg_memories: row.get::<_, Option<f64>>("avg_memories").unwrap_or(0.0),
            ratings: Counts::default(),
            min_score: row.get("min_score"),
            adjustments: row.get("adjustments"),
        });
    }
    for row in &rating_rows {
        let (server, tool): (String, String) = (row.get("server"), row.get("tool"));
        let rating: String = row.get("rating");
        let n = i32::try_from(row.get::<_, i64>("n")).unwrap_or(i32::MAX);
        stats.ratings.add(&rating, n);
        if let Some(entry) = stats
            .tools
            .iter_mut()
            .find(|t| t.server == server && t.tool == tool)
        {
            entry.ratings.add(&rating, n);
        }
    }
    stats.recent = recent_rows
        .iter()
        .map(|row| RecentEvent {
            id: row.get("id"),
            server: row.get("server"),
            tool: row.get("tool"),
            query: row.get("query"),
            memories: usize::try_from(row.get::<_, i32>("memories")).unwrap_or(0),
            max_relevance: row.get("max_relevance"),
            created_at: row.get("created_at"),
        })
        .collect();
    Ok(stats)
}

/// Retention: blanks query texts older than `query_days` and deletes events
/// (with their feedback) older than `stats_days`. Returns (blanked, deleted).
pub async fn apply_retention(
    tx: &TenantTx<'_>,
    query_days: i32,
    stats_days: i32,
) -> Result<(u64, u64)> {
    let blanked = tx
        .execute(
            "UPDATE mneme.surfacing_events SET query = NULL
              WHERE tenant_id = $1 AND query IS NOT NULL
                AND created_at < now() - make_interval(days => $2)",
            &[&tx.tenant_id(), &query_days],
        )
        .await?;
    let deleted = tx
        .execute(
            "DELETE FROM mneme.surfacing_events
              WHERE tenant_id = $1 AND created_at < now() - make_interval(days => $2)",
            &[&tx.tenant_id(), &stats_days],
        )
        .await?;
    Ok((blanked, deleted))
}
