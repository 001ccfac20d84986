//! PostgreSQL access for mneme.
//!
//! Layout:
//! - [`Store`]: the connection pool, start-up checks and tenant transactions.
//! - `instrument`: statement spans and latency, pool gauges.
//! - [`migrate`]: the embedded `migrations/` and their runner (refinery).
//! - [`tls`]: TLS to the server as the URL's `sslmode` asks (rustls).
//! - One repository module per table or family of tables: [`tenants`],
//!   [`api_keys`], [`key_groups`], [`fragments`], [`links`], [`auto_link_queue`] (new
//!   fragments waiting for their automatic links), [`versions`],
//!   [`cases`] (events, edges, evidence), [`search_events`],
//!   [`search_thresholds`] (the adaptive similarity floor), [`feedback`]
//!   (tool and task feedback, link reconsolidation), [`consolidation`]
//!   (leases, run history and the maintenance stages), [`claims`] (the
//!   symbolic layer's claims), [`usage`] (tool calls per key and day),
//!   [`oauth`] (OAuth clients and refresh tokens), [`users`] (people who
//!   sign in), [`surfacing`] (surfacing events, ratings and tuned
//!   thresholds), [`upstreams`] (tenants' upstream MCP servers behind the
//!   proxy), [`platform_admins`] (operators of the whole service),
//!   [`admin_audit`] (the admin API's audit log);
//!   [`stats`] aggregates them read-only.
//!
//! Every query on tenant-owned data runs inside a [`TenantTx`]: a
//! transaction that has set `mneme.tenant_id` (so row-level security
//! applies) and that hands its tenant id to the repository functions, which
//! repeat it as an explicit predicate. Repositories cannot reach tenant data
//! any other way.
#![forbid(unsafe_code)]

pub mod admin_audit;
pub mod api_keys;
pub mod auto_link_queue;
pub mod cases;
pub mod claims;
pub mod consolidation;
pub mod feedback;
pub mod fragments;
mod instrument;
pub mod key_groups;
pub mod links;
pub mod migrate;
pub mod oauth;
pub mod platform_admins;
pub mod search_events;
pub mod search_thresholds;
pub mod session_reflections;
pub mod stats;
pub mod surfacing;
pub mod tenants;
pub mod tls;
pub mod upstreams;
pub mod usage;
pub mod users;
pub mod versions;

use std::future::Future;
use std::ops::Deref;
use std::panic::Location;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod, Transaction};
use mneme_core::{Error as ApiError, ErrorCode};
use tokio::sync::watch;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Row, Statement};
use uuid::Uuid;

/// A connection from the pool, back in it when dropped.
pub type Connection = Object;

