//! The `fragment_versions` table: a fragment's state before each amendment.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::fragments::StoredFragment;
use crate::{Result, TenantTx};

#[derive(Debug, Clone, PartialEq)]
pub struct Version {
    pub content: String,
    pub topic: String,
    pub keywords: Vec<String>,
    pub fragment_type: String,
    pub importance: f32,
    pub is_anchor: bool,
    pub amended_by: Uuid,
    pub amended_at: DateTime<Utc>,
}

/// Archives `before` as amended by `key_id`; returns the number of versions.
pub async fn record(tx: &TenantTx<'_>, before: &StoredFragment, key_id: Uuid) -> Result<u32> {
    tx.execute(
        "INSERT INTO mneme.fragment_versions
             (tenant_id, fragment_id, content, topic, keywords, type, importance, is_anchor, amended_by)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        &[
            &tx.tenant_id(),
            &before.id,
            &before.content,
            &before.topic,
            &before.keywords,
            &before.fragment_type,
            &before.importance,
            &before.is_anchor,
            &key_id,
        ],
    )
    .await?;
    count(tx, before.id).await
}

pub async fn count(tx: &TenantTx<'_>, fragment_id: Uuid) -> Result<u32> {
    let count: i64 = tx
        .query_one(
            "SELECT count(*) FROM mneme.fragment_versions WHERE tenant_id = $1 AND fragment_id = $2",
            &[&tx.tenant_id(), &fragment_id],
        )
        .await?
        .get(0);
    Ok(u32::try_from(count).unwrap_or(u32::MAX))
}

/// Earlier versions of a fragment, oldest first.
pub async fn list(tx: &TenantTx<'_>, fragment_id: Uuid) -> Result<Vec<Version>> {
    let rows = tx
        .query(
            "SELECT content, topic, keywords, type, importance, is_anchor, amended_by, amended_at
               FROM mneme.fragment_versions WHERE tenant_id = $1 AND fragment_id = $2 ORDER BY id",
            &[&tx.tenant_id(), &fragment_id],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|row| Version {
            content: row.get(0),
            topic: row.get(1),
            keywords: row.get(2),
            fragment_type: row.get(3),
            importance: row.get(4),
            is_anchor: row.get(5),
            amended_by: row.get(6),
            amended_at: row.get(7),
        })
        .collect())
}
