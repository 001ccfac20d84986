//! Retrieval metrics for one query's ranking, and latency summaries.
//!
//! The ranking metrics follow memtomem's definitions
//! (`memtomem/memtomem: packages/memtomem/src/memtomem/quality/metrics.py`,
//! re-exported as `packages/memtomem/tests/ir_metrics.py` and used by
//! `tools/retrieval-eval/calibrate_portfolio.py`), so figures are comparable
//! with the ones memtomem publishes:
//!
//! - every distinct id is credited at most once within the top `k`, so a
//!   ranking that repeats an id can never score above 1;
//! - a query with nothing relevant scores 0 (not "undefined"), so averaging
//!   over queries is not biased by empty judgements;
//! - Recall@k divides by *all* relevant items, not by `min(k, relevant)`.
//!
//! `retrieved` is always the ranking from rank 1 downward.

use std::collections::{HashMap, HashSet};
use std::hash::Hash;

use serde::Serialize;

/// Fraction of the relevant items found in the top `k`.
pub fn recall_at_k<T: Eq + Hash>(retrieved: &[T], relevant: &HashSet<T>, k: usize) -> f64 {
    if k == 0 || relevant.is_empty() {
        return 0.0;
    }
    let found: HashSet<&T> = retrieved
        .iter()
        .take(k)
        .filter(|id| relevant.contains(id))
        .collect();
    found.len() as f64 / relevant.len() as f64
}

/// `1 / rank` of the first relevant item within the top `k`, else 0. MRR is
/// the mean of this over queries.
pub fn reciprocal_rank_at_k<T: Eq + Hash>(retrieved: &[T], relevant: &HashSet<T>, k: usize) -> f64 {
    retrieved
        .iter()
        .take(k)
        .position(|id| relevant.contains(id))
        .map_or(0.0, |index| 1.0 / (index + 1) as f64)
}

/// Normalised DCG with gain `rel / log2(rank + 1)`; ids missing from
/// `relevance` gain 0. The ideal ranking takes the `k` largest positive
/// gains. 0 when nothing has a positive gain.
pub fn ndcg_at_k<T: Eq + Hash>(retrieved: &[T], relevance: &HashMap<T, f64>, k: usize) -> f64 {
    if k == 0 {
        return 0.0;
    }
    let mut seen: HashSet<&T> = HashSet::new();
    let mut dcg = 0.0;
    for (index, id) in retrieved.iter().take(k).enumerate() {
        if !seen.insert(id) {
            continue;
        }
        let gain = relevance.get(id).copied().unwrap_or(0.0);
        if gain > 0.0 {
            dcg += gain / discount(index + 1);
        }
    }
    let mut ideal: Vec<f64> = relevance.values().copied().filter(|g| *g > 0.0).collect();
    ideal.sort_by(|a, b| b.total_cmp(a));
    let idcg: f64 = ideal
        .iter()
        .take(k)
        .enumerate()
        .map(|(index, gain)| gain / discount(index + 1))
        .sum();
    if idcg > 0.0 { dcg / idcg } else { 0.0 }
}

fn discount(rank: usize) -> f64 {
    ((rank + 1) as f64).log2()
}

/// 1 when any evidence item is in the top `k` (LoCoMo / LongMemEval
/// `recall_any@k`); 0 for empty evidence.
pub fn recall_any_at_k<T: Eq + Hash>(retrieved: &[T], evidence: &HashSet<T>, k: usize) -> f64 {
    let hit = retrieved.iter().take(k).any(|id| evidence.contains(id));
    if hit && !evidence.is_empty() {
        1.0
    } else {
        0.0
    }
}

/// 1 when every evidence item is in the top `k` (`recall_all@k`); 0 for
/// empty evidence, like [`recall_at_k`].
pub fn recall_all_at_k<T: Eq + Hash>(retrieved: &[T], evidence: &HashSet<T>, k: usize) -> f64 {
    if evidence.is_empty() {
        return 0.0;
    }
    let top: HashSet<&T> = retrieved.iter().take(k).collect();
    if evidence.iter().all(|id| top.contains(id)) {
        1.0
    } else {
        0.0
    }
}

