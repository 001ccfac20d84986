//! Tools around a working session: `context` at its start, `reflect` at
//! its end, `tool_feedback` along the way.

use mneme_core::Error;
use mneme_proto::v1;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::kinds::FragmentKind;
use super::recall::{RecallHint, RecalledMemory, memory, rfc3339};
use super::remember::outcome_name;
use super::{EXAMPLE_FRAGMENT_ID, ToolContext, ToolSpec};

/// Arguments of `context`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct ContextArgs {
    /// Estimated tokens of the whole block (default 2000).
    pub token_budget: Option<u32>,
    /// Kinds of core memory to include (default preference, error,
    /// procedure, decision); each kind is guaranteed a slot.
    #[serde(default)]
    pub types: Vec<FragmentKind>,
    /// The agent whose memories to include besides the shared ones.
    pub agent_id: Option<String>,
    /// Workspace to draw from besides global memories; defaults to the key's.
    pub workspace: Option<String>,
}

/// An item of the session's working memory.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct WorkingItem {
    pub id: String,
    pub content: String,
    pub topic: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub created_at: String,
}

/// Result of `context`.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ContextResult {
    /// The block as text, ready to keep in mind for the whole session.
    pub injection_text: String,
    /// Core knowledge (anchors), most important first.
    pub anchors: Vec<RecalledMemory>,
    /// The most present memories by kind.
    pub core: Vec<RecalledMemory>,
    /// This session's working memory (`remember` with `scope: session`).
    pub working: Vec<WorkingItem>,
    pub total_tokens: u32,
    pub hints: Vec<RecallHint>,
}

/// How a whole task went.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct TaskEffectiveness {
    pub overall_success: bool,
    /// Tools that helped.
    #[serde(default)]
    pub tool_highlights: Vec<String>,
    /// Tools that got in the way, and how.
    #[serde(default)]
    pub tool_pain_points: Vec<String>,
}

/// Text items: a list, or one text split into sentences.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(untagged)]
pub(crate) enum Items {
    One(String),
    Many(Vec<String>),
}

impl Items {
    fn into_vec(self) -> Vec<String> {
        match self {
            Items::One(text) => vec![text],
            Items::Many(items) => items,
        }
    }
}

/// Arguments of `reflect`. Field names follow the reference protocol
/// (snake_case), which agents were trained on.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReflectArgs {
    /// What was learned: each item becomes a fact; one long text is split
    /// into sentences. Prefix an item with `LEARNING:` to mark a lesson.
    pub summary: Option<Items>,
    /// Decisions taken (stored as decisions, importance 0.8).
    #[serde(default)]
    pub decisions: Vec<String>,
    /// Errors met and solved, with the fix (stored as resolved errors).
    #[serde(default)]
    pub errors_resolved: Vec<String>,
    /// Ways of doing things worth repeating (stored as procedures).
    #[serde(default)]
    pub new_procedures: Vec<String>,
    /// Questions left open (stored as open facts).
    #[serde(default)]
    pub open_questions: Vec<String>,
    /// The session as a short story (an episode, up to 1000 characters);
    /// built from the items when omitted.
    pub narrative_summary: Option<String>,
    pub task_effectiveness: Option<TaskEffectiveness>,
    /// Topic of the stored memories (default `session_reflect`).
    pub topic: Option<String>,
    /// Workspace of the memories stored; defaults to the key's.
    pub workspace: Option<String>,
    /// The agent the memories stored belong to; defaults to the shared agent.
    #[serde(alias = "agentId")]
    pub agent_id: Option<String>,
}

/// A memory stored by `reflect`.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct ReflectedMemory {
    pub id: String,
    pub content: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub keywords: Vec<String>,
    /// `created`, or `duplicate` when the same memory already existed.
    pub outcome: String,
}

/// Result of `reflect`.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ReflectResult {
    pub fragments: Vec<ReflectedMemory>,
    pub count: usize,
    /// Memories per part of the reflection (summary, decisions, …, episode).
    pub breakdown: std::collections::BTreeMap<String, u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub episode_id: Option<String>,
    pub task_feedback_recorded: bool,
    /// Items that could not be stored, and why.
    pub warnings: Vec<String>,
}

/// Whether a feedback was asked for or volunteered.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Trigger {
    Sampled,
    Voluntary,
}

/// Arguments of `tool_feedback`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ToolFeedbackArgs {
    /// The tool whose result is judged, e.g. `recall`.
    pub tool_name: String,
    /// Did the result relate to what was needed?
    pub relevant: bool,
    /// Was it enough to go on without searching again?
    pub sufficient: bool,
    /// What would have been better (kept to 100 characters).
    pub suggestion: Option<String>,
    /// What the call was for (kept to 50 characters).
    pub context: Option<String>,
    pub trigger_type: Option<Trigger>,
    /// The `searchEventId` of the recall judged.
    #[serde(alias = "searchEventId")]
    pub search_event_id: Option<i64>,
    /// Memories the judgement is about: relevant ones are strengthened,
    /// irrelevant ones weakened, and so are the links among them.
    #[serde(default, alias = "fragmentIds")]
    pub fragment_ids: Vec<String>,
}

/// Result of `tool_feedback`.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ToolFeedbackResult {
    pub id: i64,
    pub tool_name: String,
    pub relevant: bool,
    pub sufficient: bool,
    /// Memories whose activation changed.
    pub fragments_adjusted: u32,
    /// Links among them reinforced or decayed.
    pub links_adjusted: u32,
}

