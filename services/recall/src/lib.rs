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

use chrono::Utc;
use mneme_cache::Cache;
use mneme_config::{Config, RecallConfig};
use mneme_core::principal::resolve_agent_id;
use mneme_core::scoring::{Layer, RankedList, final_score, rrf_fuse};
use mneme_core::text::Tokenizer;
use mneme_core::{Error, FragmentType, Permission, Principal, Result};
use mneme_embed::{Embedder, TextKind};
use mneme_proto::error::to_status;
use mneme_proto::principal::{PrincipalSigner, principal};
use mneme_proto::v1::recall_service_server::{RecallService, RecallServiceServer};
use mneme_proto::v1::{RecallRequest, RecallResponse, RecalledFragment};
use mneme_store::fragments::{self, Hit, SearchScope};
use mneme_store::{Store, TenantTx};
use pgvector::Vector;
use tokio::net::TcpListener;
use tonic::server::NamedService;
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
        let settings = &self.settings;
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
        let fragment_type = request
            .r#type
            .as_deref()
            .map(str::parse::<FragmentType>)
            .transpose()?;
        let agent_id = resolve_agent_id(request.agent_id.as_deref(), principal)?;
        let workspace = request
            .workspace
            .clone()
            .or_else(|| principal.workspace.clone());
        let topic = request
            .topic
            .as_deref()
            .map(str::trim)
            .filter(|t| !t.is_empty());
        let text = request
            .text
            .as_deref()
            .map(str::trim)
            .filter(|t| !t.is_empty());

        let mut keywords: Vec<String> = request
            .keywords
            .iter()
            .map(|k| k.trim().to_lowercase())
            .filter(|k| !k.is_empty())
            .collect();
        if let Some(text) = text {
            keywords.extend(self.tokenizer.extract_keywords(text, QUERY_KEYWORDS));
        }
        keywords.sort();
        keywords.dedup();
        let tsquery = text.and_then(|t| self.tokenizer.tsquery_literal(t));

        let key_ids = principal.readable_key_ids();
        let scope = SearchScope {
            key_ids: &key_ids,
            agent_id: &agent_id,
            workspace: workspace.as_deref(),
            topic,
            fragment_type: fragment_type.map(FragmentType::as_str),
        };
        let candidates = i64::try_from(settings.candidates_per_layer).unwrap_or(i64::MAX);

        let mut client = self.store.client().await?;
        let tx = TenantTx::begin(&mut client, principal.tenant_id).await?;
        let lexical = async {
            let fulltext = async {
                match &tsquery {
                    Some(q) => fragments::fulltext_search(&tx, &scope, q, candidates)
                        .await
                        .map(Some),
                    None => Ok(None),
                }
            };
            let keyword = async {
                if keywords.is_empty() {
                    Ok(None)
                } else {
                    fragments::keyword_search(&tx, &scope, &keywords, candidates)
                        .await
                        .map(Some)
                }
            };
            tokio::try_join!(fulltext, keyword)
        };
        let embedding = async {
            match text {
                Some(t) => self.query_embedding(t).await,
                None => None,
            }
        };
        let (embedding, lexical) = tokio::join!(embedding, lexical);
        let (fulltext, keyword) = lexical?;
        let vector = match &embedding {
            Some(e) => Some(
                fragments::vector_search(
                    &tx,
                    &scope,
                    e,
                    self.embedder.model_id(),
                    settings.hnsw_ef_search,
                    candidates,
                )
                .await?,
            ),
            None => None,
        };

        let mut lists: Vec<RankedList<Uuid>> = Vec::new();
        let mut similarity = HashMap::new();
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
        let layers: Vec<String> = lists.iter().map(|l| l.layer.as_str().to_owned()).collect();

        // No query at all: the most important recent fragments.
        let fused: Vec<(Uuid, f64, Vec<Layer>)> = if lists.is_empty() && text.is_none() {
            fragments::recent(&tx, &scope, candidates)
                .await?
                .into_iter()
                .map(|hit| (hit.id, 1.0, Vec::new()))
                .collect()
        } else {
            rrf_fuse(&lists, settings.rrf_k)
                .into_iter()
                .map(|f| (f.id, f.relevance, f.layers))
                .collect()
        };
        let ids: Vec<Uuid> = fused.iter().map(|(id, _, _)| *id).collect();
        let rows = fragments::fetch(&tx, &key_ids, &ids).await?;
        tx.commit().await?;
        let fused: HashMap<Uuid, (f64, Vec<Layer>)> = fused
            .into_iter()
            .map(|(id, relevance, layers)| (id, (relevance, layers)))
            .collect();

        let now = Utc::now();
        let mut scored: Vec<(f64, RecalledFragment)> = Vec::with_capacity(rows.len());
        for row in rows {
            let Some((relevance, matched)) = fused.get(&row.id) else {
                continue;
            };
            let age_days = (now - row.created_at).num_seconds() as f64 / 86_400.0;
            let score = final_score(
                *relevance,
                f64::from(row.importance),
                age_days,
                &settings.weights,
            );
            scored.push((
                score,
                RecalledFragment {
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
                    similarity: similarity.get(&row.id).copied(),
                    matched_by: matched.iter().map(|l| l.as_str().to_owned()).collect(),
                    estimated_tokens: u32::try_from(row.estimated_tokens).unwrap_or(0),
                },
            ));
        }
        scored.sort_by(|a, b| b.0.total_cmp(&a.0));

        // Fill the budget in rank order; a fragment that does not fit is
        // skipped so one long fragment cannot hide every shorter one.
        let mut total_tokens = 0usize;
        let mut truncated_by_budget = false;
        let mut fragments = Vec::with_capacity(limit);
        for (_, fragment) in scored {
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
        Ok(RecallResponse {
            fragments,
            total_tokens: u32::try_from(total_tokens).unwrap_or(u32::MAX),
            truncated_by_budget,
            layers,
        })
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
        let principal = principal(&request)?;
        RecallServer::recall(self, &principal, request.into_inner())
            .await
            .map(Response::new)
            .map_err(to_status)
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
    let routes = tonic::service::Routes::new(service);
    let name = <RecallServiceServer<RecallServer> as NamedService>::NAME;
    mneme_proto::server::serve(routes, &[name], listener, shutdown).await?;
    Ok(())
}

/// Runs the recall service as its own process.
pub async fn run(
    config: Config,
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let token = config.require_internal_token()?;
    let store = Store::from_config(&config.database)?;
    store
        .check_service_role(config.database.allow_rls_bypass)
        .await?;
    store
        .check_embedding_dimension(config.embedding.dim)
        .await?;
    let cache = Cache::connect(config.redis.url.expose(), &config.redis.prefix).await?;
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
