//! Rate limits and daily call quotas, shared by all gateway pods.
//!
//! Every authenticated request counts against its tenant and its key; tool
//! calls of writing tools also count against the key's write budget, and
//! every tool call against the key's `daily_call_limit` (UTC day). Counters
//! are fixed windows in Redis, checked and incremented by one script, so the
//! pods together never admit more than a limit per window. Failed
//! authentications count per client IP; an IP over its limit is refused
//! before its credentials cost a database lookup.
//!
//! When Redis is unreachable each pod counts on its own ([`LocalWindows`])
//! with the same limits: never unlimited, never refusing everyone. The
//! `backend` label of `mneme_rate_limit_decisions_total` shows which applied.
//!
//! Admitted tool calls are also tallied per key and day in memory and added
//! to `api_key_usage` every `MNEME_USAGE_FLUSH_SECS` ([`Limiter::flush_usage`]).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use chrono::{NaiveDate, Utc};
use mneme_cache::{Admission, Bucket, Cache};
use mneme_config::RateLimitConfig;
use mneme_core::{Error, ErrorCode, Principal};
use mneme_store::Store;
use uuid::Uuid;

use crate::App;
use crate::error::ApiError;
use crate::jsonrpc::{self, McpCall};
use crate::metrics::METRICS;
use crate::tools::REGISTRY;

/// The limits of the caller's key and tenant, as stored (`None`: default or
/// unlimited), put in the request extensions by authentication.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct KeyLimits {
    pub(crate) tenant_rate_limit: Option<i32>,
    pub(crate) key_rate_limit: Option<i32>,
    pub(crate) daily_call_limit: Option<i32>,
}

/// What a bucket limits, for headers, messages and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scope {
    Tenant,
    Key,
    Writes,
    Daily,
    Ip,
    /// An unauthenticated endpoint, per client address.
    Address,
}

impl Scope {
    fn label(self) -> &'static str {
        match self {
            Scope::Tenant => "tenant",
            Scope::Key => "key",
            Scope::Writes => "writes",
            Scope::Daily => "daily",
            Scope::Ip => "ip",
            Scope::Address => "address",
        }
    }

    fn message(self) -> &'static str {
        match self {
            Scope::Tenant => "Too many requests: the tenant's rate limit is reached",
            Scope::Key => "Too many requests: the API key's rate limit is reached",
            Scope::Writes => "Too many requests: the API key's limit on writing tools is reached",
            Scope::Daily => "Too many requests: the API key's daily tool-call limit is reached",
            Scope::Ip => {
                "Too many requests: too many failed authentications; wait before trying again"
            }
            Scope::Address => "Too many requests from this address",
        }
    }
}

/// One bucket of a request with its window, for the response headers.
struct Planned {
    scope: Scope,
    bucket: Bucket,
    /// Time until the bucket's window ends.
    reset: Duration,
}

/// The decision on one request.
struct Decision {
    allowed: bool,
    scope: Scope,
    limit: u32,
    remaining: u32,
    reset: Duration,
}

/// Per-pod fallback counters, used while Redis is unreachable.
#[derive(Default)]
struct LocalWindows {
    counts: HashMap<String, (u32, Instant)>,
}

/// Entries kept before expired windows are swept.
const LOCAL_SWEEP_AT: usize = 10_000;

impl LocalWindows {
    fn admit(&mut self, buckets: &[Bucket]) -> Admission {
        let now = Instant::now();
        if self.counts.len() > LOCAL_SWEEP_AT {
            self.counts.retain(|_, (_, expires)| *expires > now);
        }
        let mut tightest = (0, u32::MAX);
        for (index, bucket) in buckets.iter().enumerate() {
            let used = self.count(&bucket.key);
            if used >= bucket.limit {
                return Admission {
                    allowed: false,
                    bucket: index,
                    remaining: 0,
                };
            }
            let left = bucket.limit - used - 1;
            if left < tightest.1 {
                tightest = (index, left);
            }
        }
        for bucket in buckets {
            self.add(bucket);
        }
        Admission {
            allowed: true,
            bucket: tightest.0,
            remaining: tightest.1,
        }
    }

