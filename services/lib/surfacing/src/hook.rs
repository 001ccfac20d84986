//! Claude Code PostToolUse hooks: native tool calls (Read, Grep, Glob, Bash,
//! …) get the same surfacing as proxied MCP calls.
//!
//! The payload is normalised into a [`HookEvent`] whose `tool_input` feeds
//! [`crate::extract::extract_query`]; the rendered block goes back as
//! `hookSpecificOutput.additionalContext` ([`claude_output`]). On any skip the
//! caller prints `{}` ("pass through unchanged"). Which canonical tools may
//! surface is the caller's configuration; write tools never do.

use serde_json::{Map, Value, json};
use thiserror::Error;

const HOST_CLAUDE: &str = "claude";
const POST_TOOL_USE: &str = "PostToolUse";

/// A host's tool event, normalised.
#[derive(Debug, Clone, PartialEq)]
pub struct HookEvent {
    /// The host that sent it (`claude`).
    pub host: String,
    /// The host's session id, when given.
    pub session_id: Option<String>,
    /// The native tool name, e.g. `Read`.
    pub tool_name: String,
    /// `read`, `grep`, `glob`, `shell`, `web_fetch`, `web_search`, `write`,
    /// `edit` or `other`.
    pub canonical_tool: String,
    /// The tool's arguments.
    pub tool_input: Map<String, Value>,
    /// The working directory of the session, when given.
    pub cwd: Option<String>,
}

/// Why a hook payload does not surface; `Display` is a short log reason.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum HookSkip {
    /// Another hook event (PreToolUse, Stop, …).
    #[error("not a PostToolUse event")]
    NotPostToolUse,
    /// An `mcp__*` tool: it already went through the proxy.
    #[error("MCP tool (surfaced by the proxy)")]
    McpTool,
    /// A tool that changes files.
    #[error("write tool")]
    WriteTool,
    /// A malformed payload or a failed tool call.
    #[error("not surfaced: {0}")]
    NotSurfaced(String),
}

/// Native tool name → canonical tool, for Claude Code.
fn canonical_claude_tool(tool: &str) -> &'static str {
    match tool {
        "Read" => "read",
        "Grep" => "grep",
        "Glob" => "glob",
        "Bash" => "shell",
        "WebFetch" => "web_fetch",
        "WebSearch" => "web_search",
        "Write" | "NotebookEdit" => "write",
        "Edit" | "MultiEdit" => "edit",
        _ => "other",
    }
}

/// Parses Claude Code's PostToolUse JSON (fields `hook_event_name`,
/// `session_id`, `cwd`, `tool_name`, `tool_input`, `tool_response`). `mcp__*`
/// tools are skipped (they already pass the proxy); Write, Edit, MultiEdit and
/// NotebookEdit are write tools. A `tool_response` that reports failure
/// (`is_error: true` or `success: false`) is not surfaced either: the agent
/// is fixing a call, not working on a topic.
pub fn parse_claude_post_tool_use(payload: &Value) -> Result<HookEvent, HookSkip> {
    let object = payload
        .as_object()
        .ok_or_else(|| HookSkip::NotSurfaced("payload is not a JSON object".to_owned()))?;
    let text = |key: &str| object.get(key).and_then(Value::as_str);
    if text("hook_event_name") != Some(POST_TOOL_USE) {
        return Err(HookSkip::NotPostToolUse);
    }
    let tool_name = text("tool_name")
        .filter(|name| !name.is_empty())
        .ok_or_else(|| HookSkip::NotSurfaced("missing tool_name".to_owned()))?;
    if tool_name.starts_with("mcp__") {
        return Err(HookSkip::McpTool);
    }
    let canonical_tool = canonical_claude_tool(tool_name);
    if matches!(canonical_tool, "write" | "edit") {
        return Err(HookSkip::WriteTool);
    }
    let tool_input = match object.get("tool_input") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(input)) => input.clone(),
        Some(_) => {
            return Err(HookSkip::NotSurfaced(
                "tool_input is not an object".to_owned(),
            ));
        }
    };
    if let Some(response) = object.get("tool_response").and_then(Value::as_object) {
        let failed = response.get("is_error").and_then(Value::as_bool) == Some(true)
            || response.get("success").and_then(Value::as_bool) == Some(false);
        if failed {
            return Err(HookSkip::NotSurfaced("the tool call failed".to_owned()));
        }
    }
    Ok(HookEvent {
        host: HOST_CLAUDE.to_owned(),
        session_id: text("session_id").map(str::to_owned),
        tool_name: tool_name.to_owned(),
        canonical_tool: canonical_tool.to_owned(),
        tool_input,
        cwd: text("cwd").map(str::to_owned),
    })
}

