//! Pure steps of recall: scoring candidates, cutting a page, explaining
//! results and suggesting what to do next.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use mneme_core::scoring::{Layer, ScoreWeights, final_score};
use mneme_core::text::{Script, text_script};
use mneme_proto::v1::{Hint, RecalledFragment};
use mneme_store::fragments::Fragment;
use uuid::Uuid;

/// Results older than this make a recall "stale".
const STALE_DAYS: i64 = 30;
/// Results at or above this importance are explained as important.
const HIGH_IMPORTANCE: f32 = 0.8;

/// What the layers said about one fragment.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Candidate {
    /// Fused relevance in [0, 1], relative to the query's other candidates;
    /// 0 for a query-less browse.
    pub(crate) relevance: f64,
    pub(crate) similarity: Option<f32>,
    pub(crate) layers: Vec<Layer>,
}

/// Why a fragment was returned, as stable reason codes.
pub(crate) fn explanations(candidate: &Candidate, fragment: &Fragment) -> Vec<String> {
    let mut reasons: Vec<String> = candidate
        .layers
        .iter()
        .map(|layer| {
            match layer {
                Layer::Vector => "semantic_similarity",
                Layer::FullText => "full_text_match",
                Layer::Keyword => "direct_keyword_match",
                Layer::Graph => "graph_neighbor_1hop",
            }
            .to_owned()
        })
        .collect();
    if fragment.is_anchor {
        reasons.push("anchor".into());
    }
    if fragment.importance >= HIGH_IMPORTANCE {
        reasons.push("high_importance".into());
    }
    reasons
}

fn millis(at: Option<DateTime<Utc>>) -> Option<i64> {
    at.map(|at| at.timestamp_millis())
}

/// A stored fragment as clients see it, with what the search said about it.
pub(crate) fn view(row: Fragment, candidate: &Candidate, score: f64) -> RecalledFragment {
    let explanations = explanations(candidate, &row);
    RecalledFragment {
        id: row.id.to_string(),
        content: row.content,
        topic: row.topic,
        r#type: row.fragment_type,
        keywords: row.keywords,
        importance: row.importance,
        ttl_tier: row.ttl_tier,
        is_anchor: row.is_anchor,
        workspace: row.workspace,
        created_at_unix_ms: row.created_at.timestamp_millis(),
        score,
        similarity: candidate.similarity,
        matched_by: candidate
            .layers
            .iter()
            .map(|l| l.as_str().to_owned())
            .collect(),
        estimated_tokens: u32::try_from(row.estimated_tokens).unwrap_or(0),
        linked: Vec::new(),
        explanations,
        context_summary: row.context_summary,
        nearby: Vec::new(),
        case_id: row.case_id,
        goal: row.goal,
        outcome: row.outcome,
        phase: row.phase,
        resolution_status: row.resolution_status,
        assertion_status: row.assertion_status,
        affect: row.affect,
        valid_to_unix_ms: millis(row.valid_to),
        access_count: u32::try_from(row.access_count).unwrap_or(0),
        occurred_at_unix_ms: millis(row.occurred_at),
        agent_id: row.agent_id,
        source: row.source,
    }
}

/// A fragment listed without a search (fetch, history, context).
pub(crate) fn plain(row: Fragment) -> RecalledFragment {
    let importance = f64::from(row.importance);
    view(row, &Candidate::default(), importance)
}

/// A query's preference for memories written like it: a memory in another
/// script than the query ([`text_script`]) keeps `1 − discount` of its
/// relevance.
/// A user asking in Korean wants the Korean note before an equally close
/// English one, yet a multilingual embedding puts the two within a hair
/// of each other; a memory in another script still ranks where nothing
/// in the query's script comes close.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct ScriptPrior {
    script: Script,
    discount: f64,
}

impl ScriptPrior {
    /// `None` when the query has no words or the discount is 0.
    pub(crate) fn of_query(text: Option<&str>, discount: f64) -> Option<Self> {
        if discount <= 0.0 {
            return None;
        }
        let script = text_script(text?)?;
        Some(Self { script, discount })
    }

