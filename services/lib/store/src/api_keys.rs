//! The `api_keys` table: credentials of a tenant's agents and integrations.

use chrono::{DateTime, Utc};
use deadpool_postgres::Object;
use mneme_core::Permission;
use mneme_core::api_key;
use tokio_postgres::Row;
use uuid::Uuid;

use crate::{Result, StoreError, TenantTx};

/// A key as stored, without its secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKey {
    pub id: Uuid,
    pub tenant_id: Uuid,
    pub name: String,
    pub prefix: String,
    pub permissions: Vec<Permission>,
    pub status: String,
    pub default_workspace: Option<String>,
    pub default_mode: Option<String>,
    pub fragment_limit: Option<i32>,
    /// Tool calls per UTC day; `None` is unlimited.
    pub daily_call_limit: Option<i32>,
    /// Requests per rate-limit window; `None` takes the deployment default.
    pub rate_limit: Option<i32>,
    pub expires_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
}

impl ApiKey {
    /// What a person should read as the key's state at `now`: the stored
    /// `active` or `revoked`, or `expired` for an active key past its
    /// expiry (authentication refuses it).
    pub fn status_at(&self, now: DateTime<Utc>) -> &str {
        match self.expires_at {
            Some(at) if self.status == "active" && at <= now => "expired",
            _ => &self.status,
        }
    }
}

const COLUMNS: &str = "id, tenant_id, name, key_prefix, permissions, status, default_workspace, \
                       default_mode, fragment_limit, daily_call_limit, rate_limit, expires_at, \
                       created_at";

fn parse_permissions(names: Vec<String>) -> Result<Vec<Permission>> {
    names
        .iter()
        .map(|name| {
            Permission::parse(name)
                .map_err(|_| StoreError::Invalid(format!("stored permission `{name}` is unknown")))
        })
        .collect()
}

impl TryFrom<Row> for ApiKey {
    type Error = StoreError;

    fn try_from(row: Row) -> Result<Self> {
        Ok(Self {
            id: row.get("id"),
            tenant_id: row.get("tenant_id"),
            name: row.get("name"),
            prefix: row.get("key_prefix"),
            permissions: parse_permissions(row.get("permissions"))?,
            status: row.get("status"),
            default_workspace: row.get("default_workspace"),
            default_mode: row.get("default_mode"),
            fragment_limit: row.get("fragment_limit"),
            daily_call_limit: row.get("daily_call_limit"),
            rate_limit: row.get("rate_limit"),
            expires_at: row.get("expires_at"),
            created_at: row.get("created_at"),
        })
    }
}

/// What a new key may do.
#[derive(Debug, Clone)]
pub struct NewKey {
    pub name: String,
    pub permissions: Vec<Permission>,
    pub default_workspace: Option<String>,
    /// Most valid fragments the key may hold; `None` is unlimited.
    pub fragment_limit: Option<i32>,
    pub expires_at: Option<DateTime<Utc>>,
}

/// Creates a key in the transaction's tenant. Returns the stored key and the
/// raw secret, which must be shown once and never stored.
pub async fn create(tx: &TenantTx<'_>, new: &NewKey) -> Result<(ApiKey, String)> {
    let generated = api_key::generate();
    let permissions: Vec<&str> = new.permissions.iter().map(|p| p.as_str()).collect();
    let row = tx
        .query_one(
            &format!(
                "INSERT INTO mneme.api_keys
                     (id, tenant_id, name, key_prefix, secret_hash, permissions,
                      default_workspace, expires_at, fragment_limit)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
                 RETURNING {COLUMNS}"
            ),
            &[
                &Uuid::now_v7(),
                &tx.tenant_id(),
                &new.name,
                &generated.prefix,
                &generated.hash.as_slice(),
                &permissions,
                &new.default_workspace,
                &new.expires_at,
                &new.fragment_limit,
            ],
        )
        .await?;
    Ok((ApiKey::try_from(row)?, generated.raw))
}

pub async fn list(tx: &TenantTx<'_>) -> Result<Vec<ApiKey>> {
    tx.query(
        &format!("SELECT {COLUMNS} FROM mneme.api_keys WHERE tenant_id = $1 ORDER BY created_at"),
        &[&tx.tenant_id()],
    )
    .await?
    .into_iter()
    .map(ApiKey::try_from)
    .collect()
}

