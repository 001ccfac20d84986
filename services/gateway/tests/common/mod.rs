//! A small fleet on loopback: the recall and remember services in this
//! process, gateway pods as real `mneme-gateway` processes sharing them,
//! PostgreSQL and Redis, and a TCP proxy that can cut a pod off Redis.

#![allow(dead_code)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use mneme_config::Config;
use mneme_test_support::{TestDatabase, TestRedis};
use reqwest::header::HeaderMap;
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};
use tokio::process::{Child, Command};
use tokio_util::sync::CancellationToken;

pub(crate) const INTERNAL_TOKEN: &str = "fleet-test-internal-token-0123456789abcdef";

/// PostgreSQL, Redis and the two backend services; gateway pods join with
/// [`Fleet::pod`].
pub(crate) struct Fleet {
    pub(crate) db: TestDatabase,
    pub(crate) redis: TestRedis,
    recall_url: String,
    remember_url: String,
    stop: CancellationToken,
}

fn base_env(db: &TestDatabase, redis_url: &str, redis: &TestRedis) -> HashMap<String, String> {
    HashMap::from([
        ("MNEME_DATABASE_URL".into(), db.app_url.clone()),
        ("MNEME_REDIS_URL".into(), redis_url.to_owned()),
        ("MNEME_REDIS_PREFIX".into(), redis.prefix.clone()),
        ("MNEME_EMBEDDER".into(), "hash".into()),
        ("MNEME_INTERNAL_TOKEN".into(), INTERNAL_TOKEN.into()),
        ("MNEME_LOG".into(), "warn".into()),
    ])
}

impl Fleet {
    pub(crate) async fn start() -> Self {
        let db = TestDatabase::create().await;
        let redis = TestRedis::new();
        let config = Config::from_env(&base_env(&db, &redis.url, &redis)).expect("valid config");
        let stop = CancellationToken::new();
        let bind = || TcpListener::bind("127.0.0.1:0");
        let (recall, remember) = (bind().await.unwrap(), bind().await.unwrap());
        let recall_url = format!("http://{}", recall.local_addr().unwrap());
        let remember_url = format!("http://{}", remember.local_addr().unwrap());
        tokio::spawn(mneme_recall::run(
            config.clone(),
            recall,
            stop.clone().cancelled_owned(),
        ));
        tokio::spawn(mneme_remember::run(
            config,
            remember,
            stop.clone().cancelled_owned(),
        ));
        Self {
            db,
            redis,
            recall_url,
            remember_url,
            stop,
        }
    }

    /// Starts a gateway process with `settings` on top of the fleet's, and
    /// waits until it answers.
    pub(crate) async fn pod(&self, settings: &[(&str, &str)]) -> Pod {
        self.pod_via_redis(&self.redis.url.clone(), settings).await
    }

