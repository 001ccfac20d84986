//! Operator commands against the database: migrations, tenants, keys,
//! users, consolidation on demand.

use mneme_config::Config;
use mneme_core::Permission;
use mneme_store::api_keys::{self, NewKey};
use mneme_store::{Store, TenantTx, migrate, tenants, users};
use uuid::Uuid;

use crate::{AdminsCommand, KeysCommand, TenantsCommand, UsersCommand};

pub async fn migrate(config: &Config) -> anyhow::Result<()> {
    let applied = migrate::run_with_ca_file(
        config.database.migrate_url.expose(),
        config.database.ca_file.as_deref(),
    )
    .await?;
    if applied.is_empty() {
        println!("database schema is up to date");
    }
    for migration in applied {
        println!("applied V{} {}", migration.version, migration.name);
    }
    Ok(())
}

fn store(config: &Config) -> anyhow::Result<Store> {
    Ok(Store::from_config(&config.database)?)
}

pub(crate) async fn tenant_id(store: &Store, name: &str) -> anyhow::Result<Uuid> {
    let client = store.client().await?;
    tenants::find_by_name(&client, name)
        .await?
        .map(|t| t.id)
        .ok_or_else(|| anyhow::anyhow!("no tenant named `{name}` (see `mneme tenants list`)"))
}

pub async fn tenants(config: &Config, command: TenantsCommand) -> anyhow::Result<()> {
    let store = store(config)?;
    let client = store.client().await?;
    match command {
        TenantsCommand::Create { name } => {
            tenants::validate_name(&name).map_err(anyhow::Error::msg)?;
            match tenants::create(&client, &name).await {
                Ok(tenant) => println!("created tenant {} ({})", tenant.name, tenant.id),
                Err(error) if error.is_unique_violation() => {
                    anyhow::bail!("a tenant named `{name}` already exists")
                }
                Err(error) => return Err(error.into()),
            }
        }
        TenantsCommand::List => {
            for tenant in tenants::list(&client).await? {
                println!(
                    "{}\t{}\t{}\t{}",
                    tenant.id,
                    tenant.name,
                    tenant.status,
                    tenant.created_at.to_rfc3339()
                );
            }
        }
        TenantsCommand::Suspend { name } => {
            let tenant_id = tenant_id(&store, &name).await?;
            tenants::set_status(&client, tenant_id, "suspended").await?;
            // Gateways drop every key of the tenant from their caches now.
            let mut tx_client = store.client().await?;
            let tx = TenantTx::begin(&mut tx_client, tenant_id).await?;
            let keys = api_keys::list(&tx).await?;
            drop(tx);
            if let Ok(cache) = mneme_cache::Cache::from_config(&config.redis).await {
                for key in keys {
                    cache.announce_key_revoked(&key.id.to_string()).await;
                }
            }
            println!("suspended tenant {name}");
        }
        TenantsCommand::Resume { name } => {
            let tenant_id = tenant_id(&store, &name).await?;
            tenants::set_status(&client, tenant_id, "active").await?;
            println!("resumed tenant {name}");
        }
    }
    Ok(())
}

