//! The system under test: a whole mneme stack on a fresh database (the
//! end-to-end tests' [`Stack`]), tenants with their own MCP clients, typed
//! `remember`/`recall` calls, and the wait for the embedding worker.

use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use mneme_e2e_tests::{Mcp, Stack};
use mneme_test_support::{ALL_PERMISSIONS, create_tenant};
use rmcp::model::CallToolRequestParams;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::generated;

/// A running stack and the settings it was started with.
#[derive(Debug)]
pub struct Bench {
    pub stack: Stack,
    pub embedder: String,
    /// Settings passed on top of the stack's defaults, for the report.
    pub settings: Vec<(String, String)>,
}

/// How often [`Bench::spawn_autoanalyze`] looks for tables to analyse: the
/// `autovacuum_naptime` docs/SCALING.md recommends (PostgreSQL's default is a
/// minute, during which a tenant's import is planned on statistics taken
/// before it).
pub const AUTOANALYZE_NAPTIME: Duration = Duration::from_secs(10);

/// Per-key request and write limits lifted for every benchmark (a
/// `--setting` of the same name wins).
const UNLIMITED_KEY: &[(&str, &str)] = &[
    ("MNEME_RATE_LIMIT_KEY", "1000000"),
    ("MNEME_RATE_LIMIT_KEY_WRITES", "1000000"),
];

