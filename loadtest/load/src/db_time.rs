//! Where a self-hosted stack's database time went: the store times every
//! statement by call site (`mneme_db_statement_seconds{statement="fragments:412"}`,
//! see `mneme_store::instrument`) in this process's registry, so the
//! difference between two snapshots is the database work of what ran in
//! between, statement by statement. Against a running stack the registry
//! here is empty and so is the breakdown (read that stack's `/metrics`).

use std::collections::HashMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

const FAMILY: &str = "mneme_db_statement_seconds";

/// Calls and seconds per statement site, at one moment.
#[derive(Debug, Clone, Default)]
pub struct Snapshot(HashMap<String, (u64, f64)>);

/// One statement site's share of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatementTime {
    /// `file:line` in `services/lib/store/src`, and `error` when it failed.
    pub statement: String,
    pub calls: u64,
    pub total_s: f64,
    pub mean_ms: f64,
}

impl Snapshot {
    pub fn take() -> Self {
        let mut sites = HashMap::new();
        for family in mneme_telemetry::metrics::registry().gather() {
            if family.name() != FAMILY {
                continue;
            }
            for metric in family.get_metric() {
                let label = |name: &str| mneme_telemetry::metrics::label(metric, name);
                let mut site = label("statement").to_owned();
                if label("outcome") != "ok" {
                    site.push_str(" error");
                }
                let histogram = metric.get_histogram();
                let entry = sites.entry(site).or_insert((0, 0.0));
                entry.0 += histogram.get_sample_count();
                entry.1 += histogram.get_sample_sum();
            }
        }
        Self(sites)
    }

    /// What ran since `earlier`, most total time first.
    pub fn since(&self, earlier: &Snapshot) -> Vec<StatementTime> {
        let mut rows: Vec<StatementTime> = self
            .0
            .iter()
            .filter_map(|(site, &(calls, seconds))| {
                let (calls_before, seconds_before) =
                    earlier.0.get(site).copied().unwrap_or_default();
                let calls = calls.checked_sub(calls_before).filter(|c| *c > 0)?;
                let total_s = (seconds - seconds_before).max(0.0);
                Some(StatementTime {
                    statement: site.clone(),
                    calls,
                    total_s,
                    mean_ms: total_s * 1000.0 / calls as f64,
                })
            })
            .collect();
        rows.sort_by(|a, b| b.total_s.total_cmp(&a.total_s));
        rows
    }
}

/// The first `limit` rows as a table, with each one's share of the total.
pub fn table(rows: &[StatementTime], limit: usize) -> String {
    let total: f64 = rows.iter().map(|r| r.total_s).sum();
    let mut out = String::new();
    if rows.is_empty() {
        return out;
    }
    let _ = writeln!(
        out,
        "database time by statement ({total:.1} s over {} sites; wall time, so waits count too)",
        rows.len()
    );
    let _ = writeln!(
        out,
        "  {:<28} {:>9} {:>9} {:>6} {:>9}",
        "statement", "calls", "total s", "share", "mean ms"
    );
    for row in rows.iter().take(limit) {
        let _ = writeln!(
            out,
            "  {:<28} {:>9} {:>9.2} {:>5.1}% {:>9.2}",
            row.statement,
            row.calls,
            row.total_s,
            100.0 * row.total_s / total.max(f64::MIN_POSITIVE),
            row.mean_ms
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_breakdown_is_the_difference_sorted_by_time() {
        let before = Snapshot(HashMap::from([
            ("fragments:60".to_owned(), (10, 1.0)),
            ("links:48".to_owned(), (5, 0.5)),
        ]));
        let after = Snapshot(HashMap::from([
            ("fragments:60".to_owned(), (30, 2.0)),
            ("links:48".to_owned(), (5, 0.5)),
            ("stats:12".to_owned(), (4, 4.0)),
        ]));
        let rows = after.since(&before);
        assert_eq!(
            rows,
            [
                StatementTime {
                    statement: "stats:12".into(),
                    calls: 4,
                    total_s: 4.0,
                    mean_ms: 1000.0
                },
                StatementTime {
                    statement: "fragments:60".into(),
                    calls: 20,
                    total_s: 1.0,
                    mean_ms: 50.0
                },
            ],
            "an unchanged site is left out"
        );
        let table = table(&rows, 1);
        assert!(table.contains("stats:12"), "{table}");
        assert!(table.contains("80.0%"), "{table}");
        assert!(!table.contains("fragments:60"), "{table}");
    }
}
