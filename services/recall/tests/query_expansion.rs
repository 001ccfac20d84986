//! Query expansion (pseudo-relevance feedback) for the vector layer.

mod common;

use std::sync::Arc;

use common::Harness;
use mneme_config::Config;
use mneme_embed::hash::HashEmbedder;
use mneme_proto::v1::{RecallRequest, RememberRequest};

async fn ranking(expansion_hits: usize) -> (Vec<String>, String, String) {
    let mut settings = Config::defaults().recall;
    settings.expansion_hits = expansion_hits;
    settings.expansion_query_weight = 0.3;
    // The vector layer alone decides the order.
    settings.graph_weight = 0.0;
    settings.fulltext_weight = 0.0;
    let h = Harness::with_recall_config(Arc::new(HashEmbedder::new(384)), settings).await;
    // The best hit: short and about the query word.
    h.store(
        "Quokka habitat survey.",
        "fact",
        "field",
        RememberRequest::default(),
    )
    .await;
    // Shares the query word (less closely), nothing else with the best hit.
    let unrelated = h
        .store(
            "A quokka-shaped cookie tin sits on the shelf next to the coffee machine in the office kitchen.",
            "fact",
            "field",
            RememberRequest::default(),
        )
        .await;
    // Shares nothing with the query, but most words with the best hit.
    let neighbour = h
        .store(
            "Habitat survey notes: burrows and scrub.",
            "fact",
            "field",
            RememberRequest::default(),
        )
        .await;
    h.embed_all().await;
    let response = h
        .recall(RecallRequest {
            text: Some("quokka".into()),
            ..Default::default()
        })
        .await;
    let ids = response.fragments.into_iter().map(|f| f.id).collect();
    (ids, unrelated, neighbour)
}

fn position(ids: &[String], id: &str) -> usize {
    ids.iter().position(|x| x == id).expect("returned")
}

#[tokio::test]
async fn expansion_ranks_the_best_hits_neighbours_above_unrelated_memories() {
    let (plain, unrelated, neighbour) = ranking(0).await;
    assert!(
        position(&plain, &unrelated) < position(&plain, &neighbour),
        "without expansion the memory sharing the query word comes first: {plain:?}"
    );
    let (expanded, unrelated, neighbour) = ranking(1).await;
    assert!(
        position(&expanded, &neighbour) < position(&expanded, &unrelated),
        "with expansion the best hit's close neighbour comes first: {expanded:?}"
    );
}
