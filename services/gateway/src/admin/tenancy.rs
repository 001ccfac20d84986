//! Tenants (platform admins), users, API keys and key groups.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use chrono::{DateTime, Utc};
use mneme_core::{Error, ErrorCode, Permission};
use mneme_store::api_keys::{self, ApiKey, KeyChanges, NewKey};
use mneme_store::users::{self, Role, User};
use mneme_store::{StoreError, TenantTx, key_groups, tenants};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use uuid::Uuid;

use super::{Actor, InTenant, JsonBody, Reply, Standing, json, not_found, parse_id};
use crate::App;

fn tenant_view(tenant: &tenants::Tenant) -> Value {
    json!({
        "id": tenant.id,
        "name": tenant.name,
        "status": tenant.status,
        "createdAt": tenant.created_at,
    })
}

fn conflict_on_unique(error: StoreError, message: &str) -> Error {
    if error.is_unique_violation() {
        Error::new(ErrorCode::Conflict, message)
    } else {
        error.into()
    }
}

/// `GET /tenants`: every tenant for a platform admin, one's own otherwise.
pub(crate) async fn tenants(State(app): State<App>, actor: Actor) -> Reply {
    let db = app.store.client().await?;
    let tenants: Vec<Value> = match actor.signed.tenant_id {
        Some(own) if actor.standing != Standing::Platform => tenants::find(&db, own)
            .await?
            .iter()
            .map(tenant_view)
            .collect(),
        _ => tenants::list(&db).await?.iter().map(tenant_view).collect(),
    };
    json(json!({ "tenants": tenants }))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NewTenant {
    #[serde(default)]
    name: String,
}

/// `POST /tenants` (platform admins).
pub(crate) async fn create_tenant(
    State(app): State<App>,
    actor: Actor,
    JsonBody(body): JsonBody<NewTenant>,
) -> Reply {
    actor.require_platform()?;
    tenants::validate_name(&body.name).map_err(Error::invalid_argument)?;
    let mut db = app.store.client().await?;
    let tenant = tenants::create(&db, &body.name)
        .await
        .map_err(|e| conflict_on_unique(e, "a tenant with this name exists"))?;
    let tx = TenantTx::begin(&mut db, tenant.id).await?;
    actor
        .audit(&tx, "tenant.create", &tenant.name, json!({}))
        .await?;
    tx.commit().await?;
    Ok((
        StatusCode::CREATED,
        Json(json!({ "tenant": tenant_view(&tenant) })),
    )
        .into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TenantChange {
    status: String,
}

/// `PATCH /tenants/{id}` (platform admins): suspend or reactivate. A
/// suspended tenant's keys, tokens and dashboard sessions stop working.
pub(crate) async fn update_tenant(
    State(app): State<App>,
    actor: Actor,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<TenantChange>,
) -> Reply {
    actor.require_platform()?;
    let id = parse_id(&id, "tenant")?;
    if !matches!(body.status.as_str(), "active" | "suspended") {
        return Err(Error::invalid_argument("status must be `active` or `suspended`").into());
    }
    let mut db = app.store.client().await?;
    if !tenants::set_status(&db, id, &body.status).await? {
        return Err(not_found("tenant").into());
    }
    let tenant = tenants::find(&db, id)
        .await?
        .ok_or_else(|| not_found("tenant"))?;
    let tx = TenantTx::begin(&mut db, id).await?;
    actor
        .audit(
            &tx,
            &format!("tenant.{}", body.status),
            &tenant.name,
            json!({}),
        )
        .await?;
    let keys = api_keys::list(&tx).await?;
    tx.commit().await?;
    // Cached credentials of the tenant's keys must not outlive the change.
    for key in keys {
        key_changed(&app, key.id).await;
    }
    json(json!({ "tenant": tenant_view(&tenant) }))
}

fn user_view(user: &User) -> Value {
    json!({
        "id": user.id,
        "email": user.email,
        "role": user.role.as_str(),
        "status": user.status,
        "createdAt": user.created_at,
        "lastLoginAt": user.last_login_at,
    })
}

/// `GET /users`.
pub(crate) async fn users(State(app): State<App>, scope: InTenant) -> Reply {
    scope.actor.require_manage()?;
    let mut db = app.store.client().await?;
    let tx = TenantTx::begin(&mut db, scope.tenant_id).await?;
    let users: Vec<Value> = users::list(&tx).await?.iter().map(user_view).collect();
    json(json!({ "users": users }))
}

fn parse_role(name: &str) -> Result<Role, Error> {
    Role::parse(name).ok_or_else(|| Error::invalid_argument("role must be owner, admin or member"))
}

/// Only owners (and platform admins) make, change or unmake owners.
fn may_touch_owners(actor: &Actor) -> Result<(), Error> {
    match actor.standing {
        Standing::Platform | Standing::Tenant(Role::Owner) => Ok(()),
        Standing::Tenant(_) => Err(Error::permission_denied(
            "only an owner may make or change an owner",
        )),
    }
}

async fn hash_password(password: String) -> Result<String, Error> {
    tokio::task::spawn_blocking(move || mneme_core::password::hash(&password))
        .await
        .map_err(|_| Error::internal())?
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NewUser {
    #[serde(default)]
    email: String,
    #[serde(default)]
    role: String,
    #[serde(default)]
    password: String,
}

/// `POST /users`.
pub(crate) async fn create_user(
    State(app): State<App>,
    scope: InTenant,
    JsonBody(body): JsonBody<NewUser>,
) -> Reply {
    let actor = &scope.actor;
    actor.require_manage()?;
    let role = parse_role(&body.role)?;
    if role == Role::Owner {
        may_touch_owners(actor)?;
    }
    let email = users::normalize_email(&body.email);
    if email.len() < 3 || !email.contains('@') {
        return Err(Error::invalid_argument("email must be an email address").into());
    }
    let hash = hash_password(body.password).await?;
    let mut db = app.store.client().await?;
    let tx = TenantTx::begin(&mut db, scope.tenant_id).await?;
    let user = users::create(&tx, &email, role, &hash)
        .await
        .map_err(|e| conflict_on_unique(e, "an account with this email exists"))?;
    actor
        .audit(
            &tx,
            "user.create",
            &user.email,
            json!({ "role": role.as_str() }),
        )
        .await?;
    tx.commit().await?;
    Ok((
        StatusCode::CREATED,
        Json(json!({ "user": user_view(&user) })),
    )
        .into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct UserChange {
    role: Option<String>,
    status: Option<String>,
    password: Option<String>,
}

/// `PATCH /users/{id}`: role, status, or a password reset.
pub(crate) async fn update_user(
    State(app): State<App>,
    scope: InTenant,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<UserChange>,
) -> Reply {
    let actor = &scope.actor;
    actor.require_manage()?;
    let id = parse_id(&id, "user")?;
    let role = body.role.as_deref().map(parse_role).transpose()?;
    if let Some(status) = &body.status
        && !matches!(status.as_str(), "active" | "disabled")
    {
        return Err(Error::invalid_argument("status must be `active` or `disabled`").into());
    }
    let hash = match body.password {
        Some(password) => Some(hash_password(password).await?),
        None => None,
    };
    let mut db = app.store.client().await?;
    let tx = TenantTx::begin(&mut db, scope.tenant_id).await?;
    let current = users::find(&tx, id)
        .await?
        .ok_or_else(|| not_found("user"))?;
    if current.role == Role::Owner || role == Some(Role::Owner) {
        may_touch_owners(actor)?;
    }
    let stops_owning = current.role == Role::Owner
        && current.status == "active"
        && (role.is_some_and(|r| r != Role::Owner) || body.status.as_deref() == Some("disabled"));
    if stops_owning && users::active_owners(&tx).await? <= 1 {
        return Err(Error::new(
            ErrorCode::Conflict,
            "a tenant keeps at least one active owner; make someone else owner first",
        )
        .into());
    }
    let user = users::update(&tx, id, role, body.status.as_deref(), hash.as_deref())
        .await?
        .ok_or_else(|| not_found("user"))?;
    actor
        .audit(
            &tx,
            "user.update",
            &user.email,
            json!({
                "role": role.map(Role::as_str),
                "status": body.status,
                "passwordReset": hash.is_some(),
            }),
        )
        .await?;
    tx.commit().await?;
    json(json!({ "user": user_view(&user) }))
}

fn key_view(key: &ApiKey, fragments: i64, tool_calls_today: i64) -> Value {
    let permissions: Vec<&str> = key.permissions.iter().map(|p| p.as_str()).collect();
    json!({
        "id": key.id,
        "name": key.name,
        "prefix": key.prefix,
        "permissions": permissions,
        "status": key.status_at(Utc::now()),
        "defaultWorkspace": key.default_workspace,
        "defaultMode": key.default_mode,
        "fragmentLimit": key.fragment_limit,
        "dailyCallLimit": key.daily_call_limit,
        "rateLimit": key.rate_limit,
        "expiresAt": key.expires_at,
        "createdAt": key.created_at,
        "fragments": fragments,
        "toolCallsToday": tool_calls_today,
    })
}

/// `GET /keys`: every key with its fragment count and today's tool calls.
pub(crate) async fn keys(State(app): State<App>, scope: InTenant) -> Reply {
    scope.actor.require_manage()?;
    let mut db = app.store.client().await?;
    let tx = TenantTx::begin(&mut db, scope.tenant_id).await?;
    let keys = api_keys::list(&tx).await?;
    let fragments = mneme_store::fragments::counts_by_key(&tx).await?;
    let today = mneme_store::usage::per_key(&tx, Utc::now().date_naive()).await?;
    let count = |pairs: &[(Uuid, i64)], id: Uuid| {
        pairs.iter().find(|(k, _)| *k == id).map_or(0, |(_, n)| *n)
    };
    let views: Vec<Value> = keys
        .iter()
        .map(|key| key_view(key, count(&fragments, key.id), count(&today, key.id)))
        .collect();
    json(json!({ "keys": views }))
}

/// A JSON field of a change: absent (`None`), `null` (`Some(None)`) or a
/// value of type `T`.
fn field<T: serde::de::DeserializeOwned>(
    body: &Map<String, Value>,
    name: &str,
) -> Result<Option<Option<T>>, Error> {
    match body.get(name) {
        None => Ok(None),
        Some(Value::Null) => Ok(Some(None)),
        Some(value) => serde_json::from_value(value.clone())
            .map(|v| Some(Some(v)))
            .map_err(|e| Error::invalid_argument(format!("`{name}`: {e}"))),
    }
}

const KEY_FIELDS: &[&str] = &[
    "name",
    "permissions",
    "defaultWorkspace",
    "defaultMode",
    "fragmentLimit",
    "dailyCallLimit",
    "rateLimit",
    "expiresAt",
];

/// Reads and checks a key's fields from a create or change request.
fn key_changes(body: &Value) -> Result<KeyChanges, Error> {
    let body = body
        .as_object()
        .ok_or_else(|| Error::invalid_argument("send the key's fields as a JSON object"))?;
    if let Some(unknown) = body.keys().find(|k| !KEY_FIELDS.contains(&k.as_str())) {
        return Err(Error::invalid_argument(format!(
            "unknown field `{unknown}`; a key has {}",
            KEY_FIELDS.join(", ")
        )));
    }
    let name: Option<Option<String>> = field(body, "name")?;
    let name = match name {
        Some(None) => return Err(Error::invalid_argument("a key needs a name")),
        Some(Some(name)) => {
            let name = name.trim().to_owned();
            if name.is_empty() || name.chars().count() > 128 {
                return Err(Error::invalid_argument(
                    "a key's name has 1 to 128 characters",
                ));
            }
            Some(name)
        }
        None => None,
    };
    let permissions: Option<Option<Vec<String>>> = field(body, "permissions")?;
    let permissions = match permissions {
        Some(Some(names)) if !names.is_empty() => Some(
            names
                .iter()
                .map(|n| Permission::parse(n))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|_| Error::invalid_argument("permissions are read, write and admin"))?,
        ),
        Some(_) => {
            return Err(Error::invalid_argument(
                "a key needs at least one permission (read, write, admin)",
            ));
        }
        None => None,
    };
    let default_mode: Option<Option<String>> = field(body, "defaultMode")?;
    if let Some(Some(mode)) = &default_mode
        && crate::tools::Mode::parse(mode).is_err()
    {
        return Err(Error::invalid_argument(
            "defaultMode must be recall-only, write-only, onboarding or audit",
        ));
    }
    // `null` means no limit, or for `rateLimit` the deployment's default;
    // a rate limit of 0 would refuse every call (revoke the key instead).
    let limit = |name: &str, least: i32, null: &str| -> Result<Option<Option<i32>>, Error> {
        let value: Option<Option<i32>> = field(body, name)?;
        if let Some(Some(n)) = value
            && n < least
        {
            return Err(Error::invalid_argument(format!(
                "`{name}` must be {least} or more (null: {null})"
            )));
        }
        Ok(value)
    };
    let default_workspace: Option<Option<String>> = field(body, "defaultWorkspace")?;
    let expires_at: Option<Option<DateTime<Utc>>> = field(body, "expiresAt")?;
    if let Some(Some(at)) = expires_at
        && at <= Utc::now()
    {
        // Such a key could never be used; to stop a key now, revoke it.
        return Err(Error::invalid_argument(format!(
            "expiresAt {} is not in the future; to stop a key now, revoke it",
            at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        )));
    }
    Ok(KeyChanges {
        name,
        permissions,
        default_workspace: default_workspace.map(|w| w.filter(|w| !w.trim().is_empty())),
        default_mode: default_mode.map(|m| m.filter(|m| !m.is_empty())),
        fragment_limit: limit("fragmentLimit", 0, "no limit")?,
        daily_call_limit: limit("dailyCallLimit", 0, "no limit")?,
        rate_limit: limit("rateLimit", 1, "the deployment's default")?,
        expires_at,
    })
}

/// `POST /keys`: the secret is in this answer and nowhere else, ever.
pub(crate) async fn create_key(
    State(app): State<App>,
    scope: InTenant,
    JsonBody(body): JsonBody<Value>,
) -> Reply {
    let actor = &scope.actor;
    actor.require_manage()?;
    let changes = key_changes(&body)?;
    let name = changes
        .name
        .clone()
        .ok_or_else(|| Error::invalid_argument("a key needs a name"))?;
    let permissions = changes
        .permissions
        .clone()
        .ok_or_else(|| Error::invalid_argument("a key needs permissions (read, write, admin)"))?;
    let mut db = app.store.client().await?;
    let tx = TenantTx::begin(&mut db, scope.tenant_id).await?;
    let (key, secret) = api_keys::create(
        &tx,
        &NewKey {
            name,
            permissions,
            default_workspace: changes.default_workspace.clone().flatten(),
            fragment_limit: changes.fragment_limit.flatten(),
            expires_at: changes.expires_at.flatten(),
        },
    )
    .await
    .map_err(|e| conflict_on_unique(e, "a key with this name exists"))?;
    // The fields `NewKey` does not carry.
    let key = api_keys::update(&tx, key.id, &changes)
        .await?
        .ok_or_else(Error::internal)?;
    actor
        .audit(
            &tx,
            "key.create",
            &key.name,
            json!({ "keyId": key.id, "permissions": body.get("permissions") }),
        )
        .await?;
    tx.commit().await?;
    Ok((
        StatusCode::CREATED,
        Json(json!({ "key": key_view(&key, 0, 0), "secret": secret })),
    )
        .into_response())
}

/// `GET /keys/{id}`: the key, its recent usage and its standing against
/// its limits.
pub(crate) async fn key(State(app): State<App>, scope: InTenant, Path(id): Path<String>) -> Reply {
    scope.actor.require_manage()?;
    let id = parse_id(&id, "key")?;
    let mut db = app.store.client().await?;
    let tx = TenantTx::begin(&mut db, scope.tenant_id).await?;
    let key = api_keys::find(&tx, id)
        .await?
        .ok_or_else(|| not_found("key"))?;
    let since = Utc::now().date_naive() - chrono::Days::new(13);
    let usage: Vec<Value> = mneme_store::usage::key_daily(&tx, id, since)
        .await?
        .iter()
        .map(|(day, calls)| json!({ "day": day, "toolCalls": calls }))
        .collect();
    let fragments = mneme_store::fragments::count_active(&tx, id).await?;
    let today = mneme_store::usage::tool_calls(&tx, id, Utc::now().date_naive()).await?;
    drop(tx);
    let limits = app
        .limiter
        .key_status(scope.tenant_id, id, key.rate_limit)
        .await;
    json(json!({
        "key": key_view(&key, fragments, today),
        "usage": usage,
        "rateLimit": limits,
    }))
}

/// Drops the key from every pod's credential caches, so a change applies
/// to its next request.
async fn key_changed(app: &App, key_id: Uuid) {
    app.keys.forget_key(key_id);
    app.cache.announce_key_revoked(&key_id.to_string()).await;
}

/// `PATCH /keys/{id}`: `null` clears a limit, absent fields stay.
pub(crate) async fn update_key(
    State(app): State<App>,
    scope: InTenant,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<Value>,
) -> Reply {
    let actor = &scope.actor;
    actor.require_manage()?;
    let id = parse_id(&id, "key")?;
    let changes = key_changes(&body)?;
    let mut db = app.store.client().await?;
    let tx = TenantTx::begin(&mut db, scope.tenant_id).await?;
    let key = api_keys::update(&tx, id, &changes)
        .await
        .map_err(|e| conflict_on_unique(e, "a key with this name exists"))?
        .ok_or_else(|| not_found("key"))?;
    actor
        .audit(
            &tx,
            "key.update",
            &key.name,
            json!({ "keyId": id, "changes": body }),
        )
        .await?;
    let fragments = mneme_store::fragments::count_active(&tx, id).await?;
    tx.commit().await?;
    key_changed(&app, id).await;
    json(json!({ "key": key_view(&key, fragments, 0) }))
}

/// `POST /keys/{id}/revoke`: the key stops working at once on every pod.
/// Its memories stay its own (readable by its groups), never reassigned.
pub(crate) async fn revoke_key(
    State(app): State<App>,
    scope: InTenant,
    Path(id): Path<String>,
) -> Reply {
    let actor = &scope.actor;
    actor.require_manage()?;
    let id = parse_id(&id, "key")?;
    let mut db = app.store.client().await?;
    let tx = TenantTx::begin(&mut db, scope.tenant_id).await?;
    let revoked = api_keys::revoke(&tx, id).await?;
    let key = api_keys::find(&tx, id)
        .await?
        .ok_or_else(|| not_found("key"))?;
    if revoked {
        actor
            .audit(&tx, "key.revoke", &key.name, json!({ "keyId": id }))
            .await?;
    }
    tx.commit().await?;
    key_changed(&app, id).await;
    json(json!({ "key": key_view(&key, 0, 0) }))
}

fn group_view(group: &key_groups::KeyGroup) -> Value {
    json!({
        "id": group.id,
        "name": group.name,
        "description": group.description,
        "createdAt": group.created_at,
        "members": group.key_ids,
    })
}

/// `GET /groups`.
pub(crate) async fn groups(State(app): State<App>, scope: InTenant) -> Reply {
    scope.actor.require_manage()?;
    let mut db = app.store.client().await?;
    let tx = TenantTx::begin(&mut db, scope.tenant_id).await?;
    let groups: Vec<Value> = key_groups::list(&tx)
        .await?
        .iter()
        .map(group_view)
        .collect();
    json(json!({ "groups": groups }))
}

const MAX_GROUP_DESCRIPTION_CHARS: usize = 1000;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NewGroup {
    #[serde(default)]
    name: String,
    description: Option<String>,
}

/// `POST /groups`.
pub(crate) async fn create_group(
    State(app): State<App>,
    scope: InTenant,
    JsonBody(body): JsonBody<NewGroup>,
) -> Reply {
    let actor = &scope.actor;
    actor.require_manage()?;
    let name = body.name.trim();
    if name.is_empty() || name.chars().count() > 128 {
        return Err(Error::invalid_argument("a group's name has 1 to 128 characters").into());
    }
    if body
        .description
        .as_deref()
        .is_some_and(|d| d.chars().count() > MAX_GROUP_DESCRIPTION_CHARS)
    {
        return Err(Error::invalid_argument(format!(
            "a group's description has at most {MAX_GROUP_DESCRIPTION_CHARS} characters"
        ))
        .into());
    }
    let mut db = app.store.client().await?;
    let tx = TenantTx::begin(&mut db, scope.tenant_id).await?;
    let group = key_groups::create(&tx, name, body.description.as_deref())
        .await
        .map_err(|e| conflict_on_unique(e, "a group with this name exists"))?;
    actor
        .audit(
            &tx,
            "group.create",
            &group.name,
            json!({ "groupId": group.id }),
        )
        .await?;
    tx.commit().await?;
    Ok((
        StatusCode::CREATED,
        Json(json!({ "group": group_view(&group) })),
    )
        .into_response())
}

/// `DELETE /groups/{id}`: its keys stop reading each other's memories.
pub(crate) async fn delete_group(
    State(app): State<App>,
    scope: InTenant,
    Path(id): Path<String>,
) -> Reply {
    let actor = &scope.actor;
    actor.require_manage()?;
    let id = parse_id(&id, "group")?;
    let mut db = app.store.client().await?;
    let tx = TenantTx::begin(&mut db, scope.tenant_id).await?;
    let members = key_groups::list(&tx)
        .await?
        .into_iter()
        .find(|g| g.id == id)
        .map(|g| g.key_ids)
        .ok_or_else(|| not_found("group"))?;
    key_groups::delete(&tx, id).await?;
    actor.audit(&tx, "group.delete", id, json!({})).await?;
    tx.commit().await?;
    for key in members {
        key_changed(&app, key).await;
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn change_member(app: &App, scope: InTenant, ids: (String, String), add: bool) -> Reply {
    let actor = &scope.actor;
    actor.require_manage()?;
    let group_id = parse_id(&ids.0, "group")?;
    let key_id = parse_id(&ids.1, "key")?;
    let mut db = app.store.client().await?;
    let tx = TenantTx::begin(&mut db, scope.tenant_id).await?;
    let group = key_groups::list(&tx)
        .await?
        .into_iter()
        .find(|g| g.id == group_id)
        .ok_or_else(|| not_found("group"))?;
    if api_keys::find(&tx, key_id).await?.is_none() {
        return Err(not_found("key").into());
    }
    let changed = if add {
        key_groups::add_member(&tx, group_id, key_id).await?
    } else {
        key_groups::remove_member(&tx, group_id, key_id).await?
    };
    if changed {
        let action = if add {
            "group.add_member"
        } else {
            "group.remove_member"
        };
        actor
            .audit(&tx, action, &group.name, json!({ "keyId": key_id }))
            .await?;
    }
    tx.commit().await?;
    // The group's keys see a different set of memories from now on.
    for key in group.key_ids.iter().chain([&key_id]) {
        key_changed(app, *key).await;
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `PUT /groups/{id}/members/{key_id}`.
pub(crate) async fn add_member(
    State(app): State<App>,
    scope: InTenant,
    Path(ids): Path<(String, String)>,
) -> Reply {
    change_member(&app, scope, ids, true).await
}

/// `DELETE /groups/{id}/members/{key_id}`.
pub(crate) async fn remove_member(
    State(app): State<App>,
    scope: InTenant,
    Path(ids): Path<(String, String)>,
) -> Reply {
    change_member(&app, scope, ids, false).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_fields_that_could_never_work_are_refused() {
        let at = |when: DateTime<Utc>| json!({ "expiresAt": when.to_rfc3339() });
        let past = key_changes(&at(Utc::now() - chrono::Duration::minutes(1))).unwrap_err();
        assert_eq!(past.code, mneme_core::ErrorCode::InvalidArgument);
        assert!(past.message.contains("revoke"), "{}", past.message);
        let future = Utc::now() + chrono::Duration::days(30);
        let changes = key_changes(&at(future)).unwrap();
        assert!(changes.expires_at.flatten().is_some());
        // A key past its expiry reads as expired.
        let mut key = ApiKey {
            id: Uuid::nil(),
            tenant_id: Uuid::nil(),
            name: "k".into(),
            prefix: "p".into(),
            permissions: vec![],
            status: "active".into(),
            default_workspace: None,
            default_mode: None,
            fragment_limit: None,
            daily_call_limit: None,
            rate_limit: None,
            expires_at: Some(Utc::now() - chrono::Duration::minutes(1)),
            created_at: Utc::now(),
        };
        assert_eq!(key_view(&key, 0, 0)["status"], "expired");
        key.status = "revoked".into();
        assert_eq!(key_view(&key, 0, 0)["status"], "revoked");
        key.status = "active".into();
        key.expires_at = Some(future);
        assert_eq!(key_view(&key, 0, 0)["status"], "active");
        // A rate limit of 0 would refuse every call; the database refuses it
        // too, so it must be a clear 400 rather than a 500.
        let zero = key_changes(&json!({ "rateLimit": 0 })).unwrap_err();
        assert!(
            zero.message.contains("`rateLimit` must be 1"),
            "{}",
            zero.message
        );
        assert!(key_changes(&json!({ "dailyCallLimit": 0 })).is_ok());
        // `null` clears an expiry.
        let cleared = key_changes(&json!({ "expiresAt": null })).unwrap();
        assert_eq!(cleared.expires_at, Some(None));
    }
}