    /// What a memory with `content` keeps of its relevance.
    pub(crate) fn factor(&self, content: &str) -> f64 {
        match text_script(content) {
            Some(script) if script != self.script => 1.0 - self.discount,
            _ => 1.0,
        }
    }
}

/// Scores candidates (relevance, importance, recency), best first; drops
/// those below the similarity `threshold` (fragments without a similarity
/// stay).
pub(crate) fn rank(
    rows: Vec<Fragment>,
    candidates: &HashMap<Uuid, Candidate>,
    weights: &ScoreWeights,
    threshold: Option<f32>,
    script_prior: Option<ScriptPrior>,
    now: DateTime<Utc>,
) -> Vec<RecalledFragment> {
    let mut ranked: Vec<RecalledFragment> = rows
        .into_iter()
        .filter_map(|row| {
            let candidate = candidates.get(&row.id)?;
            if let (Some(threshold), Some(similarity)) = (threshold, candidate.similarity)
                && similarity < threshold
            {
                return None;
            }
            let age_days = (now - row.created_at).num_seconds() as f64 / 86_400.0;
            let script_factor = script_prior.map_or(1.0, |prior| prior.factor(&row.content));
            let score = final_score(
                candidate.relevance * script_factor,
                f64::from(row.importance),
                age_days,
                weights,
            );
            Some(view(row, candidate, score))
        })
        .collect();
    ranked.sort_by(|a, b| b.score.total_cmp(&a.score).then_with(|| a.id.cmp(&b.id)));
    ranked
}

/// One page of ranked results.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Page {
    pub(crate) fragments: Vec<RecalledFragment>,
    pub(crate) total_tokens: usize,
    /// The page ended early to respect the token budget.
    pub(crate) truncated_by_budget: bool,
    /// Results remain after this page.
    pub(crate) has_more: bool,
}

/// Takes up to `limit` results from `offset` within `token_budget`, in rank
/// order, stopping at the first that does not fit so the next page starts
/// with it and nothing is lost. A page always holds at least one result,
/// so one oversized fragment cannot stall pagination.
pub(crate) fn page(
    ranked: Vec<RecalledFragment>,
    offset: usize,
    limit: usize,
    token_budget: usize,
) -> Page {
    let total = ranked.len();
    let mut page = Page::default();
    let mut next = offset;
    for fragment in ranked.into_iter().skip(offset) {
        if page.fragments.len() == limit {
            break;
        }
        let tokens = fragment.estimated_tokens as usize;
        if !page.fragments.is_empty() && page.total_tokens + tokens > token_budget {
            page.truncated_by_budget = true;
            break;
        }
        page.total_tokens += tokens;
        page.fragments.push(fragment);
        next += 1;
    }
    page.has_more = next < total;
    page
}

/// Next steps worth suggesting to the agent.
pub(crate) fn hints(
    fragments: &[RecalledFragment],
    include_context: bool,
    now: DateTime<Utc>,
) -> Vec<Hint> {
    let hint = |signal: &str, suggestion: &str, tool: &str| Hint {
        signal: signal.into(),
        suggestion: suggestion.into(),
        tool: tool.into(),
    };
    let mut hints = Vec::new();
    if fragments.is_empty() {
        hints.push(hint(
            "no_results",
            "nothing matched; if you learn the answer, store it with remember",
            "remember",
        ));
        return hints;
    }
    let stale_before = (now - chrono::Duration::days(STALE_DAYS)).timestamp_millis();
    if fragments
        .iter()
        .all(|f| f.created_at_unix_ms < stale_before)
    {
        hints.push(hint(
            "stale_results",
            "every result is older than 30 days; amend what has changed",
            "amend",
        ));
    }
    if fragments.len() >= 5 && !include_context {
        hints.push(hint(
            "consider_context",
            "many results; recall again with includeContext for the surrounding situation",
            "recall",
        ));
    }
    hints
}

