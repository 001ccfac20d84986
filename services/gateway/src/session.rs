//! MCP sessions (protocol revisions up to 2025-11-25) shared by every
//! gateway pod, with same-id recovery.
//!
//! rmcp runs each session as an in-memory worker on the pod that created or
//! restored it, and replays `initialize` from a [`SessionStore`] on any
//! other pod. mneme adds what a hosted service needs around that:
//!
//! - **Ids that prove their origin.** A session id is 18 random bytes and a
//!   truncated HMAC of them under a key derived from the internal token,
//!   base64url-encoded (visible ASCII; `mneme_core::session_id`). Any pod
//!   can tell an id mneme issued from one it did not, without Redis.
//! - **A record per session** in Redis ([`SessionRecord`]): the tenant and
//!   key it belongs to, the negotiated protocol version and mode. Every
//!   request extends it (sliding TTL, `MNEME_SESSION_TTL_SECS`).
//! - **Binding.** A session id presented with another tenant's or key's
//!   credentials gets 403 (and `mneme_tenant_isolation_blocked_total`).
//!   Sessions never authenticate: the credentials are checked first.
//! - **Same-id recovery.** An id mneme issued whose record is gone (expired,
//!   Redis flushed) is recreated under the same id for the credentials that
//!   present it; the client never notices. An id mneme did not issue, or one
//!   the client ended with `DELETE`, gets 404 with JSON-RPC -32000.
//! - **Lifetime.** A new session lives `MNEME_SESSION_MIN_TTL_SECS` unused;
//!   each use extends it to twice its age, up to `MNEME_SESSION_TTL_SECS`
//!   ([`SessionLifetime`]), so per-call sessions of connector hosts vanish
//!   quickly and long-used ones keep their slack.
//! - **Credential reuse** (opt-in, `MNEME_SESSION_REUSE_BY_TOKEN`). An
//!   `initialize` with the same bearer credential as a live session gets
//!   that session back. Off by default: concurrent clients of one
//!   credential would share a session and their JSON-RPC ids collide.
//!   Redis keeps a hash of the credential.
//!
//! When Redis is unreachable, sessions keep working on the pod that holds
//! them and are recreated from their id elsewhere; nothing is refused for
//! want of Redis.
//!
//! Requests of the 2026-07-28 era are stateless and never touch this module.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use mneme_cache::{Cache, SessionLifetime, SessionRecord};
use mneme_core::Principal;
use mneme_core::session_id::SessionIds;
use rmcp::model::{ClientJsonRpcMessage, ProtocolVersion, ServerJsonRpcMessage};
use rmcp::transport::WorkerTransport;
use rmcp::transport::streamable_http_server::session::local::{
    LocalSessionManager, LocalSessionManagerError, LocalSessionWorker, SessionConfig,
    create_local_session,
};
use rmcp::transport::streamable_http_server::session::{
    EventStore, RestoreOutcome, ServerSseMessage, SessionId, SessionManager, SessionState,
    SessionStore, SessionStoreError,
};
use sha2::{Digest, Sha256};

use crate::App;
use crate::jsonrpc::{self, McpCall};
use crate::metrics::{self, METRICS};

pub(crate) const SESSION_HEADER: &str = "mcp-session-id";
const VERSION_HEADER: &str = "mcp-protocol-version";
/// Assumed when a request names no version (MCP 2025-06-18, transports).
const DEFAULT_VERSION: &str = "2025-03-26";

/// rmcp's in-memory session manager, issuing mneme's ids.
pub(crate) struct Sessions {
    local: LocalSessionManager,
    ids: Arc<SessionIds>,
}

impl Sessions {
    pub(crate) fn new(ids: Arc<SessionIds>, worker_idle: Duration) -> Self {
        let mut local = LocalSessionManager::default();
        local.session_config.keep_alive = Some(worker_idle);
        Self { local, ids }
    }

    fn config(&self) -> SessionConfig {
        self.local.session_config.clone()
    }

    /// Publishes how many sessions this pod holds in memory.
    async fn count(&self) {
        let held = self.local.sessions.read().await.len();
        METRICS
            .sessions_in_memory
            .set(i64::try_from(held).unwrap_or(i64::MAX));
    }
}

