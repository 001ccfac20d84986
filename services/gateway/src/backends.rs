//! Clients of the backend services, with the caller's principal signed into
//! every call and the deadline propagated (`grpc-timeout`).

use std::time::Duration;

use mneme_core::{Error, Principal};
use mneme_proto::error::from_status;
use mneme_proto::principal::PrincipalSigner;
use mneme_proto::v1::recall_service_client::RecallServiceClient;
use mneme_proto::v1::remember_service_client::RememberServiceClient;
use mneme_proto::v1::{
    AmendRequest, AmendResponse, BatchProgress, BatchRememberRequest, BatchRememberResult,
    ConsolidateProgress, ConsolidateRequest, ConsolidateResult, ContextRequest, ContextResponse,
    FetchRequest, ForgetRequest, ForgetResponse, FragmentHistoryRequest, FragmentHistoryResponse,
    GraphExploreRequest, GraphExploreResponse, LinkRequest, LinkResponse, RecallRequest,
    RecallResponse, RecalledFragment, ReconstructHistoryRequest, ReconstructHistoryResponse,
    ReflectRequest, ReflectResponse, RememberRequest, RememberResponse, SearchTracesRequest,
    SearchTracesResponse, StatsRequest, StatsResponse, SurfaceRequest, SurfaceResponse,
    ToolFeedbackRequest, ToolFeedbackResponse, batch_remember_event, consolidate_event,
};
use tonic::transport::Channel;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;

/// Deadline of an on-demand consolidation (all stages of one tenant).
const CONSOLIDATE_TIMEOUT: Duration = Duration::from_secs(600);

/// A future returned by progress callbacks.
pub type ProgressFuture = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// gRPC clients of recall and remember. Cheap to clone; channels connect
/// lazily and reconnect by themselves.
#[derive(Debug, Clone)]
pub struct Backends {
    recall: Channel,
    remember: Channel,
    signer: PrincipalSigner,
    timeout: Duration,
}

/// One connection to `url`'s host, or (with `resolve_every`) a channel
/// balanced over every address the host resolves to.
fn channel(url: &str, resolve_every: Option<Duration>) -> anyhow::Result<Channel> {
    match resolve_every {
        None => Ok(crate::discovery::endpoint(url.to_owned())?.connect_lazy()),
        Some(every) => {
            crate::discovery::balanced_channel(url, every, crate::discovery::system_resolver())
        }
    }
}

impl Backends {
    pub fn new(
        recall_url: &str,
        remember_url: &str,
        signer: PrincipalSigner,
        timeout: Duration,
        resolve_every: Option<Duration>,
    ) -> anyhow::Result<Self> {
        Ok(Self {
            recall: channel(recall_url, resolve_every)?,
            remember: channel(remember_url, resolve_every)?,
            signer,
            timeout,
        })
    }

    fn request<T>(&self, principal: &Principal, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        request.set_timeout(self.timeout);
        self.signer.attach(&mut request, principal);
        mneme_proto::trace_context::inject_current(&mut request);
        request
    }

    /// Sends one unary call with the principal and deadline attached.
    async fn unary<C, T, R, F, Fut>(
        &self,
        method: &'static str,
        client: C,
        principal: &Principal,
        message: T,
        rpc: F,
    ) -> Result<R, Error>
    where
        F: FnOnce(C, tonic::Request<T>) -> Fut,
        Fut: std::future::Future<Output = Result<tonic::Response<R>, tonic::Status>>,
    {
        let started = std::time::Instant::now();
        let result = rpc(client, self.request(principal, message)).await;
        let code = match &result {
            Ok(_) => tonic::Code::Ok,
            Err(status) => status.code(),
        };
        crate::metrics::METRICS
            .grpc_client
            .with_label_values(&[method, &format!("{code:?}")])
            .observe(started.elapsed().as_secs_f64());
        result
            .map(tonic::Response::into_inner)
            .map_err(|status| from_status(&status))
    }

    fn remember_client(&self) -> RememberServiceClient<Channel> {
        RememberServiceClient::new(self.remember.clone())
    }

    fn recall_client(&self) -> RecallServiceClient<Channel> {
        RecallServiceClient::new(self.recall.clone())
    }

