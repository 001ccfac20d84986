//! The recall service against real PostgreSQL and Redis: layers, filters,
//! budgets and degradation. Services are called in-process (the gRPC hop is
//! covered by the end-to-end tests).

use std::sync::Arc;

use mneme_cache::Cache;
use mneme_config::Config;
use mneme_consolidator::EmbeddingWorker;
use mneme_core::{ErrorCode, Permission, Principal};
use mneme_embed::hash::HashEmbedder;
use mneme_embed::{EmbedError, Embedder, TextKind};
use mneme_proto::v1::{RecallRequest, RecallResponse, RememberRequest};
use mneme_recall::RecallServer;
use mneme_remember::RememberServer;
use mneme_test_support::{ALL_PERMISSIONS, TestDatabase, TestRedis, TestTenant, create_tenant};
use tokio_util::sync::CancellationToken;

/// An embedder whose provider is down.
#[derive(Debug)]
struct DownEmbedder;

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

struct Harness {
    _db: TestDatabase,
    tenant: TestTenant,
    remember: RememberServer,
    recall: RecallServer,
    worker: EmbeddingWorker,
}

impl Harness {
    async fn new(embedder: Arc<dyn Embedder>) -> Self {
        let db = TestDatabase::create().await;
        let redis = TestRedis::new();
        let store = db.store();
        let tenant = create_tenant(&store, "recall", ALL_PERMISSIONS).await;
        let cache = Cache::connect(&redis.url, &redis.prefix).await.unwrap();
        Self {
            remember: RememberServer::new(
                store.clone(),
                cache.clone(),
                Config::defaults().remember,
            ),
            recall: RecallServer::new(
                store.clone(),
                cache,
                embedder.clone(),
                Config::defaults().recall,
            ),
            worker: EmbeddingWorker::new(store, embedder, 32),
            tenant,
            _db: db,
        }
    }

    fn principal(&self) -> Principal {
        Principal {
            tenant_id: self.tenant.tenant_id,
            key_id: self.tenant.key_id,
            group_key_ids: vec![],
            user_id: None,
            permissions: ALL_PERMISSIONS.to_vec(),
            workspace: None,
            mode: None,
            session_id: None,
            agent_id: "default".into(),
        }
    }

