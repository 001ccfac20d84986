//! The metrics an operator relies on: after an end-to-end flow (MCP and
//! REST tool calls, a refused request, embeddings), `/metrics` serves every
//! family the flow exercises, each has moved, and every family served is
//! documented in `docs/METRICS.md`. Its own test binary: the registry is
//! process-wide.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use mneme_e2e_tests::Stack;
use mneme_test_support::{ALL_PERMISSIONS, create_tenant};
use serde_json::json;

/// Families this flow must move (name as served: histograms by `_count`).
const MOVED_BY_THE_FLOW: &[&str] = &[
    "mneme_http_request_seconds_count",
    "mneme_http_rejected_total",
    "mneme_auth_failures_total",
    "mneme_mcp_request_seconds_count",
    "mneme_mcp_sessions_total",
    "mneme_tool_call_seconds_count",
    "mneme_rate_limit_decisions_total",
    "mneme_grpc_client_seconds_count",
    "mneme_grpc_server_handled_seconds_count",
    "mneme_db_pool_acquire_seconds_count",
    "mneme_db_pool_connections",
    "mneme_db_statement_seconds_count",
    "mneme_redis_command_seconds_count",
    "mneme_embedding_calls_total",
    "mneme_embedding_texts_total",
];

/// Each sample's total per metric name (labels summed).
fn totals(scrape: &str) -> BTreeMap<String, f64> {
    let mut totals = BTreeMap::new();
    for line in scrape.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let name = series.split('{').next().unwrap_or(series).to_owned();
        *totals.entry(name).or_insert(0.0) += value.parse::<f64>().unwrap_or(0.0);
    }
    totals
}

fn documented() -> BTreeSet<String> {
    let doc = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/METRICS.md"),
    )
    .unwrap();
    let table = doc
        .split("<!-- metrics:begin -->")
        .nth(1)
        .and_then(|rest| rest.split("<!-- metrics:end -->").next())
        .expect("docs/METRICS.md has the metrics table");
    table
        .lines()
        .filter_map(|line| line.strip_prefix("| `"))
        .map(|rest| rest.split(['{', '`']).next().unwrap_or_default().to_owned())
        .collect()
}

async fn scrape(http: &reqwest::Client, addr: std::net::SocketAddr) -> String {
    http.get(format!("http://{addr}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

#[tokio::test]
async fn an_end_to_end_flow_moves_the_documented_metrics_and_nothing_undocumented_is_served() {
    // The subscriber the binaries install: Redis latency comes from its
    // span-derived metrics.
    let _telemetry = mneme_telemetry::init(
        &mneme_config::LogConfig {
            filter: "warn".into(),
            format: mneme_config::LogFormat::Text,
            tracing: mneme_config::TracingConfig::off(),
        },
        "metrics-test",
    );
    let stack = Stack::start("hash", &[]).await;
    let tenant = create_tenant(&stack.db.store(), "metered", ALL_PERMISSIONS).await;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    tokio::spawn(mneme_telemetry::metrics::serve(
        port,
        std::future::pending(),
    ));
    let http = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    let before = loop {
        match http.get(format!("http://{port}/metrics")).send().await {
            Ok(response) => break totals(&response.text().await.unwrap()),
            Err(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(error) => panic!("the metrics listener did not start: {error}"),
        }
    };

    let mcp = stack.mcp(&tenant.api_key).await;
    mcp.remember_new("Metrics move when agents work.", "metrics", "fact")
        .await;
    mcp.ok("recall", json!({"text": "metrics"})).await;
    let rest = http
        .post(format!("http://{}/v1/tools/recall", stack.http_addr))
        .bearer_auth(&tenant.api_key)
        .json(&json!({"text": "agents"}))
        .send()
        .await
        .unwrap();
    assert_eq!(rest.status(), 200);
    let refused = http
        .post(format!("http://{}/v1/tools/recall", stack.http_addr))
        .bearer_auth("mn_notakey_0000")
        .json(&json!({"text": "agents"}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);
    let deadline = Instant::now() + Duration::from_secs(20);
    while stack
        .db
        .count_in_tenant(tenant.tenant_id, "embedding IS NULL")
        .await
        > 0
    {
        assert!(Instant::now() < deadline, "the memory was not embedded");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let served = scrape(&http, port).await;
    let after = totals(&served);
    for name in MOVED_BY_THE_FLOW {
        let (was, is) = (
            before.get(*name).copied().unwrap_or(0.0),
            after.get(*name).copied().unwrap_or(0.0),
        );
        assert!(is > was, "{name} did not move ({was} → {is})");
    }
    assert_eq!(after.get("mneme_build_info"), Some(&1.0));
    // Every family served is documented, and labels never carry ids.
    let documented = documented();
    for line in served.lines().filter_map(|l| l.strip_prefix("# TYPE ")) {
        let family = line.split(' ').next().unwrap();
        assert!(
            documented.contains(family),
            "{family} is served but not in docs/METRICS.md"
        );
    }
    for id in [tenant.tenant_id.to_string(), tenant.key_id.to_string()] {
        assert!(!served.contains(&id), "a label carries an id: {id}");
    }
    stack.shutdown().await.unwrap();
}

/// The metric families a PromQL text names (`_bucket`, `_count` and `_sum`
/// belong to their histogram).
fn families_named(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while let Some(at) = text[i..].find("mneme_") {
        let start = i + at;
        let end = start
            + text[start..]
                .find(|c: char| !(c.is_ascii_lowercase() || c == '_' || c.is_ascii_digit()))
                .unwrap_or(text.len() - start);
        let preceded_by_word = start > 0 && (bytes[start - 1].is_ascii_alphanumeric());
        if !preceded_by_word {
            let name = &text[start..end];
            let family = ["_bucket", "_count", "_sum"]
                .iter()
                .find_map(|suffix| name.strip_suffix(suffix))
                .unwrap_or(name);
            names.insert(family.to_owned());
        }
        i = end;
    }
    names
}

#[test]
fn dashboards_and_alert_rules_use_only_documented_metrics() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let documented = documented();
    let mut files = vec![root.join("deploy/prometheus/alerts.yaml")];
    for entry in std::fs::read_dir(root.join("deploy/grafana")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "json") {
            let text = std::fs::read_to_string(&path).unwrap();
            let dashboard: serde_json::Value =
                serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert!(
                dashboard["panels"]
                    .as_array()
                    .is_some_and(|p| !p.is_empty())
            );
            files.push(path);
        }
    }
    let operations = std::fs::read_to_string(root.join("docs/OPERATIONS.md")).unwrap();
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        let named = families_named(&text);
        assert!(!named.is_empty(), "{} names no metric", path.display());
        for family in named {
            assert!(
                documented.contains(&family),
                "{} uses {family}, which docs/METRICS.md does not describe",
                path.display()
            );
        }
        // Every alert's runbook exists.
        for anchor in text
            .split("docs/OPERATIONS.md#")
            .skip(1)
            .map(|rest| rest.split('"').next().unwrap())
        {
            let heading = operations
                .lines()
                .filter_map(|l| l.strip_prefix("### "))
                .any(|h| h.to_lowercase() == anchor);
            assert!(
                heading,
                "runbook #{anchor} is not a heading of docs/OPERATIONS.md"
            );
        }
    }
}
