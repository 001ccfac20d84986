//! The `upstream_servers` table: a tenant's upstream MCP servers behind
//! mneme's proxy. Headers are stored sealed (the caller seals and opens
//! them; this module never sees them in clear) and their names separately,
//! so listings can say which headers are set without revealing them.

use chrono::{DateTime, Utc};
use serde_json::Value;
use tokio_postgres::Row;
use uuid::Uuid;

use crate::{Result, TenantTx};

/// What a tenant chose for one upstream; `None` follows the operator's
/// default (`MNEME_PROXY_*`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UpstreamSettings {
    pub prefix: String,
    /// `streamable_http` or `sse`.
    pub transport: String,
    pub url: String,
    pub enabled: bool,
    pub surfacing_enabled: bool,
    pub exclude_tools: Vec<String>,
    /// `none`, `truncate` or `progressive`.
    pub compression: Option<String>,
    pub max_result_chars: Option<i32>,
    pub cache_ttl_secs: Option<i32>,
    pub connect_timeout_ms: Option<i32>,
    pub call_timeout_ms: Option<i32>,
    pub overall_timeout_ms: Option<i32>,
    pub max_retries: Option<i32>,
    pub breaker_failures: Option<i32>,
    pub breaker_reset_ms: Option<i32>,
    pub max_concurrency: Option<i32>,
    /// `{"tool": {"compression", "maxResultChars", "cacheTtlSecs", "hidden",
    /// "description"}}`.
    pub tool_overrides: Value,
}

/// The sealed header map and the names it holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SealedHeaders {
    pub sealed: Option<Vec<u8>>,
    pub names: Vec<String>,
}

/// One stored upstream.
#[derive(Debug, Clone, PartialEq)]
pub struct Upstream {
    pub id: Uuid,
    pub name: String,
    pub settings: UpstreamSettings,
    pub headers: SealedHeaders,
    pub version: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl From<Row> for Upstream {
    fn from(row: Row) -> Self {
        Self {
            id: row.get("id"),
            name: row.get("name"),
            settings: UpstreamSettings {
                prefix: row.get("prefix"),
                transport: row.get("transport"),
                url: row.get("url"),
                enabled: row.get("enabled"),
                surfacing_enabled: row.get("surfacing_enabled"),
                exclude_tools: row.get("exclude_tools"),
                compression: row.get("compression"),
                max_result_chars: row.get("max_result_chars"),
                cache_ttl_secs: row.get("cache_ttl_secs"),
                connect_timeout_ms: row.get("connect_timeout_ms"),
                call_timeout_ms: row.get("call_timeout_ms"),
                overall_timeout_ms: row.get("overall_timeout_ms"),
                max_retries: row.get("max_retries"),
                breaker_failures: row.get("breaker_failures"),
                breaker_reset_ms: row.get("breaker_reset_ms"),
                max_concurrency: row.get("max_concurrency"),
                tool_overrides: row.get("tool_overrides"),
            },
            headers: SealedHeaders {
                sealed: row.get("headers_sealed"),
                names: row.get("header_names"),
            },
            version: row.get("version"),
            created_at: row.get("created_at"),
            updated_at: row.get("updated_at"),
        }
    }
}

const COLUMNS: &str = "id, name, prefix, transport, url, headers_sealed, header_names, enabled,
        surfacing_enabled, exclude_tools, compression, max_result_chars, cache_ttl_secs,
        connect_timeout_ms, call_timeout_ms, overall_timeout_ms, max_retries, breaker_failures,
        breaker_reset_ms, max_concurrency, tool_overrides, version, created_at, updated_at";

/// How many upstreams the tenant has (for the per-tenant limit).
pub async fn count(tx: &TenantTx<'_>) -> Result<i64> {
    let row = tx
        .query_one(
            "SELECT count(*) FROM mneme.upstream_servers WHERE tenant_id = $1",
            &[&tx.tenant_id()],
        )
        .await?;
    Ok(row.get(0))
}

/// Registers an upstream; a taken name or prefix is a unique violation.
pub async fn create(
    tx: &TenantTx<'_>,
    name: &str,
    settings: &UpstreamSettings,
    headers: &SealedHeaders,
) -> Result<Upstream> {
    let s = settings;
    let row = tx
        .query_one(
            &format!(
                "INSERT INTO mneme.upstream_servers
                     (tenant_id, id, name, prefix, transport, url, headers_sealed, header_names,
                      enabled, surfacing_enabled, exclude_tools, compression, max_result_chars,
                      cache_ttl_secs, connect_timeout_ms, call_timeout_ms, overall_timeout_ms,
                      max_retries, breaker_failures, breaker_reset_ms, max_concurrency,
                      tool_overrides)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16,
                         $17, $18, $19, $20, $21, $22)
                 RETURNING {COLUMNS}"
            ),
            &[
                &tx.tenant_id(),
                &Uuid::now_v7(),
                &name,
                &s.prefix,
                &s.transport,
                &s.url,
                &headers.sealed,
                &headers.names,
                &s.enabled,
                &s.surfacing_enabled,
                &s.exclude_tools,
                &s.compression,
                &s.max_result_chars,
                &s.cache_ttl_secs,
                &s.connect_timeout_ms,
                &s.call_timeout_ms,
                &s.overall_timeout_ms,
                &s.max_retries,
                &s.breaker_failures,
                &s.breaker_reset_ms,
                &s.max_concurrency,
                &s.tool_overrides,
            ],
        )
        .await?;
    Ok(row.into())
}

