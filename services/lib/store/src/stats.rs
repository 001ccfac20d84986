//! Aggregates over what one principal can read: its keys' fragments, links,
//! searches and feedback. Never a global count (the reference's
//! `memory_stats` aggregated over every tenant).

use uuid::Uuid;

use crate::{Result, TenantTx};

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Stats {
    pub total: i64,
    pub anchors: i64,
    pub superseded: i64,
    pub embedded: i64,
    pub awaiting_embedding: i64,
    pub average_importance: f64,
    pub topics: i64,
    pub cases: i64,
    pub total_tokens: i64,
    pub by_type: Vec<(String, i64)>,
    pub by_tier: Vec<(String, i64)>,
    pub top_topics: Vec<(String, i64)>,
    pub links: i64,
    pub searches_7d: i64,
    pub zero_result_rate_7d: f64,
    pub average_search_ms_7d: f64,
    pub feedback_7d: i64,
    pub relevant_rate_7d: f64,
    pub sufficient_rate_7d: f64,
    pub embedding_parked: i64,
    pub contradictions_pending: i64,
    pub contradictions: i64,
    /// The tenant's last finished consolidation (tenant-wide, not per key).
    pub last_consolidated: Option<chrono::DateTime<chrono::Utc>>,
}

/// Most types and tiers listed.
const BREAKDOWN_ROWS: usize = 100;
/// Largest topics listed.
const TOP_TOPICS: usize = 10;

/// Counts over the fragments of `key_ids` visible to `agent_id`.
pub async fn collect(tx: &TenantTx<'_>, key_ids: &[Uuid], agent_id: &str) -> Result<Stats> {
    let tenant = tx.tenant_id();
    let scope = "tenant_id = $1 AND key_id = ANY($2) AND agent_id IN ($3, 'default')";
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 3] = [&tenant, &key_ids, &agent_id];
    // Averages are rounded in SQL (importance and rates to 3 places, times
    // to 0.1 ms): the average of `real` columns carries float noise clients
    // would otherwise show, such as 46.721378326416016 ms.
    let totals_sql = format!(
        "SELECT count(*) FILTER (WHERE valid_to IS NULL),
                count(*) FILTER (WHERE valid_to IS NULL AND is_anchor),
                count(*) FILTER (WHERE valid_to IS NOT NULL),
                count(*) FILTER (WHERE valid_to IS NULL AND embedding IS NOT NULL),
                count(*) FILTER (WHERE embedding IS NULL AND embedding_parked_at IS NULL),
                round(COALESCE(avg(importance) FILTER (WHERE valid_to IS NULL), 0)::numeric, 3)::float8,
                count(DISTINCT topic) FILTER (WHERE valid_to IS NULL),
                count(DISTINCT case_id) FILTER (WHERE valid_to IS NULL),
                COALESCE(sum(estimated_tokens) FILTER (WHERE valid_to IS NULL), 0)::int8,
                count(*) FILTER (WHERE embedding IS NULL AND embedding_parked_at IS NOT NULL)
           FROM mneme.fragments WHERE {scope}"
    );
    // One scan for the three breakdowns instead of one each: on a
    // 100,000-memory key each scan is about 55 ms.
    let breakdowns_sql = format!(
        "SELECT GROUPING(type, ttl_tier, topic)::int4, COALESCE(type, ttl_tier, topic), count(*)
           FROM mneme.fragments WHERE {scope} AND valid_to IS NULL
          GROUP BY GROUPING SETS ((type), (ttl_tier), (topic))"
    );
    let scoped: [&(dyn tokio_postgres::types::ToSql + Sync); 2] = [&tenant, &key_ids];
    // The statements are independent: sent together, tokio-postgres
    // pipelines them on the connection, so the whole collection costs about
    // two round trips (parse, then execute) instead of two per statement.
    let (totals, breakdowns, links, searches, feedback, contradictions, state) = tokio::try_join!(
        tx.query_one(&totals_sql, &params),
        tx.query(&breakdowns_sql, &params),
        tx.query_one(
            "SELECT count(*) FROM mneme.fragment_links l
                   JOIN mneme.fragments f ON f.tenant_id = l.tenant_id AND f.id = l.from_id
                  WHERE l.tenant_id = $1 AND f.key_id = ANY($2) AND l.deleted_at IS NULL",
            &scoped,
        ),
        tx.query_one(
            "SELECT count(*),
                        round(COALESCE(avg((result_count = 0)::int), 0), 3)::float8,
                        round(COALESCE(avg(latency_ms), 0)::numeric, 1)::float8
                   FROM mneme.search_events
                  WHERE tenant_id = $1 AND key_id = ANY($2)
                    AND created_at > now() - interval '7 days'",
            &scoped,
        ),
        tx.query_one(
            "SELECT count(*),
                        round(COALESCE(avg(relevant::int), 0), 3)::float8,
                        round(COALESCE(avg(sufficient::int), 0), 3)::float8
                   FROM mneme.tool_feedback
                  WHERE tenant_id = $1 AND key_id = ANY($2)
                    AND created_at > now() - interval '7 days'",
            &scoped,
        ),
        tx.query_one(
            "SELECT count(*) FILTER (WHERE c.status = 'pending'),
                        count(*) FILTER (WHERE c.status = 'contradiction')
                   FROM mneme.contradiction_candidates c
                   JOIN mneme.fragments f ON f.tenant_id = c.tenant_id AND f.id = c.newer_id
                  WHERE c.tenant_id = $1 AND f.key_id = ANY($2)",
            &scoped,
        ),
        tx.query_opt(
            "SELECT last_finished_at FROM mneme.consolidation_state WHERE tenant_id = $1",
            &scoped[..1],
        ),
    )?;
    let links: i64 = links.get(0);
    let breakdown = |set: i32| -> Vec<(String, i64)> {
        breakdowns
            .iter()
            .filter(|row| row.get::<_, i32>(0) == set)
            .map(|row| (row.get(1), row.get(2)))
            .collect()
    };
    // GROUPING() sets a bit for each column a row is not grouped by, the
    // first column highest.
    let mut by_type = breakdown(0b011);
    let mut by_tier = breakdown(0b101);
    let mut top_topics = breakdown(0b110);
    by_type.sort();
    by_type.truncate(BREAKDOWN_ROWS);
    by_tier.sort();
    by_tier.truncate(BREAKDOWN_ROWS);
    top_topics.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    top_topics.truncate(TOP_TOPICS);
    let last_consolidated = state.and_then(|row| row.get(0));
    Ok(Stats {
        total: totals.get(0),
        anchors: totals.get(1),
        superseded: totals.get(2),
        embedded: totals.get(3),
        awaiting_embedding: totals.get(4),
        average_importance: totals.get(5),
        topics: totals.get(6),
        cases: totals.get(7),
        total_tokens: totals.get(8),
        by_type,
        by_tier,
        top_topics,
        links,
        searches_7d: searches.get(0),
        zero_result_rate_7d: searches.get(1),
        average_search_ms_7d: searches.get(2),
        feedback_7d: feedback.get(0),
        relevant_rate_7d: feedback.get(1),
        sufficient_rate_7d: feedback.get(2),
        embedding_parked: totals.get(9),
        contradictions_pending: contradictions.get(0),
        contradictions: contradictions.get(1),
        last_consolidated,
    })
}
