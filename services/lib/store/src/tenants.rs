//! The `tenants` table: the platform's registry of customers.

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use tokio_postgres::Row;
use uuid::Uuid;

use crate::Result;

/// A customer account: the hard isolation boundary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tenant {
    pub id: Uuid,
    pub name: String,
    pub status: String,
    pub created_at: DateTime<Utc>,
}

impl From<Row> for Tenant {
    fn from(row: Row) -> Self {
        Self {
            id: row.get("id"),
            name: row.get("name"),
            status: row.get("status"),
            created_at: row.get("created_at"),
        }
    }
}

/// Checks a tenant name: 1–63 characters of `a-z`, `0-9`, `-` and `_`,
/// starting with a letter or digit (it appears in URLs and CLI arguments).
pub fn validate_name(name: &str) -> Result<(), String> {
    let valid = !name.is_empty()
        && name.len() <= 63
        && name.bytes().enumerate().all(|(i, b)| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || (i > 0 && (b == b'-' || b == b'_'))
        });
    if valid {
        Ok(())
    } else {
        Err(format!(
            "invalid tenant name `{name}`: use 1-63 lowercase letters, digits, `-` or `_`, \
             starting with a letter or digit"
        ))
    }
}

/// Inserts a tenant. A duplicate name fails with a unique violation
/// (see [`crate::StoreError::is_unique_violation`]).
pub async fn create(client: &impl GenericClient, name: &str) -> Result<Tenant> {
    let row = client
        .query_one(
            "INSERT INTO mneme.tenants (id, name) VALUES ($1, $2)
             RETURNING id, name, status, created_at",
            &[&Uuid::now_v7(), &name],
        )
        .await?;
    Ok(row.into())
}

pub async fn find_by_name(client: &impl GenericClient, name: &str) -> Result<Option<Tenant>> {
    let row = client
        .query_opt(
            "SELECT id, name, status, created_at FROM mneme.tenants WHERE name = $1",
            &[&name],
        )
        .await?;
    Ok(row.map(Tenant::from))
}

pub async fn find(client: &impl GenericClient, id: Uuid) -> Result<Option<Tenant>> {
    let row = client
        .query_opt(
            "SELECT id, name, status, created_at FROM mneme.tenants WHERE id = $1",
            &[&id],
        )
        .await?;
    Ok(row.map(Tenant::from))
}

pub async fn list(client: &impl GenericClient) -> Result<Vec<Tenant>> {
    let rows = client
        .query(
            "SELECT id, name, status, created_at FROM mneme.tenants ORDER BY name",
            &[],
        )
        .await?;
    Ok(rows.into_iter().map(Tenant::from).collect())
}

/// Ids of active tenants, for background jobs that visit every tenant.
pub async fn active_ids(client: &impl GenericClient) -> Result<Vec<Uuid>> {
    let rows = client
        .query(
            "SELECT id FROM mneme.tenants WHERE status = 'active' ORDER BY id",
            &[],
        )
        .await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// Sets a tenant's status (`active` or `suspended`); `false` when there is
/// no such tenant. A suspended tenant's keys and tokens stop authenticating.
pub async fn set_status(client: &impl GenericClient, id: Uuid, status: &str) -> Result<bool> {
    Ok(client
        .execute(
            "UPDATE mneme.tenants SET status = $2 WHERE id = $1",
            &[&id, &status],
        )
        .await?
        == 1)
}

#[cfg(test)]
mod tests {
    use super::validate_name;

    #[test]
    fn tenant_names_are_slugs() {
        assert!(validate_name("acme-corp_2").is_ok());
        for bad in ["", "Acme", "-acme", "a b", &"x".repeat(64)] {
            assert!(validate_name(bad).is_err(), "{bad:?}");
        }
    }
}
