//! Fault injection: mneme's services as separate processes on a private
//! PostgreSQL and Redis (`mneme_e2e_tests::processes`), driven by MCP
//! clients over HTTP while the test crashes what they depend on:
//!
//! - Redis killed for `MNEME_FAULT_OUTAGE_SECS` (30 by default) under mixed
//!   load on two gateways: memory tools keep answering, a session made
//!   during the outage continues on the other pod; recovery is automatic.
//! - Redis frozen (SIGSTOP) for `MNEME_FAULT_HANG_SECS` (15 by default)
//!   under mixed load: no call fails, and service is normal again at once.
//! - Every Redis connection reset three times (through `fault_proxy`):
//!   no call fails.
//! - PostgreSQL crashed (`pg_ctl stop -m immediate`) and started again:
//!   calls fail fast with a retryable error, no process dies, full service
//!   within 5 s of the database being back.
//! - The services' link to PostgreSQL (through `fault_proxy`, which every
//!   cluster here has) slowed by `MNEME_FAULT_LINK_DELAY_MS` (20) each way:
//!   calls slow down and none fails. Every connection reset three times:
//!   only calls at a reset fail, retryably, and the pools heal. Held for
//!   `MNEME_FAULT_HOLD_SECS` (10; open and silent, as behind a partition):
//!   once the services' probes find the database silent, calls fail at
//!   once (those already waiting too) instead of after their deadline, and
//!   full service is back within 5 s of the release.
//! - A recall and a remember instance killed with SIGKILL under load: the
//!   gateway fails reads and keyed writes over to the other instance; no
//!   write is lost or doubled.
//! - A recall and a remember instance frozen (SIGSTOP: connections open,
//!   no answers): reads and keyed writes leave it after
//!   `MNEME_BACKEND_ATTEMPT_TIMEOUT_MS` for the other instance, instead of
//!   failing after the whole deadline.
//! - Unkeyed writes to a frozen remember instance: never sent again to the
//!   other one (that could store them twice), and reported as of unknown
//!   outcome (`timeout`, "may or may not have taken effect").
//! - A gateway pod killed under its clients: they go on on the other pod
//!   with their session ids, losing only the calls in flight.
//! - No lost writes: `MNEME_FAULT_WRITES` (10 000 by default) remembers
//!   with idempotency keys while backends are killed and restarted at
//!   random; every acknowledged one exists exactly once, and every one gets
//!   its embedding.
//!
//! Slow or dead upstream MCP servers are covered in `tests/proxy.rs`. Each
//! test prints one `RELIABILITY {json}` line with its measured figures;
//! `docs/RELIABILITY.md` reports them.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mneme_e2e_tests::fault_proxy::{FaultProxy, LinkFault};
use mneme_e2e_tests::processes::{
    HttpMcp, Outcome, PrivatePostgres, PrivateRedis, ServiceProcess, TempDir, free_port, wait_until,
};
use mneme_store::{Store, StoreOptions};

use fred::prelude::*;
use mneme_test_support::{ALL_PERMISSIONS, create_tenant};
use rand::Rng;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// A setting of these tests: `MNEME_FAULT_*` from the environment, or the
/// default.
fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

const INTERNAL_TOKEN: &str = "fault-test-internal-token-0123456789";

/// How many processes of each kind a cluster runs.
struct Shape {
    gateways: usize,
    recall: usize,
    remember: usize,
    consolidator: bool,
    settings: &'static [(&'static str, &'static str)],
}

/// mneme as processes on a PostgreSQL and a Redis of its own.
struct Cluster {
    pg: PrivatePostgres,
    /// The services' only way to PostgreSQL (the test's own inspection
    /// connections go direct).
    pg_link: FaultProxy,
    /// The services' only way to Redis.
    redis_link: FaultProxy,
    redis: PrivateRedis,
    recall: Vec<ServiceProcess>,
    remember: Vec<ServiceProcess>,
    gateways: Vec<ServiceProcess>,
    consolidator: Option<ServiceProcess>,
    /// Base URL of each gateway, in the order of `gateways`.
    http: Vec<String>,
    api_key: String,
    tenant_id: uuid::Uuid,
    _logs: TempDir,
}

