//! The recall service: the read path of long-term memory
//! (`mneme.v1.RecallService`).
//!
//! Layout:
//! - [`RecallServer`]: the service; [`run`] wires configuration, PostgreSQL,
//!   Redis, the embedder and the gRPC server.
//! - `query`: validation, filters, pagination cursor.
//! - `access`: access statistics of recalled fragments, written in batches.
//! - `search` (in this file): the layers inside one tenant transaction.
//! - `rank`: scoring, pages, explanations, hints (pure).
//! - `enrich`: links, surrounding context and cases of a page.
//! - `context`: the session-start memory block.
//! - `explore`: fetch, stats, graph, history, timelines and search traces.
//! - `rerank`: the optional external cross-encoder.
//! - `spread`: spreading activation from the agent's current context.
//! - `symbolic`: explanations and the case filter of the symbolic layer.
//! - `surface`: candidates for active surfacing, with calibrated relevance.
//! - `term_stats`: sampled term frequencies that keep the full-text layer
//!   selective on large key sets.
//!
//! One recall, inside a single tenant transaction:
//! 1. the query embedding is computed (or read from the Redis cache) *while*
//!    the full-text and keyword layers run, pipelined on one connection;
//! 2. the vector layer searches the HNSW index of the tenant's partition;
//! 3. the layers are fused by id (`MNEME_RECALL_FUSION`: normalised scores,
//!    or Reciprocal Rank Fusion);
//! 4. the graph layer, when `MNEME_RECALL_GRAPH_WEIGHT` turns it on (off by
//!    default), passes the relevance of the best fused hits on to the
//!    fragments one link away, in proportion to the link's strength;
//! 5. the final score blends fused relevance (discounted for a memory in
//!    another script than the query) with importance and recency;
//! 6. an optional external cross-encoder (`rerank`) reorders the best
//!    results, and its order is final;
//! 7. a page is cut by limit and token budget, then enriched;
//! 8. a search event records what happened.
//!
//! Every failure of an optional part (Redis, the embedder) degrades the
//! result instead of failing it: without a query vector, recall still
//! answers from full text and keywords. Access statistics are gathered
//! after the answer and written in batches, off the request path.
#![forbid(unsafe_code)]

mod access;
mod context;
mod enrich;
mod explore;
mod query;
mod rank;
mod rerank;
mod spread;
mod surface;
mod symbolic;
mod term_stats;

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use chrono::{Timelike, Utc};
use mneme_cache::Cache;
use mneme_config::{Config, RecallConfig};
use mneme_core::scoring::{Layer, RankedList, spread_activation};
use mneme_core::text::Tokenizer;
use mneme_core::{Permission, Principal, Result};
use mneme_embed::{Embedder, PassageRecipe, TextKind};
use mneme_proto::principal::PrincipalSigner;
use mneme_proto::server::handle;
use mneme_proto::v1::recall_service_server::{RecallService, RecallServiceServer};
use mneme_proto::v1::{
    ContextRequest, ContextResponse, FetchRequest, FragmentHistoryRequest, FragmentHistoryResponse,
    GraphExploreRequest, GraphExploreResponse, RecallRequest, RecallResponse, RecalledFragment,
    ReconstructHistoryRequest, ReconstructHistoryResponse, SearchTracesRequest,
    SearchTracesResponse, StatsRequest, StatsResponse, SurfaceRequest, SurfaceResponse,
};
use mneme_store::fragments::{self, Fragment, Hit};
use mneme_store::search_events::{self, SearchEvent};
use mneme_store::search_thresholds::{self, Bucket, FloorRule};
use mneme_store::{Store, TenantTx, links};
use pgvector::Vector;
use tokio::net::TcpListener;
use tokio_util::task::TaskTracker;
use tonic::{Request, Response, Status};
use uuid::Uuid;

use crate::access::AccessRecorder;
use crate::query::Query;
use crate::rank::Candidate;
use crate::rerank::Reranker;
use crate::term_stats::TermStatistics;

