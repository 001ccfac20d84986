//! Vectors computed by another model or from another passage recipe are
//! stale: the embedding worker re-embeds them once the tenant's queue is
//! empty, with the current recipe's text, and new fragments go first.

use std::sync::{Arc, Mutex};

use mneme_cache::Cache;
use mneme_config::Config;
use mneme_consolidator::EmbeddingWorker;
use mneme_embed::{EmbedError, Embedder, PassageRecipe, TextKind};
use mneme_proto::v1::RememberRequest;
use mneme_remember::RememberServer;
use mneme_test_support::{ALL_PERMISSIONS, TestDatabase, TestRedis, TestTenant, create_tenant};
use tokio_util::sync::CancellationToken;

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