impl Cluster {
    async fn start(shape: Shape) -> Self {
        let pg = PrivatePostgres::start().await;
        let pg_link = FaultProxy::start(([127, 0, 0, 1], pg.port).into()).await;
        let redis = PrivateRedis::start().await;
        let redis_link = FaultProxy::start(([127, 0, 0, 1], redis.port).into()).await;
        let logs = TempDir::new("faults");
        let store = Store::connect(&pg.app_url, &StoreOptions::default()).unwrap();
        let tenant = create_tenant(&store, "acme", ALL_PERMISSIONS).await;

        let mut common: Vec<(String, String)> = vec![
            ("MNEME_DATABASE_URL".into(), pg.app_url_via(pg_link.port)),
            (
                "MNEME_REDIS_URL".into(),
                format!("redis://127.0.0.1:{}", redis_link.port),
            ),
            ("MNEME_EMBEDDER".into(), "hash".into()),
            ("MNEME_INTERNAL_TOKEN".into(), INTERNAL_TOKEN.into()),
            ("MNEME_LOG".into(), "info".into()),
            ("MNEME_EMBED_SWEEP_SECS".into(), "1".into()),
            ("MNEME_EMBED_RETRY_BACKOFF_SECS".into(), "1".into()),
            // Load tests, not rate-limit tests: one key writes thousands.
            ("MNEME_RATE_LIMIT_TENANT".into(), "1000000".into()),
            ("MNEME_RATE_LIMIT_KEY".into(), "1000000".into()),
            ("MNEME_RATE_LIMIT_KEY_WRITES".into(), "1000000".into()),
        ];
        common.extend(
            shape
                .settings
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
        );
        let with = |extra: &[(&str, String)]| {
            let mut env = common.clone();
            env.extend(extra.iter().map(|(k, v)| ((*k).to_owned(), v.clone())));
            env
        };
        let instances = |kind: &str, count: usize, addr_setting: &str| {
            let mut urls = Vec::new();
            let processes = (0..count)
                .map(|i| {
                    let addr = format!("127.0.0.1:{}", free_port());
                    urls.push(format!("http://{addr}"));
                    ServiceProcess::start(
                        &format!("{kind}-{i}"),
                        &format!("mneme-{kind}"),
                        with(&[(addr_setting, addr)]),
                        &logs.0,
                    )
                })
                .collect::<Vec<_>>();
            (processes, urls.join(","))
        };
        let (recall, recall_urls) = instances("recall", shape.recall, "MNEME_RECALL_GRPC_ADDR");
        let (remember, remember_urls) =
            instances("remember", shape.remember, "MNEME_REMEMBER_GRPC_ADDR");
        let mut http = Vec::new();
        let gateways = (0..shape.gateways)
            .map(|i| {
                let port = free_port();
                http.push(format!("http://127.0.0.1:{port}"));
                ServiceProcess::start(
                    &format!("gateway-{i}"),
                    "mneme-gateway",
                    with(&[
                        ("MNEME_HTTP_ADDR", format!("127.0.0.1:{port}")),
                        ("MNEME_PUBLIC_URL", format!("http://127.0.0.1:{port}")),
                        ("MNEME_RECALL_URL", recall_urls.clone()),
                        ("MNEME_REMEMBER_URL", remember_urls.clone()),
                    ]),
                    &logs.0,
                )
            })
            .collect();
        let consolidator = shape.consolidator.then(|| {
            ServiceProcess::start(
                "consolidator",
                "mneme-consolidator",
                // Only the embedding worker: maintenance stages would merge
                // the look-alike fragments these tests count.
                with(&[("MNEME_CONSOLIDATION", "false".to_owned())]),
                &logs.0,
            )
        });
        let mut cluster = Self {
            pg,
            pg_link,
            redis,
            redis_link,
            recall,
            remember,
            gateways,
            consolidator,
            http,
            api_key: tenant.api_key.clone(),
            tenant_id: tenant.tenant_id,
            _logs: logs,
        };
        cluster.wait_ready().await;
        cluster
    }

