//! The gateway's Prometheus metrics (see `docs/OPERATIONS.md`). Labels are
//! bounded vocabularies: never tenant ids, keys, session ids or origins.

use std::sync::LazyLock;

use mneme_telemetry::metrics::register;
use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, IntGauge, Opts};

pub(crate) struct Metrics {
    /// Session lookups by outcome: `live`, `recovered`, `reused`, `created`,
    /// `unknown`, `closed`, `principal_mismatch`, `version_mismatch`,
    /// `degraded`.
    pub(crate) sessions: IntCounterVec,
    /// Requests refused to protect one tenant from another, by component.
    pub(crate) isolation_blocked: IntCounterVec,
    /// Rate-limit decisions by scope (`tenant`, `key`, `writes`, `daily`,
    /// `ip`), decision (`allowed`, `limited`) and backend (`redis`, `local`).
    pub(crate) rate_limit: IntCounterVec,
    /// Credentials refused, by reason (`missing`, `in_url`, `unknown_key`,
    /// `invalid_token`, `throttled`).
    pub(crate) auth_failures: IntCounterVec,
    /// Requests refused before reaching MCP, by reason (`origin`, `host`,
    /// `protocol_version`, `unauthenticated`, `body_too_large`).
    pub(crate) rejected: IntCounterVec,
    /// MCP requests by JSON-RPC method and HTTP status class.
    pub(crate) requests: HistogramVec,
    /// Legacy HTTP+SSE streams open on this pod.
    pub(crate) sse_streams: IntGauge,
    /// MCP sessions whose worker this pod holds in memory.
    pub(crate) sessions_in_memory: IntGauge,
    /// Surfacing attempts by outcome: `surfaced` or the skip reason.
    pub(crate) surfacing: IntCounterVec,
    /// Time surfacing added to a call, by outcome.
    pub(crate) surfacing_seconds: HistogramVec,
    /// Proxied tool calls by outcome (`ok`, `tool_error`, `cached`, or the
    /// failure: `timeout`, `unavailable`, `breaker_open`, `blocked`,
    /// `refused`, `too_large`) and compression strategy.
    pub(crate) proxy_calls: IntCounterVec,
    /// Duration of proxied calls (upstream and shaping), by outcome.
    pub(crate) proxy_seconds: HistogramVec,
    /// Text characters through the proxy: `in` from upstreams, `out` to
    /// clients (before surfacing); their ratio is the compression.
    pub(crate) proxy_chars: IntCounterVec,
    /// Upstream connections open on this pod.
    pub(crate) proxy_connections: IntGauge,
    /// mneme's own tool calls (MCP and REST) by tool and outcome (`ok` or
    /// the error code).
    pub(crate) tool_calls: HistogramVec,
    /// Every HTTP request by route family, method and status class.
    pub(crate) http: HistogramVec,
    /// Calls to the recall and remember services by method and status.
    pub(crate) grpc_client: HistogramVec,
    /// Backend instances taken out of rotation after a transport failure,
    /// by service.
    pub(crate) backend_ejections: IntCounterVec,
    /// Backend calls sent again to another instance, by service.
    pub(crate) backend_retries: IntCounterVec,
}

