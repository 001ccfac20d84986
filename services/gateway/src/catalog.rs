//! MCP prompts and resources: ready-made instructions (`analyze-session`,
//! `retrieve-relevant-memory`, `onboarding`), read-only views of the
//! caller's memory (`memory://stats`, `memory://topics`, `memory://config`,
//! `memory://active-session`, and the template `memory://topics/{topic}`),
//! and completion of their arguments from the caller's topics.
//!
//! Resources and completions are read through the tool registry
//! (`memory_stats`, `context`, `search_traces`), so they carry the same
//! permission and mode checks and show exactly what those tools would show
//! the caller: nothing beyond its own key, its groups and its session.

use std::sync::Arc;

use mneme_core::{Error, ErrorCode, Permission, Principal};
use rmcp::model::{
    ArgumentInfo, CompletionInfo, GetPromptResult, JsonObject, Prompt, PromptArgument,
    PromptMessage, ReadResourceResult, Reference, Resource, ResourceContents, ResourceTemplate,
    Role,
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

/// One topic's memories; `{topic}` is percent-encoded (RFC 6570).
const TOPIC_TEMPLATE: &str = "memory://topics/{topic}";
const TOPIC_URI_PREFIX: &str = "memory://topics/";
/// `search_traces` returns at most this many memories.
const TOPIC_MEMORIES: u32 = 100;

/// Resource templates the principal may read (all need `read`).
pub(crate) fn resource_templates(principal: &Principal) -> Vec<ResourceTemplate> {
    if !principal.has(Permission::Read) {
        return Vec::new();
    }
    vec![
        ResourceTemplate::new(TOPIC_TEMPLATE, "topic")
            .with_title("Memories of one topic")
            .with_description(
                "Your newest memories (up to 100) whose topic is exactly `topic`; completion \
                 suggests your topics.",
            )
            .with_mime_type("application/json"),
    ]
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
        other => match other.strip_prefix(TOPIC_URI_PREFIX) {
            Some(encoded) if !encoded.is_empty() => {
                let topic = percent_decode(encoded).ok_or_else(|| {
                    Error::invalid_argument(format!("`{other}` is not a valid topic URI"))
                })?;
                topic_memories(&context, &topic).await?
            }
            _ => {
                return Err(Error::new(
                    ErrorCode::NotFound,
                    format!("unknown resource `{other}`"),
                ));
            }
        },
    };
    Ok(ReadResourceResult::new(vec![
        ResourceContents::text(body.to_string(), uri).with_mime_type("application/json"),
    ]))
}

/// `search_traces` matches topics by substring; the resource promises the
/// topic itself, so near namesakes are dropped here.
async fn topic_memories(context: &ToolContext, topic: &str) -> Result<Value, Error> {
    let found = tool(
        context,
        "search_traces",
        json!({"entityKey": topic, "limit": TOPIC_MEMORIES}),
    )
    .await?;
    let memories: Vec<&Value> = found["traces"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|memory| memory["topic"].as_str() == Some(topic))
        .collect();
    Ok(json!({"topic": topic, "count": memories.len(), "memories": memories}))
}

/// Decodes `%XX` escapes; `None` for a broken escape or bytes that are not
/// UTF-8. Clients expand the template with RFC 6570 simple expansion, which
/// escapes everything outside the unreserved set.
fn percent_decode(encoded: &str) -> Option<String> {
    let bytes = encoded.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut rest = bytes;
    while let Some((&byte, tail)) = rest.split_first() {
        if byte == b'%' {
            let hex = tail.get(..2)?;
            let hex = std::str::from_utf8(hex).ok()?;
            decoded.push(u8::from_str_radix(hex, 16).ok()?);
            rest = &tail[2..];
        } else {
            decoded.push(byte);
            rest = tail;
        }
    }
    String::from_utf8(decoded).ok()
}

