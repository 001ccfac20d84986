//! Client transport for the legacy MCP HTTP+SSE transport (protocol
//! 2024-11-05).
//!
//! # Why this is hand-written
//!
//! rmcp dropped its SSE client in 0.11 (PR #562) in favour of streamable
//! HTTP, but many tenants' upstream servers still only speak the legacy
//! transport. This module is the small part of that transport mneme needs,
//! exposed as an rmcp [`Transport<RoleClient>`] so the rest of the proxy
//! drives it exactly like the streamable HTTP and child-process transports.
//!
//! # How it works
//!
//! 1. [`connect`] GETs the SSE URL (`Accept: text/event-stream`) and waits,
//!    bounded by [`SseClientConfig::connect_timeout`], for the server's first
//!    `endpoint` event. Its data is a URL, usually relative
//!    (`/message?sessionId=…`), resolved against the SSE URL.
//! 2. The endpoint must have the SSE URL's origin (scheme, host, port):
//!    otherwise a malicious upstream could make mneme POST the tenant's
//!    credentials, or anything else, to a host the SSRF guard never checked.
//! 3. A spawned task keeps reading the SSE stream and forwards each
//!    `message` event, parsed as a [`ServerJsonRpcMessage`], through a
//!    bounded channel that [`Transport::receive`] drains. Unparseable events
//!    are skipped; the end of the stream (or a stream error) ends `receive`.
//! 4. [`Transport::send`] POSTs each client message as JSON to the endpoint;
//!    the server answers 200/202 and the real response arrives on the stream.
//!
//! The caller supplies the `reqwest::Client`: mneme's SSRF guard builds one
//! pinned to checked addresses with redirects disabled. That client must not
//! have an overall request timeout, since the SSE GET lives as long as the
//! session; POSTs get their own [`SseClientConfig::post_timeout`].
//!
//! The configured headers carry the tenant's upstream credentials: they are
//! sent on the GET and on every POST, marked sensitive, and never logged.
//! Errors strip URLs too, since tenants sometimes put keys in query strings.

use std::{borrow::Cow, fmt, time::Duration};

use futures::{StreamExt, stream::BoxStream};
use http::{HeaderMap, HeaderValue, header};
use reqwest::Url;
use rmcp::{
    RoleClient,
    model::{ClientJsonRpcMessage, ServerJsonRpcMessage},
    transport::Transport,
};
use sse_stream::{Sse, SseStream};
use tokio::{sync::mpsc, task::JoinHandle, time::Instant};
use tokio_util::sync::CancellationToken;

/// Default for [`SseClientConfig::connect_timeout`].
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Default for [`SseClientConfig::post_timeout`].
pub const DEFAULT_POST_TIMEOUT: Duration = Duration::from_secs(30);
/// Default for [`SseClientConfig::max_message_bytes`]: 40 MiB.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 40 * 1024 * 1024;

/// Messages buffered between the reader task and `receive`. Small, because
/// each may be up to `max_message_bytes`; a full channel simply stops reading
/// the socket, which is the back-pressure we want.
const CHANNEL_CAPACITY: usize = 16;

/// How much of a POST answer body is read (and discarded) so the connection
/// can go back to the pool; anything longer is dropped with the connection.
const MAX_POST_DRAIN_BYTES: usize = 64 * 1024;

/// Where and how to reach a legacy SSE upstream.
#[derive(Clone)]
pub struct SseClientConfig {
    /// The SSE URL (e.g. `https://host/sse`); also the origin the POST
    /// endpoint must share.
    pub url: Url,
    /// Headers sent on the GET and on every POST (typically the tenant's
    /// upstream credentials). Never logged.
    pub headers: HeaderMap,
    /// Bound on opening the stream and receiving the `endpoint` event.
    pub connect_timeout: Duration,
    /// Bound on each POST, from sending it to its response headers.
    pub post_timeout: Duration,
    /// Largest SSE event accepted from the upstream, in raw bytes; a larger
    /// one ends the session rather than being buffered.
    pub max_message_bytes: usize,
}

