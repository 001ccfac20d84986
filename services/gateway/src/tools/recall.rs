//! `recall`.

use chrono::{DateTime, SecondsFormat, Utc};
use mneme_core::Error;
use mneme_proto::v1;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::kinds::FragmentKind;
use super::{ToolContext, ToolSpec};

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

fn rfc3339(unix_ms: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(unix_ms)
        .unwrap_or_default()
        .to_rfc3339_opts(SecondsFormat::Millis, true)
}

pub(super) fn tools() -> Vec<ToolSpec> {
    vec![ToolSpec::new(
        "recall",
        "Recall",
        "Search long-term memory by meaning (text, any language), keywords, topic or type. \
         Returns the most relevant memories first, within a token budget. With no arguments, \
         returns the most important recent memories.",
        recall,
    )]
}

async fn recall(context: ToolContext, args: RecallArgs) -> Result<RecallResult, Error> {
    let response = context
        .backends
        .recall(
            &context.principal,
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
    Ok(RecallResult {
        count: fragments.len(),
        fragments,
        total_tokens: response.total_tokens,
        truncated_by_budget: response.truncated_by_budget,
        layers: response.layers,
    })
}
