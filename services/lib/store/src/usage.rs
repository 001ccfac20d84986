//! `api_key_usage`: tool calls per key and UTC day, flushed by the gateway
//! pods from their in-process counters (Redis holds the live counts that
//! enforce `daily_call_limit`; this table is the durable record).

use chrono::NaiveDate;
use uuid::Uuid;

use crate::{Result, TenantTx};

/// Adds `calls` to the key's count for `day`.
pub async fn add_tool_calls(
    tx: &TenantTx<'_>,
    key_id: Uuid,
    day: NaiveDate,
    calls: i64,
) -> Result<()> {
    tx.execute(
        "INSERT INTO mneme.api_key_usage (tenant_id, key_id, day, tool_calls)
         VALUES ($1, $2, $3, $4)
         ON CONFLICT (tenant_id, key_id, day)
         DO UPDATE SET tool_calls = mneme.api_key_usage.tool_calls + EXCLUDED.tool_calls",
        &[&tx.tenant_id(), &key_id, &day, &calls],
    )
    .await?;
    Ok(())
}

/// The key's recorded tool calls on `day` (0 when none were flushed).
pub async fn tool_calls(tx: &TenantTx<'_>, key_id: Uuid, day: NaiveDate) -> Result<i64> {
    let row = tx
        .query_opt(
            "SELECT tool_calls FROM mneme.api_key_usage
              WHERE tenant_id = $1 AND key_id = $2 AND day = $3",
            &[&tx.tenant_id(), &key_id, &day],
        )
        .await?;
    Ok(row.map_or(0, |row| row.get(0)))
}

/// Tool calls of the whole tenant per day since `since` (days without calls
/// are absent).
pub async fn daily_totals(tx: &TenantTx<'_>, since: NaiveDate) -> Result<Vec<(NaiveDate, i64)>> {
    let rows = tx
        .query(
            "SELECT day, sum(tool_calls)::bigint FROM mneme.api_key_usage
              WHERE tenant_id = $1 AND day >= $2 GROUP BY day ORDER BY day",
            &[&tx.tenant_id(), &since],
        )
        .await?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}

/// Each key's recorded tool calls on `day`.
pub async fn per_key(tx: &TenantTx<'_>, day: NaiveDate) -> Result<Vec<(Uuid, i64)>> {
    let rows = tx
        .query(
            "SELECT key_id, tool_calls FROM mneme.api_key_usage WHERE tenant_id = $1 AND day = $2",
            &[&tx.tenant_id(), &day],
        )
        .await?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}

/// One key's tool calls per day since `since`.
pub async fn key_daily(
    tx: &TenantTx<'_>,
    key_id: Uuid,
    since: NaiveDate,
) -> Result<Vec<(NaiveDate, i64)>> {
    let rows = tx
        .query(
            "SELECT day, tool_calls FROM mneme.api_key_usage
              WHERE tenant_id = $1 AND key_id = $2 AND day >= $3 ORDER BY day",
            &[&tx.tenant_id(), &key_id, &since],
        )
        .await?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}
