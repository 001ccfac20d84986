//! The `tool_feedback` and `task_feedback` tables, and what feedback
//! teaches: fragment activation and link weights (audited in
//! `link_reconsolidations`).

use std::time::Duration;

use uuid::Uuid;

use crate::{Result, TenantTx};

/// One judgement of a tool's result.
#[derive(Debug, Clone, Default)]
pub struct ToolFeedback<'a> {
    pub key_id: Uuid,
    pub session_id: Option<&'a str>,
    pub tool_name: &'a str,
    pub relevant: bool,
    pub sufficient: bool,
    pub suggestion: Option<&'a str>,
    pub context: Option<&'a str>,
    /// `sampled` or `voluntary`.
    pub trigger_type: &'a str,
    pub search_event_id: Option<i64>,
    pub fragment_ids: &'a [Uuid],
}

/// Stores the judgement; returns its id.
pub async fn record_tool(tx: &TenantTx<'_>, feedback: &ToolFeedback<'_>) -> Result<i64> {
    Ok(tx
        .query_one(
            "INSERT INTO mneme.tool_feedback
                 (tenant_id, key_id, session_id, tool_name, relevant, sufficient, suggestion,
                  context, trigger_type, search_event_id, fragment_ids)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
             RETURNING id",
            &[
                &tx.tenant_id(),
                &feedback.key_id,
                &feedback.session_id,
                &feedback.tool_name,
                &feedback.relevant,
                &feedback.sufficient,
                &feedback.suggestion,
                &feedback.context,
                &feedback.trigger_type,
                &feedback.search_event_id,
                &feedback.fragment_ids,
            ],
        )
        .await?
        .get(0))
}

/// How a whole task went, as reported by `reflect`.
#[derive(Debug, Clone, Default)]
pub struct TaskFeedback<'a> {
    pub key_id: Uuid,
    pub session_id: Option<&'a str>,
    pub overall_success: bool,
    pub tool_highlights: &'a [String],
    pub tool_pain_points: &'a [String],
}

pub async fn record_task(tx: &TenantTx<'_>, feedback: &TaskFeedback<'_>) -> Result<i64> {
    Ok(tx
        .query_one(
            "INSERT INTO mneme.task_feedback
                 (tenant_id, key_id, session_id, overall_success, tool_highlights, tool_pain_points)
             VALUES ($1, $2, $3, $4, $5, $6)
             RETURNING id",
            &[
                &tx.tenant_id(),
                &feedback.key_id,
                &feedback.session_id,
                &feedback.overall_success,
                &feedback.tool_highlights,
                &feedback.tool_pain_points,
            ],
        )
        .await?
        .get(0))
}

/// Moves the activation of the fragments among `ids` readable with
/// `key_ids` by `delta`, clamped to 0–1. Returns the ids adjusted.
pub async fn adjust_activation(
    tx: &TenantTx<'_>,
    key_ids: &[Uuid],
    ids: &[Uuid],
    delta: f32,
) -> Result<Vec<Uuid>> {
    let rows = tx
        .query(
            "UPDATE mneme.fragments
                SET ema_activation = LEAST(1.0, GREATEST(0.0, ema_activation + $4))
              WHERE tenant_id = $1 AND id = ANY($2) AND key_id = ANY($3)
             RETURNING id",
            &[&tx.tenant_id(), &ids, &key_ids, &delta],
        )
        .await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// A change made to the links among fragments (link reconsolidation).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkLesson {
    /// `reinforce`, `decay`, `quarantine`, `restore` or `soft_delete`, as
    /// audited.
    pub action: &'static str,
    pub weight_delta: f32,
    pub confidence_delta: f32,
}

impl LinkLesson {
    /// Useful together (positive feedback). Skips quarantined links: they
    /// need a [`Self::RESTORE`] first.
    pub const REINFORCE: Self = Self {
        action: "reinforce",
        weight_delta: 0.2,
        confidence_delta: 0.05,
    };
    /// Not useful together (negative feedback); rate-limited.
    pub const DECAY: Self = Self {
        action: "decay",
        weight_delta: -0.15,
        confidence_delta: -0.1,
    };
    /// Suspect (the ends contradict each other): weakened and hidden from
    /// the graph layer; rate-limited like decay.
    pub const QUARANTINE: Self = Self {
        action: "quarantine",
        weight_delta: -0.3,
        confidence_delta: -0.1,
    };
    /// A quarantined link proved useful after all.
    pub const RESTORE: Self = Self {
        action: "restore",
        weight_delta: 0.3,
        confidence_delta: 0.05,
    };
    /// Removes a link whose weight has reached zero (kept for the audit
    /// trail, invisible everywhere).
    pub const SOFT_DELETE: Self = Self {
        action: "soft_delete",
        weight_delta: 0.0,
        confidence_delta: 0.0,
    };
}

