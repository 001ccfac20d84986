//! The instances of one backend service (recall or remember) and the choice
//! of one per call, with failover.
//!
//! Instances come from the configured URLs (`MNEME_RECALL_URL` may list
//! several, comma-separated) or, with `MNEME_BACKEND_RESOLVE_SECS` set, from
//! every address their hosts resolve to (a Kubernetes headless Service: one
//! address per ready pod), re-resolved on that interval so pods the
//! autoscaler adds get traffic at once and pods that go away get none.
//!
//! Calls go round robin over the instances that are not *ejected*. An
//! instance whose call failed with `Unavailable` (refused, reset, gone) is
//! ejected for `MNEME_BACKEND_EJECT_SECS`, and the caller may retry on
//! another one (see [`crate::backends`] for which calls retry).
//!
//! Why not tonic's balanced channel: its power-of-two-choices balancer
//! gives every connection the same load, so a dead instance (a lazy
//! connection reports ready and fails each call at once) keeps getting half
//! the traffic, and a retry has no way to avoid it. Keeping one channel per
//! instance here costs little and makes "retry on another instance" and
//! outlier ejection possible.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};
use tonic::transport::{Channel, Endpoint};

/// Resolves a host and port to socket addresses.
pub(crate) type Resolver = Arc<
    dyn Fn(String, u16) -> Pin<Box<dyn Future<Output = std::io::Result<Vec<SocketAddr>>> + Send>>
        + Send
        + Sync,
>;

/// The system resolver (what `getaddrinfo` answers: the cluster DNS in
/// Kubernetes).
pub(crate) fn system_resolver() -> Resolver {
    Arc::new(|host, port| {
        Box::pin(async move { Ok(tokio::net::lookup_host((host, port)).await?.collect()) })
    })
}

/// The settings every backend connection uses.
pub(crate) fn endpoint(url: String) -> anyhow::Result<Endpoint> {
    Ok(Endpoint::from_shared(url)?
        .connect_timeout(Duration::from_secs(2))
        .tcp_nodelay(true)
        .http2_keep_alive_interval(Duration::from_secs(30))
        .keep_alive_while_idle(true))
}

/// How a pool finds its instances.
#[derive(Clone)]
pub(crate) enum Discovery {
    /// One instance per configured URL.
    Static,
    /// Every address the URLs' hosts resolve to, re-resolved on an interval.
    Dns { every: Duration, resolve: Resolver },
}

/// One backend instance: a lazily connecting channel to one address.
#[derive(Debug)]
pub(crate) struct Instance {
    /// `scheme://address`, for logs.
    pub(crate) address: String,
    pub(crate) channel: Channel,
    ejected_until: Mutex<Option<Instant>>,
}

impl Instance {
    fn new(address: String) -> anyhow::Result<Self> {
        Ok(Self {
            channel: endpoint(address.clone())?.connect_lazy(),
            address,
            ejected_until: Mutex::new(None),
        })
    }

    fn is_ejected(&self, now: Instant) -> bool {
        self.ejected_until.lock().is_some_and(|until| until > now)
    }
}

/// The instances of one backend service. Cheap to clone.
#[derive(Debug, Clone)]
pub(crate) struct Pool {
    inner: Arc<PoolInner>,
}

#[derive(Debug)]
struct PoolInner {
    service: &'static str,
    instances: RwLock<Arc<Vec<Arc<Instance>>>>,
    next: AtomicUsize,
    eject_for: Duration,
}

impl Pool {
    /// A pool of `service`'s instances at `urls`. With [`Discovery::Dns`],
    /// a task keeps the instances in step with DNS until the pool is
    /// dropped.
    pub(crate) fn new(
        service: &'static str,
        urls: &[String],
        discovery: Discovery,
        eject_for: Duration,
    ) -> anyhow::Result<Self> {
        anyhow::ensure!(!urls.is_empty(), "no URL for the {service} service");
        let instances = urls
            .iter()
            .map(|url| Instance::new(url.clone()).map(Arc::new))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let pool = Self {
            inner: Arc::new(PoolInner {
                service,
                instances: RwLock::new(Arc::new(instances)),
                next: AtomicUsize::new(0),
                eject_for,
            }),
        };
        if let Discovery::Dns { every, resolve } = discovery {
            let targets = urls
                .iter()
                .map(|url| ResolveTarget::parse(url))
                .collect::<anyhow::Result<Vec<_>>>()?;
            tokio::spawn(follow_dns(
                Arc::downgrade(&pool.inner),
                targets,
                every,
                resolve,
            ));
        }
        Ok(pool)
    }