impl SessionManager for Sessions {
    type Error = LocalSessionManagerError;
    type Transport = WorkerTransport<LocalSessionWorker>;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        let id: SessionId = self.ids.issue().into();
        let (handle, worker) = create_local_session(id.clone(), self.config());
        self.local.sessions.write().await.insert(id.clone(), handle);
        self.count().await;
        Ok((id, WorkerTransport::spawn(worker)))
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        self.local.initialize_session(id, message).await
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        self.local.has_session(id).await
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        let closed = self.local.close_session(id).await;
        self.count().await;
        closed
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl futures::Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error>
    {
        <LocalSessionManager as SessionManager>::create_stream(&self.local, id, message).await
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        self.local.accept_message(id, message).await
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl futures::Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error>
    {
        <LocalSessionManager as SessionManager>::create_standalone_stream(&self.local, id).await
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl futures::Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error>
    {
        <LocalSessionManager as SessionManager>::resume(&self.local, id, last_event_id).await
    }

    async fn restore_session(
        &self,
        id: SessionId,
    ) -> Result<RestoreOutcome<Self::Transport>, Self::Error> {
        let restored = self.local.restore_session(id).await;
        self.count().await;
        restored
    }

    fn event_store(&self) -> Option<Arc<dyn EventStore>> {
        None
    }
}

/// rmcp's session state in Redis, plus the states this pod synthesized for
/// sessions it is recovering (the original `initialize` is lost with the
/// record; the replay uses the version the client presents).
pub(crate) struct SessionStates {
    cache: Cache,
    /// A new session's lifetime (its uses extend it, see `SessionLifetime`).
    ttl: Duration,
    recovering: moka::sync::Cache<String, SessionState>,
}

impl SessionStates {
    pub(crate) fn new(cache: Cache, ttl: Duration) -> Self {
        Self {
            cache,
            ttl,
            recovering: moka::sync::Cache::builder()
                .max_capacity(10_000)
                .time_to_live(Duration::from_secs(60))
                .build(),
        }
    }

    /// Lets rmcp replay `initialize` for `id` with `version`, when the
    /// session's saved state is gone.
    fn recover(&self, id: &str, version: &str) {
        let state = serde_json::json!({
            "initialize_params": {
                "protocolVersion": version,
                "capabilities": {},
                "clientInfo": {"name": "recovered-session", "version": "0"},
            }
        });
        match serde_json::from_value(state) {
            Ok(state) => self.recovering.insert(id.to_owned(), state),
            Err(error) => tracing::error!(%error, "cannot build a recovery state"),
        }
    }
}

#[async_trait::async_trait]
impl SessionStore for SessionStates {
    async fn load(&self, id: &str) -> Result<Option<SessionState>, SessionStoreError> {
        if self.cache.is_connected() {
            match self.cache.session_state(id).await {
                Ok(Some(raw)) => match serde_json::from_str(&raw) {
                    Ok(state) => return Ok(Some(state)),
                    Err(error) => tracing::warn!(%error, "unreadable session state"),
                },
                Ok(None) => {}
                Err(error) => tracing::warn!(%error, "session state unavailable"),
            }
        }
        Ok(self.recovering.remove(id))
    }

    async fn store(&self, id: &str, state: &SessionState) -> Result<(), SessionStoreError> {
        let raw = serde_json::to_string(state)?;
        self.cache.put_session_state(id, &raw, self.ttl).await?;
        Ok(())
    }

    async fn delete(&self, id: &str) -> Result<(), SessionStoreError> {
        self.cache.delete_session_state(id).await?;
        Ok(())
    }
}

/// Everything the session middleware works with.
pub(crate) struct SessionLayer {
    pub(crate) ids: Arc<SessionIds>,
    pub(crate) sessions: Arc<Sessions>,
    pub(crate) states: Arc<SessionStates>,
    cache: Cache,
    lifetime: SessionLifetime,
    reuse_by_token: bool,
}

impl std::fmt::Debug for SessionLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionLayer").finish_non_exhaustive()
    }
}