pub(super) fn tools() -> Vec<ToolSpec> {
    vec![
        ToolSpec::new(
            "context",
            "Session context",
            "Load the memory block for the start of a session: anchors (core knowledge), the \
             most present preferences, errors, procedures and decisions, and this session's \
             working memory, within a token budget. Call it once at the start; `recall` then \
             skips what it already showed.",
            context,
        )
        .example(json!({"tokenBudget": 1500, "types": ["preference", "decision", "error"]})),
        ToolSpec::new(
            "reflect",
            "Reflect on the session",
            "At the end of a session (or a milestone), store what it taught: a summary (facts), \
             decisions, errors resolved, new procedures and open questions, tied together by a \
             narrative episode. Optionally report how well the tools served the task.",
            reflect,
        )
        .writes(false)
        .example(json!({
            "summary": [
                "The checkout timeouts came from the payments API rate limit.",
                "LEARNING: Check the 429 rate before blaming the database."
            ],
            "decisions": ["Checkout retries use exponential backoff starting at 200 ms."],
            "errors_resolved": [
                "Checkout failed with HTTP 429 under load; fixed by client-side backoff."
            ],
            "new_procedures": ["Load-test checkout against the payments sandbox before a release."],
            "open_questions": ["Should the payments API limit be raised for batch jobs?"],
            "task_effectiveness": {"overall_success": true, "tool_highlights": ["recall"]},
            "topic": "checkout-incident"
        })),
        ToolSpec::new(
            "tool_feedback",
            "Tool feedback",
            "Judge a tool result: was it relevant, was it sufficient? With `fragment_ids`, the \
             judged memories (and the links among them) are strengthened or weakened, so future \
             recalls improve.",
            tool_feedback,
        )
        .writes(false)
        .example(json!({
            "tool_name": "recall",
            "relevant": true,
            "sufficient": false,
            "suggestion": "Also return the incident's resolution.",
            "fragment_ids": [EXAMPLE_FRAGMENT_ID]
        })),
    ]
}

async fn context(context: ToolContext, args: ContextArgs) -> Result<ContextResult, Error> {
    let response = context
        .backends
        .context(
            &context.principal,
            v1::ContextRequest {
                token_budget: args.token_budget,
                types: args.types.iter().map(|t| t.as_str().to_owned()).collect(),
                session_id: context.principal.session_id.clone(),
                agent_id: args.agent_id,
                workspace: args.workspace,
            },
        )
        .await?;
    Ok(ContextResult {
        injection_text: response.injection_text,
        anchors: response.anchors.into_iter().map(memory).collect(),
        core: response.core.into_iter().map(memory).collect(),
        working: response
            .working
            .into_iter()
            .map(|w| WorkingItem {
                id: w.id,
                content: w.content,
                topic: w.topic,
                kind: w.r#type,
                created_at: rfc3339(w.created_at_unix_ms),
            })
            .collect(),
        total_tokens: response.total_tokens,
        hints: response.hints.into_iter().map(RecallHint::from).collect(),
    })
}

async fn reflect(context: ToolContext, args: ReflectArgs) -> Result<ReflectResult, Error> {
    let response = context
        .backends
        .reflect(
            &context.principal,
            v1::ReflectRequest {
                summary: args.summary.map(Items::into_vec).unwrap_or_default(),
                decisions: args.decisions,
                errors_resolved: args.errors_resolved,
                new_procedures: args.new_procedures,
                open_questions: args.open_questions,
                narrative_summary: args.narrative_summary,
                session_id: context.principal.session_id.clone(),
                agent_id: args.agent_id,
                task_effectiveness: args.task_effectiveness.map(|t| v1::TaskEffectiveness {
                    overall_success: t.overall_success,
                    tool_highlights: t.tool_highlights,
                    tool_pain_points: t.tool_pain_points,
                }),
                topic: args.topic,
                workspace: args.workspace,
            },
        )
        .await?;
    let fragments: Vec<ReflectedMemory> = response
        .fragments
        .into_iter()
        .map(|f| ReflectedMemory {
            id: f.id,
            content: f.content,
            kind: f.r#type,
            keywords: f.keywords,
            outcome: outcome_name(f.outcome).to_owned(),
        })
        .collect();
    Ok(ReflectResult {
        count: fragments.len(),
        fragments,
        breakdown: response
            .breakdown
            .into_iter()
            .map(|c| (c.name, c.count))
            .collect(),
        episode_id: response.episode_id,
        task_feedback_recorded: response.task_feedback_recorded,
        warnings: response.warnings,
    })
}

async fn tool_feedback(
    context: ToolContext,
    args: ToolFeedbackArgs,
) -> Result<ToolFeedbackResult, Error> {
    let response = context
        .backends
        .record_tool_feedback(
            &context.principal,
            v1::ToolFeedbackRequest {
                tool_name: args.tool_name.clone(),
                relevant: args.relevant,
                sufficient: args.sufficient,
                suggestion: args.suggestion,
                context: args.context,
                session_id: context.principal.session_id.clone(),
                trigger_type: args.trigger_type.map(|t| {
                    match t {
                        Trigger::Sampled => "sampled",
                        Trigger::Voluntary => "voluntary",
                    }
                    .to_owned()
                }),
                search_event_id: args.search_event_id,
                fragment_ids: args.fragment_ids,
            },
        )
        .await?;
    Ok(ToolFeedbackResult {
        id: response.id,
        tool_name: args.tool_name,
        relevant: args.relevant,
        sufficient: args.sufficient,
        fragments_adjusted: response.fragments_adjusted,
        links_adjusted: response.links_adjusted,
    })
}