/// Revokes a key of the transaction's tenant; `false` if there is none.
pub async fn revoke(tx: &TenantTx<'_>, key_id: Uuid) -> Result<bool> {
    let updated = tx
        .execute(
            "UPDATE mneme.api_keys SET status = 'revoked'
              WHERE tenant_id = $1 AND id = $2 AND status <> 'revoked'",
            &[&tx.tenant_id(), &key_id],
        )
        .await?;
    Ok(updated == 1)
}

/// A verified key and the keys it shares memories with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authenticated {
    pub key: ApiKey,
    /// Other keys of the key's groups (see [`crate::key_groups::peers`]).
    pub group_key_ids: Vec<Uuid>,
    /// The tenant's requests per rate-limit window; `None` takes the default.
    pub tenant_rate_limit: Option<i32>,
}

/// Looks up and verifies a raw key. `None` for anything that must not
/// authenticate: malformed, unknown, wrong secret, revoked, expired, or of a
/// suspended tenant — callers answer all of these the same way.
pub async fn authenticate(client: &mut Object, raw: &str) -> Result<Option<Authenticated>> {
    let Some(prefix) = api_key::parse_prefix(raw) else {
        return Ok(None);
    };
    let tx = client.transaction().await?;
    // Row-level security lets this transaction see exactly the row it names.
    tx.execute(
        "SELECT set_config('mneme.key_prefix', $1, true)",
        &[&prefix],
    )
    .await?;
    let row = tx
        .query_opt(
            &format!(
                "SELECT {COLUMNS}, secret_hash,
                        t.tenant_status, t.tenant_rate_limit
                   FROM mneme.api_keys k,
                        LATERAL (SELECT status AS tenant_status, rate_limit AS tenant_rate_limit
                                   FROM mneme.tenants WHERE tenants.id = k.tenant_id) t
                  WHERE key_prefix = $1"
            ),
            &[&prefix],
        )
        .await?;
    let Some(row) = row else {
        return Ok(None);
    };
    let stored_hash: Vec<u8> = row.get("secret_hash");
    let tenant_status: String = row.get("tenant_status");
    let tenant_rate_limit: Option<i32> = row.get("tenant_rate_limit");
    let key = ApiKey::try_from(row)?;
    let usable = api_key::verify(raw, &stored_hash)
        && key.status == "active"
        && tenant_status == "active"
        && key.expires_at.is_none_or(|at| at > Utc::now());
    if !usable {
        return Ok(None);
    }
    // The key is proven; its tenant's group memberships become visible.
    tx.execute(
        "SELECT set_config('mneme.tenant_id', $1, true)",
        &[&key.tenant_id.to_string()],
    )
    .await?;
    let group_key_ids = crate::key_groups::peers(&tx, key.tenant_id, key.id).await?;
    tx.commit().await?;
    Ok(Some(Authenticated {
        key,
        group_key_ids,
        tenant_rate_limit,
    }))
}

/// The key `key_id` of `tenant_id` when it may still be used (active, not
/// expired, tenant active): how OAuth access tokens, which name their key,
/// find it.
pub async fn authenticate_by_id(
    client: &mut Object,
    tenant_id: Uuid,
    key_id: Uuid,
) -> Result<Option<Authenticated>> {
    let tx = TenantTx::begin(client, tenant_id).await?;
    let row = tx
        .query_opt(
            &format!(
                "SELECT {COLUMNS}, t.tenant_status, t.tenant_rate_limit
                   FROM mneme.api_keys k,
                        LATERAL (SELECT status AS tenant_status, rate_limit AS tenant_rate_limit
                                   FROM mneme.tenants WHERE tenants.id = k.tenant_id) t
                  WHERE tenant_id = $1 AND id = $2"
            ),
            &[&tenant_id, &key_id],
        )
        .await?;
    let Some(row) = row else {
        return Ok(None);
    };
    let tenant_status: String = row.get("tenant_status");
    let tenant_rate_limit: Option<i32> = row.get("tenant_rate_limit");
    let key = ApiKey::try_from(row)?;
    let usable = key.status == "active"
        && tenant_status == "active"
        && key.expires_at.is_none_or(|at| at > Utc::now());
    if !usable {
        return Ok(None);
    }
    let group_key_ids = crate::key_groups::peers(&*tx, key.tenant_id, key.id).await?;
    tx.commit().await?;
    Ok(Some(Authenticated {
        key,
        group_key_ids,
        tenant_rate_limit,
    }))
}

