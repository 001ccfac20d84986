//! Traces and logs across processes: the gateway, recall and remember run
//! as separate processes (their own binaries) exporting spans to an OTLP
//! collector stub in this test. One MCP tool call with a caller's
//! `traceparent` must produce one trace holding spans of both the gateway
//! and the backend (including its SQL statements); an error answer must
//! quote that trace id; and the JSON logs of a remember must carry trace
//! ids but neither the API key nor the memory's content.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mneme_e2e_tests::processes::{TempDir, free_port, service_binary};
use mneme_test_support::{ALL_PERMISSIONS, TestDatabase, TestRedis, create_tenant};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use serde_json::{Value, json};
use tokio::process::{Child, Command};

/// A span as the collector received it.
#[derive(Debug, Clone)]
struct ReceivedSpan {
    service: String,
    name: String,
    trace_id: String,
}

/// The OTLP/gRPC trace receiver: keeps every span it is sent.
#[derive(Debug, Clone, Default)]
struct Collector {
    spans: Arc<Mutex<Vec<ReceivedSpan>>>,
}

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut spans = self.spans.lock().unwrap();
        for resource_spans in request.into_inner().resource_spans {
            let service = resource_spans
                .resource
                .iter()
                .flat_map(|r| &r.attributes)
                .find(|kv| kv.key == "service.name")
                .and_then(|kv| kv.value.as_ref()?.value.as_ref())
                .map(|value| match value {
                    AnyValue::StringValue(name) => name.clone(),
                    other => format!("{other:?}"),
                })
                .unwrap_or_default();
            for scope in resource_spans.scope_spans {
                for span in scope.spans {
                    spans.push(ReceivedSpan {
                        service: service.clone(),
                        name: span.name,
                        trace_id: hex(&span.trace_id),
                    });
                }
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Collector {
    async fn start() -> (Self, SocketAddr) {
        let collector = Self::default();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let service = TraceServiceServer::new(collector.clone());
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
        );
        (collector, addr)
    }

    fn in_trace(&self, trace_id: &str) -> Vec<ReceivedSpan> {
        self.spans
            .lock()
            .unwrap()
            .iter()
            .filter(|span| span.trace_id == trace_id)
            .cloned()
            .collect()
    }

    /// Waits until `done` holds for the spans of `trace_id`.
    async fn wait_for(
        &self,
        trace_id: &str,
        done: impl Fn(&[ReceivedSpan]) -> bool,
    ) -> Vec<ReceivedSpan> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let spans = self.in_trace(trace_id);
            if done(&spans) {
                return spans;
            }
            assert!(
                Instant::now() < deadline,
                "the trace never completed; spans received: {spans:#?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

struct Services {
    children: Vec<Child>,
    http: String,
    gateway_log: PathBuf,
    _dir: TempDir,
}

impl Drop for Services {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.start_kill();
        }
    }
}

async fn start_services(db: &TestDatabase, redis: &TestRedis, otlp: SocketAddr) -> Services {
    let dir = TempDir::new("tracing");
    let (recall_port, remember_port, http_port) = (free_port(), free_port(), free_port());
    let http = format!("http://127.0.0.1:{http_port}");
    let common = [
        ("MNEME_DATABASE_URL", db.app_url.clone()),
        ("MNEME_REDIS_URL", redis.url.clone()),
        ("MNEME_REDIS_PREFIX", redis.prefix.clone()),
        ("MNEME_EMBEDDER", "hash".into()),
        (
            "MNEME_INTERNAL_TOKEN",
            "test-internal-token-0123456789abcdef".into(),
        ),
        ("MNEME_RECALL_GRPC_ADDR", format!("127.0.0.1:{recall_port}")),
        (
            "MNEME_REMEMBER_GRPC_ADDR",
            format!("127.0.0.1:{remember_port}"),
        ),
        (
            "MNEME_RECALL_URL",
            format!("http://127.0.0.1:{recall_port}"),
        ),
        (
            "MNEME_REMEMBER_URL",
            format!("http://127.0.0.1:{remember_port}"),
        ),
        ("MNEME_HTTP_ADDR", format!("127.0.0.1:{http_port}")),
        ("MNEME_PUBLIC_URL", http.clone()),
        ("MNEME_OTLP_ENDPOINT", format!("http://{otlp}")),
        ("MNEME_OTLP_SAMPLE_RATIO", "1".into()),
        ("OTEL_BSP_SCHEDULE_DELAY", "200".into()),
        // Everything the services would log, as an operator debugging
        // would see it.
        ("MNEME_LOG", "debug".into()),
        ("MNEME_LOG_FORMAT", "json".into()),
    ];
    let mut children = Vec::new();
    let mut gateway_log = PathBuf::new();
    for name in ["mneme-recall", "mneme-remember", "mneme-gateway"] {
        let log = dir.0.join(format!("{name}.log"));
        if name == "mneme-gateway" {
            gateway_log.clone_from(&log);
        }
        let child = Command::new(service_binary(name))
            .env_clear()
            .envs(common.iter().map(|(k, v)| (*k, v.as_str())))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        children.push(child);
    }
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(response) = client.get(format!("{http}/ready")).send().await
            && response.status().is_success()
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the gateway never became ready; its log:\n{}",
            std::fs::read_to_string(&gateway_log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Services {
        children,
        http,
        gateway_log,
        _dir: dir,
    }
}

/// A minimal MCP client over raw HTTP, so each request can carry its own
/// `traceparent`.
struct RawMcp {
    client: reqwest::Client,
    url: String,
    api_key: String,
    session: String,
}

impl RawMcp {
    async fn connect(http: &str, api_key: &str) -> Self {
        let mut mcp = Self {
            client: reqwest::Client::new(),
            url: format!("{http}/mcp"),
            api_key: api_key.to_owned(),
            session: String::new(),
        };
        let initialize = json!({
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "tracing-test", "version": "1"}
            }
        });
        let response = mcp.post(&initialize, None).await;
        mcp.session = response
            .headers()
            .get("mcp-session-id")
            .expect("a session id")
            .to_str()
            .unwrap()
            .to_owned();
        let _ = response.text().await;
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let _ = mcp.post(&initialized, None).await.text().await;
        mcp
    }

    async fn post(&self, body: &Value, traceparent: Option<&str>) -> reqwest::Response {
        let mut request = self
            .client
            .post(&self.url)
            .bearer_auth(&self.api_key)
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-06-18")
            .json(body);
        if !self.session.is_empty() {
            request = request.header("mcp-session-id", &self.session);
        }
        if let Some(traceparent) = traceparent {
            request = request.header("traceparent", traceparent);
        }
        request.send().await.unwrap()
    }

    /// Calls a tool and returns the JSON-RPC answer.
    async fn call(&self, tool: &str, arguments: Value, traceparent: &str) -> Value {
        let body = json!({
            "jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments}
        });
        let text = self
            .post(&body, Some(traceparent))
            .await
            .text()
            .await
            .unwrap();
        // JSON, or one SSE event whose data is the JSON-RPC answer.
        serde_json::from_str(&text).unwrap_or_else(|_| {
            text.lines()
                .filter_map(|line| line.strip_prefix("data:"))
                .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
                .find(|message| message.get("id").is_some())
                .unwrap_or_else(|| panic!("no JSON-RPC answer in {text:?}"))
        })
    }
}

