//! Automatic reflection end to end: the gateway logs a session's tool
//! calls, the client closes the session, and the remember service's
//! reflector sums the log up with the (stub) language model and stores the
//! summary as the session's own key.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use mneme_e2e_tests::{Stack, eventually};
use mneme_test_support::{ALL_PERMISSIONS, create_tenant};
use serde_json::{Value, json};

type Prompts = Arc<Mutex<Vec<String>>>;

async fn complete(State(prompts): State<Prompts>, Json(body): Json<Value>) -> Json<Value> {
    let prompt = body["messages"][1]["content"].as_str().unwrap_or_default();
    prompts.lock().unwrap().push(prompt.to_owned());
    let answer = json!({"summary": ["The staging database runs PostgreSQL 15."],
        "decisions": [], "errors_resolved": [], "new_procedures": [],
        "open_questions": ["Who owns the staging backups?"], "narrative_summary": ""});
    Json(json!({"choices": [{"message": {"role": "assistant", "content": answer.to_string()}}]}))
}

/// Serves the stub model; returns what it was asked and its base URL.
async fn start_model() -> (Prompts, String) {
    let prompts = Prompts::default();
    let model = axum::Router::new()
        .route("/v1/chat/completions", axum::routing::post(complete))
        .with_state(prompts.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let llm_url = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, model).await.unwrap() });
    (prompts, llm_url)
}

#[tokio::test]
async fn a_closed_session_is_reflected_from_the_calls_the_gateway_logged() {
    let (prompts, llm_url) = start_model().await;
    // The idle period stays a day: only closing makes a session due here.
    let stack = Stack::start(
        "hash",
        &[
            ("MNEME_LLM_URL", &llm_url),
            ("MNEME_AUTO_REFLECT_POLL_SECS", "1"),
            ("MNEME_AUTO_REFLECT_MIN_SESSION_SECS", "0"),
        ],
    )
    .await;
    let store = stack.db.store();
    let acme = create_tenant(&store, "acme", ALL_PERMISSIONS).await;
    let rival = create_tenant(&store, "rival", ALL_PERMISSIONS).await;

    let closing = stack.mcp(&acme.api_key).await;
    closing
        .ok("recall", json!({"text": "staging database version"}))
        .await;
    closing.ok("context", json!({})).await;
    let open = stack.mcp(&rival.api_key).await;
    open.ok("recall", json!({"text": "rival roadmap"})).await;
    open.ok("context", json!({})).await;
    // Sends DELETE /mcp for the session.
    closing.client.cancel().await.unwrap();

    // The reflection's memories are committed before its outcome is
    // recorded (a transaction each), so wait for the outcome.
    eventually(
        "the closed session is reflected",
        Duration::from_secs(20),
        || {
            let count =
                stack
                    .db
                    .count_rows(acme.tenant_id, "session_reflections", "state = 'reflected'");
            async move { count.await > 0 }
        },
    )
    .await;
    let asked = prompts.lock().unwrap().clone();
    assert_eq!(asked.len(), 1, "only the closed session: {asked:?}");
    assert!(asked[0].contains("2 tool calls"), "{}", asked[0]);
    assert!(
        asked[0].contains(r#"recall: {"text":"staging database version"}"#),
        "{}",
        asked[0]
    );
    assert!(
        !asked[0].contains("rival"),
        "another tenant's session stays out"
    );
    let own = format!(
        "source = 'auto_reflect' AND key_id = '{}' AND session_id IS NOT NULL",
        acme.key_id
    );
    assert_eq!(
        stack.db.count_in_tenant(acme.tenant_id, &own).await,
        3,
        "the fact, the open question and their episode, as the session's key"
    );
    assert_eq!(
        stack
            .db
            .count_in_tenant(rival.tenant_id, "source = 'auto_reflect'")
            .await,
        0
    );

    let owner = stack.db.owner_in_tenant(acme.tenant_id).await;
    let row = owner
        .query_one(
            "SELECT state, calls, fragments, key_id FROM mneme.session_reflections",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "reflected");
    assert_eq!((row.get::<_, i32>(1), row.get::<_, i32>(2)), (2, 3));
    assert_eq!(row.get::<_, uuid::Uuid>(3), acme.key_id);

    // The reflection is findable like any memory.
    let reader = stack.mcp(&acme.api_key).await;
    let found = reader
        .ok("recall", json!({"text": "staging database PostgreSQL"}))
        .await;
    assert!(found.to_string().contains("runs PostgreSQL 15"), "{found}");
    stack.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_session_left_to_expire_is_reflected_once_it_is_over() {
    let (prompts, llm_url) = start_model().await;
    // New sessions live two seconds unused; the idle period stays a day.
    let stack = Stack::start(
        "hash",
        &[
            ("MNEME_LLM_URL", &llm_url),
            ("MNEME_AUTO_REFLECT_POLL_SECS", "1"),
            ("MNEME_AUTO_REFLECT_MIN_SESSION_SECS", "0"),
            ("MNEME_SESSION_MIN_TTL_SECS", "2"),
        ],
    )
    .await;
    let acme = create_tenant(&stack.db.store(), "acme", ALL_PERMISSIONS).await;
    let mcp = stack.mcp(&acme.api_key).await;
    mcp.ok("recall", json!({"text": "staging database version"}))
        .await;
    mcp.ok("context", json!({})).await;
    // Not closed: the client just stops using the session.
    eventually(
        "the expired session is reflected",
        Duration::from_secs(20),
        || {
            let count = stack
                .db
                .count_in_tenant(acme.tenant_id, "source = 'auto_reflect'");
            async move { count.await > 0 }
        },
    )
    .await;
    assert_eq!(prompts.lock().unwrap().len(), 1);
    stack.shutdown().await.unwrap();
}