    fn count(&self, key: &str) -> u32 {
        self.counts
            .get(key)
            .filter(|(_, expires)| *expires > Instant::now())
            .map_or(0, |(count, _)| *count)
    }

    fn add(&mut self, bucket: &Bucket) {
        let now = Instant::now();
        let entry = self
            .counts
            .entry(bucket.key.clone())
            .or_insert((0, now + bucket.ttl));
        if entry.1 <= now {
            *entry = (0, now + bucket.ttl);
        }
        entry.0 += 1;
    }
}

/// Who failed to authenticate: a client address, or a sign-in account (a
/// hash of its normalised email, so addresses never reach Redis).
#[derive(Debug, Clone)]
pub(crate) enum Failures {
    Address(IpAddr),
    Account(String),
}

/// Failed sign-ins per account and window before the account's sign-in is
/// refused for the rest of the window (guessing passwords from many
/// addresses).
const FAILED_SIGN_INS_PER_ACCOUNT: u32 = 10;

/// The gateway's limiter.
pub(crate) struct Limiter {
    cache: Cache,
    config: RateLimitConfig,
    trusted_proxy_hops: usize,
    local: Mutex<LocalWindows>,
    /// Admitted tool calls not yet added to `api_key_usage`.
    usage: Mutex<HashMap<(Uuid, Uuid, NaiveDate), i64>>,
}

impl std::fmt::Debug for Limiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Limiter").finish_non_exhaustive()
    }
}

fn unix_now() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

/// Time left until the next UTC midnight.
fn until_midnight() -> Duration {
    let now = unix_now().as_secs();
    Duration::from_secs(86_400 - now % 86_400)
}

fn clamp_limit(value: Option<i32>, default: u32) -> u32 {
    value.and_then(|v| u32::try_from(v).ok()).unwrap_or(default)
}

impl Limiter {
    pub(crate) fn new(cache: Cache, config: RateLimitConfig, trusted_proxy_hops: usize) -> Self {
        Self {
            cache,
            config,
            trusted_proxy_hops,
            local: Mutex::default(),
            usage: Mutex::default(),
        }
    }

    /// The current window's index and the time left in it.
    fn window(&self) -> (u64, Duration) {
        let window = self.config.window.as_millis().max(1) as u64;
        let now = unix_now().as_millis() as u64;
        (now / window, Duration::from_millis(window - now % window))
    }

    /// Where a key stands against its limits now (for the dashboard):
    /// requests in the current window and tool calls today, as Redis
    /// counts them (`None` when Redis cannot say).
    pub(crate) async fn key_status(
        &self,
        tenant_id: Uuid,
        key_id: Uuid,
        key_rate_limit: Option<i32>,
    ) -> serde_json::Value {
        let (index, reset) = self.window();
        let tenant = tenant_id.to_string();
        let key = key_id.to_string();
        let day = Utc::now().format("%Y%m%d").to_string();
        let count = |parts: Vec<String>| {
            let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
            let name = self.cache.rate_limit_key(&tenant, &parts);
            async move { self.cache.bucket_count(&name).await.ok() }
        };
        serde_json::json!({
            "limit": clamp_limit(key_rate_limit, self.config.per_key),
            "windowSecs": self.config.window.as_secs(),
            "used": count(vec!["k".into(), key.clone(), index.to_string()]).await,
            "resetsInSecs": reset.as_secs(),
            "toolCallsToday": count(vec!["d".into(), key, day]).await,
        })
    }