impl Bench {
    /// Starts `mneme up` in-process on a fresh database and Redis prefix.
    ///
    /// Needs `MNEME_TEST_DATABASE_URL`, `MNEME_TEST_REDIS_URL` and, for `e5`,
    /// `MNEME_E5_DIR` (all set by `~/.local/share/mneme/env`). The check here
    /// turns the stack's panics on a missing variable into an error message.
    pub async fn start(embedder: &str, settings: &[(String, String)]) -> anyhow::Result<Self> {
        let mut required = vec!["MNEME_TEST_DATABASE_URL", "MNEME_TEST_REDIS_URL"];
        if embedder == "e5" {
            required.push("MNEME_E5_DIR");
        }
        for name in required {
            if std::env::var_os(name).is_none() {
                bail!(
                    "{name} is not set; run `source ~/.local/share/mneme/env` \
                     (written by ./deploy/local/setup.sh) first"
                );
            }
        }
        // The per-key limits are meant for one agent's pace; a benchmark
        // stores a whole conversation in seconds through one key.
        let mut extra: Vec<(&str, &str)> = UNLIMITED_KEY
            .iter()
            .filter(|(key, _)| !settings.iter().any(|(k, _)| k == key))
            .copied()
            .collect();
        extra.extend(settings.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        let stack = Stack::start(embedder, &extra).await;
        Ok(Self {
            stack,
            embedder: embedder.to_owned(),
            settings: settings.to_vec(),
        })
    }

    /// A new tenant with one read/write key and an initialized MCP client.
    pub async fn tenant(&self, name: &str) -> anyhow::Result<Tenant> {
        self.tenant_with(name, ALL_PERMISSIONS).await
    }

    /// A new tenant whose key holds `permissions` (`admin` to manage
    /// upstreams), with an initialized MCP client.
    pub async fn tenant_with(
        &self,
        name: &str,
        permissions: &[mneme_core::Permission],
    ) -> anyhow::Result<Tenant> {
        let store = self.stack.db.store();
        let tenant = create_tenant(&store, name, permissions).await;
        let mcp = self.stack.mcp(&tenant.api_key).await;
        Ok(Tenant {
            id: tenant.tenant_id,
            name: tenant.name,
            api_key: tenant.api_key,
            mcp,
        })
    }

    /// Fragments of `tenants` still waiting for their embedding.
    pub async fn pending_embeddings(&self, tenants: &[Uuid]) -> i64 {
        let mut pending = 0;
        for tenant in tenants {
            pending += self
                .stack
                .db
                .count_in_tenant(*tenant, "embedding IS NULL")
                .await;
        }
        pending
    }

    /// Polls until every fragment of every tenant has an embedding (only
    /// then does recall see the whole corpus through its vector layer).
    pub async fn wait_for_embeddings(
        &self,
        tenants: &[Uuid],
        timeout: Duration,
    ) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let pending = self.pending_embeddings(tenants).await;
            if pending == 0 {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!(
                    "{pending} fragments still have no embedding after {timeout:?}; \
                     is the embedding worker running?"
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Refreshes the planner's statistics of the fragments, as autovacuum
    /// does some time after a bulk load. Without them a partition that was
    /// empty when last analysed is planned as holding one row, and vector
    /// search scans and sorts the whole tenant instead of using its HNSW
    /// index (1.1 s against 2.5 ms at 100,000 fragments); test clusters
    /// often run with autovacuum off, as this project's CI machine does.
    pub async fn analyze(&self) -> anyhow::Result<()> {
        let client = self.stack.db.owner_client().await;
        client
            .batch_execute("ANALYZE mneme.fragments")
            .await
            .context("analysing mneme.fragments")
    }

    /// Analyses the schema's tables in the background as autovacuum would,
    /// when the server runs without it: every [`AUTOANALYZE_NAPTIME`], each
    /// table changed by more than its analyse threshold + scale factor since
    /// it was last analysed (the table's own `autovacuum_analyze_*` options,
    /// migrations/V29, else PostgreSQL's defaults, 50 rows + 10 %). Seeding a tenant from empty is
    /// then planned on statistics that follow it, as in production, rather
    /// than on a partition believed empty (see [`Self::analyze`]). `None`
    /// where autovacuum is on. The task ends when the handle is aborted.
    pub async fn spawn_autoanalyze(&self) -> anyhow::Result<Option<tokio::task::JoinHandle<()>>> {
        let client = self.stack.db.owner_client().await;
        let autovacuum: String = client
            .query_one("SELECT current_setting('autovacuum')", &[])
            .await
            .context("reading the autovacuum setting")?
            .get(0);
        if autovacuum == "on" {
            return Ok(None);
        }
        Ok(Some(tokio::spawn(async move {
            loop {
                tokio::time::sleep(AUTOANALYZE_NAPTIME).await;
                let due = client
                    .query(
                        "SELECT format('%I.%I', s.schemaname, s.relname)
                           FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid
                          WHERE s.schemaname = 'mneme'
                            AND s.n_mod_since_analyze >
                                coalesce((SELECT split_part(o, '=', 2)::float8
                                            FROM unnest(c.reloptions) o
                                           WHERE o LIKE 'autovacuum_analyze_threshold=%'), 50)
                                + coalesce((SELECT split_part(o, '=', 2)::float8
                                              FROM unnest(c.reloptions) o
                                             WHERE o LIKE 'autovacuum_analyze_scale_factor=%'), 0.1)
                                  * greatest(c.reltuples, 0)",
                        &[],
                    )
                    .await;
                let due = match due {
                    Ok(due) => due,
                    Err(error) => {
                        eprintln!(
                            "background analysis stopped: listing changed tables failed: {error}"
                        );
                        return;
                    }
                };
                for table in due {
                    let table: String = table.get(0);
                    if let Err(error) = client.batch_execute(&format!("ANALYZE {table}")).await {
                        eprintln!("background ANALYZE of {table} failed: {error}");
                    }
                }
            }
        })))
    }

    /// The model id and dimension stored with `tenant`'s vectors, as the
    /// worker wrote them (so the report states what was measured, not what
    /// was configured).
    pub async fn embedding_model(&self, tenant: Uuid) -> anyhow::Result<Option<(String, i32)>> {
        let mut client = self.stack.db.owner_client().await;
        let tx = client.transaction().await?;
        // Row-level security is forced on the owner too: scope to the tenant.
        tx.execute(
            "SELECT set_config('mneme.tenant_id', $1, true)",
            &[&tenant.to_string()],
        )
        .await?;
        let row = tx
            .query_opt(
                "SELECT embedding_model, vector_dims(embedding) FROM mneme.fragments
                  WHERE tenant_id = current_setting('mneme.tenant_id')::uuid
                    AND embedding IS NOT NULL
                  LIMIT 1",
                &[],
            )
            .await
            .context("reading the embedding model")?;
        Ok(row.map(|row| {
            let model: Option<String> = row.get(0);
            (model.unwrap_or_default(), row.get(1))
        }))
    }

    /// Stops every service; the test database is dropped with the stack.
    pub async fn shutdown(self) -> anyhow::Result<()> {
        self.stack.shutdown().await
    }
}

/// A tenant and an MCP client holding its key.
#[derive(Debug)]
pub struct Tenant {
    pub id: Uuid,
    pub name: String,
    /// The key the client holds, for the REST routes (`/v1/surface`).
    pub api_key: String,
    pub mcp: Mcp,
}

/// The parts of a `remember` result the benchmark uses.
#[derive(Debug, Clone, Deserialize)]
pub struct Remembered {
    pub id: String,
    /// `created`, `duplicate` or `replayed`.
    pub outcome: String,
    pub redactions: u32,
}

/// The parts of a `recall` result the benchmark uses.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Recalled {
    pub fragments: Vec<RecalledFragment>,
    pub truncated_by_budget: bool,
}

/// One recalled memory.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RecalledFragment {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub score: f64,
    #[serde(default)]
    pub similarity: Option<f64>,
    #[serde(default)]
    pub matched_by: Vec<String>,
}

/// The counts of a `batch_remember` result.
#[derive(Debug, Clone, Deserialize)]
struct BatchRemembered {
    created: usize,
    rejected: usize,
    results: Vec<Value>,
}

/// The seed of the haystack's generated memories (any fixed value: the same
/// haystack in every run and tenant).
pub const HAYSTACK_SEED: u64 = 0x6861_7973;
/// Memories per `batch_remember` call (the tool's limit).
const HAYSTACK_BATCH: usize = 200;

/// A `remember` that was refused with a tool error (e.g. too short).
#[derive(Debug, Clone, Serialize)]
pub struct Rejection {
    pub item: String,
    pub error: String,
}

impl Tenant {
    /// Ends the MCP session while the stack still runs (a client dropped
    /// after shutdown logs an error for the session it cannot delete).
    pub async fn close(self) {
        // The only error is a panicked client task, which has nothing left to close.
        let _ = self.mcp.client.cancel().await;
    }

