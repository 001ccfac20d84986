//! The in-process harness of the recall tests: remember, recall and the
//! embedding worker on a database and Redis prefix of their own.
#![allow(dead_code)] // each test file uses a different part

use std::sync::Arc;

use mneme_cache::Cache;
use mneme_config::Config;
use mneme_consolidator::EmbeddingWorker;
use mneme_core::Principal;
use mneme_embed::{EmbedError, Embedder, TextKind};
use mneme_proto::v1::{RecallRequest, RecallResponse, RememberRequest};
use mneme_recall::RecallServer;
use mneme_remember::RememberServer;
use mneme_test_support::{ALL_PERMISSIONS, TestDatabase, TestRedis, TestTenant, create_tenant};
use tokio_util::sync::CancellationToken;

/// An embedder whose provider is down.
#[derive(Debug)]
pub(crate) struct DownEmbedder;

#[async_trait::async_trait]
impl Embedder for DownEmbedder {
    fn model_id(&self) -> &str {
        "down"
    }

    fn dimension(&self) -> usize {
        384
    }

    async fn embed(&self, _: &[String], _: TextKind) -> Result<Vec<Vec<f32>>, EmbedError> {
        Err(EmbedError::Unavailable("connection refused".into()))
    }
}

pub(crate) struct Harness {
    pub(crate) db: TestDatabase,
    pub(crate) redis: TestRedis,
    pub(crate) tenant: TestTenant,
    pub(crate) remember: RememberServer,
    pub(crate) recall: RecallServer,
    pub(crate) worker: EmbeddingWorker,
}

impl Harness {
    pub(crate) async fn new(embedder: Arc<dyn Embedder>) -> Self {
        Self::with_remember_config(embedder, Config::defaults().remember).await
    }

    /// A harness whose remember service runs with `settings`.
    pub(crate) async fn with_remember_config(
        embedder: Arc<dyn Embedder>,
        settings: mneme_config::RememberConfig,
    ) -> Self {
        Self::with_configs(embedder, settings, Config::defaults().recall).await
    }

    /// A harness whose recall service runs with `settings`.
    pub(crate) async fn with_recall_config(
        embedder: Arc<dyn Embedder>,
        settings: mneme_config::RecallConfig,
    ) -> Self {
        Self::with_configs(embedder, Config::defaults().remember, settings).await
    }

    pub(crate) async fn with_configs(
        embedder: Arc<dyn Embedder>,
        remember: mneme_config::RememberConfig,
        recall: mneme_config::RecallConfig,
    ) -> Self {
        let db = TestDatabase::create().await;
        let redis = TestRedis::new();
        let store = db.store();
        let tenant = create_tenant(&store, "recall", ALL_PERMISSIONS).await;
        let cache = Cache::connect(&redis.url, &redis.prefix).await.unwrap();
        Self {
            remember: RememberServer::new(store.clone(), cache.clone(), remember),
            recall: RecallServer::new(store.clone(), cache.clone(), embedder.clone(), recall),
            worker: EmbeddingWorker::new(store, embedder, 32).with_cache(cache),
            tenant,
            redis,
            db,
        }
    }

    pub(crate) fn principal(&self) -> Principal {
        self.tenant.principal()
    }

    pub(crate) async fn store(
        &self,
        content: &str,
        kind: &str,
        topic: &str,
        extra: RememberRequest,
    ) -> String {
        self.remember
            .remember(
                &self.principal(),
                RememberRequest {
                    content: content.into(),
                    r#type: kind.into(),
                    topic: topic.into(),
                    ..extra
                },
            )
            .await
            .unwrap()
            .id
    }

    pub(crate) async fn recall(&self, request: RecallRequest) -> RecallResponse {
        self.recall
            .recall(&self.principal(), request)
            .await
            .unwrap()
    }

    /// Embeds every fragment of the tenant. The worker skips rows another
    /// transaction holds (the access tracking after a recall), so it drains
    /// until nothing is left rather than once.
    pub(crate) async fn embed_all(&self) {
        for _ in 0..100 {
            self.worker
                .drain_tenant(self.tenant.tenant_id, &CancellationToken::new())
                .await
                .unwrap();
            let pending = self
                .db
                .count_in_tenant(self.tenant.tenant_id, "embedding IS NULL")
                .await;
            if pending == 0 {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        panic!("fragments stayed unembedded");
    }
}
