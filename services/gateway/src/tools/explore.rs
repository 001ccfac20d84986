//! Looking around memory without a search: `memory_stats`,
//! `graph_explore`, `fragment_history`, `reconstruct_history` and
//! `search_traces`.

use std::collections::BTreeMap;

use mneme_core::Error;
use mneme_proto::v1;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::kinds::{FragmentKind, wire_name};
use super::recall::{LinkRelation, RecalledMemory, TimeRange, memory, rfc3339};
use super::{EXAMPLE_FRAGMENT_ID, ToolContext, ToolSpec};

/// Arguments of `memory_stats`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct StatsArgs {
    /// Count this agent's memories besides the shared ones.
    pub agent_id: Option<String>,
}

/// Result of `memory_stats`: the caller's memories only.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct StatsResult {
    /// Valid memories.
    pub total: u64,
    pub anchors: u64,
    /// Memories replaced by newer ones (kept for history).
    pub superseded: u64,
    /// Memories searchable by meaning.
    pub embedded: u64,
    /// Memories still waiting for their embedding.
    pub awaiting_embedding: u64,
    /// Memories the embedding provider rejected repeatedly; still found by
    /// their words.
    pub embedding_parked: u64,
    /// Pairs of memories waiting for a model to judge whether they
    /// contradict each other.
    pub contradictions_pending: u64,
    /// Pairs found contradictory (linked with `contradicts`).
    pub contradictions: u64,
    /// When maintenance last ran over this tenant's memory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_consolidated_at: Option<chrono::DateTime<chrono::Utc>>,
    pub average_importance: f64,
    pub topics: u64,
    pub by_type: BTreeMap<String, u64>,
    pub by_tier: BTreeMap<String, u64>,
    /// The largest topics, largest first.
    pub top_topics: Vec<TopicCount>,
    pub links: u64,
    pub cases: u64,
    /// Estimated tokens of all valid memories.
    pub total_tokens: u64,
    /// Recalls in the last 7 days.
    pub searches_7d: u64,
    pub zero_result_rate_7d: f64,
    pub average_search_ms_7d: f64,
    /// `tool_feedback` calls in the last 7 days.
    pub feedback_7d: u64,
    pub relevant_rate_7d: f64,
    pub sufficient_rate_7d: f64,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct TopicCount {
    pub topic: String,
    pub count: u64,
}

/// Arguments of `graph_explore`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct GraphArgs {
    /// The memory to start from.
    pub start_id: String,
    /// Relations to follow (default caused_by and resolved_by).
    #[serde(default)]
    pub relation_types: Vec<LinkRelation>,
    /// Hops from the start, 1–3 (default 1).
    pub depth: Option<u32>,
    /// Most memories returned (default 50, at most 200).
    pub limit: Option<u32>,
    /// The agent whose memories to act on besides the shared ones; defaults to the shared agent.
    pub agent_id: Option<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct GraphNode {
    pub id: String,
    /// The first 80 characters.
    pub preview: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub topic: String,
    pub importance: f32,
    /// Hops from the start.
    pub depth: u32,
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct GraphEdge {
    pub from: String,
    pub to: String,
    pub relation_type: String,
    pub weight: f32,
}

/// Result of `graph_explore`.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct GraphResult {
    pub start_id: String,
    /// The start first, then by distance.
    pub nodes: Vec<GraphNode>,
    pub edges: Vec<GraphEdge>,
    pub count: usize,
    /// True when `limit` cut the graph.
    pub truncated: bool,
}

/// Arguments of `fragment_history`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct HistoryArgs {
    /// Id of the memory.
    pub id: String,
    /// The agent whose memories to act on besides the shared ones; defaults to the shared agent.
    pub agent_id: Option<String>,
}

/// An earlier state of a memory.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Version {
    pub content: String,
    pub topic: String,
    pub keywords: Vec<String>,
    #[serde(rename = "type")]
    pub kind: String,
    pub importance: f32,
    pub is_anchor: bool,
    /// When this state was replaced by an amendment.
    pub amended_at: String,
}

/// Result of `fragment_history`.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct HistoryResult {
    pub current: RecalledMemory,
    /// Earlier states, oldest first.
    pub versions: Vec<Version>,
    /// Memories this one replaced.
    pub supersedes: Vec<RecalledMemory>,
    /// Memories that replaced this one, oldest first.
    pub superseded_by: Vec<RecalledMemory>,
}

