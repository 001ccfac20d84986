//! `users`: the people of a tenant, who sign in with email and password.

use chrono::{DateTime, Utc};
use deadpool_postgres::Object;
use tokio_postgres::Row;
use uuid::Uuid;

use crate::{Result, StoreError, TenantTx};

/// What a person may do in their tenant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Owner,
    Admin,
    Member,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Owner => "owner",
            Role::Admin => "admin",
            Role::Member => "member",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "owner" => Some(Role::Owner),
            "admin" => Some(Role::Admin),
            "member" => Some(Role::Member),
            _ => None,
        }
    }

    /// Owners and admins manage the tenant's keys (and may let a connector
    /// act as any of them).
    pub fn manages_keys(self) -> bool {
        matches!(self, Role::Owner | Role::Admin)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub id: Uuid,
    pub tenant_id: Uuid,
    pub email: String,
    pub role: Role,
    pub status: String,
    pub created_at: DateTime<Utc>,
    pub last_login_at: Option<DateTime<Utc>>,
}

impl TryFrom<&Row> for User {
    type Error = StoreError;

    fn try_from(row: &Row) -> Result<Self> {
        let role: String = row.get("role");
        Ok(Self {
            id: row.get("id"),
            tenant_id: row.get("tenant_id"),
            email: row.get("email"),
            role: Role::parse(&role)
                .ok_or_else(|| StoreError::Invalid(format!("stored role `{role}` is unknown")))?,
            status: row.get("status"),
            created_at: row.get("created_at"),
            last_login_at: row.get("last_login_at"),
        })
    }
}

const COLUMNS: &str = "id, tenant_id, email, role, status, created_at, last_login_at";

/// The normal form of an email address (what is stored and looked up).
pub fn normalize_email(email: &str) -> String {
    email.trim().to_lowercase()
}

/// Creates a user in the transaction's tenant. A taken email fails with a
/// unique violation.
pub async fn create(
    tx: &TenantTx<'_>,
    email: &str,
    role: Role,
    password_hash: &str,
) -> Result<User> {
    let row = tx
        .query_one(
            &format!(
                "INSERT INTO mneme.users (id, tenant_id, email, role, password_hash)
                 VALUES ($1, $2, $3, $4, $5) RETURNING {COLUMNS}"
            ),
            &[
                &Uuid::now_v7(),
                &tx.tenant_id(),
                &normalize_email(email),
                &role.as_str(),
                &password_hash,
            ],
        )
        .await?;
    User::try_from(&row)
}

pub async fn list(tx: &TenantTx<'_>) -> Result<Vec<User>> {
    tx.query(
        &format!("SELECT {COLUMNS} FROM mneme.users WHERE tenant_id = $1 ORDER BY created_at"),
        &[&tx.tenant_id()],
    )
    .await?
    .iter()
    .map(User::try_from)
    .collect()
}

/// The active account with this email and its password hash, whatever its
/// tenant (row-level security shows exactly that row).
pub async fn for_sign_in(client: &mut Object, email: &str) -> Result<Option<(User, String)>> {
    let email = normalize_email(email);
    let tx = client.transaction().await?;
    tx.execute("SELECT set_config('mneme.user_email', $1, true)", &[&email])
        .await?;
    let row = tx
        .query_opt(
            &format!(
                "SELECT {COLUMNS}, password_hash FROM mneme.users
                  WHERE email = $1 AND status = 'active'"
            ),
            &[&email],
        )
        .await?;
    tx.commit().await?;
    match row {
        Some(row) => Ok(Some((User::try_from(&row)?, row.get("password_hash")))),
        None => Ok(None),
    }
}

/// Replaces a user's password; `false` when the tenant has no such user.
pub async fn set_password(tx: &TenantTx<'_>, email: &str, password_hash: &str) -> Result<bool> {
    Ok(tx
        .execute(
            "UPDATE mneme.users SET password_hash = $3, password_changed_at = now()
              WHERE tenant_id = $1 AND email = $2",
            &[&tx.tenant_id(), &normalize_email(email), &password_hash],
        )
        .await?
        == 1)
}

pub async fn record_sign_in(tx: &TenantTx<'_>, user_id: Uuid) -> Result<()> {
    tx.execute(
        "UPDATE mneme.users SET last_login_at = now() WHERE tenant_id = $1 AND id = $2",
        &[&tx.tenant_id(), &user_id],
    )
    .await?;
    Ok(())
}

/// A user of the transaction's tenant.
pub async fn find(tx: &TenantTx<'_>, user_id: Uuid) -> Result<Option<User>> {
    tx.query_opt(
        &format!("SELECT {COLUMNS} FROM mneme.users WHERE tenant_id = $1 AND id = $2"),
        &[&tx.tenant_id(), &user_id],
    )
    .await?
    .as_ref()
    .map(User::try_from)
    .transpose()
}

/// Whether the user still exists and is active (checked on each request of
/// a dashboard session, so disabling someone ends their sessions).
pub async fn is_active(tx: &TenantTx<'_>, user_id: Uuid) -> Result<Option<Role>> {
    let row = tx
        .query_opt(
            "SELECT role FROM mneme.users WHERE tenant_id = $1 AND id = $2 AND status = 'active'",
            &[&tx.tenant_id(), &user_id],
        )
        .await?;
    Ok(row.and_then(|row| Role::parse(row.get(0))))
}

/// Changes a user's role, status or password (each `None` stays).
pub async fn update(
    tx: &TenantTx<'_>,
    user_id: Uuid,
    role: Option<Role>,
    status: Option<&str>,
    password_hash: Option<&str>,
) -> Result<Option<User>> {
    let row = tx
        .query_opt(
            &format!(
                "UPDATE mneme.users SET
                     role = COALESCE($3, role),
                     status = COALESCE($4, status),
                     password_hash = COALESCE($5, password_hash),
                     password_changed_at = CASE WHEN $5 IS NULL THEN password_changed_at
                                                ELSE now() END
                  WHERE tenant_id = $1 AND id = $2
                  RETURNING {COLUMNS}"
            ),
            &[
                &tx.tenant_id(),
                &user_id,
                &role.map(Role::as_str),
                &status,
                &password_hash,
            ],
        )
        .await?;
    row.as_ref().map(User::try_from).transpose()
}

/// How many active owners the tenant has (the last one may not be demoted
/// or disabled).
pub async fn active_owners(tx: &TenantTx<'_>) -> Result<i64> {
    Ok(tx
        .query_one(
            "SELECT count(*) FROM mneme.users
              WHERE tenant_id = $1 AND role = 'owner' AND status = 'active'",
            &[&tx.tenant_id()],
        )
        .await?
        .get(0))
}
