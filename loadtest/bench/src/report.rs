//! Report pieces shared by both benchmarks: run settings, ingest figures,
//! and writing JSON.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;
use serde::Serialize;

use crate::harness::{Bench, Rejection};
use crate::metrics::LatencySummary;

/// How the stack was configured and queried.
#[derive(Debug, Clone, Serialize)]
pub struct RunSettings {
    /// `MNEME_EMBEDDER`.
    pub embedder: String,
    /// Model id stored with the vectors (e.g. `multilingual-e5-small-q4`).
    pub embedding_model: Option<String>,
    pub embedding_dimension: Option<i32>,
    /// Settings given on top of the stack's defaults (`MNEME_*`).
    pub extra_settings: BTreeMap<String, String>,
    /// `limit` of every measured `recall`.
    pub limit: u32,
    /// `tokenBudget` of every measured `recall`.
    pub token_budget: u32,
    /// How memories were split into tenants.
    pub tenants: String,
}

impl RunSettings {
    pub fn new(bench: &Bench, limit: u32, token_budget: u32, tenants: String) -> Self {
        Self {
            embedder: bench.embedder.clone(),
            embedding_model: None,
            embedding_dimension: None,
            extra_settings: bench.settings.iter().cloned().collect(),
            limit,
            token_budget,
            tenants,
        }
    }
}

/// The write path under a sequential single client.
#[derive(Debug, Clone, Serialize)]
pub struct IngestStats {
    /// `remember` calls made.
    pub remembers: usize,
    pub created: usize,
    /// Identical content already stored: the existing id came back.
    pub duplicates: usize,
    /// Memories mneme refused, with its explanation.
    pub rejected: Vec<Rejection>,
    /// Secrets or personal data replaced before storing (sum over memories).
    pub redactions: u64,
    pub seconds: f64,
    pub remembers_per_second: f64,
    pub remember_latency: LatencySummary,
    /// From the first `remember` until every fragment had its embedding.
    pub embeddings_complete_after_start_s: f64,
    /// From the last `remember` returning until every fragment had its
    /// embedding: how far the worker lagged behind the writer.
    pub embeddings_lag_after_ingest_s: f64,
}

/// Counts `remember` outcomes while ingesting.
#[derive(Debug, Default)]
pub(crate) struct IngestCounter {
    pub(crate) latencies_ms: Vec<f64>,
    pub(crate) created: usize,
    pub(crate) duplicates: usize,
    pub(crate) rejected: Vec<Rejection>,
    pub(crate) redactions: u64,
}

impl IngestCounter {
    pub(crate) fn finish(self, ingest: Duration, embedded: Duration) -> IngestStats {
        let remembers = self.latencies_ms.len();
        let seconds = ingest.as_secs_f64();
        IngestStats {
            remembers,
            created: self.created,
            duplicates: self.duplicates,
            rejected: self.rejected,
            redactions: self.redactions,
            seconds,
            remembers_per_second: if seconds > 0.0 {
                remembers as f64 / seconds
            } else {
                0.0
            },
            remember_latency: LatencySummary::of(&self.latencies_ms),
            embeddings_complete_after_start_s: embedded.as_secs_f64(),
            embeddings_lag_after_ingest_s: embedded.saturating_sub(ingest).as_secs_f64(),
        }
    }
}

/// One line of the human-readable ingest summary.
pub fn ingest_line(stats: &IngestStats) -> String {
    format!(
        "ingest: {} remembers in {:.1} s = {:.1}/s (p50 {:.1} ms, p95 {:.1} ms); \
         {} created, {} duplicates, {} rejected, {} redactions\n\
         embeddings: all present {:.1} s after the first remember, {:.1} s after the last",
        stats.remembers,
        stats.seconds,
        stats.remembers_per_second,
        stats.remember_latency.p50_ms,
        stats.remember_latency.p95_ms,
        stats.created,
        stats.duplicates,
        stats.rejected.len(),
        stats.redactions,
        stats.embeddings_complete_after_start_s,
        stats.embeddings_lag_after_ingest_s,
    )
}

/// One line of the human-readable latency summary.
pub fn latency_line(what: &str, latency: &LatencySummary) -> String {
    format!(
        "{what}: {} sequential calls, p50 {:.1} ms, p95 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        latency.count, latency.p50_ms, latency.p95_ms, latency.p99_ms, latency.max_ms
    )
}

/// Writes `value` as pretty JSON.
pub fn write_json<T: Serialize>(path: &Path, value: &T) -> anyhow::Result<()> {
    let json = serde_json::to_string_pretty(value).context("serialising the report")?;
    std::fs::write(path, json + "\n").with_context(|| format!("writing {}", path.display()))
}
