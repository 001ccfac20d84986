//! The symbolic layer on the read path (`MNEME_SYMBOLIC_*`, off by
//! default), applied to a page of ranked results:
//!
//! - explanations (`MNEME_SYMBOLIC_EXPLAIN`): the reference's reason codes
//!   that the search layers do not already give — `temporal_proximity`
//!   (the recall asked for a time range, which every result matches),
//!   `case_cohort_member` (the result belongs to the case asked about, or
//!   to a case in case mode) and `recent_activity_ema` (activation ≥ 0.5);
//! - the case-based-reasoning filter (`MNEME_SYMBOLIC_CBR_FILTER`): a recall
//!   in case mode or for a `caseId` keeps only results eligible as cases.
//!   The reference's four constraints, in order: `tenant_match` (the
//!   fragment's key is one the caller reads), `has_case_id`,
//!   `not_quarantine` (fragments carry no quarantine state in mneme; a
//!   superseded fragment is the equivalent) and `resolved_state`
//!   (resolution status `resolved` or unset).
//!
//! Everything here is pure and works on what the search already loaded, so
//! it cannot fail or slow a recall noticeably.

use std::collections::HashMap;
use std::sync::LazyLock;

use chrono::{DateTime, Utc};
use mneme_config::SymbolicConfig;
use mneme_proto::v1::RecalledFragment;
use mneme_store::fragments::Fragment;
use mneme_telemetry::metrics::register;
use prometheus::{IntCounterVec, Opts};
use uuid::Uuid;

use crate::query::Query;
use crate::rank::Page;

static CBR_FILTERED: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register(
        IntCounterVec::new(
            Opts::new(
                "mneme_symbolic_recall_filtered_total",
                "Results the case-based-reasoning eligibility filter removed, by reason.",
            ),
            &["reason"],
        )
        .expect("valid metric"),
    )
});

/// Activation from which recent use explains a result.
const ACTIVE_EMA: f32 = 0.5;

/// What a stored row tells the symbolic hooks beyond the client view.
#[derive(Debug, Clone, Copy)]
struct RowFacts {
    key_id: Uuid,
    ema_activation: f32,
}

/// The symbolic hooks of one recall, with what they need from the query
/// and the loaded rows.
#[derive(Debug, Default)]
pub(crate) struct Signals {
    explain: bool,
    filter_cases: bool,
    time_range: bool,
    case_id: Option<String>,
    case_mode: bool,
    readable_keys: Vec<Uuid>,
    rows: HashMap<String, RowFacts>,
    now: Option<DateTime<Utc>>,
}

impl Signals {
    /// Takes what the hooks need before the rows are consumed by ranking.
    pub(crate) fn capture(
        config: &SymbolicConfig,
        query: &Query,
        rows: &[Fragment],
        now: DateTime<Utc>,
    ) -> Self {
        let scope = query.scope();
        let filter_cases = config.filters_cases() && (query.case_mode || scope.case_id.is_some());
        let explain = config.explains();
        if !(explain || filter_cases) {
            return Self::default();
        }
        Self {
            explain,
            filter_cases,
            time_range: scope.time_from.is_some() || scope.time_to.is_some(),
            case_id: scope.case_id.map(str::to_owned),
            case_mode: query.case_mode,
            readable_keys: query.key_ids.clone(),
            rows: rows
                .iter()
                .map(|row| {
                    (
                        row.id.to_string(),
                        RowFacts {
                            key_id: row.key_id,
                            ema_activation: row.ema_activation,
                        },
                    )
                })
                .collect(),
            now: Some(now),
        }
    }

    /// Filters and annotates `page` in place.
    pub(crate) fn apply(&self, page: &mut Page) {
        if self.filter_cases {
            let before = page.fragments.len();
            page.fragments
                .retain(|fragment| match self.ineligibility(fragment) {
                    None => true,
                    Some(reason) => {
                        CBR_FILTERED.with_label_values(&[reason]).inc();
                        tracing::debug!(phase = "cbr", reason, "symbolic gate removed a result");
                        false
                    }
                });
            if page.fragments.len() != before {
                page.total_tokens = page
                    .fragments
                    .iter()
                    .map(|f| f.estimated_tokens as usize)
                    .sum();
            }
        }
        if self.explain {
            for fragment in &mut page.fragments {
                for reason in self.reasons(fragment) {
                    if !fragment.explanations.iter().any(|r| r == reason) {
                        fragment.explanations.push(reason.to_owned());
                    }
                }
            }
        }
    }

