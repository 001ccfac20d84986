//! The `search_events` table: one row per recall, for retrieval analytics,
//! feedback (tool feedback names the event it judges) and the adaptive
//! similarity floor.

use uuid::Uuid;

use crate::{Result, TenantTx};

/// What one recall did.
#[derive(Debug, Clone, Default)]
pub struct SearchEvent<'a> {
    pub key_id: Uuid,
    pub session_id: Option<&'a str>,
    /// `text`, `keywords`, `topic`, `mixed` or `browse`.
    pub query_type: &'a str,
    pub layers: &'a [String],
    pub vector_count: i32,
    pub fulltext_count: i32,
    pub keyword_count: i32,
    pub graph_count: i32,
    pub result_count: i32,
    pub latency_ms: f32,
    /// Names of the filters the request used.
    pub filter_keys: &'a [String],
}

/// Stores the event; returns its id.
pub async fn record(tx: &TenantTx<'_>, event: &SearchEvent<'_>) -> Result<i64> {
    Ok(tx
        .query_one(
            "INSERT INTO mneme.search_events
                 (tenant_id, key_id, session_id, query_type, layers, vector_count, fulltext_count,
                  keyword_count, graph_count, result_count, latency_ms, filter_keys)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
             RETURNING id",
            &[
                &tx.tenant_id(),
                &event.key_id,
                &event.session_id,
                &event.query_type,
                &event.layers,
                &event.vector_count,
                &event.fulltext_count,
                &event.keyword_count,
                &event.graph_count,
                &event.result_count,
                &event.latency_ms,
                &event.filter_keys,
            ],
        )
        .await?
        .get(0))
}

/// Recalls of one UTC day, for the dashboard's analytics.
#[derive(Debug, Clone, PartialEq)]
pub struct DailySearches {
    pub day: chrono::NaiveDate,
    pub searches: i64,
    pub zero_results: i64,
    pub p50_ms: f64,
    pub p95_ms: f64,
}

pub async fn daily(
    tx: &TenantTx<'_>,
    since: chrono::DateTime<chrono::Utc>,
) -> Result<Vec<DailySearches>> {
    let rows = tx
        .query(
            "SELECT (created_at AT TIME ZONE 'UTC')::date AS day, count(*) AS searches,
                    count(*) FILTER (WHERE result_count = 0) AS zero_results,
                    percentile_cont(0.5) WITHIN GROUP (ORDER BY latency_ms) AS p50,
                    percentile_cont(0.95) WITHIN GROUP (ORDER BY latency_ms) AS p95
               FROM mneme.search_events
              WHERE tenant_id = $1 AND created_at >= $2
              GROUP BY 1 ORDER BY 1",
            &[&tx.tenant_id(), &since],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| DailySearches {
            day: r.get("day"),
            searches: r.get("searches"),
            zero_results: r.get("zero_results"),
            p50_ms: r.get("p50"),
            p95_ms: r.get("p95"),
        })
        .collect())
}

/// Recalls since `since` by query type.
pub async fn by_type(
    tx: &TenantTx<'_>,
    since: chrono::DateTime<chrono::Utc>,
) -> Result<Vec<(String, i64)>> {
    let rows = tx
        .query(
            "SELECT query_type, count(*) FROM mneme.search_events
              WHERE tenant_id = $1 AND created_at >= $2
              GROUP BY 1 ORDER BY 2 DESC",
            &[&tx.tenant_id(), &since],
        )
        .await?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}
