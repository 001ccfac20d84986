//! The embedding queue's hard cases. A fragment whose text the embedding
//! provider rejects is retried with backoff and then parked, without
//! holding up the rest of its tenant's queue; `requeue_parked_embeddings`
//! puts it back. A provider too slow for the configured batch size gets
//! smaller batches until they go through. Vectors computed by another model
//! or from another passage recipe are stale: the worker re-embeds them once
//! the tenant's queue is empty, with the current recipe's text, and new
//! fragments go first. Batches in flight side by side take turns on the
//! model and never embed a fragment twice.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mneme_cache::Cache;
use mneme_config::Config;
use mneme_consolidator::EmbeddingWorker;
use mneme_embed::{EmbedError, Embedder, PassageRecipe, TextKind};
use mneme_proto::v1::RememberRequest;
use mneme_remember::RememberServer;
use mneme_store::{TenantTx, fragments};
use mneme_test_support::{ALL_PERMISSIONS, TestDatabase, TestRedis, TestTenant, create_tenant};
use tokio_util::sync::CancellationToken;

/// Rejects any text containing "POISON" unless `cured`.
#[derive(Debug, Default)]
struct Picky {
    cured: AtomicBool,
}

#[async_trait::async_trait]
impl Embedder for Picky {
    fn model_id(&self) -> &str {
        "picky"
    }
    fn dimension(&self) -> usize {
        384
    }
    async fn embed(&self, texts: &[String], _: TextKind) -> Result<Vec<Vec<f32>>, EmbedError> {
        if !self.cured.load(Ordering::SeqCst) && texts.iter().any(|t| t.contains("POISON")) {
            return Err(EmbedError::Failed("input rejected by the provider".into()));
        }
        Ok(texts.iter().map(|_| vec![1.0; 384]).collect())
    }
}

/// Records every text it embeds, under a model id of the test's choice.
#[derive(Debug)]
struct Recording {
    model: &'static str,
    texts: Mutex<Vec<String>>,
}

impl Recording {
    fn new(model: &'static str) -> Arc<Self> {
        Arc::new(Self {
            model,
            texts: Mutex::default(),
        })
    }

    fn take(&self) -> Vec<String> {
        let mut texts = std::mem::take(&mut *self.texts.lock().unwrap());
        texts.sort();
        texts
    }
}

#[async_trait::async_trait]
impl Embedder for Recording {
    fn model_id(&self) -> &str {
        self.model
    }
    fn dimension(&self) -> usize {
        384
    }
    async fn embed(&self, texts: &[String], _: TextKind) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.texts.lock().unwrap().extend_from_slice(texts);
        Ok(texts.iter().map(|_| vec![1.0; 384]).collect())
    }
}

struct Setup {
    db: TestDatabase,
    _redis: TestRedis,
    store: mneme_store::Store,
    tenant: TestTenant,
    remember: RememberServer,
}

async fn setup() -> Setup {
    let db = TestDatabase::create().await;
    let redis = TestRedis::new();
    let store = db.store();
    let tenant = create_tenant(&store, "acme", ALL_PERMISSIONS).await;
    let cache = Cache::connect(&redis.url, &redis.prefix).await.unwrap();
    let remember = RememberServer::new(store.clone(), cache, Config::defaults().remember);
    Setup {
        db,
        _redis: redis,
        store,
        tenant,
        remember,
    }
}

