//! Looking around in memory without a search: one fragment (`fetch`),
//! counts (`stats`), the link graph (`graph_explore`), a fragment's history,
//! the story of a case (`reconstruct_history`) and structured listings
//! (`search_traces`). Everything is limited to what the caller can read.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, LazyLock};

use chrono::{DateTime, Utc};
use mneme_core::principal::resolve_agent_id;
use mneme_core::timerange::parse_range;
use mneme_core::{Error, FragmentType, Permission, Principal, Result};
use mneme_proto::v1::{
    CaseEventEdge, CaseEventNode, CausalChain, CountByName, FetchRequest, FragmentHistoryRequest,
    FragmentHistoryResponse, FragmentVersion, GraphEdge, GraphExploreRequest, GraphExploreResponse,
    GraphNode, RecalledFragment, ReconstructHistoryRequest, ReconstructHistoryResponse,
    SearchTracesRequest, SearchTracesResponse, StatsRequest, StatsResponse,
};
use mneme_store::fragments::{self, Fragment, TraceFilter};
use mneme_store::{TenantTx, cases, links, stats, versions};
use mneme_telemetry::metrics::register;
use prometheus::{IntCounterVec, Opts};
use prost::Message;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::RecallServer;
use crate::rank::plain;

const PREVIEW_CHARS: usize = 80;
const GRAPH_DEFAULT_LIMIT: u32 = 50;
const GRAPH_MAX_LIMIT: u32 = 200;
const HISTORY_DEFAULT_LIMIT: u32 = 100;
const HISTORY_MAX_LIMIT: u32 = 500;
const TRACES_DEFAULT_LIMIT: u32 = 20;
const TRACES_MAX_LIMIT: u32 = 100;
/// Relations that carry cause and resolution.
const CAUSAL: [&str; 2] = ["caused_by", "resolved_by"];

static STATS_CACHE: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register(
        IntCounterVec::new(
            Opts::new(
                "mneme_recall_stats_cache_total",
                "memory_stats answers served from the cache (hit) or computed (miss).",
            ),
            &["outcome"],
        )
        .expect("valid metric"),
    )
});

/// `memory_stats` answers by tenant, view and change number: the shared
/// cache's entries, held in the process for as long, so that calls missing
/// the shared cache together wait for one computation instead of each
/// running its own.
#[derive(Debug, Clone)]
pub(crate) struct StatsAnswers(moka::future::Cache<(Uuid, String, i64), Arc<StatsResponse>>);

impl StatsAnswers {
    /// Answers kept at most; one per tenant and view asked within `ttl`.
    const CAPACITY: u64 = 10_000;

    pub(crate) fn new(ttl: std::time::Duration) -> Self {
        Self(
            moka::future::Cache::builder()
                .max_capacity(Self::CAPACITY)
                .time_to_live(ttl.max(std::time::Duration::from_millis(1)))
                .build(),
        )
    }
}

/// Names what a `memory_stats` answer depends on besides the tenant: the
/// keys the caller reads and its agent.
fn stats_view(key_ids: &[Uuid], agent_id: &str) -> String {
    let mut key_ids = key_ids.to_vec();
    key_ids.sort_unstable();
    let mut digest = Sha256::new();
    for key_id in &key_ids {
        digest.update(key_id.as_bytes());
    }
    digest.update(agent_id.as_bytes());
    hex::encode(&digest.finalize()[..16])
}

fn fragment_id(raw: &str) -> Result<Uuid> {
    raw.trim().parse().map_err(|_| Error::fragment_not_found())
}

fn preview(content: &str) -> String {
    content.chars().take(PREVIEW_CHARS).collect()
}

fn counts(pairs: Vec<(String, i64)>) -> Vec<CountByName> {
    pairs
        .into_iter()
        .map(|(name, count)| CountByName {
            name,
            count: u64::try_from(count).unwrap_or(0),
        })
        .collect()
}

fn non_empty(value: &Option<String>) -> Option<&str> {
    value.as_deref().map(str::trim).filter(|v| !v.is_empty())
}

impl RecallServer {
    pub async fn fetch(
        &self,
        principal: &Principal,
        request: FetchRequest,
    ) -> Result<RecalledFragment> {
        principal.require(Permission::Read)?;
        let id = fragment_id(&request.id)?;
        let agent_id = resolve_agent_id(request.agent_id.as_deref(), principal)?;
        let mut client = self.store.client().await?;
        let tx = TenantTx::begin(&mut client, principal.tenant_id).await?;
        let found = fragments::fetch(&tx, &principal.readable_key_ids(), &[id]).await?;
        tx.commit().await?;
        found
            .into_iter()
            .find(|f| {
                f.agent_id == agent_id || f.agent_id == mneme_core::principal::DEFAULT_AGENT_ID
            })
            .map(plain)
            .ok_or_else(Error::fragment_not_found)
    }