/// Replaces an upstream's settings (and its headers when `headers` is
/// given) and bumps its version. `None` when there is no such upstream.
pub async fn update(
    tx: &TenantTx<'_>,
    name: &str,
    settings: &UpstreamSettings,
    headers: Option<&SealedHeaders>,
) -> Result<Option<Upstream>> {
    let s = settings;
    let replace_headers = headers.is_some();
    let headers = headers.cloned().unwrap_or_default();
    let row = tx
        .query_opt(
            &format!(
                "UPDATE mneme.upstream_servers SET
                     prefix = $3, transport = $4, url = $5,
                     headers_sealed = CASE WHEN $6 THEN $7 ELSE headers_sealed END,
                     header_names = CASE WHEN $6 THEN $8 ELSE header_names END,
                     enabled = $9, surfacing_enabled = $10, exclude_tools = $11,
                     compression = $12, max_result_chars = $13, cache_ttl_secs = $14,
                     connect_timeout_ms = $15, call_timeout_ms = $16, overall_timeout_ms = $17,
                     max_retries = $18, breaker_failures = $19, breaker_reset_ms = $20,
                     max_concurrency = $21, tool_overrides = $22,
                     version = version + 1, updated_at = now()
                  WHERE tenant_id = $1 AND name = $2
              RETURNING {COLUMNS}"
            ),
            &[
                &tx.tenant_id(),
                &name,
                &s.prefix,
                &s.transport,
                &s.url,
                &replace_headers,
                &headers.sealed,
                &headers.names,
                &s.enabled,
                &s.surfacing_enabled,
                &s.exclude_tools,
                &s.compression,
                &s.max_result_chars,
                &s.cache_ttl_secs,
                &s.connect_timeout_ms,
                &s.call_timeout_ms,
                &s.overall_timeout_ms,
                &s.max_retries,
                &s.breaker_failures,
                &s.breaker_reset_ms,
                &s.max_concurrency,
                &s.tool_overrides,
            ],
        )
        .await?;
    Ok(row.map(Upstream::from))
}

/// The tenant's upstreams, by name.
pub async fn list(tx: &TenantTx<'_>) -> Result<Vec<Upstream>> {
    let rows = tx
        .query(
            &format!(
                "SELECT {COLUMNS} FROM mneme.upstream_servers WHERE tenant_id = $1 ORDER BY name"
            ),
            &[&tx.tenant_id()],
        )
        .await?;
    Ok(rows.into_iter().map(Upstream::from).collect())
}

pub async fn find(tx: &TenantTx<'_>, name: &str) -> Result<Option<Upstream>> {
    let row = tx
        .query_opt(
            &format!(
                "SELECT {COLUMNS} FROM mneme.upstream_servers WHERE tenant_id = $1 AND name = $2"
            ),
            &[&tx.tenant_id(), &name],
        )
        .await?;
    Ok(row.map(Upstream::from))
}

/// Removes an upstream; false when there was none.
pub async fn delete(tx: &TenantTx<'_>, name: &str) -> Result<bool> {
    let deleted = tx
        .execute(
            "DELETE FROM mneme.upstream_servers WHERE tenant_id = $1 AND name = $2",
            &[&tx.tenant_id(), &name],
        )
        .await?;
    Ok(deleted > 0)
}
