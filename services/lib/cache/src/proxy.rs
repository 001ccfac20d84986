//! The MCP proxy's shared state:
//!
//! - progressively delivered results, per (tenant, API key, delivery key),
//!   whose lifetime restarts on every read;
//! - cached upstream results, per tenant and a digest of (upstream, tool,
//!   canonical arguments), stored before surfacing;
//! - the `upstreams-changed` channel that tells every pod to reload a
//!   tenant's upstream registry.
//!
//! Reads fail open: without Redis, nothing is cached and a delivery key
//! reads as expired.

use std::time::Duration;

use fred::prelude::*;

use crate::{Cache, CacheError, WakeListener};

/// Channel carrying ids of tenants whose upstreams changed.
const UPSTREAMS_CHANGED_CHANNEL: &str = "upstreams-changed";

impl Cache {
    fn progressive_key(&self, tenant: &str, api_key: &str, key: &str) -> String {
        self.key(&["proxy", "progressive", tenant, api_key, key])
    }

    /// Stores a result for progressive delivery; false when Redis refused
    /// (the caller then falls back to truncation).
    pub async fn store_progressive(
        &self,
        tenant: &str,
        api_key: &str,
        key: &str,
        content: &str,
        ttl: Duration,
    ) -> bool {
        let Ok(client) = self.live() else {
            return false;
        };
        let result: Result<(), _> = client
            .set(
                self.progressive_key(tenant, api_key, key),
                content,
                Some(Expiration::EX(ttl.as_secs().max(1) as i64)),
                None,
                false,
            )
            .await;
        result
            .inspect_err(|error| tracing::warn!(%error, "progressive result not stored"))
            .is_ok()
    }

    /// A progressively delivered result, its lifetime restarted; `None`
    /// when unknown, expired, another key's, or Redis is down.
    pub async fn progressive(
        &self,
        tenant: &str,
        api_key: &str,
        key: &str,
        ttl: Duration,
    ) -> Option<String> {
        let redis_key = self.progressive_key(tenant, api_key, key);
        let read = async {
            let pipeline = self.live().map_err(|e| e.0)?.pipeline();
            let () = pipeline.get(&redis_key).await?;
            let () = pipeline
                .expire(&redis_key, ttl.as_secs().max(1) as i64, None)
                .await?;
            pipeline.all::<(Option<String>, i64)>().await
        };
        read.await
            .inspect_err(|error| tracing::debug!(%error, "progressive read failed"))
            .ok()?
            .0
    }

    fn result_cache_key(&self, tenant: &str, digest: &str) -> String {
        self.key(&["proxy", "result", tenant, digest])
    }

    /// A cached upstream result (the JSON of the text and what it came
    /// with), or `None`.
    pub async fn cached_result(&self, tenant: &str, digest: &str) -> Option<String> {
        let Ok(client) = self.live() else {
            return None;
        };
        client
            .get::<Option<String>, _>(self.result_cache_key(tenant, digest))
            .await
            .inspect_err(|error| tracing::debug!(%error, "result cache read failed"))
            .ok()
            .flatten()
    }

    pub async fn cache_result(&self, tenant: &str, digest: &str, value: &str, ttl: Duration) {
        let Ok(client) = self.live() else {
            return;
        };
        let result: Result<(), _> = client
            .set(
                self.result_cache_key(tenant, digest),
                value,
                Some(Expiration::EX(ttl.as_secs().max(1) as i64)),
                None,
                false,
            )
            .await;
        if let Err(error) = result {
            tracing::debug!(%error, "result not cached");
        }
    }

    /// Tells every gateway pod that a tenant's upstreams changed.
    pub async fn announce_upstreams_changed(&self, tenant: &str) {
        let channel = self.key(&[UPSTREAMS_CHANGED_CHANNEL]);
        let Ok(client) = self.live() else {
            return;
        };
        if let Err(error) = client.publish::<(), _, _>(&channel, tenant).await {
            tracing::warn!(%error, "upstream change not announced; pods reload on their own");
        }
    }

    /// Subscribes to [`Cache::announce_upstreams_changed`]; yields tenant ids.
    pub async fn upstreams_changed_listener(&self) -> Result<WakeListener, CacheError> {
        self.listen(UPSTREAMS_CHANGED_CHANNEL).await
    }
}
