//! `mneme proxy` as a desktop client runs it: a child process speaking MCP
//! on stdio, in front of a real mneme stack (the LTM, over Streamable HTTP
//! with an API key) and the reference filesystem server
//! (`@modelcontextprotocol/server-filesystem`, a stdio child of the proxy).
//! This test lives with the CLI because only here does Cargo build the
//! `mneme` binary for a test.
//!
//! Needs `MNEME_TEST_MCP_SERVERS` (the node_modules that
//! deploy/local/setup.sh installs) and Node.js on PATH, plus the PostgreSQL
//! and Redis of mneme-test-support.

mod common;

use common::LocalStack;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use mneme_mcp_upstream::shape::FOOTER_TOKEN;
use mneme_test_support::{ALL_PERMISSIONS, create_tenant};
use rmcp::model::{CallToolRequestParams, CallToolResult, Tool};
use rmcp::service::RunningService;
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};

const JWT_MEMORY: &str = "The JWT handler in src/auth/jwt_handler.rs validates access tokens \
                          with RS256 and allows 30 seconds of clock leeway.";
const JWT_SOURCE: &str = "//! Access-token validation.\n\
                          pub fn validate(token: &str) -> Result<Claims, Error> {\n    \
                          decode_rs256(token, LEEWAY_SECS)\n}\n";

