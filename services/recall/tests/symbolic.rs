//! The symbolic layer on the read path, against a real PostgreSQL: the
//! case-based-reasoning filter and the extra reason codes, on and off.

use std::sync::Arc;

use mneme_cache::Cache;
use mneme_config::Config;
use mneme_core::Principal;
use mneme_embed::hash::HashEmbedder;
use mneme_proto::v1::{RecallRequest, RecallResponse, RememberRequest};
use mneme_recall::RecallServer;
use mneme_remember::RememberServer;
use mneme_test_support::{ALL_PERMISSIONS, TestDatabase, TestRedis, create_tenant};

struct Harness {
    _db: TestDatabase,
    principal: Principal,
    remember: RememberServer,
    plain: RecallServer,
    symbolic: RecallServer,
}

async fn start() -> Harness {
    let db = TestDatabase::create().await;
    let redis = TestRedis::new();
    let store = db.store();
    let tenant = create_tenant(&store, "cases", ALL_PERMISSIONS).await;
    let cache = Cache::connect(&redis.url, &redis.prefix).await.unwrap();
    let embedder = Arc::new(HashEmbedder::new(384));
    let mut settings = Config::defaults().recall;
    let plain = RecallServer::new(
        store.clone(),
        cache.clone(),
        embedder.clone(),
        settings.clone(),
    );
    settings.symbolic.enabled = true;
    settings.symbolic.explain = true;
    settings.symbolic.cbr_filter = true;
    Harness {
        principal: tenant.principal(),
        remember: RememberServer::new(store.clone(), cache.clone(), Config::defaults().remember),
        plain,
        symbolic: RecallServer::new(store, cache, embedder, settings),
        _db: db,
    }
}

impl Harness {
    async fn store(&self, content: &str, case_id: Option<&str>, status: Option<&str>) -> String {
        self.remember
            .remember(
                &self.principal,
                RememberRequest {
                    content: content.into(),
                    topic: "deploys".into(),
                    r#type: "fact".into(),
                    case_id: case_id.map(str::to_owned),
                    resolution_status: status.map(str::to_owned),
                    ..Default::default()
                },
            )
            .await
            .unwrap()
            .id
    }
}

fn ids(response: &RecallResponse) -> Vec<&str> {
    let mut ids: Vec<&str> = response.fragments.iter().map(|f| f.id.as_str()).collect();
    ids.sort_unstable();
    ids
}

#[tokio::test]
async fn case_recalls_keep_only_eligible_cases_and_explain_them() {
    let h = start().await;
    let resolved = h
        .store(
            "Deploy rollback worked after pinning the database driver",
            Some("case-a"),
            Some("resolved"),
        )
        .await;
    let open = h
        .store(
            "Deploy rollback still flaky on the staging cluster",
            Some("case-a"),
            Some("open"),
        )
        .await;
    let loose = h
        .store("Deploy rollback notes kept outside any case", None, None)
        .await;
    let case_mode = RecallRequest {
        text: Some("deploy rollback".into()),
        case_mode: true,
        exclude_seen: Some(false),
        ..Default::default()
    };

    let mut all = vec![resolved.as_str(), open.as_str(), loose.as_str()];
    all.sort_unstable();
    let without = h
        .plain
        .recall(&h.principal, case_mode.clone())
        .await
        .unwrap();
    assert_eq!(ids(&without), all);
    assert!(
        without
            .fragments
            .iter()
            .all(|f| !f.explanations.iter().any(|r| r == "case_cohort_member"))
    );

    let with = h.symbolic.recall(&h.principal, case_mode).await.unwrap();
    assert_eq!(ids(&with), vec![resolved.as_str()]);
    assert!(
        with.fragments[0]
            .explanations
            .contains(&"case_cohort_member".to_owned()),
        "{:?}",
        with.fragments[0].explanations
    );

    // Filtering by the case id applies the same eligibility.
    let by_case = h
        .symbolic
        .recall(
            &h.principal,
            RecallRequest {
                text: Some("deploy rollback".into()),
                case_id: Some("case-a".into()),
                exclude_seen: Some(false),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(ids(&by_case), vec![resolved.as_str()]);

    // An ordinary recall is not filtered.
    let ordinary = h
        .symbolic
        .recall(
            &h.principal,
            RecallRequest {
                text: Some("deploy rollback".into()),
                exclude_seen: Some(false),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(ids(&ordinary), all);
}
