//! Active surfacing's shared state, keyed by tenant, key, agent, server and
//! tool so no tenant's or agent's surfacing affects another's:
//!
//! - the per-tenant rate window (a fixed-window bucket of [`crate::rate_limit`]);
//! - the cooldown list of recently surfaced queries per (tenant, key,
//!   agent, server, tool);
//! - the memories already surfaced per (tenant, key, agent), a sorted set
//!   scored by time so one key expires old entries one by one;
//! - memories rated negative per (tenant, key, server, tool): invalidated
//!   for that tool at once, before demotion needs more ratings.
//!
//! Every read fails open (an outage loses dedup and cooldown, never the
//! tool result): callers get "nothing recorded".

use std::collections::HashSet;
use std::time::Duration;

use fred::prelude::*;

use crate::Cache;
use crate::rate_limit::Bucket;

/// Recent queries kept per cooldown list.
const COOLDOWN_ENTRIES: i64 = 50;
/// The rate window.
const RATE_WINDOW: Duration = Duration::from_secs(60);

/// Who and where a surfacing happens.
#[derive(Debug, Clone, Copy)]
pub struct SurfacingScope<'a> {
    pub tenant: &'a str,
    pub key: &'a str,
    pub agent: &'a str,
    pub server: &'a str,
    pub tool: &'a str,
}

