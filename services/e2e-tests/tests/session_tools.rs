//! The session, inspection and connector tools over MCP: ChatGPT's
//! `search`/`fetch` contract, the citation URL, `context`, `reflect`,
//! `tool_feedback`, the inspection tools and the skill guide.

use mneme_e2e_tests::{Mcp, Stack};
use mneme_test_support::{ALL_PERMISSIONS, create_tenant};
use serde_json::{Value, json};

#[tokio::test]
async fn chatgpt_search_and_fetch_follow_openais_contract_and_cite_a_working_url() {
    let stack = Stack::start("hash", &[("MNEME_PUBLIC_URL", "https://mneme.example.com")]).await;
    let store = stack.db.store();
    let acme = create_tenant(&store, "acme", ALL_PERMISSIONS).await;
    let rival = create_tenant(&store, "rival", ALL_PERMISSIONS).await;
    let mcp = stack.mcp(&acme.api_key).await;
    let stored = mcp
        .ok(
            "remember",
            json!({"content": "The staging database is rebuilt every Sunday night.",
                   "topic": "staging", "type": "fact"}),
        )
        .await;
    let id = stored["id"].as_str().unwrap();

    // search: exactly one text item holding {"results": [{id, title, url}]}.
    let result = mcp
        .call("search", json!({"query": "staging database rebuild"}))
        .await;
    assert_ne!(result.is_error, Some(true), "{result:?}");
    assert_eq!(result.content.len(), 1);
    let body: Value = serde_json::from_str(&result.content[0].as_text().unwrap().text).unwrap();
    let hit = &body["results"][0];
    assert_eq!(hit["id"], id);
    assert_eq!(
        hit["title"],
        "The staging database is rebuilt every Sunday night."
    );
    let url = format!("https://mneme.example.com/memories/{id}");
    assert_eq!(hit["url"], url);
    assert_eq!(hit.as_object().unwrap().len(), 3, "{hit}");

    // fetch: {id, title, text, url, metadata}.
    let fetched = mcp.call("fetch", json!({"id": id})).await;
    assert_eq!(fetched.content.len(), 1);
    let doc: Value = serde_json::from_str(&fetched.content[0].as_text().unwrap().text).unwrap();
    assert_eq!(
        doc["text"],
        "The staging database is rebuilt every Sunday night."
    );
    assert_eq!(doc["url"], url);
    assert_eq!(doc["metadata"]["topic"], "staging");
    let empty = mcp.tool_error("search", json!({"query": "  "})).await;
    assert!(empty.contains("invalid_argument"), "{empty}");

    // The cited address answers with the memory for its owner only.
    let http = reqwest::Client::new();
    let local = format!("http://{}/memories/{id}", stack.http_addr);
    let own = http
        .get(&local)
        .bearer_auth(&acme.api_key)
        .send()
        .await
        .unwrap();
    assert_eq!(own.status(), 200);
    let own: Value = own.json().await.unwrap();
    assert_eq!(own["id"], id);
    for key in [rival.api_key.as_str(), "mn_not_a_key"] {
        let other = http.get(&local).bearer_auth(key).send().await.unwrap();
        assert!(
            [401, 404].contains(&other.status().as_u16()),
            "{}",
            other.status()
        );
    }
    let rival_mcp = stack.mcp(&rival.api_key).await;
    let missing = rival_mcp.tool_error("fetch", json!({"id": id})).await;
    assert!(missing.contains("not_found"), "{missing}");
    stack.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_session_starts_with_context_ends_with_reflect_and_gives_feedback() {
    let stack = Stack::start("hash", &[]).await;
    let acme = create_tenant(&stack.db.store(), "acme", ALL_PERMISSIONS).await;
    let mcp = stack.mcp(&acme.api_key).await;

    let names: Vec<String> = mcp
        .client
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    for expected in [
        "context",
        "reflect",
        "tool_feedback",
        "memory_stats",
        "graph_explore",
        "fragment_history",
        "reconstruct_history",
        "search_traces",
        "get_skill_guide",
        "search",
        "fetch",
    ] {
        assert!(
            names.iter().any(|n| n == expected),
            "{expected} in {names:?}"
        );
    }

    let empty = mcp.ok("context", json!({})).await;
    assert_eq!(empty["hints"][0]["signal"], "empty_context");
    mcp.ok(
        "remember",
        json!({"content": "Mina wants release notes in Korean.", "topic": "user",
               "type": "preference"}),
    )
    .await;
    mcp.ok(
        "remember",
        json!({"content": "Drafting the 2.4 release notes right now.", "topic": "work",
               "type": "fact", "scope": "session"}),
    )
    .await;
    let block = mcp.ok("context", json!({})).await;
    let text = block["injectionText"].as_str().unwrap();
    assert!(
        text.contains("[CORE MEMORY]\n[PREFERENCE]\n- Mina wants release notes in Korean."),
        "{text}"
    );
    assert!(
        text.contains("[WORKING MEMORY]\n- Drafting the 2.4 release notes"),
        "the MCP session carries the working memory: {text}"
    );

    let reflected = mcp
        .ok(
            "reflect",
            json!({
                "summary": "Release 2.4 shipped. The changelog generator was fixed.",
                "decisions": ["Release notes are written in Korean first."],
                "task_effectiveness": {"overall_success": true, "tool_highlights": ["context"]}
            }),
        )
        .await;
    assert_eq!(reflected["count"], 4, "{reflected}");
    assert_eq!(reflected["breakdown"]["summary"], 2);
    assert!(reflected["episodeId"].is_string());
    let ids: Vec<&str> = reflected["fragments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["id"].as_str().unwrap())
        .collect();

    let feedback = mcp
        .ok(
            "tool_feedback",
            json!({"tool_name": "recall", "relevant": true, "sufficient": false,
                   "fragment_ids": [ids[0], ids[1]], "suggestion": "x".repeat(500)}),
        )
        .await;
    assert_eq!(feedback["fragmentsAdjusted"], 2);
    let bad = mcp
        .tool_error(
            "tool_feedback",
            json!({"tool_name": "recall", "relevant": true}),
        )
        .await;
    assert!(bad.contains("sufficient"), "{bad}");

    let stats = mcp.ok("memory_stats", json!({})).await;
    assert_eq!(stats["total"], 5, "{stats}");
    assert_eq!(stats["feedback7d"], 1);
    let graph = mcp
        .ok(
            "graph_explore",
            json!({"startId": reflected["episodeId"], "relationTypes": ["part_of"]}),
        )
        .await;
    assert_eq!(graph["count"], 4);
    let traces = mcp
        .ok("search_traces", json!({"eventType": "decision"}))
        .await;
    assert_eq!(traces["count"], 1);
    let history = mcp.ok("fragment_history", json!({"id": ids[0]})).await;
    assert_eq!(history["current"]["id"], ids[0]);
    let story = mcp
        .ok("reconstruct_history", json!({"entity": "session_reflect"}))
        .await;
    assert_eq!(story["timeline"].as_array().unwrap().len(), 4);

    let guide = mcp
        .ok("get_skill_guide", json!({"section": "antipatterns"}))
        .await;
    assert!(guide["content"].as_str().unwrap().contains("Pronouns"));
    assert_eq!(guide["sections"].as_array().unwrap().len(), 11);
    let unknown = mcp
        .tool_error("get_skill_guide", json!({"section": "astrology"}))
        .await;
    assert!(unknown.contains("invalid_argument"), "{unknown}");
    stack.shutdown().await.unwrap();
}

/// `memory_stats`' total and anchors.
async fn stats(mcp: &Mcp) -> (u64, u64) {
    let stats = mcp.ok("memory_stats", json!({})).await;
    (
        stats["total"].as_u64().unwrap(),
        stats["anchors"].as_u64().unwrap(),
    )
}

/// Waits until `memory_stats` shows `count` memories embedded: the
/// embedding worker's commits retire the answers cached before them.
async fn embedded(mcp: &Mcp, count: u64) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while mcp.ok("memory_stats", json!({})).await["embedded"] != count {
        assert!(std::time::Instant::now() < deadline, "never shown embedded");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    // The worker raises the change number just after its commit.
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
}

#[tokio::test]
async fn memory_stats_are_cached_until_the_tenant_writes() {
    let stack = Stack::start("hash", &[("MNEME_STATS_CACHE_SECS", "600")]).await;
    let store = stack.db.store();
    let acme = create_tenant(&store, "acme", ALL_PERMISSIONS).await;
    let rival = create_tenant(&store, "rival", ALL_PERMISSIONS).await;
    let (mcp, rival_mcp) = (
        stack.mcp(&acme.api_key).await,
        stack.mcp(&rival.api_key).await,
    );
    mcp.remember_new("Backups run at two in the morning.", "backups", "fact")
        .await;
    embedded(&mcp, 1).await;
    assert_eq!(stats(&mcp).await, (1, 0));
    assert_eq!(stats(&rival_mcp).await, (0, 0));

    // A change that bypasses the write path (as a scheduled consolidation
    // does) is not seen while the answer is cached...
    let owner = stack.db.owner_in_tenant(acme.tenant_id).await;
    let set_anchors = |anchor: bool| {
        let owner = &owner;
        async move {
            owner
                .execute("UPDATE mneme.fragments SET is_anchor = $1", &[&anchor])
                .await
                .unwrap()
        }
    };
    set_anchors(true).await;
    assert_eq!(stats(&mcp).await, (1, 0));
    // ...a write through mneme is, at once, with everything before it.
    mcp.remember_new("Restores are tested every month.", "backups", "fact")
        .await;
    assert_eq!(stats(&mcp).await, (2, 1));
    embedded(&mcp, 2).await;

    // Another tenant's writes neither show here nor retire this answer.
    rival_mcp
        .remember_new("Our backups go to tape.", "backups", "fact")
        .await;
    assert_eq!(stats(&rival_mcp).await, (1, 0));
    set_anchors(false).await;
    assert_eq!(stats(&mcp).await, (2, 1));
    stack.shutdown().await.unwrap();
}

#[tokio::test]
async fn prompts_and_resources_show_only_the_callers_memory() {
    use rmcp::ServiceError;
    use rmcp::model::{GetPromptRequestParams, ReadResourceRequestParams};

    let stack = Stack::start("hash", &[]).await;
    let store = stack.db.store();
    let acme = create_tenant(&store, "acme", ALL_PERMISSIONS).await;
    let rival = create_tenant(&store, "rival", ALL_PERMISSIONS).await;
    let writer = create_tenant(&store, "writer", &[mneme_core::Permission::Write]).await;
    let mcp = stack.mcp(&acme.api_key).await;
    for (content, topic) in [
        ("The billing service runs on Postgres 16.", "billing"),
        (
            "Billing invoices are sent on the first of the month.",
            "billing",
        ),
        ("The search cluster has three nodes.", "search"),
    ] {
        mcp.ok(
            "remember",
            json!({"content": content, "topic": topic, "type": "fact"}),
        )
        .await;
    }
    mcp.ok(
        "remember",
        json!({"content": "Investigating the invoice duplication bug now.",
               "topic": "billing", "type": "fact", "scope": "session"}),
    )
    .await;

    let prompts = mcp.client.list_all_prompts().await.unwrap();
    let names: Vec<&str> = prompts.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        names,
        ["analyze-session", "retrieve-relevant-memory", "onboarding"]
    );
    let mut arguments = serde_json::Map::new();
    arguments.insert("topic".into(), json!("invoice emails"));
    let prompt = mcp
        .client
        .get_prompt(
            GetPromptRequestParams::new("retrieve-relevant-memory").with_arguments(arguments),
        )
        .await
        .unwrap();
    let text = serde_json::to_value(&prompt.messages[0].content).unwrap();
    assert!(text.to_string().contains("invoice emails"), "{text}");
    let missing = mcp
        .client
        .get_prompt(GetPromptRequestParams::new("retrieve-relevant-memory"))
        .await
        .unwrap_err();
    assert!(
        matches!(&missing, ServiceError::McpError(e) if e.code.0 == -32602),
        "{missing:?}"
    );

    let read = |uri: &'static str| {
        let client = &mcp.client;
        async move {
            let result = client
                .read_resource(ReadResourceRequestParams::new(uri))
                .await
                .unwrap();
            let text = serde_json::to_value(&result.contents[0]).unwrap()["text"]
                .as_str()
                .unwrap()
                .to_owned();
            serde_json::from_str::<Value>(&text).unwrap()
        }
    };
    let resources = mcp.client.list_all_resources().await.unwrap();
    assert_eq!(resources.len(), 4);
    assert_eq!(read("memory://stats").await["total"], 3);
    let topics = read("memory://topics").await;
    assert_eq!(topics["topics"], 2);
    assert_eq!(topics["largest"][0]["topic"], "billing");
    assert_eq!(topics["largest"][0]["count"], 2);
    let config = read("memory://config").await;
    assert_eq!(config["limits"]["maxContentChars"], 300);
    assert_eq!(config["permissions"], json!(["read", "write"]));
    let session = read("memory://active-session").await;
    assert_eq!(
        session["working"][0]["content"],
        "Investigating the invoice duplication bug now."
    );
    let unknown = mcp
        .client
        .read_resource(ReadResourceRequestParams::new("memory://secrets"))
        .await
        .unwrap_err();
    assert!(
        matches!(&unknown, ServiceError::McpError(e) if e.code.0 == -32002),
        "{unknown:?}"
    );

    // Another tenant sees its own (empty) memory; a write-only key none.
    let rival_mcp = stack.mcp(&rival.api_key).await;
    let theirs = rival_mcp
        .client
        .read_resource(ReadResourceRequestParams::new("memory://stats"))
        .await
        .unwrap();
    let theirs: Value = serde_json::from_str(
        serde_json::to_value(&theirs.contents[0]).unwrap()["text"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(theirs["total"], 0);
    let writer_mcp = stack.mcp(&writer.api_key).await;
    assert!(
        writer_mcp
            .client
            .list_all_resources()
            .await
            .unwrap()
            .is_empty()
    );
    let denied = writer_mcp
        .client
        .read_resource(ReadResourceRequestParams::new("memory://stats"))
        .await
        .unwrap_err();
    assert!(
        matches!(&denied, ServiceError::McpError(e) if e.data.as_ref().is_some_and(|d| d["code"] == "permission_denied")),
        "{denied:?}"
    );
    stack.shutdown().await.unwrap();
}
