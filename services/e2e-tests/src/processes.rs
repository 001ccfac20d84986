//! mneme as separate processes (the workspace's own binaries), and the
//! faults a test injects into them: SIGKILL and restart of any service
//! process, and private PostgreSQL and Redis servers that a test crashes and
//! starts again without disturbing the tests running beside it on the
//! shared ones.
//!
//! Layout: [`service_binary`] and [`free_port`] find what to run where;
//! [`PrivatePostgres`] and [`PrivateRedis`] are servers of one test;
//! [`ServiceProcess`] is one mneme process; [`HttpMcp`] is a minimal MCP
//! client over raw HTTP that reports every failure instead of hiding it
//! behind reconnects.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::process::{Child, Command};

/// A binary of the workspace, built next to the running test's executable
/// (`cargo nextest run --workspace` and `cargo test --workspace` build
/// every service binary).
pub fn service_binary(name: &str) -> PathBuf {
    let test = std::env::current_exe().expect("the test's own path");
    let dir = test
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps");
    let path = dir.join(name);
    assert!(
        path.is_file(),
        "{} is missing: build the workspace's binaries first (cargo build --workspace)",
        path.display()
    );
    path
}

/// A loopback port free now, for a child process to bind a moment later.
///
/// Chosen at random below the kernel's ephemeral range: a port the kernel
/// handed out (`bind(…:0)`, or any outgoing connection of the tests running
/// beside this one) could be taken again before the child binds it, which
/// made a service exit with "Address already in use" in CI.
pub fn free_port() -> u16 {
    let ephemeral_start = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let low = 10_000.min(ephemeral_start / 2);
    for _ in 0..1000 {
        let port = low + (rand::random::<u16>() % (ephemeral_start - low));
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port below {ephemeral_start}");
}

/// A directory of one test, removed on drop.
#[derive(Debug)]
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(what: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("mneme-{what}-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).expect("create a temporary directory");
        Self(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Waits until `ready` holds, polling every 50 ms; panics with `what`
/// after `within`.
pub async fn wait_until<F, Fut>(what: &str, within: Duration, mut ready: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    while !ready().await {
        assert!(Instant::now() < deadline, "{what} within {within:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Runs a command to completion, panicking with its output on failure.
fn run(command: &mut std::process::Command) {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("cannot run {command:?}: {e}"));
    assert!(
        output.status.success(),
        "{command:?} failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The directory of PostgreSQL's server programs (`initdb`, `pg_ctl`).
fn postgres_bindir() -> PathBuf {
    if let Ok(dir) = std::env::var("MNEME_TEST_PG_BINDIR") {
        return dir.into();
    }
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("PostgreSQL's server programs under /usr/lib/postgresql (or MNEME_TEST_PG_BINDIR)")
        .filter_map(|entry| Some(entry.ok()?.path().join("bin")))
        .filter(|bin| bin.join("initdb").is_file())
        .collect();
    versions.sort();
    versions.pop().expect("an initdb under /usr/lib/postgresql")
}

/// PostgreSQL refuses to run as root: as root, its programs run as the
/// `postgres` user.
fn as_server_user(program: PathBuf) -> std::process::Command {
    let is_root = std::process::Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| out.stdout.trim_ascii() == b"0");
    if is_root {
        let mut command = std::process::Command::new("runuser");
        command.args(["-u", "postgres", "--"]).arg(program);
        command
    } else {
        std::process::Command::new(program)
    }
}

/// A PostgreSQL server of one test (its own data directory and port), with
/// mneme's roles and a migrated database: a test may crash and restart it.
#[derive(Debug)]
pub struct PrivatePostgres {
    pub port: u16,
    /// Connection string for the services' role (row-level security applies).
    pub app_url: String,
    /// Connection string for the owner role (inspection).
    pub owner_url: String,
    bindir: PathBuf,
    data: PathBuf,
    _dir: TempDir,
}

impl PrivatePostgres {
    pub async fn start() -> Self {
        let dir = TempDir::new("postgres");
        let data = dir.0.join("data");
        std::fs::create_dir_all(&data).unwrap();
        // The server user must own the directory it writes (and its socket).
        run(std::process::Command::new("chown")
            .arg("-R")
            .arg("postgres")
            .arg(&dir.0));
        let bindir = postgres_bindir();
        run(as_server_user(bindir.join("initdb"))
            .args(["--auth=trust", "--username=postgres", "--encoding=UTF8"])
            .args(["--locale=C.UTF-8", "--no-sync", "-D"])
            .arg(&data));
        let port = free_port();
        let server = Self {
            port,
            app_url: format!(
                "host=127.0.0.1 port={port} user=mneme_app password=mneme_app dbname=mneme"
            ),
            owner_url: format!(
                "host=127.0.0.1 port={port} user=mneme_owner password=mneme_owner dbname=mneme"
            ),
            bindir,
            data,
            _dir: dir,
        };
        server.start_server();
        server.create_database().await;
        server
    }

    fn start_server(&self) {
        let options = format!(
            "-p {} -c listen_addresses=127.0.0.1 -c unix_socket_directories='' \
             -c fsync=off -c max_connections=200 -c shared_buffers=32MB",
            self.port
        );
        run(as_server_user(self.bindir.join("pg_ctl"))
            .args(["start", "-w", "-t", "30", "-D"])
            .arg(&self.data)
            .arg("-l")
            .arg(self.data.join("server.log"))
            .args(["-o", &options])
            .stdout(Stdio::null()));
    }

    /// Roles as `deploy/local/setup.sh` makes them, a database, pgvector and
    /// mneme's migrations.
    async fn create_database(&self) {
        let admin = self.connect("user=postgres dbname=postgres").await;
        // One statement each: CREATE DATABASE may not share a transaction.
        for statement in [
            "CREATE ROLE mneme_service NOLOGIN",
            "CREATE ROLE mneme_owner LOGIN CREATEDB PASSWORD 'mneme_owner'",
            "CREATE ROLE mneme_app LOGIN PASSWORD 'mneme_app' IN ROLE mneme_service",
            "CREATE DATABASE mneme OWNER mneme_owner",
        ] {
            admin
                .batch_execute(statement)
                .await
                .unwrap_or_else(|e| panic!("{statement}: {e}"));
        }
        self.connect("user=postgres dbname=mneme")
            .await
            .batch_execute("CREATE EXTENSION vector")
            .await
            .expect("create pgvector in the private server");
        mneme_store::migrate::run(&self.owner_url)
            .await
            .unwrap_or_else(|e| panic!("migrating the private server failed: {e}"));
    }

    /// [`Self::app_url`] through a proxy on loopback `port` (see
    /// [`crate::fault_proxy`]).
    pub fn app_url_via(&self, port: u16) -> String {
        self.app_url
            .replace(&format!("port={}", self.port), &format!("port={port}"))
    }

    /// A client of this server with extra connection parameters.
    pub async fn connect(&self, params: &str) -> tokio_postgres::Client {
        let conninfo = format!("host=127.0.0.1 port={} {params}", self.port);
        let (client, _driver) = mneme_store::tls::connect(&conninfo, None)
            .await
            .unwrap_or_else(|e| panic!("cannot connect to the private server: {e}"));
        client
    }

    /// A crash: the server stops at once, without a checkpoint, and every
    /// connection breaks. Recovery replays the WAL at the next start.
    pub fn crash(&self) {
        run(as_server_user(self.bindir.join("pg_ctl"))
            .args(["stop", "-m", "immediate", "-D"])
            .arg(&self.data)
            .stdout(Stdio::null()));
    }

    /// Starts the server again (after [`Self::crash`]) and waits until it
    /// accepts connections.
    pub fn restart(&self) {
        self.start_server();
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        let _ = as_server_user(self.bindir.join("pg_ctl"))
            .args(["stop", "-m", "immediate", "-D"])
            .arg(&self.data)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

const STOP: &str = "-STOP";
const CONTINUE: &str = "-CONT";

/// Sends `signal` (an argument of kill(1)) to a running child process.
fn send_signal(child: Option<&Child>, name: &str, signal: &str) {
    let pid = child
        .and_then(Child::id)
        .unwrap_or_else(|| panic!("{name} is not running"));
    let status = std::process::Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill {signal} {name} failed");
}

/// A Redis server of one test, keeping nothing on disk (as the shared one).
#[derive(Debug)]
pub struct PrivateRedis {
    pub port: u16,
    child: Option<Child>,
}

impl PrivateRedis {
    pub async fn start() -> Self {
        let mut redis = Self {
            port: free_port(),
            child: None,
        };
        redis.restart().await;
        redis
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Kills the server with SIGKILL: every connection breaks, every key is
    /// gone.
    pub async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill().await;
        }
    }

    /// SIGSTOP: connections stay open and nothing answers (a hung server,
    /// worse than a dead one) until [`Self::resume`].
    pub fn pause(&self) {
        send_signal(self.child.as_ref(), "redis-server", STOP);
    }

    /// SIGCONT after [`Self::pause`].
    pub fn resume(&self) {
        send_signal(self.child.as_ref(), "redis-server", CONTINUE);
    }

    /// Starts the server (again) on its port and waits until it answers.
    pub async fn restart(&mut self) {
        self.kill().await;
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("start redis-server");
        self.child = Some(child);
        let port = self.port;
        wait_until(
            "the private Redis answers",
            Duration::from_secs(10),
            || async move {
                tokio::net::TcpStream::connect(("127.0.0.1", port))
                    .await
                    .is_ok()
            },
        )
        .await;
    }
}

/// One mneme process (gateway, recall, remember or consolidator).
#[derive(Debug)]
pub struct ServiceProcess {
    pub name: String,
    binary: PathBuf,
    env: Vec<(String, String)>,
    log: PathBuf,
    child: Option<Child>,
    /// Starts so far (1 + restarts).
    pub starts: u32,
}

impl ServiceProcess {
    /// Starts `binary` with exactly `env` (nothing inherited), its stderr
    /// appended to `log_dir/<name>.log`.
    pub fn start(name: &str, binary: &str, env: Vec<(String, String)>, log_dir: &Path) -> Self {
        let mut process = Self {
            name: name.to_owned(),
            binary: service_binary(binary),
            env,
            log: log_dir.join(format!("{name}.log")),
            child: None,
            starts: 0,
        };
        process.spawn();
        process
    }

    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("open the service's log");
        let child = Command::new(&self.binary)
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", self.name));
        self.child = Some(child);
        self.starts += 1;
    }

    /// SIGKILL: no graceful shutdown, in-flight calls break.
    pub async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill().await;
        }
    }

    /// SIGSTOP: the process stays, its sockets stay open, and it answers
    /// nothing (a frozen or partitioned pod) until [`Self::resume`].
    pub fn pause(&self) {
        self.signal(STOP);
    }

    /// SIGCONT after [`Self::pause`].
    pub fn resume(&self) {
        self.signal(CONTINUE);
    }

    fn signal(&self, signal: &str) {
        send_signal(self.child.as_ref(), &self.name, signal);
    }

    /// Starts the process again with the same settings.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "{} is still running", self.name);
        self.spawn();
    }

    /// `Some(status)` when the process ended by itself (a crash); `None`
    /// while it runs or after [`Self::kill`].
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.as_mut()?.try_wait().ok().flatten()
    }

    /// The process's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// What one MCP request came to.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// A JSON-RPC result (for tools: `isError` false).
    Ok(Value),
    /// A tool error (`isError` true): its structured error, or its text.
    ToolError(Value),
    /// A JSON-RPC error.
    RpcError(Value),
    /// An HTTP status other than 200/202, with the body.
    Http(u16, String),
    /// No answer: the connection failed or broke.
    Transport(String),
}

impl Outcome {
    pub fn is_ok(&self) -> bool {
        matches!(self, Self::Ok(_))
    }

    /// The error code of a tool error (`unavailable`, `not_found`, …).
    pub fn error_code(&self) -> Option<String> {
        match self {
            Self::ToolError(error) => error
                .pointer("/error/code")
                .or_else(|| error.get("code"))
                .and_then(Value::as_str)
                .map(str::to_owned),
            _ => None,
        }
    }

    /// A short label for tallies: `ok`, `tool:<code>`, `rpc:<code>`,
    /// `http:<status>` or `transport`.
    pub fn kind(&self) -> String {
        match self {
            Self::Ok(_) => "ok".into(),
            Self::ToolError(_) => format!(
                "tool:{}",
                self.error_code().unwrap_or_else(|| "unknown".into())
            ),
            Self::RpcError(error) => format!("rpc:{}", error["code"]),
            Self::Http(status, _) => format!("http:{status}"),
            Self::Transport(_) => "transport".into(),
        }
    }
}

/// A minimal MCP client over raw HTTP (Streamable HTTP, JSON or one SSE
/// event per answer) that reports failures as they are, so a test can
/// count them.
#[derive(Debug, Clone)]
pub struct HttpMcp {
    client: reqwest::Client,
    url: String,
    api_key: String,
    pub session: Option<String>,
}

impl HttpMcp {
    /// A client of the gateway at `http` (no session yet).
    pub fn new(http: &str, api_key: &str) -> Self {
        Self {
            client: reqwest::Client::builder()
                .timeout(Duration::from_secs(60))
                .build()
                .expect("an HTTP client"),
            url: format!("{http}/mcp"),
            api_key: api_key.to_owned(),
            session: None,
        }
    }

    /// Another gateway, same session.
    pub fn via(&self, http: &str) -> Self {
        Self {
            url: format!("{http}/mcp"),
            ..self.clone()
        }
    }

    /// `initialize` + `notifications/initialized`; keeps the session id.
    pub async fn initialize(&mut self) -> Outcome {
        self.session = None;
        let (outcome, session) = self
            .send(&json!({
                "jsonrpc": "2.0", "id": 0, "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "mneme-fault-test", "version": "1"}
                }
            }))
            .await;
        if outcome.is_ok() {
            self.session = session;
            let _ = self
                .send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
                .await;
        }
        outcome
    }

    /// Calls a tool.
    pub async fn call(&self, tool: &str, arguments: Value) -> Outcome {
        let (outcome, _) = self
            .send(&json!({
                "jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": tool, "arguments": arguments}
            }))
            .await;
        match outcome {
            Outcome::Ok(result) if result["isError"] == json!(true) => {
                let error = result
                    .get("structuredContent")
                    .cloned()
                    .or_else(|| {
                        let text = result.pointer("/content/0/text")?.as_str()?;
                        serde_json::from_str(text).ok()
                    })
                    .unwrap_or(result);
                Outcome::ToolError(error)
            }
            other => other,
        }
    }

    async fn send(&self, message: &Value) -> (Outcome, Option<String>) {
        let mut request = self
            .client
            .post(&self.url)
            .bearer_auth(&self.api_key)
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-06-18")
            .json(message);
        if let Some(session) = &self.session {
            request = request.header("mcp-session-id", session);
        }
        let response = match request.send().await {
            Ok(response) => response,
            Err(error) => return (Outcome::Transport(error.to_string()), None),
        };
        let status = response.status().as_u16();
        let session = response
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let text = match response.text().await {
            Ok(text) => text,
            Err(error) => return (Outcome::Transport(error.to_string()), session),
        };
        if status == 202 {
            return (Outcome::Ok(Value::Null), session);
        }
        if status != 200 {
            return (Outcome::Http(status, text), session);
        }
        // JSON, or SSE events of which one is the JSON-RPC answer.
        let answer = serde_json::from_str::<Value>(&text).ok().or_else(|| {
            text.lines()
                .filter_map(|line| line.strip_prefix("data:"))
                .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
                .find(|message| message.get("id").is_some())
        });
        let outcome = match answer {
            Some(answer) if answer.get("error").is_some() => {
                Outcome::RpcError(answer["error"].clone())
            }
            Some(answer) => Outcome::Ok(answer["result"].clone()),
            None => Outcome::Transport(format!("no JSON-RPC answer in {text:?}")),
        };
        (outcome, session)
    }
}