pub async fn keys(config: &Config, command: KeysCommand) -> anyhow::Result<()> {
    let store = store(config)?;
    match command {
        KeysCommand::Create {
            tenant,
            name,
            permissions,
            workspace,
            fragment_limit,
        } => {
            let fragment_limit = match fragment_limit.as_deref() {
                None => config.remember.default_fragment_limit,
                Some("unlimited" | "none") => None,
                Some(value) => Some(value.parse::<i32>().ok().filter(|n| *n >= 0).ok_or_else(
                    || {
                        anyhow::anyhow!(
                            "--fragment-limit must be a non-negative number or `unlimited`"
                        )
                    },
                )?),
            };
            let permissions =
                Permission::parse_list(&permissions).map_err(|e| anyhow::anyhow!(e.message))?;
            let tenant_id = tenant_id(&store, &tenant).await?;
            let mut client = store.client().await?;
            let tx = TenantTx::begin(&mut client, tenant_id).await?;
            let created = api_keys::create(
                &tx,
                &NewKey {
                    name: name.clone(),
                    permissions,
                    default_workspace: workspace,
                    fragment_limit,
                    expires_at: None,
                },
            )
            .await;
            let (key, raw) = match created {
                Ok(created) => created,
                Err(error) if error.is_unique_violation() => {
                    anyhow::bail!("tenant `{tenant}` already has a key named `{name}`")
                }
                Err(error) => return Err(error.into()),
            };
            tx.commit().await?;
            let permissions: Vec<&str> = key.permissions.iter().map(|p| p.as_str()).collect();
            eprintln!(
                "created key {} ({}) for tenant {tenant} with permissions {}; it is shown only once:",
                key.name,
                key.id,
                permissions.join(",")
            );
            println!("{raw}");
        }
        KeysCommand::List { tenant } => {
            let tenant_id = tenant_id(&store, &tenant).await?;
            let mut client = store.client().await?;
            let tx = TenantTx::begin(&mut client, tenant_id).await?;
            for key in api_keys::list(&tx).await? {
                let permissions: Vec<&str> = key.permissions.iter().map(|p| p.as_str()).collect();
                println!(
                    "{}\t{}\tmn_{}_…\t{}\t{}",
                    key.id,
                    key.name,
                    key.prefix,
                    key.status_at(chrono::Utc::now()),
                    permissions.join(",")
                );
            }
        }
        KeysCommand::Revoke { tenant, id } => {
            let tenant_id = tenant_id(&store, &tenant).await?;
            let key_id: Uuid = id
                .parse()
                .map_err(|_| anyhow::anyhow!("`{id}` is not a key id"))?;
            let mut client = store.client().await?;
            let tx = TenantTx::begin(&mut client, tenant_id).await?;
            let revoked = api_keys::revoke(&tx, key_id).await?;
            tx.commit().await?;
            if !revoked {
                anyhow::bail!("tenant `{tenant}` has no active key {id}");
            }
            // Gateways drop the key from their caches now.
            if let Ok(cache) = mneme_cache::Cache::from_config(&config.redis).await {
                cache.announce_key_revoked(&id).await;
            }
            println!("revoked key {id}");
        }
    }
    Ok(())
}

/// Consolidates one tenant (by name) or every active tenant now, whatever
/// the schedule says, printing each stage's result as it finishes.
pub async fn consolidate(
    config: &Config,
    tenant: Option<&str>,
    dry_run: bool,
) -> anyhow::Result<()> {
    let store = store(config)?;
    let tenant_ids = match tenant {
        Some(name) => vec![(name.to_owned(), tenant_id(&store, name).await?)],
        None => {
            let client = store.client().await?;
            tenants::list(&client)
                .await?
                .into_iter()
                .filter(|t| t.status == "active")
                .map(|t| (t.name, t.id))
                .collect()
        }
    };
    let consolidator = mneme_consolidator::Consolidator::new(store, config.consolidation.clone());
    let mut failed = false;
    for (name, id) in tenant_ids {
        println!(
            "{name}{}",
            if dry_run {
                " (dry run: nothing is changed)"
            } else {
                ""
            }
        );
        let run = consolidator
            .run_now(id, dry_run, |stage| match (&stage.error, &stage.skipped) {
                (None, Some(why)) => println!("  {:<26} skipped: {why}", stage.stage),
                (None, None) => println!(
                    "  {:<26} {:>7} rows  {:>6} ms",
                    stage.stage, stage.affected, stage.millis
                ),
                (Some(error), _) => println!("  {:<26} failed: {error}", stage.stage),
            })
            .await?;
        match run {
            Some(run) => failed |= run.failed(),
            None => println!("  skipped: another consolidation of this tenant is running"),
        }
    }
    if failed {
        anyhow::bail!("some stages failed (see above)");
    }
    Ok(())
}

/// Puts the tenant's parked fragments back into the embedding queue.
pub async fn requeue_embeddings(config: &Config, tenant: &str) -> anyhow::Result<()> {
    let store = store(config)?;
    let tenant_id = tenant_id(&store, tenant).await?;
    let mut client = store.client().await?;
    let tx = TenantTx::begin(&mut client, tenant_id).await?;
    let requeued = mneme_store::fragments::requeue_parked_embeddings(&tx).await?;
    tx.commit().await?;
    println!("{requeued} parked fragments are queued for embedding again");
    Ok(())
}

/// The new password: generated (and returned for printing), or the first
/// line of standard input.
fn new_password(generate: bool) -> anyhow::Result<(String, bool)> {
    if generate {
        let password = base64::Engine::encode(
            &base64::engine::general_purpose::URL_SAFE_NO_PAD,
            rand::random::<[u8; 18]>(),
        );
        return Ok((password, true));
    }
    let mut line = String::new();
    std::io::stdin().read_line(&mut line)?;
    let password = line.trim_end_matches(['\r', '\n']).to_owned();
    mneme_core::password::validate(&password).map_err(|e| anyhow::anyhow!(e.message))?;
    Ok((password, false))
}