/// Milliseconds since the Unix epoch: the clock of the cooldown entries
/// (shared by all pods, unlike a monotonic clock).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl Cache {
    fn surfacing_rate_bucket(&self, tenant: &str, limit: u32) -> Bucket {
        let window = now_ms() / RATE_WINDOW.as_millis() as u64;
        Bucket {
            key: self.rate_limit_key(&format!("surf:{tenant}"), &[&window.to_string()]),
            limit,
            ttl: RATE_WINDOW * 2,
        }
    }

    /// Takes one of the tenant's surfacing slots of this minute; false when
    /// none is left. Without Redis every call is admitted.
    pub async fn take_surfacing_slot(&self, tenant: &str, per_minute: u32) -> bool {
        let bucket = self.surfacing_rate_bucket(tenant, per_minute);
        match self.admit(std::slice::from_ref(&bucket)).await {
            Ok(admission) => admission.allowed,
            Err(error) => {
                tracing::debug!(%error, "surfacing rate check failed; admitting");
                true
            }
        }
    }

    /// Gives a slot back when no lookup was made after all.
    pub async fn return_surfacing_slot(&self, tenant: &str, per_minute: u32) {
        let bucket = self.surfacing_rate_bucket(tenant, per_minute);
        let Ok(client) = self.live() else {
            return;
        };
        let result: Result<i64, _> = client.decr(&bucket.key).await;
        if let Err(error) = result {
            tracing::debug!(%error, "surfacing slot return failed");
        }
    }

    fn cooldown_key(&self, scope: &SurfacingScope<'_>) -> String {
        self.key(&[
            "surf",
            "cool",
            scope.tenant,
            scope.key,
            scope.agent,
            scope.server,
            scope.tool,
        ])
    }

    /// Queries surfaced recently in `scope`, as (surfaced at ms, query).
    pub async fn recent_surfacing_queries(&self, scope: &SurfacingScope<'_>) -> Vec<(u64, String)> {
        let Ok(client) = self.live() else {
            return Vec::new();
        };
        let raw: Vec<String> = client
            .lrange(self.cooldown_key(scope), 0, COOLDOWN_ENTRIES - 1)
            .await
            .unwrap_or_else(|error| {
                tracing::debug!(%error, "cooldown read failed");
                Vec::new()
            });
        raw.into_iter()
            .filter_map(|entry| {
                let (at, query) = entry.split_once('|')?;
                Some((at.parse().ok()?, query.to_owned()))
            })
            .collect()
    }

    fn seen_surfaced_key(&self, scope: &SurfacingScope<'_>) -> String {
        self.key(&["surf", "seen", scope.tenant, scope.key, scope.agent])
    }

    fn invalidated_key(&self, scope: &SurfacingScope<'_>) -> String {
        self.key(&[
            "surf",
            "inval",
            scope.tenant,
            scope.key,
            scope.server,
            scope.tool,
        ])
    }

    /// Of `ids`, those surfaced in `scope` (tenant, key, agent) within `ttl`.
    pub async fn already_surfaced(
        &self,
        scope: &SurfacingScope<'_>,
        ids: &[String],
        ttl: Duration,
    ) -> HashSet<String> {
        if ids.is_empty() || ttl.is_zero() {
            return HashSet::new();
        }
        let cutoff = now_ms().saturating_sub(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX));
        let Ok(client) = self.live() else {
            return HashSet::new();
        };
        let scores: Result<Vec<Option<f64>>, _> = client
            .zmscore(self.seen_surfaced_key(scope), ids.to_vec())
            .await;
        match scores {
            Ok(scores) => ids
                .iter()
                .zip(scores)
                .filter(|(_, score)| score.is_some_and(|at| at >= cutoff as f64))
                .map(|(id, _)| id.clone())
                .collect(),
            Err(error) => {
                tracing::debug!(%error, "surfaced-ids read failed");
                HashSet::new()
            }
        }
    }

    /// Memories rated negative for this key and tool.
    pub async fn invalidated_memories(&self, scope: &SurfacingScope<'_>) -> HashSet<String> {
        let Ok(client) = self.live() else {
            return HashSet::new();
        };
        client
            .smembers(self.invalidated_key(scope))
            .await
            .unwrap_or_else(|error| {
                tracing::debug!(%error, "invalidated-ids read failed");
                HashSet::new()
            })
    }

    /// Records a delivered surfacing: its memories (dedup) and its query
    /// (cooldown). Best effort.
    pub async fn record_surfacing(
        &self,
        scope: &SurfacingScope<'_>,
        query: &str,
        delivered: &[String],
        dedup_ttl: Duration,
        cooldown: Duration,
    ) {
        let now = now_ms();
        let Ok(client) = self.live() else {
            return;
        };
        let pipeline = client.pipeline();
        let result: Result<Vec<Value>, _> = async {
            if !delivered.is_empty() && !dedup_ttl.is_zero() {
                let key = self.seen_surfaced_key(scope);
                let cutoff = now.saturating_sub(dedup_ttl.as_millis() as u64);
                let members: Vec<(f64, String)> = delivered
                    .iter()
                    .map(|id| (now as f64, id.clone()))
                    .collect();
                let _: () = pipeline
                    .zadd(&key, None, None, false, false, members)
                    .await?;
                let _: () = pipeline
                    .zremrangebyscore(&key, f64::NEG_INFINITY, cutoff as f64)
                    .await?;
                let _: () = pipeline
                    .pexpire(&key, dedup_ttl.as_millis() as i64, None)
                    .await?;
            }
            if !cooldown.is_zero() {
                let key = self.cooldown_key(scope);
                let _: () = pipeline.lpush(&key, format!("{now}|{query}")).await?;
                let _: () = pipeline.ltrim(&key, 0, COOLDOWN_ENTRIES - 1).await?;
                let _: () = pipeline
                    .pexpire(&key, cooldown.as_millis().max(1) as i64, None)
                    .await?;
            }
            pipeline.all().await
        }
        .await;
        if let Err(error) = result {
            tracing::debug!(%error, "surfacing record failed");
        }
    }

    /// Invalidates memories for this key and tool (negative ratings).
    pub async fn invalidate_memories(
        &self,
        scope: &SurfacingScope<'_>,
        ids: &[String],
        ttl: Duration,
    ) {
        if ids.is_empty() {
            return;
        }
        self.add_to_set(
            &self.invalidated_key(scope),
            ids,
            ttl,
            "invalidated memories",
        )
        .await;
    }
}