    /// The caller's statistics, from the cache while no write has changed
    /// the tenant (see `mneme_cache::stats`).
    pub async fn stats(
        &self,
        principal: &Principal,
        request: StatsRequest,
    ) -> Result<StatsResponse> {
        principal.require(Permission::Read)?;
        let agent_id = resolve_agent_id(request.agent_id.as_deref(), principal)?;
        let key_ids = principal.readable_key_ids();
        let ttl = self.settings.stats_cache;
        if ttl.is_zero() {
            return self.compute_stats(principal, &key_ids, &agent_id).await;
        }
        let (tenant, view) = (
            principal.tenant_id.to_string(),
            stats_view(&key_ids, &agent_id),
        );
        let Some(cached) = self.cache.cached_stats(&tenant, &view).await else {
            // Redis is out of reach: compute, and cache nothing.
            return self.compute_stats(principal, &key_ids, &agent_id).await;
        };
        if let Some(stats) = cached
            .answer
            .and_then(|answer| StatsResponse::decode(answer.as_slice()).ok())
        {
            STATS_CACHE.with_label_values(&["hit"]).inc();
            return Ok(stats);
        }
        let flight = (principal.tenant_id, view, cached.change);
        let stats = self
            .stats_answers
            .0
            // Boxed: the seven pipelined statements make a large future.
            .try_get_with_by_ref(
                &flight,
                Box::pin(async {
                    STATS_CACHE.with_label_values(&["miss"]).inc();
                    let stats = self.compute_stats(principal, &key_ids, &agent_id).await?;
                    let (_, view, change) = &flight;
                    self.cache
                        .store_stats(&tenant, view, *change, &stats.encode_to_vec(), ttl)
                        .await;
                    Ok::<_, Error>(Arc::new(stats))
                }),
            )
            .await
            .map_err(|error| (*error).clone())?;
        Ok(StatsResponse::clone(&stats))
    }

    async fn compute_stats(
        &self,
        principal: &Principal,
        key_ids: &[Uuid],
        agent_id: &str,
    ) -> Result<StatsResponse> {
        let mut client = self.store.client().await?;
        let tx = TenantTx::begin(&mut client, principal.tenant_id).await?;
        let s = stats::collect(&tx, key_ids, agent_id).await?;
        tx.commit().await?;
        let unsigned = |n: i64| u64::try_from(n).unwrap_or(0);
        Ok(StatsResponse {
            total: unsigned(s.total),
            anchors: unsigned(s.anchors),
            superseded: unsigned(s.superseded),
            embedded: unsigned(s.embedded),
            awaiting_embedding: unsigned(s.awaiting_embedding),
            average_importance: s.average_importance,
            topics: unsigned(s.topics),
            by_type: counts(s.by_type),
            by_tier: counts(s.by_tier),
            top_topics: counts(s.top_topics),
            links: unsigned(s.links),
            searches_7d: unsigned(s.searches_7d),
            zero_result_rate_7d: s.zero_result_rate_7d,
            average_search_ms_7d: s.average_search_ms_7d,
            feedback_7d: unsigned(s.feedback_7d),
            relevant_rate_7d: s.relevant_rate_7d,
            sufficient_rate_7d: s.sufficient_rate_7d,
            cases: unsigned(s.cases),
            total_tokens: unsigned(s.total_tokens),
            embedding_parked: unsigned(s.embedding_parked),
            contradictions_pending: unsigned(s.contradictions_pending),
            contradictions: unsigned(s.contradictions),
            last_consolidated_unix_ms: s.last_consolidated.map(|at| at.timestamp_millis()),
        })
    }