/// The lines of `log` that contain `needle`, shortened, for a failure
/// message.
fn lines_with(log: &str, needle: &str) -> String {
    log.lines()
        .filter(|line| line.contains(needle))
        .map(|line| line.chars().take(400).collect::<String>())
        .collect::<Vec<_>>()
        .join("\n")
}

fn new_trace() -> (String, String) {
    let trace_id = uuid::Uuid::new_v4().simple().to_string();
    let parent = &uuid::Uuid::new_v4().simple().to_string()[..16];
    (trace_id.clone(), format!("00-{trace_id}-{parent}-01"))
}

#[tokio::test(flavor = "multi_thread")]
async fn one_tool_call_is_one_trace_across_gateway_and_backend() {
    let (collector, otlp) = Collector::start().await;
    let db = TestDatabase::create().await;
    let redis = TestRedis::new();
    let tenant = create_tenant(&db.store(), "traced", ALL_PERMISSIONS).await;
    let services = start_services(&db, &redis, otlp).await;
    let mcp = RawMcp::connect(&services.http, &tenant.api_key).await;

    // A recall: gateway → recall over gRPC → PostgreSQL.
    let (trace_id, traceparent) = new_trace();
    let answer = mcp
        .call("recall", json!({"text": "deploy schedule"}), &traceparent)
        .await;
    assert!(answer.get("result").is_some(), "{answer}");
    let spans = collector
        .wait_for(&trace_id, |spans| {
            // Each process exports its spans in its own batches: wait for
            // every span asserted on below.
            let has = |service: &str, name: &str| {
                spans.iter().any(|s| s.service == service && s.name == name)
            };
            has("mneme-gateway", "request")
                && has("mneme-gateway", "tool_call")
                && has("mneme-recall", "grpc")
                && has("mneme-recall", "db.query")
        })
        .await;
    let names = |service: &str| -> Vec<&str> {
        spans
            .iter()
            .filter(|s| s.service == service)
            .map(|s| s.name.as_str())
            .collect()
    };
    for expected in ["request", "tool_call"] {
        assert!(names("mneme-gateway").contains(&expected), "{spans:#?}");
    }
    for expected in ["grpc", "db.query"] {
        assert!(names("mneme-recall").contains(&expected), "{spans:#?}");
    }

    // A remember that fails validation: its error names the trace.
    let (failed_trace, traceparent) = new_trace();
    let answer = mcp
        .call("remember", json!({"content": ""}), &traceparent)
        .await;
    let quoted = answer["result"]["content"][0]["text"]
        .as_str()
        .and_then(|text| serde_json::from_str::<Value>(text).ok())
        .map(|error| error["error"]["trace_id"].clone())
        .or_else(|| answer["error"]["data"]["error"].get("trace_id").cloned());
    assert_eq!(quoted, Some(json!(failed_trace)), "{answer}");

    // A remember that succeeds, with a sentence that must not reach the logs.
    let secret_sentence = format!("the vault code is {}", uuid::Uuid::new_v4().simple());
    let (remembered_trace, traceparent) = new_trace();
    let answer = mcp
        .call(
            "remember",
            json!({"content": secret_sentence, "topic": "vault", "type": "fact"}),
            &traceparent,
        )
        .await;
    assert_eq!(answer["result"]["isError"], json!(false), "{answer}");
    collector
        .wait_for(&remembered_trace, |spans| {
            spans.iter().any(|s| s.service == "mneme-remember")
        })
        .await;

    drop(mcp);
    let log = std::fs::read_to_string(&services.gateway_log).unwrap();
    let secret = tenant.api_key.rsplit('_').next().unwrap();
    assert!(!log.contains(secret), "the API key reached the gateway log");
    assert!(
        !log.contains(&secret_sentence),
        "memory content reached the gateway log:\n{}",
        lines_with(&log, &secret_sentence)
    );
    let lines: Vec<Value> = log
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect();
    assert!(!lines.is_empty(), "the gateway logs JSON lines: {log}");
    assert!(
        log.contains(&format!("\"trace_id\":\"{remembered_trace}\"")),
        "the remember's log lines carry its trace id; the log:\n{}",
        log.lines()
            .rev()
            .take(10)
            .map(|line| line.chars().take(300).collect::<String>())
            .collect::<Vec<_>>()
            .join("\n")
    );
    for service in ["mneme-recall.log", "mneme-remember.log"] {
        let log = std::fs::read_to_string(services.gateway_log.with_file_name(service)).unwrap();
        assert!(!log.contains(secret), "the API key reached {service}");
        assert!(
            !log.contains(&secret_sentence),
            "memory content reached {service}:\n{}",
            lines_with(&log, &secret_sentence)
        );
    }
}
