//! `backfill` on a self-hosted stack with the hash embedder: every seeded
//! memory gets its vector before the report is written, the model alone
//! embeds the sample before and after in the worker's batch size, and the
//! rates and their ratio are computed from what was counted.
//!
//! Needs the environment of `~/.local/share/mneme/env` (database, Redis).

use std::time::Duration;

use mneme_loadtest::backfill::{BackfillOptions, TARGET_RATIO, backfill, summary};
use mneme_loadtest::self_hosted::SelfHostedOptions;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_clears_the_queue_and_is_compared_with_the_model_alone() {
    let options = BackfillOptions {
        hosted: SelfHostedOptions {
            embedder: "hash".into(),
            tenants: 2,
            // Small transactions keep a queue behind the seeding.
            settings: vec![("MNEME_EMBED_BATCH_SIZE".into(), "4".into())],
            admin_keys: false,
        },
        fragments: 250,
        seed: 5,
        sample: 64,
        timeout: Duration::from_secs(120),
        progress: false,
    };
    let report = backfill(&options).await.expect("the backfill completes");

    assert_eq!(report.seeding.rejected, 0, "{report:#?}");
    assert!(report.seeding.created > 480, "{report:#?}");
    assert!(report.model.starts_with("hash"), "{}", report.model);
    assert!(
        (0..=report.seeding.created as i64).contains(&report.queued),
        "{report:#?}"
    );
    if report.queued > 0 {
        assert!(report.seconds > 0.0, "{report:#?}");
        let expected = report.queued as f64 / report.seconds;
        assert!((report.per_second - expected).abs() < 1e-6, "{report:#?}");
    }
    for model in [&report.model_before, &report.model_after] {
        assert_eq!(model.texts, 64, "{report:#?}");
        assert_eq!(model.batch_size, 4, "the worker's batch size");
        assert!(model.per_second > 0.0, "{report:#?}");
        assert!(model.mean_chars > 10.0, "{report:#?}");
    }
    let model = (report.model_before.per_second + report.model_after.per_second) / 2.0;
    assert!(
        (report.model_per_second - model).abs() < 1e-9,
        "{report:#?}"
    );
    let ratio = report.per_second / model;
    assert!((report.ratio - ratio).abs() < 1e-9, "{report:#?}");
    assert_eq!(report.target_ratio, TARGET_RATIO);
    if report.queued > 0 {
        assert!(
            report
                .database
                .iter()
                .any(|s| s.statement.starts_with("fragments:")),
            "the worker's statements are timed: {:?}",
            report.database
        );
    }

    let text = summary(&report);
    assert!(text.contains("backfill:"), "{text}");
    assert!(text.contains(&format!("{:.2}", report.ratio)), "{text}");
}