/// Suggestions for an argument of a prompt or of the topic template.
///
/// Every argument mneme declares (`topic` and `focus` of the prompts,
/// `topic` of the template) names a subject of the caller's memory, so all
/// of them complete from the caller's topics. Completion is a typing aid:
/// a prompt, template or argument mneme does not have simply has no
/// suggestions (an empty list), rather than an error the user would see
/// while typing.
pub(crate) async fn complete(
    reference: &Reference,
    argument: &ArgumentInfo,
    context: ToolContext,
) -> Result<CompletionInfo, Error> {
    let declared = match reference {
        Reference::Prompt(prompt) => prompts()
            .into_iter()
            .find(|known| known.name == prompt.name)
            .and_then(|known| known.arguments)
            .is_some_and(|arguments| arguments.iter().any(|known| known.name == argument.name)),
        Reference::Resource(template) => template.uri == TOPIC_TEMPLATE && argument.name == "topic",
        other => {
            return Err(Error::invalid_argument(format!(
                "cannot complete a `{}` reference",
                other.reference_type()
            )));
        }
    };
    if !declared {
        return Ok(CompletionInfo::default());
    }
    // A caller that may not read its memory (a write-only key or mode) gets
    // no suggestions rather than an error: completion is a typing aid.
    if !REGISTRY
        .visible(&context.principal)
        .any(|visible| visible.name == "memory_stats")
    {
        return Ok(CompletionInfo::default());
    }
    let stats = tool(&context, "memory_stats", json!({})).await?;
    Ok(topic_completion(&stats, &argument.value))
}

/// The caller's topics that start with `typed` (ignoring case), largest
/// first. `memory_stats` lists only the largest topics, so when the caller
/// has more, the total is unknown and `hasMore` says the typed prefix
/// may match topics not shown yet.
fn topic_completion(stats: &Value, typed: &str) -> CompletionInfo {
    let listed: Vec<&str> = stats["topTopics"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|entry| entry["topic"].as_str())
        .collect();
    let all_listed = stats["topics"]
        .as_u64()
        .is_some_and(|topics| topics <= listed.len() as u64);
    let typed = typed.to_lowercase();
    let mut values: Vec<String> = listed
        .into_iter()
        .filter(|topic| topic.to_lowercase().starts_with(&typed))
        .map(str::to_owned)
        .collect();
    let matching = values.len();
    values.truncate(CompletionInfo::MAX_VALUES);
    let mut completion = CompletionInfo::default();
    completion.has_more = Some(!all_listed || matching > values.len());
    completion.total = all_listed.then(|| u32::try_from(matching).unwrap_or(u32::MAX));
    completion.values = values;
    completion
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(topics: u64, largest: &[&str]) -> Value {
        let top: Vec<Value> = largest
            .iter()
            .map(|topic| json!({"topic": topic, "count": 1}))
            .collect();
        json!({"topics": topics, "topTopics": top})
    }

    #[test]
    fn topics_complete_by_prefix_ignoring_case_in_size_order() {
        let known = stats(3, &["Deploy", "billing", "deploy-keys"]);
        let completion = topic_completion(&known, "dep");
        assert_eq!(completion.values, ["Deploy", "deploy-keys"]);
        assert_eq!(completion.total, Some(2));
        assert_eq!(completion.has_more, Some(false));
        assert!(topic_completion(&known, "x").values.is_empty());
        assert_eq!(topic_completion(&known, "").values.len(), 3);
    }

    #[test]
    fn unlisted_topics_leave_the_total_open() {
        let completion = topic_completion(&stats(25, &["deploy", "billing"]), "d");
        assert_eq!(completion.values, ["deploy"]);
        assert_eq!(completion.total, None);
        assert_eq!(completion.has_more, Some(true));
    }

    #[test]
    fn topic_uris_are_percent_decoded() {
        assert_eq!(
            percent_decode("release%20notes").as_deref(),
            Some("release notes")
        );
        assert_eq!(
            percent_decode("%EB%B0%B0%ED%8F%AC").as_deref(),
            Some("배포")
        );
        assert_eq!(percent_decode("a%2Fb").as_deref(), Some("a/b"));
        assert_eq!(percent_decode("broken%2"), None);
        assert_eq!(percent_decode("%zz"), None);
        assert_eq!(percent_decode("%FF"), None);
    }
}
