//! `mneme hook` as Claude Code runs it: a separate process fed a real
//! PostToolUse payload on stdin, printing its hook output on stdout. (This
//! test lives with the CLI because only here does Cargo build the `mneme`
//! binary for a test.)

mod common;

use common::LocalStack;

use std::process::Stdio;
use std::time::{Duration, Instant};

use mneme_test_support::{ALL_PERMISSIONS, create_tenant};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;

/// Claude Code's PostToolUse input after reading a file (as its docs show it).
fn read_event(path: &str) -> Value {
    json!({
        "session_id": "9f6a2b1c-3d4e-4f50-8a7b-1c2d3e4f5a6b",
        "transcript_path": "/home/dev/.claude/projects/project/9f6a2b1c.jsonl",
        "cwd": "/home/dev/project",
        "permission_mode": "default",
        "hook_event_name": "PostToolUse",
        "tool_name": "Read",
        "tool_input": {"file_path": path},
        "tool_use_id": "toolu_01ABCDEF",
        "tool_response": {
            "type": "text",
            "file": {"filePath": path, "content": "pub fn validate(token: &str) {}\n",
                     "numLines": 1, "startLine": 1, "totalLines": 1}
        }
    })
}

/// Runs `mneme hook` with `env`, feeding `input`; returns stdout as JSON
/// and how long the process took.
async fn run_hook(env: &[(&str, String)], input: &Value) -> (Value, Duration) {
    let (output, elapsed, _) = run_hook_with_stderr(env, input).await;
    (output, elapsed)
}

/// Like [`run_hook`], also returning stderr (empty when nothing failed).
async fn run_hook_with_stderr(env: &[(&str, String)], input: &Value) -> (Value, Duration, String) {
    let started = Instant::now();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_mneme"))
        .arg("hook")
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", std::env::temp_dir())
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mneme hook starts");
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input.to_string().as_bytes()).await.unwrap();
    drop(stdin);
    let output = child.wait_with_output().await.unwrap();
    let elapsed = started.elapsed();
    assert!(output.status.success(), "the hook always exits 0");
    let stdout = String::from_utf8(output.stdout).unwrap();
    let parsed = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("stdout is one JSON document ({e}): {stdout:?}"));
    (
        parsed,
        elapsed,
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn additional_context(output: &Value) -> &str {
    output["hookSpecificOutput"]["additionalContext"]
        .as_str()
        .unwrap_or_default()
}

#[tokio::test]
async fn the_hook_adds_the_related_memory_and_fails_open_when_the_gateway_is_gone() {
    let local = LocalStack::start().await;
    let http_addr = local.http_addr;
    let tenant = create_tenant(&local.db.store(), "acme", ALL_PERMISSIONS).await;

    local
        .remember_all(
            tenant.tenant_id,
            &tenant.api_key,
            &[
                (
                    "The JWT handler in src/auth/jwt_handler.rs validates access tokens with RS256 \
             and allows 30 seconds of clock leeway.",
                    "auth",
                ),
                (
                    "The office coffee machine on the third floor is descaled every Friday.",
                    "office",
                ),
            ],
        )
        .await;

    let hook_env = [
        ("MNEME_HOOK_URL", format!("http://{http_addr}")),
        ("MNEME_HOOK_API_KEY", tenant.api_key.clone()),
        // A broken setting elsewhere must not turn the hook off.
        ("MNEME_DB_POOL_SIZE", "not-a-number".to_owned()),
    ];
    let (output, _) = run_hook(
        &hook_env,
        &read_event("/home/dev/project/src/auth/jwt_handler.rs"),
    )
    .await;
    let context = additional_context(&output);
    assert_eq!(output["hookSpecificOutput"]["hookEventName"], "PostToolUse");
    assert!(context.contains("RS256"), "{output}");
    assert!(!context.contains("coffee"), "{output}");
    assert!(context.starts_with("<surfaced-memories"), "{context}");

    // Unrelated reads add nothing.
    let (output, _) = run_hook(
        &hook_env,
        &read_event("/home/dev/project/docs/CHANGELOG.md"),
    )
    .await;
    assert_eq!(output, json!({}));
    // Garbage in: nothing added, still a JSON document.
    let (output, _) = run_hook(&hook_env, &json!("not a hook event")).await;
    assert_eq!(output, json!({}));
    // A wrong key: nothing added.
    let wrong = [
        ("MNEME_HOOK_URL", format!("http://{http_addr}")),
        (
            "MNEME_HOOK_API_KEY",
            "mn_nope_0000000000000000000000".to_owned(),
        ),
    ];
    let (output, _) = run_hook(
        &wrong,
        &read_event("/home/dev/project/src/auth/jwt_handler.rs"),
    )
    .await;
    assert_eq!(output, json!({}));

    local.shutdown().await;
    // The gateway is gone: `{}` within the hook's timeout.
    let timeout = [
        ("MNEME_HOOK_URL", format!("http://{http_addr}")),
        ("MNEME_HOOK_API_KEY", tenant.api_key.clone()),
        ("MNEME_HOOK_TIMEOUT_MS", "2500".to_owned()),
    ];
    let (output, elapsed) = run_hook(
        &timeout,
        &read_event("/home/dev/project/src/auth/jwt_handler.rs"),
    )
    .await;
    assert_eq!(output, json!({}));
    assert!(
        elapsed < Duration::from_millis(2500 + 1000),
        "took {elapsed:?}"
    );

    // A gateway that accepts but never answers: cut off at the timeout.
    let silent = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_addr = silent.local_addr().unwrap();
    let hold = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            held.push(socket);
        }
    });
    let slow = [
        ("MNEME_HOOK_URL", format!("http://{silent_addr}")),
        ("MNEME_HOOK_API_KEY", tenant.api_key.clone()),
        ("MNEME_HOOK_TIMEOUT_MS", "800".to_owned()),
    ];
    let (output, elapsed) = run_hook(
        &slow,
        &read_event("/home/dev/project/src/auth/jwt_handler.rs"),
    )
    .await;
    assert_eq!(output, json!({}));
    assert!(
        elapsed >= Duration::from_millis(800) && elapsed < Duration::from_millis(800 + 1000),
        "took {elapsed:?}"
    );
    hold.abort();
}
