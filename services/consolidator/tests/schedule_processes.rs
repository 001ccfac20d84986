//! The consolidation schedule across real processes: two consolidators
//! polling the same database consolidate each tenant once per interval;
//! when one is killed the other keeps every tenant consolidated, and when
//! one is killed in the middle of a run the other runs it again to the
//! same result.

use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use mneme_cache::Cache;
use mneme_config::Config;
use mneme_proto::v1::RememberRequest;
use mneme_remember::RememberServer;
use mneme_test_support::{ALL_PERMISSIONS, TestDatabase, TestRedis, TestTenant, create_tenant};
use tokio::process::{Child, Command};
use uuid::Uuid;

fn spawn_consolidator(db: &TestDatabase, redis: &TestRedis) -> Child {
    spawn_consolidator_with(db, redis, &[])
}

fn spawn_consolidator_with(db: &TestDatabase, redis: &TestRedis, env: &[(&str, &str)]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_mneme-consolidator"))
        .envs(env.iter().copied())
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

/// An OpenAI-compatible chat stub whose first call never gets an answer (the
/// consolidator that made it is killed meanwhile); later calls find the
/// notes contradictory at once.
#[derive(Default)]
struct StallingJudge {
    calls: AtomicUsize,
    first_call: tokio::sync::Notify,
}

async fn start_stalling_judge() -> (Arc<StallingJudge>, String) {
    use axum::Json;
    use axum::extract::State;
    use serde_json::{Value, json};
    async fn complete(State(judge): State<Arc<StallingJudge>>) -> Json<Value> {
        if judge.calls.fetch_add(1, Ordering::SeqCst) == 0 {
            judge.first_call.notify_one();
            std::future::pending::<()>().await;
        }
        Json(json!({"choices": [{"message": {"role": "assistant",
            "content": "{\"verdict\": \"contradiction\"}"}}],
            "usage": {"total_tokens": 100}}))
    }
    let judge = Arc::new(StallingJudge::default());
    let app = axum::Router::new()
        .route("/v1/chat/completions", axum::routing::post(complete))
        .with_state(Arc::clone(&judge));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (judge, url)
}

#[tokio::test]
async fn a_consolidator_killed_mid_run_leaves_the_run_to_the_other_with_the_same_result() {
    let db = TestDatabase::create().await;
    let redis = TestRedis::new();
    let store = db.store();
    let tenant = create_tenant(&store, "acme", ALL_PERMISSIONS).await;
    // Two statements the rules cannot tell apart: contradiction detection
    // queues the pair, and adjudication (a later stage) asks the model.
    let remember = RememberServer::new(
        store.clone(),
        Cache::connect(&redis.url, &redis.prefix).await.unwrap(),
        Config::defaults().remember,
    );
    let mut ids = Vec::new();
    for content in ["Deploys run on Mondays.", "Deploys run on Fridays."] {
        let id: Uuid = remember
            .remember(
                &tenant.principal(),
                RememberRequest {
                    content: content.into(),
                    topic: "deploys".into(),
                    r#type: "fact".into(),
                    ..Default::default()
                },
            )
            .await
            .unwrap()
            .id
            .parse()
            .unwrap();
        ids.push(id);
    }
    let same_direction: Vec<&str> = (0..384).map(|d| if d == 7 { "1" } else { "0" }).collect();
    db.owner_in_tenant(tenant.tenant_id)
        .await
        .execute(
            &format!(
                // As the consolidator's own embedder (hash, topic recipe)
                // stores them: a vector of another model or recipe would be
                // re-embedded by its embedding worker under the test's feet.
                "UPDATE mneme.fragments SET embedding = '[{}]'::vector,
                        embedding_model = 'hash-v1-384', embedding_recipe = 1
                  WHERE id = ANY($1)",
                same_direction.join(",")
            ),
            &[&ids],
        )
        .await
        .unwrap();

    let (judge, url) = start_stalling_judge().await;
    let env = [("MNEME_LLM_URL", url.as_str()), ("MNEME_LLM_MODEL", "stub")];
    let mut first = spawn_consolidator_with(&db, &redis, &env);
    tokio::time::timeout(Duration::from_secs(60), judge.first_call.notified())
        .await
        .expect("the first consolidator reached the adjudication stage");
    // Mid-run: the stages before adjudication are committed, the run is not
    // recorded, and the lease is held.
    assert_eq!(runs(&db, &tenant).await, 0);
    assert_eq!(
        db.count_rows(
            tenant.tenant_id,
            "contradiction_candidates",
            "status = 'pending'"
        )
        .await,
        1
    );
    let _second = spawn_consolidator_with(&db, &redis, &env);
    first.start_kill().unwrap();
    first.wait().await.unwrap();

    // The lease went with the killed process's connection: the other
    // consolidator runs the tenant, every stage, once.
    wait_for_runs(&db, std::slice::from_ref(&tenant), &[1]).await;
    assert_eq!(judge.calls.load(Ordering::SeqCst), 2);
    let failed_stages = db
        .count_rows(tenant.tenant_id, "consolidation_runs", "status = 'failed'")
        .await;
    assert_eq!(failed_stages, 0, "the survivor's run failed a stage");
    assert_eq!(
        db.count_rows(
            tenant.tenant_id,
            "contradiction_candidates",
            "status = 'contradiction'"
        )
        .await,
        1,
        "the pair is judged once"
    );
    assert_eq!(
        db.count_rows(
            tenant.tenant_id,
            "fragment_links",
            &format!(
                "from_id = '{}' AND to_id = '{}' AND relation_type = 'contradicts'",
                ids[1], ids[0]
            )
        )
        .await,
        1
    );
}