/// How much one co-retrieval strengthens a link.
const CO_RETRIEVAL_STEP: f32 = 0.2;
/// Top results whose pairs count as co-retrieved.
const CO_RETRIEVAL_TOP: usize = 5;

/// The read-path service.
#[derive(Debug, Clone)]
pub struct RecallServer {
    store: Store,
    cache: Cache,
    embedder: Arc<dyn Embedder>,
    tokenizer: Arc<Tokenizer>,
    reranker: Option<Arc<Reranker>>,
    /// `None` when access tracking is off.
    accesses: Option<AccessRecorder>,
    /// Writes a recall leaves behind (access statistics, co-retrieval
    /// links, spreading activation); [`serve`] lets them finish on
    /// shutdown.
    background: TaskTracker,
    term_stats: TermStatistics,
    /// `memory_stats` answers this process computed, so that concurrent
    /// calls missing the shared cache wait for one computation.
    stats_answers: explore::StatsAnswers,
    settings: Arc<RecallConfig>,
    /// How stored fragments were put into words for their vectors (the
    /// surfacing calibration depends on it).
    passage_recipe: PassageRecipe,
}

/// The vector layer's hits. With query expansion they are ranked by the
/// expanded vector, while thresholds and clients keep seeing each hit's
/// similarity to the query itself.
struct VectorHits {
    /// Best first, scored by the vector that ranked them.
    ranked: Vec<Hit>,
    similarity: HashMap<Uuid, f32>,
}

impl VectorHits {
    fn plain(hits: Vec<Hit>) -> Self {
        let similarity = hits.iter().map(|h| (h.id, h.score)).collect();
        Self {
            ranked: hits,
            similarity,
        }
    }
}

/// What the layers found.
struct Found {
    candidates: HashMap<Uuid, Candidate>,
    rows: Vec<Fragment>,
    layers: Vec<String>,
    counts: HashMap<Layer, usize>,
}

impl RecallServer {
    pub fn new(
        store: Store,
        cache: Cache,
        embedder: Arc<dyn Embedder>,
        settings: RecallConfig,
    ) -> Self {
        let reranker = settings.reranker.clone().and_then(|reranker| {
            Reranker::new(reranker)
                .inspect_err(|error| tracing::error!(%error, "cannot build the reranker client; recalling without it"))
                .ok()
                .map(Arc::new)
        });
        let background = TaskTracker::new();
        let accesses = settings
            .track_access
            .then(|| AccessRecorder::spawn(store.clone(), settings.access_flush, &background));
        Self {
            store,
            cache,
            embedder,
            tokenizer: Arc::new(Tokenizer::default()),
            reranker,
            accesses,
            background,
            term_stats: TermStatistics::new(&settings),
            stats_answers: explore::StatsAnswers::new(settings.stats_cache),
            settings: Arc::new(settings),
            passage_recipe: PassageRecipe::from_config(&mneme_config::Config::defaults().embedding),
        }
    }