    /// Runs a batch, passing each progress event to `on_progress`, and
    /// returns the final result.
    pub async fn batch_remember(
        &self,
        principal: &Principal,
        message: BatchRememberRequest,
        mut on_progress: impl FnMut(BatchProgress) -> ProgressFuture,
    ) -> Result<BatchRememberResult, Error> {
        let mut stream = self
            .remember_client()
            .batch_remember(self.request(principal, message))
            .await
            .map_err(|status| from_status(&status))?
            .into_inner();
        while let Some(event) = stream
            .message()
            .await
            .map_err(|status| from_status(&status))?
        {
            match event.event {
                Some(batch_remember_event::Event::Progress(progress)) => {
                    on_progress(progress).await
                }
                Some(batch_remember_event::Event::Result(result)) => return Ok(result),
                None => {}
            }
        }
        tracing::error!("batch stream ended without a result");
        Err(Error::internal())
    }

    /// Runs a consolidation of the principal's tenant, passing each stage's
    /// progress to `on_progress`, and returns the final result.
    pub async fn consolidate(
        &self,
        principal: &Principal,
        message: ConsolidateRequest,
        mut on_progress: impl FnMut(ConsolidateProgress) -> ProgressFuture,
    ) -> Result<ConsolidateResult, Error> {
        let mut request = self.request(principal, message);
        // A run takes as long as its stages do, not as long as a call.
        request.set_timeout(self.timeout.max(CONSOLIDATE_TIMEOUT));
        let mut stream = self
            .remember_client()
            .consolidate(request)
            .await
            .map_err(|status| from_status(&status))?
            .into_inner();
        while let Some(event) = stream
            .message()
            .await
            .map_err(|status| from_status(&status))?
        {
            match event.event {
                Some(consolidate_event::Event::Progress(progress)) => on_progress(progress).await,
                Some(consolidate_event::Event::Result(result)) => return Ok(result),
                None => {}
            }
        }
        tracing::error!("consolidation stream ended without a result");
        Err(Error::internal())
    }

    /// Names of backends whose `grpc.health.v1` check does not answer
    /// SERVING within a second.
    pub async fn unhealthy(&self) -> Vec<&'static str> {
        let checks = [("recall", &self.recall), ("remember", &self.remember)];
        let mut down = Vec::new();
        for (name, channel) in checks {
            let mut request = tonic::Request::new(HealthCheckRequest {
                service: String::new(),
            });
            request.set_timeout(Duration::from_secs(1));
            let serving = HealthClient::new(channel.clone())
                .check(request)
                .await
                .is_ok_and(|r| r.into_inner().status == 1);
            if !serving {
                down.push(name);
            }
        }
        down
    }
}

/// One method per unary RPC: `client.rpc(Request) -> Response;`.
macro_rules! unary_rpcs {
    ($($client:ident . $rpc:ident ($request:ty) -> $response:ty;)*) => {
        impl Backends {
            $(
                pub async fn $rpc(
                    &self,
                    principal: &Principal,
                    message: $request,
                ) -> Result<$response, Error> {
                    self.unary(stringify!($rpc), self.$client(), principal, message, |mut c, r| async move {
                        c.$rpc(r).await
                    })
                    .await
                }
            )*
        }
    };
}

unary_rpcs! {
    remember_client.remember(RememberRequest) -> RememberResponse;
    remember_client.forget(ForgetRequest) -> ForgetResponse;
    remember_client.amend(AmendRequest) -> AmendResponse;
    remember_client.link(LinkRequest) -> LinkResponse;
    remember_client.reflect(ReflectRequest) -> ReflectResponse;
    remember_client.record_tool_feedback(ToolFeedbackRequest) -> ToolFeedbackResponse;
    recall_client.recall(RecallRequest) -> RecallResponse;
    recall_client.context(ContextRequest) -> ContextResponse;
    recall_client.fetch(FetchRequest) -> RecalledFragment;
    recall_client.stats(StatsRequest) -> StatsResponse;
    recall_client.graph_explore(GraphExploreRequest) -> GraphExploreResponse;
    recall_client.fragment_history(FragmentHistoryRequest) -> FragmentHistoryResponse;
    recall_client.reconstruct_history(ReconstructHistoryRequest) -> ReconstructHistoryResponse;
    recall_client.search_traces(SearchTracesRequest) -> SearchTracesResponse;
    recall_client.surface(SurfaceRequest) -> SurfaceResponse;
}