/// Arguments of `reconstruct_history`. Give `caseId` or `entity`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct ReconstructArgs {
    /// The case to reconstruct. Give this or `entity`.
    pub case_id: Option<String>,
    /// A topic, or a keyword the memories carry.
    pub entity: Option<String>,
    pub time_range: Option<TimeRange>,
    /// Only memories matching this text.
    pub query: Option<String>,
    /// Most memories (default 100, at most 500).
    pub limit: Option<u32>,
    /// Workspace to search besides global memories; defaults to the key's.
    pub workspace: Option<String>,
    /// The agent whose memories to act on besides the shared ones; defaults to the shared agent.
    pub agent_id: Option<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Chain {
    /// Memory ids from cause to effect (or problem to resolution).
    pub fragment_ids: Vec<String>,
    /// The relation between each consecutive pair.
    pub relations: Vec<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CaseEvent {
    pub id: String,
    pub event_type: String,
    pub summary: String,
    pub created_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source_fragment_id: Option<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CaseEventEdge {
    pub from: String,
    pub to: String,
    pub edge_type: String,
}

/// Result of `reconstruct_history`.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ReconstructResult {
    /// A one-paragraph account.
    pub summary: String,
    /// The memories in the order things happened.
    pub timeline: Vec<RecalledMemory>,
    pub causal_chains: Vec<Chain>,
    /// Open problems: open memories and errors nothing resolved.
    pub unresolved: Vec<RecalledMemory>,
    /// The case's events, oldest first (with `caseId`).
    pub events: Vec<CaseEvent>,
    pub event_edges: Vec<CaseEventEdge>,
}

/// Arguments of `search_traces`: structured filters, no ranking.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct TracesArgs {
    /// Only memories of this kind.
    #[serde(alias = "event_type")]
    pub event_type: Option<FragmentKind>,
    /// Topic contains this (case-insensitive).
    #[serde(alias = "entity_key")]
    pub entity_key: Option<String>,
    /// Content contains this (case-insensitive).
    pub keyword: Option<String>,
    /// Only memories of this case.
    #[serde(alias = "case_id")]
    pub case_id: Option<String>,
    /// Only memories stored in this session.
    #[serde(alias = "session_id")]
    pub session_id: Option<String>,
    #[serde(alias = "time_range")]
    pub time_range: Option<TimeRange>,
    /// Default 20, at most 100.
    pub limit: Option<u32>,
    /// Workspace to search besides global memories; defaults to the key's.
    pub workspace: Option<String>,
    /// The agent whose memories to act on besides the shared ones; defaults to the shared agent.
    pub agent_id: Option<String>,
}

/// Result of `search_traces`.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct TracesResult {
    /// Newest first.
    pub traces: Vec<RecalledMemory>,
    pub count: usize,
}

pub(super) fn tools() -> Vec<ToolSpec> {
    vec![
        ToolSpec::new(
            "memory_stats",
            "Memory statistics",
            "Counts of your memories (by type, tier and topic), links, cases and embeddings, \
             and how recall and feedback went over the last 7 days. Your writes show at once; \
             background work (embeddings, consolidation) and searches within seconds.",
            stats,
        )
        .example(json!({})),
        ToolSpec::new(
            "graph_explore",
            "Explore links",
            "Follow the links of a memory — by default its causes and resolutions — up to 3 \
             hops, to see how errors, fixes and decisions connect.",
            graph,
        )
        .example(json!({
            "startId": EXAMPLE_FRAGMENT_ID,
            "relationTypes": ["caused_by", "resolved_by", "related"],
            "depth": 2
        })),
        ToolSpec::new(
            "fragment_history",
            "Memory history",
            "A memory's earlier versions (amendments) and the memories it replaced or that \
             replaced it.",
            history,
        )
        .example(json!({"id": EXAMPLE_FRAGMENT_ID})),
        ToolSpec::new(
            "reconstruct_history",
            "Reconstruct history",
            "Tell the story of a case or a subject: its memories in time order, the causal \
             chains among them, what is still unresolved and, for a case, its events.",
            reconstruct,
        )
        .example(json!({
            "entity": "payments-api",
            "timeRange": {"from": "30 days ago", "to": "today"},
            "limit": 50
        })),
        ToolSpec::new(
            "search_traces",
            "Search traces",
            "List memories by exact filters (type, topic, content words, case, session, time) \
             without ranking, newest first. For finding by meaning, use `recall`.",
            traces,
        )
        .example(json!({"eventType": "fact", "entityKey": "payments", "limit": 10})),
    ]
}

fn unsigned_map(counts: Vec<v1::CountByName>) -> BTreeMap<String, u64> {
    counts.into_iter().map(|c| (c.name, c.count)).collect()
}

async fn stats(context: ToolContext, args: StatsArgs) -> Result<StatsResult, Error> {
    let s = context
        .backends
        .stats(
            &context.principal,
            v1::StatsRequest {
                agent_id: args.agent_id,
            },
        )
        .await?;
    Ok(StatsResult {
        total: s.total,
        anchors: s.anchors,
        superseded: s.superseded,
        embedded: s.embedded,
        awaiting_embedding: s.awaiting_embedding,
        embedding_parked: s.embedding_parked,
        contradictions_pending: s.contradictions_pending,
        contradictions: s.contradictions,
        last_consolidated_at: s
            .last_consolidated_unix_ms
            .and_then(chrono::DateTime::from_timestamp_millis),
        average_importance: s.average_importance,
        topics: s.topics,
        by_type: unsigned_map(s.by_type),
        by_tier: unsigned_map(s.by_tier),
        top_topics: s
            .top_topics
            .into_iter()
            .map(|c| TopicCount {
                topic: c.name,
                count: c.count,
            })
            .collect(),
        links: s.links,
        cases: s.cases,
        total_tokens: s.total_tokens,
        searches_7d: s.searches_7d,
        zero_result_rate_7d: s.zero_result_rate_7d,
        average_search_ms_7d: s.average_search_ms_7d,
        feedback_7d: s.feedback_7d,
        relevant_rate_7d: s.relevant_rate_7d,
        sufficient_rate_7d: s.sufficient_rate_7d,
    })
}

