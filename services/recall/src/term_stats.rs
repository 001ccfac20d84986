//! How common each query term is in a key set, so the full-text layer can
//! leave out terms that would make it read much of a large tenant.
//!
//! The layer matches any query term (OR) and lets `ts_rank` decide. On a
//! large tenant whose memories keep naming the same services, an OR of a
//! few such names matches, reads and ranks a large share of the tenant,
//! however well the index finds them: on a 100,000-memory tenant of
//! generated memories, 15,000 buffers and 439 ms per full-text query under
//! load without narrowing, 2,000 and 33 ms with it (docs/BENCHMARKS.md).
//! PostgreSQL keeps no per-tenant term statistics and
//! `ts_rank` has no notion of rarity, so mneme samples them itself:
//! - the newest `MNEME_RECALL_TERM_SAMPLE_SIZE` fragments of the key set are
//!   read once per `MNEME_RECALL_TERM_SAMPLE_TTL_SECS` and process, and each
//!   lexeme's document count scaled to the whole key set;
//! - the filter keeps the rarest terms while their estimated matches fit
//!   `MNEME_RECALL_FULLTEXT_READ_BUDGET` rows; ranking still uses every
//!   term. When no term the sample has seen fits on its own, the filter
//!   also asks for the rarest seen terms all together: as few of them as
//!   are expected (taking terms as independent) to fit the budget.
//!
//! Key sets whose whole size fits the budget are never narrowed: in small
//! tenants (and every retrieval benchmark) any query term matches.
//!
//! The same sample weighs the terms that rank the matches
//! (`MNEME_RECALL_FULLTEXT_IDF`): each term's `ts_rank` counts with BM25's
//! inverse document frequency, so a match on a word few memories hold
//! outweighs one on a word most of them hold (`설정`, "setting", or a
//! service every memory names). The statistics are per key set, not per
//! tenant, so one key's memories never shape another key's results.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use mneme_config::RecallConfig;
use mneme_core::Result;
use mneme_core::text::{all_of, any_of};
use mneme_store::TenantTx;
use mneme_store::fragments::{self, RankTerms, TermSample};
use mneme_telemetry::metrics::register;
use moka::future::Cache;
use prometheus::{IntCounterVec, Opts};
use uuid::Uuid;

/// Most lexemes held across all cached samples (a sample of 2,000 short
/// memories keeps a few thousand): about 30 MB at most.
const CACHED_LEXEMES: u64 = 500_000;

static QUERIES: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register(
        IntCounterVec::new(
            Opts::new(
                "mneme_recall_fulltext_queries_total",
                "Full-text layer queries by how they match: any term, only the rarer terms (narrowed), or the rarest terms all together (all).",
            ),
            &["match"],
        )
        .expect("valid metric"),
    )
});

/// How a full-text query matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Match {
    /// Any query term.
    Any,
    /// Any of the rarer terms; the common ones only rank.
    Narrowed,
    /// The rarest terms all together, as few as are expected to fit the
    /// budget (every term alone is common).
    All,
}

impl Match {
    fn label(self) -> &'static str {
        match self {
            Match::Any => "any",
            Match::Narrowed => "narrowed",
            Match::All => "all",
        }
    }
}

/// The full-text layer's query: which fragments match and how they rank.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FullTextQuery {
    /// Which fragments match.
    pub(crate) filter: String,
    /// How matches are ranked: every term of the query, weighted.
    pub(crate) rank: RankTerms,
    pub(crate) matching: Match,
}

/// Cached term samples of key sets.
#[derive(Debug, Clone)]
pub(crate) struct TermStatistics {
    samples: Cache<(Uuid, Vec<Uuid>), Arc<TermSample>>,
    sample_size: i64,
    read_budget: i64,
    idf: bool,
}

impl TermStatistics {
    pub(crate) fn new(settings: &RecallConfig) -> Self {
        Self {
            samples: Cache::builder()
                .max_capacity(CACHED_LEXEMES)
                .weigher(|_, sample: &Arc<TermSample>| {
                    u32::try_from(sample.counts.len() + 1).unwrap_or(u32::MAX)
                })
                .time_to_live(settings.term_sample_ttl.max(Duration::from_secs(1)))
                .build(),
            sample_size: settings.term_sample_size as i64,
            read_budget: settings.fulltext_read_budget as i64,
            idf: settings.fulltext_idf,
        }
    }