    /// The first case-eligibility constraint `fragment` fails, if any.
    fn ineligibility(&self, fragment: &RecalledFragment) -> Option<&'static str> {
        let readable = self
            .rows
            .get(&fragment.id)
            .is_some_and(|row| self.readable_keys.contains(&row.key_id));
        if !readable {
            return Some("tenant_match");
        }
        if fragment.case_id.as_deref().is_none_or(str::is_empty) {
            return Some("has_case_id");
        }
        let now_ms = self.now.unwrap_or_else(Utc::now).timestamp_millis();
        if fragment.valid_to_unix_ms.is_some_and(|to| to <= now_ms) {
            return Some("not_quarantine");
        }
        if fragment
            .resolution_status
            .as_deref()
            .is_some_and(|s| s != "resolved")
        {
            return Some("resolved_state");
        }
        None
    }

    /// The symbolic reason codes that apply to `fragment`.
    fn reasons(&self, fragment: &RecalledFragment) -> Vec<&'static str> {
        let mut reasons = Vec::new();
        if self.time_range {
            reasons.push("temporal_proximity");
        }
        if let Some(case) = fragment.case_id.as_deref()
            && (self.case_mode || self.case_id.as_deref() == Some(case))
        {
            reasons.push("case_cohort_member");
        }
        if self
            .rows
            .get(&fragment.id)
            .is_some_and(|row| row.ema_activation >= ACTIVE_EMA)
        {
            reasons.push("recent_activity_ema");
        }
        reasons
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signals(explain: bool, filter_cases: bool) -> Signals {
        Signals {
            explain,
            filter_cases,
            readable_keys: vec![Uuid::nil()],
            now: Some(Utc::now()),
            ..Signals::default()
        }
    }

    fn result(id: &str, case_id: Option<&str>, status: Option<&str>) -> RecalledFragment {
        RecalledFragment {
            id: id.into(),
            case_id: case_id.map(str::to_owned),
            resolution_status: status.map(str::to_owned),
            estimated_tokens: 10,
            explanations: vec!["full_text_match".into()],
            ..Default::default()
        }
    }

    fn with_rows(mut signals: Signals, ids: &[(&str, Uuid, f32)]) -> Signals {
        signals.rows = ids
            .iter()
            .map(|(id, key_id, ema)| {
                (
                    (*id).to_owned(),
                    RowFacts {
                        key_id: *key_id,
                        ema_activation: *ema,
                    },
                )
            })
            .collect();
        signals
    }

    #[test]
    fn the_case_filter_keeps_only_eligible_cases() {
        let mine = Uuid::nil();
        let signals = with_rows(
            signals(false, true),
            &[
                ("resolved", mine, 0.0),
                ("unset", mine, 0.0),
                ("open", mine, 0.0),
                ("no-case", mine, 0.0),
                ("superseded", mine, 0.0),
                ("foreign", Uuid::now_v7(), 0.0),
            ],
        );
        let mut superseded = result("superseded", Some("c1"), None);
        superseded.valid_to_unix_ms = Some(Utc::now().timestamp_millis() - 1000);
        let mut page = Page {
            fragments: vec![
                result("resolved", Some("c1"), Some("resolved")),
                result("unset", Some("c1"), None),
                result("open", Some("c1"), Some("open")),
                result("no-case", None, None),
                superseded,
                result("foreign", Some("c1"), None),
                result("unknown", Some("c1"), None),
            ],
            total_tokens: 70,
            ..Page::default()
        };
        let reasons: Vec<Option<&str>> = page
            .fragments
            .iter()
            .map(|f| signals.ineligibility(f))
            .collect();
        assert_eq!(
            reasons,
            vec![
                None,
                None,
                Some("resolved_state"),
                Some("has_case_id"),
                Some("not_quarantine"),
                Some("tenant_match"),
                Some("tenant_match"),
            ]
        );
        signals.apply(&mut page);
        let kept: Vec<&str> = page.fragments.iter().map(|f| f.id.as_str()).collect();
        assert_eq!(kept, vec!["resolved", "unset"]);
        assert_eq!(page.total_tokens, 20);
    }

    #[test]
    fn explanations_gain_the_symbolic_reason_codes_once() {
        let mut signals = with_rows(
            signals(true, false),
            &[("a", Uuid::nil(), 0.7), ("b", Uuid::nil(), 0.1)],
        );
        signals.time_range = true;
        signals.case_id = Some("c1".into());
        let mut page = Page {
            fragments: vec![result("a", Some("c1"), None), result("b", Some("c2"), None)],
            ..Page::default()
        };
        signals.apply(&mut page);
        signals.apply(&mut page);
        assert_eq!(
            page.fragments[0].explanations,
            vec![
                "full_text_match",
                "temporal_proximity",
                "case_cohort_member",
                "recent_activity_ema"
            ]
        );
        assert_eq!(
            page.fragments[1].explanations,
            vec!["full_text_match", "temporal_proximity"]
        );
    }

    #[test]
    fn inert_signals_change_nothing() {
        let mut page = Page {
            fragments: vec![result("a", None, Some("open"))],
            total_tokens: 10,
            ..Page::default()
        };
        Signals::default().apply(&mut page);
        assert_eq!(page.fragments.len(), 1);
        assert_eq!(page.fragments[0].explanations, vec!["full_text_match"]);
    }
}