    /// Waits until every gateway reports ready (database, Redis, backends).
    async fn wait_ready(&mut self) {
        let client = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        for (http, gateway) in self.http.iter().zip(&self.gateways) {
            let ready = format!("{http}/ready");
            loop {
                if let Ok(response) = client.get(&ready).send().await
                    && response.status().is_success()
                {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "the cluster never became ready; {}'s log:\n{}",
                    gateway.name,
                    gateway.log()
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }

    /// A client with a session, on the first gateway.
    async fn client(&self) -> HttpMcp {
        let mut mcp = HttpMcp::new(&self.http[0], &self.api_key);
        let outcome = mcp.initialize().await;
        assert!(outcome.is_ok(), "initialize: {outcome:?}");
        mcp
    }

    /// Every process still running that was not killed on purpose.
    fn assert_none_crashed(&mut self) {
        let processes = self
            .recall
            .iter_mut()
            .chain(&mut self.remember)
            .chain(&mut self.gateways)
            .chain(&mut self.consolidator);
        for process in processes {
            if let Some(status) = process.exited() {
                panic!(
                    "{} exited by itself ({status}); its log:\n{}",
                    process.name,
                    process.log()
                );
            }
        }
    }

    /// Logs of every process, crashes and errors included, hold neither
    /// the API key nor the internal token.
    fn assert_no_secret_in_logs(&self) {
        let processes = self
            .recall
            .iter()
            .chain(&self.remember)
            .chain(&self.gateways)
            .chain(&self.consolidator);
        for process in processes {
            let log = process.log();
            for secret in [self.api_key.as_str(), INTERNAL_TOKEN] {
                assert!(
                    !log.contains(secret),
                    "{}'s log holds a secret",
                    process.name
                );
            }
        }
    }

    /// A database session of the owner role inside the tenant (row-level
    /// security is forced even on the owner).
    async fn tenant_client(&self) -> tokio_postgres::Client {
        let client = self.pg.connect("user=mneme_owner dbname=mneme").await;
        client
            .execute(
                "SELECT set_config('mneme.tenant_id', $1, false)",
                &[&self.tenant_id.to_string()],
            )
            .await
            .unwrap();
        client
    }

    /// Fragments of the tenant by idempotency key, counted in the database.
    async fn count_by_idempotency_key(&self) -> BTreeMap<String, i64> {
        self.tenant_client()
            .await
            .query(
                "SELECT idempotency_key, count(*) FROM mneme.fragments
                  WHERE tenant_id = $1 AND idempotency_key IS NOT NULL
                  GROUP BY idempotency_key",
                &[&self.tenant_id],
            )
            .await
            .unwrap()
            .iter()
            .map(|row| (row.get(0), row.get(1)))
            .collect()
    }

    /// Fragments of the tenant still waiting for their embedding.
    async fn unembedded(&self) -> i64 {
        self.tenant_client()
            .await
            .query_one(
                "SELECT count(*) FROM mneme.fragments
                  WHERE tenant_id = $1 AND embedding IS NULL",
                &[&self.tenant_id],
            )
            .await
            .unwrap()
            .get(0)
    }
}

/// Outcomes by phase and kind, with their latencies.
#[derive(Debug, Default)]
struct Tally {
    counts: BTreeMap<(String, String), u64>,
    examples: BTreeMap<String, String>,
    /// Latencies of successful calls, by phase.
    ok_latencies: BTreeMap<String, Vec<Duration>>,
    /// Latencies of failed calls, by phase.
    failed_latencies: BTreeMap<String, Vec<Duration>>,
    /// Every distinct message of a tool error.
    tool_error_messages: std::collections::BTreeSet<String>,
}

impl Tally {
    fn record(&mut self, phase: &str, tool: &str, outcome: &Outcome, took: Duration) {
        let kind = outcome.kind();
        *self
            .counts
            .entry((phase.to_owned(), format!("{tool} {kind}")))
            .or_default() += 1;
        if outcome.is_ok() {
            self.ok_latencies
                .entry(phase.to_owned())
                .or_default()
                .push(took);
        } else {
            self.failed_latencies
                .entry(phase.to_owned())
                .or_default()
                .push(took);
            if let Outcome::ToolError(error) = outcome
                && let Some(message) = error.pointer("/error/message").and_then(Value::as_str)
            {
                self.tool_error_messages.insert(message.to_owned());
            }
            self.examples
                .entry(kind)
                .or_insert_with(|| format!("{outcome:?}").chars().take(400).collect());
        }
    }

    fn count(&self, phase: &str, predicate: impl Fn(&str) -> bool) -> u64 {
        self.counts
            .iter()
            .filter(|((p, kind), _)| p == phase && predicate(kind))
            .map(|(_, n)| n)
            .sum()
    }

    fn ok(&self, phase: &str) -> u64 {
        self.count(phase, |kind| kind.ends_with(" ok"))
    }

    fn failed(&self, phase: &str) -> u64 {
        self.count(phase, |kind| !kind.ends_with(" ok"))
    }

    /// The slowest failed call of `phase` (zero without failures).
    fn slowest_failure(&self, phase: &str) -> Duration {
        self.failed_latencies
            .get(phase)
            .and_then(|took| took.iter().max().copied())
            .unwrap_or_default()
    }

    /// Failed calls of `phase` that took longer than `limit`.
    fn failed_slower_than(&self, phase: &str, limit: Duration) -> usize {
        self.failed_latencies
            .get(phase)
            .map_or(0, |took| took.iter().filter(|t| **t > limit).count())
    }

    /// The `q` quantile of successful calls' latencies in `phase`.
    fn ok_quantile(&self, phase: &str, q: f64) -> Duration {
        let mut latencies = self.ok_latencies.get(phase).cloned().unwrap_or_default();
        latencies.sort();
        let rank = ((latencies.len() as f64 * q).ceil() as usize).saturating_sub(1);
        latencies.get(rank).copied().unwrap_or_default()
    }

    fn report(&self) -> Value {
        let mut phases: BTreeMap<&str, BTreeMap<&str, u64>> = BTreeMap::new();
        for ((phase, kind), n) in &self.counts {
            phases.entry(phase).or_default().insert(kind, *n);
        }
        json!({
            "outcomes": phases,
            "slowest_failure_ms": self.failed_latencies.keys()
                .map(|phase| (phase.clone(), self.slowest_failure(phase).as_millis()))
                .collect::<BTreeMap<_, _>>(),
            "failure_examples": self.examples,
            "ok_p50_ms": self.ok_latencies.keys()
                .map(|phase| (phase.clone(), self.ok_quantile(phase, 0.5).as_millis()))
                .collect::<BTreeMap<_, _>>(),
            "ok_p95_ms": self.ok_latencies.keys()
                .map(|phase| (phase.clone(), self.ok_quantile(phase, 0.95).as_millis()))
                .collect::<BTreeMap<_, _>>(),
        })
    }
}

/// The load phase clients record their outcomes under.
#[derive(Clone)]
struct Phase(Arc<Mutex<&'static str>>);

impl Phase {
    fn new() -> Self {
        Self(Arc::new(Mutex::new("before")))
    }
    fn set(&self, phase: &'static str) {
        *self.0.lock().unwrap() = phase;
    }
    fn get(&self) -> &'static str {
        *self.0.lock().unwrap()
    }
}

/// A client alternating `remember` (with an idempotency key) and `recall`
/// until `stop`, re-initializing when its session is refused, as MCP
/// clients do. A call that gets no answer moves it to the next gateway
/// with the same session id, as a load balancer would.
async fn mixed_client(
    mut mcp: HttpMcp,
    gateways: Vec<String>,
    id: usize,
    phase: Phase,
    tally: Arc<Mutex<Tally>>,
    stop: CancellationToken,
) {
    let mut n = 0u64;
    let mut gateway = 0;
    while !stop.is_cancelled() {
        n += 1;
        let current = phase.get();
        let calls = [
            (
                "remember",
                json!({
                    "content": format!("Client {id} observation {n}: the deploy pipeline ran step {n}."),
                    "topic": format!("load-{id}"),
                    "type": "fact",
                    "idempotencyKey": format!("mixed-{id}-{n}"),
                }),
            ),
            (
                "recall",
                json!({"text": format!("deploy pipeline step {n}"), "topic": format!("load-{id}")}),
            ),
        ];
        let mut failed = false;
        for (tool, arguments) in calls {
            let started = Instant::now();
            let outcome = mcp.call(tool, arguments).await;
            tally
                .lock()
                .unwrap()
                .record(current, tool, &outcome, started.elapsed());
            match outcome {
                Outcome::Ok(_) => {}
                // A refused session is re-initialized, as MCP clients do.
                Outcome::Http(404, _) => {
                    let outcome = mcp.initialize().await;
                    tally
                        .lock()
                        .unwrap()
                        .record(current, "initialize", &outcome, Duration::ZERO);
                    failed = true;
                }
                // No answer: the next gateway, same session.
                Outcome::Transport(_) => {
                    gateway = (gateway + 1) % gateways.len();
                    mcp = mcp.via(&gateways[gateway]);
                    failed = true;
                }
                _ => failed = true,
            }
        }
        if failed {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Mixed clients running against a cluster.
struct Load {
    tally: Arc<Mutex<Tally>>,
    stop: CancellationToken,
    clients: tokio::task::JoinSet<()>,
}

impl Load {
    /// Starts `clients` mixed clients, each with a session on the first
    /// gateway.
    async fn start(cluster: &Cluster, clients: usize, phase: &Phase) -> Self {
        let tally = Arc::new(Mutex::new(Tally::default()));
        let stop = CancellationToken::new();
        let mut tasks = tokio::task::JoinSet::new();
        for id in 0..clients {
            tasks.spawn(mixed_client(
                cluster.client().await,
                cluster.http.clone(),
                id,
                phase.clone(),
                Arc::clone(&tally),
                stop.clone(),
            ));
        }
        Self {
            tally,
            stop,
            clients: tasks,
        }
    }

    /// Stops the clients, checks that no process crashed or logged a
    /// secret, and returns what the clients saw.
    async fn finish(mut self, cluster: &mut Cluster) -> Tally {
        self.stop.cancel();
        while self.clients.join_next().await.is_some() {}
        cluster.assert_none_crashed();
        cluster.assert_no_secret_in_logs();
        Arc::into_inner(self.tally)
            .expect("every client ended")
            .into_inner()
            .unwrap()
    }
}

/// Remembers and recalls once with a fresh session: `true` when both work.
async fn full_service(cluster: &Cluster, probe: &str) -> bool {
    let mut mcp = HttpMcp::new(&cluster.http[0], &cluster.api_key);
    if !mcp.initialize().await.is_ok() {
        return false;
    }
    let remembered = mcp
        .call(
            "remember",
            json!({"content": format!("Probe {probe} after the outage."), "topic": "probe", "type": "fact"}),
        )
        .await;
    remembered.is_ok()
        && mcp
            .call("recall", json!({"text": "probe after the outage"}))
            .await
            .is_ok()
}

/// How long until [`full_service`] holds, polling for up to 30 s.
async fn time_to_full_service(cluster: &Cluster, probe: &str) -> Option<Duration> {
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(30) {
        if full_service(cluster, probe).await {
            return Some(started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

/// Every acknowledged keyed `remember` of `phases` landed, exactly once; a
/// failed one (its outcome unknown to the client) landed at most once.
async fn assert_keyed_writes_truthful(
    cluster: &Cluster,
    tally: &Tally,
    phases: &[&str],
    report: &Value,
) {
    let acknowledged: u64 = phases
        .iter()
        .map(|phase| tally.count(phase, |kind| kind == "remember ok"))
        .sum();
    let unknown: u64 = phases
        .iter()
        .map(|phase| {
            tally.count(phase, |kind| {
                kind.starts_with("remember ") && kind != "remember ok"
            })
        })
        .sum();
    let counts = cluster.count_by_idempotency_key().await;
    let doubled: Vec<_> = counts.iter().filter(|(_, n)| **n != 1).collect();
    assert!(doubled.is_empty(), "written more than once: {doubled:?}");
    let stored = counts.len() as u64;
    assert!(
        (acknowledged..=acknowledged + unknown).contains(&stored),
        "{stored} stored, {acknowledged} acknowledged, {unknown} unknown: {report:#}"
    );
}

/// Calls failed in `phase` only with a code that tells the client to retry:
/// a tool error `unavailable` or `timeout`, or HTTP 503 when the credential
/// itself cannot be checked.
fn assert_failures_retryable(tally: &Tally, phase: &str, report: &Value) {
    let unexpected = tally.count(phase, |kind| {
        !(kind.ends_with(" ok")
            || kind.ends_with("tool:unavailable")
            || kind.ends_with("tool:timeout")
            || kind.ends_with("http:503"))
    });
    assert_eq!(
        unexpected, 0,
        "failures a client would not retry: {report:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_redis_down_memory_tools_keep_answering_and_recover_by_themselves() {
    let outage = Duration::from_secs(setting("MNEME_FAULT_OUTAGE_SECS", 30));
    let mut cluster = Cluster::start(Shape {
        gateways: 2,
        recall: 1,
        remember: 1,
        consolidator: false,
        settings: &[],
    })
    .await;
    let phase = Phase::new();
    let load = Load::start(&cluster, 4, &phase).await;
    tokio::time::sleep(Duration::from_secs(3)).await;

    phase.set("outage");
    cluster.redis.kill().await;
    tokio::time::sleep(outage).await;
    // New sessions during the outage work too (their records cannot be
    // written, so they live on this pod alone until Redis is back).
    let during = cluster.client().await;
    let outcome = during
        .call("recall", json!({"text": "deploy pipeline"}))
        .await;
    assert!(
        outcome.is_ok(),
        "a new session during the outage: {outcome:?}"
    );
    // Without Redis, the other pod has no record of it: it recreates the
    // session from its signed id and the caller's credentials.
    let elsewhere = during
        .via(&cluster.http[1])
        .call("recall", json!({"text": "deploy pipeline"}))
        .await;
    assert!(
        elsewhere.is_ok(),
        "that session on the other pod during the outage: {elsewhere:?}"
    );

    phase.set("after");
    cluster.redis.restart().await;
    let restarted = Instant::now();
    // Recovery is automatic: the next new session is stored in Redis again.
    let redis = fred::clients::Client::new(
        fred::types::config::Config::from_url(&cluster.redis.url()).unwrap(),
        None,
        None,
        None,
    );
    redis.init().await.unwrap();
    let mut recovered_after = None;
    while restarted.elapsed() < Duration::from_secs(30) {
        let mut mcp = HttpMcp::new(&cluster.http[0], &cluster.api_key);
        if mcp.initialize().await.is_ok() {
            let session = mcp.session.clone().unwrap();
            let stored: i64 = redis
                .exists(format!("mneme:sess:{{{session}}}"))
                .await
                .unwrap_or(0);
            if stored == 1 && full_service(&cluster, "redis").await {
                recovered_after = Some(restarted.elapsed());
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let tally = load.finish(&mut cluster).await;
    let report = json!({
        "scenario": "redis_down",
        "outage_secs": outage.as_secs(),
        "recovered_ms": recovered_after.map(|d| d.as_millis()),
        "tally": tally.report(),
    });
    println!("RELIABILITY {report}");
    let recovered_after =
        recovered_after.unwrap_or_else(|| panic!("sessions never reached Redis again: {report:#}"));
    assert!(tally.ok("outage") > 20, "too little load ran: {report:#}");
    // Memory tools answer through the outage: no failed call at all, and
    // none waits for Redis (a command to a disconnected client would wait
    // 500 ms before giving up).
    assert_eq!(tally.failed("outage"), 0, "{report:#}");
    let slow = tally.ok_quantile("outage", 0.95);
    assert!(
        slow < Duration::from_millis(400),
        "p95 {slow:?} during the outage: {report:#}"
    );
    assert_eq!(tally.failed("after"), 0, "{report:#}");
    assert!(recovered_after < Duration::from_secs(10), "{report:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_redis_hung_memory_tools_keep_answering_and_recover_by_themselves() {
    let hang = Duration::from_secs(setting("MNEME_FAULT_HANG_SECS", 15));
    let mut cluster = Cluster::start(Shape {
        gateways: 1,
        recall: 1,
        remember: 1,
        consolidator: false,
        settings: &[],
    })
    .await;
    let phase = Phase::new();
    let load = Load::start(&cluster, 4, &phase).await;
    tokio::time::sleep(Duration::from_secs(3)).await;

    // Hung, not dead: connections stay open and no command is answered or
    // refused, so the client stays "connected"; only unanswered commands
    // (mneme-cache's pings) tell.
    phase.set("hung");
    cluster.redis.pause();
    tokio::time::sleep(hang).await;
    phase.set("after");
    cluster.redis.resume();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let tally = load.finish(&mut cluster).await;
    let report = json!({
        "scenario": "redis_hung",
        "hang_secs": hang.as_secs(),
        "tally": tally.report(),
    });
    println!("RELIABILITY {report}");
    assert!(tally.ok("hung") > 10, "too little load ran: {report:#}");
    assert_eq!(tally.failed("hung"), 0, "{report:#}");
    // Once the pings have found Redis hung, calls skip it as when it is
    // down (without that: p95 2.0 s, every command waiting 500 ms).
    let slow = tally.ok_quantile("hung", 0.95);
    assert!(
        slow < Duration::from_millis(400),
        "p95 {slow:?} while Redis hung: {report:#}"
    );
    assert_eq!(tally.failed("after"), 0, "{report:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reset_redis_connections_cost_no_call() {
    let mut cluster = Cluster::start(Shape {
        gateways: 1,
        recall: 1,
        remember: 1,
        consolidator: true,
        settings: &[],
    })
    .await;
    let phase = Phase::new();
    let load = Load::start(&cluster, 4, &phase).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    // Every process's Redis connections break, three times; the clients
    // reconnect on their own, and Redis is optional for memory tools.
    phase.set("resets");
    for _ in 0..3 {
        cluster.redis_link.reset_all().await;
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    phase.set("after");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let tally = load.finish(&mut cluster).await;
    let report =
        json!({"scenario": "redis_connections_reset", "resets": 3, "tally": tally.report()});
    println!("RELIABILITY {report}");
    assert!(tally.ok("resets") > 10, "too little load ran: {report:#}");
    for phase in ["before", "resets", "after"] {
        assert_eq!(tally.failed(phase), 0, "{report:#}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_postgres_crash_fails_calls_fast_and_service_is_back_within_5_s() {
    let outage = Duration::from_secs(setting("MNEME_FAULT_PG_OUTAGE_SECS", 10));
    let mut cluster = Cluster::start(Shape {
        gateways: 1,
        recall: 1,
        remember: 1,
        consolidator: true,
        settings: &[],
    })
    .await;
    let phase = Phase::new();
    let load = Load::start(&cluster, 4, &phase).await;
    tokio::time::sleep(Duration::from_secs(3)).await;

    phase.set("outage");
    cluster.pg.crash();
    tokio::time::sleep(outage).await;
    phase.set("recovery");
    cluster.pg.restart();
    let recovered_after = time_to_full_service(&cluster, "postgres").await;
    phase.set("after");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let tally = load.finish(&mut cluster).await;
    let report = json!({
        "scenario": "postgres_crash",
        "outage_secs": outage.as_secs(),
        "recovered_ms": recovered_after.map(|d| d.as_millis()),
        "tally": tally.report(),
    });
    println!("RELIABILITY {report}");
    let recovered_after =
        recovered_after.unwrap_or_else(|| panic!("service never came back: {report:#}"));
    assert!(
        recovered_after <= Duration::from_secs(5),
        "full service took {recovered_after:?} after PostgreSQL was back: {report:#}"
    );
    // During the outage calls fail, fast, and say so with a retryable code:
    // a tool error `unavailable`, or HTTP 503 when the credential itself
    // cannot be checked (the gateway's key cache expired).
    assert!(tally.failed("outage") > 0, "{report:#}");
    assert_failures_retryable(&tally, "outage", &report);
    let slowest = tally.slowest_failure("outage");
    assert!(
        slowest < Duration::from_secs(5),
        "a failure took {slowest:?}: {report:#}"
    );
    assert_eq!(tally.failed("after"), 0, "{report:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_slow_database_link_slows_calls_and_fails_none() {
    let delay = Duration::from_millis(setting("MNEME_FAULT_LINK_DELAY_MS", 20));
    let mut cluster = Cluster::start(Shape {
        gateways: 1,
        recall: 1,
        remember: 1,
        consolidator: false,
        settings: &[],
    })
    .await;
    let phase = Phase::new();
    let load = Load::start(&cluster, 4, &phase).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    phase.set("slow");
    cluster.pg_link.set(LinkFault::Latency(delay));
    tokio::time::sleep(Duration::from_secs(8)).await;
    phase.set("after");
    cluster.pg_link.set(LinkFault::None);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let tally = load.finish(&mut cluster).await;
    let report = json!({
        "scenario": "postgres_link_slow",
        "delay_ms_each_way": delay.as_millis(),
        "tally": tally.report(),
    });
    println!("RELIABILITY {report}");
    assert!(tally.ok("slow") > 10, "too little load ran: {report:#}");
    for phase in ["before", "slow", "after"] {
        assert_eq!(tally.failed(phase), 0, "{report:#}");
    }
    // The delay reached the database's answers (a call makes several
    // round trips), and left with the fault.
    assert!(
        tally.ok_quantile("slow", 0.5) > tally.ok_quantile("before", 0.5) + delay * 2,
        "{report:#}"
    );
    assert!(
        tally.ok_quantile("after", 0.5) < tally.ok_quantile("slow", 0.5),
        "{report:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reset_database_connections_fail_only_the_calls_at_each_reset() {
    let mut cluster = Cluster::start(Shape {
        gateways: 1,
        recall: 1,
        remember: 1,
        consolidator: true,
        settings: &[],
    })
    .await;
    let phase = Phase::new();
    let load = Load::start(&cluster, 4, &phase).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    // Every pooled connection of every service breaks, three times.
    phase.set("resets");
    for _ in 0..3 {
        cluster.pg_link.reset_all().await;
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    phase.set("after");
    tokio::time::sleep(Duration::from_secs(4)).await;
    let tally = load.finish(&mut cluster).await;
    let report =
        json!({"scenario": "postgres_connections_reset", "resets": 3, "tally": tally.report()});
    println!("RELIABILITY {report}");
    assert!(tally.ok("resets") > 10, "too little load ran: {report:#}");
    // A call whose connection broke under it may fail, retryably; the pools
    // replace broken connections, so the next calls succeed.
    assert_failures_retryable(&tally, "resets", &report);
    // At most the calls in flight at each reset fail (counted in the phase
    // they started in), and those that took a pooled connection whose
    // reset its driver had not read yet (deadpool's fast recycling checks
    // only whether a connection is known closed).
    let failed = tally.failed("before") + tally.failed("resets");
    assert!(
        failed <= 3 * 2 * 4,
        "{failed} failures for 3 resets of 4 clients' connections: {report:#}"
    );
    assert_eq!(tally.failed("after"), 0, "{report:#}");
    assert_keyed_writes_truthful(&cluster, &tally, &["before", "resets", "after"], &report).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_held_database_link_fails_calls_in_bounded_time_and_heals_when_released() {
    let hold = Duration::from_secs(setting("MNEME_FAULT_HOLD_SECS", 10));
    let mut cluster = Cluster::start(Shape {
        gateways: 1,
        recall: 1,
        remember: 1,
        consolidator: true,
        settings: &[],
    })
    .await;
    const CLIENTS: usize = 4;
    let phase = Phase::new();
    let load = Load::start(&cluster, CLIENTS, &phase).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    // Connections stay open and nothing is answered: neither a refused
    // connection nor a reset tells the services, only their own probes.
    phase.set("held");
    cluster.pg_link.set(LinkFault::Hold);
    tokio::time::sleep(hold).await;
    // The HTTP APIs answer at once too: what needs the database with 503,
    // what does not (metadata) as usual.
    let http = reqwest::Client::new();
    let started = Instant::now();
    let sign_in = http
        .post(format!("{}/admin/api/session", cluster.http[0]))
        .json(&json!({"email": "ops@example.com", "password": "a long enough password"}))
        .send()
        .await
        .unwrap()
        .status();
    let metadata = http
        .get(format!(
            "{}/.well-known/oauth-protected-resource",
            cluster.http[0]
        ))
        .send()
        .await
        .unwrap()
        .status();
    let apis_took = started.elapsed();
    phase.set("recovery");
    cluster.pg_link.set(LinkFault::None);
    let recovered_after = time_to_full_service(&cluster, "held-link").await;
    phase.set("after");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let tally = load.finish(&mut cluster).await;
    let report = json!({
        "scenario": "postgres_link_held",
        "hold_secs": hold.as_secs(),
        "recovered_ms": recovered_after.map(|d| d.as_millis()),
        "tally": tally.report(),
    });
    println!("RELIABILITY {report}");
    let recovered_after =
        recovered_after.unwrap_or_else(|| panic!("service never came back: {report:#}"));
    assert!(
        recovered_after <= Duration::from_secs(5),
        "full service took {recovered_after:?} after the link was released: {report:#}"
    );
    assert_eq!((sign_in.as_u16(), metadata.as_u16()), (503, 200));
    // Tool calls cut by a backend say what a client needs to know.
    assert!(
        tally
            .tool_error_messages
            .iter()
            .any(|message| message.contains("may or may not have taken effect")),
        "{:?}",
        tally.tool_error_messages
    );
    assert!(apis_took < Duration::from_secs(1), "{apis_took:?}");
    // The calls waiting on the database when it went silent wait out the
    // backend deadline (one per client); once the services' probes find it
    // silent, calls fail at once instead of each waiting 10 s.
    assert_failures_retryable(&tally, "held", &report);
    assert!(
        tally.failed_slower_than("held", Duration::from_secs(2)) <= CLIENTS,
        "more slow failures than calls in flight: {report:#}"
    );
    assert!(
        tally.failed("held") > 20,
        "calls did not fail fast while the database was silent: {report:#}"
    );
    assert_eq!(tally.failed("after"), 0, "{report:#}");
    assert_keyed_writes_truthful(
        &cluster,
        &tally,
        &["before", "held", "recovery", "after"],
        &report,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killed_backend_instances_cost_no_read_and_no_keyed_write() {
    let mut cluster = Cluster::start(Shape {
        gateways: 1,
        recall: 2,
        remember: 2,
        consolidator: false,
        settings: &[("MNEME_BACKEND_EJECT_SECS", "2")],
    })
    .await;
    let phase = Phase::new();
    let load = Load::start(&cluster, 6, &phase).await;
    tokio::time::sleep(Duration::from_secs(3)).await;

    // One instance of each backend dies under load, then comes back; then
    // the other one dies.
    phase.set("killed");
    cluster.recall[0].kill().await;
    cluster.remember[0].kill().await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    cluster.recall[0].restart();
    cluster.remember[0].restart();
    tokio::time::sleep(Duration::from_secs(3)).await;
    cluster.recall[1].kill().await;
    cluster.remember[1].kill().await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    phase.set("after");
    cluster.recall[1].restart();
    cluster.remember[1].restart();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let tally = load.finish(&mut cluster).await;
    let report = json!({"scenario": "backend_killed", "tally": tally.report()});
    println!("RELIABILITY {report}");
    assert!(tally.ok("killed") > 50, "too little load ran: {report:#}");
    assert_eq!(tally.failed("killed"), 0, "{report:#}");
    assert_eq!(tally.failed("after"), 0, "{report:#}");
    // No call failed, so every keyed remember landed exactly once.
    assert_keyed_writes_truthful(&cluster, &tally, &["before", "killed", "after"], &report).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hung_backend_instance_costs_no_call_only_the_attempt_timeout() {
    let mut cluster = Cluster::start(Shape {
        gateways: 1,
        recall: 2,
        remember: 2,
        consolidator: false,
        settings: &[
            ("MNEME_BACKEND_ATTEMPT_TIMEOUT_MS", "1000"),
            ("MNEME_BACKEND_TIMEOUT_MS", "10000"),
            ("MNEME_BACKEND_EJECT_SECS", "3"),
        ],
    })
    .await;
    let phase = Phase::new();
    let load = Load::start(&cluster, 6, &phase).await;
    tokio::time::sleep(Duration::from_secs(3)).await;

    // Frozen, not dead: the connections stay open and nothing answers, so
    // only a deadline tells the gateway. Long enough for several ejection
    // periods to end and the hung instances to be tried again.
    // Paused first: a call counted as "hung" never reached the instances
    // before they froze (one they were executing can hold row locks that
    // its retry on the other instance then waits for).
    cluster.recall[0].pause();
    cluster.remember[0].pause();
    phase.set("hung");
    tokio::time::sleep(Duration::from_secs(12)).await;
    phase.set("after");
    cluster.recall[0].resume();
    cluster.remember[0].resume();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let tally = load.finish(&mut cluster).await;
    let slowest = tally.ok_quantile("hung", 1.0);
    let report = json!({
        "scenario": "backend_hung",
        "slowest_ok_ms": slowest.as_millis(),
        "tally": tally.report(),
    });
    println!("RELIABILITY {report}");
    assert!(tally.ok("hung") > 50, "too little load ran: {report:#}");
    // Without the attempt timeout, every call round robin sent to a frozen
    // instance failed after the whole 10 s deadline.
    assert_eq!(tally.failed("hung"), 0, "{report:#}");
    assert!(
        slowest < Duration::from_secs(6),
        "a call waited {slowest:?} on the hung instance: {report:#}"
    );
    assert_eq!(tally.failed("after"), 0, "{report:#}");
    // A keyed remember abandoned on the frozen instance and sent again to
    // the other one landed at most once; a failed one (its row locked by
    // the frozen instance's transaction) may have landed when that instance
    // resumed.
    assert_keyed_writes_truthful(&cluster, &tally, &["before", "hung", "after"], &report).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_unkeyed_write_left_unanswered_is_not_repeated_and_reported_as_unknown() {
    let mut cluster = Cluster::start(Shape {
        gateways: 1,
        recall: 1,
        remember: 2,
        consolidator: false,
        settings: &[
            ("MNEME_BACKEND_ATTEMPT_TIMEOUT_MS", "1000"),
            ("MNEME_BACKEND_TIMEOUT_MS", "3000"),
        ],
    })
    .await;
    // Frozen: it has the calls round robin sends it and answers none.
    cluster.remember[0].pause();
    let mut writes = tokio::task::JoinSet::new();
    for i in 0..6 {
        // A session each: JSON-RPC ids are per session.
        let mcp = cluster.client().await;
        writes.spawn(async move {
            let content = format!("Unkeyed write {i}: the release train left at 09:{i:02}.");
            let outcome = mcp
                .call(
                    "remember",
                    json!({"content": content, "topic": "unkeyed", "type": "fact"}),
                )
                .await;
            (content, outcome)
        });
    }
    let outcomes = writes.join_all().await;
    // The frozen instance finishes, or drops, what it had received.
    cluster.remember[0].resume();
    tokio::time::sleep(Duration::from_secs(2)).await;
    cluster.assert_none_crashed();

    let db = cluster.tenant_client().await;
    let (mut acknowledged, mut unknown, mut unknown_stored) = (0, 0, 0);
    for (content, outcome) in &outcomes {
        let stored: i64 = db
            .query_one(
                "SELECT count(*) FROM mneme.fragments WHERE tenant_id = $1 AND content = $2",
                &[&cluster.tenant_id, content],
            )
            .await
            .unwrap()
            .get(0);
        if outcome.is_ok() {
            acknowledged += 1;
            assert_eq!(stored, 1, "{content}: acknowledged, so stored once");
        } else {
            unknown += 1;
            unknown_stored += stored;
            // Never sent again to the other instance (that could store it
            // twice), and reported as of unknown outcome, not refused.
            assert!(stored <= 1, "{content}: stored {stored} times");
            assert_eq!(
                outcome.error_code().as_deref(),
                Some("timeout"),
                "{outcome:?}"
            );
            assert!(
                format!("{outcome:?}").contains("may or may not have taken effect"),
                "{outcome:?}"
            );
        }
    }
    let report = json!({
        "scenario": "unkeyed_write_unanswered",
        "acknowledged": acknowledged,
        "unknown": unknown,
        "unknown_stored": unknown_stored,
    });
    println!("RELIABILITY {report}");
    assert!(
        unknown > 0,
        "no write reached the frozen instance: {report}"
    );
    assert!(acknowledged > 0, "the other instance took none: {report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_gateway_pod_costs_its_clients_only_the_calls_in_flight() {
    let mut cluster = Cluster::start(Shape {
        gateways: 2,
        recall: 1,
        remember: 1,
        consolidator: false,
        settings: &[],
    })
    .await;
    let clients = 6;
    let phase = Phase::new();
    // Every client starts on the first gateway, which then dies.
    let load = Load::start(&cluster, clients, &phase).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    phase.set("killed");
    cluster.gateways[0].kill().await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    phase.set("after");
    cluster.gateways[0].restart();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let tally = load.finish(&mut cluster).await;
    let report = json!({"scenario": "gateway_killed", "clients": clients, "tally": tally.report()});
    println!("RELIABILITY {report}");
    assert!(tally.ok("killed") > 50, "too little load ran: {report:#}");
    // At most the call each client had in flight is lost (counted in the
    // phase it started in); every other call goes on on the other pod under
    // the same session id (no client had to initialize again).
    let lost: u64 = ["before", "killed"]
        .iter()
        .map(|phase| tally.count(phase, |kind| kind.ends_with("transport")))
        .sum();
    assert!(lost <= clients as u64, "{report:#}");
    assert_eq!(
        tally.failed("before") + tally.failed("killed"),
        lost,
        "{report:#}"
    );
    let reinitialized: u64 = ["before", "killed", "after"]
        .iter()
        .map(|phase| tally.count(phase, |kind| kind.starts_with("initialize")))
        .sum();
    assert_eq!(reinitialized, 0, "sessions were lost: {report:#}");
    assert_eq!(tally.failed("after"), 0, "{report:#}");
}

/// One acknowledged-or-not write of the no-lost-writes run.
async fn remember_until_acknowledged(mcp: &HttpMcp, key: &str, content: &str) -> (bool, u32) {
    let mut attempts = 0;
    while attempts < 60 {
        attempts += 1;
        let outcome = mcp
            .call(
                "remember",
                json!({"content": content, "topic": "ledger", "type": "fact", "idempotencyKey": key}),
            )
            .await;
        if outcome.is_ok() {
            return (true, attempts);
        }
        tokio::time::sleep(Duration::from_millis(50 * u64::from(attempts.min(10)))).await;
    }
    (false, attempts)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_acknowledged_write_is_lost_while_backends_die_at_random() {
    let writes = setting("MNEME_FAULT_WRITES", 10_000);
    let clients = 8u64;
    let mut cluster = Cluster::start(Shape {
        gateways: 1,
        recall: 1,
        remember: 2,
        consolidator: true,
        settings: &[("MNEME_BACKEND_EJECT_SECS", "1")],
    })
    .await;
    let started = Instant::now();
    let next = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let acknowledged = Arc::new(Mutex::new(Vec::<String>::new()));
    let retried = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut writers = tokio::task::JoinSet::new();
    for _ in 0..clients {
        let mcp = cluster.client().await;
        let (next, acknowledged, retried) = (
            Arc::clone(&next),
            Arc::clone(&acknowledged),
            Arc::clone(&retried),
        );
        writers.spawn(async move {
            let mut unacknowledged = Vec::new();
            loop {
                let n = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if n >= writes {
                    return unacknowledged;
                }
                let key = format!("ledger-{n}");
                let content = format!("Ledger entry {n}: invoice {} settled.", n * 7919 % 100_003);
                let (ok, attempts) = remember_until_acknowledged(&mcp, &key, &content).await;
                retried.fetch_add(
                    u64::from(attempts - 1),
                    std::sync::atomic::Ordering::Relaxed,
                );
                if ok {
                    acknowledged.lock().unwrap().push(key);
                } else {
                    unacknowledged.push(key);
                }
            }
        });
    }

    // Chaos: every 1–3 s one backend process (a remember instance, recall
    // or the consolidator) is killed with SIGKILL and started again
    // 0.3–2 s later; every fifth time both remember instances die at once,
    // so clients see failed writes and send them again with the same key.
    let mut kills = BTreeMap::<String, u32>::new();
    let mut round = 0;
    while !writers.is_empty() && next.load(std::sync::atomic::Ordering::Relaxed) < writes {
        round += 1;
        let (pause, down, victim) = {
            let mut rng = rand::rng();
            (
                Duration::from_millis(rng.random_range(1000..3000)),
                Duration::from_millis(rng.random_range(300..2000)),
                rng.random_range(0..4),
            )
        };
        tokio::time::sleep(pause).await;
        let mut victims: Vec<&mut ServiceProcess> = if round % 5 == 0 {
            cluster.remember.iter_mut().collect()
        } else {
            vec![match victim {
                0 | 1 => &mut cluster.remember[victim],
                2 => &mut cluster.recall[0],
                _ => cluster.consolidator.as_mut().unwrap(),
            }]
        };
        for process in &mut victims {
            process.kill().await;
            *kills.entry(process.name.clone()).or_default() += 1;
        }
        tokio::time::sleep(down).await;
        for process in &mut victims {
            process.restart();
        }
        eprintln!(
            "{} of {writes} writes sent, {} acknowledged, {} kills",
            next.load(std::sync::atomic::Ordering::Relaxed).min(writes),
            acknowledged.lock().unwrap().len(),
            kills.values().sum::<u32>()
        );
    }
    let mut unacknowledged = Vec::new();
    while let Some(result) = writers.join_next().await {
        unacknowledged.extend(result.unwrap());
    }
    let write_secs = started.elapsed().as_secs_f64();
    cluster.assert_none_crashed();
    cluster.assert_no_secret_in_logs();

    // Every acknowledged write exists exactly once; nothing else does.
    let counts = cluster.count_by_idempotency_key().await;
    let acknowledged = acknowledged.lock().unwrap().clone();
    let lost: Vec<&String> = acknowledged
        .iter()
        .filter(|key| !counts.contains_key(*key))
        .collect();
    let doubled: Vec<_> = counts.iter().filter(|(_, n)| **n != 1).collect();
    // Every fragment gets its embedding once the chaos is over.
    let embedded_by = Instant::now();
    wait_until(
        "every fragment has its embedding",
        Duration::from_secs(120),
        || async { cluster.unembedded().await == 0 },
    )
    .await;
    let report = json!({
        "scenario": "no_lost_writes",
        "writes": writes,
        "acknowledged": acknowledged.len(),
        "unacknowledged": unacknowledged.len(),
        "retries": retried.load(std::sync::atomic::Ordering::Relaxed),
        "kills": kills,
        "write_secs": write_secs,
        "writes_per_sec": acknowledged.len() as f64 / write_secs,
        "lost": lost.len(),
        "doubled": doubled.len(),
        "stored": counts.len(),
        "embeddings_done_after_ms": embedded_by.elapsed().as_millis(),
    });
    println!("RELIABILITY {report}");
    assert!(lost.is_empty(), "acknowledged but missing: {lost:?}");
    assert!(doubled.is_empty(), "stored more than once: {doubled:?}");
    assert!(
        unacknowledged.is_empty(),
        "writes never acknowledged after 60 attempts: {unacknowledged:?}"
    );
    assert_eq!(counts.len() as u64, writes, "{report:#}");
    assert!(
        kills.values().sum::<u32>() >= 3,
        "too few faults: {report:#}"
    );
}
