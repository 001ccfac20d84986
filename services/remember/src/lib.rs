//! The remember service: the write path of long-term memory
//! (`mneme.v1.RememberService`).
//!
//! Layout: [`RememberServer`] implements the gRPC service by validating with
//! `mneme_core::fragment::prepare` and writing through `mneme_store`;
//! [`run`] wires configuration, PostgreSQL, Redis and the gRPC server.
//!
//! A `remember` is acknowledged once its transaction commits. The embedding
//! is computed afterwards by the embedding worker (mneme-consolidator), which
//! this service wakes through Redis; until then recall finds the fragment by
//! full text and keywords.
#![forbid(unsafe_code)]

use std::future::Future;
use std::sync::Arc;

use mneme_cache::Cache;
use mneme_config::{Config, RememberConfig};
use mneme_core::fragment::{PreparedFragment, RememberInput, prepare};
use mneme_core::principal::resolve_agent_id;
use mneme_core::text::Tokenizer;
use mneme_core::{Error, Permission, Principal, Result};
use mneme_proto::error::to_status;
use mneme_proto::principal::PrincipalSigner;
use mneme_proto::server::handle;
use mneme_proto::v1::remember_service_server::{RememberService, RememberServiceServer};
use mneme_proto::v1::{
    BatchItemResult, BatchProgress, BatchRememberEvent, BatchRememberRequest, BatchRememberResult,
    ErrorDetail, ForgetRequest, ForgetResponse, RememberRequest, RememberResponse, WriteOutcome,
    batch_remember_event,
};
use mneme_store::fragments::{self, Author, ForgetOutcome};
use mneme_store::{Store, TenantTx};
use tokio::net::TcpListener;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};
use uuid::Uuid;

/// Progress events of a batch are sent every this many items.
const PROGRESS_EVERY: usize = 25;

/// The write-path service.
#[derive(Debug, Clone)]
pub struct RememberServer {
    store: Store,
    cache: Cache,
    settings: Arc<RememberConfig>,
    tokenizer: Arc<Tokenizer>,
}

impl RememberServer {
    pub fn new(store: Store, cache: Cache, settings: RememberConfig) -> Self {
        Self {
            store,
            cache,
            settings: Arc::new(settings),
            tokenizer: Arc::new(Tokenizer::default()),
        }
    }

    /// Validates a request into a fragment and its agent.
    fn prepare(
        &self,
        principal: &Principal,
        request: RememberRequest,
    ) -> Result<(PreparedFragment, String)> {
        let agent_id = resolve_agent_id(request.agent_id.as_deref(), principal)?;
        let input = RememberInput {
            content: request.content,
            topic: request.topic,
            fragment_type: request.r#type,
            keywords: request.keywords,
            importance: request.importance,
            is_anchor: request.is_anchor,
            source: request.source,
            workspace: request.workspace.or_else(|| principal.workspace.clone()),
            idempotency_key: request.idempotency_key,
            context_summary: request.context_summary,
        };
        Ok((
            prepare(input, &self.settings.limits, &self.tokenizer)?,
            agent_id,
        ))
    }

