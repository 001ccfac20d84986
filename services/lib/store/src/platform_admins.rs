//! `platform_admins`: the operators of the whole service. They belong to
//! no tenant (no row-level security); the admin API and the CLI read them.

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use tokio_postgres::Row;
use uuid::Uuid;

use crate::Result;
use crate::users::normalize_email;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlatformAdmin {
    pub id: Uuid,
    pub email: String,
    pub status: String,
    pub created_at: DateTime<Utc>,
    pub last_login_at: Option<DateTime<Utc>>,
}

impl From<&Row> for PlatformAdmin {
    fn from(row: &Row) -> Self {
        Self {
            id: row.get("id"),
            email: row.get("email"),
            status: row.get("status"),
            created_at: row.get("created_at"),
            last_login_at: row.get("last_login_at"),
        }
    }
}

const COLUMNS: &str = "id, email, status, created_at, last_login_at";

/// Creates a platform admin; a taken email fails with a unique violation.
pub async fn create(
    client: &impl GenericClient,
    email: &str,
    password_hash: &str,
) -> Result<PlatformAdmin> {
    let row = client
        .query_one(
            &format!(
                "INSERT INTO mneme.platform_admins (id, email, password_hash)
                 VALUES ($1, $2, $3) RETURNING {COLUMNS}"
            ),
            &[&Uuid::now_v7(), &normalize_email(email), &password_hash],
        )
        .await?;
    Ok(PlatformAdmin::from(&row))
}

pub async fn list(client: &impl GenericClient) -> Result<Vec<PlatformAdmin>> {
    let rows = client
        .query(
            &format!("SELECT {COLUMNS} FROM mneme.platform_admins ORDER BY created_at"),
            &[],
        )
        .await?;
    Ok(rows.iter().map(PlatformAdmin::from).collect())
}

/// The active admin with this email and its password hash.
pub async fn for_sign_in(
    client: &impl GenericClient,
    email: &str,
) -> Result<Option<(PlatformAdmin, String)>> {
    let row = client
        .query_opt(
            &format!(
                "SELECT {COLUMNS}, password_hash FROM mneme.platform_admins
                  WHERE email = $1 AND status = 'active'"
            ),
            &[&normalize_email(email)],
        )
        .await?;
    Ok(row.map(|row| (PlatformAdmin::from(&row), row.get("password_hash"))))
}

/// Whether the admin still exists and is active (checked on each request
/// of a dashboard session, so disabling an admin ends their sessions).
pub async fn is_active(client: &impl GenericClient, id: Uuid) -> Result<bool> {
    Ok(client
        .query_opt(
            "SELECT 1 FROM mneme.platform_admins WHERE id = $1 AND status = 'active'",
            &[&id],
        )
        .await?
        .is_some())
}

pub async fn set_password(
    client: &impl GenericClient,
    email: &str,
    password_hash: &str,
) -> Result<bool> {
    Ok(client
        .execute(
            "UPDATE mneme.platform_admins SET password_hash = $2 WHERE email = $1",
            &[&normalize_email(email), &password_hash],
        )
        .await?
        == 1)
}

pub async fn record_sign_in(client: &impl GenericClient, id: Uuid) -> Result<()> {
    client
        .execute(
            "UPDATE mneme.platform_admins SET last_login_at = now() WHERE id = $1",
            &[&id],
        )
        .await?;
    Ok(())
}
