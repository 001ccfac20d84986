//! The long-term memory tools: `remember`, `recall`, `forget`.

use chrono::{DateTime, SecondsFormat, Utc};
use http::request::Parts;
use mneme_proto::v1;
use rmcp::handler::server::common::schema_for_input;
use rmcp::handler::server::tool::Extension;
use rmcp::handler::server::wrapper::Json;
use rmcp::model::JsonObject;
use rmcp::{tool, tool_router};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{MemoryServer, ToolError, arguments, principal};

/// The JSON Schema of a tool's arguments (rmcp caches it per type).
fn input_schema<T: JsonSchema + 'static>() -> std::sync::Arc<JsonObject> {
    schema_for_input::<T>().expect("tool argument types have object schemas")
}

/// Kinds of fragments.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum FragmentKind {
    Fact,
    Decision,
    Error,
    Preference,
    Procedure,
    Relation,
    Episode,
}

impl FragmentKind {
    fn as_str(self) -> &'static str {
        match self {
            Self::Fact => "fact",
            Self::Decision => "decision",
            Self::Error => "error",
            Self::Preference => "preference",
            Self::Procedure => "procedure",
            Self::Relation => "relation",
            Self::Episode => "episode",
        }
    }
}

/// Arguments of `remember`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RememberArgs {
    /// One self-contained fact: resolve pronouns, name concrete entities and
    /// numbers, one topic per call, cause and effect together. At most 300
    /// characters (1000 for `episode`).
    pub content: String,
    /// Short subject label, reused across related memories (e.g. "deploy",
    /// "user-preferences").
    pub topic: String,
    /// What kind of knowledge this is.
    #[serde(rename = "type")]
    pub kind: FragmentKind,
    /// Search keywords; extracted automatically when omitted.
    #[serde(default)]
    pub keywords: Vec<String>,
    /// 0–1. Defaults by type; capped per type unless `isAnchor`.
    pub importance: Option<f32>,
    /// Core knowledge that never decays or expires.
    #[serde(default)]
    pub is_anchor: bool,
    /// Where this came from (a URL, a file, a conversation).
    pub source: Option<String>,
    /// Sub-partition of the key's memories; defaults to the key's workspace.
    pub workspace: Option<String>,
    /// The agent this memory belongs to; defaults to the shared agent.
    pub agent_id: Option<String>,
    /// Retrying with the same key returns the first result instead of storing twice.
    pub idempotency_key: Option<String>,
    /// The surrounding situation, kept with the fragment.
    pub context_summary: Option<String>,
}

/// Result of `remember`.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RememberResult {
    /// Id of the stored (or already existing) fragment.
    pub id: String,
    /// `created`, `duplicate` (same content already stored) or `replayed`
    /// (same idempotency key seen before).
    pub outcome: String,
    pub keywords: Vec<String>,
    pub importance: f32,
    pub ttl_tier: String,
    /// Secrets or personal data replaced before storing.
    pub redactions: u32,
}

/// Arguments of `recall`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RecallArgs {
    /// Natural-language question or description of what to find (any language).
    pub text: Option<String>,
    /// Exact keywords to match.
    #[serde(default)]
    pub keywords: Vec<String>,
    /// Only memories with exactly this topic.
    pub topic: Option<String>,
    /// Only memories of this kind.
    #[serde(rename = "type")]
    pub kind: Option<FragmentKind>,
    /// Maximum number of memories (default 10, at most 50).
    pub limit: Option<u32>,
    /// Maximum estimated tokens of returned content (default 2000).
    pub token_budget: Option<u32>,
    /// Workspace to search besides global memories; defaults to the key's.
    pub workspace: Option<String>,
    /// Agent whose memories to search besides the shared ones.
    pub agent_id: Option<String>,
}

/// One recalled memory.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RecalledMemory {
    pub id: String,
    pub content: String,
    pub topic: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub keywords: Vec<String>,
    pub importance: f32,
    pub ttl_tier: String,
    pub is_anchor: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
    /// RFC 3339 creation time.
    pub created_at: String,
    /// Ranking score (higher is better).
    pub score: f64,
    /// Cosine similarity to `text`, when semantic search found it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub similarity: Option<f32>,
    /// Search layers that found it: vector, fulltext, keyword.
    pub matched_by: Vec<String>,
}

/// Result of `recall`.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RecallResult {
    pub fragments: Vec<RecalledMemory>,
    pub count: usize,
    /// Estimated tokens of the returned content.
    pub total_tokens: u32,
    /// True when memories were left out to stay within `tokenBudget`.
    pub truncated_by_budget: bool,
    /// Search layers that ran.
    pub layers: Vec<String>,
}

/// Arguments of `forget`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ForgetArgs {
    /// Id of the memory to delete.
    pub id: String,
    /// Required to delete permanent memories and anchors.
    #[serde(default)]
    pub force: bool,
    pub agent_id: Option<String>,
}

