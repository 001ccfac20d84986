//! How the store reports on itself: a span and a latency observation for
//! every statement of a [`TenantTx`](crate::TenantTx), the pool's
//! acquire latency, and the pool's size on every scrape.
//!
//! Statements are named by where they are issued (`fragments:412` is
//! line 412 of `fragments.rs`): the set is bounded by the code, needs no
//! name at each call site, and leads straight to the SQL.

use std::future::Future;
use std::panic::Location;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Instant;

use deadpool_postgres::{Pool, WeakPool};
use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{Gauge, HistogramOpts, HistogramVec, IntGauge, Opts};
use tracing::Instrument;

use mneme_telemetry::DB_SPAN_TARGET;
use mneme_telemetry::metrics::{latency_histogram, register};

static STATEMENTS: LazyLock<HistogramVec> = LazyLock::new(|| {
    latency_histogram(
        "mneme_db_statement_seconds",
        "Statements on tenant data by call site (`file:line` in services/lib/store/src) and outcome (ok, error).",
        &["statement", "outcome"],
    )
});

/// Time to get a pooled connection, by outcome (`ok`, `timeout`: the pool
/// was exhausted for `acquire_timeout`, `error`: connecting failed).
pub(crate) static POOL_ACQUIRE: LazyLock<HistogramVec> = LazyLock::new(|| {
    register(
        HistogramVec::new(
            HistogramOpts::new(
                "mneme_db_pool_acquire_seconds",
                "Time to get a PostgreSQL connection from the pool, by outcome (ok, timeout, error).",
            )
            .buckets(vec![
                0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0, 5.0,
            ]),
            &["outcome"],
        )
        .expect("valid metric"),
    )
});

/// 1 while the answer probe finds PostgreSQL answering, 0 while it finds it
/// reachable but silent (see `Store::watch_answers`).
pub(crate) static ANSWERING: LazyLock<IntGauge> = LazyLock::new(|| {
    register(
        IntGauge::with_opts(Opts::new(
            "mneme_db_answering",
            "1 while PostgreSQL answers this process's probe, 0 while it is reachable but silent (calls then fail at once).",
        ))
        .expect("valid metric"),
    )
});

/// 1 when full-text and keyword search can use their indexes under
/// row-level security, 0 when they scan every memory of a tenant (see
/// `Store::check_search_operators`).
pub(crate) static SEARCH_OPERATORS_LEAKPROOF: LazyLock<IntGauge> = LazyLock::new(|| {
    register(
        IntGauge::with_opts(Opts::new(
            "mneme_db_search_operators_leakproof",
            "1 when the full-text and keyword operators are leakproof, so their indexes serve searches under row-level security; 0 when every search reads all of a tenant's memories.",
        ))
        .expect("valid metric"),
    )
});

/// How often autovacuum looks for tables to analyse, in seconds; 0 when it
/// is off (see `Store::check_statistics_upkeep`).
pub(crate) static AUTOVACUUM_NAPTIME: LazyLock<Gauge> = LazyLock::new(|| {
    register(
        Gauge::with_opts(Opts::new(
            "mneme_db_autovacuum_naptime_seconds",
            "How often the database server's autovacuum looks for tables to analyse (autovacuum_naptime), in seconds; 0 when autovacuum is off.",
        ))
        .expect("valid metric"),
    )
});

/// The statement label of a call site: file stem and line.
fn statement_name(site: &Location<'_>) -> String {
    let file = site.file();
    let stem = file
        .rsplit(['/', '\\'])
        .next()
        .unwrap_or(file)
        .trim_end_matches(".rs");
    format!("{stem}:{}", site.line())
}

/// Runs one statement inside a `db.query` span and records its latency.
pub(crate) async fn statement<T>(
    site: &'static Location<'static>,
    run: impl Future<Output = Result<T, tokio_postgres::Error>>,
) -> Result<T, tokio_postgres::Error> {
    let name = statement_name(site);
    let span = tracing::info_span!(
        target: DB_SPAN_TARGET,
        "db.query",
        db.system = "postgresql",
        db.statement.site = %name,
    );
    let started = Instant::now();
    // Boxed: the driver's future is large, and without the box it would
    // grow the future of every repository function and its callers.
    let result = Box::pin(run).instrument(span).await;
    let outcome = if result.is_ok() { "ok" } else { "error" };
    STATEMENTS
        .with_label_values(&[name.as_str(), outcome])
        .observe(started.elapsed().as_secs_f64());
    result
}

/// Reports the size of every live pool of the process when scraped:
/// connections open, idle, the configured maximum and callers waiting.
#[derive(Clone)]
struct PoolGauges {
    pools: Arc<Mutex<Vec<WeakPool>>>,
    size: IntGauge,
    idle: IntGauge,
    max: IntGauge,
    waiting: IntGauge,
    descs: Vec<Desc>,
}

impl PoolGauges {
    fn new() -> Self {
        let gauge = |name: &str, help: &str| {
            IntGauge::with_opts(Opts::new(name, help)).expect("valid metric")
        };
        let size = gauge(
            "mneme_db_pool_connections",
            "PostgreSQL connections open in this process's pools.",
        );
        let idle = gauge(
            "mneme_db_pool_idle_connections",
            "Open PostgreSQL connections not lent out.",
        );
        let max = gauge(
            "mneme_db_pool_max_connections",
            "Most connections this process's pools may open (MNEME_DB_POOL_SIZE per pool).",
        );
        let waiting = gauge(
            "mneme_db_pool_waiting",
            "Callers waiting for a PostgreSQL connection now.",
        );
        let descs = [&size, &idle, &max, &waiting]
            .iter()
            .flat_map(|g| g.desc().into_iter().cloned())
            .collect();
        Self {
            pools: Arc::new(Mutex::new(Vec::new())),
            size,
            idle,
            max,
            waiting,
            descs,
        }
    }
}

impl Collector for PoolGauges {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let (mut size, mut idle, mut max, mut waiting) = (0, 0, 0, 0);
        {
            let mut pools = self.pools.lock().unwrap_or_else(|e| e.into_inner());
            pools.retain(|pool| {
                let Some(pool) = pool.upgrade() else {
                    return false;
                };
                let status = pool.status();
                size += status.size as i64;
                idle += status.available as i64;
                max += status.max_size as i64;
                waiting += status.waiting as i64;
                true
            });
        }
        self.size.set(size);
        self.idle.set(idle);
        self.max.set(max);
        self.waiting.set(waiting);
        [&self.size, &self.idle, &self.max, &self.waiting]
            .iter()
            .flat_map(|g| g.collect())
            .collect()
    }
}

/// Registered once; clones share the list of pools.
static POOLS: LazyLock<PoolGauges> = LazyLock::new(|| register(PoolGauges::new()));

/// Includes `pool` in the pool gauges for as long as it lives.
pub(crate) fn watch_pool(pool: &Pool) {
    POOLS
        .pools
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(pool.weak());
}
