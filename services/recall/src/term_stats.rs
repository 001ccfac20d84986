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
//! Key sets whose whole size fits the budget are never narrowed, so small
//! tenants (and every retrieval benchmark) search exactly as before. The
//! statistics are per key set, not per tenant, so one key's memories never
//! shape another key's results.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use mneme_config::RecallConfig;
use mneme_core::Result;
use mneme_core::text::{all_of, any_of};
use mneme_store::TenantTx;
use mneme_store::fragments::{self, TermSample};
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

/// The two tsquery literals of the full-text layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FullTextQuery {
    /// Which fragments match.
    pub(crate) filter: String,
    /// How matches are ranked: every term of the query.
    pub(crate) rank: String,
    pub(crate) matching: Match,
}

/// Cached term samples of key sets.
#[derive(Debug, Clone)]
pub(crate) struct TermStatistics {
    samples: Cache<(Uuid, Vec<Uuid>), Arc<TermSample>>,
    sample_size: i64,
    read_budget: i64,
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
        let Some(rank) = any_of(lexemes) else {
            return Ok(None);
        };
        // One term matches the same rows whichever way it is asked for:
        // no sample needed.
        let query = if self.read_budget == 0 || lexemes.len() == 1 {
            plan(lexemes, &TermSample::default(), self.read_budget, rank)
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
            plan(lexemes, &sample, self.read_budget, rank)
        };
        QUERIES.with_label_values(&[query.matching.label()]).inc();
        Ok(Some(query))
    }
}

/// Chooses the filter for `lexemes` (non-empty, `rank` their OR); an empty
/// sample matches any term.
fn plan(lexemes: &[String], sample: &TermSample, budget: i64, rank: String) -> FullTextQuery {
    let query = |filter: Option<String>, matching: Match| FullTextQuery {
        filter: filter.unwrap_or_else(|| rank.clone()),
        rank: rank.clone(),
        matching,
    };
    if sample.total <= budget || sample.sampled == 0 {
        return query(None, Match::Any);
    }
    // A term seen once or not at all in the sample counts as seen once: its
    // true frequency is below the sample's resolution.
    let estimate = |lexeme: &String| -> i64 {
        let seen = sample.counts.get(lexeme).copied().unwrap_or(1).max(1);
        (seen * sample.total + sample.sampled - 1) / sample.sampled
    };
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
        return query(None, Match::Any);
    }
    // Terms the sample never saw look rarest of all, but most are in no
    // memory at all (a word of the question, another language): a filter
    // of only those matched nothing for a fifth of the recalls on a
    // 100,000-memory key set. The rarest terms that do occur, together,
    // join them.
    let seen = |lexeme: &String| sample.counts.get(lexeme).is_some_and(|&count| count > 0);
    if kept.iter().any(|lexeme| seen(lexeme)) {
        return query(any_of(&kept), Match::Narrowed);
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
        return query(None, Match::Any);
    };
    match any_of(&kept) {
        None => query(Some(together), Match::All),
        Some(unseen) => query(Some(format!("{unseen} | ({together})")), Match::Narrowed),
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
        let rank = any_of(&lexemes).unwrap();
        plan(&lexemes, sample, budget, rank)
    }

    #[test]
    fn a_key_set_within_the_budget_matches_every_term() {
        let small = sample(4_000, 2_000, &[("api", 1_900), ("payment", 1_800)]);
        let query = planned(&["api", "payment", "rollback"], &small, 5_000);
        assert_eq!(query.filter, "'api' | 'payment' | 'rollback'");
        assert_eq!(query.filter, query.rank);
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
        assert_eq!(query.rank, "'api' | 'payment' | 'rollback' | 'zebra'");
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
        assert_eq!(query.rank, "'api' | 'payment' | 'refund'");
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
        assert_eq!(query.filter, query.rank);
        let coarse = sample(100_000, 50, &[]);
        let query = planned(&["okapi", "quagga", "zebra"], &coarse, 5_000);
        assert_eq!(query.matching, Match::Any);
        assert_eq!(query.filter, query.rank);
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
}
