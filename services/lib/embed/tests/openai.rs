//! The OpenAI-compatible provider against a local HTTP server that speaks the
//! `/v1/embeddings` protocol (the hosted APIs cannot run here).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::{Json, Router};
use mneme_config::{OpenAiConfig, Secret};
use mneme_embed::openai::OpenAiEmbedder;
use mneme_embed::{EmbedError, Embedder, TextKind};
use serde_json::{Value, json};

/// The `Authorization` header and JSON body of one request.
type Recorded = (Option<String>, Value);

#[derive(Clone, Default)]
struct Seen {
    requests: Arc<Mutex<Vec<Recorded>>>,
}

async fn embeddings(
    State(seen): State<Seen>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> (StatusCode, Json<Value>) {
    let auth = headers
        .get("authorization")
        .map(|v| v.to_str().unwrap().to_owned());
    seen.requests.lock().unwrap().push((auth, body.clone()));
    let inputs = body["input"].as_array().unwrap();
    if inputs.iter().any(|i| i == "fail-500") {
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            Json(json!({"error": "boom"})),
        );
    }
    if inputs.iter().any(|i| i == "fail-400") {
        return (StatusCode::BAD_REQUEST, Json(json!({"error": "bad input"})));
    }
    let dim = body["dimensions"].as_u64().unwrap_or(4) as usize;
    // Answer in reverse order: clients must sort by `index`.
    let data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .rev()
        .map(|(i, _)| {
            let mut v = vec![0.0; dim];
            v[i % dim] = 2.0;
            json!({"object": "embedding", "index": i, "embedding": v})
        })
        .collect();
    (
        StatusCode::OK,
        Json(json!({"object": "list", "data": data})),
    )
}

async fn serve() -> (String, Seen) {
    let seen = Seen::default();
    let app = Router::new()
        .route("/v1/embeddings", post(embeddings))
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}/v1"), seen)
}

fn config(base_url: String) -> OpenAiConfig {
    OpenAiConfig {
        base_url,
        api_key: Some(Secret::new("sk-test-key")),
        model: "text-embedding-3-small".into(),
        send_dimensions: true,
        timeout: Duration::from_secs(5),
    }
}

#[tokio::test]
async fn embeds_in_order_with_auth_and_dimensions() {
    let (url, seen) = serve().await;
    let embedder = OpenAiEmbedder::new(&config(url), 8).unwrap();
    let vectors = embedder
        .embed(&["a".into(), "b".into(), "c".into()], TextKind::Passage)
        .await
        .unwrap();
    assert_eq!(vectors.len(), 3);
    for (i, v) in vectors.iter().enumerate() {
        assert_eq!(v[i], 1.0, "sorted by index and normalised: {v:?}");
    }
    let requests = seen.requests.lock().unwrap();
    assert_eq!(requests[0].0.as_deref(), Some("Bearer sk-test-key"));
    assert_eq!(requests[0].1["dimensions"], 8);
    assert_eq!(requests[0].1["model"], "text-embedding-3-small");
    assert_eq!(embedder.model_id(), "openai:text-embedding-3-small:8");
}

#[tokio::test]
async fn server_errors_are_retryable_and_client_errors_are_not() {
    let (url, _) = serve().await;
    let embedder = OpenAiEmbedder::new(&config(url), 8).unwrap();
    let err = embedder
        .embed(&["fail-500".into()], TextKind::Query)
        .await
        .unwrap_err();
    assert!(matches!(err, EmbedError::Unavailable(_)), "{err}");
    let err = embedder
        .embed(&["fail-400".into()], TextKind::Query)
        .await
        .unwrap_err();
    assert!(matches!(err, EmbedError::Failed(_)), "{err}");
}

#[tokio::test]
async fn wrong_dimensions_and_unreachable_servers_are_reported() {
    let (url, _) = serve().await;
    let mut cfg = config(url);
    cfg.send_dimensions = false; // the server then answers with 4 dimensions
    let embedder = OpenAiEmbedder::new(&cfg, 8).unwrap();
    let err = embedder
        .embed(&["a".into()], TextKind::Query)
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("4 dimensions, expected 8"),
        "{err}"
    );

    let unreachable = OpenAiEmbedder::new(&config("http://127.0.0.1:9/v1".into()), 8).unwrap();
    let err = unreachable
        .embed(&["a".into()], TextKind::Query)
        .await
        .unwrap_err();
    assert!(matches!(err, EmbedError::Unavailable(_)), "{err}");
}
