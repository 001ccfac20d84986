//! Request hygiene around the MCP routes: `Origin` and `Host` checks
//! against DNS rebinding, CORS for browser clients (the dashboard, the chat
//! hosts' web apps), the answer to a request whose handler panicked, and
//! `Connection: close` on refusals answered before the body was read.
//!
//! rmcp checks `Origin` and `Host` on `/mcp` as well; doing it here first
//! covers the legacy SSE routes too, answers before authentication (a
//! foreign page gets 403, not 401) and counts refusals in
//! `mneme_http_rejected_total`. Allow-list entries follow rmcp's syntax:
//! an origin `scheme://host[:port]` where the port may be `*`, a host with
//! or without a port.

use std::any::Any;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderName, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use tower_http::cors::{AllowOrigin, CorsLayer};

use crate::jsonrpc;
use crate::metrics::METRICS;

/// The allow-lists, from configuration.
#[derive(Debug, Clone)]
pub(crate) struct AllowLists {
    /// Empty: any origin.
    origins: Arc<[String]>,
    hosts: Arc<[String]>,
}

impl AllowLists {
    pub(crate) fn new(config: &mneme_config::GatewayConfig) -> Self {
        Self {
            origins: config.allowed_origins.clone().into(),
            hosts: config.allowed_hosts.clone().into(),
        }
    }

    fn origin_allowed(&self, origin: &str) -> bool {
        self.origins.is_empty()
            || self
                .origins
                .iter()
                .any(|entry| origin_matches(entry, origin))
    }

    fn host_allowed(&self, host: &str) -> bool {
        self.hosts.iter().any(|entry| host_matches(entry, host))
    }
}

/// Splits `scheme://host[:port]` (lower-cased) into its parts.
fn split_origin(origin: &str) -> Option<(String, String, Option<String>)> {
    let origin = origin.trim().to_ascii_lowercase();
    let (scheme, rest) = origin.split_once("://")?;
    let rest = rest.trim_end_matches('/');
    let (host, port) = split_host(rest);
    Some((scheme.to_owned(), host, port))
}

/// Splits `host[:port]`, keeping IPv6 brackets (`[::1]:8080`).
fn split_host(authority: &str) -> (String, Option<String>) {
    let authority = authority.to_ascii_lowercase();
    if let Some(end) = authority.find(']') {
        let (host, rest) = authority.split_at(end + 1);
        return (host.to_owned(), rest.strip_prefix(':').map(str::to_owned));
    }
    match authority.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') => (host.to_owned(), Some(port.to_owned())),
        _ => (authority, None),
    }
}

fn default_port(scheme: &str) -> Option<&'static str> {
    match scheme {
        "http" => Some("80"),
        "https" => Some("443"),
        _ => None,
    }
}

/// The allow-list as rmcp should read it: an entry without a port names
/// its scheme's default port, as it does here. rmcp still reads such an
/// entry as "any port" (deprecated, and warned about at every start).
pub(crate) fn origins_with_explicit_ports(origins: &[String]) -> Vec<String> {
    origins
        .iter()
        .map(|entry| match split_origin(entry) {
            Some((scheme, host, None)) => match default_port(&scheme) {
                Some(port) => format!("{scheme}://{host}:{port}"),
                None => entry.clone(),
            },
            _ => entry.clone(),
        })
        .collect()
}

fn origin_matches(entry: &str, origin: &str) -> bool {
    let (Some(allowed), Some(actual)) = (split_origin(entry), split_origin(origin)) else {
        return false;
    };
    if allowed.0 != actual.0 || allowed.1 != actual.1 {
        return false;
    }
    let port = |parts: &(String, String, Option<String>)| {
        parts
            .2
            .clone()
            .or_else(|| default_port(&parts.0).map(str::to_owned))
    };
    allowed.2.as_deref() == Some("*") || port(&allowed) == port(&actual)
}

/// An entry without a port allows every port of its host.
fn host_matches(entry: &str, host: &str) -> bool {
    let (allowed_host, allowed_port) = split_host(entry.trim());
    let (actual_host, actual_port) = split_host(host.trim());
    let bare = |h: &str| h.trim_start_matches('[').trim_end_matches(']').to_owned();
    bare(&allowed_host) == bare(&actual_host)
        && (allowed_port.is_none() || allowed_port == actual_port)
}

fn forbidden(reason: &'static str, message: &str) -> Response {
    METRICS.rejected.with_label_values(&[reason]).inc();
    jsonrpc::error_response(StatusCode::FORBIDDEN, jsonrpc::SERVER_ERROR, message, None)
}

/// Middleware on the MCP routes, before authentication.
pub(crate) async fn check_origin_and_host(
    State(lists): State<AllowLists>,
    request: Request,
    next: Next,
) -> Response {
    if let Some(origin) = request.headers().get(header::ORIGIN) {
        let allowed = origin.to_str().is_ok_and(|o| lists.origin_allowed(o));
        if !allowed {
            return forbidden("origin", "Forbidden: Origin not allowed");
        }
    }
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| request.uri().authority().map(|a| a.as_str()));
    if !host.is_some_and(|h| lists.host_allowed(h)) {
        return forbidden("host", "Forbidden: Host not allowed");
    }
    next.run(request).await
}

