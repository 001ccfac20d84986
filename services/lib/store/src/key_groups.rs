//! The `key_groups` and `key_group_members` tables: keys of one tenant that
//! read each other's fragments (each still writes as itself).

use chrono::{DateTime, Utc};
use tokio_postgres::Row;
use uuid::Uuid;

use crate::{Result, TenantTx};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyGroup {
    pub id: Uuid,
    pub name: String,
    pub description: Option<String>,
    pub created_at: DateTime<Utc>,
    pub key_ids: Vec<Uuid>,
}

impl From<Row> for KeyGroup {
    fn from(row: Row) -> Self {
        Self {
            id: row.get("id"),
            name: row.get("name"),
            description: row.get("description"),
            created_at: row.get("created_at"),
            key_ids: row.get("key_ids"),
        }
    }
}

const SELECT: &str = "SELECT g.id, g.name, g.description, g.created_at,
        COALESCE(array_agg(m.key_id) FILTER (WHERE m.key_id IS NOT NULL), '{}') AS key_ids
   FROM mneme.key_groups g
   LEFT JOIN mneme.key_group_members m ON m.tenant_id = g.tenant_id AND m.group_id = g.id
  WHERE g.tenant_id = $1";

pub async fn create(tx: &TenantTx<'_>, name: &str, description: Option<&str>) -> Result<KeyGroup> {
    let id = Uuid::now_v7();
    tx.execute(
        "INSERT INTO mneme.key_groups (tenant_id, id, name, description) VALUES ($1, $2, $3, $4)",
        &[&tx.tenant_id(), &id, &name, &description],
    )
    .await?;
    let row = tx
        .query_one(
            &format!("{SELECT} AND g.id = $2 GROUP BY g.tenant_id, g.id"),
            &[&tx.tenant_id(), &id],
        )
        .await?;
    Ok(row.into())
}

pub async fn list(tx: &TenantTx<'_>) -> Result<Vec<KeyGroup>> {
    let rows = tx
        .query(
            &format!("{SELECT} GROUP BY g.tenant_id, g.id ORDER BY g.name"),
            &[&tx.tenant_id()],
        )
        .await?;
    Ok(rows.into_iter().map(KeyGroup::from).collect())
}

/// Adds a key of the tenant to a group of the tenant; `false` when either
/// does not exist (or the key already belongs to it).
pub async fn add_member(tx: &TenantTx<'_>, group_id: Uuid, key_id: Uuid) -> Result<bool> {
    let inserted = tx
        .execute(
            "INSERT INTO mneme.key_group_members (tenant_id, group_id, key_id)
             SELECT $1, g.id, k.id FROM mneme.key_groups g, mneme.api_keys k
              WHERE g.tenant_id = $1 AND g.id = $2 AND k.tenant_id = $1 AND k.id = $3
             ON CONFLICT DO NOTHING",
            &[&tx.tenant_id(), &group_id, &key_id],
        )
        .await?;
    Ok(inserted == 1)
}

pub async fn remove_member(tx: &TenantTx<'_>, group_id: Uuid, key_id: Uuid) -> Result<bool> {
    let deleted = tx
        .execute(
            "DELETE FROM mneme.key_group_members WHERE tenant_id = $1 AND group_id = $2 AND key_id = $3",
            &[&tx.tenant_id(), &group_id, &key_id],
        )
        .await?;
    Ok(deleted == 1)
}

pub async fn delete(tx: &TenantTx<'_>, group_id: Uuid) -> Result<bool> {
    let deleted = tx
        .execute(
            "DELETE FROM mneme.key_groups WHERE tenant_id = $1 AND id = $2",
            &[&tx.tenant_id(), &group_id],
        )
        .await?;
    Ok(deleted == 1)
}

/// Every other key sharing a group with `key_id`: the keys whose fragments
/// `key_id` may read besides its own. Revoked members count: a group shares
/// memories, and memories outlive the key that wrote them (key rotation).
pub async fn peers(
    tx: &impl deadpool_postgres::GenericClient,
    tenant_id: Uuid,
    key_id: Uuid,
) -> Result<Vec<Uuid>> {
    let rows = tx
        .query(
            "SELECT DISTINCT other.key_id
               FROM mneme.key_group_members mine
               JOIN mneme.key_group_members other
                 ON other.tenant_id = mine.tenant_id AND other.group_id = mine.group_id
              WHERE mine.tenant_id = $1 AND mine.key_id = $2 AND other.key_id <> $2
              ORDER BY 1",
            &[&tenant_id, &key_id],
        )
        .await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}