impl SseClientConfig {
    /// A configuration for `url` with no headers and the default limits.
    pub fn new(url: Url) -> Self {
        Self {
            url,
            headers: HeaderMap::new(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            post_timeout: DEFAULT_POST_TIMEOUT,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
        }
    }
}

// Hand-written so header values (credentials) can never reach a log line.
impl fmt::Debug for SseClientConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SseClientConfig")
            .field("origin", &self.url.origin().ascii_serialization())
            .field("header_count", &self.headers.len())
            .field("connect_timeout", &self.connect_timeout)
            .field("post_timeout", &self.post_timeout)
            .field("max_message_bytes", &self.max_message_bytes)
            .finish()
    }
}

/// Why [`connect`] received no `endpoint` event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoEndpointReason {
    /// The connect timeout elapsed first.
    Timeout,
    /// The server closed the stream first.
    StreamEnded,
}

impl fmt::Display for NoEndpointReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Timeout => "timed out",
            Self::StreamEnded => "the stream ended",
        })
    }
}

/// Failures of the legacy SSE transport. Messages never contain header
/// values, URLs' queries or response bodies.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SseError {
    /// The SSE GET could not be sent or its response not received.
    #[error("cannot open the SSE stream: {0}")]
    Connect(#[source] reqwest::Error),
    /// No response headers to the SSE GET within the connect timeout.
    #[error("the SSE stream did not answer within {0:?}")]
    ConnectTimeout(Duration),
    /// The SSE GET answered with a non-success status.
    #[error("the SSE stream answered HTTP {0}")]
    Status(u16),
    /// The SSE GET answered something other than `text/event-stream`.
    #[error("the SSE stream answered content type {0:?}, not text/event-stream")]
    NotEventStream(String),
    /// The SSE stream failed while waiting for the `endpoint` event.
    #[error("the SSE stream failed: {0}")]
    Stream(String),
    /// No `endpoint` event arrived.
    #[error("no endpoint event on the SSE stream: {0}")]
    NoEndpoint(NoEndpointReason),
    /// The `endpoint` event's data is not a usable URL.
    #[error("invalid endpoint from the SSE stream: {0}")]
    InvalidEndpoint(String),
    /// The endpoint points at another origin than the SSE URL.
    #[error("the SSE endpoint's origin {endpoint} differs from the stream's origin {expected}")]
    CrossOriginEndpoint {
        /// The SSE URL's origin.
        expected: String,
        /// The endpoint's origin.
        endpoint: String,
    },
    /// A client message could not be serialised.
    #[error("cannot serialise the message: {0}")]
    Serialize(#[source] serde_json::Error),
    /// A POST could not be sent or its response not received.
    #[error("cannot POST the message: {0}")]
    Send(#[source] reqwest::Error),
    /// A POST answered with a non-success status.
    #[error("the message endpoint answered HTTP {0}")]
    PostStatus(u16),
    /// The transport was closed.
    #[error("the SSE transport is closed")]
    Closed,
}

/// An rmcp client transport over a legacy HTTP+SSE session, created by
/// [`connect`]. Pass it to `rmcp::ServiceExt::serve` (e.g.
/// `().serve(transport)`); dropping or closing it stops the stream reader.
pub struct SseClientTransport {
    http: reqwest::Client,
    endpoint: Url,
    post_headers: HeaderMap,
    post_timeout: Duration,
    messages: mpsc::Receiver<ServerJsonRpcMessage>,
    cancel: CancellationToken,
    reader: Option<JoinHandle<()>>,
}

impl fmt::Debug for SseClientTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SseClientTransport")
            .field("origin", &self.endpoint.origin().ascii_serialization())
            .field("closed", &self.cancel.is_cancelled())
            .finish_non_exhaustive()
    }
}

impl Drop for SseClientTransport {
    fn drop(&mut self) {
        // The reader may be parked on an idle stream; without this it would
        // hold the upstream connection open until the server hangs up.
        self.cancel.cancel();
    }
}

