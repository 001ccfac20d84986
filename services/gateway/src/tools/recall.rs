//! `recall`.

use chrono::{DateTime, SecondsFormat, Utc};
use mneme_core::Error;
use mneme_proto::v1;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::kinds::{AffectArg, FragmentKind, ResolutionStatusArg, wire_name};
use super::{ToolContext, ToolSpec};

/// Event-time window of `recall`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct TimeRange {
    /// Start: RFC 3339 (UTC when it has no offset), a date (2024-05-01), or
    /// a relative expression such as `yesterday`, `3 days ago`, `last 2
    /// hours`, `last week`, `어제`, `3일 전`, `최근 2시간`, `지난주`.
    pub from: Option<String>,
    /// End, in the same forms (a period's end: `to: "yesterday"` includes
    /// all of yesterday).
    pub to: Option<String>,
}

/// How much detail `recall` aims at when no type is given.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Depth {
    /// Decisions and episodes.
    HighLevel,
    /// Procedures, errors and facts.
    ToolLevel,
    /// Everything.
    Detail,
}

/// Relations of links attached to results.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum LinkRelation {
    Related,
    CausedBy,
    ResolvedBy,
    PartOf,
    Contradicts,
    SupersededBy,
    CoRetrieved,
    Temporal,
}

/// Fields a result may be reduced to with `fields`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) enum Field {
    // Always returned; naming it is allowed. (A doc comment here would
    // turn the schema's enum into a `oneOf`.)
    Id,
    Content,
    Topic,
    Type,
    Keywords,
    Importance,
    TtlTier,
    IsAnchor,
    Workspace,
    CreatedAt,
    OccurredAt,
    ValidTo,
    Score,
    Similarity,
    MatchedBy,
    Explanations,
    Linked,
    ContextSummary,
    Nearby,
    CaseId,
    Goal,
    Outcome,
    Phase,
    ResolutionStatus,
    AssertionStatus,
    Affect,
    AccessCount,
    AgentId,
    Source,
}

/// Arguments of `recall`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
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
    /// Results per page (default 10, at most 50).
    #[serde(alias = "pageSize")]
    pub limit: Option<u32>,
    /// Maximum estimated tokens of content per page (default 2000).
    pub token_budget: Option<u32>,
    /// The `nextCursor` of a previous page of the same query.
    pub cursor: Option<String>,
    /// Workspace to search besides global memories; defaults to the key's.
    pub workspace: Option<String>,
    /// Agent whose memories to search besides the shared ones.
    pub agent_id: Option<String>,
    /// Attach each result's strongest links with a preview (default true).
    pub include_links: Option<bool>,
    /// Relations of the attached links (default caused_by, resolved_by, related).
    #[serde(default)]
    pub link_relation_type: Vec<LinkRelation>,
    /// Drop results whose semantic similarity is below this (0–1); results
    /// found only by words stay.
    pub threshold: Option<f32>,
    /// Also return memories that were superseded (no longer valid).
    #[serde(default)]
    pub include_superseded: bool,
    /// Only memories valid at this time (RFC 3339): written by then and not
    /// yet superseded then.
    pub as_of: Option<DateTime<Utc>>,
    /// Skip memories `context` already showed this session (default true).
    pub exclude_seen: Option<bool>,
    /// Attach context summaries and up to 3 memories of the same session
    /// written within 30 minutes.
    #[serde(default)]
    pub include_context: bool,
    /// When the remembered things happened (or were stored).
    pub time_range: Option<TimeRange>,
    /// Only memories of this case (problem being worked on).
    pub case_id: Option<String>,
    /// Only memories of this stage of the work, e.g. "fix".
    pub phase: Option<String>,
    /// Only errors and questions in this state, e.g. `open` for unsolved ones.
    pub resolution_status: Option<ResolutionStatusArg>,
    /// Only memories at least this important (0–1).
    pub min_importance: Option<f32>,
    /// `true`: only core memories; `false`: only the others.
    pub is_anchor: Option<bool>,
    /// Group results into cases with their events (see `cases`).
    #[serde(default)]
    pub case_mode: bool,
    /// Cases in case mode (default 5, at most 10).
    pub max_cases: Option<u32>,
    pub depth: Option<Depth>,
    /// Only memories with one of these affects.
    #[serde(default)]
    pub affect: Vec<AffectArg>,
    /// Return only these fields of each memory (its `id` always comes).
    #[serde(default)]
    pub fields: Vec<Field>,
}

