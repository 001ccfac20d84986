//! MCP prompts and resources: ready-made instructions (`analyze-session`,
//! `retrieve-relevant-memory`, `onboarding`) and read-only views of the
//! caller's memory (`memory://stats`, `memory://topics`, `memory://config`,
//! `memory://active-session`).
//!
//! Resources are read through the tool registry (`memory_stats`,
//! `context`), so they carry the same permission and mode checks and show
//! exactly what those tools would show the caller: nothing beyond its own
//! key, its groups and its session.

use std::sync::Arc;

use mneme_core::{Error, ErrorCode, Permission, Principal};
use rmcp::model::{
    GetPromptResult, JsonObject, Prompt, PromptArgument, PromptMessage, ReadResourceResult,
    Resource, ResourceContents, Role,
};
use serde_json::{Value, json};

use crate::tools::{REGISTRY, ToolContext};

/// The limits clients may want to know, shown by `memory://config`.
#[derive(Debug, Clone)]
pub(crate) struct PublicLimits(pub(crate) Arc<Value>);

impl PublicLimits {
    pub(crate) fn from_config(config: &mneme_config::Config) -> Self {
        Self(Arc::new(json!({
            "maxContentChars": config.remember.limits.max_content_chars,
            "maxEpisodeChars": config.remember.limits.max_episode_chars,
            "batchMaxItems": config.remember.batch_max_items,
            "recallDefaultLimit": config.recall.default_limit,
            "recallMaxLimit": config.recall.max_limit,
            "recallDefaultTokenBudget": config.recall.default_token_budget,
            "workingMemoryTokens": config.remember.working_memory_tokens,
        })))
    }
}

pub(crate) fn prompts() -> Vec<Prompt> {
    vec![
        Prompt::new(
            "analyze-session",
            Some("Review this session and store what it taught with `reflect`."),
            Some(vec![
                PromptArgument::new("focus")
                    .with_description("What to pay most attention to (optional).")
                    .with_required(false),
            ]),
        )
        .with_title("Analyze the session"),
        Prompt::new(
            "retrieve-relevant-memory",
            Some("Search long-term memory about a topic before working on it."),
            Some(vec![
                PromptArgument::new("topic")
                    .with_description("What you are about to work on.")
                    .with_required(true),
            ]),
        )
        .with_title("Retrieve relevant memory"),
        Prompt::new(
            "onboarding",
            Some("How to use mneme's memory tools well."),
            None,
        )
        .with_title("Get started with mneme"),
    ]
}

fn argument<'a>(arguments: &'a Option<JsonObject>, name: &str) -> Option<&'a str> {
    arguments
        .as_ref()?
        .get(name)?
        .as_str()
        .map(str::trim)
        .filter(|v| !v.is_empty())
}

pub(crate) fn prompt(name: &str, arguments: &Option<JsonObject>) -> Result<GetPromptResult, Error> {
    let text = match name {
        "analyze-session" => {
            let focus = argument(arguments, "focus")
                .map(|f| format!(" Pay most attention to: {f}."))
                .unwrap_or_default();
            format!(
                "Review this session before it ends.{focus} Call `reflect` once with: \
                 `summary` (facts learned, one per item), `decisions` (with their reasons), \
                 `errors_resolved` (the error and its fix together), `new_procedures` (steps \
                 worth repeating), `open_questions`, a short `narrative_summary`, and \
                 `task_effectiveness` (did the task succeed; which tools helped or got in the \
                 way). Leave out chatter and anything already stored."
            )
        }
        "retrieve-relevant-memory" => {
            let topic = argument(arguments, "topic").ok_or_else(|| {
                Error::invalid_argument("the prompt `retrieve-relevant-memory` needs `topic`")
            })?;
            format!(
                "Before working on \"{topic}\", call `recall` with `text` describing it (and \
                 `keywords` for exact names). Read the results, follow `nextCursor` if the \
                 first page is not enough, and use `graph_explore` on errors to find their \
                 fixes. Say which memories you relied on; call `tool_feedback` with their ids \
                 if they were (not) relevant."
            )
        }
        "onboarding" => "You have long-term memory through mneme. At the start of a session \
             call `context`. Before answering about the user, their projects or past \
             decisions, call `recall`. Store each durable fact with `remember` (one \
             self-contained fact per call, names and numbers spelled out). Correct with \
             `amend`, remove with `forget`, connect with `link`. At the end, call `reflect`. \
             `get_skill_guide` explains each part in detail."
            .to_owned(),
        other => {
            return Err(Error::invalid_argument(format!("unknown prompt `{other}`")));
        }
    };
    Ok(GetPromptResult::new(vec![PromptMessage::new_text(
        Role::User,
        text,
    )]))
}

const RESOURCES: [(&str, &str, &str); 4] = [
    (
        "memory://stats",
        "stats",
        "Counts of your memories by type, tier and topic, and recent search quality.",
    ),
    (
        "memory://topics",
        "topics",
        "Your largest topics with their memory counts.",
    ),
    (
        "memory://config",
        "config",
        "The limits that apply to your calls, and your key's permissions and mode.",
    ),
    (
        "memory://active-session",
        "active-session",
        "This session's working memory (`remember` with `scope: session`).",
    ),
];

/// Resources the principal may read (all need `read`).
pub(crate) fn resources(principal: &Principal) -> Vec<Resource> {
    if !principal.has(Permission::Read) {
        return Vec::new();
    }
    RESOURCES
        .iter()
        .map(|(uri, name, description)| {
            Resource::new(*uri, *name)
                .with_description(*description)
                .with_mime_type("application/json")
        })
        .collect()
}

async fn tool(context: &ToolContext, name: &str, arguments: Value) -> Result<Value, Error> {
    let Value::Object(arguments) = arguments else {
        return Err(Error::internal());
    };
    REGISTRY.call(name, context.clone(), arguments).await
}

pub(crate) async fn read(
    uri: &str,
    context: ToolContext,
    limits: &PublicLimits,
) -> Result<ReadResourceResult, Error> {
    context.principal.require(Permission::Read)?;
    let body = match uri {
        "memory://stats" => tool(&context, "memory_stats", json!({})).await?,
        "memory://topics" => {
            let stats = tool(&context, "memory_stats", json!({})).await?;
            json!({"topics": stats["topics"], "largest": stats["topTopics"]})
        }
        "memory://config" => {
            let principal = &context.principal;
            json!({
                "limits": *limits.0,
                "permissions": principal.permissions.iter().map(|p| p.as_str()).collect::<Vec<_>>(),
                "mode": principal.mode,
                "workspace": principal.workspace,
            })
        }
        "memory://active-session" => {
            let Some(session) = context.principal.session_id.clone() else {
                return Err(Error::invalid_argument(
                    "memory://active-session needs an MCP session",
                ));
            };
            let block = tool(&context, "context", json!({})).await?;
            json!({"sessionId": session, "working": block["working"]})
        }
        other => {
            return Err(Error::new(
                ErrorCode::NotFound,
                format!("unknown resource `{other}`"),
            ));
        }
    };
    Ok(ReadResourceResult::new(vec![
        ResourceContents::text(body.to_string(), uri).with_mime_type("application/json"),
    ]))
}
