//! Redis access for mneme (fred).
//!
//! Redis holds only what may be lost: caches and wake-up signals. Every
//! operation here therefore *degrades* instead of failing: a Redis outage
//! turns cache reads into misses, writes and publishes into no-ops (logged),
//! and the caller carries on against PostgreSQL. Commands time out quickly
//! so an unreachable Redis cannot stall a request.
//!
//! Layout: [`Cache`] (connection, key naming, health), query-embedding
//! cache, and the embedding wake-up channel ([`Cache::wake_embedding_worker`],
//! [`WakeListener`]).
#![forbid(unsafe_code)]

use std::time::Duration;

use fred::clients::SubscriberClient;
use fred::prelude::*;
use fred::types::Message;
use fred::types::config::ReconnectPolicy;
use sha2::{Digest, Sha256};
use tokio::sync::broadcast;

/// A command that takes longer than this is treated as a failure.
const COMMAND_TIMEOUT: Duration = Duration::from_millis(500);
/// How long start-up waits for Redis before continuing degraded.
const CONNECT_WAIT: Duration = Duration::from_secs(2);
/// Channel carrying tenant ids whose fragments await embeddings.
const EMBED_WAKE_CHANNEL: &str = "embed-wake";

#[derive(Debug, thiserror::Error)]
#[error("redis: {0}")]
pub struct CacheError(#[from] fred::error::Error);

/// The shared Redis handle. Cheap to clone.
#[derive(Clone)]
pub struct Cache {
    client: Client,
    config: Config,
    prefix: String,
}

impl std::fmt::Debug for Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cache")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
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

impl Cache {
    /// Connects to Redis. Only a malformed URL is an error: when Redis is
    /// down, start-up continues degraded and the client keeps reconnecting.
    pub async fn connect(url: &str, prefix: &str) -> Result<Self, CacheError> {
        let mut config = Config::from_url(url)?;
        // Keep retrying the first connection instead of failing start-up.
        config.fail_fast = false;
        let client = builder(&config).build()?;
        client.connect();
        if tokio::time::timeout(CONNECT_WAIT, client.wait_for_connect())
            .await
            .is_err()
        {
            tracing::warn!(
                "redis is not reachable yet; continuing without it and reconnecting in the background"
            );
        }
        Ok(Self {
            client,
            config,
            prefix: prefix.to_owned(),
        })
    }

    /// Connects with the `Redis` settings.
    pub async fn from_config(config: &mneme_config::RedisConfig) -> Result<Self, CacheError> {
        Self::connect(config.url.expose(), &config.prefix).await
    }

    fn key(&self, parts: &[&str]) -> String {
        let mut key = self.prefix.clone();
        key.push_str(&parts.join(":"));
        key
    }

    /// True when Redis answers `PING`.
    pub async fn ping(&self) -> bool {
        self.client.ping::<String>(None).await.is_ok()
    }

    /// A cached query embedding, or `None` on a miss or any Redis failure.
    pub async fn cached_embedding(&self, model: &str, text: &str, dim: usize) -> Option<Vec<f32>> {
        let key = self.key(&["qemb", model, &hex::encode(Sha256::digest(text.as_bytes()))]);
        match self.client.get::<Option<Vec<u8>>, _>(&key).await {
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
        if let Err(error) = self
            .client
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
        if let Err(error) = self.client.publish::<(), _, _>(&channel, tenant_id).await {
            tracing::debug!(%error, "embedding wake-up not published");
        }
    }

    /// Subscribes to embedding wake-ups. The subscription is restored after
    /// reconnects.
    pub async fn embedding_wake_listener(&self) -> Result<WakeListener, CacheError> {
        let subscriber = builder(&self.config).build_subscriber_client()?;
        subscriber.connect();
        let _ = tokio::time::timeout(CONNECT_WAIT, subscriber.wait_for_connect()).await;
        let _resubscribe = subscriber.manage_subscriptions();
        let channel = self.key(&[EMBED_WAKE_CHANNEL]);
        if let Err(error) = subscriber.subscribe(&channel).await {
            // Tracked anyway: manage_subscriptions subscribes on reconnect.
            tracing::warn!(%error, "cannot subscribe to embedding wake-ups yet");
        }
        let messages = subscriber.message_rx();
        Ok(WakeListener {
            _subscriber: subscriber,
            messages,
        })
    }
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