    /// Stores up to `batch_max_items` fragments in one transaction. Items
    /// that fail validation are reported and skipped; the valid ones are
    /// stored together or not at all. `progress` receives a progress event
    /// after validation and every few stored items.
    pub async fn batch_remember(
        &self,
        principal: &Principal,
        request: BatchRememberRequest,
        progress: impl Fn(BatchProgress),
    ) -> Result<BatchRememberResult> {
        principal.require(Permission::Write)?;
        let total = request.items.len();
        if total == 0 {
            return Err(Error::invalid_argument("fragments must not be empty"));
        }
        if total > self.settings.batch_max_items {
            return Err(Error::invalid_argument(format!(
                "{total} fragments in one batch; the limit is {}",
                self.settings.batch_max_items
            )));
        }
        let total_u32 = u32::try_from(total).unwrap_or(u32::MAX);
        let mut results: Vec<BatchItemResult> = Vec::with_capacity(total);
        let mut valid: Vec<(usize, PreparedFragment, String)> = Vec::with_capacity(total);
        for (index, mut item) in request.items.into_iter().enumerate() {
            if item.workspace.is_none() {
                item.workspace.clone_from(&request.workspace);
            }
            if item.agent_id.is_none() {
                item.agent_id.clone_from(&request.agent_id);
            }
            match self.prepare(principal, item) {
                Ok((fragment, agent)) => valid.push((index, fragment, agent)),
                Err(error) => results.push(BatchItemResult {
                    index: index as u32,
                    id: None,
                    outcome: WriteOutcome::Unspecified as i32,
                    error: Some(ErrorDetail {
                        code: error.code.as_str().to_owned(),
                        message: error.message,
                    }),
                }),
            }
        }
        // Steps: one per item validated, one per valid item stored.
        let steps = total_u32 + valid.len() as u32;
        progress(BatchProgress {
            phase: "validate".into(),
            processed: total_u32,
            total: steps,
        });

        let (mut created, mut existing) = (0u32, 0u32);
        if !valid.is_empty() {
            let mut client = self.store.client().await?;
            let tx = TenantTx::begin(&mut client, principal.tenant_id).await?;
            for (done, (index, fragment, agent)) in valid.iter().enumerate() {
                let author = Author {
                    key_id: principal.key_id,
                    agent_id: agent,
                    session_id: principal.session_id.as_deref(),
                };
                let written = fragments::insert(&tx, author, fragment).await?;
                let outcome = outcome_of(written.outcome);
                if outcome == WriteOutcome::Created {
                    created += 1;
                } else {
                    existing += 1;
                }
                results.push(BatchItemResult {
                    index: *index as u32,
                    id: Some(written.id.to_string()),
                    outcome: outcome as i32,
                    error: None,
                });
                if (done + 1) % PROGRESS_EVERY == 0 {
                    progress(BatchProgress {
                        phase: "store".into(),
                        processed: total_u32 + (done + 1) as u32,
                        total: steps,
                    });
                }
            }
            tx.commit().await?;
            progress(BatchProgress {
                phase: "store".into(),
                processed: steps,
                total: steps,
            });
            if created > 0 {
                self.cache
                    .wake_embedding_worker(&principal.tenant_id.to_string())
                    .await;
            }
        }
        results.sort_by_key(|r| r.index);
        let rejected = total_u32 - created - existing;
        tracing::info!(tenant.id = %principal.tenant_id, created, existing, rejected, "batch remembered");
        Ok(BatchRememberResult {
            results,
            created,
            existing,
            rejected,
        })
    }

    /// Validates and stores one fragment.
    pub async fn remember(
        &self,
        principal: &Principal,
        request: RememberRequest,
    ) -> Result<RememberResponse> {
        principal.require(Permission::Write)?;
        let (fragment, agent_id) = self.prepare(principal, request)?;

        let mut client = self.store.client().await?;
        let tx = TenantTx::begin(&mut client, principal.tenant_id).await?;
        let author = Author {
            key_id: principal.key_id,
            agent_id: &agent_id,
            session_id: principal.session_id.as_deref(),
        };
        let written = fragments::insert(&tx, author, &fragment).await?;
        tx.commit().await?;

        let outcome = outcome_of(written.outcome);
        if outcome == WriteOutcome::Created {
            self.cache
                .wake_embedding_worker(&principal.tenant_id.to_string())
                .await;
        }
        tracing::info!(
            tenant.id = %principal.tenant_id,
            fragment.id = %written.id,
            outcome = ?outcome,
            "fragment remembered"
        );
        Ok(RememberResponse {
            id: written.id.to_string(),
            outcome: outcome as i32,
            keywords: written.keywords,
            importance: written.importance,
            ttl_tier: written.ttl_tier,
            redactions: u32::try_from(fragment.redactions).unwrap_or(u32::MAX),
        })
    }

