//! The `session_reflections` table: the durable claim behind automatic
//! reflection of idle and closed MCP sessions, and what came of each.
//!
//! A session's activity lives in Redis; when it has been idle long enough
//! (or was closed) any remember pod may pick it up. [`claim`] makes exactly
//! one pod reflect each stretch of activity (`activity_until`): the first
//! insert wins, and a claim whose pod died is taken over once its lease is
//! older than `lease`. The outcome stays as the session's reflection
//! history.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::{Result, TenantTx};

/// What came of a claimed reflection.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Reflected {
        calls: i32,
        fragments: i32,
        episode_id: Option<Uuid>,
    },
    /// Asked, but nothing to keep.
    Skipped { calls: i32, reason: String },
    /// This try failed; another may follow (see [`claim`]).
    Failed { calls: i32, reason: String },
    /// Not asked (the model is paused, the tenant's budget spent): the
    /// claim goes back without using up an attempt.
    Paused { calls: i32, reason: String },
}

/// One row of a tenant's reflection history.
#[derive(Debug, Clone, PartialEq)]
pub struct Reflection {
    pub session_id: String,
    pub key_id: Uuid,
    pub activity_until_ms: i64,
    pub state: String,
    pub reason: Option<String>,
    pub calls: i32,
    pub fragments: i32,
    pub episode_id: Option<Uuid>,
    pub attempts: i32,
    pub claimed_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
}

/// Claims the reflection of `session_id`'s activity up to
/// `activity_until_ms` for the caller. `Some(attempt)` (1 for the first)
/// when the caller now holds it: nobody had claimed it, or the holder's
/// claim is older than `lease` and unfinished, or an earlier try failed or
/// was paused; at most `max_attempts` failed tries in all.
pub async fn claim(
    tx: &TenantTx<'_>,
    session_id: &str,
    activity_until_ms: i64,
    key_id: Uuid,
    lease: std::time::Duration,
    max_attempts: i32,
) -> Result<Option<i32>> {
    let lease_secs = lease.as_secs_f64();
    let row = tx
        .query_opt(
            "INSERT INTO mneme.session_reflections (tenant_id, session_id, activity_until, key_id, state)
             VALUES ($1, $2, $3, $4, 'claimed')
             ON CONFLICT (tenant_id, session_id, activity_until) DO UPDATE
                SET state = 'claimed', reason = NULL, claimed_at = now(), finished_at = NULL,
                    attempts = mneme.session_reflections.attempts + 1
              WHERE mneme.session_reflections.attempts < $6
                AND ((mneme.session_reflections.state = 'claimed'
                      AND mneme.session_reflections.claimed_at < now() - make_interval(secs => $5))
                     OR mneme.session_reflections.state IN ('failed', 'paused'))
             RETURNING attempts",
            &[
                &tx.tenant_id(),
                &session_id,
                &activity_until_ms,
                &key_id,
                &lease_secs,
                &max_attempts,
            ],
        )
        .await?;
    Ok(row.map(|row| row.get(0)))
}

/// Records what came of a claim the caller holds.
pub async fn finish(
    tx: &TenantTx<'_>,
    session_id: &str,
    activity_until_ms: i64,
    outcome: &Outcome,
) -> Result<()> {
    let (state, reason, calls, fragments, episode_id) = match outcome {
        Outcome::Reflected {
            calls,
            fragments,
            episode_id,
        } => ("reflected", None, *calls, *fragments, *episode_id),
        Outcome::Skipped { calls, reason } => ("skipped", Some(reason), *calls, 0, None),
        Outcome::Failed { calls, reason } => ("failed", Some(reason), *calls, 0, None),
        Outcome::Paused { calls, reason } => ("paused", Some(reason), *calls, 0, None),
    };
    let used = i32::from(state != "paused");
    tx.execute(
        "UPDATE mneme.session_reflections
            SET state = $4, reason = $5, calls = $6, fragments = $7, episode_id = $8,
                attempts = attempts - 1 + $9, finished_at = now()
          WHERE tenant_id = $1 AND session_id = $2 AND activity_until = $3",
        &[
            &tx.tenant_id(),
            &session_id,
            &activity_until_ms,
            &state,
            &reason,
            &calls,
            &fragments,
            &episode_id,
            &used,
        ],
    )
    .await?;
    Ok(())
}

/// Whether the stretch up to `activity_until_ms` is settled (reflected,
/// skipped, or failed for the last time): its activity may be dropped.
pub async fn settled(
    tx: &TenantTx<'_>,
    session_id: &str,
    activity_until_ms: i64,
    max_attempts: i32,
) -> Result<bool> {
    let row = tx
        .query_opt(
            "SELECT 1 FROM mneme.session_reflections
              WHERE tenant_id = $1 AND session_id = $2 AND activity_until = $3
                AND (state IN ('reflected', 'skipped')
                     OR (state = 'failed' AND attempts >= $4))",
            &[
                &tx.tenant_id(),
                &session_id,
                &activity_until_ms,
                &max_attempts,
            ],
        )
        .await?;
    Ok(row.is_some())
}

/// The tenant's newest reflections.
pub async fn recent(tx: &TenantTx<'_>, limit: i64) -> Result<Vec<Reflection>> {
    let rows = tx
        .query(
            "SELECT session_id, key_id, activity_until, state, reason, calls, fragments,
                    episode_id, attempts, claimed_at, finished_at
               FROM mneme.session_reflections
              WHERE tenant_id = $1
              ORDER BY claimed_at DESC, session_id
              LIMIT $2",
            &[&tx.tenant_id(), &limit],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|row| Reflection {
            session_id: row.get(0),
            key_id: row.get(1),
            activity_until_ms: row.get(2),
            state: row.get(3),
            reason: row.get(4),
            calls: row.get(5),
            fragments: row.get(6),
            episode_id: row.get(7),
            attempts: row.get(8),
            claimed_at: row.get(9),
            finished_at: row.get(10),
        })
        .collect())
}
