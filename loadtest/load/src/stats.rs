//! What a run measured, per operation: an HDR histogram of the latencies
//! of successful requests, failures by kind, and the summary the report
//! prints (throughput, p50/p90/p95/p99/max).

use std::collections::BTreeMap;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::mcp::{Failure, FailureCounts};

/// Three significant digits: every recorded latency is kept within 0.1 %,
/// whatever its size.
const SIGNIFICANT_DIGITS: u8 = 3;

/// The longest latency told apart from longer ones: an hour, in
/// microseconds (far beyond any `--timeout`). A fixed range keeps
/// recording free of resizing; longer values are recorded as an hour.
const HIGHEST_MICROS: u64 = 3_600_000_000;

/// Latencies and failures of one operation (`recall`, `remember`, …).
#[derive(Debug, Clone)]
pub struct OperationStats {
    /// Successful requests, in microseconds.
    latency_us: Histogram<u64>,
    failures: FailureCounts,
    /// Successful requests whose answer carried surfaced memories.
    surfaced: u64,
}

impl Default for OperationStats {
    fn default() -> Self {
        Self::new()
    }
}

impl OperationStats {
    pub fn new() -> Self {
        Self {
            latency_us: Histogram::new_with_bounds(1, HIGHEST_MICROS, SIGNIFICANT_DIGITS)
                .expect("valid histogram bounds"),
            failures: FailureCounts::default(),
            surfaced: 0,
        }
    }

    pub fn record_ok(&mut self, latency: Duration, surfaced: bool) {
        let micros = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        self.latency_us.saturating_record(micros);
        self.surfaced += u64::from(surfaced);
    }

    pub fn record_failure(&mut self, failure: &Failure) {
        self.failures.add(failure);
    }

    pub fn merge(&mut self, other: &Self) {
        self.latency_us
            .add(&other.latency_us)
            .expect("histograms of the same bounds add up");
        self.failures.merge(&other.failures);
        self.surfaced += other.surfaced;
    }

    pub fn ok(&self) -> u64 {
        self.latency_us.len()
    }

    pub fn failed(&self) -> u64 {
        self.failures.total()
    }

    /// The figures over a measured window of `seconds`.
    pub fn summary(&self, seconds: f64, count_surfaced: bool) -> OperationSummary {
        let ok = self.ok();
        let errors = self.failed();
        let per_second = |n: u64| {
            if seconds > 0.0 {
                n as f64 / seconds
            } else {
                0.0
            }
        };
        OperationSummary {
            requests: ok + errors,
            ok,
            errors,
            throughput_rps: per_second(ok + errors),
            ok_rps: per_second(ok),
            latency_ms: LatencySummary::of(&self.latency_us),
            errors_by_kind: self
                .failures
                .counts
                .iter()
                .map(|(kind, count)| (kind.to_string(), *count))
                .collect(),
            error_examples: self
                .failures
                .examples
                .iter()
                .map(|(kind, message)| (kind.to_string(), truncate(message, 300)))
                .collect(),
            surfaced: count_surfaced.then_some(self.surfaced),
        }
    }
}

fn truncate(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

/// One operation's figures, as written to the JSON report.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OperationSummary {
    /// Requests sent in the measured window (after the warm-up), answered
    /// or not.
    pub requests: u64,
    pub ok: u64,
    pub errors: u64,
    /// `requests` per second of the measured window.
    pub throughput_rps: f64,
    /// `ok` per second of the measured window.
    pub ok_rps: f64,
    /// Latencies of the successful requests.
    pub latency_ms: LatencySummary,
    /// Failures by kind: `http_<status>`, `jsonrpc_<code>`,
    /// `tool_<code>`, `timeout`, `transport`, `unexpected_result`,
    /// `not_sent`.
    pub errors_by_kind: BTreeMap<String, u64>,
    /// The first message of each kind of failure.
    pub error_examples: BTreeMap<String, String>,
    /// `surfacing` only: successful answers that carried surfaced memories.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub surfaced: Option<u64>,
}

/// Latency percentiles in milliseconds. A percentile is the smallest
/// recorded value that at least that share of requests did not exceed
/// (nearest rank, within the histogram's 0.1 %).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencySummary {
    pub count: u64,
    pub min: f64,
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p95: f64,
    pub p99: f64,
    pub max: f64,
}