    /// Calls `remember`; `Err(message)` inside `Ok` when mneme refused the
    /// memory, so a run can count refusals instead of aborting on them.
    pub async fn remember(&self, arguments: Value) -> anyhow::Result<Result<Remembered, String>> {
        match call(&self.mcp, "remember", arguments).await? {
            Ok(value) => Ok(Ok(
                serde_json::from_value(value).context("unexpected remember result")?
            )),
            Err(message) => Ok(Err(message)),
        }
    }

    /// Stores `count` generated memories ([`crate::generated`], seed
    /// [`HAYSTACK_SEED`]) through `batch_remember`, 200 a call: memories of
    /// a software team in English and Korean that no benchmark query is
    /// about, among which the corpus must still be found. Returns how many
    /// were stored (the generator repeats a few of its texts).
    pub async fn store_haystack(&self, count: usize) -> anyhow::Result<usize> {
        let mut stored = 0;
        let mut next = 0;
        while next < count {
            let end = (next + HAYSTACK_BATCH).min(count);
            let items: Vec<Value> = (next..end)
                .map(|index| {
                    Value::Object(generated::memory(HAYSTACK_SEED, 0, index as u64).arguments())
                })
                .collect();
            let result = call(&self.mcp, "batch_remember", json!({"fragments": items}))
                .await?
                .map_err(|message| anyhow::anyhow!("batch_remember failed: {message}"))?;
            let created: BatchRemembered =
                serde_json::from_value(result).context("unexpected batch_remember result")?;
            if created.rejected > 0 {
                bail!(
                    "{} generated memories were rejected: {:?}",
                    created.rejected,
                    created.results
                );
            }
            stored += created.created;
            next = end;
            if next % 2_000 == 0 || next == count {
                eprintln!("{}: haystack {next}/{count}", self.name);
            }
        }
        Ok(stored)
    }

