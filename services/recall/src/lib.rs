//! The recall service: the read path of long-term memory
//! (`mneme.v1.RecallService`).
//!
//! Layout: [`RecallServer`] runs hybrid search; [`run`] wires configuration,
//! PostgreSQL, Redis, the embedder and the gRPC server.
//!
//! One recall, inside a single tenant transaction:
//! 1. the query embedding is computed (or read from the Redis cache) *while*
//!    the full-text and keyword layers run, pipelined on one connection;
//! 2. the vector layer searches the HNSW index of the tenant's partition;
//! 3. Reciprocal Rank Fusion merges the layers by id;
//! 4. the final score blends fused relevance with importance and recency;
//! 5. the limit and the token budget cut the list.
//!
//! Every failure of an optional part (Redis, the embedder) degrades the
//! result instead of failing it: without a query vector, recall still
//! answers from full text and keywords.
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use mneme_cache::Cache;
use mneme_config::{Config, RecallConfig};
use mneme_core::principal::resolve_agent_id;
use mneme_core::scoring::{Layer, RankedList, ScoreWeights, final_score, rrf_fuse};
use mneme_core::text::Tokenizer;
use mneme_core::{Error, FragmentType, Permission, Principal, Result};
use mneme_embed::{Embedder, TextKind};
use mneme_proto::principal::PrincipalSigner;
use mneme_proto::server::handle;
use mneme_proto::v1::recall_service_server::{RecallService, RecallServiceServer};
use mneme_proto::v1::{RecallRequest, RecallResponse, RecalledFragment};
use mneme_store::fragments::{self, Fragment, Hit, SearchScope};
use mneme_store::{Store, TenantTx};
use pgvector::Vector;
use tokio::net::TcpListener;
use tonic::{Request, Response, Status};
use uuid::Uuid;

/// Keywords taken from the query text for the keyword layer.
const QUERY_KEYWORDS: usize = 8;

/// The read-path service.
#[derive(Debug, Clone)]
pub struct RecallServer {
    store: Store,
    cache: Cache,
    embedder: Arc<dyn Embedder>,
    tokenizer: Arc<Tokenizer>,
    settings: Arc<RecallConfig>,
}

impl RecallServer {
    pub fn new(
        store: Store,
        cache: Cache,
        embedder: Arc<dyn Embedder>,
        settings: RecallConfig,
    ) -> Self {
        Self {
            store,
            cache,
            embedder,
            tokenizer: Arc::new(Tokenizer::default()),
            settings: Arc::new(settings),
        }
    }

    /// The query's embedding, from the cache or the embedder. `None` when
    /// the embedder fails: recall then runs on its lexical layers.
    async fn query_embedding(&self, text: &str) -> Option<Vector> {
        let model = self.embedder.model_id();
        let dim = self.embedder.dimension();
        if let Some(cached) = self.cache.cached_embedding(model, text, dim).await {
            return Some(Vector::from(cached));
        }
        match self
            .embedder
            .embed(&[text.to_owned()], TextKind::Query)
            .await
        {
            Ok(mut vectors) if vectors.len() == 1 => {
                let vector = vectors.remove(0);
                self.cache
                    .cache_embedding(model, text, &vector, self.settings.query_embedding_cache)
                    .await;
                Some(Vector::from(vector))
            }
            Ok(_) => None,
            Err(error) => {
                tracing::warn!(%error, "query embedding failed; recalling without the vector layer");
                None
            }
        }
    }

    /// Hybrid search over the fragments the principal can read.
    pub async fn recall(
        &self,
        principal: &Principal,
        request: RecallRequest,
    ) -> Result<RecallResponse> {
        principal.require(Permission::Read)?;
        let query = Query::new(request, principal, &self.settings, &self.tokenizer)?;
        let found = self.search(principal, &query).await?;
        let ranked = rank(
            found.rows,
            &found.candidates,
            &self.settings.weights,
            Utc::now(),
        );
        Ok(cut(ranked, query.limit, query.token_budget, found.layers))
    }

