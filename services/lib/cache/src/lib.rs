//! Redis access for mneme (fred).
//!
//! Redis holds only what may be lost: caches and wake-up signals. Every
//! operation here therefore *degrades* instead of failing: a Redis outage
//! turns cache reads into misses, writes and publishes into no-ops (logged),
//! and the caller carries on against PostgreSQL. Commands time out quickly
//! so an unreachable Redis cannot stall a request, and a hung one (connected,
//! answering nothing) is found by pings and then skipped like a dead one.
//!
//! Layout: [`Cache`] (connection, key naming, health), the query-embedding
//! cache, quota counts, session working memory ([`WorkingMemoryItem`]), ids
//! already shown to a session, and the embedding wake-up channel
//! ([`Cache::wake_embedding_worker`], [`WakeListener`]), and [`surfacing`]
//! (rate window, cooldown, dedup and invalidation of active surfacing),
//! [`proxy`] (progressive results, the upstream result cache and the
//! upstream-change channel), [`stats`] (cached `memory_stats` answers and
//! each tenant's change number).
//! [`activity`] (each session's activity log, for automatic reflection),
//! [`sessions`] (MCP session records and each tenant's index of them),
//! [`admin`] (dashboard sign-ins), [`rate_limit`] (shared request
//! counters) and [`relay`] (messages for a connection another process
//! holds) are the exceptions: they report Redis failures, because the
//! gateway degrades differently when Redis is down than when a key is absent.
#![forbid(unsafe_code)]

pub mod activity;
pub mod admin;
pub mod proxy;
pub mod rate_limit;
pub mod relay;
pub mod sessions;
pub mod stats;
pub mod surfacing;

pub use activity::{ActivityEntry, ActivityOwner, SessionActivity};
pub use rate_limit::{Admission, Bucket};
pub use relay::{Relay, RelayMessages, Relayed};
pub use sessions::{SessionLifetime, SessionRecord};
pub use stats::CachedStats;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use fred::clients::SubscriberClient;
use fred::prelude::*;
use fred::types::Message;
use fred::types::config::{ReconnectPolicy, TlsConnector};
use sha2::{Digest, Sha256};
use tokio::sync::broadcast;

/// A command that takes longer than this is treated as a failure.
const COMMAND_TIMEOUT: Duration = Duration::from_millis(500);
/// How often the client checks that Redis answers (see [`watch_answers`]).
const PROBE_EVERY: Duration = Duration::from_millis(250);
/// Unanswered probes in a row after which Redis counts as hung.
const PROBES_MISSED: u32 = 2;
/// How long start-up waits for Redis before continuing degraded.
const CONNECT_WAIT: Duration = Duration::from_secs(2);
/// Channel carrying tenant ids whose fragments await embeddings.
const EMBED_WAKE_CHANNEL: &str = "embed-wake";
/// Channel carrying ids of keys that must stop working at once.
const KEY_REVOKED_CHANNEL: &str = "key-revoked";

