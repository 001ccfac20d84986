//! Cached `memory_stats` answers.
//!
//! A key's statistics aggregate over all its memories (a third of a second
//! on a 100,000-memory key), and agents and dashboards ask for them often.
//! An answer is cached per tenant and *view* (the key set and agent it was
//! computed for) for a short time, tagged with the tenant's *change number*.
//! Whatever changes a tenant's memories on request (the remember service,
//! the embedding worker) raises that number after committing, and an answer
//! is served only under the number it was computed under: a tenant sees its
//! own writes at once, and what changes on its own (searches counted, a
//! consolidation run, validity running out) shows within the cache's
//! lifetime.
//!
//! Ordering: the reader takes the change number *before* it queries
//! PostgreSQL and stores its answer under it. A write that commits while
//! the query runs raises the number after its commit, so an answer that may
//! have missed the write is never served after the raise.

use std::time::Duration;

use fred::prelude::*;

use crate::Cache;

/// How long a tenant's change number outlives its last raise. Far longer
/// than any answer is cached, so a number that expired and started again
/// from zero cannot match an answer stored under the old zero.
const CHANGE_NUMBER_LIFETIME: Duration = Duration::from_secs(7 * 24 * 3600);

/// What the cache holds for one view: the tenant's current change number,
/// and the answer stored under it, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedStats {
    pub change: i64,
    pub answer: Option<Vec<u8>>,
}

impl Cache {
    fn change_number_key(&self, tenant: &str) -> String {
        self.key(&["changes", tenant])
    }

    fn stats_key(&self, tenant: &str, view: &str) -> String {
        self.key(&["stats", tenant, view])
    }

    /// The tenant's change number and the answer cached for `view` under
    /// it, in one round trip. `None` when Redis cannot be used: the caller
    /// then computes the answer and does not store it.
    pub async fn cached_stats(&self, tenant: &str, view: &str) -> Option<CachedStats> {
        let client = self.live().ok()?;
        let keys = vec![self.change_number_key(tenant), self.stats_key(tenant, view)];
        let (change, stored): (Option<i64>, Option<Vec<u8>>) = client
            .mget(keys)
            .await
            .map_err(|error| tracing::debug!(%error, "stats cache read failed"))
            .ok()?;
        let change = change.unwrap_or(0);
        let answer = stored.and_then(|bytes| {
            let (number, answer) = bytes.split_first_chunk::<8>()?;
            (i64::from_le_bytes(*number) == change).then(|| answer.to_vec())
        });
        Some(CachedStats { change, answer })
    }

    /// Caches `answer` for `view`, computed under change number `change`,
    /// for `ttl` (best effort).
    pub async fn store_stats(
        &self,
        tenant: &str,
        view: &str,
        change: i64,
        answer: &[u8],
        ttl: Duration,
    ) {
        let Ok(client) = self.live() else {
            return;
        };
        let mut value = Vec::with_capacity(8 + answer.len());
        value.extend_from_slice(&change.to_le_bytes());
        value.extend_from_slice(answer);
        let expiry = Expiration::PX(ttl.as_millis().max(1) as i64);
        if let Err(error) = client
            .set::<(), _, _>(
                self.stats_key(tenant, view),
                value.as_slice(),
                Some(expiry),
                None,
                false,
            )
            .await
        {
            tracing::debug!(%error, "stats cache write failed");
        }
    }

    /// Raises the tenant's change number, so that no answer cached before
    /// is served again. Call it after a change has committed. Best effort:
    /// if Redis is unreachable, cached answers age out within their
    /// lifetime.
    pub async fn note_tenant_changed(&self, tenant: &str) {
        let Ok(client) = self.live() else {
            return;
        };
        let key = self.change_number_key(tenant);
        let pipeline = client.pipeline();
        let result: Result<Vec<Value>, _> = async {
            let _: () = pipeline.incr(&key).await?;
            let _: () = pipeline
                .expire(&key, CHANGE_NUMBER_LIFETIME.as_secs() as i64, None)
                .await?;
            pipeline.all().await
        }
        .await;
        if let Err(error) = result {
            tracing::debug!(%error, "change number not raised");
        }
    }
}