/// A failure of the database layer.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database pool: {0}")]
    Pool(#[from] deadpool_postgres::PoolError),
    #[error("database: {}", describe(.0))]
    Db(#[from] tokio_postgres::Error),
    #[error("{0}")]
    Invalid(String),
    /// The answer probe found the server connected but silent (see
    /// [`Store::watch_answers`]); nothing was sent.
    #[error("the database is not answering")]
    NotAnswering,
}

/// A database error as logged. tokio-postgres displays every server error
/// as just "db error" and every I/O failure without its cause, so both are
/// spelled out here: the SQLSTATE and the schema objects the server names,
/// and its message except where it may quote a value (data exceptions,
/// class 22, and errors raised by our own functions, P0), since stored
/// content must not reach the logs.
fn describe(error: &tokio_postgres::Error) -> String {
    use std::fmt::Write as _;
    let Some(db) = error.as_db_error() else {
        return match std::error::Error::source(error) {
            Some(cause) => format!("{error}: {cause}"),
            None => error.to_string(),
        };
    };
    let code = db.code().code();
    let mut text = format!("{} {code}", db.severity());
    if !(code.starts_with("22") || code.starts_with("P0")) {
        let _ = write!(text, " {}", db.message());
    }
    let objects = [
        ("table", db.table()),
        ("column", db.column()),
        ("constraint", db.constraint()),
    ];
    for (kind, name) in objects {
        if let Some(name) = name {
            let _ = write!(text, " ({kind} {name})");
        }
    }
    text
}

impl StoreError {
    /// The SQLSTATE of a database error, if any.
    pub fn sql_state(&self) -> Option<&SqlState> {
        match self {
            StoreError::Db(e) => e.code(),
            _ => None,
        }
    }

    /// A deadlock or serialization failure: the same transaction, run
    /// again, may well succeed.
    pub fn is_conflict(&self) -> bool {
        self.error_code() == ErrorCode::Conflict
    }

    fn error_code(&self) -> ErrorCode {
        match self {
            StoreError::Pool(_) | StoreError::NotAnswering => ErrorCode::Unavailable,
            StoreError::Invalid(_) => ErrorCode::Internal,
            StoreError::Db(e) => match e.code() {
                Some(code) if *code == SqlState::QUERY_CANCELED => ErrorCode::Timeout,
                Some(code)
                    if *code == SqlState::T_R_SERIALIZATION_FAILURE
                        || *code == SqlState::T_R_DEADLOCK_DETECTED =>
                {
                    ErrorCode::Conflict
                }
                Some(code)
                    if code.code().starts_with("08")
                        || *code == SqlState::ADMIN_SHUTDOWN
                        || *code == SqlState::CANNOT_CONNECT_NOW =>
                {
                    ErrorCode::Unavailable
                }
                None if e.is_closed() => ErrorCode::Unavailable,
                _ => ErrorCode::Internal,
            },
        }
    }
}

/// Converts to the client-visible error. The cause is logged here, once;
/// only the code travels on.
impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> Self {
        let code = error.error_code();
        tracing::error!(error = %error, "database operation failed");
        match code {
            ErrorCode::Internal => ApiError::internal(),
            ErrorCode::Timeout => ApiError::new(code, "the database did not answer in time"),
            ErrorCode::Conflict => ApiError::new(code, "concurrent update; retry the request"),
            _ => ApiError::unavailable("the database is unavailable; retry shortly"),
        }
    }
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// Pool settings.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    pub max_connections: usize,
    /// Server-side `statement_timeout`; zero disables it.
    pub statement_timeout: Duration,
    /// Time to wait for a free connection before failing with `Unavailable`.
    pub acquire_timeout: Duration,
    /// Extra trusted CA certificates (PEM) for TLS; see [`tls`].
    pub ca_file: Option<PathBuf>,
    /// Whether [`TenantTx`] prepares each statement once per connection.
    pub statement_cache: bool,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            max_connections: 16,
            statement_timeout: Duration::from_secs(10),
            acquire_timeout: Duration::from_secs(5),
            ca_file: None,
            statement_cache: true,
        }
    }
}

/// [`StoreOptions::statement_cache`] of the process, as [`Store::connect`]
/// last set it: a transaction is opened on a bare pooled connection, and a
/// process has one database configuration.
static STATEMENT_CACHE: AtomicBool = AtomicBool::new(true);

/// The database handle every service shares. Cheap to clone.
#[derive(Clone)]
pub struct Store {
    pool: Pool,
    /// What the pool connects with, for the answer probe's own connection.
    /// Shared: handles are cloned per request, and the configuration is
    /// dozens of allocations.
    connect: Arc<(tokio_postgres::Config, tls::MakeRustlsConnect)>,
    /// False while the server, though reachable, answers nothing.
    answering: Arc<watch::Sender<bool>>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("pool", &self.pool.status())
            .finish_non_exhaustive()
    }
}

/// Unanswered probes in a row after which the server counts as hung: one
/// slow answer on a loaded machine must not fail every call.
const PROBES_MISSED: u32 = 3;

