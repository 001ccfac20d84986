//! Prometheus metrics: one process-wide [`registry`] that every crate
//! registers into, rendered in the text format by [`render`] and served at
//! `/metrics` by [`serve`] when `MNEME_METRICS_ADDR` is set.
//!
//! Metric names start with `mneme_`; labels never carry tenant ids, keys or
//! memory content (cardinality and privacy).

use std::future::Future;
use std::net::SocketAddr;
use std::sync::LazyLock;

use axum::http::header;
use axum::routing::get;
use prometheus::{Encoder, Registry, TextEncoder};

static REGISTRY: LazyLock<Registry> = LazyLock::new(|| {
    let registry = Registry::new();
    let info = prometheus::IntGaugeVec::new(
        prometheus::Opts::new(
            "mneme_build_info",
            "Always 1; the version of the running binary is its label.",
        ),
        &["version"],
    )
    .expect("valid metric");
    info.with_label_values(&[env!("CARGO_PKG_VERSION")]).set(1);
    registry
        .register(Box::new(info))
        .expect("the first metric registers");
    registry
});

/// Buckets of request latencies, in seconds (1 ms to 10 s).
pub const LATENCY_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Registers a latency histogram with [`LATENCY_BUCKETS`].
pub fn latency_histogram(name: &str, help: &str, labels: &[&str]) -> prometheus::HistogramVec {
    register(
        prometheus::HistogramVec::new(
            prometheus::HistogramOpts::new(name, help).buckets(LATENCY_BUCKETS.to_vec()),
            labels,
        )
        .expect("valid metric"),
    )
}

/// The registry every mneme metric lives in.
pub fn registry() -> &'static Registry {
    &REGISTRY
}

/// Registers `collector` and returns it. A second registration of the same
/// metric (two services in one `mneme up` process) keeps the first one.
pub fn register<C: prometheus::core::Collector + Clone + 'static>(collector: C) -> C {
    if let Err(error) = REGISTRY.register(Box::new(collector.clone())) {
        tracing::debug!(%error, "metric already registered");
    }
    collector
}

/// The value of label `name` of a gathered metric ("" when it has none),
/// for code that reads this process's own metrics back.
pub fn label<'m>(metric: &'m prometheus::proto::Metric, name: &str) -> &'m str {
    metric
        .get_label()
        .iter()
        .find(|l| l.name() == name)
        .map_or("", |l| l.value())
}

/// All metrics in the Prometheus text exposition format.
pub fn render() -> String {
    let mut out = Vec::new();
    if let Err(error) = TextEncoder::new().encode(&REGISTRY.gather(), &mut out) {
        tracing::error!(%error, "cannot encode metrics");
    }
    String::from_utf8(out).unwrap_or_default()
}

/// Serves `/metrics` on `addr` until `shutdown`.
pub async fn serve(
    addr: SocketAddr,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    tracing::info!(addr = %listener.local_addr()?, "metrics listening");
    let app = axum::Router::new().route(
        "/metrics",
        get(|| async { ([(header::CONTENT_TYPE, prometheus::TEXT_FORMAT)], render()) }),
    );
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
}

/// Starts [`serve`] in the background when an address is configured. A
/// metrics listener that cannot bind is logged, not fatal: the service
/// itself still works.
pub fn spawn_exporter(addr: Option<SocketAddr>) {
    let Some(addr) = addr else { return };
    tokio::spawn(async move {
        if let Err(error) = serve(addr, std::future::pending()).await {
            tracing::error!(%error, %addr, "metrics listener failed");
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn registered_metrics_are_served_in_the_text_format() {
        let counter = register(
            prometheus::IntCounter::new("mneme_test_events_total", "Events seen by this test.")
                .expect("valid metric"),
        );
        counter.inc_by(3);
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        drop(listener);
        spawn_exporter(Some(addr));
        let body = loop {
            if let Ok(mut stream) = tokio::net::TcpStream::connect(addr).await {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                stream
                    .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                    .await
                    .expect("write");
                let mut body = String::new();
                stream.read_to_string(&mut body).await.expect("read");
                break body;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        };
        assert!(body.starts_with("HTTP/1.1 200"), "{body}");
        assert!(body.contains("mneme_test_events_total 3"), "{body}");
    }
}