    /// The passage recipe of the embedding worker (default: the settings'
    /// default).
    pub fn with_passage_recipe(mut self, recipe: PassageRecipe) -> Self {
        self.passage_recipe = recipe;
        self
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
        let started = Instant::now();
        let now = Utc::now();
        let mut query = Query::new(request, principal, &self.settings, &self.tokenizer, now)?;
        let session_owner = mneme_cache::session_owner(principal.tenant_id, principal.key_id);
        if query.exclude_seen
            && let Some(session) = &query.session_id
        {
            query.exclude = self
                .cache
                .seen(&session_owner, session)
                .await
                .iter()
                .filter_map(|id| id.parse().ok())
                .collect();
        }

        // Embed before taking a connection: under load the embedder queues,
        // and a connection held through that wait is one the pool cannot
        // lend, which turned overload into "database unavailable" errors.
        let embedding = match &query.text {
            Some(text) => self.query_embedding(text).await,
            None => None,
        };
        let mut client = self.store.client().await?;
        let tx = TenantTx::begin(&mut client, principal.tenant_id).await?;
        let floor_bucket = self
            .settings
            .adaptive_floor
            .filter(|_| query.threshold.is_none() && query.text.is_some())
            .map(|floor| {
                let rule = FloorRule {
                    start: floor.start,
                    min: floor.min,
                    max: floor.max,
                    min_samples: floor.min_samples,
                };
                let bucket = Bucket {
                    key_id: principal.key_id,
                    query_type: query.query_type(),
                    hour: i16::try_from(now.hour()).unwrap_or(0),
                };
                (rule, bucket)
            });
        let vector_floor = match &floor_bucket {
            Some((rule, bucket)) => search_thresholds::floor(&tx, *bucket, rule).await?,
            None => None,
        };
        let found = self
            .search(&tx, &query, embedding.as_ref(), vector_floor)
            .await?;
        let signals = symbolic::Signals::capture(&self.settings.symbolic, &query, &found.rows, now);
        // Recency is scored at the walk's snapshot, not the wall clock: the
        // pages of one cursor walk must rank alike, and ages in whole
        // seconds would otherwise reorder near-ties between two pages.
        let mut ranked = rank::rank(
            found.rows,
            &found.candidates,
            &self.settings.weights,
            query.threshold,
            rank::ScriptPrior::of_query(query.text.as_deref(), self.settings.other_script_discount),
            query.snapshot,
        );
        if let (Some(reranker), Some(text)) = (&self.reranker, &query.text) {
            ranked = reranker.rerank(text, ranked).await;
        }
        let skip = query.skip_returned(&mut ranked);
        let mut page = rank::page(ranked, skip, query.limit, query.token_budget);
        signals.apply(&mut page);
        let cases = enrich::enrich(&tx, &query, &mut page.fragments).await?;
        if let Some((rule, bucket)) = &floor_bucket {
            let returned = i32::try_from(page.fragments.len()).unwrap_or(i32::MAX);
            search_thresholds::observe(&tx, *bucket, returned, rule).await?;
        }
        let count = |layer| {
            i32::try_from(found.counts.get(&layer).copied().unwrap_or(0)).unwrap_or(i32::MAX)
        };
        let event_id = search_events::record(
            &tx,
            &SearchEvent {
                key_id: principal.key_id,
                session_id: query.session_id.as_deref(),
                query_type: query.query_type(),
                layers: &found.layers,
                vector_count: count(Layer::Vector),
                fulltext_count: count(Layer::FullText),
                keyword_count: count(Layer::Keyword),
                graph_count: count(Layer::Graph),
                result_count: page.fragments.len() as i32,
                latency_ms: started.elapsed().as_secs_f32() * 1000.0,
                filter_keys: &query.filter_keys,
            },
        )
        .await?;
        tx.commit().await?;

        let returned: Vec<Uuid> = page
            .fragments
            .iter()
            .filter_map(|f| f.id.parse().ok())
            .collect();
        let next_cursor = page.has_more.then(|| query.next_cursor(&returned));
        // Co-retrieval links feed the graph layer: strengthened between the
        // pages of one cursor walk, they would reorder the results under it.
        let single_page = query.offset == 0 && !page.has_more;
        self.after_recall(
            principal.tenant_id,
            returned,
            query.session_id.is_some() && single_page,
        );
        if !query.context_keywords.is_empty() {
            self.spread_activation(spread::Spread {
                tenant_id: principal.tenant_id,
                key_id: principal.key_id,
                readable_keys: query.key_ids.clone(),
                agent_id: query.agent_id.clone(),
                workspace: query.workspace.clone(),
                session_id: query.session_id.clone(),
                keywords: query.context_keywords.clone(),
            });
        }
        Ok(RecallResponse {
            hints: rank::hints(&page.fragments, query.include_context, now),
            next_cursor,
            has_more: page.has_more,
            total_tokens: u32::try_from(page.total_tokens).unwrap_or(u32::MAX),
            truncated_by_budget: page.truncated_by_budget,
            fragments: page.fragments,
            layers: found.layers,
            search_event_id: event_id,
            cases,
        })
    }

