//! The external reranker, against a real HTTP server on loopback that
//! speaks the text-embeddings-inference `/rerank` API.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use common::Harness;
use mneme_config::{Config, RerankerConfig};
use mneme_embed::hash::HashEmbedder;
use mneme_proto::v1::{RecallRequest, RememberRequest};
use serde_json::{Value, json};

/// A reranker that reverses the order it is given, or fails while `down`
/// is set.
#[derive(Default)]
struct FakeReranker {
    requests: AtomicUsize,
    down: AtomicBool,
    last_texts: std::sync::Mutex<Vec<String>>,
}

async fn rerank(
    State(fake): State<Arc<FakeReranker>>,
    Json(body): Json<Value>,
) -> Result<Json<Value>, StatusCode> {
    fake.requests.fetch_add(1, Ordering::SeqCst);
    if fake.down.load(Ordering::SeqCst) {
        return Err(StatusCode::SERVICE_UNAVAILABLE);
    }
    assert_eq!(
        body["texts"], body["documents"],
        "both field names carry the texts"
    );
    let texts: Vec<String> = serde_json::from_value(body["texts"].clone()).expect("texts");
    let scored: Vec<Value> = (0..texts.len())
        .map(|index| json!({"index": index, "score": index}))
        .collect();
    *fake.last_texts.lock().unwrap() = texts;
    Ok(Json(Value::Array(scored)))
}

async fn start_reranker() -> (Arc<FakeReranker>, String) {
    let fake = Arc::new(FakeReranker::default());
    let app = axum::Router::new()
        .route("/rerank", post(rerank))
        .with_state(Arc::clone(&fake));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (fake, url)
}

async fn harness(url: String, keep: usize) -> Harness {
    let mut settings = Config::defaults().recall;
    settings.reranker = Some(RerankerConfig {
        url,
        api_key: None,
        candidates: 30,
        keep,
        timeout: Duration::from_secs(2),
        max_failures: 3,
        cooldown: Duration::from_secs(600),
    });
    Harness::with_recall_config(Arc::new(HashEmbedder::new(384)), settings).await
}

/// Notes about the deploy pipeline, each longer than the one before.
async fn store_notes(h: &Harness) -> Vec<String> {
    let mut ids = Vec::new();
    for (i, padding) in [
        "",
        " It runs nightly.",
        " It runs nightly and pages on failure, always.",
    ]
    .iter()
    .enumerate()
    {
        let content =
            format!("Deploy pipeline note {i}: deploys go through staging first.{padding}");
        ids.push(
            h.store(&content, "fact", "deploy", RememberRequest::default())
                .await,
        );
    }
    h.embed_all().await;
    ids
}

fn query() -> RecallRequest {
    RecallRequest {
        text: Some("deploy pipeline staging".into()),
        ..Default::default()
    }
}

#[tokio::test]
async fn the_reranker_order_is_final_and_not_re_sorted_afterwards() {
    // Regression: the reference re-sorted reranked results by importance,
    // recency and similarity, discarding the cross-encoder's order.
    let (fake, url) = start_reranker().await;
    let h = harness(url, 2).await;
    let ids = store_notes(&h).await;

    let response = h.recall(query()).await;
    let returned: Vec<&str> = response
        .fragments
        .iter()
        .map(|f| f.content.as_str())
        .collect();
    // The fake reverses the fused order it was sent; `keep` cuts the rest.
    let fused = fake.last_texts.lock().unwrap().clone();
    assert_eq!(fused.len(), ids.len());
    let reversed: Vec<&str> = fused.iter().rev().take(2).map(String::as_str).collect();
    assert_eq!(returned, reversed);
    assert!(response.fragments[0].score > response.fragments[1].score);
    for fragment in &response.fragments {
        assert!(
            fragment.explanations.contains(&"reranked".to_owned()),
            "{:?}",
            fragment.explanations
        );
    }
    assert_eq!(fake.requests.load(Ordering::SeqCst), 1);

    // A query-less browse has nothing to rerank against.
    h.recall(RecallRequest::default()).await;
    assert_eq!(fake.requests.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_failing_reranker_keeps_the_fused_order_and_is_skipped_after_three_failures() {
    let (fake, url) = start_reranker().await;
    let h = harness(url, 15).await;
    let ids = store_notes(&h).await;
    fake.down.store(true, Ordering::SeqCst);

    for _ in 0..5 {
        let response = h.recall(query()).await;
        assert_eq!(response.fragments.len(), ids.len(), "nothing is lost");
        for fragment in &response.fragments {
            assert!(!fragment.explanations.contains(&"reranked".to_owned()));
        }
    }
    // Three failures, then the cooldown: recalls four and five never call it.
    assert_eq!(fake.requests.load(Ordering::SeqCst), 3);
}