/// Applies `lesson` to every active link whose both ends are among `ids`
/// and whose relation is one of `relations` (all when empty): weight
/// clamped to 0–2, confidence to 0–1, quarantine state set by `quarantine`
/// and `restore`, every change audited. A link decayed or quarantined within
/// `decay_interval` is not decayed or quarantined again; `reinforce` skips
/// quarantined links and `restore` touches only them. Links the lesson
/// leaves at weight 0 are then soft-deleted (audited too). Returns the
/// number of links changed.
pub async fn reconsolidate_links(
    tx: &TenantTx<'_>,
    key_id: Uuid,
    ids: &[Uuid],
    relations: &[&str],
    lesson: LinkLesson,
    reason: &str,
    decay_interval: Duration,
) -> Result<u64> {
    if ids.len() < 2 {
        return Ok(0);
    }
    let changed = tx
        .execute(
            "WITH targets AS (
                 SELECT l.from_id, l.to_id, l.relation_type, l.weight, l.confidence
                   FROM mneme.fragment_links l
                  WHERE l.tenant_id = $1 AND l.from_id = ANY($2) AND l.to_id = ANY($2)
                    AND l.deleted_at IS NULL
                    AND (cardinality($9::text[]) = 0 OR l.relation_type = ANY($9))
                    AND CASE $3
                        WHEN 'reinforce' THEN l.quarantine_state IS DISTINCT FROM 'soft'
                        WHEN 'restore' THEN l.quarantine_state = 'soft'
                        WHEN 'soft_delete' THEN true
                        ELSE ($3 <> 'quarantine' OR l.quarantine_state IS DISTINCT FROM 'soft')
                             AND NOT EXISTS (
                                 SELECT FROM mneme.link_reconsolidations r
                                  WHERE r.tenant_id = $1 AND r.from_id = l.from_id
                                    AND r.to_id = l.to_id AND r.relation_type = l.relation_type
                                    AND r.action IN ('decay', 'quarantine')
                                    AND r.created_at > now() - make_interval(secs => $6))
                        END
                    FOR UPDATE OF l),
             changed AS (
                 UPDATE mneme.fragment_links l
                    SET weight = LEAST(2.0, GREATEST(0.0, t.weight + $4)),
                        confidence = LEAST(1.0, GREATEST(0.0, t.confidence + $5)),
                        quarantine_state = CASE $3 WHEN 'quarantine' THEN 'soft'
                                                   WHEN 'restore' THEN 'released'
                                                   ELSE l.quarantine_state END,
                        deleted_at = CASE WHEN $3 = 'soft_delete' THEN now() ELSE l.deleted_at END
                   FROM targets t
                  WHERE l.tenant_id = $1 AND l.from_id = t.from_id AND l.to_id = t.to_id
                    AND l.relation_type = t.relation_type
                 RETURNING l.from_id, l.to_id, l.relation_type, t.weight AS old_weight,
                           l.weight AS new_weight, t.confidence AS old_confidence,
                           l.confidence AS new_confidence)
             INSERT INTO mneme.link_reconsolidations
                 (tenant_id, from_id, to_id, relation_type, action, old_weight, new_weight,
                  old_confidence, new_confidence, reason, key_id)
             SELECT $1, from_id, to_id, relation_type, $3, old_weight, new_weight,
                    old_confidence, new_confidence, $7, $8
               FROM changed",
            &[
                &tx.tenant_id(),
                &ids,
                &lesson.action,
                &lesson.weight_delta,
                &lesson.confidence_delta,
                &decay_interval.as_secs_f64(),
                &reason,
                &key_id,
                &relations,
            ],
        )
        .await?;
    if lesson.weight_delta < 0.0 && changed > 0 {
        // Nothing weighs a zero-weight link back up; remove it from view.
        let exhausted: Vec<Uuid> = ids.to_vec();
        tx.execute(
            "WITH gone AS (
                 UPDATE mneme.fragment_links l
                    SET deleted_at = now()
                  WHERE l.tenant_id = $1 AND l.from_id = ANY($2) AND l.to_id = ANY($2)
                    AND l.deleted_at IS NULL AND l.weight <= 0
                 RETURNING l.from_id, l.to_id, l.relation_type, l.weight, l.confidence)
             INSERT INTO mneme.link_reconsolidations
                 (tenant_id, from_id, to_id, relation_type, action, old_weight, new_weight,
                  old_confidence, new_confidence, reason, key_id)
             SELECT $1, from_id, to_id, relation_type, 'soft_delete', weight, weight,
                    confidence, confidence, $3, $4
               FROM gone",
            &[&tx.tenant_id(), &exhausted, &reason, &key_id],
        )
        .await?;
    }
    Ok(changed)
}
