//! Whole-system tests of mneme: the full stack (`mneme up`) on loopback
//! ports, PostgreSQL with pgvector, Redis, and real MCP clients.
//!
//! Layout: [`Stack`] starts and stops a stack on a fresh database;
//! [`Mcp`] wraps an rmcp client with helpers for tool calls;
//! [`processes`] runs the services as separate processes with private
//! PostgreSQL and Redis servers, for fault injection, and [`fault_proxy`]
//! puts latency, hangs and resets on the links to them; [`CapturedLogs`]
//! holds what the in-process stack logged. The tests live in `tests/`.
#![forbid(unsafe_code)]

pub mod fault_proxy;
mod logs;
pub mod processes;

pub use logs::CapturedLogs;

use std::collections::HashMap;
use std::net::SocketAddr;

use mneme::up::{Listeners, up};
use mneme_config::Config;
use mneme_test_support::{TestDatabase, TestRedis};
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// A running stack on a database of its own.
#[derive(Debug)]
pub struct Stack {
    pub db: TestDatabase,
    pub redis: TestRedis,
    pub http_addr: SocketAddr,
    /// The configuration the stack runs with (boxed: it is large, and
    /// every future holding a stack would carry it).
    pub config: Box<Config>,
    stop: CancellationToken,
    task: JoinHandle<anyhow::Result<()>>,
}

impl Stack {
    /// Starts `mneme up` with the given embedder (`e5` needs MNEME_E5_DIR)
    /// and any extra settings.
    pub async fn start(embedder: &str, extra: &[(&str, &str)]) -> Self {
        let db = TestDatabase::create().await;
        let redis = TestRedis::new();
        let mut env: HashMap<String, String> = HashMap::from([
            ("MNEME_DATABASE_URL".into(), db.app_url.clone()),
            ("MNEME_REDIS_URL".into(), redis.url.clone()),
            ("MNEME_REDIS_PREFIX".into(), redis.prefix.clone()),
            ("MNEME_EMBEDDER".into(), embedder.into()),
            ("MNEME_EMBED_SWEEP_SECS".into(), "1".into()),
            // Scheduled consolidation would change scores under a test's
            // feet; tests that want it turn it on, or run it by hand.
            ("MNEME_CONSOLIDATION".into(), "false".into()),
            // As a deployment sets it; each stack its own, so tokens and
            // session ids of one stack mean nothing to another.
            (
                "MNEME_INTERNAL_TOKEN".into(),
                format!("internal-token-of-{}", redis.prefix),
            ),
        ]);
        if let Ok(dir) = std::env::var("MNEME_E5_DIR") {
            env.insert("MNEME_E5_DIR".into(), dir);
        }
        let bind = || TcpListener::bind("127.0.0.1:0");
        let http = bind().await.unwrap();
        let http_addr = http.local_addr().unwrap();
        // Links, token audiences and OAuth metadata name the real address.
        env.insert("MNEME_PUBLIC_URL".into(), format!("http://{http_addr}"));
        for (key, value) in extra {
            env.insert((*key).into(), (*value).into());
        }
        let config = Config::from_env(&env).expect("valid test configuration");
        let listeners = Listeners {
            http,
            recall: bind().await.unwrap(),
            remember: bind().await.unwrap(),
        };
        let stop = CancellationToken::new();
        let task = tokio::spawn(up(
            config.clone(),
            listeners,
            stop.clone().cancelled_owned(),
        ));
        Self {
            db,
            redis,
            http_addr,
            config: Box::new(config),
            stop,
            task,
        }
    }

    pub fn mcp_url(&self) -> String {
        format!("http://{}/mcp", self.http_addr)
    }

    /// An MCP client authenticated with `api_key`, after `initialize`.
    pub async fn mcp(&self, api_key: &str) -> Mcp {
        self.mcp_with(api_key, ()).await
    }

