//! `oauth_clients` (registered OAuth clients, platform records) and
//! `oauth_refresh_tokens` (hashed refresh tokens, tenant-owned, in families).

use chrono::{DateTime, Utc};
use deadpool_postgres::{GenericClient, Object};
use tokio_postgres::Row;
use uuid::Uuid;

use crate::{Result, TenantTx};

/// A client registered through dynamic client registration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OAuthClient {
    pub client_id: String,
    pub client_name: String,
    pub redirect_uris: Vec<String>,
    pub token_endpoint_auth_method: String,
    pub client_secret_hash: Option<Vec<u8>>,
    /// The tenant and key an API key bound the client to at registration.
    pub bound_key: Option<(Uuid, Uuid)>,
    pub created_at: DateTime<Utc>,
}

impl From<Row> for OAuthClient {
    fn from(row: Row) -> Self {
        let tenant: Option<Uuid> = row.get("bound_tenant_id");
        let key: Option<Uuid> = row.get("bound_key_id");
        Self {
            client_id: row.get("client_id"),
            client_name: row.get("client_name"),
            redirect_uris: row.get("redirect_uris"),
            token_endpoint_auth_method: row.get("token_endpoint_auth_method"),
            client_secret_hash: row.get("client_secret_hash"),
            bound_key: tenant.zip(key),
            created_at: row.get("created_at"),
        }
    }
}

const CLIENT_COLUMNS: &str = "client_id, client_name, redirect_uris, token_endpoint_auth_method, \
                              client_secret_hash, bound_tenant_id, bound_key_id, created_at";

pub async fn register_client(client: &impl GenericClient, new: &OAuthClient) -> Result<()> {
    let (tenant, key) = new.bound_key.unzip();
    client
        .execute(
            "INSERT INTO mneme.oauth_clients
                 (client_id, client_name, redirect_uris, token_endpoint_auth_method,
                  client_secret_hash, bound_tenant_id, bound_key_id)
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
            &[
                &new.client_id,
                &new.client_name,
                &new.redirect_uris,
                &new.token_endpoint_auth_method,
                &new.client_secret_hash,
                &tenant,
                &key,
            ],
        )
        .await?;
    Ok(())
}

/// The client, marking it used (unused clients are pruned).
pub async fn use_client(
    client: &impl GenericClient,
    client_id: &str,
) -> Result<Option<OAuthClient>> {
    Ok(client
        .query_opt(
            &format!(
                "UPDATE mneme.oauth_clients SET last_used_at = now()
                  WHERE client_id = $1 RETURNING {CLIENT_COLUMNS}"
            ),
            &[&client_id],
        )
        .await?
        .map(OAuthClient::from))
}

/// Deletes clients unused since `before`; how many.
pub async fn prune_clients(client: &impl GenericClient, before: DateTime<Utc>) -> Result<u64> {
    Ok(client
        .execute(
            "DELETE FROM mneme.oauth_clients WHERE last_used_at < $1",
            &[&before],
        )
        .await?)
}

/// One refresh token as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefreshToken {
    pub id: Uuid,
    pub family_id: Uuid,
    pub tenant_id: Uuid,
    pub key_id: Uuid,
    pub client_id: String,
    pub subject: String,
    pub scope: String,
    pub resource: String,
    pub expires_at: DateTime<Utc>,
    pub replaced_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
}

impl From<Row> for RefreshToken {
    fn from(row: Row) -> Self {
        Self {
            id: row.get("id"),
            family_id: row.get("family_id"),
            tenant_id: row.get("tenant_id"),
            key_id: row.get("key_id"),
            client_id: row.get("client_id"),
            subject: row.get("subject"),
            scope: row.get("scope"),
            resource: row.get("resource"),
            expires_at: row.get("expires_at"),
            replaced_at: row.get("replaced_at"),
            revoked_at: row.get("revoked_at"),
        }
    }
}

const TOKEN_COLUMNS: &str = "id, family_id, tenant_id, key_id, client_id, subject, scope, \
                             resource, expires_at, replaced_at, revoked_at";

/// Stores a refresh token (by its hash) in the transaction's tenant.
pub async fn insert_refresh_token(
    tx: &TenantTx<'_>,
    token: &RefreshToken,
    token_hash: &[u8],
) -> Result<()> {
    tx.execute(
        "INSERT INTO mneme.oauth_refresh_tokens
             (id, family_id, tenant_id, key_id, client_id, subject, scope, resource,
              token_hash, expires_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
        &[
            &token.id,
            &token.family_id,
            &tx.tenant_id(),
            &token.key_id,
            &token.client_id,
            &token.subject,
            &token.scope,
            &token.resource,
            &token_hash,
            &token.expires_at,
        ],
    )
    .await?;
    Ok(())
}

/// The refresh token with this hash, whatever its tenant (the hash is the
/// secret; row-level security shows exactly that row).
pub async fn find_refresh_token(
    client: &mut Object,
    token_hash: &[u8],
) -> Result<Option<RefreshToken>> {
    let tx = client.transaction().await?;
    tx.execute(
        "SELECT set_config('mneme.refresh_token_hash', $1, true)",
        &[&hex::encode(token_hash)],
    )
    .await?;
    let row = tx
        .query_opt(
            &format!(
                "SELECT {TOKEN_COLUMNS} FROM mneme.oauth_refresh_tokens WHERE token_hash = $1"
            ),
            &[&token_hash],
        )
        .await?;
    tx.commit().await?;
    Ok(row.map(RefreshToken::from))
}

/// Marks a token replaced, unless it already was (or was revoked): `false`
/// means another request used it first.
pub async fn mark_replaced(tx: &TenantTx<'_>, id: Uuid) -> Result<bool> {
    Ok(tx
        .execute(
            "UPDATE mneme.oauth_refresh_tokens SET replaced_at = now()
              WHERE tenant_id = $1 AND id = $2 AND replaced_at IS NULL AND revoked_at IS NULL",
            &[&tx.tenant_id(), &id],
        )
        .await?
        == 1)
}

/// Revokes every token of a family; how many were still live.
pub async fn revoke_family(tx: &TenantTx<'_>, family_id: Uuid) -> Result<u64> {
    Ok(tx
        .execute(
            "UPDATE mneme.oauth_refresh_tokens SET revoked_at = now()
              WHERE tenant_id = $1 AND family_id = $2 AND revoked_at IS NULL",
            &[&tx.tenant_id(), &family_id],
        )
        .await?)
}

/// Deletes tokens that expired before `before`; how many.
pub async fn delete_expired_refresh_tokens(
    tx: &TenantTx<'_>,
    before: DateTime<Utc>,
) -> Result<u64> {
    Ok(tx
        .execute(
            "DELETE FROM mneme.oauth_refresh_tokens WHERE tenant_id = $1 AND expires_at < $2",
            &[&tx.tenant_id(), &before],
        )
        .await?)
}