/// Result of `forget`.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ForgetResult {
    pub deleted: u32,
    /// Kept because permanent or anchored; call again with `force: true`.
    pub protected: u32,
}

fn outcome_name(outcome: i32) -> &'static str {
    match v1::WriteOutcome::try_from(outcome) {
        Ok(v1::WriteOutcome::Duplicate) => "duplicate",
        Ok(v1::WriteOutcome::Replayed) => "replayed",
        _ => "created",
    }
}

fn rfc3339(unix_ms: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(unix_ms)
        .unwrap_or_default()
        .to_rfc3339_opts(SecondsFormat::Millis, true)
}

#[tool_router(vis = "pub(super)")]
impl MemoryServer {
    #[tool(
        name = "remember",
        description = "Store one durable memory: a fact, decision, error, preference, procedure, relation or episode. \
                       Write self-contained sentences (no 'it'/'this'), one fact per call. Returns the memory id; \
                       storing the same content again returns the existing id.",
        input_schema = input_schema::<RememberArgs>(),
        annotations(
            title = "Remember",
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn remember(
        &self,
        args: JsonObject,
        Extension(parts): Extension<Parts>,
    ) -> Result<Json<RememberResult>, ToolError> {
        let principal = principal(&parts)?;
        let args: RememberArgs = arguments(args)?;
        let response = self
            .backends
            .remember(
                principal,
                v1::RememberRequest {
                    content: args.content,
                    topic: args.topic,
                    r#type: args.kind.as_str().to_owned(),
                    keywords: args.keywords,
                    importance: args.importance,
                    is_anchor: args.is_anchor,
                    source: args.source,
                    workspace: args.workspace,
                    agent_id: args.agent_id,
                    idempotency_key: args.idempotency_key,
                    context_summary: args.context_summary,
                },
            )
            .await?;
        Ok(Json(RememberResult {
            outcome: outcome_name(response.outcome).to_owned(),
            id: response.id,
            keywords: response.keywords,
            importance: response.importance,
            ttl_tier: response.ttl_tier,
            redactions: response.redactions,
        }))
    }

    #[tool(
        name = "recall",
        description = "Search long-term memory by meaning (text, any language), keywords, topic or type. \
                       Returns the most relevant memories first, within a token budget. \
                       With no arguments, returns the most important recent memories.",
        input_schema = input_schema::<RecallArgs>(),
        annotations(
            title = "Recall",
            read_only_hint = true,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn recall(
        &self,
        args: JsonObject,
        Extension(parts): Extension<Parts>,
    ) -> Result<Json<RecallResult>, ToolError> {
        let principal = principal(&parts)?;
        let args: RecallArgs = arguments(args)?;
        let response = self
            .backends
            .recall(
                principal,
                v1::RecallRequest {
                    text: args.text,
                    keywords: args.keywords,
                    topic: args.topic,
                    r#type: args.kind.map(|k| k.as_str().to_owned()),
                    limit: args.limit,
                    token_budget: args.token_budget,
                    workspace: args.workspace,
                    agent_id: args.agent_id,
                },
            )
            .await?;
        let fragments: Vec<RecalledMemory> = response
            .fragments
            .into_iter()
            .map(|f| RecalledMemory {
                created_at: rfc3339(f.created_at_unix_ms),
                id: f.id,
                content: f.content,
                topic: f.topic,
                kind: f.r#type,
                keywords: f.keywords,
                importance: f.importance,
                ttl_tier: f.ttl_tier,
                is_anchor: f.is_anchor,
                workspace: f.workspace,
                score: f.score,
                similarity: f.similarity,
                matched_by: f.matched_by,
            })
            .collect();
        Ok(Json(RecallResult {
            count: fragments.len(),
            fragments,
            total_tokens: response.total_tokens,
            truncated_by_budget: response.truncated_by_budget,
            layers: response.layers,
        }))
    }

    #[tool(
        name = "forget",
        description = "Delete one memory by id. Permanent memories and anchors need `force: true`. \
                       Use it for memories that are wrong or obsolete.",
        input_schema = input_schema::<ForgetArgs>(),
        annotations(
            title = "Forget",
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn forget(
        &self,
        args: JsonObject,
        Extension(parts): Extension<Parts>,
    ) -> Result<Json<ForgetResult>, ToolError> {
        let principal = principal(&parts)?;
        let args: ForgetArgs = arguments(args)?;
        let response = self
            .backends
            .forget(
                principal,
                v1::ForgetRequest {
                    id: args.id,
                    force: args.force,
                    agent_id: args.agent_id,
                },
            )
            .await?;
        Ok(Json(ForgetResult {
            deleted: response.deleted,
            protected: response.protected,
        }))
    }
}