/// A hung server (frozen, or behind a partition: connections stay open,
/// nothing is answered or refused) gives no error to fail on, so every call
/// would wait for its deadline while holding a pooled connection. This
/// sends `SELECT 1` on a connection of its own every `every`; after
/// [`PROBES_MISSED`] get no answer within `every`, [`Store::client`] fails
/// at once until a probe is answered again. A refused connection is not a
/// hang: the pool fails fast on its own then. Ends with the last clone of
/// its [`Store`].
async fn watch_answers(
    connect: Arc<(tokio_postgres::Config, tls::MakeRustlsConnect)>,
    answering: Weak<watch::Sender<bool>>,
    every: Duration,
) {
    let (config, tls) = &*connect;
    let mut probe: Option<tokio_postgres::Client> = None;
    let mut missed = 0;
    instrument::ANSWERING.set(1);
    loop {
        tokio::time::sleep(every).await;
        let Some(answering) = answering.upgrade() else {
            return;
        };
        let answer = tokio::time::timeout(every, async {
            if probe.as_ref().is_none_or(tokio_postgres::Client::is_closed) {
                let (client, connection) = config.connect(tls.clone()).await?;
                tokio::spawn(connection);
                probe = Some(client);
            }
            let client = probe.as_ref().expect("connected above");
            client.simple_query("SELECT 1").await.map(drop)
        })
        .await;
        match answer {
            Ok(result) => {
                if result.is_err() {
                    // Refused or broken: the next probe connects again.
                    probe = None;
                }
                missed = 0;
                if !answering.send_replace(true) {
                    instrument::ANSWERING.set(1);
                    tracing::info!("the database answers again");
                }
            }
            Err(_unanswered) => {
                // The connection may be the hung part: a fresh one next time.
                probe = None;
                missed += 1;
                if missed >= PROBES_MISSED && answering.send_replace(false) {
                    instrument::ANSWERING.set(0);
                    tracing::warn!(
                        "the database is reachable but does not answer; calls fail at once until it does"
                    );
                }
            }
        }
    }
}

