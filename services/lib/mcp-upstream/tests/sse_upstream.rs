//! The legacy SSE client transport against the reference server
//! (`@modelcontextprotocol/server-everything` in `sse` mode) and against
//! small hostile servers.

use std::{convert::Infallible, path::PathBuf, time::Duration};

use axum::{
    Router,
    response::sse::{Event, KeepAlive, Sse},
    routing::{get, post},
};
use futures::{StreamExt, stream};
use mneme_mcp_upstream::sse::{self, NoEndpointReason, SseClientConfig, SseError};
use reqwest::Url;
use rmcp::{
    RoleClient, ServiceExt,
    model::{CallToolRequestParams, ClientJsonRpcMessage, ServerJsonRpcMessage},
    transport::Transport,
};
use tokio::{
    net::{TcpListener, TcpStream},
    process::{Child, Command},
    time::Instant,
};

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    listener.local_addr().expect("local addr").port()
}

fn server_everything() -> PathBuf {
    let root = std::env::var_os("MNEME_TEST_MCP_SERVERS").expect(
        "MNEME_TEST_MCP_SERVERS must point at a node_modules directory holding \
         @modelcontextprotocol/server-everything (npm i @modelcontextprotocol/server-everything@2026.8.31)",
    );
    let script = PathBuf::from(root).join("@modelcontextprotocol/server-everything/dist/index.js");
    assert!(script.is_file(), "{} does not exist", script.display());
    script
}

/// Starts server-everything in SSE mode; the child dies with the handle.
async fn start_reference_server() -> (Child, u16) {
    let port = free_port();
    let child = Command::new("node")
        .arg(server_everything())
        .arg("sse")
        .env("PORT", port.to_string())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn node (is node installed?)");
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(("127.0.0.1", port)).await.is_err() {
        assert!(
            Instant::now() < deadline,
            "server-everything did not listen on port {port} within 20 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    (child, port)
}

fn http_client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("reqwest client")
}

#[tokio::test]
async fn talks_to_server_everything_over_legacy_sse() {
    let (_child, port) = start_reference_server().await;
    let url = Url::parse(&format!("http://127.0.0.1:{port}/sse")).expect("url");
    let mut config = SseClientConfig::new(url);
    config.connect_timeout = Duration::from_secs(10);
    config.headers.insert(
        http::header::AUTHORIZATION,
        http::HeaderValue::from_static("Bearer test-token"),
    );

    let transport = sse::connect(http_client(), config).await.expect("connect");
    let client = tokio::time::timeout(Duration::from_secs(10), ().serve(transport))
        .await
        .expect("initialize within 10 s")
        .expect("initialize");

    let tools = client.list_tools(None).await.expect("list_tools");
    assert!(
        tools.tools.iter().any(|t| t.name == "echo"),
        "echo missing from {:?}",
        tools.tools.iter().map(|t| &t.name).collect::<Vec<_>>()
    );

    let arguments = serde_json::json!({ "message": "hello sse" });
    let arguments = arguments.as_object().expect("object").clone();
    let result = client
        .call_tool(CallToolRequestParams::new("echo").with_arguments(arguments))
        .await
        .expect("call echo");
    let text: String = result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect();
    assert!(text.contains("hello sse"), "echo answered {text:?}");

    client.cancel().await.expect("close the session");
}

/// Serves `GET /sse` with the `(event, data)` pairs, then keeps the stream
/// open (with keep-alive comments) forever.
async fn serve_sse(events: &[(&'static str, &'static str)]) -> Url {
    let events = events.to_vec();
    // The message endpoint always fails, to check that `send` reports it.
    let app = Router::new().route(
        "/message",
        post(|| async { http::StatusCode::SERVICE_UNAVAILABLE }),
    );
    let app = app.route(
        "/sse",
        get(move || {
            let events = stream::iter(events.clone())
                .map(|(event, data)| Ok::<_, Infallible>(Event::default().event(event).data(data)))
                .chain(stream::pending());
            async move {
                Sse::new(events).keep_alive(KeepAlive::new().interval(Duration::from_millis(200)))
            }
        }),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    Url::parse(&format!("http://{addr}/sse")).expect("url")
}

#[tokio::test]
async fn refuses_an_endpoint_on_another_origin() {
    let url = serve_sse(&[("endpoint", "http://127.0.0.1:1/evil")]).await;
    let mut config = SseClientConfig::new(url);
    config.connect_timeout = Duration::from_secs(5);
    match sse::connect(http_client(), config).await {
        Err(SseError::CrossOriginEndpoint { endpoint, .. }) => {
            assert_eq!(endpoint, "http://127.0.0.1:1");
        }
        other => panic!("expected CrossOriginEndpoint, got {other:?}"),
    }
}

#[tokio::test]
async fn times_out_without_an_endpoint() {
    // Only keep-alive comments and an unrelated event: never an endpoint.
    let url = serve_sse(&[("hello", "x")]).await;
    let mut config = SseClientConfig::new(url);
    config.connect_timeout = Duration::from_secs(1);
    let started = Instant::now();
    match sse::connect(http_client(), config).await {
        Err(SseError::NoEndpoint(NoEndpointReason::Timeout)) => {}
        other => panic!("expected NoEndpoint(Timeout), got {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[tokio::test]
async fn skips_garbage_reports_post_errors_and_caps_event_size() {
    let oversized: &'static str = Box::leak("x".repeat(2048).into_boxed_str());
    let url = serve_sse(&[
        ("endpoint", "/message?sessionId=s1"),
        ("message", "not json"),
        (
            "message",
            r#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#,
        ),
        ("message", oversized),
        (
            "message",
            r#"{"jsonrpc":"2.0","method":"notifications/prompts/list_changed"}"#,
        ),
    ])
    .await;
    let mut config = SseClientConfig::new(url);
    config.connect_timeout = Duration::from_secs(5);
    config.max_message_bytes = 1024;
    let mut transport = sse::connect(http_client(), config).await.expect("connect");

    let first = tokio::time::timeout(Duration::from_secs(5), transport.receive())
        .await
        .expect("a message within 5 s");
    assert!(
        matches!(first, Some(ServerJsonRpcMessage::Notification(_))),
        "{first:?}"
    );
    // The oversized event ends the session instead of being buffered.
    let end = tokio::time::timeout(Duration::from_secs(5), transport.receive())
        .await
        .expect("the end within 5 s");
    assert!(end.is_none(), "{end:?}");

    let ping: ClientJsonRpcMessage =
        serde_json::from_str(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
            .expect("client notification");
    match Transport::<RoleClient>::send(&mut transport, ping.clone()).await {
        Err(SseError::PostStatus(503)) => {}
        other => panic!("expected PostStatus(503), got {other:?}"),
    }
    Transport::<RoleClient>::close(&mut transport)
        .await
        .expect("close");
    assert!(matches!(
        Transport::<RoleClient>::send(&mut transport, ping).await,
        Err(SseError::Closed)
    ));
}
