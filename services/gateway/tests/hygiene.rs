//! Request hygiene on a real gateway process: foreign origins and hosts are
//! refused on every MCP route before authentication, browsers from allowed
//! origins get CORS answers, and every response carries a request id.

mod common;

use common::Fleet;

#[tokio::test(flavor = "multi_thread")]
async fn foreign_origins_and_hosts_are_refused_and_allowed_origins_get_cors() {
    let fleet = Fleet::start().await;
    let pod = fleet.pod(&[]).await;
    let http = reqwest::Client::new();
    let base = format!("http://{}", pod.addr);

    for path in ["/mcp", "/sse", "/message?sessionId=x"] {
        let refused = http
            .get(format!("{base}{path}"))
            .header("origin", "https://evil.example")
            .send()
            .await
            .unwrap();
        assert_eq!(
            refused.status(),
            403,
            "{path}: a foreign origin, before any credentials"
        );
        assert!(refused.headers().contains_key("x-request-id"));
    }
    let rebinding = http
        .get(format!("{base}/sse"))
        .header("host", "attacker.example")
        .send()
        .await
        .unwrap();
    assert_eq!(
        rebinding.status(),
        403,
        "a foreign Host header (DNS rebinding)"
    );

    let preflight = |origin: &'static str| {
        http.request(reqwest::Method::OPTIONS, format!("{base}/mcp"))
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .header(
                "access-control-request-headers",
                "authorization, mcp-session-id",
            )
            .send()
    };
    let claude = preflight("https://claude.ai").await.unwrap();
    assert!(claude.status().is_success(), "{}", claude.status());
    assert_eq!(
        claude.headers().get("access-control-allow-origin").unwrap(),
        "https://claude.ai"
    );
    let evil = preflight("https://evil.example").await.unwrap();
    assert!(evil.headers().get("access-control-allow-origin").is_none());

    // Without credentials, an allowed origin reaches authentication: 401.
    let unauthenticated = http
        .post(format!("{base}/mcp"))
        .header("origin", "https://claude.ai")
        .header("accept", "application/json, text/event-stream")
        .json(&common::initialize("2025-06-18"))
        .send()
        .await
        .unwrap();
    assert_eq!(unauthenticated.status(), 401);
    assert_eq!(
        unauthenticated
            .headers()
            .get("access-control-allow-origin")
            .unwrap(),
        "https://claude.ai"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn sessions_refusals_and_rate_limits_show_in_the_pods_metrics() {
    let fleet = Fleet::start().await;
    let acme = mneme_test_support::create_tenant(
        &fleet.db.store(),
        "acme",
        mneme_test_support::ALL_PERMISSIONS,
    )
    .await;
    let metrics_port = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let metrics_addr = format!("127.0.0.1:{metrics_port}");
    let pod = fleet
        .pod(&[("MNEME_METRICS_ADDR", metrics_addr.as_str())])
        .await;
    pod.initialize(&acme.api_key).await;
    let unknown = pod
        .post(
            &acme.api_key,
            Some("not-a-session"),
            &[],
            &common::request(2, "tools/list", serde_json::json!({})),
        )
        .await;
    assert_eq!(unknown.status, 404);

    let metrics = reqwest::get(format!("http://{metrics_addr}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for expected in [
        r#"mneme_mcp_sessions_total{outcome="created"} 1"#,
        r#"mneme_mcp_sessions_total{outcome="unknown"} 1"#,
        "mneme_mcp_sessions_in_memory 1",
        r#"mneme_rate_limit_decisions_total{backend="redis",decision="allowed",scope="key"}"#,
        r#"mneme_mcp_request_seconds_count{method="initialize",status="200"} 1"#,
    ] {
        assert!(
            metrics.contains(expected),
            "missing `{expected}` in:\n{metrics}"
        );
    }
}