impl Store {
    /// Builds a pool. No connection is opened until first use, but TLS is
    /// set up here, so an unreadable CA file fails at once.
    pub fn connect(url: &str, options: &StoreOptions) -> Result<Self> {
        let mut pg = tokio_postgres::Config::from_str(url)?;
        let tls = tls::connector(pg.get_ssl_mode(), options.ca_file.as_deref())?;
        if pg.get_application_name().is_none() {
            pg.application_name("mneme");
        }
        // Statements are prepared once per connection (`TenantTx`), but
        // planned per execution: a generic plan cannot fold away the optional
        // filters of a search or prune partitions by tenant at plan time.
        //
        // JIT compilation stays off: mneme's statements are short, but the
        // planner's estimates for the lateral joins of the link and search
        // statements run into the hundreds of thousands, past the JIT
        // thresholds, and compiling with LLVM then took 0.6-1.0 s of a
        // 20 ms statement (docs/BENCHMARKS.md, "JIT compilation").
        let mut server_options = String::from("-c plan_cache_mode=force_custom_plan -c jit=off");
        if !options.statement_timeout.is_zero() {
            server_options.push_str(&format!(
                " -c statement_timeout={}",
                options.statement_timeout.as_millis()
            ));
        }
        pg.options(server_options);
        STATEMENT_CACHE.store(options.statement_cache, Ordering::Relaxed);
        pg.connect_timeout(options.acquire_timeout);
        let connect = (pg.clone(), tls.clone());
        let manager = Manager::from_config(
            pg,
            tls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(options.max_connections)
            .wait_timeout(Some(options.acquire_timeout))
            .create_timeout(Some(options.acquire_timeout))
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .build()
            .map_err(|e| StoreError::Invalid(format!("cannot build the database pool: {e}")))?;
        instrument::watch_pool(&pool);
        Ok(Self {
            pool,
            connect: Arc::new(connect),
            answering: Arc::new(watch::channel(true).0),
        })
    }

    /// Whether the server answers, as the answer probe last found it
    /// (always `true` without the probe). Servers cut calls still waiting
    /// on the database when it turns `false`, instead of letting each wait
    /// out its deadline.
    pub fn answering(&self) -> watch::Receiver<bool> {
        self.answering.subscribe()
    }

    /// Runs `work`, unless the database stops answering first: then its
    /// statements are abandoned and the result is `NotAnswering`.
    pub async fn unless_silent<T>(&self, work: impl Future<Output = Result<T>>) -> Result<T> {
        let mut answering = self.answering();
        tokio::select! {
            result = work => result,
            // The sender lives as long as `self`, so this only resolves on
            // silence.
            _ = answering.wait_for(|answering| !answering) => Err(StoreError::NotAnswering),
        }
    }

    /// Starts the answer probe (see `watch_answers`), every `every`; zero
    /// leaves it off. Needs a Tokio runtime.
    pub fn watch_answers(&self, every: Duration) {
        if !every.is_zero() {
            tokio::spawn(watch_answers(
                self.connect.clone(),
                Arc::downgrade(&self.answering),
                every,
            ));
        }
    }

    /// Builds a pool from the `Database` settings.
    pub fn from_config(config: &mneme_config::DatabaseConfig) -> Result<Self> {
        Self::connect(
            config.url.expose(),
            &StoreOptions {
                max_connections: config.pool_size,
                statement_timeout: config.statement_timeout,
                ca_file: config.ca_file.clone(),
                statement_cache: config.statement_cache,
                ..StoreOptions::default()
            },
        )
    }

    /// Builds the pool and runs the start-up checks every service needs:
    /// the role cannot bypass row-level security, and the embedding column
    /// has the configured dimension. It warns, without refusing, where the
    /// server's set-up would slow searches (operators not leakproof) or
    /// imports (statistics refreshed too seldom).
    pub async fn open(config: &mneme_config::Config) -> Result<Self> {
        let store = Self::from_config(&config.database)?;
        store.watch_answers(config.database.probe_interval);
        store
            .check_service_role(config.database.allow_rls_bypass)
            .await?;
        store
            .check_embedding_dimension(config.embedding.dim)
            .await?;
        store.check_search_operators().await?;
        store.check_statistics_upkeep().await?;
        Ok(store)
    }

    /// A pooled connection for queries that are not tenant data (tenants,
    /// key resolution, health checks).
    pub async fn client(&self) -> Result<Object> {
        if !*self.answering.borrow() {
            return Err(StoreError::NotAnswering);
        }
        let started = std::time::Instant::now();
        let client = self.pool.get().await;
        let outcome = match &client {
            Ok(_) => "ok",
            Err(deadpool_postgres::PoolError::Timeout(_)) => "timeout",
            Err(_) => "error",
        };
        instrument::POOL_ACQUIRE
            .with_label_values(&[outcome])
            .observe(started.elapsed().as_secs_f64());
        Ok(client?)
    }

    /// A second connection for optional work beside a transaction the caller
    /// holds, only if one is free now (or can be opened): `None` rather than
    /// waiting. Waiting there could deadlock a full pool, every holder of one
    /// connection waiting for another.
    pub async fn spare_client(&self) -> Option<Object> {
        if !*self.answering.borrow() {
            return None;
        }
        let mut timeouts = self.pool.timeouts();
        timeouts.wait = Some(Duration::ZERO);
        self.pool.timeout_get(&timeouts).await.ok()
    }

    /// `SELECT 1`, for readiness probes.
    pub async fn ping(&self) -> Result<()> {
        self.client().await?.simple_query("SELECT 1").await?;
        Ok(())
    }

    /// Refuses to run as a role that could bypass row-level security, unless
    /// explicitly allowed: tenant isolation must not depend on SQL predicates
    /// alone.
    pub async fn check_service_role(&self, allow_bypass: bool) -> Result<()> {
        let client = self.client().await?;
        let row = client
            .query_one(
                "SELECT r.rolname::text,
                        r.rolsuper OR r.rolbypassrls,
                        EXISTS (SELECT FROM pg_tables
                                 WHERE schemaname = 'mneme' AND tableowner = current_user)
                   FROM pg_roles r WHERE r.rolname = current_user",
                &[],
            )
            .await?;
        let (role, bypass, owns): (String, bool, bool) = (row.get(0), row.get(1), row.get(2));
        if bypass || owns {
            let why = if bypass {
                "is a superuser or has BYPASSRLS"
            } else {
                "owns mneme's tables"
            };
            if allow_bypass {
                tracing::warn!(
                    role,
                    "database role {why}; row-level security is not a safety net"
                );
            } else {
                return Err(StoreError::Invalid(format!(
                    "the database role `{role}` {why}, so row-level security would not protect \
                     tenants; connect as a role granted `mneme_service` \
                     (or set MNEME_ALLOW_RLS_BYPASS=true)"
                )));
            }
        }
        Ok(())
    }

    /// Whether the full-text (`@@`) and keyword (`&&`) operators are
    /// leakproof. Under row-level security PostgreSQL evaluates a query's
    /// own non-leakproof conditions only after the policy, so their GIN
    /// indexes cannot serve a search and every search reads all of the
    /// tenant's memories. Results stay correct, so this warns (and sets
    /// `mneme_db_search_operators_leakproof`) instead of refusing to start;
    /// marking them needs a superuser (migrations/V23).
    pub async fn check_search_operators(&self) -> Result<bool> {
        let leakproof: bool = self
            .client()
            .await?
            .query_one(
                "SELECT bool_and(proleakproof) FROM pg_proc
                  WHERE oid IN ('pg_catalog.ts_match_vq(tsvector, tsquery)'::regprocedure,
                                'pg_catalog.arrayoverlap(anyarray, anyarray)'::regprocedure)",
                &[],
            )
            .await?
            .get(0);
        instrument::SEARCH_OPERATORS_LEAKPROOF.set(i64::from(leakproof));
        if !leakproof {
            tracing::warn!(
                "full-text and keyword search cannot use their indexes under row-level security \
                 and will read every memory of a tenant: as a superuser, run \
                 `ALTER FUNCTION pg_catalog.ts_match_vq(tsvector, tsquery) LEAKPROOF; \
                 ALTER FUNCTION pg_catalog.arrayoverlap(anyarray, anyarray) LEAKPROOF;` \
                 in mneme's database (docs/OPERATIONS.md, \"Search operators\")"
            );
        }
        Ok(leakproof)
    }

    /// How often autovacuum refreshes the planner's statistics. Plans
    /// estimate a tenant's rows from its partition's last `ANALYZE`, and a
    /// tenant importing faster than that is planned as the few memories it
    /// held then: its link lookups walked all its memories for each keyword,
    /// 24 times as slow as after an `ANALYZE` (docs/BENCHMARKS.md,
    /// "Statistics that keep up with an import"). Warns when autovacuum is
    /// off or looks less often than [`STATISTICS_NAPTIME_LIMIT`], and
    /// exports `mneme_db_autovacuum_naptime_seconds` (0 when off). Advice,
    /// not a refusal: plans catch up at the next analysis.
    pub async fn check_statistics_upkeep(&self) -> Result<StatisticsUpkeep> {
        let row = self
            .client()
            .await?
            .query_one(
                "SELECT current_setting('autovacuum')::bool,
                        extract(epoch FROM current_setting('autovacuum_naptime')::interval)::float8",
                &[],
            )
            .await?;
        let upkeep = StatisticsUpkeep {
            autovacuum: row.get(0),
            naptime: Duration::from_secs_f64(row.get(1)),
        };
        let naptime_secs = upkeep.naptime.as_secs_f64();
        instrument::AUTOVACUUM_NAPTIME.set(if upkeep.autovacuum { naptime_secs } else { 0.0 });
        if !upkeep.autovacuum {
            tracing::warn!(
                "autovacuum is off, so the planner's statistics follow no import: run \
                 `ANALYZE mneme.fragments` after large imports or turn it on \
                 (docs/SCALING.md, \"Server settings\")"
            );
        } else if upkeep.naptime > STATISTICS_NAPTIME_LIMIT {
            tracing::warn!(
                naptime_secs,
                "autovacuum looks for tables to analyse only every {naptime_secs} s, so a \
                 tenant's import is planned on statistics from before it for as long: set \
                 `autovacuum_naptime = 10s` (docs/SCALING.md, \"Server settings\")"
            );
        }
        Ok(upkeep)
    }

    /// Refuses to run when the embedding column's dimension differs from the
    /// configured one (vectors of another size cannot be stored or compared).
    pub async fn check_embedding_dimension(&self, expected: usize) -> Result<()> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                "SELECT format_type(atttypid, atttypmod)
                   FROM pg_attribute
                  WHERE attrelid = to_regclass('mneme.fragments') AND attname = 'embedding'",
                &[],
            )
            .await?
            .ok_or_else(|| {
                StoreError::Invalid("the mneme schema is missing; run `mneme migrate` first".into())
            })?;
        let column: String = row.get(0);
        let wanted = format!("vector({expected})");
        if column != wanted {
            return Err(StoreError::Invalid(format!(
                "MNEME_EMBED_DIM={expected} but fragments.embedding is {column}; \
                 choose an embedder of that dimension or migrate the column"
            )));
        }
        Ok(())
    }
}