    pub(crate) fn service(&self) -> &'static str {
        self.inner.service
    }

    /// Every instance now known.
    pub(crate) fn instances(&self) -> Arc<Vec<Arc<Instance>>> {
        Arc::clone(&self.inner.instances.read())
    }

    /// The next instance round robin, skipping those in `tried` and,
    /// while any other is left, those ejected. `None` once every instance
    /// has been tried.
    pub(crate) fn pick(&self, tried: &[Arc<Instance>]) -> Option<Arc<Instance>> {
        let instances = self.instances();
        let start = self.inner.next.fetch_add(1, Ordering::Relaxed);
        let untried = (0..instances.len())
            .map(|i| &instances[(start + i) % instances.len()])
            .filter(|instance| !tried.iter().any(|t| Arc::ptr_eq(t, instance)));
        let now = Instant::now();
        let mut fallback = None;
        for instance in untried {
            if !instance.is_ejected(now) {
                return Some(Arc::clone(instance));
            }
            // All ejected: a restarting instance is still better than none.
            fallback.get_or_insert(instance);
        }
        fallback.map(Arc::clone)
    }

    /// Takes `instance` out of rotation for the ejection period.
    pub(crate) fn eject(&self, instance: &Instance) {
        let mut until = instance.ejected_until.lock();
        let now = Instant::now();
        if until.is_none_or(|until| until <= now) {
            tracing::warn!(
                service = self.inner.service,
                address = %instance.address,
                seconds = self.inner.eject_for.as_secs_f64(),
                "backend instance unavailable; ejected"
            );
            crate::metrics::METRICS
                .backend_ejections
                .with_label_values(&[self.inner.service])
                .inc();
        }
        *until = Some(now + self.inner.eject_for);
    }
}

/// A URL whose host is resolved: scheme, host and port.
struct ResolveTarget {
    scheme: String,
    host: String,
    port: u16,
}

impl ResolveTarget {
    fn parse(url: &str) -> anyhow::Result<Self> {
        let uri: http::Uri = url.parse()?;
        let scheme = uri.scheme_str().unwrap_or("http").to_owned();
        let host = uri
            .host()
            .ok_or_else(|| anyhow::anyhow!("{url} names no host"))?
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        let port = uri
            .port_u16()
            .unwrap_or(if scheme == "https" { 443 } else { 80 });
        Ok(Self { scheme, host, port })
    }
}