#[derive(Debug, thiserror::Error)]
#[error("redis: {0}")]
pub struct CacheError(#[from] fred::error::Error);

/// The shared Redis handle. Cheap to clone.
#[derive(Clone)]
pub struct Cache {
    client: Client,
    /// Shared, like the client: handles are cloned per request.
    config: Arc<Config>,
    prefix: Arc<str>,
    /// False while Redis, though connected, answers nothing.
    answering: Arc<AtomicBool>,
}

impl std::fmt::Debug for Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cache")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

/// A hung Redis (a frozen or partitioned server: the socket stays open and
/// nothing is answered or refused) leaves the client connected, so every
/// command would wait out `COMMAND_TIMEOUT`, several per request. This pings
/// Redis every `PROBE_EVERY`; after `PROBES_MISSED` unanswered pings in a
/// row, callers skip Redis as when it is down, until a ping is answered
/// again. Ends with the last clone of its [`Cache`].
async fn watch_answers(client: Client, answering: Weak<AtomicBool>) {
    let mut missed = 0;
    loop {
        tokio::time::sleep(PROBE_EVERY).await;
        let Some(answering) = answering.upgrade() else {
            return;
        };
        if !client.is_connected() {
            // Down, not hung: the client knows, and reconnects by itself.
            missed = 0;
            answering.store(true, Ordering::Relaxed);
            continue;
        }
        let answered = tokio::time::timeout(COMMAND_TIMEOUT, Box::pin(client.ping::<String>(None)))
            .await
            .is_ok_and(|reply| reply.is_ok());
        if answered {
            missed = 0;
            if !answering.swap(true, Ordering::Relaxed) {
                tracing::info!("redis answers again");
            }
        } else {
            missed += 1;
            if missed >= PROBES_MISSED && answering.swap(false, Ordering::Relaxed) {
                tracing::warn!("redis is connected but does not answer; going on without it");
            }
        }
    }
}

fn builder(config: &Config) -> Builder {
    let mut builder = Builder::from_config(config.clone());
    builder
        .with_performance_config(|performance| {
            performance.default_command_timeout = COMMAND_TIMEOUT;
        })
        .with_connection_config(|connection| {
            connection.connection_timeout = CONNECT_WAIT;
            connection.max_command_attempts = 1;
        })
        // Reconnect forever, backing off from 100 ms to 10 s.
        .set_policy(ReconnectPolicy::new_exponential(0, 100, 10_000, 2));
    builder
}

/// The client configuration for `url`. `rediss://` URLs (and their
/// `-cluster`/`-sentinel` forms) get TLS that trusts the system's root
/// certificates plus those in `ca_file`; `ca_file` is ignored otherwise.
fn redis_config(url: &str, ca_file: Option<&Path>) -> Result<Config, CacheError> {
    let scheme = url.split_once("://").map_or("", |(scheme, _)| scheme);
    if scheme.starts_with("rediss") || scheme.starts_with("valkeys") {
        // For TLS URLs `from_url` first builds fred's default connector with
        // rustls's process-wide provider; make sure there is one (aws-lc-rs,
        // as everywhere in mneme) rather than risk rustls's "no process-level
        // CryptoProvider" panic. An already installed provider stays.
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    }
    let mut config = Config::from_url(url)?;
    match config.tls.as_mut() {
        Some(tls) => tls.connector = tls_connector(ca_file)?,
        None if ca_file.is_some() => tracing::warn!(
            "{CA_FILE_SETTING} is set but MNEME_REDIS_URL is not a rediss:// URL; \
             Redis is reached without TLS"
        ),
        None => {}
    }
    Ok(config)
}

const CA_FILE_SETTING: &str = mneme_config::settings::REDIS_CA_FILE.name;

/// A rustls connector (aws-lc-rs) trusting the system's root certificates and
/// those in `ca_file`.
fn tls_connector(ca_file: Option<&Path>) -> Result<TlsConnector, CacheError> {
    let tls_error = |message: String| {
        CacheError(fred::error::Error::new(
            fred::error::ErrorKind::Tls,
            message,
        ))
    };
    let mut roots = rustls::RootCertStore::empty();
    let system = rustls_native_certs::load_native_certs();
    for error in &system.errors {
        tracing::warn!(%error, "some system root certificates could not be loaded");
    }
    roots.add_parsable_certificates(system.certs);
    if let Some(path) = ca_file {
        use rustls::pki_types::CertificateDer;
        use rustls::pki_types::pem::PemObject;
        let invalid =
            |why: String| tls_error(format!("{CA_FILE_SETTING}={}: {why}", path.display()));
        let pem = std::fs::read(path).map_err(|e| invalid(format!("cannot read the file: {e}")))?;
        let certs = CertificateDer::pem_slice_iter(&pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| invalid(format!("not a PEM file of certificates: {e}")))?;
        if certs.is_empty() {
            return Err(invalid("holds no PEM certificate".into()));
        }
        for cert in certs {
            roots
                .add(cert)
                .map_err(|e| invalid(format!("unusable CA certificate: {e}")))?;
        }
    }
    if roots.is_empty() {
        return Err(tls_error(format!(
            "TLS to Redis needs trusted root certificates, but the system has none; \
             set {CA_FILE_SETTING} or install the ca-certificates package"
        )));
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| tls_error(format!("cannot set up TLS: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(TlsConnector::from(config))
}

impl Cache {
    /// Connects to Redis. Only a malformed URL (or, for `rediss://`, TLS
    /// that cannot be set up) is an error: when Redis is down, start-up
    /// continues degraded and the client keeps reconnecting.
    pub async fn connect(url: &str, prefix: &str) -> Result<Self, CacheError> {
        Box::pin(Self::connect_with_ca_file(url, prefix, None)).await
    }

    /// [`Cache::connect`], trusting the CA certificates in `ca_file` (PEM)
    /// besides the system's for `rediss://` URLs. An unreadable file is an
    /// error.
    pub async fn connect_with_ca_file(
        url: &str,
        prefix: &str,
        ca_file: Option<&Path>,
    ) -> Result<Self, CacheError> {
        let mut config = redis_config(url, ca_file)?;
        // Keep retrying the first connection instead of failing start-up.
        config.fail_fast = false;
        // A span per command: it joins the request's trace and feeds
        // `mneme_redis_command_seconds` (see mneme_telemetry::span_metrics).
        config.tracing = fred::types::config::TracingConfig::new(true);
        let client = builder(&config).build()?;
        client.connect();
        // Boxed, as every wait on fred here: with TLS support fred's
        // futures are large, and they would swell the callers' start-up
        // futures (clippy's `large_futures`).
        if tokio::time::timeout(CONNECT_WAIT, Box::pin(client.wait_for_connect()))
            .await
            .is_err()
        {
            tracing::warn!(
                "redis is not reachable yet; continuing without it and reconnecting in the background"
            );
        }
        let answering = Arc::new(AtomicBool::new(true));
        tokio::spawn(watch_answers(client.clone(), Arc::downgrade(&answering)));
        Ok(Self {
            client,
            config: Arc::new(config),
            prefix: prefix.into(),
            answering,
        })
    }

    /// Connects with the `Redis` settings.
    pub async fn from_config(config: &mneme_config::RedisConfig) -> Result<Self, CacheError> {
        Box::pin(Self::connect_with_ca_file(
            config.url.expose(),
            &config.prefix,
            config.ca_file.as_deref(),
        ))
        .await
    }

    fn key(&self, parts: &[&str]) -> String {
        let mut key = String::from(&*self.prefix);
        key.push_str(&parts.join(":"));
        key
    }

    /// The client, or at once an error while it is disconnected or hung: a
    /// command sent then would wait for `COMMAND_TIMEOUT`, and every caller
    /// here has a way to go on without Redis.
    fn live(&self) -> Result<&Client, CacheError> {
        if self.is_connected() {
            Ok(&self.client)
        } else {
            Err(CacheError(fred::error::Error::new(
                fred::error::ErrorKind::IO,
                "not connected to Redis",
            )))
        }
    }

    /// True while the client is connected to Redis and Redis answers.
    /// Callers skip Redis when it is not, instead of waiting for each
    /// command to time out.
    pub fn is_connected(&self) -> bool {
        self.client.is_connected() && self.answering.load(Ordering::Relaxed)
    }

    /// True when Redis answers `PING`.
    pub async fn ping(&self) -> bool {
        self.client.ping::<String>(None).await.is_ok()
    }

    /// A cached query embedding, or `None` on a miss or any Redis failure.
    pub async fn cached_embedding(&self, model: &str, text: &str, dim: usize) -> Option<Vec<f32>> {
        let key = self.key(&["qemb", model, &hex::encode(Sha256::digest(text.as_bytes()))]);
        let Ok(client) = self.live() else {
            return None;
        };
        match client.get::<Option<Vec<u8>>, _>(&key).await {
            Ok(Some(bytes)) if bytes.len() == dim * 4 => Some(
                bytes
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect(),
            ),
            Ok(_) => None,
            Err(error) => {
                tracing::debug!(%error, "query-embedding cache read failed");
                None
            }
        }
    }

    /// Caches a query embedding for `ttl` (best effort).
    pub async fn cache_embedding(&self, model: &str, text: &str, vector: &[f32], ttl: Duration) {
        if ttl.is_zero() {
            return;
        }
        let key = self.key(&["qemb", model, &hex::encode(Sha256::digest(text.as_bytes()))]);
        let bytes: Vec<u8> = vector.iter().flat_map(|x| x.to_le_bytes()).collect();
        let expiry = Expiration::EX(ttl.as_secs().max(1) as i64);
        let Ok(client) = self.live() else {
            return;
        };
        if let Err(error) = client
            .set::<(), _, _>(&key, bytes.as_slice(), Some(expiry), None, false)
            .await
        {
            tracing::debug!(%error, "query-embedding cache write failed");
        }
    }

    /// Tells embedding workers that `tenant_id` has new fragments (best
    /// effort: workers also sweep periodically).
    pub async fn wake_embedding_worker(&self, tenant_id: &str) {
        let channel = self.key(&[EMBED_WAKE_CHANNEL]);
        let Ok(client) = self.live() else {
            return;
        };
        if let Err(error) = client.publish::<(), _, _>(&channel, tenant_id).await {
            tracing::debug!(%error, "embedding wake-up not published");
        }
    }

    /// Subscribes to embedding wake-ups. The subscription is restored after
    /// reconnects.
    pub async fn embedding_wake_listener(&self) -> Result<WakeListener, CacheError> {
        self.listen(EMBED_WAKE_CHANNEL).await
    }

    /// Tells every gateway pod that a key was revoked (or its tenant
    /// suspended), so they drop it from their caches now rather than when
    /// the cache entry expires. Best effort: the entries expire anyway.
    pub async fn announce_key_revoked(&self, key_id: &str) {
        let channel = self.key(&[KEY_REVOKED_CHANNEL]);
        let Ok(client) = self.live() else {
            return;
        };
        if let Err(error) = client.publish::<(), _, _>(&channel, key_id).await {
            tracing::warn!(%error, "key revocation not announced; gateway caches expire on their own");
        }
    }

    /// Subscribes to [`Cache::announce_key_revoked`]; yields key ids.
    pub async fn key_revocation_listener(&self) -> Result<WakeListener, CacheError> {
        self.listen(KEY_REVOKED_CHANNEL).await
    }

    async fn listen(&self, channel: &str) -> Result<WakeListener, CacheError> {
        let subscriber = builder(&self.config).build_subscriber_client()?;
        subscriber.connect();
        let _ = tokio::time::timeout(CONNECT_WAIT, Box::pin(subscriber.wait_for_connect())).await;
        let _resubscribe = subscriber.manage_subscriptions();
        let channel = self.key(&[channel]);
        if let Err(error) = subscriber.subscribe(&channel).await {
            // Tracked anyway: manage_subscriptions subscribes on reconnect.
            tracing::warn!(%error, %channel, "cannot subscribe yet");
        }
        let messages = subscriber.message_rx();
        Ok(WakeListener {
            _subscriber: subscriber,
            messages,
        })
    }
}

/// Increments a counter only if it exists, so an expired count is rebuilt
/// exactly instead of restarting from zero.
const INCR_IF_EXISTS: &str = r#"
if redis.call('EXISTS', KEYS[1]) == 1 then
  return redis.call('INCRBY', KEYS[1], ARGV[1])
end
return false
"#;

impl Cache {
    fn quota_key(&self, tenant: &str, key: &str) -> String {
        self.key(&["quota", tenant, key])
    }

    /// The cached number of valid fragments of a key, if fresh.
    pub async fn quota_count(&self, tenant: &str, key: &str) -> Option<i64> {
        let Ok(client) = self.live() else {
            return None;
        };
        client
            .get::<Option<i64>, _>(self.quota_key(tenant, key))
            .await
            .unwrap_or_else(|error| {
                tracing::debug!(%error, "quota cache read failed");
                None
            })
    }

    /// Caches an exact count for `ttl`.
    pub async fn set_quota_count(&self, tenant: &str, key: &str, count: i64, ttl: Duration) {
        let expiry = Expiration::EX(ttl.as_secs().max(1) as i64);
        let Ok(client) = self.live() else {
            return;
        };
        if let Err(error) = client
            .set::<(), _, _>(
                self.quota_key(tenant, key),
                count,
                Some(expiry),
                None,
                false,
            )
            .await
        {
            tracing::debug!(%error, "quota cache write failed");
        }
    }

    /// Adds `n` to a cached count that exists (best effort).
    pub async fn add_quota_count(&self, tenant: &str, key: &str, n: i64) {
        let Ok(client) = self.live() else {
            return;
        };
        let script = fred::types::scripts::Script::from_lua(INCR_IF_EXISTS);
        let result: Result<Option<i64>, _> = script
            .evalsha_with_reload(client, vec![self.quota_key(tenant, key)], vec![n])
            .await;
        if let Err(error) = result {
            tracing::debug!(%error, "quota cache increment failed");
        }
    }

    fn working_memory_key(&self, owner: &str, session: &str) -> String {
        self.key(&["wm", owner, session])
    }

    /// Appends an item to a session's working memory, then drops the oldest
    /// items until the estimated tokens fit `max_tokens` (the newest item
    /// always stays). Fails when Redis is unavailable: working memory lives
    /// nowhere else.
    pub async fn push_working_memory(
        &self,
        owner: &str,
        session: &str,
        item: &WorkingMemoryItem,
        max_tokens: usize,
        ttl: Duration,
    ) -> Result<(), CacheError> {
        let key = self.working_memory_key(owner, session);
        let encoded = serde_json::to_string(item).expect("working-memory items serialise");
        let _: () = self.live()?.rpush(&key, encoded).await?;
        let items = self.working_memory(owner, session).await?;
        let mut total: usize = items.iter().map(|i| i.tokens as usize).sum();
        let mut drop = 0;
        while total > max_tokens && drop + 1 < items.len() {
            total -= items[drop].tokens as usize;
            drop += 1;
        }
        if drop > 0 {
            let _: () = self.live()?.ltrim(&key, drop as i64, -1).await?;
        }
        let _: () = self
            .live()?
            .expire(&key, ttl.as_secs().max(1) as i64, None)
            .await?;
        Ok(())
    }

    /// A session's working memory, oldest first.
    pub async fn working_memory(
        &self,
        owner: &str,
        session: &str,
    ) -> Result<Vec<WorkingMemoryItem>, CacheError> {
        let raw: Vec<String> = self
            .live()?
            .lrange(self.working_memory_key(owner, session), 0, -1)
            .await?;
        Ok(raw
            .iter()
            .filter_map(|item| serde_json::from_str(item).ok())
            .collect())
    }

    /// Adds `members` to the set `key` and sets its expiry (best effort:
    /// a failure is logged, naming `what`).
    pub(crate) async fn add_to_set(
        &self,
        key: &str,
        members: &[String],
        ttl: Duration,
        what: &str,
    ) {
        let result: Result<(), _> = async {
            let _: () = self
                .live()
                .map_err(|e| e.0)?
                .sadd(key, members.to_vec())
                .await?;
            self.live()
                .map_err(|e| e.0)?
                .expire::<(), _>(key, ttl.as_secs().max(1) as i64, None)
                .await
        }
        .await;
        if let Err(error) = result {
            tracing::debug!(%error, what, "set write failed");
        }
    }

    fn seen_key(&self, owner: &str, session: &str) -> String {
        self.key(&["seen", owner, session])
    }

    /// Records fragment ids already shown to a session (best effort).
    pub async fn mark_seen(&self, owner: &str, session: &str, ids: &[String], ttl: Duration) {
        if ids.is_empty() {
            return;
        }
        self.add_to_set(&self.seen_key(owner, session), ids, ttl, "seen ids")
            .await;
    }

    /// Of `ids`, those not spread to in `scope` (tenant, key and session)
    /// within `ttl`, marking them now. On a Redis failure every id counts as
    /// new: deduplication is lost, activation is not.
    pub async fn first_spread(&self, scope: &[&str], ids: &[String], ttl: Duration) -> Vec<String> {
        let Ok(client) = self.live() else {
            return ids.to_vec();
        };
        let pipeline = client.pipeline();
        let marked: Result<Vec<Value>, Error> = async {
            for id in ids {
                let mut parts = vec!["spread"];
                parts.extend_from_slice(scope);
                parts.push(id);
                let _: () = pipeline
                    .set(
                        self.key(&parts),
                        1,
                        Some(Expiration::EX(ttl.as_secs().max(1) as i64)),
                        Some(SetOptions::NX),
                        false,
                    )
                    .await?;
            }
            pipeline.all().await
        }
        .await;
        match marked {
            Ok(replies) => ids
                .iter()
                .zip(replies)
                .filter(|(_, reply)| !reply.is_null())
                .map(|(id, _)| id.clone())
                .collect(),
            Err(error) => {
                tracing::debug!(%error, "spread dedup failed");
                ids.to_vec()
            }
        }
    }

    /// Fragment ids already shown to a session; empty when unknown.
    pub async fn seen(&self, owner: &str, session: &str) -> std::collections::HashSet<String> {
        let Ok(client) = self.live() else {
            return std::collections::HashSet::new();
        };
        client
            .smembers(self.seen_key(owner, session))
            .await
            .unwrap_or_else(|error| {
                tracing::debug!(%error, "seen-ids read failed");
                std::collections::HashSet::new()
            })
    }
}

/// Who owns a session's working memory and seen ids: one API key of one
/// tenant. A session id alone is not enough: another key of the same
/// tenant that learned it must not read or fill that key's session.
pub fn session_owner(tenant_id: impl std::fmt::Display, key_id: impl std::fmt::Display) -> String {
    format!("{tenant_id}:{key_id}")
}

/// One item of a session's working memory.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct WorkingMemoryItem {
    pub id: String,
    pub content: String,
    pub topic: String,
    #[serde(rename = "type")]
    pub fragment_type: String,
    pub keywords: Vec<String>,
    pub importance: f32,
    pub tokens: u32,
    pub created_at_unix_ms: i64,
}

/// Receives tenant ids published by [`Cache::wake_embedding_worker`].
pub struct WakeListener {
    _subscriber: SubscriberClient,
    messages: broadcast::Receiver<Message>,
}

impl std::fmt::Debug for WakeListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WakeListener")
    }
}

impl WakeListener {
    /// The next tenant id; `None` only when the subscriber is gone for good.
    /// Missed messages (a slow receiver) are skipped: the periodic sweep
    /// covers them.
    pub async fn recv(&mut self) -> Option<String> {
        loop {
            match self.messages.recv().await {
                Ok(message) => {
                    if let Some(tenant) = message.value.as_string() {
                        return Some(tenant);
                    }
                }
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A self-signed CA of no server's (any PEM certificate will do here).
    const SOME_CA: &str = "-----BEGIN CERTIFICATE-----
MIIBqjCCAVGgAwIBAgIUEud/zybK9A8CSbeIhkN0IBPKEmkwCgYIKoZIzj0EAwIw
IjEgMB4GA1UEAwwXbW5lbWUgdW5yZWxhdGVkIHRlc3QgQ0EwIBcNMjYxMjAxMTUy
MzI2WhgPMjEyNjExMDcxNTIzMjZaMCIxIDAeBgNVBAMMF21uZW1lIHVucmVsYXRl
ZCB0ZXN0IENBMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEdVjEcRU0rhkGKi3h
HMySnyf2VX0sDmo115qwsqRIBn5KZmbm69UqkNoFVIUVPeHeQa4ODbp3g7im9etX
zKJSjKNjMGEwHQYDVR0OBBYEFG2/ZxO3d40AMv61eBfiGI46X1ibMB8GA1UdIwQY
MBaAFG2/ZxO3d40AMv61eBfiGI46X1ibMA8GA1UdEwEB/wQFMAMBAf8wDgYDVR0P
AQH/BAQDAgEGMAoGCCqGSM49BAMCA0cAMEQCIAtcfbaPgsS+72iwvptVtHKVSdT4
dp38TXKDPZmfib4eAiAxIoS32lN3qdhGZUyfqoxykrGUqyBy1HPO3Rcdrs07GA==
-----END CERTIFICATE-----
";

    fn uses_rustls(config: &Config) -> bool {
        matches!(
            config.tls.as_ref().map(|tls| &tls.connector),
            Some(TlsConnector::Rustls(_))
        )
    }

    #[test]
    fn rediss_urls_are_configured_for_tls_and_redis_urls_are_not() {
        for url in [
            "rediss://:secret@redis.example.com:6380",
            "rediss://redis.example.com:6380/2",
            "rediss-cluster://redis.example.com:6379?node=redis2.example.com:6379",
        ] {
            let config = redis_config(url, None).unwrap();
            assert!(uses_rustls(&config), "{url} must use TLS");
        }
        for url in [
            "redis://127.0.0.1:6379",
            "redis-cluster://redis.example.com:6379?node=redis2.example.com:6379",
        ] {
            assert!(redis_config(url, None).unwrap().tls.is_none(), "{url}");
        }
    }

    #[test]
    fn the_ca_file_is_read_and_its_errors_name_the_setting() {
        let path = std::env::temp_dir().join(format!("mneme-redis-ca-{}.pem", std::process::id()));
        std::fs::write(&path, SOME_CA).unwrap();
        let config = redis_config("rediss://redis.example.com:6380", Some(&path));
        std::fs::remove_file(&path).unwrap();
        assert!(uses_rustls(&config.unwrap()));

        let err = redis_config(
            "rediss://redis.example.com:6380",
            Some(Path::new("/nonexistent/redis-ca.pem")),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("MNEME_REDIS_CA_FILE=/nonexistent/redis-ca.pem: cannot read"),
            "{err}"
        );
    }
}
