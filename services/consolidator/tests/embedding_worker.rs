//! The embedding worker as a real process: 1,000 fragments written through
//! the remember service, the worker killed with SIGKILL in the middle of a
//! batch, a new worker started — and every fragment ends up embedded once.

use std::process::Stdio;
use std::time::{Duration, Instant};

use mneme_cache::Cache;
use mneme_config::Config;
use mneme_proto::v1::RememberRequest;
use mneme_remember::RememberServer;
use mneme_test_support::{ALL_PERMISSIONS, TestDatabase, TestRedis, create_tenant};
use tokio::process::{Child, Command};
use uuid::Uuid;

const FRAGMENTS: usize = 1000;

fn spawn_worker(db: &TestDatabase, redis: &TestRedis) -> Child {
    Command::new(env!("CARGO_BIN_EXE_mneme-consolidator"))
        .env("MNEME_DATABASE_URL", &db.app_url)
        .env("MNEME_REDIS_URL", &redis.url)
        .env("MNEME_REDIS_PREFIX", &redis.prefix)
        .env("MNEME_EMBEDDER", "e5")
        .env(
            "MNEME_E5_DIR",
            std::env::var("MNEME_E5_DIR").expect("MNEME_E5_DIR is set by ./deploy/local/test.sh"),
        )
        .env("MNEME_EMBED_BATCH_SIZE", "64")
        .env("MNEME_EMBED_SWEEP_SECS", "1")
        // Only the embedding worker is under test: consolidation's row
        // locks would look like the killed worker's.
        .env("MNEME_CONSOLIDATION", "false")
        .env("MNEME_LOG", "warn")
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("start mneme-consolidator")
}

/// (rows without an embedding, of which locked by another transaction).
async fn queue_state(db: &TestDatabase, tenant_id: Uuid) -> (i64, i64) {
    let mut client = db.owner_client().await;
    let tx = client.transaction().await.unwrap();
    tx.execute(
        "SELECT set_config('mneme.tenant_id', $1, true)",
        &[&tenant_id.to_string()],
    )
    .await
    .unwrap();
    let pending: i64 = tx
        .query_one(
            "SELECT count(*) FROM mneme.fragments WHERE tenant_id = $1 AND embedding IS NULL",
            &[&tenant_id],
        )
        .await
        .unwrap()
        .get(0);
    let available = tx
        .query(
            "SELECT id FROM mneme.fragments WHERE tenant_id = $1 AND embedding IS NULL
               FOR NO KEY UPDATE SKIP LOCKED",
            &[&tenant_id],
        )
        .await
        .unwrap()
        .len() as i64;
    (pending, pending - available)
}

#[tokio::test]
async fn a_worker_killed_mid_batch_loses_nothing() {
    let db = TestDatabase::create().await;
    let redis = TestRedis::new();
    let store = db.store();
    let tenant = create_tenant(&store, "bulk", ALL_PERMISSIONS).await;
    let cache = Cache::connect(&redis.url, &redis.prefix).await.unwrap();
    let remember = RememberServer::new(store.clone(), cache, Config::defaults().remember);
    let caller = tenant.principal();
    for i in 0..FRAGMENTS {
        remember
            .remember(
                &caller,
                RememberRequest {
                    content: format!(
                        "Fact number {i}: service-{} runs in region r{}.",
                        i % 37,
                        i % 5
                    ),
                    topic: format!("topic-{}", i % 11),
                    r#type: "fact".into(),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
    }
    assert_eq!(
        queue_state(&db, tenant.tenant_id).await,
        (FRAGMENTS as i64, 0)
    );

    // Kill the first worker while it holds a batch: some rows embedded, some
    // locked by its open transaction.
    let mut first = spawn_worker(&db, &redis);
    let deadline = Instant::now() + Duration::from_secs(120);
    let locked_at_kill = loop {
        let (pending, locked) = queue_state(&db, tenant.tenant_id).await;
        if pending < FRAGMENTS as i64 && locked > 0 {
            first.start_kill().unwrap();
            break locked;
        }
        assert!(
            Instant::now() < deadline,
            "the worker never got going ({pending} pending)"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    first.wait().await.unwrap();
    let (pending_after_kill, locked) = queue_state(&db, tenant.tenant_id).await;
    assert_eq!(locked, 0, "the killed worker's locks were released");
    assert!(
        pending_after_kill >= locked_at_kill,
        "the interrupted batch stayed in the queue"
    );

    // A new worker finishes the queue.
    let mut second = spawn_worker(&db, &redis);
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let (pending, _) = queue_state(&db, tenant.tenant_id).await;
        if pending == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{pending} fragments still without embeddings"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    second.start_kill().unwrap();
    second.wait().await.unwrap();

    assert_eq!(
        db.count_in_tenant(tenant.tenant_id, "true").await,
        FRAGMENTS as i64
    );
    assert_eq!(
        db.count_in_tenant(
            tenant.tenant_id,
            "embedding_model = 'multilingual-e5-small-q4' AND vector_dims(embedding) = 384"
        )
        .await,
        FRAGMENTS as i64
    );
}
