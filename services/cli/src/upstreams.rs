//! `mneme upstreams …` and `mneme surfacing …`: a tenant's upstream MCP
//! servers, managed against the database with the same validation as the
//! admin API (`mneme_mcp_upstream::registration`); every change is
//! announced so gateway pods reload at once.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, bail};
use mneme_config::Config;
use mneme_mcp_upstream::registration::{UpstreamInput, new_settings};
use mneme_mcp_upstream::sealed::HeaderKey;
use mneme_mcp_upstream::ssrf::UrlPolicy;
use mneme_store::upstreams;
use mneme_store::{Store, TenantTx};
use uuid::Uuid;

use crate::UpstreamsCommand;

fn policy(config: &Config) -> UrlPolicy {
    UrlPolicy {
        allow_private: config.proxy.allow_private_upstreams,
        resolve_timeout: Duration::from_secs(5),
    }
}

fn header_key(config: &Config) -> anyhow::Result<Option<HeaderKey>> {
    config
        .proxy
        .header_key
        .as_ref()
        .map(|key| HeaderKey::from_base64(key.expose()))
        .transpose()
        .map_err(anyhow::Error::msg)
}

/// `Name: value` pairs from `--header`.
fn parse_headers(headers: &[String]) -> anyhow::Result<BTreeMap<String, String>> {
    headers
        .iter()
        .map(|header| {
            let (name, value) = header
                .split_once(':')
                .with_context(|| format!("a header is `Name: value`, not `{header}`"))?;
            Ok((name.trim().to_owned(), value.trim().to_owned()))
        })
        .collect()
}

async fn announce(config: &Config, tenant_id: Uuid) {
    if let Ok(cache) = mneme_cache::Cache::from_config(&config.redis).await {
        cache
            .announce_upstreams_changed(&tenant_id.to_string())
            .await;
    }
}

pub async fn run(config: &Config, command: UpstreamsCommand) -> anyhow::Result<()> {
    let store = Store::from_config(&config.database)?;
    match command {
        UpstreamsCommand::Add {
            tenant,
            name,
            url,
            prefix,
            transport,
            header,
            compression,
            max_chars,
            no_surfacing,
        } => {
            let tenant_id = crate::admin::tenant_id(&store, &tenant).await?;
            let input = UpstreamInput {
                name: Some(name.clone()),
                prefix,
                transport: Some(transport),
                url: Some(url),
                headers: (!header.is_empty())
                    .then(|| parse_headers(&header))
                    .transpose()?,
                surfacing_enabled: Some(!no_surfacing),
                compression: compression.map(Some),
                max_result_chars: max_chars.map(Some),
                ..UpstreamInput::default()
            };
            let settings = input
                .apply(&name, new_settings(), &policy(config))
                .map_err(anyhow::Error::msg)?;
            let headers = input
                .sealed_headers(header_key(config)?.as_ref(), tenant_id)
                .map_err(anyhow::Error::msg)?
                .unwrap_or_default();
            let mut db = store.client().await?;
            let tx = TenantTx::begin(&mut db, tenant_id).await?;
            if upstreams::count(&tx).await? >= config.proxy.max_upstreams {
                bail!(
                    "tenant `{tenant}` already has {} upstreams (MNEME_PROXY_MAX_UPSTREAMS)",
                    config.proxy.max_upstreams
                );
            }
            let created = match upstreams::create(&tx, &name, &settings, &headers).await {
                Ok(created) => created,
                Err(error) if error.is_unique_violation() => {
                    bail!("tenant `{tenant}` already has an upstream with this name or prefix")
                }
                Err(error) => return Err(error.into()),
            };
            tx.commit().await?;
            announce(config, tenant_id).await;
            println!(
                "added upstream {} ({}): tools appear as {}__<tool>",
                created.name, created.id, created.settings.prefix
            );
        }
        UpstreamsCommand::List { tenant } => {
            let tenant_id = crate::admin::tenant_id(&store, &tenant).await?;
            let mut db = store.client().await?;
            let tx = TenantTx::begin(&mut db, tenant_id).await?;
            for upstream in upstreams::list(&tx).await? {
                let s = &upstream.settings;
                println!(
                    "{}\t{}__\t{}\t{}\t{}\tsurfacing {}\theaders: {}",
                    upstream.name,
                    s.prefix,
                    s.transport,
                    s.url,
                    if s.enabled { "enabled" } else { "disabled" },
                    if s.surfacing_enabled { "on" } else { "off" },
                    if upstream.headers.names.is_empty() {
                        "-".to_owned()
                    } else {
                        upstream.headers.names.join(",")
                    },
                );
            }
        }
        UpstreamsCommand::Remove { tenant, name } => {
            let tenant_id = crate::admin::tenant_id(&store, &tenant).await?;
            let mut db = store.client().await?;
            let tx = TenantTx::begin(&mut db, tenant_id).await?;
            if !upstreams::delete(&tx, &name).await? {
                bail!("tenant `{tenant}` has no upstream named `{name}`");
            }
            tx.commit().await?;
            announce(config, tenant_id).await;
            println!("removed upstream {name}");
        }
    }
    Ok(())
}

/// `mneme surfacing <server> [on|off] --tenant T`.
pub async fn surfacing(
    config: &Config,
    tenant: &str,
    name: &str,
    state: Option<&str>,
) -> anyhow::Result<()> {
    let store = Store::from_config(&config.database)?;
    let tenant_id = crate::admin::tenant_id(&store, tenant).await?;
    let mut db = store.client().await?;
    let tx = TenantTx::begin(&mut db, tenant_id).await?;
    let upstream = upstreams::find(&tx, name)
        .await?
        .with_context(|| format!("tenant `{tenant}` has no upstream named `{name}`"))?;
    let enabled = match state {
        None => {
            let state = if upstream.settings.surfacing_enabled {
                "on"
            } else {
                "off"
            };
            println!("surfacing on {name}: {state}");
            return Ok(());
        }
        Some("on") => true,
        Some("off") => false,
        Some(other) => bail!("expected `on` or `off`, not `{other}`"),
    };
    let mut settings = upstream.settings;
    settings.surfacing_enabled = enabled;
    upstreams::update(&tx, name, &settings, None).await?;
    tx.commit().await?;
    announce(config, tenant_id).await;
    println!(
        "surfacing on {name}: {}",
        if enabled { "on" } else { "off" }
    );
    Ok(())
}