    async fn store(
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

    async fn recall(&self, request: RecallRequest) -> RecallResponse {
        self.recall
            .recall(&self.principal(), request)
            .await
            .unwrap()
    }

    async fn embed_all(&self) {
        self.worker
            .drain_tenant(self.tenant.tenant_id, &CancellationToken::new())
            .await
            .unwrap();
    }
}

fn text(query: &str) -> RecallRequest {
    RecallRequest {
        text: Some(query.into()),
        ..Default::default()
    }
}

fn ids(response: &RecallResponse) -> Vec<&str> {
    response.fragments.iter().map(|f| f.id.as_str()).collect()
}

#[tokio::test]
async fn fresh_fragments_are_found_by_full_text_before_their_embedding_exists() {
    let h = Harness::new(Arc::new(HashEmbedder::new(384))).await;
    let id = h
        .store(
            "The billing service retries failed card payments three times.",
            "fact",
            "billing",
            Default::default(),
        )
        .await;
    let response = h.recall(text("how often are card payments retried?")).await;
    assert_eq!(ids(&response), vec![id.as_str()]);
    assert_eq!(response.layers, vec!["vector", "fulltext", "keyword"]);
    assert!(
        response.fragments[0]
            .matched_by
            .contains(&"fulltext".to_owned())
    );
    assert!(
        !response.fragments[0]
            .matched_by
            .contains(&"vector".to_owned())
    );

    // Once embedded, the vector layer finds it too.
    h.embed_all().await;
    let response = h.recall(text("how often are card payments retried?")).await;
    assert!(
        response.fragments[0]
            .matched_by
            .contains(&"vector".to_owned())
    );
    assert!(response.fragments[0].similarity.is_some());
}

#[tokio::test]
async fn type_topic_workspace_and_agent_filters_limit_the_search() {
    let h = Harness::new(Arc::new(HashEmbedder::new(384))).await;
    let decision = h
        .store(
            "We chose PostgreSQL for the ledger database.",
            "decision",
            "ledger",
            Default::default(),
        )
        .await;
    let fact = h
        .store(
            "The ledger database holds seven years of entries.",
            "fact",
            "ledger",
            Default::default(),
        )
        .await;
    let other_topic = h
        .store(
            "The ledger team meets on Tuesdays.",
            "fact",
            "team",
            Default::default(),
        )
        .await;
    let in_a = h
        .store(
            "Workspace A keeps its ledger exports in bucket alpha.",
            "fact",
            "ledger",
            RememberRequest {
                workspace: Some("a".into()),
                ..Default::default()
            },
        )
        .await;
    let in_b = h
        .store(
            "Workspace B keeps its ledger exports in bucket beta.",
            "fact",
            "ledger",
            RememberRequest {
                workspace: Some("b".into()),
                ..Default::default()
            },
        )
        .await;
    let by_coder = h
        .store(
            "The coder agent found a ledger rounding bug.",
            "error",
            "ledger",
            RememberRequest {
                agent_id: Some("coder".into()),
                ..Default::default()
            },
        )
        .await;
    h.embed_all().await;

    let only = |kind: &str| RecallRequest {
        text: Some("ledger".into()),
        r#type: Some(kind.into()),
        ..Default::default()
    };
    assert_eq!(
        ids(&h.recall(only("decision")).await),
        vec![decision.as_str()]
    );

    let by_topic = h
        .recall(RecallRequest {
            text: Some("ledger".into()),
            topic: Some("team".into()),
            ..Default::default()
        })
        .await;
    assert_eq!(ids(&by_topic), vec![other_topic.as_str()]);

    let in_workspace_a = h
        .recall(RecallRequest {
            text: Some("ledger".into()),
            workspace: Some("a".into()),
            ..Default::default()
        })
        .await;
    let found = ids(&in_workspace_a);
    assert!(
        found.contains(&in_a.as_str()) && found.contains(&fact.as_str()),
        "{found:?}"
    );
    assert!(!found.contains(&in_b.as_str()), "{found:?}");

    // The coder's memory is the coder's; shared (default-agent) ones are everybody's.
    let as_writer = h
        .recall(RecallRequest {
            text: Some("ledger rounding bug".into()),
            agent_id: Some("writer".into()),
            ..Default::default()
        })
        .await;
    assert!(!ids(&as_writer).contains(&by_coder.as_str()));
    assert!(ids(&as_writer).contains(&fact.as_str()));
    let as_coder = h
        .recall(RecallRequest {
            text: Some("ledger rounding bug".into()),
            agent_id: Some("coder".into()),
            ..Default::default()
        })
        .await;
    assert_eq!(ids(&as_coder)[0], by_coder);

    let unknown = h
        .recall
        .recall(&h.principal(), only("opinion"))
        .await
        .unwrap_err();
    assert_eq!(unknown.code, ErrorCode::InvalidArgument);
}

#[tokio::test]
async fn limit_and_token_budget_cut_the_results() {
    let h = Harness::new(Arc::new(HashEmbedder::new(384))).await;
    for i in 0..5 {
        h.store(
            &format!("Runbook step {i}: restart the queue consumer and check its lag."),
            "procedure",
            "runbook",
            Default::default(),
        )
        .await;
    }
    let all = h.recall(text("queue consumer runbook")).await;
    assert_eq!(all.fragments.len(), 5);
    let per_fragment = all.fragments[0].estimated_tokens;

    let budget = h
        .recall(RecallRequest {
            token_budget: Some(per_fragment * 2 + 1),
            ..text("queue consumer runbook")
        })
        .await;
    assert_eq!(budget.fragments.len(), 2);
    assert!(budget.truncated_by_budget);
    assert!(budget.total_tokens <= per_fragment * 2 + 1);

    let one = h
        .recall(RecallRequest {
            limit: Some(1),
            ..text("queue consumer")
        })
        .await;
    assert_eq!(one.fragments.len(), 1);
    let many = h
        .recall(RecallRequest {
            limit: Some(10_000),
            ..text("queue consumer")
        })
        .await;
    assert_eq!(many.fragments.len(), 5);
    let zero = h
        .recall
        .recall(
            &h.principal(),
            RecallRequest {
                limit: Some(0),
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert_eq!(zero.code, ErrorCode::InvalidArgument);

    // No query: the most important recent memories.
    let browse = h.recall(RecallRequest::default()).await;
    assert_eq!(browse.fragments.len(), 5);
    assert!(browse.layers.is_empty());
}

#[tokio::test]
async fn recall_degrades_to_the_lexical_layers_when_the_embedder_is_down() {
    let h = Harness::new(Arc::new(DownEmbedder)).await;
    let id = h
        .store(
            "Incident 42 was caused by an expired TLS certificate.",
            "error",
            "incidents",
            Default::default(),
        )
        .await;
    let response = h.recall(text("expired certificate incident")).await;
    assert_eq!(response.layers, vec!["fulltext", "keyword"]);
    assert_eq!(ids(&response), vec![id.as_str()]);
}

#[tokio::test]
async fn recall_needs_the_read_permission() {
    let h = Harness::new(Arc::new(HashEmbedder::new(384))).await;
    let mut writer = h.principal();
    writer.permissions = vec![Permission::Write];
    let err = h
        .recall
        .recall(&writer, text("anything"))
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::PermissionDenied);
}
