//! The remember service: the write path of long-term memory
//! (`mneme.v1.RememberService`).
//!
//! Layout: [`RememberServer`] implements the gRPC service by validating with
//! `mneme_core::fragment::prepare` and writing through `mneme_store`;
//! [`run`] wires configuration, PostgreSQL, Redis and the gRPC server.
//! - `write`: remember and batch_remember (quota, cases, links, conflicts);
//! - `auto_links`: the links mneme adds to new fragments after a write,
//!   through a durable queue this service drains;
//! - `edit`: forget, amend and link;
//! - `reflect`: a session summary as fragments, an episode and a milestone;
//! - `feedback`: tool feedback and what it teaches (activation, link weights);
//! - `symbolic`: the symbolic layer on writes (policy gate, claims and
//!   polarity conflicts), behind `MNEME_SYMBOLIC_*`;
//! - `consolidate`: consolidation of the caller's tenant on demand (admin);
//! - [`auto_reflect`]: reflection of idle and closed MCP sessions from
//!   their activity log ([`auto_reflect::SessionReflector`]).
//!
//! A `remember` is acknowledged once its transaction commits. The embedding
//! is computed afterwards by the embedding worker (mneme-consolidator), which
//! this service wakes through Redis; until then recall finds the fragment by
//! full text and keywords.
#![forbid(unsafe_code)]

mod auto_links;
pub mod auto_reflect;
mod consolidate;
mod edit;
mod feedback;
mod reflect;
mod symbolic;
mod write;

use std::future::Future;
use std::sync::Arc;

use mneme_cache::Cache;
use mneme_config::{Config, ConsolidationConfig, RememberConfig};
use mneme_consolidator::Consolidator;
use mneme_core::text::Tokenizer;
use mneme_core::{Permission, Principal};
use mneme_proto::error::to_status;
use mneme_proto::principal::PrincipalSigner;
use mneme_proto::server::handle;
use mneme_proto::v1::remember_service_server::{RememberService, RememberServiceServer};
use mneme_proto::v1::{
    AmendRequest, AmendResponse, BatchRememberEvent, BatchRememberRequest, ConsolidateEvent,
    ConsolidateRequest, ForgetRequest, ForgetResponse, LinkRequest, LinkResponse, ReflectRequest,
    ReflectResponse, RememberRequest, RememberResponse, ToolFeedbackRequest, ToolFeedbackResponse,
    batch_remember_event, consolidate_event,
};
use mneme_store::Store;
use tokio::net::TcpListener;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::task::TaskTracker;
use tonic::{Request, Response, Status};

/// The write-path service.
#[derive(Debug, Clone)]
pub struct RememberServer {
    store: Store,
    cache: Cache,
    settings: Arc<RememberConfig>,
    /// Runs on-demand consolidations; built once, so its language-model
    /// clients and their breakers outlive a single call.
    consolidator: Consolidator,
    tokenizer: Arc<Tokenizer>,
    /// Bounds on the automatic links of new fragments.
    auto_linker: auto_links::AutoLinker,
    /// Writes a call leaves behind (the claims of a bulk write); [`serve`]
    /// lets them finish on shutdown.
    background: TaskTracker,
}

impl RememberServer {
    pub fn new(store: Store, cache: Cache, settings: RememberConfig) -> Self {
        let settings = Arc::new(settings);
        Self {
            cache,
            auto_linker: auto_links::AutoLinker::new(store.clone(), settings.clone()),
            settings,
            consolidator: Consolidator::new(store.clone(), Config::defaults().consolidation),
            store,
            tokenizer: Arc::new(Tokenizer::default()),
            background: TaskTracker::new(),
        }
    }

    /// Once a call has changed the tenant's memories, cached statistics
    /// of the tenant are stale (`mneme_cache::stats`).
    async fn note_change<T>(&self, principal: &Principal, reply: &mneme_core::Result<T>) {
        if reply.is_ok() {
            self.cache
                .note_tenant_changed(&principal.tenant_id.to_string())
                .await;
        }
    }

    /// Runs on-demand consolidations with `settings` (default: the
    /// documented defaults).
    pub fn with_consolidation(mut self, settings: ConsolidationConfig) -> Self {
        self.consolidator = Consolidator::new(self.store.clone(), settings);
        self
    }
}