    fn plan(&self, principal: &Principal, limits: KeyLimits, tool: Option<&str>) -> Vec<Planned> {
        let (index, reset) = self.window();
        let index = index.to_string();
        let ttl = self.config.window * 2;
        let tenant = principal.tenant_id.to_string();
        let key = principal.key_id.to_string();
        let bucket = |parts: &[&str], limit: u32, ttl: Duration| Bucket {
            key: self.cache.rate_limit_key(&tenant, parts),
            limit,
            ttl,
        };
        let mut planned = vec![
            Planned {
                scope: Scope::Tenant,
                bucket: bucket(
                    &["t", &index],
                    clamp_limit(limits.tenant_rate_limit, self.config.per_tenant),
                    ttl,
                ),
                reset,
            },
            Planned {
                scope: Scope::Key,
                bucket: bucket(
                    &["k", &key, &index],
                    clamp_limit(limits.key_rate_limit, self.config.per_key),
                    ttl,
                ),
                reset,
            },
        ];
        let Some(tool) = tool.and_then(|name| REGISTRY.get(name)) else {
            return planned;
        };
        if !tool.read_only {
            planned.push(Planned {
                scope: Scope::Writes,
                bucket: bucket(&["w", &key, &index], self.config.writes_per_key, ttl),
                reset,
            });
        }
        if let Some(daily) = limits.daily_call_limit.and_then(|v| u32::try_from(v).ok()) {
            let day = Utc::now().format("%Y%m%d").to_string();
            planned.push(Planned {
                scope: Scope::Daily,
                bucket: bucket(&["d", &key, &day], daily, Duration::from_secs(2 * 86_400)),
                reset: until_midnight(),
            });
        }
        planned
    }

    async fn admit(&self, planned: &[Planned]) -> Decision {
        let buckets: Vec<Bucket> = planned.iter().map(|p| p.bucket.clone()).collect();
        let (admission, backend) = match self.redis_admit(&buckets).await {
            Some(admission) => (admission, "redis"),
            None => (
                self.local.lock().expect("not poisoned").admit(&buckets),
                "local",
            ),
        };
        let chosen = &planned[admission.bucket.min(planned.len() - 1)];
        let decision = if admission.allowed {
            "allowed"
        } else {
            "limited"
        };
        METRICS
            .rate_limit
            .with_label_values(&[chosen.scope.label(), decision, backend])
            .inc();
        Decision {
            allowed: admission.allowed,
            scope: chosen.scope,
            limit: chosen.bucket.limit,
            remaining: admission.remaining,
            reset: chosen.reset,
        }
    }

    async fn redis_admit(&self, buckets: &[Bucket]) -> Option<Admission> {
        if !self.cache.is_connected() {
            return None;
        }
        self.cache
            .admit(buckets)
            .await
            .inspect_err(|error| tracing::warn!(%error, "rate limiting locally: redis failed"))
            .ok()
    }

    /// The failed-authentication bucket of a client address or of a
    /// sign-in account.
    fn failure_bucket(&self, subject: &Failures) -> Planned {
        let (index, reset) = self.window();
        let (scope, tag, limit) = match subject {
            Failures::Address(ip) => (ip.to_string(), "ip", self.config.failed_auth_per_ip),
            Failures::Account(account) => (account.clone(), "account", FAILED_SIGN_INS_PER_ACCOUNT),
        };
        Planned {
            scope: Scope::Ip,
            bucket: Bucket {
                key: self
                    .cache
                    .rate_limit_key(&scope, &[tag, &index.to_string()]),
                limit,
                ttl: self.config.window * 2,
            },
            reset,
        }
    }

    /// `Some(refusal)` when `ip` has failed authentication too often.
    pub(crate) async fn check_ip(&self, ip: IpAddr) -> Option<Response> {
        self.check_failures(&Failures::Address(ip)).await
    }

    /// `Some(refusal)` when `subject` has failed authentication too often.
    pub(crate) async fn check_failures(&self, subject: &Failures) -> Option<Response> {
        let planned = self.failure_bucket(subject);
        let (count, backend) = match self.cache.is_connected() {
            true => match self.cache.bucket_count(&planned.bucket.key).await {
                Ok(count) => (count, "redis"),
                Err(_) => (self.local_count(&planned.bucket.key), "local"),
            },
            false => (self.local_count(&planned.bucket.key), "local"),
        };
        if count < planned.bucket.limit {
            return None;
        }
        METRICS
            .rate_limit
            .with_label_values(&["ip", "limited", backend])
            .inc();
        Some(too_many(
            &Decision {
                allowed: false,
                scope: Scope::Ip,
                limit: planned.bucket.limit,
                remaining: 0,
                reset: planned.reset,
            },
            None,
        ))
    }