/// Keeps `pool`'s instances equal to what `targets` resolve to, keeping the
/// connection (and ejection) of addresses that stay. Ends with the pool.
async fn follow_dns(
    pool: Weak<PoolInner>,
    targets: Vec<ResolveTarget>,
    every: Duration,
    resolve: Resolver,
) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let mut resolved = Vec::new();
        let mut failed = false;
        for target in &targets {
            match resolve(target.host.clone(), target.port).await {
                Ok(addresses) => resolved.extend(
                    addresses
                        .into_iter()
                        .map(|address| format!("{}://{address}", target.scheme)),
                ),
                Err(error) => {
                    tracing::warn!(host = %target.host, %error, "backend host not resolved; keeping its known addresses");
                    failed = true;
                }
            }
        }
        let Some(pool) = pool.upgrade() else { return };
        // An empty answer is a DNS hiccup or a rollout's gap; dropping every
        // connection would turn it into an outage.
        if failed || resolved.is_empty() {
            if !failed {
                tracing::warn!(
                    service = pool.service,
                    "backend hosts resolved to no address; keeping the known ones"
                );
            }
            continue;
        }
        resolved.sort();
        resolved.dedup();
        let current = Arc::clone(&pool.instances.read());
        let known: HashMap<&str, &Arc<Instance>> = current
            .iter()
            .map(|instance| (instance.address.as_str(), instance))
            .collect();
        if resolved.len() == known.len() && resolved.iter().all(|a| known.contains_key(a.as_str()))
        {
            continue;
        }
        let mut next = Vec::with_capacity(resolved.len());
        for address in resolved {
            match known.get(address.as_str()) {
                Some(instance) => next.push(Arc::clone(instance)),
                None => match Instance::new(address.clone()) {
                    Ok(instance) => {
                        tracing::info!(service = pool.service, %address, "backend address added");
                        next.push(Arc::new(instance));
                    }
                    Err(error) => tracing::warn!(%address, %error, "unusable backend address"),
                },
            }
        }
        for gone in current
            .iter()
            .filter(|old| !next.iter().any(|new| Arc::ptr_eq(new, old)))
        {
            tracing::info!(service = pool.service, address = %gone.address, "backend address removed");
        }
        if !next.is_empty() {
            *pool.instances.write() = Arc::new(next);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use tonic::service::interceptor::InterceptedService;
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_client::HealthClient;

    use super::*;

    /// A gRPC health server on a port of its own that counts the calls it
    /// serves.
    async fn counting_server() -> (SocketAddr, Arc<AtomicUsize>) {
        let (_, health) = tonic_health::server::health_reporter();
        let calls = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&calls);
        let service = InterceptedService::new(health, move |request| {
            counter.fetch_add(1, Ordering::Relaxed);
            Ok(request)
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
        );
        (addr, calls)
    }

    async fn check(pool: &Pool) -> Result<(), tonic::Status> {
        let instance = pool.pick(&[]).unwrap();
        HealthClient::new(instance.channel.clone())
            .check(HealthCheckRequest::default())
            .await
            .map(drop)
    }

    /// An address nothing listens on.
    fn closed_port() -> SocketAddr {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
    }

    #[tokio::test]
    async fn calls_spread_over_every_address_and_follow_the_dns_answer() {
        let (first, first_calls) = counting_server().await;
        let (second, second_calls) = counting_server().await;
        let answer = Arc::new(Mutex::new(vec![first, second]));
        let dns = Arc::clone(&answer);
        let resolver: Resolver = Arc::new(move |host, _| {
            assert_eq!(host, "recall.mneme.svc");
            let addresses = dns.lock().clone();
            Box::pin(async move { Ok(addresses) })
        });
        let pool = Pool::new(
            "recall",
            &["http://recall.mneme.svc:50051".into()],
            Discovery::Dns {
                every: Duration::from_millis(50),
                resolve: resolver,
            },
            Duration::from_secs(5),
        )
        .unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        for _ in 0..40 {
            check(&pool).await.unwrap();
        }
        let (a, b) = (
            first_calls.load(Ordering::Relaxed),
            second_calls.load(Ordering::Relaxed),
        );
        assert_eq!(a + b, 40);
        assert!(a >= 5 && b >= 5, "calls were not spread: {a} and {b}");

        // The second pod goes away: after the next resolution, every call
        // reaches the first. An empty answer changes nothing.
        *answer.lock() = vec![first];
        tokio::time::sleep(Duration::from_millis(200)).await;
        *answer.lock() = vec![];
        tokio::time::sleep(Duration::from_millis(200)).await;
        let before = second_calls.load(Ordering::Relaxed);
        for _ in 0..20 {
            check(&pool).await.unwrap();
        }
        assert_eq!(second_calls.load(Ordering::Relaxed), before);
        assert_eq!(pool.instances().len(), 1);
    }

    #[tokio::test]
    async fn an_ejected_instance_gets_no_calls_until_its_ejection_ends() {
        let (live, live_calls) = counting_server().await;
        let dead = closed_port();
        let pool = Pool::new(
            "remember",
            &[format!("http://{dead}"), format!("http://{live}")],
            Discovery::Static,
            Duration::from_millis(300),
        )
        .unwrap();
        // Round robin reaches the dead one; once ejected, it is skipped.
        let mut failures = 0;
        for _ in 0..20 {
            let instance = pool.pick(&[]).unwrap();
            let outcome = HealthClient::new(instance.channel.clone())
                .check(HealthCheckRequest::default())
                .await;
            if let Err(status) = outcome {
                assert_eq!(status.code(), tonic::Code::Unavailable);
                pool.eject(&instance);
                failures += 1;
            }
        }
        assert_eq!(
            failures, 1,
            "the dead instance was picked again while ejected"
        );
        assert_eq!(live_calls.load(Ordering::Relaxed), 19);

        // After the ejection period it is tried again.
        tokio::time::sleep(Duration::from_millis(350)).await;
        let picks: Vec<String> = (0..2)
            .map(|_| pool.pick(&[]).unwrap().address.clone())
            .collect();
        assert!(picks.contains(&format!("http://{dead}")), "{picks:?}");
    }

    #[tokio::test]
    async fn pick_skips_tried_instances_and_falls_back_to_ejected_ones() {
        let pool = Pool::new(
            "recall",
            &["http://127.0.0.1:1".into(), "http://127.0.0.1:2".into()],
            Discovery::Static,
            Duration::from_secs(60),
        )
        .unwrap();
        let first = pool.pick(&[]).unwrap();
        let second = pool.pick(std::slice::from_ref(&first)).unwrap();
        assert!(!Arc::ptr_eq(&first, &second));
        assert!(pool.pick(&[first.clone(), second.clone()]).is_none());

        // Every instance ejected: calls still go somewhere.
        pool.eject(&first);
        pool.eject(&second);
        assert!(pool.pick(&[]).is_some());
        assert!(Arc::ptr_eq(
            &pool.pick(std::slice::from_ref(&first)).unwrap(),
            &second
        ));
    }
}
