//! Surfacing for the local proxy: after a proxied call, ask the LTM's
//! `POST /v1/surface` which memories relate to it, and add the block it
//! returns to the result.
//!
//! The local proxy has no surfacing engine of its own: the hosted gateway
//! already runs query extraction, gates (write tools, cooldowns, rate),
//! recall, scoring, deduplication and rendering for the tenant, and keeps
//! the feedback loop in one place. Surfacing **fails open**: no token, a
//! refusal, a slow or unreachable LTM, an answer that does not parse, all
//! leave the result as it was, within [`TIMEOUT`].

use std::time::Duration;

use mneme_mcp_upstream::naming::CONTEXT_QUERY_ARG;
use mneme_mcp_upstream::sealed::Headers;
use mneme_surfacing::render::{InjectionMode, inject_text};
use rmcp::model::{CallToolResult, ContentBlock, JsonObject};
use serde::Deserialize;
use serde_json::{Value, json};

/// Longest a surfacing round trip may add to a tool call.
pub const TIMEOUT: Duration = Duration::from_secs(3);

/// What the proxy knows of a call when it asks.
#[derive(Debug)]
pub struct Request<'a> {
    /// The upstream's prefix (what the LTM records as the server).
    pub server: &'a str,
    pub tool: &'a str,
    /// As sent upstream (without `_context_query`).
    pub arguments: &'a JsonObject,
    pub context_query: Option<&'a str>,
    pub read_only: Option<bool>,
    pub destructive: Option<bool>,
    pub agent_id: Option<&'a str>,
    pub session_id: &'a str,
}

/// The part of the answer the proxy uses.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Answer {
    surfaced: bool,
    block: Option<String>,
    injection_mode: Option<String>,
}

/// What to add: the block, and where the LTM wants it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Surfaced {
    pub block: String,
    pub mode: InjectionMode,
}

/// The request body of `POST /v1/surface` (the `_context_query` goes
/// inside `arguments`, where the LTM looks for it).
pub fn body(request: &Request<'_>) -> Value {
    let mut arguments = request.arguments.clone();
    if let Some(query) = request.context_query {
        arguments.insert(
            CONTEXT_QUERY_ARG.to_owned(),
            Value::String(query.to_owned()),
        );
    }
    let mut annotations = serde_json::Map::new();
    if let Some(read_only) = request.read_only {
        annotations.insert("readOnlyHint".into(), Value::Bool(read_only));
    }
    if let Some(destructive) = request.destructive {
        annotations.insert("destructiveHint".into(), Value::Bool(destructive));
    }
    let mut body = json!({
        "server": request.server,
        "tool": request.tool,
        "arguments": arguments,
        "annotations": annotations,
        "sessionId": request.session_id,
    });
    if let Some(agent) = request.agent_id {
        body["agentId"] = Value::String(agent.to_owned());
    }
    body
}

/// Asks the LTM, sending `headers` (its credentials); `Err` says why
/// nothing is added (for the log only, never with a header value).
pub async fn ask(
    http: &reqwest::Client,
    url: &str,
    headers: &Headers,
    request: &Request<'_>,
) -> Result<Option<Surfaced>, String> {
    let mut post = http.post(url).json(&body(request)).timeout(TIMEOUT);
    for (name, value) in headers {
        post = post.header(name.as_str(), value.as_str());
    }
    let response = post
        .send()
        .await
        .map_err(|error| format!("the LTM is unreachable: {error}"))?;
    let status = response.status();
    if !status.is_success() {
        return Err(format!("the LTM answered {status}"));
    }
    let answer: Answer = response
        .json()
        .await
        .map_err(|error| format!("the LTM's answer does not parse: {error}"))?;
    let Some(block) = answer.block.filter(|b| answer.surfaced && !b.is_empty()) else {
        return Ok(None);
    };
    let mode = answer
        .injection_mode
        .and_then(|m| m.parse().ok())
        .unwrap_or_default();
    Ok(Some(Surfaced { block, mode }))
}

/// Adds the block to a result, like the hosted proxy: after the last text
/// (append), before it (prepend) or as its own item (section). A prepended
/// block would shift the offsets of a chunked result, so a progressive
/// first chunk gets it after the footer instead, where splitting on the
/// footer token drops it.
pub fn inject(result: &mut CallToolResult, surfaced: Surfaced, progressive: bool) {
    let last_text = result.content.iter().rposition(|c| c.as_text().is_some());
    let mode = match surfaced.mode {
        InjectionMode::Prepend if progressive => InjectionMode::Append,
        mode => mode,
    };
    match (mode, last_text) {
        (InjectionMode::Section, _) | (_, None) => {
            result.content.push(ContentBlock::text(surfaced.block));
        }
        (mode, Some(index)) => {
            if let Some(text) = result.content[index].as_text() {
                let injected = inject_text(&text.text, &surfaced.block, mode);
                result.content[index] = ContentBlock::text(injected);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_context_query_travels_inside_the_arguments() {
        let arguments = json!({"path": "/p/src/auth/jwt.rs"})
            .as_object()
            .cloned()
            .unwrap_or_default();
        let body = body(&Request {
            server: "fs",
            tool: "read_text_file",
            arguments: &arguments,
            context_query: Some("jwt validation"),
            read_only: Some(true),
            destructive: None,
            agent_id: None,
            session_id: "s1",
        });
        assert_eq!(body["arguments"][CONTEXT_QUERY_ARG], "jwt validation");
        assert_eq!(body["annotations"], json!({"readOnlyHint": true}));
        assert_eq!(body["sessionId"], "s1");
        assert!(body.get("agentId").is_none());
    }

    #[test]
    fn blocks_go_where_the_mode_says_but_never_before_a_chunk() {
        let surfaced = |mode| Surfaced {
            block: "<surfaced-memories/>".into(),
            mode,
        };
        let mut result = CallToolResult::success(vec![ContentBlock::text("body")]);
        inject(&mut result, surfaced(InjectionMode::Prepend), false);
        assert!(
            result.content[0]
                .as_text()
                .is_some_and(|t| t.text.starts_with("<surfaced"))
        );
        let mut chunked = CallToolResult::success(vec![ContentBlock::text("chunk")]);
        inject(&mut chunked, surfaced(InjectionMode::Prepend), true);
        assert!(
            chunked.content[0]
                .as_text()
                .is_some_and(|t| t.text.starts_with("chunk\n\n<surfaced"))
        );
        let mut section = CallToolResult::success(vec![ContentBlock::text("body")]);
        inject(&mut section, surfaced(InjectionMode::Section), false);
        assert_eq!(section.content.len(), 2);
    }
}