#[tokio::test]
async fn a_rejected_fragment_is_retried_then_parked_and_never_blocks_the_queue() {
    let Setup {
        db,
        _redis,
        store,
        tenant,
        remember,
    } = setup().await;
    let principal = tenant.principal();
    for content in [
        "The deploy runs at noon every weekday.",
        "This POISON fragment upsets the provider every time.",
        "Backups are kept for thirty days.",
    ] {
        remember
            .remember(
                &principal,
                RememberRequest {
                    content: content.into(),
                    topic: "ops".into(),
                    r#type: "fact".into(),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
    }
    let picky = Arc::new(Picky::default());
    // Two tries, retried at once (no backoff) to keep the test fast.
    let worker =
        EmbeddingWorker::new(store.clone(), picky.clone(), 32).with_retries(2, Duration::ZERO);
    let stop = CancellationToken::new();
    let count = |condition: &'static str| db.count_in_tenant(tenant.tenant_id, condition);

    worker.drain_tenant(tenant.tenant_id, &stop).await.unwrap();
    assert_eq!(
        count("embedding IS NOT NULL").await,
        2,
        "the good ones are not held up"
    );
    assert_eq!(
        count("embedding_parked_at IS NOT NULL").await,
        1,
        "parked after two tries"
    );
    assert_eq!(
        count("embedding_attempts = 2 AND embedding_error LIKE '%rejected%'").await,
        1
    );
    let pending = {
        let mut client = store.client().await.unwrap();
        let tx = TenantTx::begin(&mut client, tenant.tenant_id)
            .await
            .unwrap();
        fragments::count_pending_embeddings(&tx).await.unwrap()
    };
    assert_eq!(pending, 0, "a parked fragment is not pending");

    // After the provider is fixed, an operator requeues it.
    picky.cured.store(true, Ordering::SeqCst);
    let mut client = store.client().await.unwrap();
    let tx = TenantTx::begin(&mut client, tenant.tenant_id)
        .await
        .unwrap();
    assert_eq!(fragments::requeue_parked_embeddings(&tx).await.unwrap(), 1);
    tx.commit().await.unwrap();
    worker.drain_tenant(tenant.tenant_id, &stop).await.unwrap();
    assert_eq!(count("embedding IS NOT NULL").await, 3);
}

#[tokio::test]
async fn a_rejected_fragment_waits_for_its_backoff() {
    let Setup {
        db,
        _redis,
        store,
        tenant,
        remember,
    } = setup().await;
    let principal = tenant.principal();
    remember
        .remember(
            &principal,
            RememberRequest {
                content: "Another POISON fragment for the provider.".into(),
                topic: "ops".into(),
                r#type: "fact".into(),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let worker = EmbeddingWorker::new(store.clone(), Arc::new(Picky::default()), 32)
        .with_retries(5, Duration::from_secs(3600));
    let stop = CancellationToken::new();
    worker.drain_tenant(tenant.tenant_id, &stop).await.unwrap();
    worker.drain_tenant(tenant.tenant_id, &stop).await.unwrap();
    // One attempt: the second drain found it still waiting for its retry.
    assert_eq!(
        db.count_in_tenant(
            tenant.tenant_id,
            "embedding_attempts = 1 AND embedding_retry_at > now() + interval '50 minutes'
             AND embedding_parked_at IS NULL"
        )
        .await,
        1
    );
}

/// Misses its deadline (answers unavailable) on any batch larger than
/// `most`, as a slow provider on a loaded machine does.
#[derive(Debug)]
struct Overloaded {
    most: usize,
}

#[async_trait::async_trait]
impl Embedder for Overloaded {
    fn model_id(&self) -> &str {
        "overloaded"
    }
    fn dimension(&self) -> usize {
        384
    }
    async fn embed(&self, texts: &[String], _: TextKind) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.len() > self.most {
            return Err(EmbedError::Unavailable(
                "embedding call exceeded its deadline".into(),
            ));
        }
        Ok(texts.iter().map(|_| vec![1.0; 384]).collect())
    }
}

#[tokio::test]
async fn batches_shrink_until_a_slow_provider_keeps_up_then_grow_back() {
    let Setup {
        db,
        _redis,
        store,
        tenant,
        remember,
    } = setup().await;
    let principal = tenant.principal();
    for n in 0..40 {
        remember
            .remember(
                &principal,
                RememberRequest {
                    content: format!("Fact number {n} about the nightly build."),
                    topic: "ops".into(),
                    r#type: "fact".into(),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
    }
    // One batch in flight, so that each drain adapts the size exactly once.
    let worker = EmbeddingWorker::new(store.clone(), Arc::new(Overloaded { most: 5 }), 32)
        .with_batches_in_flight(1);
    let stop = CancellationToken::new();
    // 32 and 16 and 8 miss the deadline; 4 goes through.
    for expected_next in [16, 8, 4] {
        assert!(worker.drain_tenant(tenant.tenant_id, &stop).await.is_err());
        assert_eq!(worker.current_batch_size(), expected_next);
    }
    let embedded = worker.drain_tenant(tenant.tenant_id, &stop).await;
    // 4 succeeds and grows to 6, which fails; the drain reports the failure.
    assert!(embedded.is_err());
    assert_eq!(worker.current_batch_size(), 3);
    assert_eq!(
        db.count_in_tenant(tenant.tenant_id, "embedding IS NOT NULL")
            .await,
        4
    );
    // Between 3 and 5 it keeps making progress until the queue is empty.
    while db
        .count_in_tenant(tenant.tenant_id, "embedding IS NULL")
        .await
        > 0
    {
        let _ = worker.drain_tenant(tenant.tenant_id, &stop).await;
        assert!(worker.current_batch_size() >= 2);
    }
    assert_eq!(
        db.count_in_tenant(tenant.tenant_id, "embedding IS NOT NULL")
            .await,
        40
    );
}

async fn remember(setup: &Setup, topic: &str, content: &str) {
    setup
        .remember
        .remember(
            &setup.tenant.principal(),
            RememberRequest {
                content: content.into(),
                topic: topic.into(),
                r#type: "fact".into(),
                ..Default::default()
            },
        )
        .await
        .unwrap();
}

fn worker(setup: &Setup, embedder: &Arc<Recording>, recipe: PassageRecipe) -> EmbeddingWorker {
    EmbeddingWorker::new(setup.store.clone(), embedder.clone(), 32).with_recipe(recipe)
}

#[tokio::test]
async fn a_recipe_change_re_embeds_every_vector_with_the_new_text_once() {
    let setup = setup().await;
    remember(
        &setup,
        "payments",
        "Raise the gateway timeout to 30 seconds.",
    )
    .await;
    remember(&setup, "backups", "Backups are kept for thirty days.").await;
    let stop = CancellationToken::new();
    let count =
        |condition: &'static str| setup.db.count_in_tenant(setup.tenant.tenant_id, condition);

    let model = Recording::new("recording");
    worker(&setup, &model, PassageRecipe::Content)
        .drain_tenant(setup.tenant.tenant_id, &stop)
        .await
        .unwrap();
    assert_eq!(
        model.take(),
        [
            "Backups are kept for thirty days.",
            "Raise the gateway timeout to 30 seconds."
        ]
    );
    assert_eq!(
        count("embedding IS NOT NULL AND embedding_recipe = 0").await,
        2
    );

    // A deploy with the topic recipe: the worker re-embeds both, and a
    // fragment written meanwhile is embedded in the first batch.
    remember(&setup, "payments", "Retries back off exponentially.").await;
    let upgraded = worker(&setup, &model, PassageRecipe::TopicAndContent);
    let before = reembedded_total();
    upgraded
        .drain_tenant(setup.tenant.tenant_id, &stop)
        .await
        .unwrap();
    assert_eq!(
        model.take(),
        [
            "backups: Backups are kept for thirty days.",
            "payments: Raise the gateway timeout to 30 seconds.",
            "payments: Retries back off exponentially.",
        ]
    );
    assert_eq!(
        count("embedding IS NOT NULL AND embedding_recipe = 1").await,
        3
    );
    assert_eq!(reembedded_total() - before, 2, "only the stale ones count");

    // Nothing is stale any more: another drain embeds nothing.
    upgraded
        .drain_tenant(setup.tenant.tenant_id, &stop)
        .await
        .unwrap();
    assert!(model.take().is_empty());
}

#[tokio::test]
async fn a_model_change_re_embeds_vectors_of_the_old_model() {
    let setup = setup().await;
    remember(&setup, "ops", "The deploy runs at noon every weekday.").await;
    let stop = CancellationToken::new();
    let old = Recording::new("old-model");
    worker(&setup, &old, PassageRecipe::TopicAndContent)
        .drain_tenant(setup.tenant.tenant_id, &stop)
        .await
        .unwrap();
    assert_eq!(old.take().len(), 1);

    let new = Recording::new("new-model");
    worker(&setup, &new, PassageRecipe::TopicAndContent)
        .drain_tenant(setup.tenant.tenant_id, &stop)
        .await
        .unwrap();
    assert_eq!(new.take(), ["ops: The deploy runs at noon every weekday."]);
    assert_eq!(
        setup
            .db
            .count_in_tenant(setup.tenant.tenant_id, "embedding_model = 'new-model'")
            .await,
        1
    );
}

#[tokio::test]
async fn amending_the_topic_re_embeds_the_fragment() {
    let setup = setup().await;
    remember(&setup, "ops", "Deploys are frozen on Fridays.").await;
    let stop = CancellationToken::new();
    let model = Recording::new("recording");
    let worker = worker(&setup, &model, PassageRecipe::TopicAndContent);
    worker
        .drain_tenant(setup.tenant.tenant_id, &stop)
        .await
        .unwrap();
    assert_eq!(model.take(), ["ops: Deploys are frozen on Fridays."]);

    let id: uuid::Uuid = setup
        .db
        .owner_in_tenant(setup.tenant.tenant_id)
        .await
        .query_one("SELECT id FROM mneme.fragments", &[])
        .await
        .unwrap()
        .get(0);
    setup
        .remember
        .amend(
            &setup.tenant.principal(),
            mneme_proto::v1::AmendRequest {
                id: id.to_string(),
                topic: Some("release-policy".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    worker
        .drain_tenant(setup.tenant.tenant_id, &stop)
        .await
        .unwrap();
    assert_eq!(
        model.take(),
        ["release-policy: Deploys are frozen on Fridays."]
    );
}

fn reembedded_total() -> u64 {
    mneme_telemetry::metrics::registry()
        .gather()
        .iter()
        .find(|family| family.name() == "mneme_embedding_reembedded_total")
        .map(|family| family.get_metric()[0].get_counter().get_value() as u64)
        .unwrap_or(0)
}

#[tokio::test]
async fn a_stale_vector_the_provider_rejects_is_re_embedded_after_its_backoff() {
    let setup = setup().await;
    remember(&setup, "ops", "The deploy runs at noon every weekday.").await;
    remember(&setup, "ops", "This POISON fragment upsets the provider.").await;
    let stop = CancellationToken::new();
    let count =
        |condition: &'static str| setup.db.count_in_tenant(setup.tenant.tenant_id, condition);
    let old = Recording::new("picky");
    worker(&setup, &old, PassageRecipe::Content)
        .drain_tenant(setup.tenant.tenant_id, &stop)
        .await
        .unwrap();
    assert_eq!(
        count("embedding_recipe = 0 AND embedding IS NOT NULL").await,
        2
    );

    // The new recipe's provider rejects one text once; its retry is due
    // after a second.
    let picky = Arc::new(Picky::default());
    let upgraded = EmbeddingWorker::new(setup.store.clone(), picky.clone(), 32)
        .with_recipe(PassageRecipe::TopicAndContent)
        .with_retries(3, Duration::from_secs(1));
    upgraded
        .drain_tenant(setup.tenant.tenant_id, &stop)
        .await
        .unwrap();
    assert_eq!(count("embedding_recipe = 1").await, 1);
    assert_eq!(count("embedding_retry_at IS NOT NULL").await, 1);

    picky.cured.store(true, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    upgraded
        .drain_tenant(setup.tenant.tenant_id, &stop)
        .await
        .unwrap();
    assert_eq!(
        count("embedding_recipe = 1").await,
        2,
        "the rejected stale vector was retried, not forgotten"
    );
}

#[tokio::test]
async fn a_parked_stale_vector_is_requeued_with_the_parked_fragments() {
    let setup = setup().await;
    remember(&setup, "ops", "This POISON fragment upsets the provider.").await;
    let stop = CancellationToken::new();
    let count =
        |condition: &'static str| setup.db.count_in_tenant(setup.tenant.tenant_id, condition);
    worker(&setup, &Recording::new("picky"), PassageRecipe::Content)
        .drain_tenant(setup.tenant.tenant_id, &stop)
        .await
        .unwrap();

    // The new recipe's provider rejects it on its only try: parked, while
    // the old vector keeps serving searches.
    let picky = Arc::new(Picky::default());
    let upgraded = || {
        EmbeddingWorker::new(setup.store.clone(), picky.clone(), 32)
            .with_recipe(PassageRecipe::TopicAndContent)
            .with_retries(1, Duration::from_secs(1))
    };
    upgraded()
        .drain_tenant(setup.tenant.tenant_id, &stop)
        .await
        .unwrap();
    assert_eq!(
        count("embedding_parked_at IS NOT NULL AND embedding_recipe = 0").await,
        1
    );

    picky.cured.store(true, Ordering::SeqCst);
    let mut client = setup.store.client().await.unwrap();
    let tx = TenantTx::begin(&mut client, setup.tenant.tenant_id)
        .await
        .unwrap();
    assert_eq!(fragments::requeue_parked_embeddings(&tx).await.unwrap(), 1);
    tx.commit().await.unwrap();
    upgraded()
        .drain_tenant(setup.tenant.tenant_id, &stop)
        .await
        .unwrap();
    assert_eq!(
        count("embedding_parked_at IS NULL AND embedding_recipe = 1").await,
        1,
        "the requeued stale vector was replaced"
    );
}

/// Takes `pause` per call and records when each call ran and what it got.
#[derive(Debug)]
struct Slow {
    pause: Duration,
    calls: Mutex<Vec<(std::time::Instant, std::time::Instant)>>,
    texts: Mutex<Vec<String>>,
}

#[async_trait::async_trait]
impl Embedder for Slow {
    fn model_id(&self) -> &str {
        "slow"
    }
    fn dimension(&self) -> usize {
        384
    }
    async fn embed(&self, texts: &[String], _: TextKind) -> Result<Vec<Vec<f32>>, EmbedError> {
        let started = std::time::Instant::now();
        tokio::time::sleep(self.pause).await;
        self.texts.lock().unwrap().extend_from_slice(texts);
        self.calls
            .lock()
            .unwrap()
            .push((started, std::time::Instant::now()));
        Ok(texts.iter().map(|_| vec![1.0; 384]).collect())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_in_flight_take_turns_on_the_model_and_embed_each_fragment_once() {
    let setup = setup().await;
    let contents: Vec<String> = (0..23)
        .map(|n| format!("Step {n} of the release checklist."))
        .collect();
    for content in &contents {
        remember(&setup, "release", content).await;
    }
    let slow = Arc::new(Slow {
        pause: Duration::from_millis(20),
        calls: Mutex::default(),
        texts: Mutex::default(),
    });
    let worker = EmbeddingWorker::new(setup.store.clone(), slow.clone(), 4)
        .with_recipe(PassageRecipe::Content)
        .with_batches_in_flight(3);
    let embedded = worker
        .drain_tenant(setup.tenant.tenant_id, &CancellationToken::new())
        .await
        .unwrap();

    assert_eq!(embedded, contents.len());
    let mut texts = slow.texts.lock().unwrap().clone();
    texts.sort();
    let mut expected = contents.clone();
    expected.sort();
    assert_eq!(texts, expected, "every fragment embedded exactly once");
    let mut calls = slow.calls.lock().unwrap().clone();
    assert_eq!(calls.len(), 6, "23 fragments in batches of 4");
    calls.sort();
    for pair in calls.windows(2) {
        assert!(
            pair[1].0 >= pair[0].1,
            "one batch at a time on the model: {pair:?}"
        );
    }
    assert_eq!(
        setup
            .db
            .count_in_tenant(setup.tenant.tenant_id, "embedding IS NULL")
            .await,
        0
    );
}