    /// The vector layer's hits, best first. With query expansion on, the
    /// query vector is blended with the mean of the best hits and searched
    /// again (pseudo-relevance feedback): a short or oddly worded query then
    /// also finds what its best matches are near. Scores stay the
    /// similarity to the original query where known.
    async fn vector_layer(
        &self,
        tx: &TenantTx<'_>,
        query: &Query,
        embedding: &Vector,
        limit: i64,
    ) -> Result<VectorHits> {
        let scope = query.scope();
        let model = self.embedder.model_id();
        let ef_search = self.settings.hnsw_ef_search;
        let hits = fragments::vector_search(tx, &scope, embedding, model, ef_search, limit).await?;
        let expansion = self.settings.expansion_hits;
        if expansion == 0 || hits.is_empty() {
            return Ok(VectorHits::plain(hits));
        }
        let best: Vec<Uuid> = hits.iter().take(expansion).map(|h| h.id).collect();
        let neighbours = fragments::embeddings(tx, &query.key_ids, &best, model).await?;
        if neighbours.is_empty() {
            return Ok(VectorHits::plain(hits));
        }
        let weight = self.settings.expansion_query_weight;
        let mut blended: Vec<f32> = embedding.as_slice().iter().map(|x| x * weight).collect();
        let share = (1.0 - weight) / neighbours.len() as f32;
        for neighbour in &neighbours {
            for (b, x) in blended.iter_mut().zip(neighbour.as_slice()) {
                *b += x * share;
            }
        }
        mneme_embed::normalize(&mut blended);
        let mut similarity: HashMap<Uuid, f32> = hits.iter().map(|h| (h.id, h.score)).collect();
        let expanded =
            fragments::vector_search(tx, &scope, &Vector::from(blended), model, ef_search, limit)
                .await?;
        // A hit only the expanded vector found: its similarity to that vector
        // stands in for the query's, which was not computed.
        for hit in &expanded {
            similarity.entry(hit.id).or_insert(hit.score);
        }
        Ok(VectorHits {
            ranked: expanded,
            similarity,
        })
    }