    /// The full-text query for `lexemes` over the fragments of `key_ids`,
    /// `None` when there is no term. Samples the key set when its
    /// statistics are not cached (concurrent recalls wait for one sample).
    pub(crate) async fn query(
        &self,
        tx: &TenantTx<'_>,
        key_ids: &[Uuid],
        lexemes: &[String],
    ) -> Result<Option<FullTextQuery>> {
        if lexemes.is_empty() {
            return Ok(None);
        }
        // One term matches the same rows whichever way it is asked for, and
        // ranks them alike whatever its weight: no sample needed.
        let query = if lexemes.len() == 1 || (self.read_budget == 0 && !self.idf) {
            plan(lexemes, &TermSample::default(), self.read_budget, false)
        } else {
            let mut keys = key_ids.to_vec();
            keys.sort_unstable();
            let sample = self
                .samples
                .try_get_with((tx.tenant_id(), keys), async {
                    let sample = fragments::term_sample(tx, key_ids, self.sample_size).await?;
                    Ok::<_, mneme_core::Error>(Arc::new(sample))
                })
                .await
                .map_err(|error| (*error).clone())?;
            plan(lexemes, &sample, self.read_budget, self.idf)
        };
        QUERIES.with_label_values(&[query.matching.label()]).inc();
        Ok(Some(query))
    }
}

/// The full-text query for `lexemes` (non-empty): the filter, and the terms
/// weighted by rarity when `idf` is set. An empty sample matches any term
/// and weighs every term alike.
fn plan(lexemes: &[String], sample: &TermSample, budget: i64, idf: bool) -> FullTextQuery {
    let (filter, matching) = filter(lexemes, sample, budget);
    FullTextQuery {
        filter: filter.or_else(|| any_of(lexemes)).unwrap_or_default(),
        rank: rank_terms(lexemes, sample, idf),
        matching,
    }
}

/// A term seen once or not at all in the sample counts as seen once: its
/// true frequency is below the sample's resolution. The estimate scales the
/// sample's count to the whole key set.
fn estimated_documents(sample: &TermSample, lexeme: &str) -> i64 {
    let seen = sample.counts.get(lexeme).copied().unwrap_or(1).max(1);
    (seen * sample.total + sample.sampled - 1) / sample.sampled
}

/// Each lexeme as a term of its own, weighted by BM25's inverse document
/// frequency `ln(1 + (N - n + 0.5) / (n + 0.5))` (N memories, n holding the
/// term) when `idf` is set, else alike; the weights sum to 1, so an
/// unweighted rank is `ts_rank`'s own for the OR of the terms.
fn rank_terms(lexemes: &[String], sample: &TermSample, idf: bool) -> RankTerms {
    let literals: Vec<String> = lexemes
        .iter()
        .filter_map(|lexeme| any_of(std::slice::from_ref(lexeme)))
        .collect();
    let raw: Vec<f64> = if idf && sample.sampled > 0 {
        let total = sample.total as f64;
        lexemes
            .iter()
            .map(|lexeme| {
                let documents = (estimated_documents(sample, lexeme) as f64).min(total);
                (1.0 + (total - documents + 0.5) / (documents + 0.5)).ln()
            })
            .collect()
    } else {
        vec![1.0; lexemes.len()]
    };
    let sum: f64 = raw.iter().sum();
    RankTerms {
        literals,
        weights: raw.iter().map(|w| (w / sum) as f32).collect(),
    }
}

/// Chooses the filter for `lexemes` (non-empty): `None` matches any term.
fn filter(lexemes: &[String], sample: &TermSample, budget: i64) -> (Option<String>, Match) {
    if budget == 0 || sample.total <= budget || sample.sampled == 0 {
        return (None, Match::Any);
    }
    let estimate = |lexeme: &String| estimated_documents(sample, lexeme);
    let mut by_cost: Vec<(&String, i64)> = lexemes.iter().map(|l| (l, estimate(l))).collect();
    by_cost.sort_by(|a, b| a.1.cmp(&b.1).then_with(|| a.0.cmp(b.0)));
    let mut kept: Vec<&String> = Vec::new();
    let mut reads = 0;
    for &(lexeme, cost) in &by_cost {
        if reads + cost > budget {
            break;
        }
        reads += cost;
        kept.push(lexeme);
    }
    if kept.len() == lexemes.len() {
        return (None, Match::Any);
    }
    // Terms the sample never saw look rarest of all, but most are in no
    // memory at all (a word of the question, another language): a filter
    // of only those matched nothing for a fifth of the recalls on a
    // 100,000-memory key set. The rarest terms that do occur, together,
    // join them.
    let seen = |lexeme: &String| sample.counts.get(lexeme).is_some_and(|&count| count > 0);
    if kept.iter().any(|lexeme| seen(lexeme)) {
        return (any_of(&kept), Match::Narrowed);
    }
    let occurring: Vec<(&String, i64)> = by_cost
        .iter()
        .copied()
        .filter(|(lexeme, _)| seen(lexeme))
        .collect();
    let Some(together) = all_of(&rarest_together(
        &occurring,
        sample.total,
        (budget - reads).max(1),
    )) else {
        // The sample saw none of the terms, so it cannot tell which of them
        // would narrow the match: any of them matches.
        return (None, Match::Any);
    };
    match any_of(&kept) {
        None => (Some(together), Match::All),
        Some(unseen) => (Some(format!("{unseen} | ({together})")), Match::Narrowed),
    }
}

