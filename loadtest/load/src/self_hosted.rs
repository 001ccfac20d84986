//! `--self-hosted`: a whole mneme stack in this process on a fresh
//! database (mneme-bench's [`Bench`], the end-to-end tests' stack), with
//! tenants and keys of its own, so a load test needs nothing but
//! `source ~/.local/share/mneme/env`. The database is dropped afterwards.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::bail;
use mneme_bench::harness::Bench;
use mneme_core::Permission;
use mneme_test_support::{ALL_PERMISSIONS, create_tenant};
use serde_json::json;
use uuid::Uuid;

use crate::target::Target;
use crate::upstream::UPSTREAM_NAME;

/// Settings a load test needs on top of the stack's defaults; `--setting`
/// overrides each. The request limits (meant for one agent) would answer
/// most of a load test with 429, the fragment quota would stop a long
/// `remember` run, surfacing would skip repeated queries, and session reuse
/// would fold every virtual client of a key into one session (and a
/// `connect-storm` into no new sessions at all).
pub const LOAD_SETTINGS: &[(&str, &str)] = &[
    ("MNEME_SESSION_REUSE_BY_TOKEN", "false"),
    ("MNEME_RATE_LIMIT_TENANT", "1000000000"),
    ("MNEME_RATE_LIMIT_KEY", "1000000000"),
    ("MNEME_RATE_LIMIT_KEY_WRITES", "1000000000"),
    ("MNEME_DEFAULT_FRAGMENT_LIMIT", "unlimited"),
    // The echo upstream of `surfacing` listens on loopback.
    ("MNEME_PROXY_ALLOW_PRIVATE_UPSTREAMS", "true"),
    ("MNEME_SURFACING_RATE_PER_MINUTE", "1000000000"),
    ("MNEME_SURFACING_COOLDOWN_MS", "0"),
    ("MNEME_SURFACING_DEDUP_TTL_SECS", "0"),
];

#[derive(Debug, Clone)]
pub struct SelfHostedOptions {
    /// `MNEME_EMBEDDER` (`e5`, `hash`, …).
    pub embedder: String,
    pub tenants: usize,
    /// `MNEME_*` settings over [`LOAD_SETTINGS`].
    pub settings: Vec<(String, String)>,
    /// Keys with `admin` (needed to register the echo upstream).
    pub admin_keys: bool,
}

/// A tenant of the self-hosted stack.
#[derive(Clone)]
pub struct HostedTenant {
    pub id: Uuid,
    pub name: String,
    pub api_key: String,
}

impl std::fmt::Debug for HostedTenant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostedTenant")
            .field("id", &self.id)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

#[derive(Debug)]
pub struct SelfHosted {
    bench: Bench,
    pub tenants: Vec<HostedTenant>,
    /// Autovacuum's analyses, where the server runs without it.
    autoanalyze: Option<tokio::task::JoinHandle<()>>,
}

impl SelfHosted {
    pub async fn start(options: &SelfHostedOptions) -> anyhow::Result<Self> {
        if options.tenants == 0 {
            bail!("--tenants must be at least 1");
        }
        let mut settings: BTreeMap<String, String> = LOAD_SETTINGS
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        settings.extend(options.settings.iter().cloned());
        let settings: Vec<(String, String)> = settings.into_iter().collect();
        let bench = Bench::start(&options.embedder, &settings).await?;
        let store = bench.stack.db.store();
        let permissions: &[Permission] = if options.admin_keys {
            &[Permission::Admin]
        } else {
            ALL_PERMISSIONS
        };
        let mut tenants = Vec::with_capacity(options.tenants);
        for index in 0..options.tenants {
            let tenant = create_tenant(&store, &format!("load-{index}"), permissions).await;
            tenants.push(HostedTenant {
                id: tenant.tenant_id,
                name: tenant.name,
                api_key: tenant.api_key,
            });
        }
        let autoanalyze = bench.spawn_autoanalyze().await?;
        Ok(Self {
            bench,
            tenants,
            autoanalyze,
        })
    }

    /// The stack's MCP endpoint and one key per tenant.
    pub fn target(&self) -> Target {
        Target {
            url: self.bench.stack.mcp_url(),
            keys: self.tenants.iter().map(|t| t.api_key.clone()).collect(),
        }
    }

    /// `MNEME_EMBEDDER` of the stack.
    pub fn embedder(&self) -> &str {
        &self.bench.embedder
    }

    /// The settings given on top of the stack's defaults.
    pub fn settings(&self) -> &[(String, String)] {
        &self.bench.settings
    }

    /// Registers `url` as every tenant's upstream [`UPSTREAM_NAME`] with
    /// surfacing on (needs `admin_keys`).
    pub async fn register_upstream(&self, url: &str) -> anyhow::Result<()> {
        let http = reqwest::Client::new();
        for tenant in &self.tenants {
            let response = http
                .post(format!(
                    "http://{}/v1/upstreams",
                    self.bench.stack.http_addr
                ))
                .bearer_auth(&tenant.api_key)
                .json(&json!({"name": UPSTREAM_NAME, "url": url, "surfacingEnabled": true}))
                .send()
                .await?;
            if !response.status().is_success() {
                bail!(
                    "registering the echo upstream for {} failed: {} {}",
                    tenant.name,
                    response.status(),
                    response.text().await.unwrap_or_default()
                );
            }
        }
        Ok(())
    }

    /// Waits until every tenant's memories have their embedding, so recall
    /// searches the whole store by meaning from the first request, then
    /// refreshes the planner's statistics (see `Bench::analyze`).
    pub async fn wait_for_embeddings(&self, timeout: Duration) -> anyhow::Result<()> {
        let ids: Vec<Uuid> = self.tenants.iter().map(|t| t.id).collect();
        self.bench.wait_for_embeddings(&ids, timeout).await?;
        // A seeded stack is planned as a loaded one would be in production.
        self.bench.analyze().await
    }

    /// The configuration the stack runs with.
    pub fn config(&self) -> &mneme_config::Config {
        &self.bench.stack.config
    }

    /// Memories of all tenants still waiting for their vector.
    pub async fn pending_embeddings(&self) -> i64 {
        let ids: Vec<Uuid> = self.tenants.iter().map(|t| t.id).collect();
        self.bench.pending_embeddings(&ids).await
    }

    /// Memories of all tenants still waiting for their automatic links.
    pub async fn pending_auto_links(&self) -> anyhow::Result<i64> {
        let mut client = self.bench.stack.db.owner_client().await;
        let mut pending = 0;
        for tenant in &self.tenants {
            let tx = client.transaction().await?;
            tx.execute(
                "SELECT set_config('mneme.tenant_id', $1, true)",
                &[&tenant.id.to_string()],
            )
            .await?;
            let count: i64 = tx
                .query_one(
                    "SELECT count(*) FROM mneme.auto_link_queue WHERE tenant_id = $1",
                    &[&tenant.id],
                )
                .await?
                .get(0);
            tx.commit().await?;
            pending += count;
        }
        Ok(pending)
    }

    /// The model id stored with the first tenant's vectors, if any.
    pub async fn embedding_model(&self) -> anyhow::Result<Option<String>> {
        let Some(tenant) = self.tenants.first() else {
            return Ok(None);
        };
        Ok(self
            .bench
            .embedding_model(tenant.id)
            .await?
            .map(|(model, _)| model))
    }

    /// Stops the stack; its database is dropped.
    pub async fn shutdown(self) -> anyhow::Result<()> {
        if let Some(task) = &self.autoanalyze {
            task.abort();
        }
        self.bench.shutdown().await
    }
}