/// A transaction bound to one tenant: row-level security filters it, and
/// repositories read the tenant id from it for their explicit predicates.
pub struct TenantTx<'a> {
    tx: Transaction<'a>,
    tenant_id: Uuid,
}

impl std::fmt::Debug for TenantTx<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TenantTx")
            .field("tenant_id", &self.tenant_id)
            .finish_non_exhaustive()
    }
}

/// The server's autovacuum, as [`Store::check_statistics_upkeep`] found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatisticsUpkeep {
    /// Whether autovacuum runs at all.
    pub autovacuum: bool,
    /// How often it looks for tables to analyse (`autovacuum_naptime`).
    pub naptime: Duration,
}

/// The longest autovacuum naptime [`Store::check_statistics_upkeep`] accepts
/// without a warning. docs/SCALING.md recommends 10 s; PostgreSQL's default
/// minute lets a tenant importing 1,000 memories a second run 60,000 past
/// its statistics.
pub const STATISTICS_NAPTIME_LIMIT: Duration = Duration::from_secs(30);

/// Rows a partition's statistics must count before a generic plan made
/// for it is kept between statements ([`TenantTx::query_with_generic_plans`]).
pub const YOUNG_PARTITION_ROWS: f32 = 1000.0;

impl<'a> TenantTx<'a> {
    /// Opens a transaction on `client` for `tenant_id`.
    pub async fn begin(client: &'a mut Object, tenant_id: Uuid) -> Result<Self> {
        let tx = client.transaction().await?;
        // The simple query protocol takes one round trip where a statement
        // with parameters takes two (parse, then execute), on every request.
        // A UUID's text form is hex digits and hyphens: safe as a literal.
        tx.batch_execute(&format!(
            "SELECT set_config('mneme.tenant_id', '{tenant_id}', true)"
        ))
        .await?;
        Ok(Self { tx, tenant_id })
    }

