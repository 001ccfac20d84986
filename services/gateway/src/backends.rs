//! Clients of the backend services, with the caller's principal signed into
//! every call, the deadline propagated (`grpc-timeout`) and failover between
//! a service's instances ([`crate::discovery`]).
//!
//! A call that fails in transport (refused, reset, the instance gone) ejects
//! that instance and may be sent again to another one, within the same
//! deadline and `MNEME_BACKEND_ATTEMPTS`:
//! - reads always (they change nothing but usage counters);
//! - a `remember` with an idempotency key always (the key makes a second
//!   delivery return the first fragment);
//! - other writes only when they never reached an instance (connection
//!   refused). A write whose connection broke mid-call is reported as
//!   unavailable with its outcome unknown, never as failed or done.
//!
//! An instance that gives no answer at all (frozen, partitioned, stuck) is
//! treated the same way once `MNEME_BACKEND_ATTEMPT_TIMEOUT_MS` has passed,
//! for calls that may go elsewhere: the attempt is cancelled, the instance
//! ejected, and the call sent to the next instance with what is left of the
//! deadline. Without this every call round robin sends to a hung instance
//! would wait out its whole deadline and fail.
//!
//! Answers an instance sends (including `Unavailable` because its database
//! is down) are final: they say nothing about the instance's health.

use std::sync::Arc;
use std::time::{Duration, Instant};

use mneme_core::{Error, ErrorCode, Principal};
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

use crate::discovery::{Discovery, Instance, Pool};

/// Deadline of an on-demand consolidation (all stages of one tenant).
const CONSOLIDATE_TIMEOUT: Duration = Duration::from_secs(600);

/// A retry needs at least this much of the deadline left to be worth sending.
const MIN_RETRY_BUDGET: Duration = Duration::from_millis(50);

/// What a caller is told when no instance could take a call.
const UNAVAILABLE: &str = "the backend is unavailable; retry shortly";

/// A future returned by progress callbacks.
pub type ProgressFuture = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// Where the backends are and how calls to them fail over.
#[derive(Debug, Clone)]
pub struct BackendSettings {
    pub recall_urls: Vec<String>,
    pub remember_urls: Vec<String>,
    /// Deadline of each call, retries included.
    pub timeout: Duration,
    /// `Some`: follow the hosts' DNS answers on this interval.
    pub resolve_every: Option<Duration>,
    /// How long an instance that failed in transport gets no calls.
    pub eject_for: Duration,
    /// Most instances one call is sent to.
    pub attempts: usize,
    /// Longest wait for one instance when another may take the call.
    pub attempt_timeout: Duration,
}

impl BackendSettings {
    pub fn from_config(config: &mneme_config::GatewayConfig) -> Self {
        Self {
            recall_urls: config.recall_urls.clone(),
            remember_urls: config.remember_urls.clone(),
            timeout: config.backend_timeout,
            resolve_every: config.backend_resolve_every,
            eject_for: config.backend_eject,
            attempts: config.backend_attempts,
            attempt_timeout: config.backend_attempt_timeout,
        }
    }
}

/// gRPC clients of recall and remember. Cheap to clone; channels connect
/// lazily and reconnect by themselves.
#[derive(Debug, Clone)]
pub struct Backends {
    recall: Pool,
    remember: Pool,
    signer: PrincipalSigner,
    timeout: Duration,
    attempts: usize,
    attempt_timeout: Duration,
}

/// Which transport failures a call may be retried after.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Retry {
    /// Any: the call changes nothing a second delivery would repeat.
    Lost,
    /// Only a call that never reached an instance.
    NotSent,
}

/// How a call failed below gRPC (no answer from an instance).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TransportFailure {
    /// The connection could not be made: the call never left.
    NotSent,
    /// The connection broke, or the instance gave no answer in time: it
    /// may have acted on the call.
    Lost,
}

/// `None` for an answer an instance sent (or the caller's own deadline);
/// transport errors keep their cause as the status's source.
fn transport_failure(status: &tonic::Status) -> Option<TransportFailure> {
    if matches!(
        status.code(),
        tonic::Code::Cancelled | tonic::Code::DeadlineExceeded
    ) {
        return None;
    }
    let mut cause = std::error::Error::source(status)?;
    loop {
        if cause.is::<tonic::ConnectError>() {
            return Some(TransportFailure::NotSent);
        }
        match cause.source() {
            Some(next) => cause = next,
            None => return Some(TransportFailure::Lost),
        }
    }
}

impl Backends {
    pub fn new(settings: &BackendSettings, signer: PrincipalSigner) -> anyhow::Result<Self> {
        let discovery = match settings.resolve_every {
            None => Discovery::Static,
            Some(every) => Discovery::Dns {
                every,
                resolve: crate::discovery::system_resolver(),
            },
        };
        Ok(Self {
            recall: Pool::new(
                "recall",
                &settings.recall_urls,
                discovery.clone(),
                settings.eject_for,
            )?,
            remember: Pool::new(
                "remember",
                &settings.remember_urls,
                discovery,
                settings.eject_for,
            )?,
            signer,
            timeout: settings.timeout,
            attempts: settings.attempts.max(1),
            attempt_timeout: settings.attempt_timeout,
        })
    }

