//! Spreading activation from `contextText`, with real PostgreSQL and Redis.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::Harness;
use mneme_config::Config;
use mneme_embed::hash::HashEmbedder;
use mneme_proto::v1::{LinkRequest, RecallRequest, RememberRequest};

async fn harness(enabled: bool) -> Harness {
    let mut settings = Config::defaults().recall;
    settings.spreading_activation = enabled;
    Harness::with_recall_config(Arc::new(HashEmbedder::new(384)), settings).await
}

impl Harness {
    /// True when the fragment's activation is exactly one step (0.1).
    async fn warmed_once(&self, id: &str) -> bool {
        self.db
            .count_in_tenant(
                self.tenant.tenant_id,
                &format!("id = '{id}' AND round(ema_activation * 1000) = 100"),
            )
            .await
            == 1
    }

    async fn fact(&self, content: &str, keywords: &[&str]) -> String {
        self.store(
            content,
            "fact",
            "ops",
            RememberRequest {
                keywords: keywords.iter().map(|k| k.to_string()).collect(),
                ..Default::default()
            },
        )
        .await
    }
}

fn in_session(context: &str) -> RecallRequest {
    RecallRequest {
        text: Some("anything at all".into()),
        context_text: Some(context.into()),
        session_id: Some("session-1".into()),
        ..Default::default()
    }
}

/// Waits for the background spread to warm `id` (activation 0.1).
async fn warmed(h: &Harness, id: &str) -> bool {
    for _ in 0..50 {
        if h.warmed_once(id).await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

#[tokio::test]
async fn context_warms_matching_fragments_and_their_neighbours_once_per_session() {
    let h = harness(true).await;
    let seed = h
        .fact(
            "Kafka consumer lag alerts fire above 10k messages.",
            &["kafka", "lag"],
        )
        .await;
    let neighbour = h
        .fact("The on-call runbook lives in the ops wiki.", &["runbook"])
        .await;
    let unrelated = h
        .fact(
            "Invoices are generated on the first of the month.",
            &["invoice"],
        )
        .await;
    h.remember
        .link(
            &h.principal(),
            LinkRequest {
                from_id: seed.clone(),
                to_id: neighbour.clone(),
                relation_type: "related".into(),
                ..Default::default()
            },
        )
        .await
        .unwrap();

    h.recall(in_session("investigating kafka lag on the orders topic"))
        .await;
    assert!(warmed(&h, &seed).await, "the matching fragment is warmed");
    assert!(warmed(&h, &neighbour).await, "its neighbour is warmed");
    assert!(!h.warmed_once(&unrelated).await);

    // The same session again: no second warm-up within the dedup window.
    h.recall(in_session("kafka lag again")).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(h.warmed_once(&seed).await, "still exactly 0.1");
}

#[tokio::test]
async fn without_the_flag_context_changes_nothing() {
    let h = harness(false).await;
    let seed = h
        .fact(
            "Kafka consumer lag alerts fire above 10k messages.",
            &["kafka", "lag"],
        )
        .await;
    h.recall(in_session("investigating kafka lag")).await;
    assert!(!warmed(&h, &seed).await);
}
