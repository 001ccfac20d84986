//! One memory flowing end to end: an rmcp client → gateway (MCP over
//! Streamable HTTP) → gRPC → remember/recall → PostgreSQL with pgvector,
//! with the real e5 model and the embedding worker.

use std::time::{Duration, Instant};

use mneme_core::Permission;
use mneme_e2e_tests::{Mcp, Stack, fragment_ids as ids};
use mneme_test_support::{ALL_PERMISSIONS, create_tenant};
use serde_json::{Value, json};

/// Waits until the worker has embedded every fragment of the tenant.
async fn wait_for_embeddings(stack: &Stack, tenant_id: uuid::Uuid) {
    let deadline = Instant::now() + Duration::from_secs(60);
    assert!(stack.db.count_in_tenant(tenant_id, "true").await > 0);
    loop {
        let pending = stack
            .db
            .count_in_tenant(tenant_id, "embedding IS NULL")
            .await;
        if pending == 0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{pending} fragments still without embeddings"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn remember(mcp: &Mcp, content: &str, topic: &str, kind: &str) -> String {
    mcp.remember_new(content, topic, kind).await
}

#[tokio::test]
async fn an_agent_remembers_recalls_by_meaning_in_english_and_korean_and_forgets() {
    let stack = Stack::start("e5", &[]).await;
    let store = stack.db.store();
    let acme = create_tenant(&store, "acme", ALL_PERMISSIONS).await;
    let rival = create_tenant(&store, "rival", ALL_PERMISSIONS).await;
    let mcp = stack.mcp(&acme.api_key).await;

    // tools/list: every tool with all four annotations and an output schema.
    let tools = mcp.client.list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    for expected in [
        "remember",
        "batch_remember",
        "recall",
        "forget",
        "amend",
        "link",
    ] {
        assert!(
            names.contains(&expected),
            "{expected} missing from {names:?}"
        );
    }
    for tool in &tools {
        let a = tool.annotations.as_ref().expect("annotations");
        assert!(a.title.is_some() && tool.title.is_some(), "{}", tool.name);
        assert!(
            a.read_only_hint.is_some() && a.destructive_hint.is_some(),
            "{}",
            tool.name
        );
        assert!(a.idempotent_hint.is_some(), "{}", tool.name);
        assert_eq!(a.open_world_hint, Some(false), "{}", tool.name);
        assert!(
            tool.output_schema.is_some(),
            "{} has an outputSchema",
            tool.name
        );
        assert!(tool.meta.is_some(), "{} carries mneme's _meta", tool.name);
    }
    let by_name = |name: &str| {
        tools
            .iter()
            .find(|t| t.name == name)
            .unwrap()
            .annotations
            .clone()
            .unwrap()
    };
    assert_eq!(by_name("recall").read_only_hint, Some(true));
    assert_eq!(by_name("forget").destructive_hint, Some(true));
    assert_eq!(by_name("remember").destructive_hint, Some(false));

    let espresso = remember(
        &mcp,
        "The user drinks two espressos every morning before work.",
        "user-habits",
        "preference",
    )
    .await;
    let cat = remember(
        &mcp,
        "사용자의 고양이 이름은 모찌이고 세 살이다.",
        "반려동물",
        "fact",
    )
    .await;
    remember(
        &mcp,
        "The deploy pipeline runs on GitHub Actions and takes twelve minutes.",
        "deploy",
        "fact",
    )
    .await;
    remember(
        &mcp,
        "PostgreSQL backups run nightly at 02:00 UTC and are kept for 30 days.",
        "backups",
        "procedure",
    )
    .await;
    remember(
        &mcp,
        "회의는 매주 월요일 오전 10시에 온라인으로 진행된다.",
        "회의",
        "fact",
    )
    .await;
    wait_for_embeddings(&stack, acme.tenant_id).await;

    // By meaning, sharing no words with the memory.
    let english = mcp
        .ok(
            "recall",
            json!({"text": "What hot beverage does the user like?"}),
        )
        .await;
    assert_eq!(
        english["layers"],
        json!(["vector", "fulltext"]),
        "{english:#}"
    );
    assert_eq!(ids(&english)[0], espresso, "{english:#}");
    let top = &english["fragments"][0];
    assert!(
        top["matchedBy"]
            .as_array()
            .unwrap()
            .contains(&json!("vector")),
        "{top}"
    );
    assert!(top["similarity"].as_f64().unwrap() > 0.0);
    let korean = mcp
        .ok("recall", json!({"text": "반려동물 이름이 뭐였지?"}))
        .await;
    assert_eq!(ids(&korean)[0], cat, "{korean:#}");

    // Another tenant sees none of it, and cannot tell its ids from random ones.
    let stranger = stack.mcp(&rival.api_key).await;
    let theirs = stranger
        .ok(
            "recall",
            json!({"text": "What hot beverage does the user like?"}),
        )
        .await;
    assert_eq!(theirs["count"], 0, "{theirs:#}");
    let foreign = stranger
        .tool_error("forget", json!({"id": cat, "force": true}))
        .await;
    let random = stranger
        .tool_error(
            "forget",
            json!({"id": uuid::Uuid::new_v4().to_string(), "force": true}),
        )
        .await;
    assert_eq!(foreign, random);
    assert!(foreign.contains("not_found"), "{foreign}");

    // Forget, and it is gone.
    let forgotten = mcp
        .ok("forget", json!({"id": espresso, "force": true}))
        .await;
    assert_eq!(
        forgotten,
        json!({"deleted": 1, "protected": 0, "ids": [espresso], "dryRun": false})
    );
    let after = mcp
        .ok(
            "recall",
            json!({"text": "What hot beverage does the user like?"}),
        )
        .await;
    assert!(!ids(&after).contains(&espresso), "{after:#}");
    // The rival's attempt did not delete the cat.
    let korean = mcp.ok("recall", json!({"text": "고양이"})).await;
    assert!(ids(&korean).contains(&cat));

    drop((mcp, stranger));
    stack.shutdown().await.unwrap();
}

#[tokio::test]
async fn permissions_and_invalid_arguments_are_tool_errors() {
    let stack = Stack::start("hash", &[]).await;
    let store = stack.db.store();
    let reader = create_tenant(&store, "readers", &[Permission::Read]).await;
    let mcp = stack.mcp(&reader.api_key).await;
    let denied = mcp
        .tool_error(
            "remember",
            json!({"content": "A read-only key must not be able to write.", "topic": "t", "type": "fact"}),
        )
        .await;
    assert!(denied.contains("permission_denied"), "{denied}");
    assert!(
        mcp.tool_error("recall", json!({"limit": 0}))
            .await
            .contains("invalid_argument")
    );

    let writer = create_tenant(&store, "writers", ALL_PERMISSIONS).await;
    let mcp = stack.mcp(&writer.api_key).await;
    let bad_type = mcp
        .tool_error(
            "remember",
            json!({"content": "A perfectly fine sentence here.", "topic": "t", "type": "opinion"}),
        )
        .await;
    assert!(bad_type.contains("invalid arguments"), "{bad_type}");
    let too_long = mcp
        .tool_error(
            "remember",
            json!({"content": "word ".repeat(80), "topic": "t", "type": "fact"}),
        )
        .await;
    assert!(
        too_long.contains("limit for type `fact` is 300"),
        "{too_long}"
    );
    let not_an_id = mcp.tool_error("forget", json!({"id": "not-a-uuid"})).await;
    assert!(not_an_id.contains("not_found"), "{not_an_id}");

    // A fresh memory is found by full text and keywords at once, and the
    // same content stored twice keeps one id.
    let first = mcp
        .ok("remember", json!({"content": "Staging uses the eu-west-2 region.", "topic": "infra", "type": "fact"}))
        .await;
    let again = mcp
        .ok("remember", json!({"content": "Staging uses the eu-west-2 region.", "topic": "infra", "type": "fact"}))
        .await;
    assert_eq!(
        (first["id"].clone(), again["outcome"].clone()),
        (again["id"].clone(), json!("duplicate"))
    );
    let found = mcp.ok("recall", json!({"keywords": ["staging"]})).await;
    assert_eq!(found["fragments"][0]["id"], first["id"]);
    drop(mcp);
    stack.shutdown().await.unwrap();
}

#[tokio::test]
async fn http_requests_without_valid_credentials_are_refused() {
    let stack = Stack::start("hash", &[]).await;
    let http = reqwest::Client::new();
    let base = format!("http://{}", stack.http_addr);
    let initialize = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    });
    let post = |auth: Option<&str>, url: String| {
        let mut request = http
            .post(url)
            .header("accept", "application/json, text/event-stream")
            .json(&initialize);
        if let Some(auth) = auth {
            request = request.header("authorization", auth);
        }
        request.send()
    };
    let missing = post(None, format!("{base}/mcp")).await.unwrap();
    assert_eq!(missing.status(), 401);
    assert!(
        missing.headers()["www-authenticate"]
            .to_str()
            .unwrap()
            .starts_with("Bearer")
    );
    let wrong = post(
        Some("Bearer mn_AAAAAAAAAAAA_BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB"),
        format!("{base}/mcp"),
    )
    .await
    .unwrap();
    assert_eq!(wrong.status(), 401);
    let body: Value = wrong.json().await.unwrap();
    assert_eq!(body["error"]["code"], "unauthenticated");

    let store = stack.db.store();
    let tenant = create_tenant(&store, "http", ALL_PERMISSIONS).await;
    let in_query = post(None, format!("{base}/mcp?api_key={}", tenant.api_key))
        .await
        .unwrap();
    assert_eq!(in_query.status(), 400);
    let ok = post(
        Some(&format!("Bearer {}", tenant.api_key)),
        format!("{base}/mcp"),
    )
    .await
    .unwrap();
    assert_eq!(ok.status(), 200);
    assert!(ok.headers().contains_key("mcp-session-id"));

    assert_eq!(
        http.get(format!("{base}/health"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    let ready = http.get(format!("{base}/ready")).send().await.unwrap();
    assert_eq!(ready.status(), 200, "{:?}", ready.text().await);
    stack.shutdown().await.unwrap();
}
