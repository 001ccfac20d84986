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