    /// Runs the layers in one tenant transaction, fuses them and loads the
    /// candidates.
    async fn search(&self, principal: &Principal, query: &Query) -> Result<Found> {
        let scope = query.scope();
        let limit = i64::try_from(self.settings.candidates_per_layer).unwrap_or(i64::MAX);
        let mut client = self.store.client().await?;
        let tx = TenantTx::begin(&mut client, principal.tenant_id).await?;

        // The query embedding is computed while the lexical layers run.
        let lexical = async {
            let fulltext = async {
                match &query.tsquery {
                    Some(q) => fragments::fulltext_search(&tx, &scope, q, limit)
                        .await
                        .map(Some),
                    None => Ok(None),
                }
            };
            let keyword = async {
                if query.keywords.is_empty() {
                    Ok(None)
                } else {
                    fragments::keyword_search(&tx, &scope, &query.keywords, limit)
                        .await
                        .map(Some)
                }
            };
            tokio::try_join!(fulltext, keyword)
        };
        let embedding = async {
            match &query.text {
                Some(text) => self.query_embedding(text).await,
                None => None,
            }
        };
        let (embedding, lexical) = tokio::join!(embedding, lexical);
        let (fulltext, keyword) = lexical?;
        let vector = match &embedding {
            Some(embedding) => Some(
                fragments::vector_search(
                    &tx,
                    &scope,
                    embedding,
                    self.embedder.model_id(),
                    self.settings.hnsw_ef_search,
                    limit,
                )
                .await?,
            ),
            None => None,
        };

        let mut similarity: HashMap<Uuid, f32> = HashMap::new();
        let mut lists: Vec<RankedList<Uuid>> = Vec::new();
        if let Some(hits) = vector {
            similarity.extend(hits.iter().map(|h| (h.id, h.score)));
            lists.push(ranked(Layer::Vector, &hits));
        }
        if let Some(hits) = fulltext {
            lists.push(ranked(Layer::FullText, &hits));
        }
        if let Some(hits) = keyword {
            lists.push(ranked(Layer::Keyword, &hits));
        }
        let layers = lists.iter().map(|l| l.layer.as_str().to_owned()).collect();

        let candidates: HashMap<Uuid, Candidate> = if lists.is_empty() && query.text.is_none() {
            // No query at all: the most important recent fragments.
            fragments::recent(&tx, &scope, limit)
                .await?
                .into_iter()
                .map(|hit| (hit.id, Candidate::default()))
                .collect()
        } else {
            rrf_fuse(&lists, self.settings.rrf_k)
                .into_iter()
                .map(|fused| {
                    let candidate = Candidate {
                        relevance: fused.relevance,
                        similarity: similarity.get(&fused.id).copied(),
                        layers: fused.layers,
                    };
                    (fused.id, candidate)
                })
                .collect()
        };
        let ids: Vec<Uuid> = candidates.keys().copied().collect();
        let rows = fragments::fetch(&tx, &query.key_ids, &ids).await?;
        tx.commit().await?;
        Ok(Found {
            candidates,
            rows,
            layers,
        })
    }
}

/// A validated recall request.
#[derive(Debug)]
struct Query {
    limit: usize,
    token_budget: usize,
    text: Option<String>,
    /// Requested keywords plus those extracted from `text`.
    keywords: Vec<String>,
    tsquery: Option<String>,
    key_ids: Vec<Uuid>,
    agent_id: String,
    workspace: Option<String>,
    topic: Option<String>,
    fragment_type: Option<FragmentType>,
}

impl Query {
    fn new(
        request: RecallRequest,
        principal: &Principal,
        settings: &RecallConfig,
        tokenizer: &Tokenizer,
    ) -> Result<Self> {
        let limit = match request.limit {
            None => settings.default_limit,
            Some(0) => return Err(Error::invalid_argument("limit must be at least 1")),
            Some(n) => (n as usize).min(settings.max_limit),
        };
        let token_budget = match request.token_budget {
            None => settings.default_token_budget,
            Some(0) => return Err(Error::invalid_argument("tokenBudget must be at least 1")),
            Some(n) => n as usize,
        };
        let fragment_type = request.r#type.as_deref().map(str::parse).transpose()?;
        let non_empty =
            |value: Option<String>| value.map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
        let text = non_empty(request.text);
        let mut keywords: Vec<String> = request
            .keywords
            .iter()
            .map(|k| k.trim().to_lowercase())
            .filter(|k| !k.is_empty())
            .collect();
        if let Some(text) = &text {
            keywords.extend(tokenizer.extract_keywords(text, QUERY_KEYWORDS));
        }
        keywords.sort();
        keywords.dedup();
        Ok(Self {
            limit,
            token_budget,
            tsquery: text.as_deref().and_then(|t| tokenizer.tsquery_literal(t)),
            text,
            keywords,
            key_ids: principal.readable_key_ids(),
            agent_id: resolve_agent_id(request.agent_id.as_deref(), principal)?,
            workspace: non_empty(request.workspace).or_else(|| principal.workspace.clone()),
            topic: non_empty(request.topic),
            fragment_type,
        })
    }

    fn scope(&self) -> SearchScope<'_> {
        SearchScope {
            key_ids: &self.key_ids,
            agent_id: &self.agent_id,
            workspace: self.workspace.as_deref(),
            topic: self.topic.as_deref(),
            fragment_type: self.fragment_type.map(FragmentType::as_str),
        }
    }
}

/// What the layers said about one fragment.
#[derive(Debug, Clone, Default, PartialEq)]
struct Candidate {
    /// Normalised RRF relevance in (0, 1]; 0 for a query-less browse.
    relevance: f64,
    similarity: Option<f32>,
    layers: Vec<Layer>,
}

/// The outcome of the search step.
#[derive(Debug)]
struct Found {
    candidates: HashMap<Uuid, Candidate>,
    rows: Vec<Fragment>,
    layers: Vec<String>,
}