/// Refusals answered before the request's body was read: missing or bad
/// credentials, a foreign origin, a rate limit, a body over the limit.
const REFUSED_UNREAD: [StatusCode; 4] = [
    StatusCode::UNAUTHORIZED,
    StatusCode::FORBIDDEN,
    StatusCode::PAYLOAD_TOO_LARGE,
    StatusCode::TOO_MANY_REQUESTS,
];

/// Marks a refusal of a request that carries a body `Connection: close`.
/// Such a refusal is often sent before the body has arrived; hyper then
/// closes the connection after the response without saying so, and a
/// client that sends its next request on it (the MCP SDKs do, straight
/// after a 401, to discover the authorization server) sees that request
/// dropped. The header tells the client to open a new connection instead.
pub(crate) async fn close_after_refusal(request: Request, next: Next) -> Response {
    let carries_body = request.headers().contains_key(header::TRANSFER_ENCODING)
        || request
            .headers()
            .get(header::CONTENT_LENGTH)
            .is_some_and(|length| length.as_bytes() != b"0");
    let mut response = next.run(request).await;
    if carries_body && REFUSED_UNREAD.contains(&response.status()) {
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

/// CORS for the allowed origins: browsers may call the MCP routes with
/// credentials in headers and read mneme's response headers.
pub(crate) fn cors(lists: &AllowLists) -> CorsLayer {
    let lists = lists.clone();
    let origin = AllowOrigin::predicate(move |origin: &HeaderValue, _| {
        origin.to_str().is_ok_and(|o| lists.origin_allowed(o))
    });
    let names = |names: &[&'static str]| -> Vec<HeaderName> {
        names.iter().map(|n| HeaderName::from_static(n)).collect()
    };
    CorsLayer::new()
        .allow_origin(origin)
        .allow_methods([Method::GET, Method::POST, Method::DELETE, Method::OPTIONS])
        .allow_headers(names(&[
            "authorization",
            "content-type",
            "accept",
            "last-event-id",
            "mcp-session-id",
            "mcp-protocol-version",
            "mcp-method",
            "mcp-name",
            "x-mneme-mode",
            "x-request-id",
        ]))
        .expose_headers(names(&[
            "mcp-session-id",
            "www-authenticate",
            "retry-after",
            "ratelimit-limit",
            "ratelimit-remaining",
            "ratelimit-reset",
            "x-request-id",
        ]))
}

/// The answer to a request whose handler panicked: 500 with a JSON-RPC
/// internal error; the panic is logged in the request's span (which
/// carries its request id). The pod keeps serving.
pub(crate) fn panic_response(panic: Box<dyn Any + Send + 'static>) -> Response<Body> {
    let detail = panic
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| panic.downcast_ref::<&str>().copied())
        .unwrap_or("(no message)");
    tracing::error!(panic = detail, "request handler panicked");
    jsonrpc::error_response(
        StatusCode::INTERNAL_SERVER_ERROR,
        -32603,
        "Internal error",
        None,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_match_scheme_host_and_port_with_wildcards_and_defaults() {
        assert!(origin_matches("https://claude.ai", "https://claude.ai"));
        assert!(origin_matches("https://claude.ai", "https://CLAUDE.ai:443"));
        assert!(!origin_matches("https://claude.ai", "http://claude.ai"));
        assert!(!origin_matches(
            "https://claude.ai",
            "https://claude.ai.evil.com"
        ));
        assert!(origin_matches(
            "http://localhost:*",
            "http://localhost:5173"
        ));
        assert!(!origin_matches(
            "http://localhost:3000",
            "http://localhost:5173"
        ));
        assert!(!origin_matches("http://localhost:*", "null"));
    }

    #[test]
    fn rmcp_gets_every_default_port_spelled_out() {
        let entries = [
            "https://claude.ai",
            "http://127.0.0.1:8080",
            "http://localhost:*",
            "HTTP://Example.com/",
            "null",
        ]
        .map(String::from);
        assert_eq!(
            origins_with_explicit_ports(&entries),
            [
                "https://claude.ai:443",
                "http://127.0.0.1:8080",
                "http://localhost:*",
                "http://example.com:80",
                "null",
            ]
        );
    }

    #[test]
    fn hosts_match_with_or_without_ports() {
        assert!(host_matches("localhost", "localhost:8080"));
        assert!(host_matches("mneme.example.com", "mneme.example.com"));
        assert!(host_matches("127.0.0.1:8080", "127.0.0.1:8080"));
        assert!(!host_matches("127.0.0.1:8080", "127.0.0.1:9090"));
        assert!(host_matches("::1", "[::1]:8080"));
        assert!(!host_matches("mneme.example.com", "evil.example.com"));
    }

    #[test]
    fn a_panic_becomes_a_json_rpc_internal_error() {
        let response = panic_response(Box::new("boom"));
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    }
}