    /// Counts a request of an unauthenticated endpoint (`name`) against the
    /// client's address: `Some(429)` once `limit` per window is reached.
    pub(crate) async fn admit_address(
        &self,
        name: &str,
        ip: IpAddr,
        limit: u32,
    ) -> Option<Response> {
        let (index, reset) = self.window();
        let planned = [Planned {
            scope: Scope::Address,
            bucket: Bucket {
                key: self
                    .cache
                    .rate_limit_key(&ip.to_string(), &[name, &index.to_string()]),
                limit,
                ttl: self.config.window * 2,
            },
            reset,
        }];
        let decision = self.admit(&planned).await;
        (!decision.allowed).then(|| too_many(&decision, None))
    }

    fn local_count(&self, key: &str) -> u32 {
        self.local.lock().expect("not poisoned").count(key)
    }

    /// Counts a failed authentication from `ip`.
    pub(crate) async fn record_failed_auth(&self, ip: IpAddr) {
        self.record_failure(&Failures::Address(ip)).await;
    }

    /// Counts a failed authentication of `subject`.
    pub(crate) async fn record_failure(&self, subject: &Failures) {
        let planned = self.failure_bucket(subject);
        let counted = self.cache.is_connected() && self.cache.count(&planned.bucket).await.is_ok();
        if !counted {
            self.local
                .lock()
                .expect("not poisoned")
                .add(&planned.bucket);
        }
    }

    fn tally_tool_call(&self, principal: &Principal) {
        let day = Utc::now().date_naive();
        *self
            .usage
            .lock()
            .expect("not poisoned")
            .entry((principal.tenant_id, principal.key_id, day))
            .or_default() += 1;
    }

    /// Adds the tallied tool calls to `api_key_usage`. Calls that cannot be
    /// written are kept for the next flush.
    pub(crate) async fn flush_usage(&self, store: &Store) {
        let pending = std::mem::take(&mut *self.usage.lock().expect("not poisoned"));
        let mut failed = Vec::new();
        for ((tenant_id, key_id, day), calls) in pending {
            let written = async {
                let mut client = store.client().await?;
                let tx = mneme_store::TenantTx::begin(&mut client, tenant_id).await?;
                mneme_store::usage::add_tool_calls(&tx, key_id, day, calls).await?;
                tx.commit().await
            }
            .await;
            if let Err(error) = written {
                tracing::warn!(%error, "tool-call usage not recorded yet");
                failed.push(((tenant_id, key_id, day), calls));
            }
        }
        let mut usage = self.usage.lock().expect("not poisoned");
        for (entry, calls) in failed {
            *usage.entry(entry).or_default() += calls;
        }
    }

    /// The client's address (see [`client_ip`]).
    pub(crate) fn client_ip(&self, request: &Request) -> Option<IpAddr> {
        client_ip(request.headers(), peer(request), self.trusted_proxy_hops)
    }
}

/// The client's address: the TCP peer, or, behind `trusted_hops` proxies
/// that append to `X-Forwarded-For`, the entry the outermost one added.
fn client_ip(headers: &HeaderMap, peer: Option<SocketAddr>, trusted_hops: usize) -> Option<IpAddr> {
    if trusted_hops > 0 {
        let forwarded: Vec<&str> = headers
            .get_all("x-forwarded-for")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(str::trim)
            .collect();
        if let Some(entry) = forwarded
            .len()
            .checked_sub(trusted_hops)
            .and_then(|i| forwarded.get(i))
            && let Ok(ip) = entry.parse()
        {
            return Some(ip);
        }
    }
    peer.map(|addr| addr.ip())
}

fn set_headers(headers: &mut HeaderMap, decision: &Decision) {
    let reset = decision.reset.as_secs().max(1);
    for (name, value) in [
        ("ratelimit-limit", u64::from(decision.limit)),
        ("ratelimit-remaining", u64::from(decision.remaining)),
        ("ratelimit-reset", reset),
    ] {
        headers.insert(name, HeaderValue::from(value));
    }
    if !decision.allowed {
        headers.insert(header::RETRY_AFTER, HeaderValue::from(reset));
    }
}

