//! The consolidation schedule across real processes: two consolidators
//! polling the same database consolidate each tenant once per interval, and
//! when one is killed the other keeps every tenant consolidated.

use std::process::Stdio;
use std::time::{Duration, Instant};

use mneme_test_support::{ALL_PERMISSIONS, TestDatabase, TestRedis, TestTenant, create_tenant};
use tokio::process::{Child, Command};

fn spawn_consolidator(db: &TestDatabase, redis: &TestRedis) -> Child {
    Command::new(env!("CARGO_BIN_EXE_mneme-consolidator"))
        .env("MNEME_DATABASE_URL", &db.app_url)
        .env("MNEME_REDIS_URL", &redis.url)
        .env("MNEME_REDIS_PREFIX", &redis.prefix)
        .env("MNEME_EMBEDDER", "hash")
        .env("MNEME_CONSOLIDATION_POLL_SECS", "1")
        .env("MNEME_CONSOLIDATION_INTERVAL_SECS", "3600")
        .env("MNEME_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("start mneme-consolidator")
}

async fn runs(db: &TestDatabase, tenant: &TestTenant) -> i64 {
    db.count_rows(
        tenant.tenant_id,
        "consolidation_runs",
        "trigger = 'schedule'",
    )
    .await
}

async fn wait_for_runs(db: &TestDatabase, tenants: &[TestTenant], expected: &[i64]) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut counts = Vec::new();
        for tenant in tenants {
            counts.push(runs(db, tenant).await);
        }
        if counts == expected {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "runs per tenant: {counts:?}, expected {expected:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn two_consolidators_run_each_tenant_once_and_the_survivor_takes_over() {
    let db = TestDatabase::create().await;
    let redis = TestRedis::new();
    let store = db.store();
    let mut tenants = Vec::new();
    for name in ["acme", "globex", "initech"] {
        tenants.push(create_tenant(&store, name, ALL_PERMISSIONS).await);
    }
    let mut first = spawn_consolidator(&db, &redis);
    let _second = spawn_consolidator(&db, &redis);

    wait_for_runs(&db, &tenants, &[1, 1, 1]).await;
    // Both keep polling every second; within the interval nobody runs again.
    tokio::time::sleep(Duration::from_secs(3)).await;
    wait_for_runs(&db, &tenants, &[1, 1, 1]).await;

    // One consolidator dies; a tenant falls due: the other one runs it.
    first.start_kill().unwrap();
    first.wait().await.unwrap();
    let mut owner = db.owner_client().await;
    let tx = owner.transaction().await.unwrap();
    tx.execute(
        "SELECT set_config('mneme.tenant_id', $1, true)",
        &[&tenants[1].tenant_id.to_string()],
    )
    .await
    .unwrap();
    tx.execute(
        "UPDATE mneme.consolidation_state SET last_started_at = NULL",
        &[],
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    wait_for_runs(&db, &tenants, &[1, 2, 1]).await;
}
