//! `admin_audit`: every change made through the admin API (and the
//! tenant-changing CLI commands): who, what, when and from where.
//! Append-only; the service role may not update or delete entries.

use std::net::IpAddr;

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::{Result, TenantTx};

/// Who made a change.
#[derive(Debug, Clone)]
pub struct Actor {
    /// The person's email (or `cli` for the command line).
    pub name: String,
    /// `platform`, `user` or `cli`.
    pub kind: &'static str,
    pub ip: Option<IpAddr>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub id: i64,
    pub at: DateTime<Utc>,
    pub actor: String,
    pub actor_kind: String,
    pub action: String,
    pub target: String,
    pub detail: Value,
    pub ip: Option<IpAddr>,
}

/// Appends an entry in the transaction's tenant (commit it with the change
/// it describes, so neither exists without the other).
pub async fn record(
    tx: &TenantTx<'_>,
    actor: &Actor,
    action: &str,
    target: &str,
    detail: &Value,
) -> Result<()> {
    tx.execute(
        "INSERT INTO mneme.admin_audit (tenant_id, actor, actor_kind, action, target, detail, ip)
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
        &[
            &tx.tenant_id(),
            &actor.name,
            &actor.kind,
            &action,
            &target,
            detail,
            &actor.ip,
        ],
    )
    .await?;
    Ok(())
}

/// The newest entries, older than `before` when given.
pub async fn recent(tx: &TenantTx<'_>, before: Option<i64>, limit: i64) -> Result<Vec<Entry>> {
    let rows = tx
        .query(
            "SELECT id, at, actor, actor_kind, action, target, detail, ip
               FROM mneme.admin_audit
              WHERE tenant_id = $1 AND ($2::bigint IS NULL OR id < $2)
              ORDER BY id DESC LIMIT $3",
            &[&tx.tenant_id(), &before, &limit],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|row| Entry {
            id: row.get("id"),
            at: row.get("at"),
            actor: row.get("actor"),
            actor_kind: row.get("actor_kind"),
            action: row.get("action"),
            target: row.get("target"),
            detail: row.get("detail"),
            ip: row.get("ip"),
        })
        .collect())
}