    /// Like [`Stack::mcp`], with a client handler that sees notifications.
    pub async fn mcp_with<H: ClientHandler>(&self, api_key: &str, handler: H) -> Mcp<H> {
        let transport = StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(self.mcp_url()).auth_header(api_key),
        );
        Mcp {
            client: handler
                .serve(transport)
                .await
                .expect("MCP initialize succeeds"),
        }
    }

    /// Waits until every fragment of `tenant_id` has its embedding.
    pub async fn wait_until_embedded(&self, tenant_id: uuid::Uuid) {
        eventually(
            "every fragment is embedded",
            std::time::Duration::from_secs(20),
            || async move {
                self.db
                    .count_in_tenant(tenant_id, "embedding IS NULL")
                    .await
                    == 0
            },
        )
        .await;
    }

    /// Stops every service and returns how the stack ended.
    pub async fn shutdown(self) -> anyhow::Result<()> {
        self.stop.cancel();
        self.task.await?
    }
}

/// An initialized MCP client.
pub struct Mcp<H: ClientHandler = ()> {
    pub client: RunningService<RoleClient, H>,
}

/// The ids of a `recall` result's fragments, in order.
pub fn fragment_ids(recalled: &Value) -> Vec<String> {
    recalled["fragments"]
        .as_array()
        .expect("fragments")
        .iter()
        .map(|f| f["id"].as_str().expect("an id").to_owned())
        .collect()
}

impl<H: ClientHandler> std::fmt::Debug for Mcp<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Mcp")
    }
}

impl<H: ClientHandler> Mcp<H> {
    /// Calls a tool; returns the raw result.
    pub async fn call(&self, tool: &'static str, arguments: Value) -> CallToolResult {
        self.call_params(tool, arguments, |params| params).await
    }

    /// Calls a tool after letting `customise` change the request (to add a
    /// progress token, say).
    pub async fn call_params(
        &self,
        tool: &'static str,
        arguments: Value,
        customise: impl FnOnce(CallToolRequestParams) -> CallToolRequestParams,
    ) -> CallToolResult {
        let Value::Object(arguments) = arguments else {
            panic!("tool arguments must be a JSON object");
        };
        self.client
            .call_tool(customise(
                CallToolRequestParams::new(tool).with_arguments(arguments),
            ))
            .await
            .unwrap_or_else(|e| panic!("tools/call {tool} failed at the protocol level: {e}"))
    }

    /// Calls a tool that must succeed; returns its structured content.
    pub async fn ok(&self, tool: &'static str, arguments: Value) -> Value {
        let result = self.call(tool, arguments).await;
        assert_ne!(result.is_error, Some(true), "{tool} failed: {result:?}");
        let structured = result
            .structured_content
            .clone()
            .expect("structuredContent");
        // The same JSON is mirrored as text for clients without structured output.
        let text = result.content[0]
            .as_text()
            .expect("a text block")
            .text
            .clone();
        assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), structured);
        structured
    }

    /// Stores a new memory that must be created; returns its id.
    pub async fn remember_new(&self, content: &str, topic: &str, kind: &str) -> String {
        let stored = self
            .ok(
                "remember",
                serde_json::json!({"content": content, "topic": topic, "type": kind}),
            )
            .await;
        assert_eq!(stored["outcome"], "created", "{stored}");
        stored["id"].as_str().expect("an id").to_owned()
    }

    /// Calls a tool that must fail as a tool error; returns the error text.
    pub async fn tool_error(&self, tool: &'static str, arguments: Value) -> String {
        let result = self.call(tool, arguments).await;
        assert_eq!(
            result.is_error,
            Some(true),
            "{tool} should fail: {result:?}"
        );
        result.content[0]
            .as_text()
            .expect("a text block")
            .text
            .clone()
    }
}

/// Polls `condition` every 50 ms until it holds; fails the test naming
/// `what` after `within`.
pub async fn eventually<F, Fut>(what: &str, within: std::time::Duration, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = std::time::Instant::now() + within;
    while !condition().await {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting: {what}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}