/// A link of a recalled memory.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Linked {
    pub id: String,
    pub relation_type: String,
    pub weight: f32,
    /// `outgoing` (this → linked) or `incoming`.
    pub direction: String,
    /// The linked memory's first 60 characters.
    pub preview: String,
}

/// A memory written near a recalled one in the same session.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Nearby {
    pub id: String,
    pub preview: String,
}

/// One recalled memory (all fields unless `fields` selects some).
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
    #[serde(skip_serializing_if = "Option::is_none")]
    pub occurred_at: Option<String>,
    /// Set when the memory is no longer valid (superseded).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub valid_to: Option<String>,
    /// Ranking score (higher is better).
    pub score: f64,
    /// Cosine similarity to `text`, when semantic search found it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub similarity: Option<f32>,
    /// Search layers that found it: vector, fulltext, keyword, graph.
    pub matched_by: Vec<String>,
    /// Why it was returned, as reason codes.
    pub explanations: Vec<String>,
    pub linked: Vec<Linked>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context_summary: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub nearby: Vec<Nearby>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub case_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub goal: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resolution_status: Option<String>,
    pub assertion_status: String,
    pub affect: String,
    pub access_count: u32,
    pub agent_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

/// A suggested next step.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct RecallHint {
    /// `no_results`, `stale_results` or `consider_context`.
    pub signal: String,
    pub suggestion: String,
    /// The tool that would help.
    pub tool: String,
}

impl From<v1::Hint> for RecallHint {
    fn from(hint: v1::Hint) -> Self {
        Self {
            signal: hint.signal,
            suggestion: hint.suggestion,
            tool: hint.tool,
        }
    }
}

/// An event of a case.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CaseEventItem {
    pub event_type: String,
    pub summary: String,
    pub created_at: String,
}

/// A case of the results (case mode).
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CaseItem {
    pub case_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub goal: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resolution_status: Option<String>,
    pub events: Vec<CaseEventItem>,
    pub fragment_count: u32,
    /// The best score among the case's results.
    pub relevance: f64,
}

/// Result of `recall`.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RecallResult {
    /// The memories, best first (reduced to `fields` when given).
    pub fragments: Vec<Map<String, Value>>,
    pub count: usize,
    /// Estimated tokens of the returned content.
    pub total_tokens: u32,
    /// True when the page ended early to stay within `tokenBudget`.
    pub truncated_by_budget: bool,
    /// Search layers that ran.
    pub layers: Vec<String>,
    /// Pass as `cursor` for the next page; absent on the last page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
    pub has_more: bool,
    /// Identifies this search in `tool_feedback`.
    pub search_event_id: i64,
    pub hints: Vec<RecallHint>,
    /// With `caseMode`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cases: Vec<CaseItem>,
}

pub(crate) fn rfc3339(unix_ms: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(unix_ms)
        .unwrap_or_default()
        .to_rfc3339_opts(SecondsFormat::Millis, true)
}

pub(super) fn tools() -> Vec<ToolSpec> {
    vec![ToolSpec::new(
        "recall",
        "Recall",
        "Search long-term memory by meaning (text, any language), keywords, topic or type, with \
         filters for time, validity (asOf), case, importance and more. Returns the most relevant \
         memories first within a token budget, with a cursor for more. With no arguments, returns \
         the most important recent memories.",
        recall,
    )
    .example(json!({
        "text": "How many requests per minute does the payments API allow?",
        "topic": "payments-api",
        "limit": 5,
        "fields": ["content", "topic", "createdAt", "score"]
    }))]
}

