//! Request hygiene on a real gateway process: foreign origins and hosts are
//! refused on every MCP route before authentication, browsers from allowed
//! origins get CORS answers, every response carries a request id, and a
//! refusal sent before the body arrived closes its connection openly.

mod common;

use common::Fleet;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

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

/// Sends `head` on a new connection and returns the response's head,
/// lowercased (the body, if any, is not read).
async fn response_head(addr: std::net::SocketAddr, head: &str) -> (tokio::net::TcpStream, String) {
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    tcp.write_all(head.as_bytes()).await.unwrap();
    let mut received = Vec::new();
    let mut buffer = [0u8; 4096];
    while !received.windows(4).any(|w| w == b"\r\n\r\n") {
        let read = tokio::time::timeout(std::time::Duration::from_secs(10), tcp.read(&mut buffer))
            .await
            .expect("a response within 10 s")
            .unwrap();
        assert!(read > 0, "connection closed before a response");
        received.extend_from_slice(&buffer[..read]);
    }
    (tcp, String::from_utf8_lossy(&received).to_lowercase())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refusal_sent_before_the_body_arrived_says_it_closes_the_connection() {
    let fleet = Fleet::start().await;
    let pod = fleet.pod(&[]).await;
    let host = format!("host: {}\r\n", pod.addr);

    // The body is still on its way when authentication refuses the call:
    // hyper will not read it and closes the connection after the answer,
    // so the answer must say so, or the client's next request on it (an
    // SDK's OAuth discovery, say) is dropped.
    let (mut tcp, head) = response_head(
        pod.addr,
        &format!(
            "POST /mcp HTTP/1.1\r\n{host}content-type: application/json\r\n\
             accept: application/json, text/event-stream\r\ncontent-length: 64\r\n\r\n"
        ),
    )
    .await;
    assert!(head.starts_with("http/1.1 401"), "{head}");
    assert!(head.contains("\r\nconnection: close\r\n"), "{head}");
    // And it does close, rather than wait for the rest.
    let mut rest = Vec::new();
    tokio::time::timeout(
        std::time::Duration::from_secs(10),
        tcp.read_to_end(&mut rest),
    )
    .await
    .expect("the pod closes the connection")
    .unwrap();

    // A refusal of a request without a body keeps the connection.
    let (_, head) = response_head(
        pod.addr,
        &format!("GET /mcp HTTP/1.1\r\n{host}accept: text/event-stream\r\n\r\n"),
    )
    .await;
    assert!(head.starts_with("http/1.1 401"), "{head}");
    assert!(!head.contains("connection: close"), "{head}");
}