    /// Breadth-first over links from `start_id`, up to `depth` hops and
    /// `limit` nodes.
    pub async fn graph_explore(
        &self,
        principal: &Principal,
        request: GraphExploreRequest,
    ) -> Result<GraphExploreResponse> {
        principal.require(Permission::Read)?;
        let start = fragment_id(&request.start_id)?;
        let depth = request.depth.unwrap_or(1).clamp(1, 3);
        let limit = request
            .limit
            .unwrap_or(GRAPH_DEFAULT_LIMIT)
            .clamp(1, GRAPH_MAX_LIMIT) as usize;
        let relations: Vec<String> = if request.relation_types.is_empty() {
            CAUSAL.map(String::from).to_vec()
        } else {
            request.relation_types.clone()
        };
        let key_ids = principal.readable_key_ids();
        let mut client = self.store.client().await?;
        let tx = TenantTx::begin(&mut client, principal.tenant_id).await?;
        if fragments::fetch(&tx, &key_ids, &[start]).await?.is_empty() {
            return Err(Error::fragment_not_found());
        }
        let mut depth_of: HashMap<Uuid, u32> = HashMap::from([(start, 0)]);
        let mut order = vec![start];
        let mut edges: Vec<GraphEdge> = Vec::new();
        let mut seen_edges: HashSet<(Uuid, Uuid, String)> = HashSet::new();
        let mut frontier = vec![start];
        let mut truncated = false;
        for hop in 1..=depth {
            if frontier.is_empty() {
                break;
            }
            let found =
                links::around(&tx, &key_ids, &frontier, Some(&relations), limit as i64).await?;
            let mut next = Vec::new();
            for link in found {
                let (from, to) = if link.outgoing {
                    (link.anchor, link.other)
                } else {
                    (link.other, link.anchor)
                };
                if let std::collections::hash_map::Entry::Vacant(entry) = depth_of.entry(link.other)
                {
                    if order.len() >= limit {
                        truncated = true;
                        continue;
                    }
                    entry.insert(hop);
                    order.push(link.other);
                    next.push(link.other);
                }
                if seen_edges.insert((from, to, link.relation_type.clone())) {
                    edges.push(GraphEdge {
                        from_id: from.to_string(),
                        to_id: to.to_string(),
                        relation_type: link.relation_type,
                        weight: link.weight,
                    });
                }
            }
            frontier = next;
        }
        let rows: HashMap<Uuid, Fragment> = fragments::fetch(&tx, &key_ids, &order)
            .await?
            .into_iter()
            .map(|f| (f.id, f))
            .collect();
        tx.commit().await?;
        let nodes = order
            .iter()
            .filter_map(|id| {
                let f = rows.get(id)?;
                Some(GraphNode {
                    id: id.to_string(),
                    preview: preview(&f.content),
                    r#type: f.fragment_type.clone(),
                    topic: f.topic.clone(),
                    importance: f.importance,
                    depth: depth_of[id],
                })
            })
            .collect();
        Ok(GraphExploreResponse {
            nodes,
            edges,
            truncated,
        })
    }

    pub async fn fragment_history(
        &self,
        principal: &Principal,
        request: FragmentHistoryRequest,
    ) -> Result<FragmentHistoryResponse> {
        principal.require(Permission::Read)?;
        let id = fragment_id(&request.id)?;
        let key_ids = principal.readable_key_ids();
        let mut client = self.store.client().await?;
        let tx = TenantTx::begin(&mut client, principal.tenant_id).await?;
        let current = fragments::fetch(&tx, &key_ids, &[id])
            .await?
            .pop()
            .ok_or_else(Error::fragment_not_found)?;
        let history = versions::list(&tx, id).await?;
        let (older, newer) = fragments::supersession(&tx, &key_ids, id).await?;
        let ordered = |ids: &[Uuid], mut rows: Vec<Fragment>| -> Vec<RecalledFragment> {
            rows.sort_by_key(|f| ids.iter().position(|i| *i == f.id));
            rows.into_iter().map(plain).collect()
        };
        let supersedes = ordered(&older, fragments::fetch(&tx, &key_ids, &older).await?);
        let superseded_by = ordered(&newer, fragments::fetch(&tx, &key_ids, &newer).await?);
        tx.commit().await?;
        Ok(FragmentHistoryResponse {
            current: Some(plain(current)),
            versions: history
                .into_iter()
                .map(|v| FragmentVersion {
                    content: v.content,
                    topic: v.topic,
                    keywords: v.keywords,
                    r#type: v.fragment_type,
                    importance: v.importance,
                    is_anchor: v.is_anchor,
                    amended_at_unix_ms: v.amended_at.timestamp_millis(),
                })
                .collect(),
            supersedes,
            superseded_by,
        })
    }