    fn request<T>(
        &self,
        principal: &Principal,
        message: T,
        timeout: Duration,
    ) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        request.set_timeout(timeout);
        self.signer.attach(&mut request, principal);
        mneme_proto::trace_context::inject_current(&mut request);
        request
    }

    /// Sends one unary call with the principal and deadline attached,
    /// failing over to other instances as `retry` allows.
    async fn unary<T, R, F, Fut>(
        &self,
        method: &'static str,
        pool: &Pool,
        retry: Retry,
        principal: &Principal,
        message: T,
        rpc: F,
    ) -> Result<R, Error>
    where
        T: Clone,
        F: Fn(Channel, tonic::Request<T>) -> Fut,
        Fut: std::future::Future<Output = Result<tonic::Response<R>, tonic::Status>>,
    {
        let deadline = Instant::now() + self.timeout;
        let mut tried: Vec<Arc<Instance>> = Vec::new();
        loop {
            let Some(instance) = pool.pick(&tried) else {
                return Err(Error::unavailable(UNAVAILABLE));
            };
            let started = Instant::now();
            let remaining = deadline.saturating_duration_since(started);
            let may_go_elsewhere = retry == Retry::Lost
                && tried.len() + 1 < self.attempts
                && pool.instances().len() > tried.len() + 1;
            let wait = if may_go_elsewhere {
                remaining.min(self.attempt_timeout)
            } else {
                remaining
            };
            // The instance is given the whole deadline: only this caller
            // stops waiting early (dropping the call cancels it there).
            let request = self.request(principal, message.clone(), remaining);
            let (result, no_answer) =
                match tokio::time::timeout(wait, rpc(instance.channel.clone(), request)).await {
                    Ok(result) => (result, false),
                    Err(_) => (
                        Err(tonic::Status::deadline_exceeded(format!(
                            "no answer within {} ms",
                            wait.as_millis()
                        ))),
                        true,
                    ),
                };
            let code = match &result {
                Ok(_) => tonic::Code::Ok,
                Err(status) => status.code(),
            };
            crate::metrics::METRICS
                .grpc_client
                .with_label_values(&[method, &format!("{code:?}")])
                .observe(started.elapsed().as_secs_f64());
            let status = match result {
                Ok(response) => return Ok(response.into_inner()),
                Err(status) => status,
            };
            let failure = if no_answer && may_go_elsewhere {
                TransportFailure::Lost
            } else {
                match transport_failure(&status) {
                    Some(failure) => failure,
                    // A write whose deadline passed or that was cancelled
                    // (here, in the channel or on the instance, which says
                    // so with either code): the instance may be committing it
                    // right now, so the caller must not take the failure
                    // for a refusal.
                    None if retry == Retry::NotSent
                        && (no_answer
                            || matches!(
                                status.code(),
                                tonic::Code::DeadlineExceeded | tonic::Code::Cancelled
                            )) =>
                    {
                        return Err(Error::new(
                            ErrorCode::Timeout,
                            "the backend did not answer in time, so the call may or may not \
                             have taken effect; check before repeating it (with an \
                             idempotencyKey a repeat is safe)",
                        ));
                    }
                    None => return Err(from_status(&status)),
                }
            };
            pool.eject(&instance);
            tried.push(instance);
            let may_retry = retry == Retry::Lost || failure == TransportFailure::NotSent;
            let budget_left = deadline.saturating_duration_since(Instant::now()) > MIN_RETRY_BUDGET;
            if may_retry
                && budget_left
                && tried.len() < self.attempts
                && pool.pick(&tried).is_some()
            {
                crate::metrics::METRICS
                    .backend_retries
                    .with_label_values(&[pool.service()])
                    .inc();
                continue;
            }
            tracing::warn!(service = pool.service(), method, ?failure, %status, "backend call failed in transport");
            return Err(match failure {
                TransportFailure::NotSent => Error::unavailable(UNAVAILABLE),
                TransportFailure::Lost if retry == Retry::Lost => Error::unavailable(UNAVAILABLE),
                TransportFailure::Lost => Error::new(
                    ErrorCode::Unavailable,
                    "the connection to the backend broke during the call, so it may or may not \
                     have taken effect; check before repeating it",
                ),
            });
        }
    }

    /// An instance for a streaming call (not retried: progress has been
    /// reported by then).
    fn instance(&self, pool: &Pool) -> Result<Arc<Instance>, Error> {
        pool.pick(&[])
            .ok_or_else(|| Error::unavailable(UNAVAILABLE))
    }

    /// Ejects the instance a streaming call failed on in transport.
    fn stream_failed(pool: &Pool, instance: &Instance, status: &tonic::Status) -> Error {
        if transport_failure(status).is_some() {
            pool.eject(instance);
        }
        from_status(status)
    }

    /// Runs a batch, passing each progress event to `on_progress`, and
    /// returns the final result.
    pub async fn batch_remember(
        &self,
        principal: &Principal,
        message: BatchRememberRequest,
        mut on_progress: impl FnMut(BatchProgress) -> ProgressFuture,
    ) -> Result<BatchRememberResult, Error> {
        let instance = self.instance(&self.remember)?;
        let failed = |status| Self::stream_failed(&self.remember, &instance, &status);
        let mut stream = RememberServiceClient::new(instance.channel.clone())
            .batch_remember(self.request(principal, message, self.timeout))
            .await
            .map_err(failed)?
            .into_inner();
        while let Some(event) = stream.message().await.map_err(failed)? {
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
        // A run takes as long as its stages do, not as long as a call.
        let request = self.request(principal, message, self.timeout.max(CONSOLIDATE_TIMEOUT));
        let instance = self.instance(&self.remember)?;
        let failed = |status| Self::stream_failed(&self.remember, &instance, &status);
        let mut stream = RememberServiceClient::new(instance.channel.clone())
            .consolidate(request)
            .await
            .map_err(failed)?
            .into_inner();
        while let Some(event) = stream.message().await.map_err(failed)? {
            match event.event {
                Some(consolidate_event::Event::Progress(progress)) => on_progress(progress).await,
                Some(consolidate_event::Event::Result(result)) => return Ok(result),
                None => {}
            }
        }
        tracing::error!("consolidation stream ended without a result");
        Err(Error::internal())
    }

    /// Names of backends none of whose instances answers the
    /// `grpc.health.v1` check with SERVING within a second.
    pub async fn unhealthy(&self) -> Vec<&'static str> {
        let mut down = Vec::new();
        for pool in [&self.recall, &self.remember] {
            let instances = pool.instances();
            let checks = instances.iter().map(|instance| {
                let mut request = tonic::Request::new(HealthCheckRequest {
                    service: String::new(),
                });
                request.set_timeout(Duration::from_secs(1));
                let mut client = HealthClient::new(instance.channel.clone());
                async move {
                    client
                        .check(request)
                        .await
                        .is_ok_and(|r| r.into_inner().status == 1)
                }
            });
            if !futures::future::join_all(checks).await.contains(&true) {
                down.push(pool.service());
            }
        }
        down
    }
}