async fn hash_password(password: String) -> anyhow::Result<String> {
    tokio::task::spawn_blocking(move || mneme_core::password::hash(&password))
        .await?
        .map_err(|e| anyhow::anyhow!(e.message))
}

pub async fn users(config: &Config, command: UsersCommand) -> anyhow::Result<()> {
    let store = store(config)?;
    match command {
        UsersCommand::Create {
            tenant,
            email,
            role,
            generate_password,
        } => {
            let role = users::Role::parse(&role)
                .ok_or_else(|| anyhow::anyhow!("--role must be owner, admin or member"))?;
            let tenant_id = tenant_id(&store, &tenant).await?;
            let (password, generated) = new_password(generate_password)?;
            let hash = hash_password(password.clone()).await?;
            let mut client = store.client().await?;
            let tx = TenantTx::begin(&mut client, tenant_id).await?;
            match users::create(&tx, &email, role, &hash).await {
                Ok(user) => {
                    tx.commit().await?;
                    println!(
                        "created user {} ({}) in {tenant} as {}",
                        user.email,
                        user.id,
                        role.as_str()
                    );
                    if generated {
                        println!("{password}");
                    }
                }
                Err(error) if error.is_unique_violation() => {
                    anyhow::bail!("a user with this email already exists")
                }
                Err(error) if error.is_check_violation() => {
                    anyhow::bail!("`{email}` is not a valid email address")
                }
                Err(error) => return Err(error.into()),
            }
        }
        UsersCommand::List { tenant } => {
            let tenant_id = tenant_id(&store, &tenant).await?;
            let mut client = store.client().await?;
            let tx = TenantTx::begin(&mut client, tenant_id).await?;
            for user in users::list(&tx).await? {
                println!(
                    "{}\t{}\t{}\t{}\t{}",
                    user.id,
                    user.email,
                    user.role.as_str(),
                    user.status,
                    user.last_login_at
                        .map(|t| t.to_rfc3339())
                        .unwrap_or_else(|| "never".into())
                );
            }
        }
        UsersCommand::ResetPassword {
            tenant,
            email,
            generate_password,
        } => {
            let tenant_id = tenant_id(&store, &tenant).await?;
            let (password, generated) = new_password(generate_password)?;
            let hash = hash_password(password.clone()).await?;
            let mut client = store.client().await?;
            let tx = TenantTx::begin(&mut client, tenant_id).await?;
            if !users::set_password(&tx, &email, &hash).await? {
                anyhow::bail!("no user `{email}` in tenant `{tenant}`");
            }
            tx.commit().await?;
            println!("password of {email} replaced");
            if generated {
                println!("{password}");
            }
        }
    }
    Ok(())
}

pub async fn admins(config: &Config, command: AdminsCommand) -> anyhow::Result<()> {
    use mneme_store::platform_admins;
    let store = store(config)?;
    let client = store.client().await?;
    match command {
        AdminsCommand::Create {
            email,
            generate_password,
        } => {
            let (password, generated) = new_password(generate_password)?;
            let hash = hash_password(password.clone()).await?;
            match platform_admins::create(&client, &email, &hash).await {
                Ok(admin) => {
                    println!("created platform admin {} ({})", admin.email, admin.id);
                    if generated {
                        println!("{password}");
                    }
                }
                Err(error) if error.is_unique_violation() => {
                    anyhow::bail!("a platform admin with this email already exists")
                }
                Err(error) if error.is_check_violation() => {
                    anyhow::bail!("`{email}` is not a valid email address")
                }
                Err(error) => return Err(error.into()),
            }
        }
        AdminsCommand::List => {
            for admin in platform_admins::list(&client).await? {
                println!(
                    "{}\t{}\t{}\t{}",
                    admin.id,
                    admin.email,
                    admin.status,
                    admin
                        .last_login_at
                        .map(|t| t.to_rfc3339())
                        .unwrap_or_else(|| "never".into())
                );
            }
        }
        AdminsCommand::ResetPassword {
            email,
            generate_password,
        } => {
            let (password, generated) = new_password(generate_password)?;
            let hash = hash_password(password.clone()).await?;
            if !platform_admins::set_password(&client, &email, &hash).await? {
                anyhow::bail!("no platform admin `{email}`");
            }
            println!("password of {email} replaced");
            if generated {
                println!("{password}");
            }
        }
    }
    Ok(())
}