/// Opens the legacy SSE session described by `config` through `http`, and
/// returns once the server has announced its (same-origin) POST endpoint.
///
/// `http` should have no overall request timeout (the GET lasts the whole
/// session) and should not follow redirects.
pub async fn connect(
    http: reqwest::Client,
    config: SseClientConfig,
) -> Result<SseClientTransport, SseError> {
    let deadline = Instant::now() + config.connect_timeout;
    let mut headers = config.headers;
    for value in headers.values_mut() {
        value.set_sensitive(true);
    }

    let mut get_headers = headers.clone();
    get_headers.insert(
        header::ACCEPT,
        HeaderValue::from_static("text/event-stream"),
    );
    get_headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    let request = http.get(config.url.clone()).headers(get_headers).send();
    let response = tokio::time::timeout_at(deadline, request)
        .await
        .map_err(|_| SseError::ConnectTimeout(config.connect_timeout))?
        .map_err(|e| SseError::Connect(e.without_url()))?;
    let status = response.status();
    if !status.is_success() {
        return Err(SseError::Status(status.as_u16()));
    }
    check_event_stream(response.headers())?;

    let mut events = event_stream(response, config.max_message_bytes);
    let raw_endpoint = tokio::time::timeout_at(deadline, wait_for_endpoint(&mut events))
        .await
        .map_err(|_| SseError::NoEndpoint(NoEndpointReason::Timeout))??;
    let endpoint = resolve_endpoint(&config.url, &raw_endpoint)?;
    tracing::debug!(
        origin = %endpoint.origin().ascii_serialization(),
        "legacy SSE session open"
    );

    let (tx, messages) = mpsc::channel(CHANNEL_CAPACITY);
    let cancel = CancellationToken::new();
    let reader = tokio::spawn(read_messages(events, tx, cancel.clone()));

    let mut post_headers = headers;
    post_headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    // Some servers also answer the POST itself with the JSON-RPC response;
    // we ignore that body, but the Accept header keeps them from refusing.
    post_headers.insert(
        header::ACCEPT,
        HeaderValue::from_static("application/json, text/event-stream"),
    );

    Ok(SseClientTransport {
        http,
        endpoint,
        post_headers,
        post_timeout: config.post_timeout,
        messages,
        cancel,
        reader: Some(reader),
    })
}

/// Resolves the `endpoint` event's data against the SSE URL and refuses any
/// result outside the SSE URL's origin.
pub fn resolve_endpoint(sse_url: &Url, raw: &str) -> Result<Url, SseError> {
    let raw = raw.trim();
    if raw.is_empty() {
        return Err(SseError::InvalidEndpoint("empty endpoint".to_owned()));
    }
    let endpoint = sse_url
        .join(raw)
        .map_err(|e| SseError::InvalidEndpoint(e.to_string()))?;
    let expected = sse_url.origin();
    let actual = endpoint.origin();
    // Opaque origins (non-hierarchical schemes) never compare equal, so
    // anything but an http(s) URL on the same host and port is refused.
    if !expected.is_tuple() || expected != actual {
        return Err(SseError::CrossOriginEndpoint {
            expected: expected.ascii_serialization(),
            endpoint: actual.ascii_serialization(),
        });
    }
    Ok(endpoint)
}

fn check_event_stream(headers: &HeaderMap) -> Result<(), SseError> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    if essence == "text/event-stream" {
        Ok(())
    } else {
        Err(SseError::NotEventStream(content_type.to_owned()))
    }
}

type EventStream = BoxStream<'static, Result<Sse, sse_stream::Error>>;

/// Errors of the byte stream under the SSE parser.
#[derive(Debug, thiserror::Error)]
enum BodyError {
    #[error("{0}")]
    Http(reqwest::Error),
    #[error("an SSE event exceeds {0} bytes")]
    TooLarge(usize),
}

fn event_stream(response: reqwest::Response, max_event_bytes: usize) -> EventStream {
    let mut guard = EventSizeGuard::new(max_event_bytes);
    let bytes = response.bytes_stream().map(move |chunk| {
        let chunk = chunk.map_err(|e| BodyError::Http(e.without_url()))?;
        guard.feed(&chunk)?;
        Ok::<_, BodyError>(chunk)
    });
    SseStream::from_bytes_stream(bytes).boxed()
}

/// Counts the raw bytes of the SSE event being received, so an oversized
/// event fails before the parser buffers all of it.
#[derive(Debug)]
struct EventSizeGuard {
    limit: usize,
    event_len: usize,
    line_is_empty: bool,
    after_cr: bool,
}

impl EventSizeGuard {
    fn new(limit: usize) -> Self {
        Self {
            limit,
            event_len: 0,
            line_is_empty: true,
            after_cr: false,
        }
    }

