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
use mneme_config::Config;
use mneme_core::fragment::{FragmentLimits, RememberInput, prepare};
use mneme_core::principal::resolve_agent_id;
use mneme_core::text::Tokenizer;
use mneme_core::{Error, Permission, Principal, Result};
use mneme_proto::principal::PrincipalSigner;
use mneme_proto::server::handle;
use mneme_proto::v1::remember_service_server::{RememberService, RememberServiceServer};
use mneme_proto::v1::{
    ForgetRequest, ForgetResponse, RememberRequest, RememberResponse, WriteOutcome,
};
use mneme_store::fragments::{self, Author, ForgetOutcome};
use mneme_store::{Store, TenantTx};
use tokio::net::TcpListener;
use tonic::{Request, Response, Status};
use uuid::Uuid;

/// The write-path service.
#[derive(Debug, Clone)]
pub struct RememberServer {
    store: Store,
    cache: Cache,
    limits: Arc<FragmentLimits>,
    tokenizer: Arc<Tokenizer>,
}

impl RememberServer {
    pub fn new(store: Store, cache: Cache, limits: FragmentLimits) -> Self {
        Self {
            store,
            cache,
            limits: Arc::new(limits),
            tokenizer: Arc::new(Tokenizer::default()),
        }
    }

    /// Validates and stores one fragment.
    pub async fn remember(
        &self,
        principal: &Principal,
        request: RememberRequest,
    ) -> Result<RememberResponse> {
        principal.require(Permission::Write)?;
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
        let fragment = prepare(input, &self.limits, &self.tokenizer)?;

        let mut client = self.store.client().await?;
        let tx = TenantTx::begin(&mut client, principal.tenant_id).await?;
        let author = Author {
            key_id: principal.key_id,
            agent_id: &agent_id,
            session_id: principal.session_id.as_deref(),
        };
        let written = fragments::insert(&tx, author, &fragment).await?;
        tx.commit().await?;

        let outcome = match written.outcome {
            fragments::WriteOutcome::Created => {
                self.cache
                    .wake_embedding_worker(&principal.tenant_id.to_string())
                    .await;
                WriteOutcome::Created
            }
            fragments::WriteOutcome::Duplicate => WriteOutcome::Duplicate,
            fragments::WriteOutcome::Replayed => WriteOutcome::Replayed,
        };
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

#[tonic::async_trait]
impl RememberService for RememberServer {
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
    let server = RememberServer::new(store, cache, config.remember.limits.clone());
    tracing::info!(addr = %listener.local_addr()?, "remember service listening");
    serve(
        server,
        PrincipalSigner::new(token.expose()),
        listener,
        shutdown,
    )
    .await
}
