//! `POST /v1/surface`: surfacing for hosts that are not behind mneme's
//! proxy. The body is either a host's hook event (`{"host": "claude",
//! "payload": <PostToolUse JSON>}`, what `mneme hook` sends) or a tool call
//! of the caller's own (`{"server", "tool", "arguments", …}`). The answer
//! says what to add, and for hooks also carries the host's output document.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Extension, Json, Router};
use mneme_core::principal::resolve_agent_id;
use mneme_core::{Error, Permission, Principal};
use mneme_surfacing::extract::take_context_query;
use mneme_surfacing::gate::ToolAnnotations;
use mneme_surfacing::hook::{self, HookSkip};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::{Outcome, Source, SurfacedMemory, ToolCall};
use crate::App;
use crate::error::ApiError;

pub(crate) fn routes() -> Router<App> {
    Router::new().route("/v1/surface", post(surface))
}

/// MCP tool annotations, as a client reports them.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Annotations {
    read_only_hint: Option<bool>,
    destructive_hint: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SurfaceBody {
    /// `claude`: `payload` is Claude Code's PostToolUse hook input.
    host: Option<String>,
    payload: Option<Value>,
    server: Option<String>,
    tool: Option<String>,
    #[serde(default)]
    arguments: Map<String, Value>,
    #[serde(default)]
    annotations: Annotations,
    agent_id: Option<String>,
    session_id: Option<String>,
    model: Option<String>,
    context_window: Option<u32>,
    trace_id: Option<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct SurfaceAnswer {
    surfaced: bool,
    /// Why nothing was added (when `surfaced` is false).
    #[serde(skip_serializing_if = "Option::is_none")]
    skipped: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    surfacing_id: Option<String>,
    /// The `<surfaced-memories>` block to add to the tool result.
    #[serde(skip_serializing_if = "Option::is_none")]
    block: Option<String>,
    memories: Vec<SurfacedMemory>,
    #[serde(skip_serializing_if = "Option::is_none")]
    min_score: Option<f32>,
    /// The query extracted from the call (or its `sha256:` digest when
    /// query texts are not kept) and the stage that produced it.
    #[serde(skip_serializing_if = "Option::is_none")]
    query: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    query_stage: Option<&'static str>,
    /// How a proxy would inject the block (`append`, `prepend`, `section`).
    #[serde(skip_serializing_if = "Option::is_none")]
    injection_mode: Option<&'static str>,
    /// For hook events: the document the host's hook prints (`{}` when
    /// nothing is added).
    #[serde(skip_serializing_if = "Option::is_none")]
    hook_output: Option<Value>,
}

impl SurfaceAnswer {
    fn skipped(reason: &str, hook: bool) -> Self {
        Self {
            surfaced: false,
            skipped: Some(reason.to_owned()),
            surfacing_id: None,
            block: None,
            memories: Vec::new(),
            min_score: None,
            query: None,
            query_stage: None,
            injection_mode: None,
            hook_output: hook.then(|| json!({})),
        }
    }
}

/// Makes string arguments under the host's working directory relative to
/// it: `/home/dev/project/src/auth/jwt.rs` in `/home/dev/project` says
/// `src/auth/jwt.rs`, and the words of the directory above the project
/// (`home`, `dev`, `project`) are noise for every call.
fn relative_to(arguments: &mut Map<String, Value>, cwd: &str) {
    let prefix = format!("{}/", cwd.trim_end_matches('/'));
    if prefix.len() < 2 {
        return;
    }
    for value in arguments.values_mut() {
        if let Value::String(text) = value
            && let Some(rest) = text.strip_prefix(&prefix)
        {
            *text = rest.to_owned();
        }
    }
}

fn invalid(message: impl Into<String>) -> Response {
    ApiError(Error::invalid_argument(message)).into_response()
}

async fn surface(
    State(app): State<App>,
    Extension(principal): Extension<Principal>,
    body: Result<Json<SurfaceBody>, axum::extract::rejection::JsonRejection>,
) -> Response {
    let Json(body) = match body {
        Ok(body) => body,
        Err(rejection) => {
            return invalid(format!("invalid request body: {}", rejection.body_text()));
        }
    };
    if let Err(error) = principal
        .require(Permission::Read)
        .and_then(|()| resolve_agent_id(body.agent_id.as_deref(), &principal).map(drop))
    {
        return ApiError(error).into_response();
    }
    let is_hook = body.host.is_some();
    let call = match body.host.as_deref() {
        Some("claude") => {
            let Some(payload) = &body.payload else {
                return invalid("`payload` (the hook's input) is required with `host`");
            };
            let event = match hook::parse_claude_post_tool_use(payload) {
                Ok(event) => event,
                Err(HookSkip::NotSurfaced(reason)) => return invalid(reason),
                Err(skip) => {
                    let reason = match skip {
                        HookSkip::NotPostToolUse => "not_post_tool_use",
                        HookSkip::McpTool => "mcp_tool",
                        _ => "write_tool",
                    };
                    return Json(SurfaceAnswer::skipped(reason, true)).into_response();
                }
            };
            let settings = app.surfacer.settings();
            if !settings
                .hook_tools
                .iter()
                .any(|t| t == &event.canonical_tool)
            {
                return Json(SurfaceAnswer::skipped("hook_tool_not_surfaced", true))
                    .into_response();
            }
            let mut arguments = event.tool_input;
            if let Some(cwd) = &event.cwd {
                relative_to(&mut arguments, cwd);
            }
            let context_query = take_context_query(&mut arguments);
            ToolCall {
                server: "builtin".to_owned(),
                tool: event.canonical_tool,
                arguments,
                context_query,
                annotations: ToolAnnotations {
                    read_only: Some(true),
                    destructive: Some(false),
                },
                agent_id: body.agent_id,
                session_id: event.session_id.or(body.session_id),
                model: body.model,
                context_window: body.context_window,
                trace_id: body.trace_id,
                upstream_enabled: true,
                source: Source::Hook,
            }
        }
        Some(other) => return invalid(format!("unknown host `{other}` (expected claude)")),
        None => {
            let (Some(server), Some(tool)) = (body.server, body.tool) else {
                return invalid("`server` and `tool` are required (or `host` with `payload`)");
            };
            if server.is_empty() || tool.is_empty() || server.len() > 128 || tool.len() > 128 {
                return invalid("`server` and `tool` must be 1 to 128 characters");
            }
            let mut arguments = body.arguments;
            let context_query = take_context_query(&mut arguments);
            ToolCall {
                server,
                tool,
                arguments,
                context_query,
                annotations: ToolAnnotations {
                    read_only: body.annotations.read_only_hint,
                    destructive: body.annotations.destructive_hint,
                },
                agent_id: body.agent_id,
                session_id: body.session_id,
                model: body.model,
                context_window: body.context_window,
                trace_id: body.trace_id,
                upstream_enabled: true,
                source: Source::Api,
            }
        }
    };
    let answer = match app.surfacer.surface(&principal, call).await {
        Outcome::Surfaced(surfacing) => SurfaceAnswer {
            surfaced: true,
            skipped: None,
            hook_output: is_hook.then(|| hook::claude_output(&surfacing.block)),
            surfacing_id: Some(surfacing.id),
            block: Some(surfacing.block),
            memories: surfacing.memories,
            min_score: Some(surfacing.min_score),
            query: Some(surfacing.query),
            query_stage: Some(surfacing.stage),
            injection_mode: Some(surfacing.mode.as_str()),
        },
        Outcome::Skipped(skip) => SurfaceAnswer::skipped(skip.as_str(), is_hook),
    };
    (StatusCode::OK, Json(answer)).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_under_the_working_directory_become_relative() {
        let mut arguments = json!({
            "file_path": "/home/dev/project/src/auth/jwt.rs",
            "pattern": "token_ttl",
            "path": "/etc/hosts"
        })
        .as_object()
        .unwrap()
        .clone();
        relative_to(&mut arguments, "/home/dev/project/");
        assert_eq!(arguments["file_path"], "src/auth/jwt.rs");
        assert_eq!(arguments["pattern"], "token_ttl");
        assert_eq!(arguments["path"], "/etc/hosts");
        relative_to(&mut arguments, "/");
        assert_eq!(arguments["path"], "/etc/hosts", "the root is no project");
    }
}