    /// Like [`Fleet::pod`], reaching Redis at `redis_url` (a [`TcpProxy`]).
    pub(crate) async fn pod_via_redis(&self, redis_url: &str, settings: &[(&str, &str)]) -> Pod {
        let port = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let mut env = base_env(&self.db, redis_url, &self.redis);
        env.insert("MNEME_HTTP_ADDR".into(), addr.to_string());
        env.insert("MNEME_RECALL_URL".into(), self.recall_url.clone());
        env.insert("MNEME_REMEMBER_URL".into(), self.remember_url.clone());
        for (name, value) in settings {
            env.insert((*name).into(), (*value).into());
        }
        let child = Command::new(env!("CARGO_BIN_EXE_mneme-gateway"))
            .env_clear()
            .envs(env)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("start mneme-gateway");
        let pod = Pod { addr, child };
        let deadline = Instant::now() + Duration::from_secs(30);
        while reqwest::get(format!("http://{addr}/health")).await.is_err() {
            assert!(Instant::now() < deadline, "gateway pod did not start");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        pod
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// One gateway process.
pub(crate) struct Pod {
    pub(crate) addr: SocketAddr,
    child: Child,
}

/// An answer from `/mcp`.
#[derive(Debug)]
pub(crate) struct Reply {
    pub(crate) status: u16,
    pub(crate) headers: HeaderMap,
    /// The JSON-RPC message, from a JSON body or the SSE event carrying it.
    pub(crate) message: Option<Value>,
}

impl Reply {
    pub(crate) fn session_id(&self) -> Option<String> {
        self.headers
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    }

    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    pub(crate) fn error_code(&self) -> Option<i64> {
        self.message.as_ref()?.pointer("/error/code")?.as_i64()
    }
}

impl Pod {
    pub(crate) fn mcp_url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    /// POSTs one JSON-RPC message with `api_key`, `session` and extra
    /// headers.
    pub(crate) async fn post(
        &self,
        api_key: &str,
        session: Option<&str>,
        headers: &[(&str, &str)],
        message: &Value,
    ) -> Reply {
        let mut request = reqwest::Client::new()
            .post(self.mcp_url())
            .header("accept", "application/json, text/event-stream")
            .bearer_auth(api_key)
            .json(message);
        if let Some(session) = session {
            request = request.header("mcp-session-id", session);
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        read(request.send().await.expect("the pod answers")).await
    }

    pub(crate) async fn delete(&self, api_key: &str, session: &str) -> u16 {
        reqwest::Client::new()
            .delete(self.mcp_url())
            .bearer_auth(api_key)
            .header("mcp-session-id", session)
            .send()
            .await
            .expect("the pod answers")
            .status()
            .as_u16()
    }

    /// `initialize` + `notifications/initialized`; the session id.
    pub(crate) async fn initialize(&self, api_key: &str) -> String {
        let reply = self
            .post(api_key, None, &[], &initialize("2025-06-18"))
            .await;
        assert_eq!(reply.status, 200, "{reply:?}");
        let session = reply.session_id().expect("a session id");
        let ack = self
            .post(api_key, Some(&session), &[], &initialized())
            .await;
        assert_eq!(ack.status, 202, "{ack:?}");
        session
    }

    /// SIGKILL: no graceful shutdown.
    pub(crate) async fn kill(mut self) {
        self.child.kill().await.expect("kill the pod");
    }
}

pub(crate) async fn read(response: reqwest::Response) -> Reply {
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let text = response.text().await.unwrap_or_default();
    let message = serde_json::from_str::<Value>(&text).ok().or_else(|| {
        text.lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
            .find(|m| m.get("result").is_some() || m.get("error").is_some())
    });
    Reply {
        status,
        headers,
        message,
    }
}

pub(crate) fn initialize(version: &str) -> Value {
    json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {
            "protocolVersion": version,
            "capabilities": {},
            "clientInfo": {"name": "fleet-test", "version": "0"}
        }
    })
}

pub(crate) fn initialized() -> Value {
    json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
}

pub(crate) fn request(id: u64, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

/// A TCP proxy to a fixed upstream that can be cut: existing connections
/// are dropped and new ones refused until it is restored.
pub(crate) struct TcpProxy {
    pub(crate) addr: SocketAddr,
    up: Arc<AtomicBool>,
    cut: Arc<tokio::sync::Notify>,
}

impl TcpProxy {
    pub(crate) async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let up = Arc::new(AtomicBool::new(true));
        let cut = Arc::new(tokio::sync::Notify::new());
        let (accept_up, accept_cut) = (up.clone(), cut.clone());
        tokio::spawn(async move {
            loop {
                let Ok((mut client, _)) = listener.accept().await else {
                    return;
                };
                if !accept_up.load(Ordering::SeqCst) {
                    continue; // dropped: the connection is refused
                }
                let cut = accept_cut.clone();
                tokio::spawn(async move {
                    let Ok(mut server) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        () = cut.notified() => {}
                    }
                });
            }
        });
        Self { addr, up, cut }
    }

    pub(crate) fn cut(&self) {
        self.up.store(false, Ordering::SeqCst);
        self.cut.notify_waiters();
    }

    pub(crate) fn restore(&self) {
        self.up.store(true, Ordering::SeqCst);
    }
}

/// The `host:port` of a `redis://host:port[/db]` URL.
pub(crate) fn redis_addr(url: &str) -> SocketAddr {
    let rest = url.trim_start_matches("redis://");
    let authority = rest.split('/').next().unwrap();
    let authority = authority.rsplit('@').next().unwrap();
    authority
        .replace("localhost", "127.0.0.1")
        .parse()
        .expect("a host:port Redis address")
}

/// A client of the legacy HTTP+SSE transport: the open `GET /sse` stream.
pub(crate) struct SseClient {
    response: reqwest::Response,
    buffer: String,
    /// The `/message?sessionId=…` path from the `endpoint` event.
    pub(crate) endpoint: String,
}

impl SseClient {
    pub(crate) async fn open(pod: &Pod, api_key: &str) -> Self {
        let response = reqwest::Client::new()
            .get(format!("http://{}/sse", pod.addr))
            .bearer_auth(api_key)
            .header("accept", "text/event-stream")
            .send()
            .await
            .expect("the pod answers");
        assert_eq!(response.status(), 200);
        let mut client = Self {
            response,
            buffer: String::new(),
            endpoint: String::new(),
        };
        let (event, data) = client.next_event().await;
        assert_eq!(event, "endpoint");
        client.endpoint = data;
        client
    }

    pub(crate) fn session_id(&self) -> &str {
        self.endpoint.split("sessionId=").nth(1).unwrap_or_default()
    }

    /// The next event's name and data (heartbeat comments are skipped).
    pub(crate) async fn next_event(&mut self) -> (String, String) {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let (mut event, mut data) = (String::from("message"), String::new());
                for line in block.lines() {
                    if let Some(value) = line.strip_prefix("event:") {
                        event = value.trim().to_owned();
                    } else if let Some(value) = line.strip_prefix("data:") {
                        data.push_str(value.trim_start());
                    }
                }
                if !data.is_empty() {
                    return (event, data);
                }
                continue;
            }
            let chunk = tokio::time::timeout(Duration::from_secs(10), self.response.chunk())
                .await
                .expect("an SSE event within 10 s")
                .expect("the stream stays open")
                .expect("the stream does not end");
            self.buffer.push_str(&String::from_utf8_lossy(&chunk));
        }
    }

    /// The next JSON-RPC message on the stream.
    pub(crate) async fn next_message(&mut self) -> Value {
        let (event, data) = self.next_event().await;
        assert_eq!(event, "message");
        serde_json::from_str(&data).expect("a JSON-RPC message")
    }
}

impl Pod {
    /// POSTs a message to an SSE session's endpoint on this pod.
    pub(crate) async fn post_message(
        &self,
        api_key: &str,
        endpoint: &str,
        message: &Value,
    ) -> Reply {
        let response = reqwest::Client::new()
            .post(format!("http://{}{endpoint}", self.addr))
            .bearer_auth(api_key)
            .json(message)
            .send()
            .await
            .expect("the pod answers");
        read(response).await
    }
}