    pub async fn reconstruct_history(
        &self,
        principal: &Principal,
        request: ReconstructHistoryRequest,
    ) -> Result<ReconstructHistoryResponse> {
        principal.require(Permission::Read)?;
        let case_id = non_empty(&request.case_id);
        let entity = non_empty(&request.entity);
        if case_id.is_some() == entity.is_some() {
            return Err(Error::invalid_argument("give either caseId or entity"));
        }
        let agent_id = resolve_agent_id(request.agent_id.as_deref(), principal)?;
        let (time_from, time_to) = parse_range(
            request.time_from.as_deref(),
            request.time_to.as_deref(),
            Utc::now(),
        )?;
        let limit = request
            .limit
            .unwrap_or(HISTORY_DEFAULT_LIMIT)
            .clamp(1, HISTORY_MAX_LIMIT);
        let tsquery = non_empty(&request.query).and_then(|q| self.tokenizer.tsquery_literal(q));
        let workspace = request
            .workspace
            .clone()
            .or_else(|| principal.workspace.clone());
        let key_ids = principal.readable_key_ids();

        let mut client = self.store.client().await?;
        let tx = TenantTx::begin(&mut client, principal.tenant_id).await?;
        let timeline = fragments::traces(
            &tx,
            &key_ids,
            &agent_id,
            &TraceFilter {
                case_id,
                entity,
                tsquery: tsquery.as_deref(),
                time_from,
                time_to,
                workspace: workspace.as_deref(),
                ..TraceFilter::default()
            },
            i64::from(limit),
        )
        .await?;
        let ids: Vec<Uuid> = timeline.iter().map(|f| f.id).collect();
        let causal: Vec<String> = CAUSAL.map(String::from).to_vec();
        let edges = links::among(&tx, &ids, Some(&causal)).await?;
        let events = match case_id {
            Some(case_id) => {
                cases::events(&tx, &key_ids, Some(case_id), None, i64::from(limit)).await?
            }
            None => Vec::new(),
        };
        let event_ids: Vec<Uuid> = events.iter().map(|e| e.id).collect();
        let event_edges = cases::edges(&tx, &event_ids).await?;
        tx.commit().await?;

        let chains = causal_chains(&ids, &edges);
        let resolved: HashSet<Uuid> = edges
            .iter()
            .filter(|e| e.relation_type == "resolved_by")
            .map(|e| e.from_id)
            .collect();
        let unresolved: Vec<RecalledFragment> = timeline
            .iter()
            .filter(|f| f.valid_to.is_none())
            .filter(|f| {
                f.resolution_status.as_deref() == Some("open")
                    || (f.fragment_type == FragmentType::Error.as_str()
                        && f.resolution_status.as_deref() != Some("resolved")
                        && !resolved.contains(&f.id))
            })
            .cloned()
            .map(plain)
            .collect();
        let summary = summarize(&timeline, chains.len(), unresolved.len(), events.len());
        Ok(ReconstructHistoryResponse {
            timeline: timeline.into_iter().map(plain).collect(),
            causal_chains: chains,
            unresolved,
            events: events
                .into_iter()
                .map(|e| CaseEventNode {
                    id: e.id.to_string(),
                    event_type: e.event_type,
                    summary: e.summary,
                    created_at_unix_ms: e.created_at.timestamp_millis(),
                    source_fragment_id: e.source_fragment_id.map(|id| id.to_string()),
                })
                .collect(),
            event_edges: event_edges
                .into_iter()
                .map(|e| CaseEventEdge {
                    from_event: e.from_event.to_string(),
                    to_event: e.to_event.to_string(),
                    edge_type: e.edge_type,
                })
                .collect(),
            summary,
        })
    }

    pub async fn search_traces(
        &self,
        principal: &Principal,
        request: SearchTracesRequest,
    ) -> Result<SearchTracesResponse> {
        principal.require(Permission::Read)?;
        let agent_id = resolve_agent_id(request.agent_id.as_deref(), principal)?;
        let fragment_type = non_empty(&request.event_type)
            .map(|t| t.parse::<FragmentType>())
            .transpose()?;
        let (time_from, time_to) = parse_range(
            request.time_from.as_deref(),
            request.time_to.as_deref(),
            Utc::now(),
        )?;
        let limit = request
            .limit
            .unwrap_or(TRACES_DEFAULT_LIMIT)
            .clamp(1, TRACES_MAX_LIMIT);
        let workspace = request
            .workspace
            .clone()
            .or_else(|| principal.workspace.clone());
        let mut client = self.store.client().await?;
        let tx = TenantTx::begin(&mut client, principal.tenant_id).await?;
        let traces = fragments::traces(
            &tx,
            // Key groups included (the reference searched only the own key).
            &principal.readable_key_ids(),
            &agent_id,
            &TraceFilter {
                fragment_type: fragment_type.map(FragmentType::as_str),
                topic_contains: non_empty(&request.entity_key),
                content_contains: non_empty(&request.keyword),
                case_id: non_empty(&request.case_id),
                session_id: non_empty(&request.session_id),
                time_from,
                time_to,
                workspace: workspace.as_deref(),
                ..TraceFilter::default()
            },
            i64::from(limit),
        )
        .await?;
        tx.commit().await?;
        Ok(SearchTracesResponse {
            traces: traces.into_iter().map(plain).collect(),
        })
    }
}

