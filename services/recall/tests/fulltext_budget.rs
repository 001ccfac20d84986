//! The full-text layer on key sets larger than its read budget: terms so
//! common that matching them would read too much are left out of the
//! match, and still rank what matches.

mod common;

use std::sync::Arc;

use common::Harness;
use mneme_config::Config;
use mneme_embed::hash::HashEmbedder;
use mneme_proto::v1::{RecallRequest, RememberRequest};

/// Ids recalled for `text` by the full-text layer alone, with the given
/// read budget, and the ids of the two memories mentioning zebras (the one
/// that also mentions the ledger first).
async fn recalled(read_budget: usize, text: &str) -> (Vec<String>, [String; 2]) {
    let mut settings = Config::defaults().recall;
    settings.fulltext_read_budget = read_budget;
    settings.vector_weight = 0.0;
    settings.keyword_weight = 0.0;
    settings.graph_weight = 0.0;
    let h = Harness::with_recall_config(Arc::new(HashEmbedder::new(384)), settings).await;
    for n in 0..6 {
        h.store(
            &format!("Ledger reconciliation run {n} closed without differences."),
            "fact",
            "finance",
            RememberRequest::default(),
        )
        .await;
    }
    let both = h
        .store(
            "A zebra crossing was painted outside the ledger office.",
            "fact",
            "finance",
            RememberRequest::default(),
        )
        .await;
    let rare = h
        .store(
            "Zebra stripes confuse biting flies.",
            "fact",
            "finance",
            RememberRequest::default(),
        )
        .await;
    let response = h
        .recall(RecallRequest {
            text: Some(text.into()),
            limit: Some(20),
            ..Default::default()
        })
        .await;
    let ids = response.fragments.into_iter().map(|f| f.id).collect();
    (ids, [both, rare])
}

#[tokio::test]
async fn a_term_too_common_for_the_budget_no_longer_matches_but_still_ranks() {
    // 8 memories; "ledger" is in 7 of them, "zebra" in 2. A budget of 4
    // rows keeps "zebra" only.
    let (narrowed, [both, rare]) = recalled(4, "zebra ledger").await;
    assert_eq!(narrowed, vec![both.clone(), rare.clone()]);

    // Without a budget every term matches: all 8 come back.
    let (whole, [both, _]) = recalled(0, "zebra ledger").await;
    assert_eq!(whole.len(), 8, "{whole:?}");
    assert_eq!(whole.first(), Some(&both));
}

#[tokio::test]
async fn a_term_in_no_memory_does_not_leave_the_match_empty() {
    // "quagga" is in no memory, so it looks rarest; with a budget of 1 row
    // neither "zebra" (2) nor "ledger" (7) fits alone. Matching only
    // "quagga" would find nothing: "zebra" and "ledger" together (expected
    // in 2 × 7 / 8 memories) join the match.
    let (found, [both, _]) = recalled(1, "quagga zebra ledger").await;
    assert_eq!(found, vec![both]);
}
