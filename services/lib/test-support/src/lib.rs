//! Test fixtures for mneme, used only as a dev-dependency.
//!
//! Layout:
//! - [`TestDatabase`]: a fresh, migrated PostgreSQL database per test,
//!   cloned from a template that is migrated once per schema version.
//! - [`TestRedis`]: a unique key prefix per test on the shared Redis.
//! - [`TestTenant`], [`create_tenant`], [`create_user`]: a tenant with one
//!   key (its raw secret kept for the test), and people in it.
//! - [`on_own_runtime`]: runs a service on a runtime dropped when it
//!   returns, as a process exits.
//! - [`stored_fragment`]: a fragment as a search loads it, for tests of the
//!   pure steps that rank, slot or explain search results.
//!
//! Tests need `MNEME_TEST_DATABASE_URL` (a role that may create databases)
//! and `MNEME_TEST_REDIS_URL`; `./deploy/local/test.sh` sets both. A missing
//! variable fails the test with a message; nothing is ever skipped.
#![forbid(unsafe_code)]

use std::str::FromStr;

use mneme_core::Permission;
use mneme_store::api_keys::{self, NewKey};
use mneme_store::{Store, StoreOptions, TenantTx, key_groups, tenants};
use tokio_postgres::Config as PgConfig;
use tokio_postgres::config::Host;
use uuid::Uuid;

fn required_env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!(
            "environment variable `{name}` must be set for this test; \
             run the suite with ./deploy/local/test.sh, which sets it up"
        )
    })
}

/// Connection parameters of the test cluster, as a key-value string.
fn base_conninfo(admin_url: &str) -> String {
    let config = PgConfig::from_str(admin_url).expect("MNEME_TEST_DATABASE_URL is a valid URL");
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(host)) => host.clone(),
        #[cfg(unix)]
        Some(Host::Unix(path)) => path.display().to_string(),
        None => "127.0.0.1".into(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    format!("host={host} port={port}")
}

async fn admin_client(conninfo: &str) -> tokio_postgres::Client {
    let (client, _driver) = mneme_store::tls::connect(conninfo, None)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to the test database server: {e}"));
    client
}

/// A migrated database of its own for one test. Dropped when the test passes;
/// kept for inspection when it fails.
#[derive(Debug)]
pub struct TestDatabase {
    pub name: String,
    /// Connection string for the services' role (row-level security applies).
    pub app_url: String,
    /// Connection string for the owner role (migrations, inspection).
    pub owner_url: String,
    admin_conninfo: String,
}

/// Sends `tracing` output to the test harness, which shows it for failing
/// tests only. `MNEME_TEST_LOG` sets the filter (default `warn`).
pub fn init_logging() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let filter = std::env::var("MNEME_TEST_LOG").unwrap_or_else(|_| "warn".into());
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_test_writer()
            .try_init();
    });
}

impl TestDatabase {
    pub async fn create() -> Self {
        init_logging();
        let admin_url = required_env("MNEME_TEST_DATABASE_URL");
        let admin = PgConfig::from_str(&admin_url).expect("valid MNEME_TEST_DATABASE_URL");
        let base = base_conninfo(&admin_url);
        let owner_user = admin.get_user().unwrap_or("postgres").to_owned();
        let owner_password = admin
            .get_password()
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .unwrap_or_default();
        let admin_db = admin.get_dbname().unwrap_or("postgres");
        let admin_conninfo =
            format!("{base} user={owner_user} password={owner_password} dbname={admin_db}");
        let client = admin_client(&admin_conninfo).await;

        // One template per schema version, built under an advisory lock so
        // parallel test processes build it once.
        let template = format!("mneme_tmpl_{}", mneme_store::migrate::fingerprint());
        client
            .execute("SELECT pg_advisory_lock(727001)", &[])
            .await
            .expect("advisory lock");
        let exists = client
            .query_opt("SELECT 1 FROM pg_database WHERE datname = $1", &[&template])
            .await
            .expect("query pg_database")
            .is_some();
        if !exists {
            let building = format!("{template}_building");
            // Separate statements: neither may run inside a transaction block.
            client
                .batch_execute(&format!("DROP DATABASE IF EXISTS {building} WITH (FORCE)"))
                .await
                .expect("drop a half-built template database");
            client
                .batch_execute(&format!("CREATE DATABASE {building} TEMPLATE template1"))
                .await
                .expect("create the template database");
            let url =
                format!("{base} user={owner_user} password={owner_password} dbname={building}");
            mneme_store::migrate::run(&url)
                .await
                .unwrap_or_else(|e| panic!("migrating the test template failed: {e}"));
            client
                .batch_execute(&format!("ALTER DATABASE {building} RENAME TO {template}"))
                .await
                .expect("publish the template database");
        }
        client
            .execute("SELECT pg_advisory_unlock(727001)", &[])
            .await
            .expect("advisory unlock");

        let name = format!("mneme_test_{}", Uuid::new_v4().simple());
        client
            .batch_execute(&format!("CREATE DATABASE {name} TEMPLATE {template}"))
            .await
            .unwrap_or_else(|e| panic!("cannot create test database {name}: {e}"));

        let app_user = std::env::var("MNEME_TEST_APP_USER").unwrap_or_else(|_| "mneme_app".into());
        let app_password =
            std::env::var("MNEME_TEST_APP_PASSWORD").unwrap_or_else(|_| "mneme_app".into());
        Self {
            app_url: format!("{base} user={app_user} password={app_password} dbname={name}"),
            owner_url: format!("{base} user={owner_user} password={owner_password} dbname={name}"),
            name,
            admin_conninfo,
        }
    }