/// A directory removed when the test ends.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Self {
        let path = std::env::temp_dir().join(format!("mneme-local-proxy-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&path).unwrap();
        // The filesystem server resolves symlinks (/tmp may be one).
        Self(path.canonicalize().unwrap())
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn filesystem_server() -> String {
    let modules = std::env::var("MNEME_TEST_MCP_SERVERS").unwrap_or_else(|_| {
        panic!(
            "MNEME_TEST_MCP_SERVERS must point at the node_modules holding \
             @modelcontextprotocol/server-filesystem (deploy/local/setup.sh installs it; \
             `source ~/.local/share/mneme/env`)"
        )
    });
    // The package's `bin` (mcp-server-filesystem) is dist/index.js.
    let script = format!("{modules}/@modelcontextprotocol/server-filesystem/dist/index.js");
    assert!(
        Path::new(&script).is_file(),
        "{script} is missing: reinstall the test MCP servers"
    );
    script
}

fn write_config(path: &Path, config: &Value) {
    std::fs::write(path, serde_json::to_vec_pretty(config).unwrap()).unwrap();
}

/// The proxy's file: the stack as LTM, the project directory twice (`fs`
/// as configured by most users, `big` chunking everything longer than 100
/// characters).
fn config(ltm_url: &str, api_key: &str, script: &str, project: &Path, fs_prefix: &str) -> Value {
    let project = project.to_str().unwrap();
    json!({
        "ltm": {"transport": "streamable_http", "url": ltm_url, "apiKey": api_key},
        "upstreamServers": {
            "fs": {"transport": "stdio", "command": "node", "args": [script, project],
                   "env": {"LD_PRELOAD": "/nonexistent/evil.so"}, "prefix": fs_prefix,
                   "compression": "truncate", "maxResultChars": 16000},
            "big": {"transport": "stdio", "command": "node", "args": [script, project],
                    "compression": "progressive", "maxResultChars": 100,
                    "surfacingEnabled": false}
        },
        "chunkChars": 400,
        "advertiseContextQuery": true,
        "injectionMode": null
    })
}

type Client = RunningService<RoleClient, ()>;

async fn start_proxy(config: &Path, home: &Path) -> Client {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_mneme"));
    command
        .arg("proxy")
        .arg("--config")
        .arg(config)
        // No stored sign-in, no configuration of the developer's.
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home)
        .env_remove("MNEME_PROXY_CONFIG")
        .env("MNEME_LOG", "warn,mneme=info");
    let transport = TokioChildProcess::builder(command)
        .stderr(Stdio::inherit())
        .spawn()
        .expect("mneme proxy starts")
        .0;
    tokio::time::timeout(Duration::from_secs(20), ().serve(transport))
        .await
        .expect("the proxy initializes in time")
        .expect("the proxy speaks MCP on stdout")
}

async fn call(client: &Client, name: &str, arguments: Value) -> CallToolResult {
    let mut params = CallToolRequestParams::new(name.to_owned());
    params.arguments = arguments.as_object().cloned();
    tokio::time::timeout(Duration::from_secs(20), client.call_tool(params))
        .await
        .unwrap_or_else(|_| panic!("{name} answers in time"))
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn texts(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

async fn tools(client: &Client) -> Vec<Tool> {
    tokio::time::timeout(Duration::from_secs(30), client.list_all_tools())
        .await
        .expect("tools/list answers in time")
        .expect("tools/list")
}

fn names(tools: &[Tool]) -> Vec<String> {
    tools.iter().map(|t| t.name.to_string()).collect()
}

fn validate(config: &Path) -> (bool, String) {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_mneme"))
        .args(["proxy", "validate", "--config"])
        .arg(config)
        .output()
        .expect("mneme proxy validate runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success() || output.status.code() == Some(1),
        "{text}"
    );
    (output.status.success(), text)
}

#[tokio::test]
async fn the_local_proxy_serves_ltm_and_stdio_tools_with_surfaced_memories() {
    let script = filesystem_server();
    let started = Instant::now();

    // The LTM: a whole mneme in this process.
    let local = LocalStack::start().await;
    let http_addr = local.http_addr;
    let tenant = create_tenant(&local.db.store(), "acme", ALL_PERMISSIONS).await;

    local
        .remember_all(
            tenant.tenant_id,
            &tenant.api_key,
            &[
                (JWT_MEMORY, "auth"),
                (
                    "The office coffee machine on the third floor is descaled every Friday.",
                    "office",
                ),
            ],
        )
        .await;

    // The user's project and the proxy's file.
    let home = TempDir::new();
    let project = TempDir::new();
    std::fs::create_dir_all(project.0.join("src/auth")).unwrap();
    let jwt_file = project.0.join("src/auth/jwt_handler.rs");
    std::fs::write(&jwt_file, JWT_SOURCE).unwrap();
    let long_text: String = (0..40)
        .map(|i| format!("Line {i}: the quick brown fox jumps over the lazy dog.\n"))
        .collect();
    std::fs::write(project.0.join("notes.txt"), &long_text).unwrap();
    let config_path = home.0.join("proxy.json");
    let ltm_url = format!("http://{http_addr}/mcp");
    write_config(
        &config_path,
        &config(&ltm_url, &tenant.api_key, &script, &project.0, "fs"),
    );

    // `validate` accepts it, warns about the dangerous variable, never
    // prints the key.
    let (ok, text) = validate(&config_path);
    assert!(ok, "{text}");
    assert!(text.starts_with("ok: "), "{text}");
    assert!(text.contains("LD_PRELOAD"), "{text}");
    assert!(
        text.contains(&format!("surfacing: via http://{http_addr}/v1/surface")),
        "{text}"
    );
    assert!(!text.contains(&tenant.api_key), "{text}");
    // A file others may read gets a warning; a private one does not.
    {
        use std::os::unix::fs::PermissionsExt as _;
        let set = |mode| {
            std::fs::set_permissions(&config_path, std::fs::Permissions::from_mode(mode)).unwrap()
        };
        set(0o644);
        assert!(validate(&config_path).1.contains("chmod 600"));
        set(0o600);
        assert!(!validate(&config_path).1.contains("chmod 600"));
    }

    let client = start_proxy(&config_path, &home.0).await;

    // tools/list: mneme's own tools unprefixed, the upstream's prefixed.
    let listed = tools(&client).await;
    let listed_names = names(&listed);
    for expected in [
        "recall",
        "remember",
        "fs__read_text_file",
        "fs__write_file",
        "big__read_text_file",
        "stm_proxy_read_more",
    ] {
        assert!(
            listed_names.iter().any(|n| n == expected),
            "{expected} missing from {listed_names:?}"
        );
    }
    assert_eq!(
        listed_names
            .iter()
            .filter(|n| *n == "stm_proxy_read_more")
            .count(),
        1
    );
    let read_tool = listed
        .iter()
        .find(|t| t.name == "fs__read_text_file")
        .unwrap();
    assert!(
        read_tool
            .description
            .as_deref()
            .is_some_and(|d| d.starts_with("[proxied] "))
    );
    assert!(
        read_tool.input_schema["properties"]
            .get("_context_query")
            .is_some(),
        "{:?}",
        read_tool.input_schema
    );

    // A write first (so the memory is not yet seen in this session): no
    // memories, although its `_context_query` names them, and the file is
    // written (`_context_query` was not forwarded).
    let written = project.0.join("src/auth/notes.md");
    let write = call(
        &client,
        "fs__write_file",
        json!({"path": written.to_str().unwrap(), "content": "JWT handler notes: RS256 only.",
               "_context_query": "JWT handler RS256 access token validation"}),
    )
    .await;
    assert_ne!(write.is_error, Some(true), "{write:?}");
    assert!(!texts(&write).contains("<surfaced-memories"), "{write:?}");
    assert_eq!(
        std::fs::read_to_string(&written).unwrap(),
        "JWT handler notes: RS256 only."
    );

    // A read of the JWT handler: the file, then the related memory.
    let read = call(
        &client,
        "fs__read_text_file",
        json!({"path": jwt_file.to_str().unwrap()}),
    )
    .await;
    assert_ne!(read.is_error, Some(true), "{read:?}");
    let text = texts(&read);
    assert!(text.contains("decode_rs256(token, LEEWAY_SECS)"), "{text}");
    let block_at = text
        .find("<surfaced-memories")
        .unwrap_or_else(|| panic!("no surfaced memories in {text}"));
    assert!(
        block_at > text.find("decode_rs256").unwrap(),
        "appended after the file"
    );
    assert!(text[block_at..].contains("RS256"), "{text}");
    assert!(!text.contains("coffee"), "{text}");

    // An upstream error passes through as an error.
    let missing = call(
        &client,
        "fs__read_text_file",
        json!({"path": project.0.join("nope.rs").to_str().unwrap()}),
    )
    .await;
    assert_eq!(missing.is_error, Some(true), "{missing:?}");

    // Progressive delivery: chunks, read on locally, rebuild the file.
    let first = call(
        &client,
        "big__read_text_file",
        json!({"path": project.0.join("notes.txt").to_str().unwrap()}),
    )
    .await;
    let mut response = texts(&first);
    assert!(response.contains(FOOTER_TOKEN), "{response}");
    let mut rebuilt = String::new();
    for _ in 0..100 {
        let (body, footer) = response
            .rsplit_once(FOOTER_TOKEN)
            .expect("every chunk has a footer");
        rebuilt.push_str(body);
        let Some(hint) = footer.split("stm_proxy_read_more(").nth(1) else {
            break;
        };
        let key = hint.split('"').nth(1).expect("a key in the hint");
        let offset: u64 = hint
            .split("offset=")
            .nth(1)
            .and_then(|o| o.trim_end_matches([')', ']']).parse().ok())
            .expect("an offset in the hint");
        let more = call(
            &client,
            "stm_proxy_read_more",
            json!({"key": key, "offset": offset}),
        )
        .await;
        let structured = more.structured_content.clone().expect("structured answer");
        assert_eq!(structured["start"], offset);
        response = structured["text"].as_str().unwrap().to_owned();
    }
    assert_eq!(rebuilt, long_text);
    let expired = call(
        &client,
        "stm_proxy_read_more",
        json!({"key": "00ff", "offset": 0}),
    )
    .await;
    assert_eq!(expired.is_error, Some(true));
    assert!(texts(&expired).contains("not_found"), "{expired:?}");

    // mneme's own tools go to the LTM unchanged.
    let remembered = call(
        &client,
        "remember",
        json!({"content": "The proxy test stores this fact about the deploy window on Tuesdays.",
               "topic": "deploy", "type": "fact"}),
    )
    .await;
    assert_ne!(remembered.is_error, Some(true), "{remembered:?}");
    let recalled = call(&client, "recall", json!({"text": "JWT handler RS256"})).await;
    assert_ne!(recalled.is_error, Some(true), "{recalled:?}");
    assert!(texts(&recalled).contains("RS256"), "{recalled:?}");

    // Hot reload: a new prefix shows at the next request; a broken file
    // keeps the last good configuration.
    write_config(
        &config_path,
        &config(&ltm_url, &tenant.api_key, &script, &project.0, "files"),
    );
    let reloaded = names(&tools(&client).await);
    assert!(
        reloaded.iter().any(|n| n == "files__read_text_file")
            && !reloaded.iter().any(|n| n == "fs__read_text_file"),
        "{reloaded:?}"
    );
    std::fs::write(&config_path, "{\"ltm\": ").unwrap();
    let kept = names(&tools(&client).await);
    assert!(
        kept.iter().any(|n| n == "files__read_text_file"),
        "{kept:?}"
    );
    let still = call(
        &client,
        "files__read_text_file",
        json!({"path": jwt_file.to_str().unwrap()}),
    )
    .await;
    assert!(texts(&still).contains("decode_rs256"), "{still:?}");

    client.cancel().await.unwrap();

    // `validate` names every problem of a broken file, with its path.
    let broken = home.0.join("broken.json");
    write_config(
        &broken,
        &json!({
            "ltm": {"url": ltm_url},
            "upstreamServers": {
                "one": {"command": "node", "prefix": "fs"},
                "two": {"command": "node", "prefix": "fs", "compresion": "none"}
            }
        }),
    );
    let (ok, text) = validate(&broken);
    assert!(!ok, "{text}");
    assert!(
        text.contains("upstreamServers.two.prefix: duplicate prefix \"fs\""),
        "{text}"
    );
    assert!(
        text.contains("upstreamServers.two.compresion: unknown key"),
        "{text}"
    );

    local.shutdown().await;
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "took {:?}",
        started.elapsed()
    );
}