/// One method per unary RPC:
/// `pool: Client.rpc(Request) -> Response, retry policy;`, where the policy
/// is a function of the request.
macro_rules! unary_rpcs {
    ($($pool:ident: $client:ident . $rpc:ident ($request:ty) -> $response:ty, $retry:expr;)*) => {
        impl Backends {
            $(
                pub async fn $rpc(
                    &self,
                    principal: &Principal,
                    message: $request,
                ) -> Result<$response, Error> {
                    let retry: fn(&$request) -> Retry = $retry;
                    let retry = retry(&message);
                    self.unary(stringify!($rpc), &self.$pool, retry, principal, message, |channel, r| async move {
                        $client::new(channel).$rpc(r).await
                    })
                    .await
                }
            )*
        }
    };
}

/// Reads may be delivered twice.
fn read<T>(_: &T) -> Retry {
    Retry::Lost
}

/// Writes only when the first delivery never left.
fn write<T>(_: &T) -> Retry {
    Retry::NotSent
}

unary_rpcs! {
    remember: RememberServiceClient.remember(RememberRequest) -> RememberResponse,
        |request| if request.idempotency_key.is_some() { Retry::Lost } else { Retry::NotSent };
    remember: RememberServiceClient.forget(ForgetRequest) -> ForgetResponse, write;
    remember: RememberServiceClient.amend(AmendRequest) -> AmendResponse, write;
    remember: RememberServiceClient.link(LinkRequest) -> LinkResponse, write;
    remember: RememberServiceClient.reflect(ReflectRequest) -> ReflectResponse, write;
    remember: RememberServiceClient.record_tool_feedback(ToolFeedbackRequest) -> ToolFeedbackResponse, write;
    recall: RecallServiceClient.recall(RecallRequest) -> RecallResponse, read;
    recall: RecallServiceClient.context(ContextRequest) -> ContextResponse, read;
    recall: RecallServiceClient.fetch(FetchRequest) -> RecalledFragment, read;
    recall: RecallServiceClient.stats(StatsRequest) -> StatsResponse, read;
    recall: RecallServiceClient.graph_explore(GraphExploreRequest) -> GraphExploreResponse, read;
    recall: RecallServiceClient.fragment_history(FragmentHistoryRequest) -> FragmentHistoryResponse, read;
    recall: RecallServiceClient.reconstruct_history(ReconstructHistoryRequest) -> ReconstructHistoryResponse, read;
    recall: RecallServiceClient.search_traces(SearchTracesRequest) -> SearchTracesResponse, read;
    recall: RecallServiceClient.surface(SurfaceRequest) -> SurfaceResponse, read;
}