/// Causal chains by breadth-first search: from each fragment that nothing
/// points to (a root cause or an unresolved problem), follow `caused_by`
/// backwards (effect → cause reads as cause → effect) and `resolved_by`
/// forwards (problem → resolution), one chain per path end.
fn causal_chains(ids: &[Uuid], edges: &[links::Edge]) -> Vec<CausalChain> {
    // Normalise every edge to "leads to": cause → effect, problem → fix.
    let mut next: HashMap<Uuid, Vec<(Uuid, &str)>> = HashMap::new();
    let mut has_parent: HashSet<Uuid> = HashSet::new();
    for edge in edges {
        let (from, to) = if edge.relation_type == "caused_by" {
            (edge.to_id, edge.from_id)
        } else {
            (edge.from_id, edge.to_id)
        };
        next.entry(from)
            .or_default()
            .push((to, edge.relation_type.as_str()));
        has_parent.insert(to);
    }
    let mut chains = Vec::new();
    for root in ids
        .iter()
        .filter(|id| next.contains_key(id) && !has_parent.contains(id))
    {
        let mut queue: VecDeque<(Vec<Uuid>, Vec<String>)> =
            VecDeque::from([(vec![*root], Vec::new())]);
        while let Some((path, relations)) = queue.pop_front() {
            let last = *path.last().expect("paths are never empty");
            let successors: Vec<&(Uuid, &str)> = next
                .get(&last)
                .map(|s| s.iter().filter(|(n, _)| !path.contains(n)).collect())
                .unwrap_or_default();
            if successors.is_empty() {
                if path.len() > 1 {
                    chains.push(CausalChain {
                        fragment_ids: path.iter().map(Uuid::to_string).collect(),
                        relations,
                    });
                }
                continue;
            }
            for (successor, relation) in successors {
                let mut path = path.clone();
                path.push(*successor);
                let mut relations = relations.clone();
                relations.push((*relation).to_owned());
                queue.push_back((path, relations));
            }
        }
    }
    chains
}

fn summarize(timeline: &[Fragment], chains: usize, unresolved: usize, events: usize) -> String {
    let (Some(first), Some(last)) = (timeline.first(), timeline.last()) else {
        return "no memories match".into();
    };
    let when = |f: &Fragment| -> DateTime<Utc> { f.occurred_at.unwrap_or(f.created_at) };
    let mut by_type: Vec<(String, usize)> = Vec::new();
    for fragment in timeline {
        match by_type
            .iter_mut()
            .find(|(t, _)| *t == fragment.fragment_type)
        {
            Some((_, n)) => *n += 1,
            None => by_type.push((fragment.fragment_type.clone(), 1)),
        }
    }
    let kinds: Vec<String> = by_type.iter().map(|(t, n)| format!("{n} {t}")).collect();
    format!(
        "{} memories from {} to {} ({}); {} causal chains, {} open problems, {} case events. \
         Started with: {} Latest: {}",
        timeline.len(),
        when(first).format("%Y-%m-%d"),
        when(last).format("%Y-%m-%d"),
        kinds.join(", "),
        chains,
        unresolved,
        events,
        preview(&first.content),
        preview(&last.content),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edge(from: Uuid, to: Uuid, relation: &str) -> links::Edge {
        links::Edge {
            from_id: from,
            to_id: to,
            relation_type: relation.into(),
            weight: 1.0,
        }
    }

    #[test]
    fn chains_run_from_cause_to_effect_to_resolution() {
        let (cert, outage, fix) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
        // outage caused_by cert; outage resolved_by fix.
        let edges = vec![
            edge(outage, cert, "caused_by"),
            edge(outage, fix, "resolved_by"),
        ];
        let chains = causal_chains(&[cert, outage, fix], &edges);
        assert_eq!(chains.len(), 1);
        assert_eq!(
            chains[0].fragment_ids,
            vec![cert.to_string(), outage.to_string(), fix.to_string()]
        );
        assert_eq!(chains[0].relations, vec!["caused_by", "resolved_by"]);
    }

    #[test]
    fn cycles_do_not_loop() {
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        let edges = vec![edge(a, b, "resolved_by"), edge(b, a, "resolved_by")];
        assert!(
            causal_chains(&[a, b], &edges).is_empty(),
            "no root in a pure cycle"
        );
    }
}