/// The key's fragment quota (`None`: unlimited). With `lock`, the key row is
/// locked until the transaction ends, so writers near the limit take turns
/// and the count they check cannot change under them.
pub async fn fragment_limit(tx: &TenantTx<'_>, key_id: Uuid, lock: bool) -> Result<Option<i32>> {
    let sql = if lock {
        "SELECT fragment_limit FROM mneme.api_keys WHERE tenant_id = $1 AND id = $2 FOR UPDATE"
    } else {
        "SELECT fragment_limit FROM mneme.api_keys WHERE tenant_id = $1 AND id = $2"
    };
    Ok(tx
        .query_opt(sql, &[&tx.tenant_id(), &key_id])
        .await?
        .and_then(|row| row.get(0)))
}

/// Sets the key's fragment quota (`None`: unlimited).
pub async fn set_fragment_limit(
    tx: &TenantTx<'_>,
    key_id: Uuid,
    limit: Option<i32>,
) -> Result<bool> {
    Ok(tx
        .execute(
            "UPDATE mneme.api_keys SET fragment_limit = $3 WHERE tenant_id = $1 AND id = $2",
            &[&tx.tenant_id(), &key_id, &limit],
        )
        .await?
        == 1)
}

/// A key of the transaction's tenant, whatever its status.
pub async fn find(tx: &TenantTx<'_>, key_id: Uuid) -> Result<Option<ApiKey>> {
    tx.query_opt(
        &format!("SELECT {COLUMNS} FROM mneme.api_keys WHERE tenant_id = $1 AND id = $2"),
        &[&tx.tenant_id(), &key_id],
    )
    .await?
    .map(ApiKey::try_from)
    .transpose()
}

/// What an administrator may change on a key: `None` leaves a field as it
/// is, `Some(None)` clears an optional one.
#[derive(Debug, Clone, Default)]
pub struct KeyChanges {
    pub name: Option<String>,
    pub permissions: Option<Vec<Permission>>,
    pub default_workspace: Option<Option<String>>,
    pub default_mode: Option<Option<String>>,
    pub fragment_limit: Option<Option<i32>>,
    pub daily_call_limit: Option<Option<i32>>,
    pub rate_limit: Option<Option<i32>>,
    pub expires_at: Option<Option<DateTime<Utc>>>,
}

/// Applies `changes` to a key of the transaction's tenant; `None` when
/// there is no such key. A taken name fails with a unique violation.
pub async fn update(
    tx: &TenantTx<'_>,
    key_id: Uuid,
    changes: &KeyChanges,
) -> Result<Option<ApiKey>> {
    let permissions: Option<Vec<&str>> = changes
        .permissions
        .as_ref()
        .map(|p| p.iter().map(|p| p.as_str()).collect());
    // Each optional column has a "set it" flag, so NULL can be written.
    let row = tx
        .query_opt(
            &format!(
                "UPDATE mneme.api_keys SET
                     name = COALESCE($3, name),
                     permissions = COALESCE($4, permissions),
                     default_workspace = CASE WHEN $5 THEN $6 ELSE default_workspace END,
                     default_mode = CASE WHEN $7 THEN $8 ELSE default_mode END,
                     fragment_limit = CASE WHEN $9 THEN $10 ELSE fragment_limit END,
                     daily_call_limit = CASE WHEN $11 THEN $12 ELSE daily_call_limit END,
                     rate_limit = CASE WHEN $13 THEN $14 ELSE rate_limit END,
                     expires_at = CASE WHEN $15 THEN $16 ELSE expires_at END
                  WHERE tenant_id = $1 AND id = $2
                  RETURNING {COLUMNS}"
            ),
            &[
                &tx.tenant_id(),
                &key_id,
                &changes.name,
                &permissions,
                &changes.default_workspace.is_some(),
                &changes.default_workspace.clone().flatten(),
                &changes.default_mode.is_some(),
                &changes.default_mode.clone().flatten(),
                &changes.fragment_limit.is_some(),
                &changes.fragment_limit.flatten(),
                &changes.daily_call_limit.is_some(),
                &changes.daily_call_limit.flatten(),
                &changes.rate_limit.is_some(),
                &changes.rate_limit.flatten(),
                &changes.expires_at.is_some(),
                &changes.expires_at.flatten(),
            ],
        )
        .await?;
    row.map(ApiKey::try_from).transpose()
}