    /// A new database migrated up to `version` only, as a deployment of
    /// that version left it: tests of a data migration fill it, then apply
    /// the rest with `mneme_store::migrate::run(&db.owner_url)`.
    pub async fn create_at_version(version: i32) -> Self {
        init_logging();
        let db = Self::create().await;
        let client = admin_client(&db.admin_conninfo).await;
        client
            .batch_execute(&format!("DROP DATABASE {} WITH (FORCE)", db.name))
            .await
            .expect("drop the migrated test database");
        client
            .batch_execute(&format!("CREATE DATABASE {} TEMPLATE template1", db.name))
            .await
            .expect("create an empty test database");
        mneme_store::migrate::run_until(&db.owner_url, version)
            .await
            .unwrap_or_else(|e| panic!("migrating the test database to V{version} failed: {e}"));
        db
    }

    /// A store connected as the services' role.
    pub fn store(&self) -> Store {
        Store::connect(&self.app_url, &StoreOptions::default()).expect("test store")
    }

    /// A raw client as the owner role. Row-level security is forced on the
    /// owner too, so tenant data is visible only through
    /// [`TestDatabase::owner_in_tenant`].
    pub async fn owner_client(&self) -> tokio_postgres::Client {
        admin_client(&self.owner_url).await
    }

    /// `SELECT count(*) FROM mneme.fragments WHERE <condition>` within one
    /// tenant, bypassing the services (for assertions).
    pub async fn count_in_tenant(&self, tenant_id: Uuid, condition: &str) -> i64 {
        self.count_rows(tenant_id, "fragments", condition).await
    }

    /// A client as the owner role inside `tenant_id` for its whole session
    /// (row-level security is forced on the owner too).
    pub async fn owner_in_tenant(&self, tenant_id: Uuid) -> tokio_postgres::Client {
        let client = self.owner_client().await;
        client
            .execute(
                "SELECT set_config('mneme.tenant_id', $1, false)",
                &[&tenant_id.to_string()],
            )
            .await
            .expect("set tenant");
        client
    }

    /// `SELECT count(*) FROM mneme.<table> WHERE <condition>` within one
    /// tenant, bypassing the services (for assertions).
    pub async fn count_rows(&self, tenant_id: Uuid, table: &str, condition: &str) -> i64 {
        self.owner_in_tenant(tenant_id)
            .await
            .query_one(
                &format!(
                    "SELECT count(*) FROM mneme.{table} WHERE tenant_id = $1 AND ({condition})"
                ),
                &[&tenant_id],
            )
            .await
            .expect("count rows")
            .get(0)
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("test failed; database {} kept for inspection", self.name);
            return;
        }
        // For profiling a benchmark's data after the run (EXPLAIN on what a
        // load test seeded); the caller drops the database by hand.
        if std::env::var_os("MNEME_TEST_KEEP_DATABASE").is_some_and(|v| v == "1") {
            eprintln!("MNEME_TEST_KEEP_DATABASE=1: database {} kept", self.name);
            return;
        }
        let conninfo = self.admin_conninfo.clone();
        let name = self.name.clone();
        // Drop must not block the test's runtime; a helper thread with its
        // own runtime does the cleanup.
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("cleanup runtime");
            runtime.block_on(async {
                if let Ok((client, _driver)) = mneme_store::tls::connect(&conninfo, None).await
                    && let Err(e) = client
                        .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                        .await
                {
                    eprintln!("could not drop test database {name}: {e:?}");
                }
            });
        })
        .join();
    }
}

/// A Redis namespace of its own for one test.
#[derive(Debug, Clone)]
pub struct TestRedis {
    pub url: String,
    pub prefix: String,
}

impl TestRedis {
    pub fn new() -> Self {
        Self {
            url: required_env("MNEME_TEST_REDIS_URL"),
            prefix: format!("mneme-test:{}:", Uuid::new_v4().simple()),
        }
    }
}

impl Default for TestRedis {
    fn default() -> Self {
        Self::new()
    }
}

/// A tenant with one API key.
#[derive(Debug, Clone)]
pub struct TestTenant {
    pub tenant_id: Uuid,
    pub name: String,
    pub key_id: Uuid,
    /// The raw `mn_…` key, for clients.
    pub api_key: String,
}

impl TestTenant {
    /// The tenant's key as an in-process caller with read and write, agent
    /// `default`, no workspace, mode or session (what service-level tests
    /// call the services as).
    pub fn principal(&self) -> mneme_core::Principal {
        mneme_core::Principal {
            tenant_id: self.tenant_id,
            key_id: self.key_id,
            group_key_ids: vec![],
            user_id: None,
            permissions: ALL_PERMISSIONS.to_vec(),
            workspace: None,
            mode: None,
            session_id: None,
            agent_id: "default".into(),
        }
    }
}

