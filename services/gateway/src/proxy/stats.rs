//! Per upstream and tool figures of this pod, shown by `/v1/upstreams`.
//!
//! Prometheus labels stay bounded (no tenant or upstream names, see
//! `crate::metrics`), so what one upstream's tools did lives here instead:
//! in memory, per (tenant, upstream), since the pod started or the
//! upstream was last used after an idle eviction.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use uuid::Uuid;

/// How a proxied call ended, for the figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    /// Answered by the upstream.
    Ok,
    /// Answered from the result cache.
    Cached,
    /// The upstream answered with `isError`.
    ToolError,
    /// No answer: timeout, unreachable, breaker open, refused, too large.
    Failed,
}

/// One tool's figures.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ToolStats {
    pub(crate) calls: u64,
    pub(crate) cached: u64,
    pub(crate) tool_errors: u64,
    pub(crate) failures: u64,
    /// Text characters from the upstream, and to the client before
    /// surfacing (their ratio is the compression).
    pub(crate) chars_in: u64,
    pub(crate) chars_out: u64,
    pub(crate) mean_ms: f64,
    pub(crate) max_ms: f64,
}

type Figures = Arc<Mutex<BTreeMap<String, ToolStats>>>;

/// See the module documentation.
pub(crate) struct Stats {
    by_upstream: moka::sync::Cache<(Uuid, Uuid), Figures>,
}

impl Stats {
    pub(crate) fn new(idle: Duration) -> Self {
        Self {
            by_upstream: moka::sync::Cache::builder()
                .max_capacity(100_000)
                .time_to_idle(idle.max(Duration::from_secs(3600)))
                .build(),
        }
    }

    pub(crate) fn record(
        &self,
        (tenant, upstream): (Uuid, Uuid),
        tool: &str,
        ended: Ended,
        (chars_in, chars_out): (u64, u64),
        elapsed: Duration,
    ) {
        let figures = self
            .by_upstream
            .get_with((tenant, upstream), Figures::default);
        let mut figures = figures.lock().expect("stats lock");
        let stats = figures.entry(tool.to_owned()).or_default();
        let ms = elapsed.as_secs_f64() * 1000.0;
        stats.mean_ms = (stats.mean_ms * stats.calls as f64 + ms) / (stats.calls + 1) as f64;
        stats.max_ms = stats.max_ms.max(ms);
        stats.calls += 1;
        match ended {
            Ended::Ok => {}
            Ended::Cached => stats.cached += 1,
            Ended::ToolError => stats.tool_errors += 1,
            Ended::Failed => stats.failures += 1,
        }
        stats.chars_in += chars_in;
        stats.chars_out += chars_out;
    }

    /// The figures of one upstream's tools on this pod.
    pub(crate) fn of(&self, tenant: Uuid, upstream: Uuid) -> BTreeMap<String, ToolStats> {
        self.by_upstream
            .get(&(tenant, upstream))
            .map(|figures| figures.lock().expect("stats lock").clone())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_add_up_per_tool() {
        let stats = Stats::new(Duration::from_secs(60));
        let key = (Uuid::nil(), Uuid::max());
        stats.record(
            key,
            "read",
            Ended::Ok,
            (1000, 400),
            Duration::from_millis(10),
        );
        stats.record(
            key,
            "read",
            Ended::Cached,
            (0, 400),
            Duration::from_millis(2),
        );
        stats.record(
            key,
            "write",
            Ended::Failed,
            (0, 0),
            Duration::from_millis(30),
        );
        let figures = stats.of(key.0, key.1);
        let read = &figures["read"];
        assert_eq!((read.calls, read.cached, read.failures), (2, 1, 0));
        assert_eq!((read.chars_in, read.chars_out), (1000, 800));
        assert!((read.mean_ms - 6.0).abs() < 1e-9);
        assert_eq!(read.max_ms, 10.0);
        assert_eq!(figures["write"].failures, 1);
        assert!(stats.of(Uuid::max(), key.1).is_empty(), "per tenant");
    }
}