/// `{"hookSpecificOutput":{"hookEventName":"PostToolUse","additionalContext": block}}`
pub fn claude_output(block: &str) -> Value {
    json!({
        "hookSpecificOutput": {
            "hookEventName": POST_TOOL_USE,
            "additionalContext": block,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(tool: &str, input: Value) -> Value {
        json!({
            "session_id": "sess_demo",
            "cwd": "/project",
            "hook_event_name": "PostToolUse",
            "tool_name": tool,
            "tool_input": input,
            "tool_response": {"type": "text", "text": "ok"},
        })
    }

    #[test]
    fn fixture_read_event() {
        let fixture: Value = serde_json::from_str(include_str!(
            "../tests/fixtures/claude_post_tool_use_read.json"
        ))
        .expect("fixture is JSON");
        let event = parse_claude_post_tool_use(&fixture).unwrap();
        assert_eq!(event.host, "claude");
        assert_eq!(event.tool_name, "Read");
        assert_eq!(event.canonical_tool, "read");
        assert_eq!(event.cwd.as_deref(), Some("/project"));
        assert!(event.session_id.is_some());
        assert_eq!(
            event.tool_input.get("file_path").and_then(Value::as_str),
            Some("/project/src/auth/jwt_handler.rs")
        );
    }

    #[test]
    fn native_tools_map_to_canonical_names() {
        for (native, canonical) in [
            ("Grep", "grep"),
            ("Glob", "glob"),
            ("Bash", "shell"),
            ("WebFetch", "web_fetch"),
            ("WebSearch", "web_search"),
            ("TodoWrite", "other"),
        ] {
            let event = parse_claude_post_tool_use(&payload(native, json!({}))).unwrap();
            assert_eq!(event.canonical_tool, canonical, "{native}");
        }
    }

    #[test]
    fn skips() {
        for tool in ["Write", "Edit", "MultiEdit", "NotebookEdit"] {
            assert_eq!(
                parse_claude_post_tool_use(&payload(tool, json!({}))),
                Err(HookSkip::WriteTool)
            );
        }
        assert_eq!(
            parse_claude_post_tool_use(&payload("mcp__github__search", json!({}))),
            Err(HookSkip::McpTool)
        );
        let mut pre = payload("Read", json!({}));
        pre["hook_event_name"] = json!("PreToolUse");
        assert_eq!(
            parse_claude_post_tool_use(&pre),
            Err(HookSkip::NotPostToolUse)
        );
        assert!(matches!(
            parse_claude_post_tool_use(&payload("Read", json!("x"))),
            Err(HookSkip::NotSurfaced(_))
        ));
        assert!(matches!(
            parse_claude_post_tool_use(&json!([1])),
            Err(HookSkip::NotSurfaced(_))
        ));
        let mut failed = payload("Bash", json!({"command": "cargo test"}));
        failed["tool_response"] = json!({"stdout": "", "is_error": true});
        assert!(matches!(
            parse_claude_post_tool_use(&failed),
            Err(HookSkip::NotSurfaced(_))
        ));
    }

    #[test]
    fn missing_input_is_an_empty_map() {
        let mut bare = payload("Glob", json!({}));
        bare.as_object_mut().unwrap().remove("tool_input");
        let event = parse_claude_post_tool_use(&bare).unwrap();
        assert!(event.tool_input.is_empty());
    }

    #[test]
    fn output_shape() {
        assert_eq!(
            claude_output("<surfaced-memories>\n</surfaced-memories>"),
            json!({"hookSpecificOutput": {
                "hookEventName": "PostToolUse",
                "additionalContext": "<surfaced-memories>\n</surfaced-memories>"
            }})
        );
    }
}
