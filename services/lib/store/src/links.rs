//! The `fragment_links` table: typed, weighted edges between fragments of
//! one tenant. Links are created only between fragments the caller can
//! read, so they never cross a key or tenant boundary the caller could not
//! cross itself.

use chrono::{DateTime, Utc};
use tokio_postgres::Row;
use uuid::Uuid;

use crate::{Result, TenantTx};

/// One link, seen from one of its ends.
#[derive(Debug, Clone, PartialEq)]
pub struct Link {
    pub from_id: Uuid,
    pub to_id: Uuid,
    pub relation_type: String,
    pub weight: f32,
    pub confidence: f32,
    pub created_at: DateTime<Utc>,
}

impl From<&Row> for Link {
    fn from(row: &Row) -> Self {
        Self {
            from_id: row.get("from_id"),
            to_id: row.get("to_id"),
            relation_type: row.get("relation_type"),
            weight: row.get("weight"),
            confidence: row.get("confidence"),
            created_at: row.get("created_at"),
        }
    }
}

/// Creates `from → to` if both fragments are readable with `key_ids`;
/// returns whether the link exists afterwards. An existing link keeps the
/// larger weight.
pub async fn upsert(
    tx: &TenantTx<'_>,
    key_ids: &[Uuid],
    from_id: Uuid,
    to_id: Uuid,
    relation_type: &str,
    weight: f32,
) -> Result<bool> {
    let rows = tx
        .execute(
            "INSERT INTO mneme.fragment_links (tenant_id, from_id, to_id, relation_type, weight)
             SELECT $1, a.id, b.id, $5, $6
               FROM mneme.fragments a, mneme.fragments b
              WHERE a.tenant_id = $1 AND a.id = $2 AND a.key_id = ANY($4)
                AND b.tenant_id = $1 AND b.id = $3 AND b.key_id = ANY($4)
             ON CONFLICT (tenant_id, from_id, to_id, relation_type) DO UPDATE
                SET weight = GREATEST(mneme.fragment_links.weight, EXCLUDED.weight),
                    deleted_at = NULL",
            &[
                &tx.tenant_id(),
                &from_id,
                &to_id,
                &key_ids,
                &relation_type,
                &weight,
            ],
        )
        .await?;
    Ok(rows == 1)
}

/// Whether `to` can already reach `from` through active links of
/// `relation_type` (so adding `from → to` would close a cycle). Bounded by
/// `max_depth` hops.
pub async fn would_cycle(
    tx: &TenantTx<'_>,
    from_id: Uuid,
    to_id: Uuid,
    relation_type: &str,
    max_depth: i32,
) -> Result<bool> {
    let row = tx
        .query_one(
            "WITH RECURSIVE reach(id, depth) AS (
                 SELECT $3::uuid, 0
                 UNION
                 SELECT l.to_id, r.depth + 1
                   FROM reach r
                   JOIN mneme.fragment_links l
                     ON l.tenant_id = $1 AND l.from_id = r.id
                    AND l.relation_type = $4 AND l.deleted_at IS NULL
                  WHERE r.depth < $5)
             SELECT EXISTS (SELECT FROM reach WHERE id = $2)",
            &[
                &tx.tenant_id(),
                &from_id,
                &to_id,
                &relation_type,
                &max_depth,
            ],
        )
        .await?;
    Ok(row.get(0))
}

/// Active links touching any of `ids`, strongest first, at most `per_id`
/// per fragment, whose other end is readable with `key_ids`.
pub async fn around(
    tx: &TenantTx<'_>,
    key_ids: &[Uuid],
    ids: &[Uuid],
    relation_types: Option<&[String]>,
    per_id: i64,
) -> Result<Vec<Link>> {
    let rows = tx
        .query(
            "SELECT from_id, to_id, relation_type, weight, confidence, created_at FROM (
                 SELECT l.*, row_number() OVER (
                            PARTITION BY CASE WHEN l.from_id = ANY($3) THEN l.from_id ELSE l.to_id END
                            ORDER BY l.weight DESC, l.created_at DESC) AS rank
                   FROM mneme.fragment_links l
                   JOIN mneme.fragments other
                     ON other.tenant_id = l.tenant_id
                    AND other.id = CASE WHEN l.from_id = ANY($3) THEN l.to_id ELSE l.from_id END
                  WHERE l.tenant_id = $1 AND l.deleted_at IS NULL
                    AND (l.from_id = ANY($3) OR l.to_id = ANY($3))
                    AND other.key_id = ANY($2)
                    AND ($4::text[] IS NULL OR l.relation_type = ANY($4))) ranked
             WHERE rank <= $5",
            &[&tx.tenant_id(), &key_ids, &ids, &relation_types, &per_id],
        )
        .await?;
    Ok(rows.iter().map(Link::from).collect())
}

/// Soft-deletes a link (kept for audit and restore).
pub async fn soft_delete(
    tx: &TenantTx<'_>,
    from_id: Uuid,
    to_id: Uuid,
    relation_type: &str,
) -> Result<bool> {
    let updated = tx
        .execute(
            "UPDATE mneme.fragment_links SET deleted_at = now()
              WHERE tenant_id = $1 AND from_id = $2 AND to_id = $3 AND relation_type = $4
                AND deleted_at IS NULL",
            &[&tx.tenant_id(), &from_id, &to_id, &relation_type],
        )
        .await?;
    Ok(updated == 1)
}
