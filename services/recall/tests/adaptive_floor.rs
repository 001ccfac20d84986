//! The adaptive similarity floor (SearchParamAdaptor), per tenant and key,
//! with real PostgreSQL.

mod common;

use std::sync::Arc;

use common::Harness;
use mneme_config::{AdaptiveFloor, Config};
use mneme_embed::hash::HashEmbedder;
use mneme_proto::v1::{RecallRequest, RememberRequest};
use mneme_test_support::{ALL_PERMISSIONS, create_tenant};

async fn harness() -> Harness {
    let mut settings = Config::defaults().recall;
    settings.adaptive_floor = Some(AdaptiveFloor {
        start: 0.35,
        min: 0.10,
        max: 0.60,
        min_samples: 3,
    });
    Harness::with_recall_config(Arc::new(HashEmbedder::new(384)), settings).await
}

/// The floor is learnt per hour of the day, so recalls that must land in
/// one bucket cannot straddle the turn of an hour: this waits past a turn
/// that is less than 15 s away.
async fn clear_of_the_hour_turn() {
    use chrono::Timelike as _;
    let now = chrono::Utc::now();
    let into_hour = now.minute() * 60 + now.second();
    if into_hour >= 3600 - 15 {
        let wait = u64::from(3600 - into_hour) + 1;
        tokio::time::sleep(std::time::Duration::from_secs(wait)).await;
    }
}

fn search(text: &str) -> RecallRequest {
    RecallRequest {
        text: Some(text.into()),
        ..Default::default()
    }
}

impl Harness {
    /// Rows of the tenant's floor table matching `condition`.
    async fn floors(&self, condition: &str) -> i64 {
        self.db
            .count_rows(self.tenant.tenant_id, "search_param_thresholds", condition)
            .await
    }
}

#[tokio::test]
async fn many_results_raise_the_floor_after_the_warm_up_and_only_for_that_key() {
    let h = harness().await;
    for i in 0..12 {
        let content = format!("Backup job {i} copies the orders database to cold storage nightly.");
        h.store(&content, "fact", "backups", RememberRequest::default())
            .await;
    }
    h.embed_all().await;
    clear_of_the_hour_turn().await;
    for round in 1..=4 {
        let returned = h.recall(search("backup job orders database")).await;
        assert_eq!(returned.fragments.len(), 10, "round {round}");
    }
    // Samples 1-2 warm up at 0.35; sample 3 (avg 10 > 8) → 0.36; sample 4 → 0.37.
    let key = h.tenant.key_id;
    assert_eq!(
        h.floors(&format!(
            "key_id = '{key}' AND query_type = 'text' AND sample_count = 4
             AND round(min_similarity * 100) = 37"
        ))
        .await,
        1
    );
    // A threshold in the request bypasses the floor and teaches it nothing.
    h.recall(RecallRequest {
        threshold: Some(-1.0),
        ..search("backup job")
    })
    .await;
    assert_eq!(h.floors("sample_count = 4").await, 1);

    // Another tenant learns nothing from these recalls.
    let other = create_tenant(&h.db.store(), "other", ALL_PERMISSIONS).await;
    assert_eq!(
        h.db.count_rows(other.tenant_id, "search_param_thresholds", "true")
            .await,
        0
    );
}

#[tokio::test]
async fn empty_results_lower_the_floor_and_a_learned_floor_filters_the_vector_layer() {
    let h = harness().await;
    clear_of_the_hour_turn().await;
    for _ in 0..3 {
        assert!(
            h.recall(search("nothing is stored yet"))
                .await
                .fragments
                .is_empty()
        );
    }
    assert_eq!(h.floors("round(min_similarity * 100) = 34").await, 1);

    let id = h
        .store(
            "Kafka retention on the events topic is seven days.",
            "fact",
            "kafka",
            RememberRequest::default(),
        )
        .await;
    h.embed_all().await;
    let found = h.recall(search("kafka retention events")).await;
    let hit = found.fragments.iter().find(|f| f.id == id).expect("found");
    assert!(
        hit.matched_by.contains(&"vector".to_owned()),
        "{:?}",
        hit.matched_by
    );

    // A floor above every similarity removes the vector layer's hits; the
    // lexical layers still find the fragment.
    let mut owner = h.db.owner_client().await;
    let tx = owner.transaction().await.unwrap();
    tx.execute(
        "SELECT set_config('mneme.tenant_id', $1, true)",
        &[&h.tenant.tenant_id.to_string()],
    )
    .await
    .unwrap();
    tx.execute(
        "UPDATE mneme.search_param_thresholds SET min_similarity = 0.999",
        &[],
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    let found = h.recall(search("kafka retention events")).await;
    let hit = found
        .fragments
        .iter()
        .find(|f| f.id == id)
        .expect("still found");
    assert!(
        !hit.matched_by.contains(&"vector".to_owned()),
        "{:?}",
        hit.matched_by
    );
    assert!(
        hit.matched_by.contains(&"fulltext".to_owned()),
        "{:?}",
        hit.matched_by
    );
}