/// Arithmetic mean; 0 for no values.
pub fn mean(values: &[f64]) -> f64 {
    if values.is_empty() {
        0.0
    } else {
        values.iter().sum::<f64>() / values.len() as f64
    }
}

/// Nearest-rank percentile (`p` in 0..=100): the smallest sample with at
/// least `p`% of the samples at or below it. Always an observed value, so a
/// p99 over 100 samples is the second-largest, not an interpolation.
pub fn percentile(values: &[f64], p: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Client-observed latencies of one request kind, in milliseconds.
#[derive(Debug, Clone, Serialize)]
pub struct LatencySummary {
    pub count: usize,
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

impl LatencySummary {
    pub fn of(samples_ms: &[f64]) -> Self {
        Self {
            count: samples_ms.len(),
            mean_ms: mean(samples_ms),
            p50_ms: percentile(samples_ms, 50.0),
            p95_ms: percentile(samples_ms, 95.0),
            p99_ms: percentile(samples_ms, 99.0),
            max_ms: samples_ms.iter().copied().fold(0.0, f64::max),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(list: &[&'static str]) -> Vec<&'static str> {
        list.to_vec()
    }

    fn set(list: &[&'static str]) -> HashSet<&'static str> {
        list.iter().copied().collect()
    }

    fn grades(list: &[(&'static str, f64)]) -> HashMap<&'static str, f64> {
        list.iter().copied().collect()
    }

    fn close(actual: f64, expected: f64) {
        assert!(
            (actual - expected).abs() < 1e-9,
            "expected {expected}, got {actual}"
        );
    }

    #[test]
    fn recall_counts_relevant_items_in_the_top_k_over_all_relevant_items() {
        let retrieved = ids(&["a", "x", "b", "y", "c"]);
        let relevant = set(&["a", "b", "c", "d"]);
        close(recall_at_k(&retrieved, &relevant, 3), 2.0 / 4.0);
        close(recall_at_k(&retrieved, &relevant, 5), 3.0 / 4.0);
        // More relevant items than k: the denominator stays 4, so 1.0 is unreachable.
        close(recall_at_k(&retrieved, &relevant, 1), 1.0 / 4.0);
    }

    #[test]
    fn recall_is_zero_without_relevant_items_or_results_or_k() {
        close(recall_at_k(&ids(&["a", "b"]), &set(&[]), 10), 0.0);
        close(recall_at_k::<&str>(&[], &set(&["a"]), 10), 0.0);
        close(recall_at_k(&ids(&["a"]), &set(&["a"]), 0), 0.0);
        close(recall_at_k(&ids(&["x", "y"]), &set(&["a"]), 10), 0.0);
    }

    #[test]
    fn recall_credits_a_duplicated_id_once() {
        let retrieved = ids(&["a", "a", "a"]);
        close(recall_at_k(&retrieved, &set(&["a", "b"]), 10), 0.5);
    }

    #[test]
    fn reciprocal_rank_is_one_over_the_first_relevant_rank_within_k() {
        let retrieved = ids(&["x", "y", "b", "a"]);
        let relevant = set(&["a", "b"]);
        close(reciprocal_rank_at_k(&retrieved, &relevant, 10), 1.0 / 3.0);
        close(reciprocal_rank_at_k(&retrieved, &relevant, 2), 0.0);
        close(reciprocal_rank_at_k(&retrieved, &set(&[]), 10), 0.0);
        close(reciprocal_rank_at_k(&retrieved, &relevant, 0), 0.0);
        // A duplicate before the hit still occupies a rank.
        close(
            reciprocal_rank_at_k(&ids(&["x", "x", "a"]), &relevant, 10),
            1.0 / 3.0,
        );
    }

    #[test]
    fn ndcg_uses_graded_gains_and_the_ideal_order() {
        // Ranking: rank1 secondary (0.5), rank2 nothing, rank3 primary (1.0).
        // DCG = 0.5/log2(2) + 1/log2(4) = 0.5 + 0.5 = 1.0
        // Ideal: 1.0, 1.0 (second primary unseen), 0.5
        //   = 1 + 1/log2(3) + 0.5/log2(4) = 1 + 0.6309297535714575 + 0.25
        let retrieved = ids(&["s", "x", "p1"]);
        let relevance = grades(&[("p1", 1.0), ("p2", 1.0), ("s", 0.5)]);
        let ideal = 1.0 + 1.0 / 3f64.log2() + 0.25;
        close(ndcg_at_k(&retrieved, &relevance, 10), 1.0 / ideal);
    }

    #[test]
    fn ndcg_is_one_for_the_ideal_ranking_and_bounded_with_duplicates() {
        let relevance = grades(&[("a", 1.0), ("b", 0.5)]);
        close(ndcg_at_k(&ids(&["a", "b", "x"]), &relevance, 10), 1.0);
        // Repeating "a" adds no gain but still takes rank 2, so "b" lands
        // at rank 3: DCG = 1 + 0.5/log2(4) = 1.25; IDCG = 1 + 0.5/log2(3).
        let repeated = ndcg_at_k(&ids(&["a", "a", "b"]), &relevance, 10);
        close(repeated, 1.25 / (1.0 + 0.5 / 3f64.log2()));
        assert!(repeated < 1.0);
    }

    #[test]
    fn ndcg_truncates_the_ideal_ranking_at_k() {
        // Three primaries, k = 2: the ideal holds only two of them.
        let relevance = grades(&[("a", 1.0), ("b", 1.0), ("c", 1.0)]);
        close(ndcg_at_k(&ids(&["a", "b"]), &relevance, 2), 1.0);
    }

    #[test]
    fn ndcg_is_zero_without_positive_gains_or_hits() {
        close(ndcg_at_k(&ids(&["a"]), &grades(&[]), 10), 0.0);
        close(ndcg_at_k(&ids(&["a"]), &grades(&[("a", 0.0)]), 10), 0.0);
        close(ndcg_at_k(&ids(&["x"]), &grades(&[("a", 1.0)]), 10), 0.0);
        close(ndcg_at_k(&ids(&["a"]), &grades(&[("a", 1.0)]), 0), 0.0);
    }

    #[test]
    fn recall_any_and_all_look_at_the_top_k_only() {
        let evidence = set(&["d1", "d2"]);
        let retrieved = ids(&["x", "d1", "y", "z", "w", "d2"]);
        close(recall_any_at_k(&retrieved, &evidence, 5), 1.0);
        close(recall_all_at_k(&retrieved, &evidence, 5), 0.0);
        close(recall_all_at_k(&retrieved, &evidence, 6), 1.0);
        close(recall_any_at_k(&retrieved, &evidence, 1), 0.0);
    }

    #[test]
    fn recall_any_and_all_are_zero_for_empty_evidence_and_ignore_duplicates() {
        close(recall_any_at_k(&ids(&["a"]), &set(&[]), 5), 0.0);
        close(recall_all_at_k(&ids(&["a"]), &set(&[]), 5), 0.0);
        let evidence = set(&["a", "b"]);
        close(recall_all_at_k(&ids(&["a", "a", "a"]), &evidence, 5), 0.0);
        close(recall_all_at_k(&ids(&["a", "a", "b"]), &evidence, 3), 1.0);
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let values: Vec<f64> = (1..=100).map(f64::from).collect();
        close(percentile(&values, 50.0), 50.0);
        close(percentile(&values, 95.0), 95.0);
        close(percentile(&values, 99.0), 99.0);
        close(percentile(&values, 100.0), 100.0);
        close(percentile(&[7.0, 1.0, 3.0], 50.0), 3.0);
        close(percentile(&[5.0], 99.0), 5.0);
        close(percentile(&[], 50.0), 0.0);
        close(percentile(&[2.0, 1.0], 0.0), 1.0);
    }

    #[test]
    fn mean_of_nothing_is_zero() {
        close(mean(&[]), 0.0);
        close(mean(&[1.0, 0.0, 0.5]), 0.5);
    }
}