/// Runs `work` on a runtime of its own, dropped as soon as `work` returns,
/// as when a process exits: whatever `work` left running dies with it (for
/// tests of what a stopping service finishes first). The runtime runs on a
/// blocking thread, so the caller's keeps going.
pub async fn on_own_runtime<F, Fut, T>(work: F) -> T
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = T>,
    T: Send + 'static,
{
    tokio::task::spawn_blocking(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime")
            .block_on(work())
    })
    .await
    .expect("the runtime's thread")
}

/// Creates a tenant named `name` with one key holding `permissions`.
pub async fn create_tenant(store: &Store, name: &str, permissions: &[Permission]) -> TestTenant {
    let client = store.client().await.expect("database connection");
    let tenant = tenants::create(&client, name)
        .await
        .expect("create test tenant");
    drop(client);
    let mut client = store.client().await.expect("database connection");
    let tx = TenantTx::begin(&mut client, tenant.id)
        .await
        .expect("tenant tx");
    let (key_id, raw) = new_key(&tx, "test-key", permissions).await;
    tx.commit().await.expect("commit test key");
    TestTenant {
        tenant_id: tenant.id,
        name: tenant.name,
        key_id,
        api_key: raw,
    }
}

/// Adds a key named `name` with read and write to `tenant`; its id.
pub async fn add_key(store: &Store, tenant: &TestTenant, name: &str) -> Uuid {
    let mut client = store.client().await.expect("database connection");
    let tx = TenantTx::begin(&mut client, tenant.tenant_id)
        .await
        .expect("tenant tx");
    let (key, _) = new_key(&tx, name, ALL_PERMISSIONS).await;
    tx.commit().await.expect("commit test key");
    key
}

/// Adds a key named `name` and a key group holding it and `tenant`'s own
/// key (each reads the other's memories); the new key's id.
pub async fn add_group_peer(store: &Store, tenant: &TestTenant, name: &str) -> Uuid {
    let mut client = store.client().await.expect("database connection");
    let tx = TenantTx::begin(&mut client, tenant.tenant_id)
        .await
        .expect("tenant tx");
    let (peer, _) = new_key(&tx, name, ALL_PERMISSIONS).await;
    let group = key_groups::create(&tx, &format!("{name}'s group"), None)
        .await
        .expect("create test group");
    for key in [tenant.key_id, peer] {
        key_groups::add_member(&tx, group.id, key)
            .await
            .expect("add group member");
    }
    tx.commit().await.expect("commit test group");
    peer
}

/// A new key's id and raw secret.
async fn new_key(tx: &TenantTx<'_>, name: &str, permissions: &[Permission]) -> (Uuid, String) {
    let (key, raw) = api_keys::create(
        tx,
        &NewKey {
            name: name.into(),
            permissions: permissions.to_vec(),
            default_workspace: None,
            fragment_limit: None,
            expires_at: None,
        },
    )
    .await
    .expect("create test key");
    (key.id, raw)
}

/// Every permission, for keys that should be able to do anything.
pub const ALL_PERMISSIONS: &[Permission] = &[Permission::Read, Permission::Write];

/// Creates a person (who signs in with `password`) in `tenant_id`.
pub async fn create_user(
    store: &Store,
    tenant_id: Uuid,
    email: &str,
    role: mneme_store::users::Role,
    password: &str,
) {
    let hash = mneme_core::password::hash(password).expect("a valid test password");
    let mut client = store.client().await.expect("database connection");
    let tx = TenantTx::begin(&mut client, tenant_id)
        .await
        .expect("tenant tx");
    mneme_store::users::create(&tx, email, role, &hash)
        .await
        .expect("create test user");
    tx.commit().await.expect("commit test user");
}

/// A fragment as a search loads it, created now, with the defaults a plain
/// `remember` gives (agent `default`, tier `warm`, embedded, 10 tokens).
pub fn stored_fragment(
    content: &str,
    fragment_type: &str,
    importance: f32,
) -> mneme_store::fragments::Fragment {
    mneme_store::fragments::Fragment {
        id: Uuid::new_v4(),
        key_id: Uuid::nil(),
        agent_id: "default".into(),
        session_id: None,
        workspace: None,
        content: content.into(),
        topic: "t".into(),
        keywords: Vec::new(),
        fragment_type: fragment_type.into(),
        importance,
        ttl_tier: "warm".into(),
        is_anchor: false,
        source: None,
        context_summary: None,
        case_id: None,
        goal: None,
        outcome: None,
        phase: None,
        resolution_status: None,
        assertion_status: "observed".into(),
        affect: "neutral".into(),
        access_count: 0,
        accessed_at: None,
        ema_activation: 0.0,
        estimated_tokens: 10,
        occurred_at: None,
        valid_to: None,
        created_at: chrono::Utc::now(),
        embedded: true,
    }
}
