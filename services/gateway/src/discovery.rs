//! Client-side load balancing over every address of a backend host.
//!
//! A gRPC channel to one address keeps one HTTP/2 connection, so behind a
//! Kubernetes ClusterIP Service every gateway pod would stick to one
//! backend pod, and pods the autoscaler adds would get no traffic from
//! gateways already running. With `MNEME_BACKEND_RESOLVE_SECS` set, the
//! gateway resolves each backend host (a headless Service: one address per
//! ready pod) on that interval and balances calls over all its addresses
//! (tonic's power-of-two-choices balancer), adding and dropping
//! connections as pods come and go.

use std::collections::HashSet;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tonic::transport::channel::Change;
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

/// A channel that balances over every address `url`'s host resolves to,
/// re-resolved every `every`. The refresh task ends with the channel.
pub(crate) fn balanced_channel(
    url: &str,
    every: Duration,
    resolve: Resolver,
) -> anyhow::Result<Channel> {
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
    let (channel, changes) = Channel::balance_channel::<SocketAddr>(64);
    tokio::spawn(async move {
        let mut known: HashSet<SocketAddr> = HashSet::new();
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let resolved: HashSet<SocketAddr> = match resolve(host.clone(), port).await {
                Ok(addresses) => addresses.into_iter().collect(),
                Err(error) => {
                    tracing::warn!(%host, %error, "backend host not resolved; keeping its known addresses");
                    continue;
                }
            };
            // An empty answer is a DNS hiccup or a rollout's gap; dropping
            // every connection would turn it into an outage.
            if resolved.is_empty() {
                tracing::warn!(%host, "backend host resolved to no address; keeping its known addresses");
                continue;
            }
            for gone in known.difference(&resolved) {
                tracing::info!(%host, address = %gone, "backend address removed");
                if changes.send(Change::Remove(*gone)).await.is_err() {
                    return;
                }
            }
            for new in resolved.difference(&known) {
                let Ok(endpoint) = endpoint(format!("{scheme}://{new}")) else {
                    continue;
                };
                tracing::info!(%host, address = %new, "backend address added");
                if changes.send(Change::Insert(*new, endpoint)).await.is_err() {
                    return;
                }
            }
            known = resolved;
        }
    });
    Ok(channel)
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};

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

    async fn check(channel: &Channel) {
        HealthClient::new(channel.clone())
            .check(HealthCheckRequest::default())
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn calls_spread_over_every_address_and_follow_the_dns_answer() {
        let (first, first_calls) = counting_server().await;
        let (second, second_calls) = counting_server().await;
        let answer = Arc::new(Mutex::new(vec![first, second]));
        let dns = Arc::clone(&answer);
        let resolver: Resolver = Arc::new(move |host, _| {
            assert_eq!(host, "recall.mneme.svc");
            let addresses = dns.lock().unwrap().clone();
            Box::pin(async move { Ok(addresses) })
        });
        let channel = balanced_channel(
            "http://recall.mneme.svc:50051",
            Duration::from_millis(50),
            resolver,
        )
        .unwrap();
        for _ in 0..40 {
            check(&channel).await;
        }
        let (a, b) = (
            first_calls.load(Ordering::Relaxed),
            second_calls.load(Ordering::Relaxed),
        );
        assert_eq!(a + b, 40);
        assert!(a >= 5 && b >= 5, "calls were not spread: {a} and {b}");

        // The second pod goes away: after the next resolution, every call
        // reaches the first. An empty answer changes nothing.
        *answer.lock().unwrap() = vec![first];
        tokio::time::sleep(Duration::from_millis(200)).await;
        *answer.lock().unwrap() = vec![];
        tokio::time::sleep(Duration::from_millis(200)).await;
        let before = second_calls.load(Ordering::Relaxed);
        for _ in 0..20 {
            check(&channel).await;
        }
        assert_eq!(second_calls.load(Ordering::Relaxed), before);
    }
}
