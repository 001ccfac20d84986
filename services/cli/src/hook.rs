//! `mneme hook`: Claude Code's PostToolUse hook. It reads the hook's JSON
//! on stdin, asks the gateway (`POST /v1/surface`) which memories are
//! relevant to the tool call, and prints the hook output document
//! (`hookSpecificOutput.additionalContext`) on stdout.
//!
//! A hook must never get in the host's way, so this command **fails
//! open**: any problem (no credentials, gateway down, slow, malformed
//! input, a refusal) prints `{}` — "add nothing" — within
//! `MNEME_HOOK_TIMEOUT_MS`, and the exit code is always 0. Diagnostics go
//! to stderr, which Claude Code does not show for exit code 0.
//!
//! The configuration is read on its own, leniently: a setting of another
//! part of mneme that does not parse must not turn the hook off.

use std::time::Duration;

use anyhow::{Context, anyhow};
use mneme_config::settings::{self, Setting};
use serde_json::{Value, json};
use tokio::io::AsyncReadExt;

/// Largest hook input read (tool responses can be large; only the tool
/// input matters, but the document must be read whole to parse it).
const MAX_INPUT_BYTES: u64 = 8 * 1024 * 1024;

fn env(setting: Setting) -> Option<String> {
    std::env::var(setting.name)
        .ok()
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
        .or_else(|| setting.default.map(str::to_owned))
}

/// The gateway's base URL, without a trailing slash.
fn base_url() -> String {
    let url = env(settings::HOOK_URL)
        .or_else(|| env(settings::PUBLIC_URL))
        .unwrap_or_else(|| {
            let addr = env(settings::HTTP_ADDR).unwrap_or_else(|| "127.0.0.1:8080".to_owned());
            format!("http://{addr}")
        });
    url.trim_end_matches('/').to_owned()
}

fn timeout() -> Duration {
    let millis = env(settings::HOOK_TIMEOUT_MS)
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_500u64);
    Duration::from_millis(millis.max(1))
}

/// Runs the hook; returns what to print (always a JSON document).
pub async fn run(host: &str) -> Value {
    match tokio::time::timeout(timeout(), surface(host)).await {
        Ok(Ok(output)) => output,
        Ok(Err(error)) => {
            eprintln!("mneme hook: {error:#}; adding nothing");
            json!({})
        }
        Err(_) => {
            eprintln!("mneme hook: no answer within the timeout; adding nothing");
            json!({})
        }
    }
}

async fn surface(host: &str) -> anyhow::Result<Value> {
    if host != "claude" {
        return Err(anyhow!("unknown host `{host}` (expected claude)"));
    }
    let mut input = Vec::new();
    tokio::io::stdin()
        .take(MAX_INPUT_BYTES)
        .read_to_end(&mut input)
        .await
        .context("reading the hook input")?;
    let payload: Value = serde_json::from_slice(&input).context("the hook input is not JSON")?;
    let token = match env(settings::HOOK_API_KEY) {
        Some(key) => key,
        None => crate::login::bearer(&crate::login::credentials_path()?)
            .await
            .context("no MNEME_HOOK_API_KEY and no stored sign-in (run `mneme login`)")?,
    };
    let mut body = json!({"host": host, "payload": payload});
    if let Some(agent) = env(settings::HOOK_AGENT_ID) {
        body["agentId"] = Value::String(agent);
    }
    let response = reqwest::Client::new()
        .post(format!("{}/v1/surface", base_url()))
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
        .context("the gateway is unreachable")?;
    let status = response.status();
    if !status.is_success() {
        return Err(anyhow!("the gateway answered {status}"));
    }
    let answer: Value = response
        .json()
        .await
        .context("the gateway's answer is not JSON")?;
    Ok(answer
        .get("hookOutput")
        .cloned()
        .filter(Value::is_object)
        .unwrap_or_else(|| json!({})))
}
