//! The report of a run: a table on stdout and the same figures as JSON.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use mneme_bench::harness::Environment;
use serde::Serialize;

use crate::db_time::StatementTime;
use crate::run::{Load, Measured, Plan};
use crate::stats::OperationSummary;

/// Where the load went.
#[derive(Debug, Clone, Serialize)]
pub struct TargetInfo {
    pub url: String,
    /// An in-process stack on a fresh database (`--self-hosted`).
    pub self_hosted: bool,
    /// `MNEME_EMBEDDER` of a self-hosted stack.
    pub embedder: Option<String>,
    /// Settings of a self-hosted stack on top of its defaults.
    pub settings: BTreeMap<String, String>,
    pub keys: usize,
    /// `session` (initialize, MCP-Session-Id) or `stateless` (2026-07-28).
    pub lifecycle: &'static str,
}

/// How the load was shaped.
#[derive(Debug, Clone, Serialize)]
pub struct LoadInfo {
    /// `open` (fixed schedule) or `closed` (N outstanding).
    pub mode: &'static str,
    pub rate: Option<f64>,
    pub max_in_flight: Option<usize>,
    pub concurrency: Option<usize>,
    pub clients: usize,
    pub timeout_s: f64,
}

impl LoadInfo {
    pub fn of(plan: &Plan) -> Self {
        let (mode, rate, max_in_flight, concurrency) = match plan.load {
            Load::Open {
                rate,
                max_in_flight,
            } => ("open", Some(rate), Some(max_in_flight), None),
            Load::Closed { concurrency } => ("closed", None, None, Some(concurrency)),
        };
        Self {
            mode,
            rate,
            max_in_flight,
            concurrency,
            clients: plan.clients,
            timeout_s: plan.timeout.as_secs_f64(),
        }
    }
}

/// Everything a run reports (`--json`).
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    pub tool: &'static str,
    pub scenario: &'static str,
    /// `mixed`: RECALL:REMEMBER.
    pub mix: Option<String>,
    /// `surfacing`: the proxied tool.
    pub proxied_tool: Option<String>,
    pub seed: u64,
    pub environment: Environment,
    pub target: TargetInfo,
    pub load: LoadInfo,
    pub warmup_s: f64,
    /// The measured window; throughput is per second of it.
    pub duration_s: f64,
    /// Requests started during the warm-up, left out of every figure below.
    pub warmup_requests: u64,
    pub warmup_errors: u64,
    pub total: OperationSummary,
    pub operations: BTreeMap<String, OperationSummary>,
    /// Self-hosted: the database time of the run (warm-up included) by
    /// statement.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub database: Vec<StatementTime>,
}

impl RunReport {
    /// Summarises `measured`; `surfacing` adds the count of answers that
    /// carried memories.
    pub fn new(measured: &Measured, plan: &Plan, surfacing: bool, header: ReportHeader) -> Self {
        let seconds = plan.duration.as_secs_f64();
        Self {
            tool: "mneme-loadtest",
            scenario: header.scenario,
            mix: header.mix,
            proxied_tool: header.proxied_tool,
            seed: header.seed,
            environment: Environment::capture(),
            target: header.target,
            load: LoadInfo::of(plan),
            warmup_s: plan.warmup.as_secs_f64(),
            duration_s: seconds,
            warmup_requests: measured.warmup_requests,
            warmup_errors: measured.warmup_errors,
            total: measured.total().summary(seconds, surfacing),
            operations: measured
                .operations
                .iter()
                .map(|(name, stats)| ((*name).to_owned(), stats.summary(seconds, surfacing)))
                .collect(),
            database: Vec::new(),
        }
    }
}

/// The parts of a report that the run itself does not know.
#[derive(Debug, Clone)]
pub struct ReportHeader {
    pub scenario: &'static str,
    pub mix: Option<String>,
    pub proxied_tool: Option<String>,
    pub seed: u64,
    pub target: TargetInfo,
}

/// The report for humans.
pub fn table(report: &RunReport) -> String {
    let mut out = String::new();
    let load = match (report.load.rate, report.load.concurrency) {
        (Some(rate), _) => format!(
            "open loop at {rate} req/s (at most {} in flight)",
            report.load.max_in_flight.unwrap_or(0)
        ),
        (_, Some(concurrency)) => format!("closed loop, concurrency {concurrency}"),
        _ => String::new(),
    };
    let _ = writeln!(
        out,
        "mneme-loadtest {}{} against {}{}",
        report.scenario,
        report
            .mix
            .as_ref()
            .map(|mix| format!(" (recall:remember {mix})"))
            .unwrap_or_default(),
        report.target.url,
        if report.target.self_hosted {
            format!(
                " (self-hosted, embedder {})",
                report.target.embedder.as_deref().unwrap_or("?")
            )
        } else {
            String::new()
        }
    );
    let _ = writeln!(
        out,
        "{load}, {} clients over {} keys ({} MCP), {:.1} s measured after {:.1} s warm-up \
         ({} warm-up requests left out)",
        report.load.clients,
        report.target.keys,
        report.target.lifecycle,
        report.duration_s,
        report.warmup_s,
        report.warmup_requests,
    );
    let _ = writeln!(
        out,
        "\n{:<22} {:>9} {:>9} {:>7} {:>9} {:>8} {:>8} {:>8} {:>8} {:>8}",
        "operation",
        "requests",
        "ok",
        "errors",
        "req/s",
        "p50 ms",
        "p90 ms",
        "p95 ms",
        "p99 ms",
        "max ms"
    );
    let mut rows: Vec<(&str, &OperationSummary)> = report
        .operations
        .iter()
        .map(|(name, summary)| (name.as_str(), summary))
        .collect();
    if report.operations.len() > 1 {
        rows.push(("total", &report.total));
    }
    for (name, s) in rows {
        let l = &s.latency_ms;
        let _ = writeln!(
            out,
            "{name:<22} {:>9} {:>9} {:>7} {:>9.1} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>8.2}",
            s.requests, s.ok, s.errors, s.throughput_rps, l.p50, l.p90, l.p95, l.p99, l.max
        );
    }
    if let Some(surfaced) = report.total.surfaced {
        let share = surfaced as f64 * 100.0 / report.total.ok.max(1) as f64;
        let _ = writeln!(
            out,
            "\nsurfaced memories on {surfaced} of {} answers ({share:.0} %)",
            report.total.ok
        );
    }
    if report.total.errors > 0 {
        let _ = writeln!(out, "\nerrors by kind:");
        for (kind, count) in &report.total.errors_by_kind {
            let example = report
                .total
                .error_examples
                .get(kind)
                .map(String::as_str)
                .unwrap_or_default();
            let _ = writeln!(out, "  {kind:<24} {count:>8}  e.g. {example}");
        }
    } else {
        let _ = writeln!(out, "\nno errors");
    }
    out
}