    fn feed(&mut self, chunk: &[u8]) -> Result<(), BodyError> {
        for &byte in chunk {
            match byte {
                // The `\n` of a `\r\n` pair: that line already ended.
                b'\n' if self.after_cr => self.after_cr = false,
                b'\r' | b'\n' => {
                    // An empty line ends the event (SSE's dispatch rule).
                    if self.line_is_empty {
                        self.event_len = 0;
                    }
                    self.line_is_empty = true;
                    self.after_cr = byte == b'\r';
                }
                _ => {
                    self.after_cr = false;
                    self.line_is_empty = false;
                    self.event_len += 1;
                    if self.event_len > self.limit {
                        return Err(BodyError::TooLarge(self.limit));
                    }
                }
            }
        }
        Ok(())
    }
}

async fn wait_for_endpoint(events: &mut EventStream) -> Result<String, SseError> {
    while let Some(event) = events.next().await {
        let event = event.map_err(|e| SseError::Stream(e.to_string()))?;
        match event.event.as_deref() {
            Some("endpoint") => {
                return event
                    .data
                    .ok_or_else(|| SseError::InvalidEndpoint("endpoint event has no data".into()));
            }
            other => tracing::debug!(event = ?other, "SSE event before the endpoint ignored"),
        }
    }
    Err(SseError::NoEndpoint(NoEndpointReason::StreamEnded))
}

async fn read_messages(
    mut events: EventStream,
    tx: mpsc::Sender<ServerJsonRpcMessage>,
    cancel: CancellationToken,
) {
    loop {
        let event = tokio::select! {
            _ = cancel.cancelled() => break,
            event = events.next() => event,
        };
        let event = match event {
            Some(Ok(event)) => event,
            Some(Err(error)) => {
                tracing::warn!(%error, "legacy SSE stream failed; ending the session");
                break;
            }
            None => {
                tracing::debug!("legacy SSE stream ended");
                break;
            }
        };
        // An event without a type is a `message` event, per the SSE spec.
        match event.event.as_deref() {
            None | Some("message") => {}
            Some("endpoint") => {
                tracing::debug!("repeated endpoint event ignored");
                continue;
            }
            Some(other) => {
                tracing::debug!(event = other, "unknown SSE event ignored");
                continue;
            }
        }
        // Comment-only events (keep-alives) carry no data.
        let Some(data) = event.data else { continue };
        let message = match serde_json::from_str::<ServerJsonRpcMessage>(&data) {
            Ok(message) => message,
            Err(error) => {
                tracing::debug!(%error, "unparseable message event skipped");
                continue;
            }
        };
        // Also watch `cancel` here: `close` waits for this task while the
        // channel may be full.
        tokio::select! {
            _ = cancel.cancelled() => break,
            sent = tx.send(message) => if sent.is_err() { break },
        }
    }
}

async fn post_message(
    http: reqwest::Client,
    endpoint: Url,
    headers: HeaderMap,
    timeout: Duration,
    body: Vec<u8>,
) -> Result<(), SseError> {
    let mut response = http
        .post(endpoint)
        .headers(headers)
        .timeout(timeout)
        .body(body)
        .send()
        .await
        .map_err(|e| SseError::Send(e.without_url()))?;
    let status = response.status();
    if !status.is_success() {
        return Err(SseError::PostStatus(status.as_u16()));
    }
    // The answer is only an acknowledgement; reading a short one lets the
    // connection be reused, and a failure here does not undo the delivery.
    let mut drained = 0;
    while let Ok(Some(chunk)) = response.chunk().await {
        drained += chunk.len();
        if drained > MAX_POST_DRAIN_BYTES {
            break;
        }
    }
    Ok(())
}

impl Transport<RoleClient> for SseClientTransport {
    type Error = SseError;