    /// Calls `recall` and measures the round trip as the client sees it.
    pub async fn recall(&self, arguments: Value) -> anyhow::Result<(Recalled, Duration)> {
        let started = Instant::now();
        let result = call(&self.mcp, "recall", arguments).await?;
        let elapsed = started.elapsed();
        let value = result.map_err(|message| anyhow::anyhow!("recall failed: {message}"))?;
        let recalled = serde_json::from_value(value).context("unexpected recall result")?;
        Ok((recalled, elapsed))
    }
}

/// One `tools/call`: the structured result, or the tool error's text.
/// Protocol failures are errors. (`Mcp::ok` would panic on a tool error,
/// which a benchmark must report, not die of.)
async fn call(
    mcp: &Mcp,
    tool: &'static str,
    arguments: Value,
) -> anyhow::Result<Result<Value, String>> {
    let Value::Object(arguments) = arguments else {
        bail!("{tool} arguments must be a JSON object");
    };
    let result = mcp
        .client
        .call_tool(CallToolRequestParams::new(tool).with_arguments(arguments))
        .await
        .with_context(|| format!("tools/call {tool} failed at the protocol level"))?;
    let text = || {
        result
            .content
            .first()
            .and_then(|c| c.as_text())
            .map(|t| t.text.clone())
            .unwrap_or_default()
    };
    if result.is_error == Some(true) {
        return Ok(Err(text()));
    }
    match &result.structured_content {
        Some(value) => Ok(Ok(value.clone())),
        None => Ok(Ok(serde_json::from_str(&text()).with_context(|| {
            format!("{tool} returned neither structured content nor JSON text")
        })?)),
    }
}

/// Where and on what the benchmark ran.
#[derive(Debug, Clone, Serialize)]
pub struct Environment {
    /// RFC 3339, UTC.
    pub date: String,
    pub commit: Option<String>,
    /// Whether the working tree had uncommitted changes.
    pub dirty: Option<bool>,
    pub cpus: usize,
    pub cpu_model: Option<String>,
    pub release_build: bool,
}

impl Environment {
    pub fn capture() -> Self {
        // The commit of the source tree this binary was built from (the
        // services under test are compiled into it).
        let git = |args: &[&str]| {
            std::process::Command::new("git")
                .args(args)
                .current_dir(env!("CARGO_MANIFEST_DIR"))
                .output()
                .ok()
                .filter(|out| out.status.success())
                .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned())
        };
        let cpu_model = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|info| {
                info.lines()
                    .find(|line| line.starts_with("model name"))
                    .and_then(|line| line.split(':').nth(1))
                    .map(|name| name.trim().to_owned())
            });
        Self {
            date: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            commit: git(&["rev-parse", "HEAD"]),
            dirty: git(&["status", "--porcelain"]).map(|out| !out.is_empty()),
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            cpu_model,
            release_build: !cfg!(debug_assertions),
        }
    }
}

/// A `--setting KEY=VALUE` argument: an `MNEME_*` setting for the stack.
pub fn parse_setting(raw: &str) -> Result<(String, String), String> {
    let (key, value) = raw
        .split_once('=')
        .ok_or_else(|| format!("expected KEY=VALUE, got {raw:?}"))?;
    if !key.starts_with("MNEME_") {
        return Err(format!("{key} is not a MNEME_* setting"));
    }
    Ok((key.to_owned(), value.to_owned()))
}