impl SessionLayer {
    pub(crate) fn new(
        cache: Cache,
        internal_token: &str,
        config: &mneme_config::SessionConfig,
    ) -> Self {
        let ids = Arc::new(SessionIds::new(internal_token));
        Self {
            sessions: Arc::new(Sessions::new(ids.clone(), config.worker_idle)),
            states: Arc::new(SessionStates::new(cache.clone(), config.min_ttl)),
            ids,
            cache,
            lifetime: SessionLifetime {
                min: config.min_ttl,
                max: config.ttl,
            },
            reuse_by_token: config.reuse_by_token,
        }
    }

    /// How long an idle session lives, by its age.
    pub(crate) fn lifetime(&self) -> SessionLifetime {
        self.lifetime
    }

    /// Ends a session for an administrator: its record says closed (every
    /// pod answers its next request with 404, as after the client's own
    /// `DELETE`), its saved state goes, and this pod drops its worker.
    pub(crate) async fn terminate(&self, id: &str, mut record: SessionRecord) {
        record.closed = true;
        self.save(id, &record).await;
        self.reflect_soon(id).await;
        if let Err(error) = self.cache.delete_session_state(id).await {
            tracing::warn!(%error, "terminated session's state not deleted");
        }
        let id: SessionId = id.to_owned().into();
        if self.sessions.local.has_session(&id).await.unwrap_or(false) {
            let _ = self.sessions.close_session(&id).await;
        }
    }

    /// A closed session's activity is due for automatic reflection at once
    /// rather than after the idle period (a no-op when it has none).
    async fn reflect_soon(&self, id: &str) {
        if let Err(error) = self.cache.close_activity(id).await {
            tracing::debug!(%error, "closed session's activity not marked due");
        }
    }

    /// The record of `id`, extended; `Err` when Redis cannot tell.
    async fn touch(&self, id: &str) -> Result<Option<SessionRecord>, ()> {
        if !self.cache.is_connected() {
            return Err(());
        }
        self.cache
            .touch_session(id, self.lifetime)
            .await
            .map_err(|error| {
                tracing::warn!(%error, "session record unavailable");
            })
    }

    async fn save(&self, id: &str, record: &SessionRecord) {
        if let Err(error) = self.cache.put_session(id, record, self.lifetime).await {
            tracing::warn!(%error, "session record not saved");
        }
    }

    /// Records a session this pod just opened for `principal`.
    pub(crate) async fn bind_new(&self, id: &str, principal: &Principal, version: &str) {
        self.save(id, &record_for(principal, version.to_owned()))
            .await;
    }

    /// Whether `principal` may send on session `id`, for transports whose
    /// sessions cannot be recovered elsewhere (legacy SSE): 404 for ids
    /// mneme did not issue or that no longer exist, 403 for another key's.
    /// Without Redis the binding cannot be checked, and the caller finds
    /// out whether this pod holds the session.
    pub(crate) async fn check_binding(
        &self,
        id: &str,
        principal: &Principal,
        call: Option<&McpCall>,
    ) -> Result<(), Response> {
        if !self.ids.verify(id) {
            metrics::session("unknown");
            return Err(not_found(call));
        }
        match self.touch(id).await {
            Ok(Some(record)) if record.closed => {
                metrics::session("closed");
                Err(not_found(call))
            }
            Ok(Some(record)) if !belongs_to(&record, principal) => Err(not_yours(principal, call)),
            Ok(Some(_)) => {
                metrics::session("live");
                Ok(())
            }
            Ok(None) => {
                metrics::session("unknown");
                Err(not_found(call))
            }
            Err(()) => {
                metrics::session("degraded");
                Ok(())
            }
        }
    }

    async fn is_local(&self, id: &str) -> bool {
        self.sessions.has_session(&id.into()).await.unwrap_or(false)
    }
}

/// The protocol version `initialize` settled on, filled in by the MCP
/// handler so the middleware can record it.
#[derive(Debug, Clone, Default)]
pub(crate) struct NegotiatedVersion(pub Arc<Mutex<Option<String>>>);

impl NegotiatedVersion {
    pub(crate) fn set(&self, version: &ProtocolVersion) {
        *self.0.lock().expect("not poisoned") = Some(version.as_str().to_owned());
    }