/// The fewest of the rarest terms (`by_cost`, rarest first, each alone over
/// `budget`) whose expected joint matches fit the budget, taking terms as
/// independent; every term when even all of them together do not fit.
/// Requiring every query term instead left a fifth of the recalls on a
/// 100,000-memory key set without any full-text match (docs/BENCHMARKS.md).
fn rarest_together<'a>(by_cost: &[(&'a String, i64)], total: i64, budget: i64) -> Vec<&'a String> {
    let mut together = Vec::new();
    let mut expected = total as f64;
    for &(lexeme, cost) in by_cost {
        together.push(lexeme);
        expected *= cost as f64 / total as f64;
        if expected <= budget as f64 {
            break;
        }
    }
    together
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn sample(total: i64, sampled: i64, counts: &[(&str, i64)]) -> TermSample {
        TermSample {
            total,
            sampled,
            counts: counts
                .iter()
                .map(|(l, c)| ((*l).to_owned(), *c))
                .collect::<HashMap<_, _>>(),
        }
    }

    fn planned(lexemes: &[&str], sample: &TermSample, budget: i64) -> FullTextQuery {
        let lexemes: Vec<String> = lexemes.iter().map(|l| (*l).to_owned()).collect();
        plan(&lexemes, sample, budget, false)
    }

    /// The OR of every term that ranks.
    fn every_term(query: &FullTextQuery) -> String {
        query.rank.literals.join(" | ")
    }

    #[test]
    fn a_key_set_within_the_budget_matches_every_term() {
        let small = sample(4_000, 2_000, &[("api", 1_900), ("payment", 1_800)]);
        let query = planned(&["api", "payment", "rollback"], &small, 5_000);
        assert_eq!(query.filter, "'api' | 'payment' | 'rollback'");
        assert_eq!(query.filter, every_term(&query));
        assert_eq!(query.matching, Match::Any);
    }

    #[test]
    fn common_terms_leave_the_filter_but_still_rank() {
        // 100,000 memories: "api" in ~40,000, "payment" in ~10,000,
        // "rollback" in ~1,500, "zebra" unseen (~50).
        let large = sample(
            100_000,
            2_000,
            &[("api", 800), ("payment", 200), ("rollback", 30)],
        );
        let query = planned(&["api", "payment", "rollback", "zebra"], &large, 5_000);
        assert_eq!(query.filter, "'zebra' | 'rollback'");
        assert_eq!(query.matching, Match::Narrowed);
        assert_eq!(
            every_term(&query),
            "'api' | 'payment' | 'rollback' | 'zebra'"
        );
    }

    #[test]
    fn when_every_term_is_common_the_rarest_must_match_together() {
        // ~10,000 "payment", ~20,000 "refund", ~40,000 "api": payment and
        // refund together are expected in ~2,000 memories, within the
        // budget, so "api" is not required (it still ranks).
        let large = sample(
            100_000,
            2_000,
            &[("api", 800), ("payment", 200), ("refund", 400)],
        );
        let query = planned(&["api", "payment", "refund"], &large, 5_000);
        assert_eq!(query.filter, "'payment' & 'refund'");
        assert_eq!(query.matching, Match::All);
        assert_eq!(every_term(&query), "'api' | 'payment' | 'refund'");
        // Just outside: with a budget under ~2,000, "api" is required too.
        let query = planned(&["api", "payment", "refund"], &large, 1_999);
        assert_eq!(query.filter, "'payment' & 'refund' & 'api'");
    }

    #[test]
    fn when_all_terms_together_exceed_the_budget_every_one_is_required() {
        let large = sample(100_000, 2_000, &[("api", 1_800), ("payment", 1_600)]);
        let query = planned(&["api", "payment"], &large, 5_000);
        assert_eq!(query.filter, "'payment' & 'api'");
        assert_eq!(query.matching, Match::All);
    }

    #[test]
    fn terms_the_sample_never_saw_do_not_make_up_the_whole_filter() {
        // "zebra" and "quagga" were never sampled (maybe in no memory at
        // all); "payment" (~10,000) and "refund" (~20,000) are too common
        // alone but expected together in ~2,000 memories.
        let large = sample(100_000, 2_000, &[("payment", 200), ("refund", 400)]);
        let query = planned(&["payment", "quagga", "refund", "zebra"], &large, 5_000);
        assert_eq!(query.filter, "'quagga' | 'zebra' | ('payment' & 'refund')");
        assert_eq!(query.matching, Match::Narrowed);
        // A sample too small to see any of them narrows nothing, whether
        // none of the unseen terms fits the budget or only some do.
        let coarse = sample(1_000_000, 100, &[]);
        let query = planned(&["quagga", "zebra"], &coarse, 5_000);
        assert_eq!(query.matching, Match::Any);
        assert_eq!(query.filter, every_term(&query));
        let coarse = sample(100_000, 50, &[]);
        let query = planned(&["okapi", "quagga", "zebra"], &coarse, 5_000);
        assert_eq!(query.matching, Match::Any);
        assert_eq!(query.filter, every_term(&query));
        // A rare term that occurs is enough on its own.
        let large = sample(
            100_000,
            2_000,
            &[("payment", 200), ("refund", 400), ("rollback", 30)],
        );
        let query = planned(&["payment", "refund", "rollback", "zebra"], &large, 5_000);
        assert_eq!(query.filter, "'zebra' | 'rollback'");
    }

    #[test]
    fn rare_terms_that_fit_together_are_all_kept() {
        let large = sample(100_000, 2_000, &[("deploy", 20), ("canary", 10)]);
        let query = planned(&["canary", "deploy"], &large, 5_000);
        assert_eq!(query.filter, "'canary' | 'deploy'");
        assert_eq!(query.matching, Match::Any);
    }

    #[test]
    fn rarer_terms_weigh_more_in_the_rank() {
        // 400 memories, all sampled: "deploy" in 200, "canary" in 8,
        // "rollback" in one (below the sample's counts), "api" in all.
        let all = sample(400, 400, &[("api", 400), ("canary", 8), ("deploy", 200)]);
        let lexemes: Vec<String> = ["api", "canary", "deploy", "rollback"]
            .iter()
            .map(|l| (*l).to_owned())
            .collect();
        let rank = plan(&lexemes, &all, 5_000, true).rank;
        assert_eq!(
            rank.literals,
            ["'api'", "'canary'", "'deploy'", "'rollback'"]
        );
        let [api, canary, deploy, rollback] = rank.weights[..] else {
            panic!("one weight per term: {:?}", rank.weights);
        };
        assert!(rollback > canary && canary > deploy && deploy > api);
        // A term in every memory hardly counts: ln(1 + 0.5 / 400.5).
        assert!(api < 0.001, "{api}");
        assert!((rank.weights.iter().sum::<f32>() - 1.0).abs() < 1e-5);
        // BM25's idf: ln(1 + (400 - 8 + 0.5) / 8.5) against ln(1 + 0.5 / 1.5).
        let ratio = f64::from(rollback / canary);
        let expected = (1.0f64 + 399.5 / 1.5).ln() / (1.0f64 + 392.5 / 8.5).ln();
        assert!(
            (ratio - expected).abs() < 1e-3,
            "{ratio} against {expected}"
        );
    }

    #[test]
    fn a_sample_of_part_of_the_key_set_scales_to_the_whole() {
        // Seen in 100 of 2,000 sampled memories of 100,000: about 5,000.
        let large = sample(100_000, 2_000, &[("payment", 100), ("api", 1_000)]);
        let lexemes = vec!["api".to_owned(), "payment".to_owned()];
        let rank = plan(&lexemes, &large, 0, true).rank;
        let expected = |n: f64| (1.0 + (100_000.0 - n + 0.5) / (n + 0.5)).ln();
        let ratio = f64::from(rank.weights[1] / rank.weights[0]);
        assert!((ratio - expected(5_000.0) / expected(50_000.0)).abs() < 1e-3);
        // A budget of 0 still matches any term.
        assert_eq!(plan(&lexemes, &large, 0, true).matching, Match::Any);
    }

    #[test]
    fn without_idf_or_a_sample_every_term_weighs_the_same() {
        let all = sample(400, 400, &[("api", 400), ("canary", 8)]);
        let lexemes = vec!["api".to_owned(), "canary".to_owned()];
        assert_eq!(plan(&lexemes, &all, 5_000, false).rank.weights, [0.5, 0.5]);
        let empty = TermSample::default();
        assert_eq!(plan(&lexemes, &empty, 5_000, true).rank.weights, [0.5, 0.5]);
    }
}
