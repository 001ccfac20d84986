//! Active surfacing through the whole stack: `POST /v1/surface` (the hook
//! and API path), its gates and state in Redis and PostgreSQL, and the
//! `stm_surfacing_feedback` / `stm_surfacing_stats` tools.

use std::time::{Duration, Instant};

use mneme_e2e_tests::Stack;
use mneme_test_support::{ALL_PERMISSIONS, TestTenant, create_tenant};
use serde_json::{Value, json};

const JWT_MEMORY: &str = "The JWT handler in src/auth/jwt_handler.rs validates access tokens \
                          with RS256 and rejects expired tokens after a 30 second leeway.";
const COFFEE_MEMORY: &str =
    "The office coffee machine on the third floor is descaled every Friday.";
const REDIS_MEMORY: &str = "The cache cluster runs Redis with the allkeys-lru eviction policy.";

struct World {
    stack: Stack,
    tenant: TestTenant,
    http: reqwest::Client,
}

impl World {
    async fn start(extra: &[(&str, &str)]) -> Self {
        let stack = Stack::start("hash", extra).await;
        let tenant = create_tenant(&stack.db.store(), "acme", ALL_PERMISSIONS).await;
        let world = Self {
            stack,
            tenant,
            http: reqwest::Client::new(),
        };
        for (content, topic) in [
            (JWT_MEMORY, "auth"),
            (COFFEE_MEMORY, "office"),
            (REDIS_MEMORY, "caching"),
        ] {
            world
                .tool(
                    &world.tenant.api_key,
                    "remember",
                    json!({"content": content, "topic": topic, "type": "fact"}),
                )
                .await;
        }
        world.wait_for_embeddings().await;
        world
    }

    async fn tool(&self, key: &str, tool: &str, arguments: Value) -> (u16, Value) {
        let response = self
            .http
            .post(format!("http://{}/v1/tools/{tool}", self.stack.http_addr))
            .bearer_auth(key)
            .json(&arguments)
            .send()
            .await
            .unwrap();
        (response.status().as_u16(), response.json().await.unwrap())
    }

    async fn surface_as(&self, key: &str, body: Value) -> (u16, Value) {
        let response = self
            .http
            .post(format!("http://{}/v1/surface", self.stack.http_addr))
            .bearer_auth(key)
            .json(&body)
            .send()
            .await
            .unwrap();
        (response.status().as_u16(), response.json().await.unwrap())
    }

    async fn surface(&self, body: Value) -> Value {
        let (status, answer) = self.surface_as(&self.tenant.api_key, body).await;
        assert_eq!(status, 200, "{answer}");
        answer
    }