    /// Deletes one fragment the caller can read.
    pub async fn forget(
        &self,
        principal: &Principal,
        request: ForgetRequest,
    ) -> Result<ForgetResponse> {
        principal.require(Permission::Write)?;
        let agent_id = resolve_agent_id(request.agent_id.as_deref(), principal)?;
        // A malformed id cannot name any fragment; answer as for any unknown id.
        let id: Uuid = request
            .id
            .trim()
            .parse()
            .map_err(|_| Error::fragment_not_found())?;
        let mut client = self.store.client().await?;
        let tx = TenantTx::begin(&mut client, principal.tenant_id).await?;
        let outcome = fragments::forget(
            &tx,
            &principal.readable_key_ids(),
            &agent_id,
            id,
            request.force,
        )
        .await?;
        tx.commit().await?;
        match outcome {
            ForgetOutcome::NotFound => Err(Error::fragment_not_found()),
            ForgetOutcome::Protected => Ok(ForgetResponse {
                deleted: 0,
                protected: 1,
            }),
            ForgetOutcome::Deleted => {
                tracing::info!(tenant.id = %principal.tenant_id, fragment.id = %id, "fragment forgotten");
                Ok(ForgetResponse {
                    deleted: 1,
                    protected: 0,
                })
            }
        }
    }
}

fn outcome_of(outcome: fragments::WriteOutcome) -> WriteOutcome {
    match outcome {
        fragments::WriteOutcome::Created => WriteOutcome::Created,
        fragments::WriteOutcome::Duplicate => WriteOutcome::Duplicate,
        fragments::WriteOutcome::Replayed => WriteOutcome::Replayed,
    }
}

#[tonic::async_trait]
impl RememberService for RememberServer {
    type BatchRememberStream = ReceiverStream<Result<BatchRememberEvent, Status>>;

    async fn batch_remember(
        &self,
        request: Request<BatchRememberRequest>,
    ) -> Result<Response<Self::BatchRememberStream>, Status> {
        let principal = mneme_proto::principal::principal(&request)?;
        // Refuse before streaming, so a denied call is a plain error.
        principal.require(Permission::Write).map_err(to_status)?;
        let (sender, receiver) = tokio::sync::mpsc::channel(16);
        let server = self.clone();
        let message = request.into_inner();
        tokio::spawn(async move {
            let progress_sender = sender.clone();
            let outcome = server
                .batch_remember(&principal, message, |progress| {
                    // A slow or gone client only misses progress, never the result.
                    let _ = progress_sender.try_send(Ok(BatchRememberEvent {
                        event: Some(batch_remember_event::Event::Progress(progress)),
                    }));
                })
                .await;
            let last = outcome
                .map(|result| BatchRememberEvent {
                    event: Some(batch_remember_event::Event::Result(result)),
                })
                .map_err(to_status);
            let _ = sender.send(last).await;
        });
        Ok(Response::new(ReceiverStream::new(receiver)))
    }

    async fn remember(
        &self,
        request: Request<RememberRequest>,
    ) -> Result<Response<RememberResponse>, Status> {
        handle(request, |principal, message| async move {
            RememberServer::remember(self, &principal, message).await
        })
        .await
    }

    async fn forget(
        &self,
        request: Request<ForgetRequest>,
    ) -> Result<Response<ForgetResponse>, Status> {
        handle(request, |principal, message| async move {
            RememberServer::forget(self, &principal, message).await
        })
        .await
    }
}

/// Serves `server` on `listener` until `shutdown`, accepting only calls
/// whose principal `signer` verifies.
pub async fn serve(
    server: RememberServer,
    signer: PrincipalSigner,
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let service = RememberServiceServer::with_interceptor(server, signer);
    mneme_proto::server::serve_service(service, listener, shutdown).await?;
    Ok(())
}

/// Runs the remember service as its own process.
pub async fn run(
    config: Config,
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let token = config.require_internal_token()?;
    let store = Store::open(&config).await?;
    let cache = Cache::from_config(&config.redis).await?;
    let server = RememberServer::new(store, cache, config.remember.clone());
    tracing::info!(addr = %listener.local_addr()?, "remember service listening");
    serve(
        server,
        PrincipalSigner::new(token.expose()),
        listener,
        shutdown,
    )
    .await
}
