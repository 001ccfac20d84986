//! The MCP proxy through the whole stack: a tenant registers upstream MCP
//! servers with `/v1/upstreams`, and its agents reach their tools through
//! mneme's `/mcp` as `prefix__tool`, shaped and with surfaced memories.
//!
//! Upstreams: the reference server `@modelcontextprotocol/server-everything`
//! (npm, run with the machine's Node.js) over Streamable HTTP, and a small
//! rmcp server of the test's own for what the reference cannot produce (a
//! 1 MB result, a view of the arguments it received).

use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use mneme_core::Permission;
use mneme_e2e_tests::{Mcp, Stack};
use mneme_mcp_upstream::shape::{FOOTER_TOKEN, strip_footer};
use mneme_test_support::{TestTenant, create_tenant};
use rmcp::handler::server::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::process::{Child, Command};

const JWT_MEMORY: &str = "The JWT handler in src/auth/jwt_handler.rs validates access tokens \
                          with RS256 and rejects expired tokens after a 30 second leeway.";
const HEADER_SECRET: &str = "sekret-upstream-credential-4711";

fn digest(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The reference server, as a child process killed on drop.
struct Everything {
    child: Child,
    url: String,
}

impl Everything {
    /// Over Streamable HTTP (`/mcp`).
    async fn start() -> Self {
        Self::start_with("streamableHttp", "mcp").await
    }

    /// `transport` is the server's mode (`streamableHttp`, `sse`), `path`
    /// the endpoint it serves.
    async fn start_with(transport: &str, path: &str) -> Self {
        let modules = std::env::var("MNEME_TEST_MCP_SERVERS").expect(
            "MNEME_TEST_MCP_SERVERS must point at the node_modules holding \
             @modelcontextprotocol/server-everything (deploy/local/setup.sh installs it)",
        );
        let script = format!("{modules}/@modelcontextprotocol/server-everything/dist/index.js");
        let port = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new("node")
            .arg(&script)
            .arg(transport)
            .env("PORT", port.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("node runs the reference server");
        let deadline = Instant::now() + Duration::from_secs(30);
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            assert!(
                Instant::now() < deadline,
                "server-everything did not listen"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Self {
            child,
            url: format!("http://127.0.0.1:{port}/{path}"),
        }
    }

    async fn kill(&mut self) {
        self.child.kill().await.unwrap();
    }
}

/// The test's own upstream: `show_args` answers with the arguments it
/// received; `big` with `chars` characters of varied text; `show_secret`
/// with the SHA-256 of the `X-Upstream-Secret` header of its request (a
/// digest, so the value itself never travels back through logs); `count`
/// with how many times it was called (to tell cached answers).
#[derive(Clone)]
struct Own;

/// Calls of the `count` tool (tests compare differences only).
static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
/// Calls that reached `slow_read` and `slow_write`.
static SLOW_READS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
static SLOW_WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn own_tool(name: &'static str, description: &'static str) -> Tool {
    let schema = json!({"type": "object", "properties": {"chars": {"type": "integer"}}});
    let Value::Object(schema) = schema else {
        unreachable!()
    };
    Tool::new(name, description, Arc::new(schema))
        .with_annotations(ToolAnnotations::new().read_only(true))
}

/// Deterministic text with ASCII, Hangul, emoji, blank lines and headings.
fn big_text(chars: usize) -> String {
    let pieces = [
        "# Section ",
        "line of plain text with numbers 12345\n",
        "한국어 문장입니다. ",
        "emoji 🚀🔥 ",
        "\n\n",
        "{\"json\": [1, 2, 3]}\n",
        "   indented code();\n",
    ];
    let mut text = String::new();
    let mut i = 0usize;
    while text.chars().count() < chars {
        text.push_str(pieces[i % pieces.len()]);
        if i.is_multiple_of(11) {
            text.push_str(&i.to_string());
        }
        i += 1;
    }
    text.chars().take(chars).collect()
}

impl ServerHandler for Own {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(vec![
            own_tool("show_args", "Shows the arguments it received."),
            own_tool("big", "Returns a long text."),
            own_tool(
                "show_secret",
                "Shows the X-Upstream-Secret header it received.",
            ),
            own_tool("count", "Counts its calls."),
            own_tool("announce", "Announces that its tool list changed."),
            own_tool("slow_read", "Answers after 2 s."),
            own_tool("slow_write", "Answers after 2 s; not read-only.")
                .with_annotations(ToolAnnotations::new().read_only(false)),
        ]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let arguments = request.arguments.unwrap_or_default();
        let header = context
            .extensions
            .get::<http::request::Parts>()
            .and_then(|parts| parts.headers.get("x-upstream-secret"))
            .map_or_else(|| "(none)".to_owned(), |v| digest(v.as_bytes()));
        let text = match request.name.as_ref() {
            "show_args" => Value::Object(arguments).to_string(),
            "show_secret" => header,
            "count" => (CALLS.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1).to_string(),
            "announce" => {
                context.peer.notify_tool_list_changed().await.ok();
                "announced".to_owned()
            }
            "slow_read" | "slow_write" => {
                let counter = if request.name == "slow_read" {
                    &SLOW_READS
                } else {
                    &SLOW_WRITES
                };
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                tokio::time::sleep(Duration::from_secs(2)).await;
                "done".to_owned()
            }
            "big" => big_text(
                arguments
                    .get("chars")
                    .and_then(Value::as_u64)
                    .unwrap_or(1000) as usize,
            ),
            other => return Err(ErrorData::invalid_params(format!("no tool {other}"), None)),
        };
        Ok(CallToolResult::success(vec![ContentBlock::text(text)]).into())
    }
}

async fn start_own_upstream() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    let service = StreamableHttpService::new(
        || Ok(Own),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default().with_allowed_hosts(vec![addr.to_string()]),
    );
    let router = axum::Router::new().nest_service("/mcp", service);
    tokio::spawn(async move { axum::serve(listener, router).await });
    format!("http://{addr}/mcp")
}

struct World {
    stack: Stack,
    acme: TestTenant,
    http: reqwest::Client,
}

impl World {
    async fn start() -> Self {
        Self::start_with(&[]).await
    }

    async fn start_with(extra: &[(&str, &str)]) -> Self {
        let key = base64::engine::general_purpose::STANDARD.encode([42u8; 32]);
        let mut settings = vec![
            ("MNEME_PROXY_ALLOW_PRIVATE_UPSTREAMS", "true"),
            ("MNEME_PROXY_HEADER_KEY", key.as_str()),
        ];
        settings.extend_from_slice(extra);
        let stack = Stack::start("hash", &settings).await;
        let acme = create_tenant(&stack.db.store(), "acme", &[Permission::Admin]).await;
        Self {
            stack,
            acme,
            http: reqwest::Client::new(),
        }
    }

    async fn request(
        &self,
        key: &str,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut request = self
            .http
            .request(method, format!("http://{}{path}", self.stack.http_addr))
            .bearer_auth(key);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    async fn register(&self, key: &str, upstream: Value) -> Value {
        let (status, body) = self
            .request(key, reqwest::Method::POST, "/v1/upstreams", Some(upstream))
            .await;
        assert_eq!(status, 201, "{body}");
        body
    }

    async fn remember(&self, content: &str) {
        let (status, body) = self
            .request(
                &self.acme.api_key,
                reqwest::Method::POST,
                "/v1/tools/remember",
                Some(json!({"content": content, "topic": "auth", "type": "fact"})),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        let deadline = Instant::now() + Duration::from_secs(20);
        while self
            .stack
            .db
            .count_in_tenant(self.acme.tenant_id, "embedding IS NULL")
            .await
            > 0
        {
            assert!(Instant::now() < deadline, "embeddings did not complete");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

async fn call<H: rmcp::ClientHandler>(
    mcp: &Mcp<H>,
    name: &str,
    arguments: Value,
) -> CallToolResult {
    let Value::Object(arguments) = arguments else {
        panic!("arguments are an object")
    };
    mcp.client
        .call_tool(CallToolRequestParams::new(name.to_owned()).with_arguments(arguments))
        .await
        .unwrap_or_else(|e| panic!("tools/call {name} failed at the protocol level: {e}"))
}

fn texts(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text())
        .map(|t| t.text.as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

/// One `tools/call` of the stateless 2026-07-28 era, as raw JSON-RPC (rmcp's
/// client speaks the older, session-based era): the response message.
async fn modern_call(world: &World, name: &str, arguments: Value) -> Value {
    const VERSION: &str = "2026-07-28";
    let response = world
        .http
        .post(world.stack.mcp_url())
        .bearer_auth(&world.acme.api_key)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", VERSION)
        .header("mcp-method", "tools/call")
        .header("mcp-name", name)
        .json(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
                "name": name, "arguments": arguments,
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": VERSION,
                    "io.modelcontextprotocol/clientCapabilities": {}
                }
            }}),
        )
        .send()
        .await
        .unwrap();
    let status = response.status();
    let body = response.text().await.unwrap();
    assert_eq!(status, 200, "{body}");
    // Either a JSON body or an event stream whose data line is the message.
    let message = body
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .find(|data| !data.trim().is_empty())
        .unwrap_or(&body);
    serde_json::from_str(message.trim()).unwrap_or_else(|e| panic!("{e}: {body}"))
}

async fn tool_names(mcp: &Mcp) -> Vec<Tool> {
    mcp.client.list_all_tools().await.unwrap()
}

#[tokio::test]
async fn a_registered_upstream_is_listed_called_and_surfaced_through_mneme() {
    let world = World::start().await;
    let everything = Everything::start().await;
    let registered = world
        .register(
            &world.acme.api_key,
            json!({"name": "everything", "prefix": "ev", "url": everything.url,
                   "headers": {"X-Upstream-Secret": HEADER_SECRET}}),
        )
        .await;
    assert_eq!(registered["headerNames"], json!(["X-Upstream-Secret"]));
    assert!(!registered.to_string().contains(HEADER_SECRET));
    world.remember(JWT_MEMORY).await;

    let mcp = world.stack.mcp(&world.acme.api_key).await;
    let tools = tool_names(&mcp).await;
    let echo = tools
        .iter()
        .find(|t| t.name == "ev__echo")
        .unwrap_or_else(|| {
            panic!(
                "ev__echo listed: {:?}",
                tools.iter().map(|t| &t.name).collect::<Vec<_>>()
            )
        });
    assert!(
        echo.description
            .as_deref()
            .unwrap()
            .starts_with("[proxied] ")
    );
    assert!(
        echo.input_schema["properties"]
            .get("_context_query")
            .is_some()
    );
    assert!(
        tools.iter().any(|t| t.name == "recall"),
        "mneme's own tools stay"
    );

    // A read-only call related to a stored memory gets it injected.
    let result = call(
        &mcp,
        "ev__echo",
        json!({"message": "reviewing the token validation code",
               "_context_query": "JWT handler access token validation RS256"}),
    )
    .await;
    assert_ne!(result.is_error, Some(true), "{result:?}");
    let text = texts(&result);
    assert!(
        text.starts_with("Echo: reviewing the token validation code"),
        "{text}"
    );
    assert!(text.contains("<surfaced-memories"), "{text}");
    assert!(text.contains("RS256"), "{text}");

    // A tool that is not read-only gets nothing.
    let toggled = call(
        &mcp,
        "ev__toggle-simulated-logging",
        json!({"_context_query": "JWT handler access token validation RS256"}),
    )
    .await;
    assert_ne!(toggled.is_error, Some(true), "{toggled:?}");
    assert!(!texts(&toggled).contains("<surfaced-memories"));

    // Non-text content passes through intact.
    let image = call(&mcp, "ev__get-tiny-image", json!({})).await;
    assert!(
        image.content.iter().any(|c| c.as_image().is_some()),
        "{image:?}"
    );

    // A client of the 2026-07-28 era requires `resultType` on every result;
    // the upstream (an older era) sends none, so mneme adds it.
    let modern = modern_call(&world, "ev__echo", json!({"message": "modern era"})).await;
    assert_eq!(modern["result"]["resultType"], "complete", "{modern}");
    assert_eq!(
        modern["result"]["content"][0]["text"], "Echo: modern era",
        "{modern}"
    );

    // The listing shows header names, never values; switching surfacing
    // off takes effect at once.
    let (status, listing) = world
        .request(
            &world.acme.api_key,
            reqwest::Method::GET,
            "/v1/upstreams",
            None,
        )
        .await;
    assert_eq!(status, 200);
    assert!(!listing.to_string().contains(HEADER_SECRET), "{listing}");
    let (status, _) = world
        .request(
            &world.acme.api_key,
            reqwest::Method::PATCH,
            "/v1/upstreams/everything",
            Some(json!({"surfacingEnabled": false})),
        )
        .await;
    assert_eq!(status, 200);
    let quiet = call(
        &mcp,
        "ev__echo",
        json!({"message": "again", "_context_query": "JWT handler RS256 token validation"}),
    )
    .await;
    assert_eq!(texts(&quiet), "Echo: again");
}

#[tokio::test]
async fn another_tenant_can_neither_see_nor_call_nor_learn_of_an_upstream() {
    let world = World::start().await;
    let everything = Everything::start().await;
    world
        .register(
            &world.acme.api_key,
            json!({"name": "everything", "prefix": "ev", "url": everything.url}),
        )
        .await;
    let other = create_tenant(&world.stack.db.store(), "other", &[Permission::Admin]).await;
    let mcp = world.stack.mcp(&other.api_key).await;
    assert!(
        !tool_names(&mcp)
            .await
            .iter()
            .any(|t| t.name.starts_with("ev__"))
    );
    let theirs = call(&mcp, "ev__echo", json!({"message": "hi"})).await;
    let nobody = call(&mcp, "zz__echo", json!({"message": "hi"})).await;
    assert_eq!(theirs.is_error, Some(true));
    assert_eq!(
        texts(&theirs).replace("ev__echo", "X"),
        texts(&nobody).replace("zz__echo", "X"),
        "an existing upstream of another tenant reads like no upstream at all"
    );
    for method in [reqwest::Method::GET, reqwest::Method::DELETE] {
        let (status, existing) = world
            .request(
                &other.api_key,
                method.clone(),
                "/v1/upstreams/everything",
                None,
            )
            .await;
        let (status_missing, missing) = world
            .request(&other.api_key, method, "/v1/upstreams/nothing", None)
            .await;
        assert_eq!((status, status_missing), (404, 404));
        assert_eq!(
            existing.to_string().replace("everything", "X"),
            missing.to_string().replace("nothing", "X")
        );
    }
    // A key without `admin` manages nothing.
    let reader = create_tenant(&world.stack.db.store(), "reader", &[Permission::Read]).await;
    let (status, _) = world
        .request(&reader.api_key, reqwest::Method::GET, "/v1/upstreams", None)
        .await;
    assert_eq!(status, 403);
}

#[tokio::test]
async fn progressive_delivery_round_trips_a_megabyte_exactly_and_never_forwards_the_context_query()
{
    let world = World::start().await;
    let url = start_own_upstream().await;
    world
        .register(
            &world.acme.api_key,
            json!({"name": "own", "url": url, "compression": "progressive"}),
        )
        .await;
    let mcp = world.stack.mcp(&world.acme.api_key).await;

    let shown = call(
        &mcp,
        "own__show_args",
        json!({"path": "a.txt", "_context_query": "what I am doing"}),
    )
    .await;
    let received: Value = serde_json::from_str(&texts(&shown)).unwrap();
    assert_eq!(received, json!({"path": "a.txt"}));
    // The REST facade reaches upstream tools too, with the MCP result.
    let (status, over_rest) = world
        .request(
            &world.acme.api_key,
            reqwest::Method::POST,
            "/v1/tools/own__show_args",
            Some(json!({"path": "b.txt", "_context_query": "x"})),
        )
        .await;
    assert_eq!(status, 200, "{over_rest}");
    assert_eq!(over_rest["content"][0]["text"], r#"{"path":"b.txt"}"#);
    let (status, _) = world
        .request(
            &world.acme.api_key,
            reqwest::Method::POST,
            "/v1/tools/own__missing",
            Some(json!({})),
        )
        .await;
    assert_eq!(status, 404);
    // and /openapi.json describes them next to mneme's own.
    let (status, openapi) = world
        .request(
            &world.acme.api_key,
            reqwest::Method::GET,
            "/openapi.json",
            None,
        )
        .await;
    assert_eq!(status, 200);
    let path = &openapi["paths"]["/v1/tools/own__show_args"]["post"];
    assert_eq!(path["x-mneme-upstream"], true, "{path}");
    assert!(
        path["requestBody"]["content"]["application/json"]["schema"]["properties"]
            .get("_context_query")
            .is_some()
    );
    assert!(openapi["paths"]["/v1/tools/recall"].is_object());
    assert!(openapi["components"]["schemas"]["UpstreamResult"].is_object());

    let chars = 1_000_000;
    let expected = big_text(chars);
    let first = call(&mcp, "own__big", json!({"chars": chars})).await;
    let first = texts(&first);
    assert!(
        first.contains(FOOTER_TOKEN),
        "a chunked result has a footer"
    );
    let key = first
        .split("stm_proxy_read_more(key=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("the footer names the key")
        .to_owned();
    let mut rebuilt = strip_footer(&first).to_owned();
    let mut offset = rebuilt.chars().count() as u64;
    let mut reads = 0;
    loop {
        let more = mcp
            .ok(
                "stm_proxy_read_more",
                json!({"key": key, "offset": offset, "limit": 16000}),
            )
            .await;
        rebuilt.push_str(strip_footer(more["text"].as_str().unwrap()));
        reads += 1;
        match more["nextOffset"].as_u64() {
            Some(next) => offset = next,
            None => break,
        }
        assert!(reads < 1000, "progressive reading does not end");
    }
    assert_eq!(rebuilt.len(), expected.len());
    assert!(
        rebuilt == expected,
        "the concatenated chunks are the original"
    );

    // Another key of the same tenant cannot read this key's result.
    let stranger = create_tenant(&world.stack.db.store(), "stranger", &[Permission::Admin]).await;
    let (status, body) = world
        .request(
            &stranger.api_key,
            reqwest::Method::POST,
            "/v1/tools/stm_proxy_read_more",
            Some(json!({"key": key, "offset": 0})),
        )
        .await;
    assert_eq!(status, 404, "{body}");
}

#[tokio::test]
async fn a_killed_upstream_opens_the_breaker_within_the_timeout_and_mneme_keeps_working() {
    let world = World::start().await;
    let mut everything = Everything::start().await;
    world
        .register(
            &world.acme.api_key,
            json!({"name": "everything", "prefix": "ev", "url": everything.url,
                   "connectTimeoutMs": 2000, "callTimeoutMs": 2000, "overallTimeoutMs": 3000,
                   "maxRetries": 1, "breakerFailures": 2, "breakerResetMs": 60000}),
        )
        .await;
    let mcp = world.stack.mcp(&world.acme.api_key).await;
    let ok = call(&mcp, "ev__echo", json!({"message": "alive"})).await;
    assert_eq!(texts(&ok), "Echo: alive");

    everything.kill().await;
    let mut errors = Vec::new();
    for _ in 0..3 {
        let started = Instant::now();
        let failed = call(&mcp, "ev__echo", json!({"message": "anyone?"})).await;
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "a dead upstream answers within the configured timeouts"
        );
        assert_eq!(failed.is_error, Some(true), "{failed:?}");
        errors.push(texts(&failed));
    }
    assert!(
        errors[0].contains("unreachable") || errors[0].contains("did not answer"),
        "{errors:?}"
    );
    assert!(
        errors[2].contains("stopped calling it"),
        "the breaker is open: {errors:?}"
    );
    // mneme's own tools are unaffected.
    let recalled = mcp.ok("recall", json!({"text": "anything"})).await;
    assert!(recalled["fragments"].is_array());
}

#[tokio::test]
async fn a_hung_upstream_opens_its_breaker_while_other_upstreams_and_mneme_answer() {
    let world = World::start().await;
    let url = start_own_upstream().await;
    // Two registrations of one server: `hung` is only ever asked its slow
    // tool (it answers after 2 s, past the call timeout), `fine` its fast
    // one. Each registration has its own breaker and connection.
    world
        .register(
            &world.acme.api_key,
            json!({"name": "hung", "url": url, "callTimeoutMs": 300, "overallTimeoutMs": 600,
                   "maxRetries": 0, "breakerFailures": 2, "breakerResetMs": 60000}),
        )
        .await;
    world
        .register(
            &world.acme.api_key,
            json!({"name": "fine", "url": url, "callTimeoutMs": 2000}),
        )
        .await;
    let mcp = world.stack.mcp(&world.acme.api_key).await;
    let reads_before = SLOW_READS.load(std::sync::atomic::Ordering::SeqCst);

    let hung = async {
        let mut answers = Vec::new();
        for _ in 0..3 {
            let started = Instant::now();
            let result = call(&mcp, "hung__slow_read", json!({})).await;
            assert_eq!(result.is_error, Some(true), "{result:?}");
            answers.push((started.elapsed(), texts(&result)));
        }
        answers
    };
    // While the hung upstream holds calls, the other answers at its pace.
    let fine = async {
        let mut slowest = Duration::ZERO;
        for _ in 0..10 {
            let started = Instant::now();
            let result = call(&mcp, "fine__count", json!({})).await;
            assert_eq!(result.is_error, Some(false), "{result:?}");
            slowest = slowest.max(started.elapsed());
        }
        slowest
    };
    let (hung, slowest_fine) = tokio::join!(hung, fine);
    // mneme's call timeout cut the first call (the upstream takes 2 s).
    assert!(
        hung[0].1.contains("did not answer within 300ms"),
        "{hung:?}"
    );
    // Open after two failures: the third call is refused without reaching
    // the upstream (counted there rather than timed here, so a loaded
    // machine cannot fail it).
    assert!(hung[2].1.contains("stopped calling it"), "{hung:?}");
    let reached = SLOW_READS.load(std::sync::atomic::Ordering::SeqCst) - reads_before;
    assert!(
        reached <= 2,
        "{reached} calls reached the upstream, only the two before the breaker opened may: {hung:?}"
    );
    assert!(
        slowest_fine < Duration::from_secs(1),
        "the healthy upstream waited on the hung one: {slowest_fine:?}"
    );
    let recalled = mcp.ok("recall", json!({"text": "anything"})).await;
    assert!(recalled["fragments"].is_array());
}

#[tokio::test]
async fn a_legacy_sse_upstream_is_reached_through_the_hand_written_transport() {
    let world = World::start().await;
    let everything = Everything::start_with("sse", "sse").await;
    world
        .register(
            &world.acme.api_key,
            json!({"name": "legacy", "transport": "sse", "url": everything.url}),
        )
        .await;
    let mcp = world.stack.mcp(&world.acme.api_key).await;
    // The Node server behind the SSE stream can be slow to answer its first
    // tools/list on a loaded machine; a client listing again sees it.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !tool_names(&mcp)
        .await
        .iter()
        .any(|t| t.name == "legacy__echo")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the legacy upstream's tools never appeared"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let echoed = call(&mcp, "legacy__echo", json!({"message": "over sse"})).await;
    assert_eq!(texts(&echoed), "Echo: over sse");
}

#[tokio::test]
async fn truncation_caching_and_tool_overrides_apply_per_upstream() {
    let world = World::start().await;
    let url = start_own_upstream().await;
    world
        .register(
            &world.acme.api_key,
            json!({"name": "own", "url": url, "maxResultChars": 5000,
                   "toolOverrides": {"count": {"cacheTtlSecs": 60},
                                     "show_secret": {"hidden": true},
                                     "show_args": {"description": "Echo of the arguments."}}}),
        )
        .await;
    let mcp = world.stack.mcp(&world.acme.api_key).await;
    let tools = tool_names(&mcp).await;
    assert!(
        !tools.iter().any(|t| t.name == "own__show_secret"),
        "hidden"
    );
    let show_args = tools.iter().find(|t| t.name == "own__show_args").unwrap();
    assert_eq!(
        show_args.description.as_deref(),
        Some("[proxied] Echo of the arguments.")
    );
    let hidden = call(&mcp, "own__show_secret", json!({})).await;
    assert!(texts(&hidden).contains("unknown tool"), "{hidden:?}");

    // Over the budget, text is cut at a boundary with a note.
    let long = call(&mcp, "own__big", json!({"chars": 50_000})).await;
    let text = texts(&long);
    assert!(
        text.chars().count() <= 5000,
        "{} characters",
        text.chars().count()
    );
    assert!(text.contains("[truncated"), "{}", &text[text.len() - 200..]);

    // A read-only tool with a cache TTL is called once per distinct call.
    let count = |chars: u64| {
        let mcp = &mcp;
        async move {
            texts(&call(mcp, "own__count", json!({"chars": chars})).await)
                .parse::<u64>()
                .unwrap()
        }
    };
    let first = count(1).await;
    assert_eq!(
        count(1).await,
        first,
        "the second identical call is served from the cache"
    );
    assert_eq!(
        count(2).await,
        first + 1,
        "other arguments reach the upstream"
    );

    // The upstream's page shows what its tools did on this pod.
    let (_, page) = world
        .request(
            &world.acme.api_key,
            reqwest::Method::GET,
            "/v1/upstreams/own",
            None,
        )
        .await;
    let stats = &page["stats"];
    assert_eq!(stats["count"]["calls"], 3, "{page}");
    assert_eq!(stats["count"]["cached"], 1, "{page}");
    assert_eq!(stats["big"]["charsIn"], 50_000, "{page}");
    assert!(stats["big"]["charsOut"].as_u64().unwrap() <= 5000, "{page}");
}

#[tokio::test]
async fn in_section_mode_continuations_surface_what_the_first_chunk_did_not_show() {
    let world = World::start_with(&[
        ("MNEME_SURFACING_INJECTION_MODE", "section"),
        ("MNEME_SURFACING_MAX_RESULTS", "1"),
        ("MNEME_SURFACING_COOLDOWN_MS", "0"),
        // Two memories on one subject stand out less from each other than
        // one would; the mechanism, not the calibration, is under test.
        ("MNEME_SURFACING_MIN_SCORE", "0.2"),
    ])
    .await;
    // Two memories on the call's subject among unrelated ones, so both
    // stand out from the rest.
    for memory in [
        JWT_MEMORY,
        "Access token audience validation: every RS256 JWT must name the MCP URL as its \
         audience.",
        "The office coffee machine on the third floor is descaled every Friday.",
        "The cache cluster runs Redis with the allkeys-lru eviction policy.",
        "Quarterly planning happens in the second week of March, June and September.",
        "The design system uses an 8 pixel grid and the Inter typeface.",
    ] {
        world.remember(memory).await;
    }
    let url = start_own_upstream().await;
    world
        .register(
            &world.acme.api_key,
            json!({"name": "own", "url": url, "compression": "progressive"}),
        )
        .await;
    let mcp = world.stack.mcp(&world.acme.api_key).await;
    let query = "JWT handler access token validation RS256 audience";
    let first = call(
        &mcp,
        "own__big",
        json!({"chars": 20_000, "_context_query": query}),
    )
    .await;
    // Section mode: the chunk is left alone, the block is its own item.
    assert_eq!(first.content.len(), 2, "{first:?}");
    let chunk = first.content[0].as_text().unwrap().text.clone();
    let block = first.content[1].as_text().unwrap().text.clone();
    assert!(!chunk.contains("<surfaced-memories"));
    assert!(block.starts_with("<surfaced-memories"), "{block}");
    let key = chunk
        .split("stm_proxy_read_more(key=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap()
        .to_owned();
    let more = mcp
        .ok("stm_proxy_read_more", json!({"key": key, "offset": 4000}))
        .await;
    let again = more["surfacedMemories"]
        .as_str()
        .unwrap_or_else(|| panic!("a continuation surfaces: {more}"));
    let shown_first = block.contains("leeway");
    assert_ne!(
        shown_first,
        again.contains("leeway"),
        "the continuation shows the other memory: {block}\n---\n{again}"
    );
}

#[tokio::test]
async fn a_timed_out_read_is_retried_but_a_timed_out_write_is_never_replayed() {
    let world = World::start().await;
    let url = start_own_upstream().await;
    world
        .register(
            &world.acme.api_key,
            json!({"name": "own", "url": url, "callTimeoutMs": 500, "overallTimeoutMs": 3000,
                   "maxRetries": 2, "breakerFailures": 0}),
        )
        .await;
    let mcp = world.stack.mcp(&world.acme.api_key).await;
    let (reads, writes) = (
        SLOW_READS.load(std::sync::atomic::Ordering::SeqCst),
        SLOW_WRITES.load(std::sync::atomic::Ordering::SeqCst),
    );
    let read = call(&mcp, "own__slow_read", json!({})).await;
    assert_eq!(read.is_error, Some(true));
    assert!(texts(&read).contains("did not answer"), "{read:?}");
    let write = call(&mcp, "own__slow_write", json!({})).await;
    assert_eq!(write.is_error, Some(true));
    assert_eq!(
        SLOW_READS.load(std::sync::atomic::Ordering::SeqCst) - reads,
        3,
        "a read-only tool is tried once and retried twice"
    );
    assert_eq!(
        SLOW_WRITES.load(std::sync::atomic::Ordering::SeqCst) - writes,
        1,
        "a tool that may write is not repeated after a timeout"
    );
}

/// A client that counts `notifications/tools/list_changed`.
#[derive(Clone, Default)]
struct ListWatcher(Arc<std::sync::atomic::AtomicUsize>);

impl rmcp::ClientHandler for ListWatcher {
    async fn on_tool_list_changed(
        &self,
        _context: rmcp::service::NotificationContext<rmcp::RoleClient>,
    ) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

impl ListWatcher {
    fn seen(&self) -> usize {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Waits until more than `before` notifications arrived.
    async fn more_than(&self, before: usize) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.seen() <= before {
            assert!(Instant::now() < deadline, "no tools/list_changed arrived");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

#[tokio::test]
async fn sessions_are_told_when_their_tenants_upstreams_change() {
    let world = World::start().await;
    let url = start_own_upstream().await;
    let watcher = ListWatcher::default();
    let mcp = world
        .stack
        .mcp_with(&world.acme.api_key, watcher.clone())
        .await;
    let before = mcp.client.list_all_tools().await.unwrap();
    assert!(!before.iter().any(|t| t.name.starts_with("own__")));
    world
        .register(&world.acme.api_key, json!({"name": "own", "url": url}))
        .await;
    watcher.more_than(0).await;
    let after = mcp.client.list_all_tools().await.unwrap();
    assert!(after.iter().any(|t| t.name == "own__show_args"));

    // An upstream's own announcement reaches the session too (counted
    // after the registration's notifications, local and pub/sub, settled).
    tokio::time::sleep(Duration::from_secs(1)).await;
    let settled = watcher.seen();
    let announced = call(&mcp, "own__announce", json!({})).await;
    assert_eq!(texts(&announced), "announced");
    watcher.more_than(settled).await;
}

#[tokio::test]
async fn upstream_headers_reach_the_upstream_and_appear_nowhere_else() {
    let logs = mneme_e2e_tests::CapturedLogs::start();

    let world = World::start().await;
    let url = start_own_upstream().await;
    let registered = world
        .register(
            &world.acme.api_key,
            json!({"name": "own", "url": url, "headers": {"X-Upstream-Secret": HEADER_SECRET}}),
        )
        .await;
    let mcp = world.stack.mcp(&world.acme.api_key).await;
    let shown = call(&mcp, "own__show_secret", json!({})).await;
    assert_eq!(
        texts(&shown),
        digest(HEADER_SECRET.as_bytes()),
        "the header reaches the upstream"
    );

    // Changing a setting keeps the headers; listing and reading show names only.
    let (status, patched) = world
        .request(
            &world.acme.api_key,
            reqwest::Method::PATCH,
            "/v1/upstreams/own",
            Some(json!({"maxRetries": 0})),
        )
        .await;
    assert_eq!(status, 200, "{patched}");
    let again = call(&mcp, "own__show_secret", json!({})).await;
    assert_eq!(texts(&again), digest(HEADER_SECRET.as_bytes()));
    let (_, listed) = world
        .request(
            &world.acme.api_key,
            reqwest::Method::GET,
            "/v1/upstreams",
            None,
        )
        .await;
    let (_, shown_one) = world
        .request(
            &world.acme.api_key,
            reqwest::Method::GET,
            "/v1/upstreams/own",
            None,
        )
        .await;

    // At rest the headers are sealed, not stored in clear.
    let raw: Vec<u8> = {
        let store = world.stack.db.store();
        let mut db = store.client().await.unwrap();
        let tx = mneme_store::TenantTx::begin(&mut db, world.acme.tenant_id)
            .await
            .unwrap();
        let row = tx
            .query_one(
                "SELECT headers_sealed FROM mneme.upstream_servers WHERE tenant_id = $1",
                &[&world.acme.tenant_id],
            )
            .await
            .unwrap();
        row.get(0)
    };
    assert!(
        !raw.windows(HEADER_SECRET.len())
            .any(|w| w == HEADER_SECRET.as_bytes())
    );

    let metrics = mneme_telemetry::metrics::render();
    let logged = logs.text();
    assert!(logged.contains("upstream registered"), "logs were captured");
    for (place, text) in [
        ("the registration answer", registered.to_string()),
        ("the PATCH answer", patched.to_string()),
        ("the listing", listed.to_string()),
        ("the upstream's page", shown_one.to_string()),
        ("the metrics", metrics),
        ("the logs", logged),
    ] {
        let leaks: Vec<&str> = text
            .lines()
            .filter(|line| line.contains(HEADER_SECRET))
            .take(3)
            .collect();
        assert!(
            leaks.is_empty(),
            "the header value is in {place}: {leaks:#?}"
        );
    }
}