    async fn wait_for_embeddings(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let pending = self
                .stack
                .db
                .count_in_tenant(self.tenant.tenant_id, "embedding IS NULL")
                .await;
            if pending == 0 {
                return;
            }
            assert!(Instant::now() < deadline, "embeddings did not complete");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

fn read_call(path: &str) -> Value {
    json!({"server": "fs", "tool": "read_file", "arguments": {"path": path},
           "annotations": {"readOnlyHint": true}})
}

fn query_call(query: &str) -> Value {
    json!({"server": "docs", "tool": "search", "arguments": {"_context_query": query}})
}

#[tokio::test]
async fn a_related_call_surfaces_the_relevant_memory_with_a_calibrated_relevance() {
    let world = World::start(&[]).await;
    let answer = world
        .surface(read_call("/project/src/auth/jwt_handler.rs"))
        .await;
    assert_eq!(answer["surfaced"], true, "{answer}");
    let block = answer["block"].as_str().unwrap();
    assert!(block.contains("RS256"), "{block}");
    assert!(!block.contains("coffee"), "{block}");
    assert!(block.starts_with("<surfaced-memories"), "{block}");
    assert!(block.contains(answer["surfacingId"].as_str().unwrap()));
    assert!(block.contains("stm_surfacing_feedback"));
    let memories = answer["memories"].as_array().unwrap();
    assert_eq!(
        memories.len(),
        1,
        "only the relevant memory passes: {answer}"
    );
    let relevance = memories[0]["relevance"].as_f64().unwrap();
    assert!(relevance > 0.5 && relevance <= 1.0, "{answer}");
    assert_eq!(answer["queryStage"], "path");
    // The same call again: the memory was just shown to this agent.
    let again = world
        .surface(read_call("/project/src/auth/jwt_handler.rs"))
        .await;
    assert_eq!(again["surfaced"], false);
    assert!(
        ["cooldown", "all_seen"].contains(&again["skipped"].as_str().unwrap()),
        "{again}"
    );
    // Another agent of the same key has not seen it.
    let mut other_agent = read_call("/project/src/auth/jwt_handler.rs");
    other_agent["agentId"] = json!("reviewer");
    assert_eq!(world.surface(other_agent).await["surfaced"], true);
}

#[tokio::test]
async fn the_gates_skip_writes_exclusions_secrets_and_unrelated_calls() {
    let world = World::start(&[("MNEME_SURFACING_EXCLUDE_TOOLS", "secret__*")]).await;
    let write = json!({"server": "fs", "tool": "write_file",
                       "arguments": {"path": "/project/src/auth/jwt_handler.rs"}});
    assert_eq!(world.surface(write).await["skipped"], "write_tool");
    // Annotations beat names: a read-only tool named like a writer passes.
    let annotated = json!({"server": "fs", "tool": "update_preview",
                           "arguments": {"_context_query": "JWT RS256 token leeway"},
                           "annotations": {"readOnlyHint": true}});
    assert_eq!(world.surface(annotated).await["surfaced"], true);
    let excluded = json!({"server": "secret", "tool": "lookup",
                          "arguments": {"_context_query": "redis eviction policy"}});
    assert_eq!(world.surface(excluded).await["skipped"], "excluded_tool");
    let sensitive = query_call("api_key=sk-live-0123456789abcdefghij redis");
    assert_eq!(world.surface(sensitive).await["skipped"], "sensitive_query");
    let unrelated = query_call("quarterly marketing budget spreadsheet");
    assert_eq!(world.surface(unrelated).await["skipped"], "no_results");
}

#[tokio::test]
async fn the_tenant_rate_window_and_the_query_cooldown_hold() {
    let world = World::start(&[("MNEME_SURFACING_RATE_PER_MINUTE", "2")]).await;
    let first = world
        .surface(query_call("redis eviction policy cache"))
        .await;
    assert_eq!(first["surfaced"], true, "{first}");
    // Within the cooldown, the same query is skipped and its slot returned.
    let repeat = world
        .surface(query_call("redis eviction policy cache"))
        .await;
    assert_eq!(repeat["skipped"], "cooldown");
    let second = world.surface(query_call("JWT token leeway RS256")).await;
    assert_eq!(second["surfaced"], true, "{second}");
    let third = world.surface(query_call("coffee machine descaled")).await;
    assert_eq!(third["skipped"], "rate_limited");
    // Another tenant has its own window.
    let other = create_tenant(&world.stack.db.store(), "globex", ALL_PERMISSIONS).await;
    let (status, answer) = world
        .surface_as(&other.api_key, query_call("coffee machine descaled"))
        .await;
    assert_eq!(status, 200);
    assert_eq!(answer["skipped"], "no_results", "{answer}");
}

#[tokio::test]
async fn ratings_are_checked_invalidate_memories_and_show_in_the_stats() {
    let world = World::start(&[]).await;
    let answer = world
        .surface(query_call("redis eviction policy cache"))
        .await;
    let surfacing_id = answer["surfacingId"].as_str().unwrap().to_owned();
    let memory_id = answer["memories"][0]["id"].as_str().unwrap().to_owned();
    let key = world.tenant.api_key.clone();

    let (_, bad) = world
        .tool(
            &key,
            "stm_surfacing_feedback",
            json!({"surfacing_id": surfacing_id, "rating": "great"}),
        )
        .await;
    assert!(bad.to_string().contains("rating"), "{bad}");
    let (_, foreign) = world
        .tool(
            &key,
            "stm_surfacing_feedback",
            json!({"surfacing_id": surfacing_id,
                   "ratings": [{"memory_id": uuid::Uuid::new_v4().to_string(), "rating": "helpful"}]}),
        )
        .await;
    assert!(foreign.to_string().contains("not surfaced"), "{foreign}");
    let other = create_tenant(&world.stack.db.store(), "globex", ALL_PERMISSIONS).await;
    let (_, hidden) = world
        .tool(
            &other.api_key,
            "stm_surfacing_feedback",
            json!({"surfacing_id": surfacing_id, "rating": "helpful"}),
        )
        .await;
    assert!(hidden.to_string().contains("not found"), "{hidden}");

    let (status, rated) = world
        .tool(
            &key,
            "stm_surfacing_feedback",
            json!({"surfacing_id": surfacing_id,
                   "ratings": [{"memory_id": memory_id, "rating": "not_relevant"}]}),
        )
        .await;
    assert_eq!(status, 200, "{rated}");
    assert_eq!(rated["recorded"], 1, "{rated}");
    assert_eq!(rated["invalidated"], json!([memory_id]));

    // Invalidated for this tool, for every agent of the key.
    let mut again = query_call("redis eviction policy cache");
    again["agentId"] = json!("another-agent");
    let again = world.surface(again).await;
    assert_ne!(again["surfaced"], true, "{again}");

    let (_, stats) = world
        .tool(&key, "stm_surfacing_stats", json!({"tool": "docs__search"}))
        .await;
    assert_eq!(stats["events"], 1, "{stats}");
    assert_eq!(stats["ratings"]["notRelevant"], 1, "{stats}");
    assert_eq!(stats["recent"][0]["query"], "redis eviction policy cache");
    let (_, theirs) = world
        .tool(&other.api_key, "stm_surfacing_stats", json!({}))
        .await;
    assert_eq!(theirs["events"], 0, "{theirs}");
}

#[tokio::test]
async fn claude_hook_events_answer_with_the_hook_output_document() {
    let world = World::start(&[]).await;
    let payload = json!({
        "session_id": "sess-1", "hook_event_name": "PostToolUse", "tool_name": "Read",
        "cwd": "/project", "transcript_path": "/tmp/t.jsonl",
        "tool_input": {"file_path": "/project/src/auth/jwt_handler.rs"},
        "tool_response": {"type": "text", "file": {"filePath": "/project/src/auth/jwt_handler.rs",
                          "content": "fn validate() {}", "numLines": 1, "startLine": 1, "totalLines": 1}}
    });
    let answer = world
        .surface(json!({"host": "claude", "payload": payload}))
        .await;
    let context = answer["hookOutput"]["hookSpecificOutput"]["additionalContext"]
        .as_str()
        .unwrap_or_default();
    assert!(context.contains("RS256"), "{answer}");
    assert_eq!(
        answer["hookOutput"]["hookSpecificOutput"]["hookEventName"],
        "PostToolUse"
    );
    let mut write = payload.clone();
    write["tool_name"] = json!("Write");
    let skipped = world
        .surface(json!({"host": "claude", "payload": write}))
        .await;
    assert_eq!(skipped["hookOutput"], json!({}));
    let (status, _) = world
        .surface_as(
            &world.tenant.api_key,
            json!({"host": "cursor", "payload": {}}),
        )
        .await;
    assert_eq!(status, 400);
}

/// Surfaces `query` for `agent`; returns the surfacing id and memory ids.
async fn surfaced_for(world: &World, query: &str, agent: &str) -> (String, Vec<String>) {
    let mut call = query_call(query);
    call["agentId"] = json!(agent);
    let answer = world.surface(call).await;
    assert_eq!(answer["surfaced"], true, "{answer}");
    let ids = answer["memories"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_owned())
        .collect();
    (answer["surfacingId"].as_str().unwrap().to_owned(), ids)
}

#[tokio::test]
async fn a_memory_rated_negative_in_three_events_is_demoted() {
    let world = World::start(&[]).await;
    let key = world.tenant.api_key.clone();
    let mut demoted = None;
    for n in 0..3 {
        let (surfacing_id, ids) =
            surfaced_for(&world, "redis eviction policy cache", &format!("agent-{n}")).await;
        demoted.get_or_insert_with(|| ids[0].clone());
        assert!(ids.contains(demoted.as_ref().unwrap()), "{ids:?}");
        let (status, rated) = world
            .tool(
                &key,
                "stm_surfacing_feedback",
                json!({"surfacing_id": surfacing_id, "rating": "already_known"}),
            )
            .await;
        assert_eq!(status, 200, "{rated}");
        if n == 1 {
            // Rated negative in two events: not demoted yet.
            let (_, ids) = surfaced_for(&world, "redis eviction policy cache", "probe").await;
            assert!(ids.contains(demoted.as_ref().unwrap()), "{ids:?}");
        }
    }
    let mut call = query_call("redis eviction policy cache");
    call["agentId"] = json!("fresh-agent");
    let after = world.surface(call).await;
    let ids: Vec<&str> = after["memories"]
        .as_array()
        .map(|m| m.iter().filter_map(|m| m["id"].as_str()).collect())
        .unwrap_or_default();
    assert!(!ids.contains(&demoted.as_deref().unwrap()), "{after}");
}

#[tokio::test]
async fn helpful_ratings_lower_the_tools_threshold_once_enough_arrive() {
    let world = World::start(&[
        ("MNEME_SURFACING_TUNER_MIN_SAMPLES", "3"),
        ("MNEME_SURFACING_MIN_SCORE", "0.5"),
        ("MNEME_SURFACING_TUNER_STEP", "0.05"),
    ])
    .await;
    let key = world.tenant.api_key.clone();
    for n in 0..3 {
        let (surfacing_id, _) =
            surfaced_for(&world, "JWT token leeway RS256", &format!("agent-{n}")).await;
        let (_, rated) = world
            .tool(
                &key,
                "stm_surfacing_feedback",
                json!({"surfacing_id": surfacing_id, "rating": "helpful"}),
            )
            .await;
        if n < 2 {
            assert_eq!(rated["threshold"], Value::Null, "{rated}");
        } else {
            let moved = rated["threshold"].as_f64().unwrap();
            assert!((moved - 0.45).abs() < 1e-6, "{rated}");
        }
    }
    let (_, stats) = world
        .tool(&key, "stm_surfacing_stats", json!({"tool": "docs__search"}))
        .await;
    let tool = &stats["tools"][0];
    assert!(
        (tool["minScore"].as_f64().unwrap() - 0.45).abs() < 1e-6,
        "{stats}"
    );
    assert_eq!(tool["adjustments"], 1);
    // The next surfacing on this tool applies the tuned threshold.
    let mut call = query_call("JWT token leeway RS256");
    call["agentId"] = json!("after-tuning");
    let answer = world.surface(call).await;
    assert!(
        (answer["minScore"].as_f64().unwrap() - 0.45).abs() < 1e-6,
        "{answer}"
    );
    // Another tool keeps the default.
    let other = json!({"server": "docs", "tool": "lookup",
                       "arguments": {"_context_query": "JWT token leeway RS256"},
                       "agentId": "other-tool"});
    let answer = world.surface(other).await;
    assert!(
        (answer["minScore"].as_f64().unwrap() - 0.5).abs() < 1e-6,
        "{answer}"
    );
}

#[tokio::test]
async fn a_block_holds_one_rating_so_a_retried_rating_counts_once() {
    let world = World::start(&[
        ("MNEME_SURFACING_TUNER_MIN_SAMPLES", "3"),
        ("MNEME_SURFACING_MIN_SCORE", "0.5"),
        ("MNEME_SURFACING_TUNER_STEP", "0.05"),
    ])
    .await;
    let key = world.tenant.api_key.clone();
    let rate = |surfacing_id: &str, rating: &str| {
        let args = json!({"surfacing_id": surfacing_id, "rating": rating});
        let (world, key) = (&world, &key);
        async move {
            let (status, rated) = world.tool(key, "stm_surfacing_feedback", args).await;
            assert_eq!(status, 200, "{rated}");
            rated
        }
    };
    let (first, _) = surfaced_for(&world, "JWT token leeway RS256", "agent-0").await;
    // Three helpful ratings of one block are one rating: the tuner, which
    // steps after three, does not move.
    let rated = rate(&first, "helpful").await;
    assert_eq!(
        (rated["recorded"].as_u64(), rated["unchanged"].as_u64()),
        (Some(1), Some(0))
    );
    for _ in 0..2 {
        let retried = rate(&first, "helpful").await;
        assert_eq!(retried["recorded"], 0, "{retried}");
        assert_eq!(retried["unchanged"], 1, "{retried}");
        assert_eq!(retried["threshold"], Value::Null, "{retried}");
    }
    let (_, stats) = world
        .tool(&key, "stm_surfacing_stats", json!({"tool": "docs__search"}))
        .await;
    assert_eq!(stats["ratings"]["helpful"], 1, "{stats}");

    // A changed mind replaces the rating, in the statistics and for the
    // tuner: with two more negative blocks the pending ratings are three
    // negative ones, not one helpful and three negative.
    let changed = rate(&first, "not_relevant").await;
    assert_eq!(changed["recorded"], 1, "{changed}");
    assert_eq!(changed["threshold"], Value::Null, "{changed}");
    for n in 1..3 {
        let (surfacing_id, _) =
            surfaced_for(&world, "JWT token leeway RS256", &format!("agent-{n}")).await;
        let rated = rate(&surfacing_id, "not_relevant").await;
        if n < 2 {
            assert_eq!(rated["threshold"], Value::Null, "{rated}");
        } else {
            let moved = rated["threshold"].as_f64().unwrap();
            assert!((moved - 0.55).abs() < 1e-6, "raised: {rated}");
        }
    }
    let (_, stats) = world
        .tool(&key, "stm_surfacing_stats", json!({"tool": "docs__search"}))
        .await;
    assert_eq!(stats["ratings"]["helpful"], 0, "{stats}");
    assert_eq!(stats["ratings"]["notRelevant"], 3, "{stats}");
}

#[tokio::test]
async fn queries_are_kept_as_digests_when_asked_and_blanked_after_retention() {
    let world = World::start(&[("MNEME_SURFACING_PERSIST_QUERY_TEXT", "false")]).await;
    surfaced_for(&world, "redis eviction policy cache", "agent").await;
    let key = world.tenant.api_key.clone();
    let (_, stats) = world.tool(&key, "stm_surfacing_stats", json!({})).await;
    let stored = stats["recent"][0]["query"].as_str().unwrap();
    assert!(
        stored.starts_with("sha256:") && !stored.contains("redis"),
        "{stats}"
    );

    // The retention stage: queries older than the retention are blanked,
    // events older than the statistics retention deleted.
    let store = world.stack.db.store();
    let mut client = store.client().await.unwrap();
    let tx = mneme_store::TenantTx::begin(&mut client, world.tenant.tenant_id)
        .await
        .unwrap();
    let (blanked, deleted) = mneme_store::surfacing::apply_retention(&tx, 0, 90)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!((blanked, deleted), (1, 0));
    let (_, stats) = world.tool(&key, "stm_surfacing_stats", json!({})).await;
    assert_eq!(stats["recent"][0]["query"], "<expired>", "{stats}");
    let tx = mneme_store::TenantTx::begin(&mut client, world.tenant.tenant_id)
        .await
        .unwrap();
    assert_eq!(
        mneme_store::surfacing::apply_retention(&tx, 0, 0)
            .await
            .unwrap(),
        (0, 1)
    );
    tx.commit().await.unwrap();
}