pub(crate) static METRICS: LazyLock<Metrics> = LazyLock::new(|| Metrics {
    sessions: counter(
        "mneme_mcp_sessions_total",
        "MCP session lookups and creations by outcome.",
        &["outcome"],
    ),
    isolation_blocked: counter(
        "mneme_tenant_isolation_blocked_total",
        "Requests refused because they reached for another tenant's or key's state.",
        &["component"],
    ),
    rate_limit: counter(
        "mneme_rate_limit_decisions_total",
        "Rate-limit decisions by scope, decision and counter backend.",
        &["scope", "decision", "backend"],
    ),
    auth_failures: counter(
        "mneme_auth_failures_total",
        "Credentials refused on MCP, SSE and REST routes, by reason.",
        &["reason"],
    ),
    rejected: counter(
        "mneme_http_rejected_total",
        "Requests refused before reaching MCP, by reason.",
        &["reason"],
    ),
    surfacing: counter(
        "mneme_surfacing_total",
        "Surfacing attempts by outcome (surfaced, or the reason nothing was injected).",
        &["outcome"],
    ),
    surfacing_seconds: register(
        HistogramVec::new(
            HistogramOpts::new(
                "mneme_surfacing_seconds",
                "Time surfacing added to a tool call, by outcome.",
            )
            .buckets(vec![
                0.0005, 0.001, 0.0025, 0.005, 0.01, 0.015, 0.025, 0.05, 0.1, 0.25, 1.0, 3.0,
            ]),
            &["outcome"],
        )
        .expect("valid metric"),
    ),
    proxy_calls: counter(
        "mneme_proxy_calls_total",
        "Proxied tool calls by outcome and compression strategy.",
        &["outcome", "compression"],
    ),
    proxy_seconds: register(
        HistogramVec::new(
            HistogramOpts::new(
                "mneme_proxy_call_seconds",
                "Duration of proxied tool calls (upstream round trips and shaping), by outcome.",
            )
            .buckets(vec![
                0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
            ]),
            &["outcome"],
        )
        .expect("valid metric"),
    ),
    proxy_chars: counter(
        "mneme_proxy_chars_total",
        "Text characters through the proxy: `in` from upstreams, `out` to clients before surfacing.",
        &["direction"],
    ),
    proxy_connections: register(
        IntGauge::new(
            "mneme_proxy_upstream_connections",
            "Upstream MCP connections open on this gateway pod.",
        )
        .expect("valid metric"),
    ),
    requests: mneme_telemetry::metrics::latency_histogram(
        "mneme_mcp_request_seconds",
        "Time to the response headers of MCP requests, by JSON-RPC method and HTTP status.",
        &["method", "status"],
    ),
    tool_calls: mneme_telemetry::metrics::latency_histogram(
        "mneme_tool_call_seconds",
        "Duration of mneme's tool calls (MCP and REST), by tool and outcome (ok or the error code).",
        &["tool", "outcome"],
    ),
    http: mneme_telemetry::metrics::latency_histogram(
        "mneme_http_request_seconds",
        "HTTP requests by route family, method and status class (time to the response headers).",
        &["route", "method", "status"],
    ),
    backend_ejections: counter(
        "mneme_backend_ejections_total",
        "Backend instances ejected from rotation after a transport failure, by service.",
        &["service"],
    ),
    backend_retries: counter(
        "mneme_backend_retries_total",
        "Backend calls sent again to another instance after a transport failure, by service.",
        &["service"],
    ),
    grpc_client: mneme_telemetry::metrics::latency_histogram(
        "mneme_grpc_client_seconds",
        "Gateway calls to the backend services, by method and gRPC status code.",
        &["method", "code"],
    ),
    sse_streams: register(
        IntGauge::new(
            "mneme_sse_streams",
            "Legacy HTTP+SSE streams open on this gateway pod.",
        )
        .expect("valid metric"),
    ),
    sessions_in_memory: register(
        IntGauge::new(
            "mneme_mcp_sessions_in_memory",
            "MCP sessions whose worker this gateway pod holds in memory (the rest live in Redis).",
        )
        .expect("valid metric"),
    ),
});

fn counter(name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    register(IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric"))
}

pub(crate) fn session(outcome: &str) {
    METRICS.sessions.with_label_values(&[outcome]).inc();
}

/// The route family of a path: a fixed vocabulary, so paths with ids or
/// garbage never become label values.
fn route_of(path: &str) -> &'static str {
    const FAMILIES: &[(&str, &str)] = &[
        ("/mcp", "/mcp"),
        ("/sse", "/sse"),
        ("/message", "/message"),
        ("/v1/tools", "/v1/tools"),
        ("/v1/surface", "/v1/surface"),
        ("/v1/upstreams", "/v1/upstreams"),
        ("/openapi.json", "/openapi.json"),
        ("/admin/api", "/admin/api"),
        ("/admin", "/admin"),
        ("/.well-known", "/.well-known"),
        ("/authorize", "/authorize"),
        ("/token", "/token"),
        ("/register", "/register"),
        ("/revoke", "/revoke"),
        ("/health", "/health"),
        ("/ready", "/ready"),
    ];
    FAMILIES
        .iter()
        .find(|(prefix, _)| {
            path == *prefix
                || path
                    .strip_prefix(prefix)
                    .is_some_and(|rest| rest.starts_with('/'))
        })
        .map_or("other", |(_, family)| family)
}

/// Middleware: counts and times every request.
pub(crate) async fn track_http(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let route = route_of(request.uri().path());
    let method = match *request.method() {
        axum::http::Method::GET => "GET",
        axum::http::Method::POST => "POST",
        axum::http::Method::DELETE => "DELETE",
        axum::http::Method::PATCH => "PATCH",
        axum::http::Method::PUT => "PUT",
        axum::http::Method::HEAD => "HEAD",
        axum::http::Method::OPTIONS => "OPTIONS",
        _ => "other",
    };
    let started = std::time::Instant::now();
    let response = next.run(request).await;
    let status = match response.status().as_u16() {
        100..=199 => "1xx",
        200..=299 => "2xx",
        300..=399 => "3xx",
        400..=499 => "4xx",
        _ => "5xx",
    };
    METRICS
        .http
        .with_label_values(&[route, method, status])
        .observe(started.elapsed().as_secs_f64());
    response
}

#[cfg(test)]
mod tests {
    use super::route_of;

    #[test]
    fn routes_are_families_never_raw_paths() {
        assert_eq!(route_of("/mcp"), "/mcp");
        assert_eq!(route_of("/admin/api/keys/0190"), "/admin/api");
        assert_eq!(route_of("/admin"), "/admin");
        assert_eq!(route_of("/admin/assets/app.js"), "/admin");
        assert_eq!(route_of("/v1/tools/recall"), "/v1/tools");
        assert_eq!(
            route_of("/.well-known/oauth-protected-resource/mcp"),
            "/.well-known"
        );
        assert_eq!(route_of("/mcpx"), "other");
        assert_eq!(route_of("/wp-login.php"), "other");
    }
}
