//! The legacy HTTP+SSE transport (MCP 2024-11-05), for clients that predate
//! Streamable HTTP: `GET /sse` opens an event stream whose first event,
//! `endpoint`, names where this connection's messages go
//! (`/message?sessionId=…`); every answer and notification comes back on
//! the stream, with a comment line as heartbeat while it is idle.
//!
//! rmcp no longer ships a server for this transport, so this module feeds
//! one MCP server per stream through channels ([`SinkStreamTransport`]).
//! Authentication, modes and rate limits are the same middleware as on
//! `/mcp`; the stream's session id is issued and bound like a `/mcp`
//! session's, so a message with another key's credentials gets 403 and an
//! id no stream holds gets 404.
//!
//! The stream lives on the pod that accepted the `GET`. A `POST /message`
//! that lands on another pod is relayed to it through Redis pub/sub
//! ([`mneme_cache::Relay`]); without Redis, messages reach only the pod
//! holding the stream (load balancers usually keep a client on one pod).
//! A stream does not outlive its pod: when it ends, the client reconnects.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::{Query, Request, State};
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures::channel::mpsc;
use futures::{SinkExt, Stream, StreamExt};
use mneme_cache::{Cache, Relay};
use mneme_core::Principal;
use rmcp::ServiceExt;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::sink_stream::SinkStreamTransport;
use serde::Deserialize;
use tokio::sync::OnceCell;
use tokio_util::sync::CancellationToken;

use crate::App;
use crate::jsonrpc::{self, McpCall};
use crate::mcp::McpServer;
use crate::metrics::{self, METRICS};
use crate::session::{SessionLayer, not_found};

/// Protocol revision of this transport, recorded on its sessions.
const SSE_PROTOCOL_VERSION: &str = "2024-11-05";
/// Heartbeat comment interval on idle streams.
const HEARTBEAT: Duration = Duration::from_secs(15);
/// Messages buffered towards one stream's MCP server.
const INBOX: usize = 64;

/// The streams this pod holds, and its relay subscription.
#[derive(Default)]
pub(crate) struct SseStreams {
    inboxes: Mutex<HashMap<String, mpsc::Sender<ClientJsonRpcMessage>>>,
    relay: OnceCell<Option<Relay>>,
}

impl std::fmt::Debug for SseStreams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SseStreams").finish_non_exhaustive()
    }
}

impl SseStreams {
    fn inbox(&self, id: &str) -> Option<mpsc::Sender<ClientJsonRpcMessage>> {
        self.inboxes.lock().expect("not poisoned").get(id).cloned()
    }

    /// The pod's relay subscriber, started with the first stream; `None`
    /// when Redis is unavailable (messages then reach only this pod).
    async fn relay(self: &Arc<Self>, cache: &Cache) -> Option<&Relay> {
        self.relay
            .get_or_init(|| async {
                let relay = cache
                    .relay()
                    .await
                    .inspect_err(|error| tracing::warn!(%error, "no SSE relay: redis unavailable"))
                    .ok()?;
                let mut messages = relay.messages();
                let streams = Arc::downgrade(self);
                tokio::spawn(async move {
                    while let Some(relayed) = messages.recv().await {
                        let Some(streams) = streams.upgrade() else {
                            return;
                        };
                        streams
                            .deliver_relayed(&relayed.connection, &relayed.payload)
                            .await;
                    }
                });
                Some(relay)
            })
            .await
            .as_ref()
    }

    async fn deliver_relayed(&self, id: &str, payload: &str) {
        let (Some(mut inbox), Ok(message)) = (
            self.inbox(id),
            serde_json::from_str::<ClientJsonRpcMessage>(payload),
        ) else {
            return;
        };
        let _ = inbox.send(message).await;
    }
}

pub(crate) fn routes() -> Router<App> {
    Router::new()
        .route("/sse", get(open_stream))
        .route("/message", post(message))
}

/// Ends the stream's bookkeeping when the client goes away.
struct StreamGuard {
    id: String,
    streams: Arc<SseStreams>,
    server: CancellationToken,
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.server.cancel();
        self.streams
            .inboxes
            .lock()
            .expect("not poisoned")
            .remove(&self.id);
        METRICS.sse_streams.dec();
        let (streams, id) = (self.streams.clone(), self.id.clone());
        tokio::spawn(async move {
            if let Some(Some(relay)) = streams.relay.get() {
                relay.unsubscribe(&id).await;
            }
        });
    }
}