/// 429 in the shape of the route: JSON-RPC on `/mcp`, the API error body
/// elsewhere.
fn too_many(decision: &Decision, call: Option<&McpCall>) -> Response {
    let message = decision.scope.message();
    let mut response = match call {
        Some(call) => jsonrpc::error_response(
            StatusCode::TOO_MANY_REQUESTS,
            jsonrpc::SERVER_ERROR,
            message,
            call.id.as_ref(),
        ),
        None => ApiError(Error::new(ErrorCode::RateLimited, message)).into_response(),
    };
    set_headers(response.headers_mut(), decision);
    response
}

/// The tool a request calls: `tools/call` on `/mcp`, or `/v1/tools/{name}`.
fn called_tool(request: &Request) -> Option<String> {
    if let Some(call) = request.extensions().get::<McpCall>() {
        return call.tool.clone();
    }
    request
        .uri()
        .path()
        .strip_prefix("/v1/tools/")
        .map(str::to_owned)
}

/// Middleware on authenticated routes, after the request was read.
pub(crate) async fn limit(State(app): State<App>, request: Request, next: Next) -> Response {
    let Some(principal) = request.extensions().get::<Principal>().cloned() else {
        return next.run(request).await;
    };
    let limits = request
        .extensions()
        .get::<KeyLimits>()
        .copied()
        .unwrap_or_default();
    let tool = called_tool(&request);
    let planned = app.limiter.plan(&principal, limits, tool.as_deref());
    let decision = app.limiter.admit(&planned).await;
    if !decision.allowed {
        let call = request.extensions().get::<McpCall>();
        // REST callers get the REST error shape; MCP callers JSON-RPC.
        let call = call.cloned().or_else(|| {
            request
                .uri()
                .path()
                .starts_with("/mcp")
                .then(McpCall::default)
        });
        return too_many(&decision, call.as_ref());
    }
    if tool.is_some() {
        app.limiter.tally_tool_call(&principal);
    }
    let mut response = next.run(request).await;
    set_headers(response.headers_mut(), &decision);
    response
}

/// The TCP peer of a request, when the server records it.
pub(crate) fn peer(request: &Request) -> Option<SocketAddr> {
    request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|info| info.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bucket(key: &str, limit: u32) -> Bucket {
        Bucket {
            key: key.into(),
            limit,
            ttl: Duration::from_secs(60),
        }
    }

    #[test]
    fn local_windows_refuse_without_counting_and_report_the_tightest_bucket() {
        let mut local = LocalWindows::default();
        let buckets = [bucket("tenant", 10), bucket("key", 2)];
        let first = local.admit(&buckets);
        assert!(first.allowed);
        assert_eq!((first.bucket, first.remaining), (1, 1));
        assert!(local.admit(&buckets).allowed);
        let refused = local.admit(&buckets);
        assert!(!refused.allowed);
        assert_eq!(refused.bucket, 1);
        // The refused request was not counted in the tenant bucket.
        assert_eq!(local.count("tenant"), 2);
    }

    #[test]
    fn the_client_ip_comes_from_the_trusted_hop() {
        let mut headers = HeaderMap::new();
        headers.insert(
            "x-forwarded-for",
            HeaderValue::from_static("6.6.6.6, 203.0.113.7, 10.0.0.2"),
        );
        let peer: SocketAddr = "10.0.0.1:4000".parse().unwrap();
        assert_eq!(
            client_ip(&headers, Some(peer), 0),
            Some(peer.ip()),
            "without trusted proxies the header is ignored"
        );
        assert_eq!(
            client_ip(&headers, Some(peer), 2),
            Some("203.0.113.7".parse().unwrap())
        );
        assert_eq!(
            client_ip(&headers, Some(peer), 5),
            Some(peer.ip()),
            "a header shorter than the proxy chain is not trusted"
        );
    }
}