    pub fn tenant_id(&self) -> Uuid {
        self.tenant_id
    }

    pub async fn commit(self) -> Result<()> {
        Ok(self.tx.commit().await?)
    }

    // The statement methods below shadow the transaction's own (reached
    // through `Deref`), so every repository statement is traced and timed
    // under its call site without changing a call.

    #[track_caller]
    pub fn query<'b>(
        &'b self,
        sql: &'b str,
        params: &'b [&'b (dyn ToSql + Sync)],
    ) -> impl Future<Output = std::result::Result<Vec<Row>, tokio_postgres::Error>> + Send + 'b
    {
        instrument::statement(Location::caller(), async move {
            let statement = self.statement(sql).await?;
            self.tx.query(&statement, params).await
        })
    }

    #[track_caller]
    pub fn query_one<'b>(
        &'b self,
        sql: &'b str,
        params: &'b [&'b (dyn ToSql + Sync)],
    ) -> impl Future<Output = std::result::Result<Row, tokio_postgres::Error>> + Send + 'b {
        instrument::statement(Location::caller(), async move {
            let statement = self.statement(sql).await?;
            self.tx.query_one(&statement, params).await
        })
    }

    #[track_caller]
    pub fn query_opt<'b>(
        &'b self,
        sql: &'b str,
        params: &'b [&'b (dyn ToSql + Sync)],
    ) -> impl Future<Output = std::result::Result<Option<Row>, tokio_postgres::Error>> + Send + 'b
    {
        instrument::statement(Location::caller(), async move {
            let statement = self.statement(sql).await?;
            self.tx.query_opt(&statement, params).await
        })
    }

    #[track_caller]
    pub fn execute<'b>(
        &'b self,
        sql: &'b str,
        params: &'b [&'b (dyn ToSql + Sync)],
    ) -> impl Future<Output = std::result::Result<u64, tokio_postgres::Error>> + Send + 'b {
        instrument::statement(Location::caller(), async move {
            let statement = self.statement(sql).await?;
            self.tx.execute(&statement, params).await
        })
    }

    /// Runs `sql` with generic plans for itself and for the foreign-key
    /// checks its rows fire: for bulk writes of rows that reference
    /// `fragments` (links, case evidence).
    ///
    /// Each such check is `tenant_id = <tenant> AND id = <id>` on the
    /// partitioned `fragments`. Planned per row like every statement of the
    /// connection (`force_custom_plan`), it costs five times as much, and it
    /// estimates the tenant's rows from the partition's statistics: a tenant
    /// written since the partition's last ANALYZE is expected to have none,
    /// so every index that starts with `tenant_id` looks as cheap as the
    /// primary key, and the one picked walks all the tenant's rows of the
    /// partition to find one id, for every row written. A generic plan
    /// counts any tenant as the partition's average and takes the primary
    /// key.
    ///
    /// PostgreSQL keeps a generic plan for the connection until the tables
    /// it reads are analysed again. Made while the tenant's partition was
    /// nearly empty, it has the same flaw, and on a fresh database it
    /// outlived the first minute of an import, timing link upserts out
    /// (docs/BENCHMARKS.md). So while the statistics count fewer than
    /// [`YOUNG_PARTITION_ROWS`] rows in the partition, the connection's
    /// plans are discarded first and the checks planned for the partition
    /// as it is. Not always: a discard makes the connection analyse each of
    /// its prepared statements again, which cost a single `remember` about
    /// a millisecond.
    #[track_caller]
    pub fn query_with_generic_plans<'b>(
        &'b self,
        sql: &'b str,
        params: &'b [&'b (dyn ToSql + Sync)],
    ) -> impl Future<Output = std::result::Result<Vec<Row>, tokio_postgres::Error>> + Send + 'b
    {
        let site = Location::caller();
        async move {
            let young = self
                .statement(
                    "SELECT set_config('plan_cache_mode', 'force_generic_plan', true),
                            coalesce((SELECT c.reltuples FROM pg_class c
                                       WHERE c.oid = (SELECT f.tableoid FROM mneme.fragments f
                                                       WHERE f.tenant_id = $1 LIMIT 1)), -1)
                              < $2::real",
                )
                .await?;
            let young: bool = self
                .tx
                .query_one(&young, &[&self.tenant_id, &YOUNG_PARTITION_ROWS])
                .await?
                .get(1);
            if young {
                self.tx.batch_execute("DISCARD PLANS").await?;
            }
            let rows = instrument::statement(site, async {
                let statement = self.statement(sql).await?;
                self.tx.query(&statement, params).await
            })
            .await?;
            self.tx
                .batch_execute("SET LOCAL plan_cache_mode TO DEFAULT")
                .await?;
            Ok(rows)
        }
    }

    /// `sql` prepared on this connection: with the statement cache on, once
    /// per connection, saving a round trip and a parse on every later
    /// execution. Plans are still made per execution either way
    /// (`plan_cache_mode = force_custom_plan`, set on every connection).
    async fn statement(&self, sql: &str) -> std::result::Result<Statement, tokio_postgres::Error> {
        if STATEMENT_CACHE.load(Ordering::Relaxed) {
            self.tx.prepare_cached(sql).await
        } else {
            self.tx.prepare(sql).await
        }
    }
}

impl<'a> Deref for TenantTx<'a> {
    type Target = Transaction<'a>;

    fn deref(&self) -> &Self::Target {
        &self.tx
    }
}

impl StoreError {
    /// True for a unique-constraint violation (a duplicate name, say).
    pub fn is_unique_violation(&self) -> bool {
        self.sql_state() == Some(&SqlState::UNIQUE_VIOLATION)
    }

    /// True for a CHECK-constraint violation (a malformed value).
    pub fn is_check_violation(&self) -> bool {
        self.sql_state() == Some(&SqlState::CHECK_VIOLATION)
    }
}
