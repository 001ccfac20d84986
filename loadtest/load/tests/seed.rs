//! Seeding two tenants of a self-hosted stack with 300 memories each: the
//! counts come back from the tool results, from `memory_stats` and from
//! `recall`; links were made, and the automatic-link queue drains; seeding
//! again with the same seed stores nothing new (the data is deterministic);
//! the tenants stay apart.
//!
//! Needs the environment of `~/.local/share/mneme/env` (database, Redis).

use std::collections::HashSet;

use mneme_loadtest::data;
use mneme_loadtest::mcp::{self, Lifecycle};
use mneme_loadtest::seed::{SeedOptions, seed};
use mneme_loadtest::self_hosted::{SelfHosted, SelfHostedOptions};
use serde_json::{Map, Value, json};

const FRAGMENTS: usize = 300;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seeding_two_tenants_stores_what_it_reports() {
    let hosted = SelfHosted::start(&SelfHostedOptions {
        embedder: "hash".into(),
        tenants: 2,
        settings: vec![],
        admin_keys: false,
    })
    .await
    .expect("the stack starts");
    let target = hosted.target();
    let options = SeedOptions {
        fragments: FRAGMENTS,
        seed: 11,
        batch_size: 200,
        parallel: 2,
        lifecycle: Lifecycle::Session,
        progress: false,
    };
    // The generator may repeat itself; the store keeps one of each.
    let distinct: Vec<u64> = (0..2u64)
        .map(|key| {
            (0..FRAGMENTS as u64)
                .map(|i| data::memory(options.seed, key, i).content)
                .collect::<HashSet<_>>()
                .len() as u64
        })
        .collect();
    assert!(distinct.iter().all(|&d| d > 290), "{distinct:?}");

    let report = seed(&target, &options).await.expect("seeding succeeds");
    assert_eq!(report.rejected, 0, "{:?}", report.rejection_examples);
    assert_eq!(report.created, distinct.iter().sum::<u64>(), "{report:#?}");
    assert_eq!(report.created + report.existing, 2 * FRAGMENTS as u64);
    assert!(report.linked > 0, "{report:#?}");
    assert_eq!(report.batch_latency_ms.count, 4, "two calls per tenant");
    for (key, seeded) in report.keys.iter().enumerate() {
        assert_eq!(seeded.key_index, key);
        assert_eq!(seeded.created, distinct[key], "{seeded:?}");
        assert_eq!(seeded.stored_total, Some(distinct[key]), "{seeded:?}");
    }

    // The automatic links follow the acknowledged writes.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let waiting = hosted
            .pending_auto_links()
            .await
            .expect("the queue is read");
        if waiting == 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{waiting} memories still wait for their automatic links"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }

    // Counted again through the tools, each tenant seeing only its own.
    for (key, api_key) in target.keys.iter().enumerate() {
        let client = mcp::connect(&target.url, api_key, Lifecycle::Session)
            .await
            .expect("connects");
        let stats = call(&client, "memory_stats", json!({})).await;
        assert_eq!(stats["total"].as_u64(), Some(distinct[key]), "{stats}");
        assert!(stats["links"].as_u64().unwrap_or(0) > 0, "{stats}");
        let topics = stats["topics"].as_u64().unwrap_or(0);
        assert!(topics >= 10, "{stats}");
        let by_type = stats["byType"].as_object().expect("byType");
        assert!(by_type.len() >= 6, "{stats}");
        // A memory of this tenant is found by its own words.
        let memory = data::memory(options.seed, key as u64, 7);
        let recalled = call(
            &client,
            "recall",
            json!({"text": memory.content, "topic": memory.topic, "limit": 5,
                   "fields": ["content"]}),
        )
        .await;
        let contents: Vec<&str> = recalled["fragments"]
            .as_array()
            .expect("fragments")
            .iter()
            .filter_map(|f| f["content"].as_str())
            .collect();
        assert!(contents.contains(&memory.content.as_str()), "{recalled:#}");
        mcp::close(client).await;
    }

    // The same seed again: the same memories, all already stored.
    let again = seed(&target, &options)
        .await
        .expect("seeding again succeeds");
    assert_eq!(again.created, 0, "{again:#?}");
    assert_eq!(again.existing, 2 * FRAGMENTS as u64, "{again:#?}");
    for (key, seeded) in again.keys.iter().enumerate() {
        assert_eq!(seeded.stored_total, Some(distinct[key]));
    }

    hosted.shutdown().await.expect("the stack stops");
}

async fn call(client: &mcp::Client, tool: &str, arguments: Value) -> Value {
    let Value::Object(arguments) = arguments else {
        panic!("arguments are an object")
    };
    let arguments: Map<String, Value> = arguments;
    let result = mcp::call_tool(client, tool, arguments)
        .await
        .unwrap_or_else(|f| panic!("{tool} failed: {} {}", f.kind, f.message));
    mcp::structured(&result).expect("a structured result")
}