impl LatencySummary {
    fn of(histogram: &Histogram<u64>) -> Self {
        if histogram.is_empty() {
            return Self::default();
        }
        let ms = |micros: u64| micros as f64 / 1000.0;
        let at = |quantile: f64| ms(histogram.value_at_quantile(quantile));
        Self {
            count: histogram.len(),
            min: ms(histogram.min()),
            mean: histogram.mean() / 1000.0,
            p50: at(0.50),
            p90: at(0.90),
            p95: at(0.95),
            p99: at(0.99),
            max: ms(histogram.max()),
        }
    }

    /// p50 ≤ p90 ≤ p95 ≤ p99 ≤ max, and min ≤ p50.
    pub fn is_monotone(&self) -> bool {
        self.min <= self.p50
            && self.p50 <= self.p90
            && self.p90 <= self.p95
            && self.p95 <= self.p99
            && self.p99 <= self.max
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::ErrorKind;

    fn close_to(actual: f64, expected: f64) -> bool {
        // Within the histogram's precision (0.1 %) plus rounding.
        (actual - expected).abs() <= expected * 0.002 + 0.001
    }

    fn stats_of(latencies_ms: impl IntoIterator<Item = u64>) -> OperationStats {
        let mut stats = OperationStats::new();
        for ms in latencies_ms {
            stats.record_ok(Duration::from_millis(ms), false);
        }
        stats
    }

    #[test]
    fn percentiles_of_one_to_a_hundred_ms() {
        let latency = stats_of(1..=100).summary(10.0, false).latency_ms;
        assert_eq!(latency.count, 100);
        for (actual, expected) in [
            (latency.min, 1.0),
            (latency.p50, 50.0),
            (latency.p90, 90.0),
            (latency.p95, 95.0),
            (latency.p99, 99.0),
            (latency.max, 100.0),
            (latency.mean, 50.5),
        ] {
            assert!(
                close_to(actual, expected),
                "{actual} vs {expected}: {latency:?}"
            );
        }
        assert!(latency.is_monotone());
    }

    #[test]
    fn a_slow_tail_shows_in_p99_and_max_only() {
        // 990 fast calls and 10 stalls of two seconds.
        let latency = stats_of((0..990).map(|_| 4).chain((0..10).map(|_| 2000)))
            .summary(1.0, false)
            .latency_ms;
        assert!(close_to(latency.p50, 4.0), "{latency:?}");
        assert!(close_to(latency.p95, 4.0), "{latency:?}");
        assert!(close_to(latency.p99, 4.0), "{latency:?}");
        assert!(close_to(latency.max, 2000.0), "{latency:?}");
        let heavier = stats_of((0..980).map(|_| 4).chain((0..20).map(|_| 2000)))
            .summary(1.0, false)
            .latency_ms;
        assert!(close_to(heavier.p99, 2000.0), "{heavier:?}");
    }

    #[test]
    fn throughput_counts_failures_and_successes_over_the_window() {
        let mut stats = stats_of(1..=40);
        for _ in 0..10 {
            stats.record_failure(&Failure::new(ErrorKind::Http(429), "slow down"));
        }
        let summary = stats.summary(5.0, false);
        assert_eq!((summary.requests, summary.ok, summary.errors), (50, 40, 10));
        assert!(close_to(summary.throughput_rps, 10.0));
        assert!(close_to(summary.ok_rps, 8.0));
        assert_eq!(summary.errors_by_kind["http_429"], 10);
        assert_eq!(summary.error_examples["http_429"], "slow down");
        assert_eq!(summary.surfaced, None);
    }

    #[test]
    fn merged_stats_equal_one_recording_of_everything() {
        let mut merged = stats_of(1..=50);
        merged.merge(&stats_of(51..=100));
        assert_eq!(
            merged.summary(1.0, false).latency_ms,
            stats_of(1..=100).summary(1.0, false).latency_ms
        );
    }

    #[test]
    fn no_requests_give_zeros_not_a_panic() {
        let summary = OperationStats::new().summary(0.0, true);
        assert_eq!(summary.requests, 0);
        assert_eq!(summary.throughput_rps, 0.0);
        assert_eq!(summary.latency_ms, LatencySummary::default());
        assert_eq!(summary.surfaced, Some(0));
    }

    #[test]
    fn sub_millisecond_latencies_keep_their_microseconds() {
        let mut stats = OperationStats::new();
        stats.record_ok(Duration::from_micros(250), true);
        let summary = stats.summary(1.0, true);
        assert!(close_to(summary.latency_ms.p50, 0.25), "{summary:?}");
        assert_eq!(summary.surfaced, Some(1));
    }
}