    /// Runs the layers, fuses them and loads the candidates. `embedding` is
    /// the query's (none: no vector layer). Vector hits below
    /// `vector_floor` (the adaptive similarity floor) are dropped.
    async fn search(
        &self,
        tx: &TenantTx<'_>,
        query: &Query,
        embedding: Option<&Vector>,
        vector_floor: Option<f32>,
    ) -> Result<Found> {
        let scope = query.scope();
        let limit = query.candidates(self.settings.candidates_per_layer);

        let lexical = async {
            let fulltext = async {
                let Some(q) = self
                    .term_stats
                    .query(tx, &query.key_ids, &query.lexemes)
                    .await?
                else {
                    return Ok::<_, mneme_core::Error>(None);
                };
                let hits = fragments::fulltext_search(
                    tx,
                    &scope,
                    &q.filter,
                    &q.rank,
                    self.settings.fulltext_fields,
                    limit,
                );
                Ok(Some(hits.await?))
            };
            let keyword = async {
                if query.keywords.is_empty() {
                    return Ok::<_, mneme_core::Error>(None);
                }
                let hits = fragments::keyword_search(tx, &scope, &query.keywords, limit);
                Ok(Some(hits.await?))
            };
            tokio::try_join!(fulltext, keyword)
        };
        let (fulltext, keyword) = lexical.await?;
        let vector = match embedding {
            Some(embedding) => {
                let mut found = self.vector_layer(tx, query, embedding, limit).await?;
                if let Some(floor) = vector_floor {
                    let similarity = &found.similarity;
                    found
                        .ranked
                        .retain(|hit| similarity.get(&hit.id).is_some_and(|&s| s >= floor));
                }
                Some(found)
            }
            None => None,
        };

        let mut similarity: HashMap<Uuid, f32> = HashMap::new();
        let mut lists: Vec<RankedList<Uuid>> = Vec::new();
        let ranked = |layer: Layer, weight: f64, hits: &[Hit]| RankedList {
            layer,
            weight,
            ids: hits.iter().map(|h| h.id).collect(),
            scores: hits.iter().map(|h| f64::from(h.score)).collect(),
        };
        let weights = &self.settings;
        if let Some(found) = vector {
            if weights.vector_weight > 0.0 {
                lists.push(ranked(Layer::Vector, weights.vector_weight, &found.ranked));
            }
            similarity.extend(
                found
                    .ranked
                    .iter()
                    .filter_map(|h| Some((h.id, *found.similarity.get(&h.id)?))),
            );
        }
        if let Some(hits) = &fulltext
            && weights.fulltext_weight > 0.0
        {
            lists.push(ranked(Layer::FullText, weights.fulltext_weight, hits));
        }
        if let Some(hits) = &keyword
            && weights.keyword_weight > 0.0
        {
            lists.push(ranked(Layer::Keyword, weights.keyword_weight, hits));
        }
        let mut layers: Vec<String> = lists.iter().map(|l| l.layer.as_str().to_owned()).collect();
        let mut counts: HashMap<Layer, usize> =
            lists.iter().map(|l| (l.layer, l.ids.len())).collect();

        let candidates: HashMap<Uuid, Candidate> = if lists.is_empty() && query.text.is_none() {
            // No query at all: the most important recent fragments.
            fragments::recent(tx, &scope, limit)
                .await?
                .into_iter()
                .map(|hit| (hit.id, Candidate::default()))
                .collect()
        } else {
            let mut fused = self.settings.fusion.fuse(&lists);
            if self.settings.graph_weight > 0.0 && !fused.is_empty() {
                // The best fused hits pass their relevance on along links.
                let seeds = &fused[..fused.len().min(self.settings.graph_seeds)];
                let ids: Vec<Uuid> = seeds.iter().map(|f| f.id).collect();
                let relevance: Vec<f32> = seeds.iter().map(|f| f.relevance as f32).collect();
                let hits = fragments::graph_neighbors(tx, &scope, &ids, &relevance, limit).await?;
                if !hits.is_empty() {
                    layers.push(Layer::Graph.as_str().to_owned());
                    counts.insert(Layer::Graph, hits.len());
                    let activations: Vec<(Uuid, f64)> =
                        hits.iter().map(|h| (h.id, f64::from(h.score))).collect();
                    fused = spread_activation(
                        fused,
                        Layer::Graph,
                        self.settings.graph_weight,
                        &activations,
                    );
                }
            }
            fused
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
        let rows = fragments::fetch(tx, &query.key_ids, &ids).await?;
        Ok(Found {
            candidates,
            rows,
            layers,
            counts,
        })
    }

    /// Runs a spread in the background; a failure only loses the warm-up.
    fn spread_activation(&self, spread: spread::Spread) {
        let (store, cache) = (self.store.clone(), self.cache.clone());
        let (step, dedup) = (
            self.settings.spreading_activation_step,
            self.settings.spreading_activation_dedup,
        );
        self.background.spawn(async move {
            match spread.run(&store, &cache, step, dedup).await {
                Ok(warmed) => tracing::debug!(warmed = warmed.len(), "spreading activation"),
                Err(error) => tracing::warn!(%error, "spreading activation failed"),
            }
        });
    }

    /// Access statistics and co-retrieval links, written after the answer
    /// in a transaction of their own: a failure here never fails a recall.
    /// `link_co_retrieved`: the results were recalled together in a session,
    /// on a single page.
    fn after_recall(&self, tenant_id: Uuid, returned: Vec<Uuid>, link_co_retrieved: bool) {
        if returned.is_empty() {
            return;
        }
        let co_retrieval =
            self.settings.co_retrieval_links && link_co_retrieved && returned.len() > 1;
        if co_retrieval {
            let top: Vec<Uuid> = returned.iter().take(CO_RETRIEVAL_TOP).copied().collect();
            let store = self.store.clone();
            self.background.spawn(async move {
                let result: Result<(), mneme_store::StoreError> = async {
                    let mut client = store.client().await?;
                    let tx = TenantTx::begin(&mut client, tenant_id).await?;
                    links::strengthen_co_retrieval(&tx, &top, CO_RETRIEVAL_STEP).await?;
                    tx.commit().await
                }
                .await;
                if let Err(error) = result {
                    tracing::warn!(%error, "strengthening co-retrieval links failed");
                }
            });
        }
        if let Some(accesses) = &self.accesses {
            accesses.record(tenant_id, returned);
        }
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

    async fn context(
        &self,
        request: Request<ContextRequest>,
    ) -> Result<Response<ContextResponse>, Status> {
        handle(request, |principal, message| async move {
            RecallServer::context(self, &principal, message).await
        })
        .await
    }

    async fn fetch(
        &self,
        request: Request<FetchRequest>,
    ) -> Result<Response<RecalledFragment>, Status> {
        handle(request, |principal, message| async move {
            RecallServer::fetch(self, &principal, message).await
        })
        .await
    }

    async fn stats(
        &self,
        request: Request<StatsRequest>,
    ) -> Result<Response<StatsResponse>, Status> {
        handle(request, |principal, message| async move {
            RecallServer::stats(self, &principal, message).await
        })
        .await
    }

    async fn graph_explore(
        &self,
        request: Request<GraphExploreRequest>,
    ) -> Result<Response<GraphExploreResponse>, Status> {
        handle(request, |principal, message| async move {
            RecallServer::graph_explore(self, &principal, message).await
        })
        .await
    }

    async fn fragment_history(
        &self,
        request: Request<FragmentHistoryRequest>,
    ) -> Result<Response<FragmentHistoryResponse>, Status> {
        handle(request, |principal, message| async move {
            RecallServer::fragment_history(self, &principal, message).await
        })
        .await
    }

    async fn reconstruct_history(
        &self,
        request: Request<ReconstructHistoryRequest>,
    ) -> Result<Response<ReconstructHistoryResponse>, Status> {
        handle(request, |principal, message| async move {
            RecallServer::reconstruct_history(self, &principal, message).await
        })
        .await
    }

    async fn search_traces(
        &self,
        request: Request<SearchTracesRequest>,
    ) -> Result<Response<SearchTracesResponse>, Status> {
        handle(request, |principal, message| async move {
            RecallServer::search_traces(self, &principal, message).await
        })
        .await
    }

    async fn surface(
        &self,
        request: Request<SurfaceRequest>,
    ) -> Result<Response<SurfaceResponse>, Status> {
        handle(request, |principal, message| async move {
            RecallServer::surface(self, &principal, message).await
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
    let database = server.store.answering();
    let background = server.background.clone();
    let service = RecallServiceServer::with_interceptor(server, signer);
    let served = mneme_proto::server::serve_service(service, listener, shutdown, database).await;
    // The handlers are gone with the server, so the access writer makes its
    // last flush: without this wait, every restart lost up to a flush
    // interval of access statistics and the co-retrieval links in flight.
    mneme_proto::server::finish_background(&background).await;
    served?;
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
    let server = RecallServer::new(store, cache, embedder, config.recall.clone())
        .with_passage_recipe(PassageRecipe::from_config(&config.embedding));
    tracing::info!(addr = %listener.local_addr()?, "recall service listening");
    serve(
        server,
        PrincipalSigner::new(token.expose()),
        listener,
        shutdown,
    )
    .await
}