/// Scores candidates (relevance, importance, recency), best first.
fn rank(
    rows: Vec<Fragment>,
    candidates: &HashMap<Uuid, Candidate>,
    weights: &ScoreWeights,
    now: DateTime<Utc>,
) -> Vec<RecalledFragment> {
    let mut scored: Vec<RecalledFragment> = rows
        .into_iter()
        .filter_map(|row| {
            let candidate = candidates.get(&row.id)?;
            let age_days = (now - row.created_at).num_seconds() as f64 / 86_400.0;
            let score = final_score(
                candidate.relevance,
                f64::from(row.importance),
                age_days,
                weights,
            );
            Some(RecalledFragment {
                id: row.id.to_string(),
                content: row.content,
                topic: row.topic,
                r#type: row.fragment_type,
                keywords: row.keywords,
                importance: row.importance,
                ttl_tier: row.ttl_tier,
                is_anchor: row.is_anchor,
                workspace: row.workspace,
                created_at_unix_ms: row.created_at.timestamp_millis(),
                score,
                similarity: candidate.similarity,
                matched_by: candidate
                    .layers
                    .iter()
                    .map(|l| l.as_str().to_owned())
                    .collect(),
                estimated_tokens: u32::try_from(row.estimated_tokens).unwrap_or(0),
            })
        })
        .collect();
    scored.sort_by(|a, b| b.score.total_cmp(&a.score));
    scored
}

/// Keeps at most `limit` fragments within `token_budget`, in rank order. A
/// fragment that does not fit is skipped, so one long fragment cannot hide
/// every shorter one after it.
fn cut(
    ranked: Vec<RecalledFragment>,
    limit: usize,
    token_budget: usize,
    layers: Vec<String>,
) -> RecallResponse {
    let mut total_tokens = 0usize;
    let mut truncated_by_budget = false;
    let mut fragments = Vec::with_capacity(limit.min(ranked.len()));
    for fragment in ranked {
        if fragments.len() == limit {
            break;
        }
        let tokens = fragment.estimated_tokens as usize;
        if total_tokens + tokens > token_budget {
            truncated_by_budget = true;
            continue;
        }
        total_tokens += tokens;
        fragments.push(fragment);
    }
    RecallResponse {
        fragments,
        total_tokens: u32::try_from(total_tokens).unwrap_or(u32::MAX),
        truncated_by_budget,
        layers,
    }
}

fn ranked(layer: Layer, hits: &[Hit]) -> RankedList<Uuid> {
    RankedList {
        layer,
        weight: 1.0,
        ids: hits.iter().map(|h| h.id).collect(),
    }
}

#[tonic::async_trait]
impl RecallService for RecallServer {
    async fn recall(
        &self,
        request: Request<RecallRequest>,
    ) -> Result<Response<RecallResponse>, Status> {
        handle(request, |principal, message| async move {
            RecallServer::recall(self, &principal, message).await
        })
        .await
    }
}

/// Serves `server` on `listener` until `shutdown`, accepting only calls
/// whose principal `signer` verifies.
pub async fn serve(
    server: RecallServer,
    signer: PrincipalSigner,
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let service = RecallServiceServer::with_interceptor(server, signer);
    mneme_proto::server::serve_service(service, listener, shutdown).await?;
    Ok(())
}

/// Runs the recall service as its own process.
pub async fn run(
    config: Config,
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let token = config.require_internal_token()?;
    let store = Store::open(&config).await?;
    let cache = Cache::from_config(&config.redis).await?;
    let embedder = mneme_embed::from_config(&config.embedding)?;
    let server = RecallServer::new(store, cache, embedder, config.recall.clone());
    tracing::info!(addr = %listener.local_addr()?, "recall service listening");
    serve(
        server,
        PrincipalSigner::new(token.expose()),
        listener,
        shutdown,
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fragment(tokens: u32, score: f64) -> RecalledFragment {
        RecalledFragment {
            estimated_tokens: tokens,
            score,
            ..Default::default()
        }
    }

    #[test]
    fn cut_skips_what_does_not_fit_and_keeps_filling() {
        let ranked = vec![fragment(50, 3.0), fragment(500, 2.0), fragment(40, 1.0)];
        let response = cut(ranked, 10, 100, vec![]);
        let tokens: Vec<u32> = response
            .fragments
            .iter()
            .map(|f| f.estimated_tokens)
            .collect();
        assert_eq!(tokens, vec![50, 40]);
        assert_eq!(response.total_tokens, 90);
        assert!(response.truncated_by_budget);
    }

    #[test]
    fn cut_stops_at_the_limit_without_reporting_truncation() {
        let ranked = vec![fragment(10, 3.0), fragment(10, 2.0), fragment(10, 1.0)];
        let response = cut(ranked, 2, 1000, vec![]);
        assert_eq!(response.fragments.len(), 2);
        assert!(!response.truncated_by_budget);
    }
}