    fn get(&self) -> Option<String> {
        self.0.lock().expect("not poisoned").clone()
    }
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

fn record_for(principal: &Principal, version: String) -> SessionRecord {
    SessionRecord {
        tenant_id: principal.tenant_id.to_string(),
        key_id: principal.key_id.to_string(),
        protocol_version: version,
        mode: principal.mode.clone(),
        created_at_ms: chrono::Utc::now().timestamp_millis(),
        closed: false,
    }
}

fn belongs_to(record: &SessionRecord, principal: &Principal) -> bool {
    record.tenant_id == principal.tenant_id.to_string()
        && record.key_id == principal.key_id.to_string()
}

/// Redis key material for a bearer credential: the key id and a hash, never
/// the credential.
fn credential_hash(headers: &HeaderMap, principal: &Principal) -> Option<String> {
    let bearer = header(headers, "authorization")?;
    let digest = Sha256::digest(bearer.as_bytes());
    Some(format!(
        "{}:{}",
        principal.key_id,
        hex::encode(&digest[..16])
    ))
}

/// 404 with JSON-RPC -32000 "Session not found" (also for legacy SSE ids).
pub(crate) fn not_found(call: Option<&McpCall>) -> Response {
    jsonrpc::error_response(
        StatusCode::NOT_FOUND,
        jsonrpc::SERVER_ERROR,
        "Session not found",
        call.and_then(|c| c.id.as_ref()),
    )
}

/// A session id presented with another tenant's or key's credentials:
/// answered exactly like an id mneme never issued, so a caller learns
/// nothing about sessions that are not its own; counted and logged as an
/// isolation block.
fn not_yours(principal: &Principal, call: Option<&McpCall>) -> Response {
    metrics::session("principal_mismatch");
    METRICS
        .isolation_blocked
        .with_label_values(&["session_recover"])
        .inc();
    tracing::warn!(tenant = %principal.tenant_id, "session id presented with another principal's credentials");
    not_found(call)
}

/// Middleware on `/mcp`, after authentication.
pub(crate) async fn bind_session(State(app): State<App>, request: Request, next: Next) -> Response {
    let layer = &app.sessions;
    let call = request.extensions().get::<McpCall>().cloned();
    let modern = call.as_ref().is_some_and(|c| c.modern)
        || header(request.headers(), VERSION_HEADER)
            .is_some_and(|v| v >= ProtocolVersion::V_2026_07_28.as_str());
    if modern {
        return next.run(request).await;
    }
    match header(request.headers(), SESSION_HEADER).map(str::to_owned) {
        Some(id) => continue_session(layer, id, call, request, next).await,
        None if call.as_ref().is_some_and(McpCall::is_initialize) => {
            initialize(layer, call.unwrap_or_default(), request, next).await
        }
        None => next.run(request).await,
    }
}

async fn continue_session(
    layer: &SessionLayer,
    id: String,
    call: Option<McpCall>,
    mut request: Request,
    next: Next,
) -> Response {
    if !layer.ids.verify(&id) {
        metrics::session("unknown");
        return not_found(call.as_ref());
    }
    let Some(principal) = request.extensions().get::<Principal>().cloned() else {
        return next.run(request).await;
    };
    let presented_version = header(request.headers(), VERSION_HEADER).map(str::to_owned);
    match layer.touch(&id).await {
        Ok(Some(record)) if record.closed => {
            metrics::session("closed");
            // Another pod may still run the worker; this one drops its own.
            let _ = layer.sessions.close_session(&id.as_str().into()).await;
            return not_found(call.as_ref());
        }
        Ok(Some(record)) if !belongs_to(&record, &principal) => {
            return not_yours(&principal, call.as_ref());
        }
        Ok(Some(record)) => {
            // A version newer than the negotiated one would ask for
            // behaviour the session never agreed to. Older ones are served:
            // the spec requires 400 only for unsupported versions, and
            // clients (the official conformance suite among them) fall back
            // to the transport's default header after negotiating.
            if let Some(version) = &presented_version
                && version.as_str() > record.protocol_version.as_str()
                && !call.as_ref().is_some_and(McpCall::is_initialize)
            {
                metrics::session("version_mismatch");
                METRICS
                    .rejected
                    .with_label_values(&["protocol_version"])
                    .inc();
                return jsonrpc::error_response(
                    StatusCode::BAD_REQUEST,
                    jsonrpc::SERVER_ERROR,
                    &format!(
                        "Bad Request: MCP-Protocol-Version {version} is newer than the session's {}",
                        record.protocol_version
                    ),
                    call.as_ref().and_then(|c| c.id.as_ref()),
                );
            }
            if request.headers().get(crate::auth::MODE_HEADER).is_none()
                && let Some(principal) = request.extensions_mut().get_mut::<Principal>()
            {
                principal.mode = record.mode;
            }
            if !layer.is_local(&id).await {
                // rmcp restores from the saved state; this covers a state
                // that was lost while the record survived.
                layer.states.recover(&id, &record.protocol_version);
            }
            metrics::session("live");
        }
        Ok(None) => {
            let version = presented_version.unwrap_or_else(|| DEFAULT_VERSION.to_owned());
            layer
                .save(&id, &record_for(&principal, version.clone()))
                .await;
            layer.states.recover(&id, &version);
            metrics::session("recovered");
            tracing::info!(key = %principal.key_id, "session recovered with its id");
        }
        Err(()) => {
            // Redis cannot vouch for the binding; the id is ours and the
            // credentials are valid, so serve rather than refuse.
            let version = presented_version.unwrap_or_else(|| DEFAULT_VERSION.to_owned());
            if !layer.is_local(&id).await {
                layer.states.recover(&id, &version);
            }
            metrics::session("degraded");
        }
    }
    if request.method() == Method::DELETE {
        let mut record = record_for(&principal, String::new());
        record.closed = true;
        layer.save(&id, &record).await;
        layer.reflect_soon(&id).await;
    }
    next.run(request).await
}

async fn initialize(
    layer: &SessionLayer,
    call: McpCall,
    mut request: Request,
    next: Next,
) -> Response {
    let Some(principal) = request.extensions().get::<Principal>().cloned() else {
        return next.run(request).await;
    };
    let credential = layer
        .reuse_by_token
        .then(|| credential_hash(request.headers(), &principal))
        .flatten();
    if let Some(credential) = &credential
        && let Some(id) = reusable_session(layer, credential, &principal).await
    {
        // The live session answers this `initialize` itself.
        let value = HeaderValue::from_str(&id).expect("session ids are visible ASCII");
        request.headers_mut().insert(SESSION_HEADER, value.clone());
        if let Some(principal) = request.extensions_mut().get_mut::<Principal>() {
            principal.session_id = Some(id.clone());
        }
        if !layer.is_local(&id).await {
            let version = call
                .initialize_version
                .clone()
                .unwrap_or_else(|| DEFAULT_VERSION.to_owned());
            layer.states.recover(&id, &version);
        }
        let negotiated = NegotiatedVersion::default();
        request.extensions_mut().insert(negotiated.clone());
        let mut response = next.run(request).await;
        if response.status().is_success() {
            response.headers_mut().insert(SESSION_HEADER, value);
            if let Some(version) = negotiated.get() {
                layer.save(&id, &record_for(&principal, version)).await;
            }
            metrics::session("reused");
        }
        return response;
    }
    let negotiated = NegotiatedVersion::default();
    request.extensions_mut().insert(negotiated.clone());
    let response = next.run(request).await;
    let created = header(response.headers(), SESSION_HEADER).map(str::to_owned);
    if let (Some(id), Some(version)) = (created, negotiated.get()) {
        layer.save(&id, &record_for(&principal, version)).await;
        if let Some(credential) = &credential
            && let Err(error) = layer
                .cache
                .bind_credential_session(credential, &id, layer.lifetime.max)
                .await
        {
            tracing::debug!(%error, "credential not bound to its session");
        }
        metrics::session("created");
    }
    response
}

/// The live session last created with this credential, if it still belongs
/// to the same principal.
async fn reusable_session(
    layer: &SessionLayer,
    credential: &str,
    principal: &Principal,
) -> Option<String> {
    if !layer.cache.is_connected() {
        return None;
    }
    let id = layer.cache.credential_session(credential).await.ok()??;
    let record = layer.touch(&id).await.ok()??;
    (!record.closed && belongs_to(&record, principal) && layer.ids.verify(&id)).then_some(id)
}