pub(super) fn memory(f: v1::RecalledFragment) -> RecalledMemory {
    RecalledMemory {
        created_at: rfc3339(f.created_at_unix_ms),
        occurred_at: f.occurred_at_unix_ms.map(rfc3339),
        valid_to: f.valid_to_unix_ms.map(rfc3339),
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
        explanations: f.explanations,
        linked: f
            .linked
            .into_iter()
            .map(|l| Linked {
                id: l.id,
                relation_type: l.relation_type,
                weight: l.weight,
                direction: l.direction,
                preview: l.preview,
            })
            .collect(),
        context_summary: f.context_summary,
        nearby: f
            .nearby
            .into_iter()
            .map(|n| Nearby {
                id: n.id,
                preview: n.preview,
            })
            .collect(),
        case_id: f.case_id,
        goal: f.goal,
        outcome: f.outcome,
        phase: f.phase,
        resolution_status: f.resolution_status,
        assertion_status: f.assertion_status,
        affect: f.affect,
        access_count: f.access_count,
        agent_id: f.agent_id,
        source: f.source,
    }
}

/// Keeps `id` and the requested fields only. Nothing is added back: a
/// caller asking for `content` gets exactly `{id, content}`.
fn select(memory: RecalledMemory, fields: &[Field]) -> Map<String, Value> {
    let Ok(Value::Object(mut all)) = mneme_core::json::to_value(&memory) else {
        return Map::new();
    };
    if fields.is_empty() {
        return all;
    }
    let mut kept = Map::new();
    if let Some(id) = all.remove("id") {
        kept.insert("id".into(), id);
    }
    for field in fields {
        let name = wire_name(field);
        if let Some(value) = all.remove(&name) {
            kept.insert(name, value);
        }
    }
    kept
}

async fn recall(context: ToolContext, args: RecallArgs) -> Result<RecallResult, Error> {
    let (time_from, time_to) = match args.time_range {
        Some(range) => (range.from, range.to),
        None => (None, None),
    };
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
                include_links: args.include_links,
                link_relation_types: args.link_relation_type.into_iter().map(wire_name).collect(),
                threshold: args.threshold,
                include_superseded: args.include_superseded,
                as_of_unix_ms: args.as_of.map(|at| at.timestamp_millis()),
                cursor: args.cursor,
                exclude_seen: args.exclude_seen,
                include_context: args.include_context,
                time_from,
                time_to,
                case_id: args.case_id,
                phase: args.phase,
                resolution_status: args.resolution_status.map(wire_name),
                min_importance: args.min_importance,
                is_anchor: args.is_anchor,
                case_mode: args.case_mode,
                max_cases: args.max_cases,
                depth: args.depth.map(wire_name),
                affect: args.affect.into_iter().map(wire_name).collect(),
                session_id: None,
                context_text: None,
            },
        )
        .await?;
    let fragments: Vec<Map<String, Value>> = response
        .fragments
        .into_iter()
        .map(|f| select(memory(f), &args.fields))
        .collect();
    Ok(RecallResult {
        count: fragments.len(),
        fragments,
        total_tokens: response.total_tokens,
        truncated_by_budget: response.truncated_by_budget,
        layers: response.layers,
        next_cursor: response.next_cursor,
        has_more: response.has_more,
        search_event_id: response.search_event_id,
        hints: response.hints.into_iter().map(RecallHint::from).collect(),
        cases: response
            .cases
            .into_iter()
            .map(|c| CaseItem {
                case_id: c.case_id,
                goal: c.goal,
                outcome: c.outcome,
                resolution_status: c.resolution_status,
                events: c
                    .events
                    .into_iter()
                    .map(|e| CaseEventItem {
                        event_type: e.event_type,
                        summary: e.summary,
                        created_at: rfc3339(e.created_at_unix_ms),
                    })
                    .collect(),
                fragment_count: c.fragment_count,
                relevance: c.relevance,
            })
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_select_exactly_what_was_asked_plus_the_id() {
        let memory = memory(v1::RecalledFragment {
            id: "f-1".into(),
            content: "c".into(),
            access_count: 7,
            ..Default::default()
        });
        let selected = select(memory, &[Field::Content, Field::AccessCount]);
        assert_eq!(
            Value::Object(selected),
            serde_json::json!({"id": "f-1", "content": "c", "accessCount": 7})
        );
    }

    #[test]
    fn selected_numbers_keep_their_short_form() {
        let memory = memory(v1::RecalledFragment {
            id: "f-1".into(),
            importance: 0.6,
            similarity: Some(0.85),
            ..Default::default()
        });
        let selected = select(memory, &[]);
        assert_eq!(selected["importance"], serde_json::json!(0.6));
        assert_eq!(selected["similarity"], serde_json::json!(0.85));
    }
}