async fn graph(context: ToolContext, args: GraphArgs) -> Result<GraphResult, Error> {
    let response = context
        .backends
        .graph_explore(
            &context.principal,
            v1::GraphExploreRequest {
                start_id: args.start_id.clone(),
                relation_types: args.relation_types.into_iter().map(wire_name).collect(),
                depth: args.depth,
                limit: args.limit,
                agent_id: args.agent_id,
            },
        )
        .await?;
    Ok(GraphResult {
        start_id: args.start_id,
        count: response.nodes.len(),
        nodes: response
            .nodes
            .into_iter()
            .map(|n| GraphNode {
                id: n.id,
                preview: n.preview,
                kind: n.r#type,
                topic: n.topic,
                importance: n.importance,
                depth: n.depth,
            })
            .collect(),
        edges: response
            .edges
            .into_iter()
            .map(|e| GraphEdge {
                from: e.from_id,
                to: e.to_id,
                relation_type: e.relation_type,
                weight: e.weight,
            })
            .collect(),
        truncated: response.truncated,
    })
}

async fn history(context: ToolContext, args: HistoryArgs) -> Result<HistoryResult, Error> {
    let response = context
        .backends
        .fragment_history(
            &context.principal,
            v1::FragmentHistoryRequest {
                id: args.id,
                agent_id: args.agent_id,
            },
        )
        .await?;
    let current = response.current.ok_or_else(Error::fragment_not_found)?;
    Ok(HistoryResult {
        current: memory(current),
        versions: response
            .versions
            .into_iter()
            .map(|v| Version {
                content: v.content,
                topic: v.topic,
                keywords: v.keywords,
                kind: v.r#type,
                importance: v.importance,
                is_anchor: v.is_anchor,
                amended_at: rfc3339(v.amended_at_unix_ms),
            })
            .collect(),
        supersedes: response.supersedes.into_iter().map(memory).collect(),
        superseded_by: response.superseded_by.into_iter().map(memory).collect(),
    })
}

async fn reconstruct(
    context: ToolContext,
    args: ReconstructArgs,
) -> Result<ReconstructResult, Error> {
    let (time_from, time_to) = args.time_range.map_or((None, None), |r| (r.from, r.to));
    let response = context
        .backends
        .reconstruct_history(
            &context.principal,
            v1::ReconstructHistoryRequest {
                case_id: args.case_id,
                entity: args.entity,
                time_from,
                time_to,
                query: args.query,
                limit: args.limit,
                workspace: args.workspace,
                agent_id: args.agent_id,
            },
        )
        .await?;
    Ok(ReconstructResult {
        summary: response.summary,
        timeline: response.timeline.into_iter().map(memory).collect(),
        causal_chains: response
            .causal_chains
            .into_iter()
            .map(|c| Chain {
                fragment_ids: c.fragment_ids,
                relations: c.relations,
            })
            .collect(),
        unresolved: response.unresolved.into_iter().map(memory).collect(),
        events: response
            .events
            .into_iter()
            .map(|e| CaseEvent {
                id: e.id,
                event_type: e.event_type,
                summary: e.summary,
                created_at: rfc3339(e.created_at_unix_ms),
                source_fragment_id: e.source_fragment_id,
            })
            .collect(),
        event_edges: response
            .event_edges
            .into_iter()
            .map(|e| CaseEventEdge {
                from: e.from_event,
                to: e.to_event,
                edge_type: e.edge_type,
            })
            .collect(),
    })
}

async fn traces(context: ToolContext, args: TracesArgs) -> Result<TracesResult, Error> {
    let (time_from, time_to) = args.time_range.map_or((None, None), |r| (r.from, r.to));
    let response = context
        .backends
        .search_traces(
            &context.principal,
            v1::SearchTracesRequest {
                event_type: args.event_type.map(|k| k.as_str().to_owned()),
                entity_key: args.entity_key,
                keyword: args.keyword,
                case_id: args.case_id,
                session_id: args.session_id,
                time_from,
                time_to,
                limit: args.limit,
                workspace: args.workspace,
                agent_id: args.agent_id,
            },
        )
        .await?;
    let traces: Vec<RecalledMemory> = response.traces.into_iter().map(memory).collect();
    Ok(TracesResult {
        count: traces.len(),
        traces,
    })
}