/// Runs `work` in the background and streams what it reports, then its
/// result (or error), as the events of a server-streaming call. A slow or
/// gone client only misses progress, never the result.
fn stream_with_progress<E, P, R, W, Fut>(
    progress_event: fn(P) -> E,
    result_event: fn(R) -> E,
    work: W,
) -> ReceiverStream<Result<E, Status>>
where
    E: Send + 'static,
    P: 'static,
    R: 'static,
    W: FnOnce(Box<dyn Fn(P) + Send + Sync>) -> Fut + Send + 'static,
    Fut: Future<Output = mneme_core::Result<R>> + Send,
{
    let (sender, receiver) = tokio::sync::mpsc::channel(16);
    tokio::spawn(async move {
        let progress_sender = sender.clone();
        let report = Box::new(move |progress: P| {
            let _ = progress_sender.try_send(Ok(progress_event(progress)));
        });
        let last = work(report).await.map(result_event).map_err(to_status);
        let _ = sender.send(last).await;
    });
    ReceiverStream::new(receiver)
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
        let (server, message) = (self.clone(), request.into_inner());
        Ok(Response::new(stream_with_progress(
            |progress| BatchRememberEvent {
                event: Some(batch_remember_event::Event::Progress(progress)),
            },
            |result| BatchRememberEvent {
                event: Some(batch_remember_event::Event::Result(result)),
            },
            move |report| async move {
                let reply = server.batch_remember(&principal, message, report).await;
                server.note_change(&principal, &reply).await;
                reply
            },
        )))
    }

    type ConsolidateStream = ReceiverStream<Result<ConsolidateEvent, Status>>;

    async fn consolidate(
        &self,
        request: Request<ConsolidateRequest>,
    ) -> Result<Response<Self::ConsolidateStream>, Status> {
        let principal = mneme_proto::principal::principal(&request)?;
        principal.require(Permission::Admin).map_err(to_status)?;
        let (server, message) = (self.clone(), request.into_inner());
        Ok(Response::new(stream_with_progress(
            |progress| ConsolidateEvent {
                event: Some(consolidate_event::Event::Progress(progress)),
            },
            |result| ConsolidateEvent {
                event: Some(consolidate_event::Event::Result(result)),
            },
            move |report| async move {
                let reply = server.consolidate(&principal, message, report).await;
                server.note_change(&principal, &reply).await;
                reply
            },
        )))
    }

    async fn remember(
        &self,
        request: Request<RememberRequest>,
    ) -> Result<Response<RememberResponse>, Status> {
        handle(request, |principal, message| async move {
            let reply = RememberServer::remember(self, &principal, message).await;
            self.note_change(&principal, &reply).await;
            reply
        })
        .await
    }

    async fn amend(
        &self,
        request: Request<AmendRequest>,
    ) -> Result<Response<AmendResponse>, Status> {
        handle(request, |principal, message| async move {
            let reply = RememberServer::amend(self, &principal, message).await;
            self.note_change(&principal, &reply).await;
            reply
        })
        .await
    }

    async fn link(&self, request: Request<LinkRequest>) -> Result<Response<LinkResponse>, Status> {
        handle(request, |principal, message| async move {
            let reply = RememberServer::link(self, &principal, message).await;
            self.note_change(&principal, &reply).await;
            reply
        })
        .await
    }

    async fn forget(
        &self,
        request: Request<ForgetRequest>,
    ) -> Result<Response<ForgetResponse>, Status> {
        handle(request, |principal, message| async move {
            let reply = RememberServer::forget(self, &principal, message).await;
            self.note_change(&principal, &reply).await;
            reply
        })
        .await
    }

    async fn reflect(
        &self,
        request: Request<ReflectRequest>,
    ) -> Result<Response<ReflectResponse>, Status> {
        handle(request, |principal, message| async move {
            let reply = RememberServer::reflect(self, &principal, message).await;
            self.note_change(&principal, &reply).await;
            reply
        })
        .await
    }

    async fn record_tool_feedback(
        &self,
        request: Request<ToolFeedbackRequest>,
    ) -> Result<Response<ToolFeedbackResponse>, Status> {
        handle(request, |principal, message| async move {
            let reply = RememberServer::record_tool_feedback(self, &principal, message).await;
            self.note_change(&principal, &reply).await;
            reply
        })
        .await
    }
}

/// Serves `server` on `listener` until `shutdown`, accepting only calls
/// whose principal `signer` verifies, and sweeps the automatic-link queue
/// meanwhile.
pub async fn serve(
    server: RememberServer,
    signer: PrincipalSigner,
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let database = server.store.answering();
    let background = server.background.clone();
    let stop = tokio_util::sync::CancellationToken::new();
    let sweeps = tokio::spawn(server.auto_linker.clone().run_sweeps(stop.clone()));
    let service = RememberServiceServer::with_interceptor(server, signer);
    let served = mneme_proto::server::serve_service(service, listener, shutdown, database).await;
    stop.cancel();
    // Automatic links wait in a durable queue that the sweeps resume after
    // a restart; the claims of a bulk write have no such queue.
    mneme_proto::server::finish_background(&background).await;
    sweeps.await?;
    served?;
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
    let server = RememberServer::new(store, cache, config.remember.clone())
        .with_consolidation(config.consolidation.clone());
    let stop = tokio_util::sync::CancellationToken::new();
    let reflector = config.auto_reflect.enabled.then(|| {
        let reflector =
            auto_reflect::SessionReflector::new(server.clone(), config.auto_reflect.clone());
        tokio::spawn(reflector.run(stop.clone()))
    });
    tracing::info!(addr = %listener.local_addr()?, "remember service listening");
    let served = serve(
        server,
        PrincipalSigner::new(token.expose()),
        listener,
        shutdown,
    )
    .await;
    stop.cancel();
    if let Some(reflector) = reflector {
        reflector.await?;
    }
    served
}