#[cfg(test)]
mod tests {
    use mneme_test_support::stored_fragment;

    use super::*;

    fn fragment(tokens: u32, score: f64) -> RecalledFragment {
        RecalledFragment {
            estimated_tokens: tokens,
            score,
            ..Default::default()
        }
    }

    fn tokens(page: &Page) -> Vec<u32> {
        page.fragments.iter().map(|f| f.estimated_tokens).collect()
    }

    #[test]
    fn a_page_stops_at_the_first_result_that_does_not_fit() {
        let ranked = vec![fragment(50, 3.0), fragment(500, 2.0), fragment(40, 1.0)];
        let page = page(ranked, 0, 10, 100);
        assert_eq!(tokens(&page), vec![50]);
        assert!(page.truncated_by_budget && page.has_more);
    }

    #[test]
    fn an_oversized_result_still_gets_a_page_of_its_own() {
        let ranked = vec![fragment(50, 3.0), fragment(500, 2.0), fragment(40, 1.0)];
        let second = page(ranked.clone(), 1, 10, 100);
        assert_eq!(tokens(&second), vec![500]);
        let third = page(ranked, 2, 10, 100);
        assert_eq!(tokens(&third), vec![40]);
        assert!(!third.has_more);
    }

    #[test]
    fn the_limit_ends_a_page_without_truncation() {
        let ranked = vec![fragment(10, 3.0), fragment(10, 2.0), fragment(10, 1.0)];
        let page = page(ranked, 0, 2, 1000);
        assert_eq!(page.fragments.len(), 2);
        assert!(!page.truncated_by_budget && page.has_more);
    }

    #[test]
    fn hints_follow_the_results() {
        let now = Utc::now();
        assert_eq!(hints(&[], false, now)[0].signal, "no_results");
        let old = RecalledFragment {
            created_at_unix_ms: (now - chrono::Duration::days(90)).timestamp_millis(),
            ..Default::default()
        };
        let signals: Vec<String> = hints(&vec![old; 5], false, now)
            .into_iter()
            .map(|h| h.signal)
            .collect();
        assert_eq!(signals, vec!["stale_results", "consider_context"]);
    }

    fn row(id: u128, content: &str, now: DateTime<Utc>) -> Fragment {
        Fragment {
            id: Uuid::from_u128(id),
            created_at: now,
            ..stored_fragment(content, "fact", 0.5)
        }
    }

    #[test]
    fn a_memory_in_the_query_script_outranks_an_equally_relevant_one_in_another() {
        let now = Utc::now();
        let rows = || {
            vec![
                row(1, "Connect with psql and run the check procedure", now),
                row(2, "psql 로 접속해 점검 절차를 수행한다", now),
            ]
        };
        let candidate = Candidate {
            relevance: 0.9,
            ..Candidate::default()
        };
        let candidates: HashMap<Uuid, Candidate> =
            rows().iter().map(|r| (r.id, candidate.clone())).collect();
        let weights = ScoreWeights::default();
        let order = |prior: Option<ScriptPrior>| -> Vec<String> {
            rank(rows(), &candidates, &weights, None, prior, now)
                .into_iter()
                .map(|f| f.id)
                .collect()
        };
        let (english, korean) = (
            Uuid::from_u128(1).to_string(),
            Uuid::from_u128(2).to_string(),
        );
        // Equal scores fall back to the id order.
        assert_eq!(order(None), vec![english.clone(), korean.clone()]);
        let asked_in_korean = ScriptPrior::of_query(Some("postgres 접속 절차"), 0.1);
        assert_eq!(
            order(asked_in_korean),
            vec![korean.clone(), english.clone()]
        );
        let asked_in_english = ScriptPrior::of_query(Some("postgres connect procedure"), 0.1);
        assert_eq!(order(asked_in_english), vec![english, korean]);
        assert_eq!(ScriptPrior::of_query(Some("postgres 접속"), 0.0), None);
        assert_eq!(ScriptPrior::of_query(None, 0.1), None);
    }
}