async fn open_stream(State(app): State<App>, request: Request) -> Response {
    let Some(principal) = request.extensions().get::<Principal>().cloned() else {
        return StatusCode::UNAUTHORIZED.into_response();
    };
    let sessions: &SessionLayer = &app.sessions;
    let id = sessions.ids.issue();
    sessions
        .bind_new(&id, &principal, SSE_PROTOCOL_VERSION)
        .await;

    let (inbox, inbox_rx) = mpsc::channel::<ClientJsonRpcMessage>(INBOX);
    let (outbox, outbox_rx) = mpsc::channel::<ServerJsonRpcMessage>(INBOX);
    // Every message runs as the stream's principal: each POST is
    // authenticated and checked against the session's binding first.
    let (parts, ()) = {
        let mut request = http::Request::new(());
        request
            .extensions_mut()
            .insert(principal_for(&principal, &id));
        request.into_parts()
    };
    let inbound = inbox_rx.map(move |mut message| {
        message.insert_extension(parts.clone());
        message
    });
    let server = CancellationToken::new();
    let service = McpServer::for_app(&app);
    let stop = server.clone();
    tokio::spawn(async move {
        let transport = SinkStreamTransport::new(outbox, inbound);
        match Box::pin(service.serve_with_ct(transport, stop)).await {
            Ok(running) => {
                let _ = running.waiting().await;
            }
            Err(error) => tracing::debug!(%error, "SSE session ended before initialize"),
        }
    });

    app.sse
        .inboxes
        .lock()
        .expect("not poisoned")
        .insert(id.clone(), inbox);
    if let Some(relay) = app.sse.relay(&app.cache).await
        && let Err(error) = relay.subscribe(&id).await
    {
        tracing::warn!(%error, "SSE stream reachable only on this pod");
    }
    METRICS.sse_streams.inc();
    metrics::session("created");

    let guard = StreamGuard {
        id: id.clone(),
        streams: app.sse.clone(),
        server,
    };
    let endpoint = futures::stream::once(async move {
        Ok::<_, Infallible>(
            Event::default()
                .event("endpoint")
                .data(format!("/message?sessionId={id}")),
        )
    });
    let messages = outbox_rx.map(move |message| {
        let _alive = &guard;
        let data = serde_json::to_string(&message).unwrap_or_default();
        Ok(Event::default().event("message").data(data))
    });
    let stream = endpoint
        .chain(messages)
        .take_until(app.shutdown.clone().cancelled_owned());
    Sse::new(Box::pin(stream) as std::pin::Pin<Box<dyn Stream<Item = _> + Send>>)
        .keep_alive(KeepAlive::new().interval(HEARTBEAT))
        .into_response()
}

fn principal_for(principal: &Principal, session_id: &str) -> Principal {
    let mut principal = principal.clone();
    principal.session_id = Some(session_id.to_owned());
    principal
}

#[derive(Debug, Deserialize)]
struct MessageQuery {
    #[serde(rename = "sessionId")]
    session_id: String,
}

async fn message(
    State(app): State<App>,
    Query(query): Query<MessageQuery>,
    request: Request,
) -> Response {
    let call = request.extensions().get::<McpCall>().cloned();
    let Some(principal) = request.extensions().get::<Principal>().cloned() else {
        return StatusCode::UNAUTHORIZED.into_response();
    };
    let id = query.session_id;
    if let Err(refusal) = app
        .sessions
        .check_binding(&id, &principal, call.as_ref())
        .await
    {
        return refusal;
    }
    let body = match axum::body::to_bytes(request.into_body(), usize::MAX).await {
        Ok(body) => body,
        Err(_) => return StatusCode::BAD_REQUEST.into_response(),
    };
    let message: ClientJsonRpcMessage = match serde_json::from_slice(&body) {
        Ok(message) => message,
        Err(error) => {
            return jsonrpc::error_response(
                StatusCode::BAD_REQUEST,
                jsonrpc::PARSE_ERROR,
                &format!("Parse error: {error}"),
                None,
            );
        }
    };
    if let Some(mut inbox) = app.sse.inbox(&id) {
        return match inbox.send(message).await {
            Ok(()) => StatusCode::ACCEPTED.into_response(),
            Err(_) => not_found(call.as_ref()),
        };
    }
    // Another pod holds the stream.
    let relayed = app.cache.is_connected()
        && app
            .cache
            .relay_to(&id, &String::from_utf8_lossy(&body))
            .await
            .is_ok_and(|receivers| receivers > 0);
    if relayed {
        StatusCode::ACCEPTED.into_response()
    } else {
        not_found(call.as_ref())
    }
}