    fn name() -> Cow<'static, str> {
        "legacy-sse".into()
    }

    fn send(
        &mut self,
        item: ClientJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let prepared = if self.cancel.is_cancelled() {
            Err(SseError::Closed)
        } else {
            serde_json::to_vec(&item)
                .map_err(SseError::Serialize)
                .map(|body| {
                    (
                        self.http.clone(),
                        self.endpoint.clone(),
                        self.post_headers.clone(),
                        self.post_timeout,
                        body,
                    )
                })
        };
        async move {
            let (http, endpoint, headers, timeout, body) = prepared?;
            post_message(http, endpoint, headers, timeout, body).await
        }
    }

    async fn receive(&mut self) -> Option<ServerJsonRpcMessage> {
        self.messages.recv().await
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.cancel.cancel();
        if let Some(reader) = self.reader.take()
            && let Err(error) = reader.await
        {
            tracing::debug!(%error, "legacy SSE reader task failed");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> Url {
        Url::parse(s).expect("test URL")
    }

    #[test]
    fn relative_endpoint_resolves_against_the_sse_url() {
        let base = url("https://up.example.com/mcp/sse?key=1");
        let got = resolve_endpoint(&base, "/message?sessionId=abc").expect("same origin");
        assert_eq!(got.as_str(), "https://up.example.com/message?sessionId=abc");

        let got = resolve_endpoint(&base, "messages?sessionId=abc").expect("same origin");
        assert_eq!(
            got.as_str(),
            "https://up.example.com/mcp/messages?sessionId=abc"
        );

        let got = resolve_endpoint(&base, "  /m\n").expect("trimmed");
        assert_eq!(got.path(), "/m");
    }

    #[test]
    fn absolute_endpoint_on_the_same_origin_is_accepted() {
        let base = url("http://127.0.0.1:8080/sse");
        let got = resolve_endpoint(&base, "http://127.0.0.1:8080/message?s=1").expect("ok");
        assert_eq!(got.as_str(), "http://127.0.0.1:8080/message?s=1");

        // The default port written out is still the same origin.
        let base = url("https://host.example/sse");
        assert!(resolve_endpoint(&base, "https://HOST.example:443/message").is_ok());
    }

    #[test]
    fn other_origins_are_refused() {
        let base = url("https://up.example.com/sse");
        for raw in [
            "https://evil.example.com/message",
            "http://up.example.com/message",
            "https://up.example.com:8443/message",
            "//evil.example.com/message",
            "https://up.example.com.evil.example/message",
            "data:text/plain,hi",
            "file:///etc/passwd",
        ] {
            match resolve_endpoint(&base, raw) {
                Err(SseError::CrossOriginEndpoint { expected, .. }) => {
                    assert_eq!(expected, "https://up.example.com", "{raw}");
                }
                other => panic!("{raw}: expected CrossOriginEndpoint, got {other:?}"),
            }
        }
    }

    #[test]
    fn unusable_endpoints_are_invalid() {
        let base = url("https://up.example.com/sse");
        for raw in ["", "   ", "http://[::1"] {
            assert!(
                matches!(
                    resolve_endpoint(&base, raw),
                    Err(SseError::InvalidEndpoint(_))
                ),
                "{raw:?}"
            );
        }
    }

    #[test]
    fn size_guard_resets_at_each_event_boundary() {
        let mut guard = EventSizeGuard::new(10);
        guard.feed(b"data: 1234\n\n").expect("fits");
        guard
            .feed(b"data: 1234\r\n\r\n")
            .expect("fits after CRLF reset");
        guard.feed(b"data: 1234\r\r").expect("fits after CR reset");
        // Split across chunks, including the boundary itself.
        guard.feed(b"data: 12").expect("fits");
        guard.feed(b"34\r").expect("fits");
        guard.feed(b"\n\r\n").expect("fits");
        guard.feed(b"data: 1234").expect("fits after split reset");
    }

    #[test]
    fn size_guard_refuses_an_oversized_event() {
        let mut guard = EventSizeGuard::new(10);
        guard.feed(b"data: 12\n").expect("fits");
        // One event across lines: the newline does not reset the count.
        assert!(matches!(
            guard.feed(b"data: 12\n"),
            Err(BodyError::TooLarge(10))
        ));
    }

    #[test]
    fn content_type_check_accepts_parameters() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("Text/Event-Stream; charset=utf-8"),
        );
        assert!(check_event_stream(&headers).is_ok());
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/html"));
        assert!(matches!(
            check_event_stream(&headers),
            Err(SseError::NotEventStream(_))
        ));
    }

    #[test]
    fn debug_output_hides_header_values() {
        let mut config = SseClientConfig::new(url("https://up.example.com/sse?key=secret1"));
        config.headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer secret2"),
        );
        let printed = format!("{config:?}");
        assert!(!printed.contains("secret"), "{printed}");
    }
}
