//! The consolidation stages and their schedule against real PostgreSQL:
//! each stage on both sides of its thresholds at an injected `now`, dry
//! runs, tenant isolation, and one consolidation per tenant however many
//! consolidators poll.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use mneme_cache::Cache;
use mneme_config::{Config, ConsolidationConfig};
use mneme_consolidator::Consolidator;
use mneme_proto::v1::RememberRequest;
use mneme_remember::RememberServer;
use mneme_store::TenantTx;
use mneme_store::consolidation::StageResult;
use mneme_test_support::{ALL_PERMISSIONS, TestDatabase, TestRedis, TestTenant, create_tenant};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

struct Harness {
    db: TestDatabase,
    _redis: TestRedis,
    remember: RememberServer,
    tenant: TestTenant,
    other: TestTenant,
}

fn settings() -> ConsolidationConfig {
    Config::defaults().consolidation
}

async fn harness() -> Harness {
    let db = TestDatabase::create().await;
    let redis = TestRedis::new();
    let store = db.store();
    let tenant = create_tenant(&store, "acme", ALL_PERMISSIONS).await;
    let other = create_tenant(&store, "globex", ALL_PERMISSIONS).await;
    let cache = Cache::connect(&redis.url, &redis.prefix).await.unwrap();
    let mut remember_settings = Config::defaults().remember;
    // Only the links a test makes itself.
    remember_settings.temporal_link_hours = 0.0;
    remember_settings.proactive_links = false;
    Harness {
        remember: RememberServer::new(store, cache, remember_settings),
        db,
        _redis: redis,
        tenant,
        other,
    }
}

/// A fixed "now" far enough from the real clock that every age below is
/// set explicitly.
fn now() -> DateTime<Utc> {
    "2030-06-01T00:00:00Z".parse().unwrap()
}

/// A unit vector along `axis`: equal axes give similarity 1, different
/// ones 0.
fn axis(axis: usize) -> String {
    let values: Vec<&str> = (0..384)
        .map(|d| if d == axis { "1" } else { "0" })
        .collect();
    format!(
        "embedding = '[{}]'::vector, embedding_model = 'test'",
        values.join(",")
    )
}

/// A unit vector at cosine `similarity` to [`axis`]`(first)`, leaning
/// towards `second`.
fn leaning(first: usize, second: usize, similarity: f64) -> String {
    let rest = (1.0 - similarity * similarity).sqrt();
    let values: Vec<String> = (0..384)
        .map(|d| match d {
            d if d == first => similarity.to_string(),
            d if d == second => rest.to_string(),
            _ => "0".to_owned(),
        })
        .collect();
    format!(
        "embedding = '[{}]'::vector, embedding_model = 'test'",
        values.join(",")
    )
}

impl Harness {
    /// Stores `content` in `tenant` under `topic` and sets `assignments`.
    async fn statement(
        &self,
        tenant: &TestTenant,
        content: &str,
        topic: &str,
        assignments: &str,
    ) -> Uuid {
        let id: Uuid = self
            .remember
            .remember(
                &tenant.principal(),
                RememberRequest {
                    content: content.into(),
                    topic: topic.into(),
                    r#type: "fact".into(),
                    ..Default::default()
                },
            )
            .await
            .unwrap()
            .id
            .parse()
            .unwrap();
        self.sql(
            tenant,
            &format!("UPDATE mneme.fragments SET {assignments} WHERE id = '{id}'"),
        )
        .await;
        id
    }

    fn consolidator(&self, settings: ConsolidationConfig) -> Consolidator {
        Consolidator::new(self.db.store(), settings)
    }

    /// Stores a fragment in `tenant` and then sets `assignments` (SQL) on it,
    /// with `created`/`accessed` ages in days before [`now`].
    async fn fragment(&self, tenant: &TestTenant, kind: &str, assignments: &str) -> Uuid {
        let id: Uuid = self
            .remember
            .remember(
                &tenant.principal(),
                RememberRequest {
                    content: format!("Fragment {} about {kind} things.", Uuid::now_v7()),
                    topic: "ops".into(),
                    r#type: kind.into(),
                    ..Default::default()
                },
            )
            .await
            .unwrap()
            .id
            .parse()
            .unwrap();
        self.sql(
            tenant,
            &format!("UPDATE mneme.fragments SET {assignments} WHERE id = '{id}'"),
        )
        .await;
        id
    }

    /// Runs `statement` as the owner inside `tenant` (setup, bypassing the
    /// services; `NOW` in it stands for [`now`]).
    async fn sql(&self, tenant: &TestTenant, statement: &str) {
        let mut client = self.db.owner_client().await;
        let tx = client.transaction().await.unwrap();
        tx.execute(
            "SELECT set_config('mneme.tenant_id', $1, true)",
            &[&tenant.tenant_id.to_string()],
        )
        .await
        .unwrap();
        let statement = statement.replace("NOW", &format!("'{}'::timestamptz", now().to_rfc3339()));
        tx.execute(&statement, &[]).await.unwrap();
        tx.commit().await.unwrap();
    }

    async fn count(&self, tenant: &TestTenant, table: &str, condition: &str) -> i64 {
        self.db.count_rows(tenant.tenant_id, table, condition).await
    }

    async fn has(&self, id: Uuid, condition: &str) -> bool {
        self.count(
            &self.tenant,
            "fragments",
            &format!("id = '{id}' AND {condition}"),
        )
        .await
            == 1
    }
}

fn days_ago(days: i64) -> String {
    format!("NOW - interval '{days} days'")
}

#[tokio::test]
async fn ttl_tiers_move_on_both_sides_of_their_thresholds() {
    let h = harness().await;
    let fresh = format!("created_at = {0}, accessed_at = {0}", days_ago(1));
    let preference = h.fragment(&h.tenant, "preference", &fresh).await;
    let weak = h
        .fragment(
            &h.tenant,
            "fact",
            &format!("{fresh}, importance = 0.2, ttl_tier = 'warm'"),
        )
        .await;
    let useful = h
        .fragment(
            &h.tenant,
            "fact",
            &format!("{fresh}, importance = 0.5, ttl_tier = 'warm'"),
        )
        .await;
    let stale_hot = h
        .fragment(
            &h.tenant,
            "fact",
            &format!(
                "importance = 0.5, ttl_tier = 'hot', created_at = {0}, accessed_at = {0}",
                days_ago(8)
            ),
        )
        .await;
    let recent_hot = h
        .fragment(
            &h.tenant,
            "fact",
            &format!(
                "importance = 0.5, ttl_tier = 'hot', created_at = {0}, accessed_at = {0}",
                days_ago(6)
            ),
        )
        .await;
    let paroled = h
        .fragment(
            &h.tenant,
            "fact",
            &format!(
                "importance = 0.4, ttl_tier = 'permanent', created_at = {0}, accessed_at = {0}, last_decay_at = NOW",
                days_ago(200)
            ),
        )
        .await;

    let run = h
        .consolidator(settings())
        .run_tenant(h.tenant.tenant_id, now(), "manual", false, |_| {})
        .await
        .unwrap();
    assert!(!run.failed(), "{:?}", run.stages);
    assert!(h.has(preference, "ttl_tier = 'permanent'").await);
    assert!(h.has(weak, "ttl_tier = 'cold'").await);
    assert!(h.has(useful, "ttl_tier = 'warm'").await);
    assert!(
        h.has(stale_hot, "ttl_tier = 'warm'").await,
        "hot is demoted after 7 idle days"
    );
    assert!(h.has(recent_hot, "ttl_tier = 'hot'").await);
    assert!(h.has(paroled, "ttl_tier = 'cold'").await);
    let ttl = run
        .stages
        .iter()
        .find(|s| s.stage == "ttl_transition")
        .unwrap();
    // Three moves; the preference was stored permanent already.
    assert_eq!(ttl.affected, 3);
}

/// Five links make a memory permanent when agents made them: mneme's own
/// links (temporal neighbours, shared keywords) join every memory of a busy
/// topic to five others within a day, and would make all of them permanent.
#[tokio::test]
async fn only_links_made_by_agents_make_a_memory_permanent() {
    let h = harness().await;
    let fresh = format!(
        "importance = 0.5, ttl_tier = 'warm', created_at = {0}, accessed_at = {0}",
        days_ago(1)
    );
    let busy = h.fragment(&h.tenant, "fact", &fresh).await;
    let cited = h.fragment(&h.tenant, "fact", &fresh).await;
    let mut others = Vec::new();
    for _ in 0..5 {
        others.push(h.fragment(&h.tenant, "fact", &fresh).await);
    }
    h.sql(&h.tenant, "DELETE FROM mneme.fragment_links").await;
    for other in &others {
        h.sql(
            &h.tenant,
            &format!(
                "INSERT INTO mneme.fragment_links
                        (tenant_id, from_id, to_id, relation_type, weight, automatic)
                 VALUES (mneme.current_tenant_id(), '{busy}', '{other}', 'temporal', 1, true),
                        (mneme.current_tenant_id(), '{cited}', '{other}', 'caused_by', 1, false)"
            ),
        )
        .await;
    }
    let run = h
        .consolidator(settings())
        .run_tenant(h.tenant.tenant_id, now(), "manual", false, |_| {})
        .await
        .unwrap();
    assert!(!run.failed(), "{:?}", run.stages);
    assert!(h.has(cited, "ttl_tier = 'permanent'").await);
    assert!(
        h.has(busy, "ttl_tier = 'warm'").await,
        "mneme's own links made a memory permanent"
    );
}

#[tokio::test]
async fn importance_and_activation_decay_by_half_life_and_anchors_keep_their_importance() {
    let h = harness().await;
    let sixty_days = format!(
        "importance = 0.8, ttl_tier = 'warm', created_at = {0}, accessed_at = {0}, last_decay_at = NULL",
        days_ago(60)
    );
    let fact = h.fragment(&h.tenant, "fact", &sixty_days).await;
    let anchor = h
        .fragment(
            &h.tenant,
            "fact",
            &format!("{sixty_days}, is_anchor = true, ema_activation = 0.8"),
        )
        .await;
    let active = h
        .fragment(
            &h.tenant,
            "fact",
            &format!("{sixty_days}, ema_activation = 0.8"),
        )
        .await;
    let procedure = h.fragment(&h.tenant, "procedure", &sixty_days).await;
    h.consolidator(settings())
        .run_tenant(h.tenant.tenant_id, now(), "manual", false, |_| {})
        .await
        .unwrap();
    // Fact: half-life 60 days → 0.4; procedure: 30 days → 0.2; the anchor
    // keeps 0.8; activation 0.8 stretches the half-life to 84 days
    // (0.8 · 2^(−60/84) ≈ 0.49) and itself halves every 30 days (→ 0.2).
    assert!(h.has(fact, "round(importance * 100) = 40").await);
    assert!(h.has(procedure, "round(importance * 100) = 20").await);
    assert!(
        h.has(
            anchor,
            "round(importance * 100) = 80 AND round(ema_activation * 100) = 20"
        )
        .await
    );
    assert!(
        h.has(
            active,
            "round(importance * 100) = 49 AND round(ema_activation * 100) = 20"
        )
        .await
    );
    // A second run at the same instant changes nothing more.
    h.consolidator(settings())
        .run_tenant(h.tenant.tenant_id, now(), "manual", false, |_| {})
        .await
        .unwrap();
    assert!(h.has(fact, "round(importance * 100) = 40").await);
    assert!(h.has(active, "round(ema_activation * 100) = 20").await);
}

#[tokio::test]
async fn tool_feedback_calibrates_importance_once_with_a_cap_per_session() {
    let h = harness().await;
    let settled = "importance = 0.5, last_decay_at = NOW, accessed_at = NOW";
    let helpful = h.fragment(&h.tenant, "fact", settled).await;
    let useless = h.fragment(&h.tenant, "fact", settled).await;
    let chatty = h.fragment(&h.tenant, "fact", settled).await;
    let feedback = |session: &str, relevant: bool, sufficient: bool, id: Uuid| {
        format!(
            "INSERT INTO mneme.tool_feedback (tenant_id, key_id, session_id, tool_name, relevant,
                                              sufficient, fragment_ids)
             VALUES ('{}', '{}', '{session}', 'recall', {relevant}, {sufficient}, ARRAY['{id}'::uuid])",
            h.tenant.tenant_id, h.tenant.key_id
        )
    };
    h.sql(&h.tenant, &feedback("s-1", true, true, helpful))
        .await;
    h.sql(&h.tenant, &feedback("s-1", false, false, useless))
        .await;
    // 25 "relevant but not enough" in one session: only 20 count.
    for _ in 0..25 {
        h.sql(&h.tenant, &feedback("s-2", true, false, chatty))
            .await;
    }
    for _ in 0..2 {
        h.consolidator(settings())
            .run_tenant(h.tenant.tenant_id, now(), "manual", false, |_| {})
            .await
            .unwrap();
    }
    // Applied once although consolidation ran twice.
    assert!(h.has(helpful, "round(importance * 1000) = 525").await);
    assert!(h.has(useless, "round(importance * 1000) = 475").await);
    assert!(h.has(chatty, "round(importance * 1000) = 250").await);
    assert_eq!(
        h.count(&h.tenant, "tool_feedback", "calibrated_at IS NULL")
            .await,
        0
    );
}

#[tokio::test]
async fn old_unimportant_reflections_are_purged_but_the_newest_are_kept() {
    let h = harness().await;
    let mut reflections = Vec::new();
    // Reflections by `reflect` and by automatic reflection count together.
    for age in 40..47 {
        let source = if age % 2 == 0 {
            "reflect"
        } else {
            "auto_reflect"
        };
        let assignments = format!(
            "source = '{source}', importance = 0.2, last_decay_at = NOW, created_at = {}",
            days_ago(age)
        );
        reflections.push(h.fragment(&h.tenant, "fact", &assignments).await);
    }
    let important = h
        .fragment(
            &h.tenant,
            "fact",
            &format!(
                "source = 'reflect', importance = 0.5, last_decay_at = NOW, created_at = {}",
                days_ago(100)
            ),
        )
        .await;
    let run = h
        .consolidator(settings())
        .run_tenant(h.tenant.tenant_id, now(), "manual", false, |_| {})
        .await
        .unwrap();
    let purged = run
        .stages
        .iter()
        .find(|s| s.stage == "reflection_purge")
        .unwrap();
    assert_eq!(purged.affected, 2, "{:?}", run.stages);
    for (i, id) in reflections.iter().enumerate() {
        assert_eq!(h.has(*id, "true").await, i < 5, "reflection {i}");
    }
    assert!(h.has(important, "true").await);
}

#[tokio::test]
async fn garbage_collection_respects_grace_protection_and_the_per_run_cap() {
    let h = harness().await;
    let forgettable = format!(
        "importance = 0.1, access_count = 0, ttl_tier = 'warm', created_at = {0}, accessed_at = NULL",
        days_ago(40)
    );
    let first = h.fragment(&h.tenant, "fact", &forgettable).await;
    let second = h.fragment(&h.tenant, "decision", &forgettable).await;
    let anchored = h
        .fragment(
            &h.tenant,
            "fact",
            &format!("{forgettable}, is_anchor = true"),
        )
        .await;
    let young = h
        .fragment(
            &h.tenant,
            "fact",
            &format!(
                "importance = 0.1, access_count = 0, created_at = {}",
                days_ago(20)
            ),
        )
        .await;
    let used = h
        .fragment(
            &h.tenant,
            "fact",
            &format!(
                "importance = 0.5, access_count = 3, created_at = {}",
                days_ago(40)
            ),
        )
        .await;
    // The same in another tenant, which this run must not touch.
    let theirs = h.fragment(&h.other, "fact", &forgettable).await;

    let mut capped = settings();
    capped.gc_max_per_run = 1;
    let dry = h
        .consolidator(capped.clone())
        .run_tenant(h.tenant.tenant_id, now(), "manual", true, |_| {})
        .await
        .unwrap();
    let gc = |run: &mneme_store::consolidation::Run| {
        run.stages
            .iter()
            .find(|s| s.stage == "expired_delete")
            .unwrap()
            .affected
    };
    assert!(!dry.failed(), "{:?}", dry.stages);
    assert_eq!(gc(&dry), 1, "the dry run reports what it would delete");
    assert_eq!(
        h.count(&h.tenant, "fragments", "true").await,
        5,
        "and deletes nothing"
    );

    let run = h
        .consolidator(capped)
        .run_tenant(h.tenant.tenant_id, now(), "manual", false, |_| {})
        .await
        .unwrap();
    assert_eq!(gc(&run), 1);
    let run = h
        .consolidator(settings())
        .run_tenant(h.tenant.tenant_id, now(), "manual", false, |_| {})
        .await
        .unwrap();
    assert_eq!(gc(&run), 1);
    assert!(!h.has(first, "true").await && !h.has(second, "true").await);
    assert!(h.has(anchored, "true").await, "anchors are never collected");
    assert!(
        h.has(young, "true").await,
        "younger than 30 days for rule (b)"
    );
    assert!(h.has(used, "true").await);
    assert_eq!(
        h.count(&h.other, "fragments", &format!("id = '{theirs}'"))
            .await,
        1,
        "another tenant's memories are untouched"
    );
    // The runs are recorded, the dry one as such.
    assert_eq!(h.count(&h.tenant, "consolidation_runs", "dry_run").await, 1);
    assert_eq!(
        h.count(&h.tenant, "consolidation_runs", "NOT dry_run")
            .await,
        2
    );
    assert_eq!(h.count(&h.other, "consolidation_runs", "true").await, 0);
}

#[tokio::test]
async fn search_documents_of_older_rules_are_tokenised_again_per_tenant_with_a_cap() {
    let h = harness().await;
    // Unlabelled documents, as every fragment had before topic and keyword
    // positions were labelled (search_version 1).
    let legacy = "search_tsv = setweight(search_tsv, 'D'), search_version = 1";
    let first = h
        .statement(&h.tenant, "The nightly job finished.", "ledger", legacy)
        .await;
    let second = h
        .statement(&h.tenant, "The export ran late.", "ledger", legacy)
        .await;
    let current = h
        .statement(
            &h.tenant,
            "The backup was verified.",
            "ledger",
            "importance = importance",
        )
        .await;
    let theirs = h
        .statement(&h.other, "The nightly job failed.", "ledger", legacy)
        .await;
    let labelled =
        r#"search_version = 2 AND ts_filter(search_tsv, '{a}') = '''ledger'':1A'::tsvector"#;
    assert!(
        h.has(current, labelled).await,
        "a new fragment is written by the current rules (the column default is the code's version)"
    );
    assert!(!h.has(first, labelled).await);

    // Runs at the real time: at `now()`, years ahead, garbage collection
    // would take these fresh fragments first.
    let reindexed = |run: &mneme_store::consolidation::Run| {
        run.stages
            .iter()
            .find(|s| s.stage == "search_reindex")
            .unwrap()
            .affected
    };
    let mut capped = settings();
    capped.search_reindex_per_run = 1;
    let run = h
        .consolidator(capped)
        .run_tenant(h.tenant.tenant_id, Utc::now(), "manual", false, |_| {})
        .await
        .unwrap();
    assert!(!run.failed(), "{:?}", run.stages);
    assert_eq!(
        reindexed(&run),
        1,
        "one document per run, as capped: {:?}",
        run.stages
    );
    let run = h
        .consolidator(settings())
        .run_tenant(h.tenant.tenant_id, Utc::now(), "manual", false, |_| {})
        .await
        .unwrap();
    assert_eq!(reindexed(&run), 1, "the other one in the next run");
    for id in [first, second, current] {
        assert!(
            h.has(id, labelled).await,
            "{id} is written by the current rules"
        );
    }
    let run = h
        .consolidator(settings())
        .run_tenant(h.tenant.tenant_id, Utc::now(), "manual", false, |_| {})
        .await
        .unwrap();
    assert_eq!(reindexed(&run), 0, "nothing is left");
    assert_eq!(
        h.count(
            &h.other,
            "fragments",
            &format!("id = '{theirs}' AND search_version = 1")
        )
        .await,
        1,
        "another tenant's documents wait for that tenant's run"
    );
}

#[tokio::test]
async fn anchors_are_promoted_and_old_search_events_collected() {
    let h = harness().await;
    let popular = h
        .fragment(
            &h.tenant,
            "fact",
            "access_count = 10, importance = 0.85, accessed_at = NOW",
        )
        .await;
    let almost = h
        .fragment(
            &h.tenant,
            "fact",
            "access_count = 9, importance = 0.85, accessed_at = NOW",
        )
        .await;
    for age in [31, 29] {
        h.sql(
            &h.tenant,
            &format!(
                "INSERT INTO mneme.search_events (tenant_id, key_id, query_type, layers, result_count,
                                                  latency_ms, created_at)
                 VALUES ('{}', '{}', 'text', '{{}}', 1, 1.0, {})",
                h.tenant.tenant_id,
                h.tenant.key_id,
                days_ago(age)
            ),
        )
        .await;
    }
    let run = h
        .consolidator(settings())
        .run_tenant(h.tenant.tenant_id, now(), "manual", false, |_| {})
        .await
        .unwrap();
    assert!(!run.failed(), "{:?}", run.stages);
    assert!(h.has(popular, "is_anchor").await);
    assert!(h.has(almost, "NOT is_anchor").await);
    assert_eq!(h.count(&h.tenant, "search_events", "true").await, 1);
}

#[tokio::test]
async fn each_due_tenant_is_consolidated_once_however_many_consolidators_poll() {
    let h = harness().await;
    h.fragment(&h.tenant, "fact", "importance = 0.5").await;
    let mut fast = settings();
    fast.interval = Duration::from_secs(3600);
    let (a, b) = (h.consolidator(fast.clone()), h.consolidator(fast.clone()));
    let stop = CancellationToken::new();
    let (ran_a, ran_b) = tokio::join!(a.poll(&stop), b.poll(&stop));
    // Two tenants, each consolidated by exactly one of the two pollers.
    assert_eq!(ran_a.unwrap() + ran_b.unwrap(), 2);
    for tenant in [&h.tenant, &h.other] {
        assert_eq!(h.count(tenant, "consolidation_runs", "true").await, 1);
        assert_eq!(h.count(tenant, "consolidation_state", "runs = 1").await, 1);
    }
    // Not due again within the interval.
    assert_eq!(a.poll(&stop).await.unwrap(), 0);

    // A consolidator holding a tenant's lease (mid-run) keeps others off it;
    // once it dies (its transaction ends), the next poll takes over.
    h.sql(
        &h.tenant,
        "UPDATE mneme.consolidation_state SET last_started_at = NULL",
    )
    .await;
    let store = h.db.store();
    let mut held_client = store.client().await.unwrap();
    let held = TenantTx::begin(&mut held_client, h.tenant.tenant_id)
        .await
        .unwrap();
    held.query_one(
        "SELECT 1 FROM mneme.consolidation_state WHERE tenant_id = $1 FOR UPDATE",
        &[&h.tenant.tenant_id],
    )
    .await
    .unwrap();
    assert_eq!(b.poll(&stop).await.unwrap(), 0, "the lease is held");
    // Dropping a transaction queues its ROLLBACK; a round trip on the same
    // connection makes sure the server has run it before the next poll.
    drop(held);
    held_client.simple_query("SELECT 1").await.unwrap();
    drop(held_client);
    assert_eq!(
        b.poll(&stop).await.unwrap(),
        1,
        "taken over after the holder died"
    );
    assert_eq!(h.count(&h.tenant, "consolidation_runs", "true").await, 2);
}

#[tokio::test]
async fn contradictions_are_found_by_rules_within_a_key_and_topic_and_undecided_pairs_queued() {
    let h = harness().await;
    let at = |days: i64, axis_of: usize| {
        format!(
            "{}, importance = 0.6, last_decay_at = NOW, created_at = {}",
            axis(axis_of),
            days_ago(days)
        )
    };
    let kept_30 = h
        .statement(
            &h.tenant,
            "Backups are kept for 30 days.",
            "backups",
            &at(3, 0),
        )
        .await;
    let kept_14 = h
        .statement(
            &h.tenant,
            "Backups are kept for 14 days.",
            "backups",
            &at(2, 0),
        )
        .await;
    let uses = h
        .statement(&h.tenant, "The cache uses Redis.", "cache", &at(3, 1))
        .await;
    let does_not = h
        .statement(
            &h.tenant,
            "The cache does not use Redis.",
            "cache",
            &at(2, 1),
        )
        .await;
    let mondays = h
        .statement(&h.tenant, "Deploys run on Mondays.", "deploys", &at(3, 2))
        .await;
    let channel = h
        .statement(
            &h.tenant,
            "Deploys are announced in the ops channel.",
            "deploys",
            &at(2, 2),
        )
        .await;
    // The same numbers clash across topics: not compared.
    let elsewhere = h
        .statement(
            &h.tenant,
            "Backups are kept for 7 days.",
            "archive",
            &at(1, 0),
        )
        .await;
    // Another tenant's identical statements are never compared with these.
    h.statement(
        &h.other,
        "Backups are kept for 90 days.",
        "backups",
        &at(1, 0),
    )
    .await;

    let dry = h
        .consolidator(settings())
        .run_tenant(h.tenant.tenant_id, now(), "manual", true, |_| {})
        .await
        .unwrap();
    let found = |run: &mneme_store::consolidation::Run| {
        run.stages
            .iter()
            .find(|s| s.stage == "contradiction_detection")
            .unwrap()
            .affected
    };
    assert_eq!(found(&dry), 3, "{:?}", dry.stages);
    assert_eq!(
        h.count(&h.tenant, "contradiction_candidates", "true").await,
        0
    );

    let run = h
        .consolidator(settings())
        .run_tenant(h.tenant.tenant_id, now(), "manual", false, |_| {})
        .await
        .unwrap();
    assert_eq!(found(&run), 3, "{:?}", run.stages);
    let candidate = |newer: Uuid, older: Uuid, rest: &str| {
        format!("newer_id = '{newer}' AND older_id = '{older}' AND {rest}")
    };
    assert_eq!(
        h.count(
            &h.tenant,
            "contradiction_candidates",
            &candidate(
                kept_14,
                kept_30,
                "status = 'contradiction' AND reason = 'numeric_mismatch'"
            )
        )
        .await,
        1
    );
    assert_eq!(
        h.count(
            &h.tenant,
            "contradiction_candidates",
            &candidate(
                does_not,
                uses,
                "status = 'contradiction' AND reason = 'polarity'"
            )
        )
        .await,
        1
    );
    assert_eq!(
        h.count(
            &h.tenant,
            "contradiction_candidates",
            &candidate(
                channel,
                mondays,
                "status = 'pending' AND decided_at IS NULL"
            )
        )
        .await,
        1
    );
    assert_eq!(
        h.count(
            &h.tenant,
            "contradiction_candidates",
            &format!("newer_id = '{elsewhere}' OR older_id = '{elsewhere}'")
        )
        .await,
        0
    );
    for (newer, older) in [(kept_14, kept_30), (does_not, uses)] {
        assert_eq!(
            h.count(
                &h.tenant,
                "fragment_links",
                &format!(
                    "from_id = '{newer}' AND to_id = '{older}' AND relation_type = 'contradicts'"
                )
            )
            .await,
            1
        );
        assert!(
            h.has(older, "round(importance * 100) = 30").await,
            "the older one is weakened"
        );
        assert!(h.has(newer, "round(importance * 100) = 60").await);
    }
    assert_eq!(
        h.count(&h.other, "contradiction_candidates", "true").await,
        0
    );

    // Each fragment is checked once.
    let again = h
        .consolidator(settings())
        .run_tenant(h.tenant.tenant_id, now(), "manual", false, |_| {})
        .await
        .unwrap();
    assert_eq!(found(&again), 0);
}

/// An OpenAI-compatible chat stub: says "contradiction" when the notes
/// mention Fridays, "compatible" otherwise, or fails with 503 when `down`;
/// splits notes into their sentences; finds a note replaced when the newer
/// one says "moved"; finds notes that say "maybe" unsound.
#[derive(Default)]
struct Judge {
    calls: std::sync::atomic::AtomicUsize,
    down: bool,
    /// Answers, but never with a verdict.
    vague: bool,
}

async fn start_judge(down: bool) -> (Arc<Judge>, String) {
    start_judge_with(Judge {
        down,
        ..Judge::default()
    })
    .await
}

async fn start_judge_with(judge: Judge) -> (Arc<Judge>, String) {
    use axum::Json;
    use axum::extract::State;
    use axum::http::StatusCode;
    use serde_json::{Value, json};
    async fn complete(
        State(judge): State<Arc<Judge>>,
        Json(body): Json<Value>,
    ) -> Result<Json<Value>, StatusCode> {
        judge
            .calls
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if judge.down {
            return Err(StatusCode::SERVICE_UNAVAILABLE);
        }
        let prompt = body["messages"][1]["content"].as_str().unwrap_or_default();
        let instructions = body["messages"][0]["content"].as_str().unwrap_or_default();
        if instructions.contains("review a note") {
            let verdict = if prompt.contains("maybe") {
                "unsound"
            } else {
                "sound"
            };
            return Ok(Json(json!({"choices": [{"message": {"role": "assistant",
                "content": format!("{{\"verdict\": \"{verdict}\"}}")}}]})));
        }
        if instructions.contains("split a note") {
            // One part per sentence; a note that asks to stay whole gets a
            // single part, which is no split.
            let parts: Vec<String> = if prompt.contains("Keep me whole") {
                vec![prompt.to_owned()]
            } else {
                prompt
                    .split_inclusive(". ")
                    .map(|sentence| sentence.trim().to_owned())
                    .collect()
            };
            return Ok(Json(json!({"choices": [{"message": {"role": "assistant",
                "content": json!({"parts": parts}).to_string()}}]})));
        }
        if instructions.contains("replaces the first") {
            let verdict = if prompt.contains("moved") {
                "supersedes"
            } else {
                "independent"
            };
            return Ok(Json(json!({"choices": [{"message": {"role": "assistant",
                "content": format!("{{\"verdict\": \"{verdict}\"}}")}}]})));
        }
        if judge.vague {
            return Ok(Json(json!({"choices": [{"message": {"role": "assistant",
                "content": "Hard to say without more context."}}]})));
        }
        let verdict = if prompt.contains("Fridays") {
            "contradiction"
        } else {
            "compatible"
        };
        Ok(Json(json!({"choices": [{"message": {"role": "assistant",
            "content": format!("```json\n{{\"verdict\": \"{verdict}\"}}\n```")}}],
            "usage": {"total_tokens": 600}})))
    }
    let judge = Arc::new(judge);
    let app = axum::Router::new()
        .route("/v1/chat/completions", axum::routing::post(complete))
        .with_state(Arc::clone(&judge));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (judge, url)
}

fn with_llm(url: String) -> ConsolidationConfig {
    let mut settings = settings();
    settings.llm = vec![mneme_config::LlmConfig {
        url,
        api_key: None,
        model: "stub".into(),
        timeout: Duration::from_secs(5),
        concurrency: 2,
        breaker_failures: 2,
        breaker_cooldown: Duration::from_secs(600),
    }];
    settings
}

/// Three near-restatements the rules cannot decide, in one key and topic.
async fn undecided_pairs(h: &Harness) -> (Uuid, Uuid, Uuid) {
    let at = |days: i64, axis_of: usize| {
        format!(
            "{}, importance = 0.6, last_decay_at = NOW, created_at = {}",
            axis(axis_of),
            days_ago(days)
        )
    };
    let mondays = h
        .statement(&h.tenant, "Deploys run on Mondays.", "deploys", &at(3, 5))
        .await;
    let fridays = h
        .statement(&h.tenant, "Deploys run on Fridays.", "deploys", &at(2, 5))
        .await;
    let announced = h
        .statement(
            &h.tenant,
            "Deploys are announced in the ops channel.",
            "releases",
            &at(3, 6),
        )
        .await;
    h.statement(
        &h.tenant,
        "Release notes go out with every deploy.",
        "releases",
        &at(2, 6),
    )
    .await;
    (mondays, fridays, announced)
}

#[tokio::test]
async fn a_language_model_settles_pending_contradictions_and_its_absence_skips_the_stage() {
    let h = harness().await;
    let (mondays, fridays, _) = undecided_pairs(&h).await;
    let stage = |run: &mneme_store::consolidation::Run| {
        run.stages
            .iter()
            .find(|s| s.stage == "contradiction_adjudication")
            .unwrap()
            .clone()
    };
    // Without a model the pairs are queued and the judging stage skipped.
    let run = h
        .consolidator(settings())
        .run_tenant(h.tenant.tenant_id, now(), "manual", false, |_| {})
        .await
        .unwrap();
    assert_eq!(stage(&run).skipped.as_deref(), Some("no llm configured"));
    assert_eq!(
        h.count(&h.tenant, "contradiction_candidates", "status = 'pending'")
            .await,
        2
    );

    let (judge, url) = start_judge(false).await;
    let run = h
        .consolidator(with_llm(url))
        .run_tenant(h.tenant.tenant_id, now(), "manual", false, |_| {})
        .await
        .unwrap();
    assert_eq!(stage(&run).affected, 2, "{:?}", run.stages);
    assert_eq!(judge.calls.load(std::sync::atomic::Ordering::SeqCst), 2);
    assert_eq!(
        h.count(
            &h.tenant,
            "contradiction_candidates",
            &format!("newer_id = '{fridays}' AND status = 'contradiction' AND reason = 'llm'")
        )
        .await,
        1
    );
    assert_eq!(
        h.count(
            &h.tenant,
            "contradiction_candidates",
            "status = 'compatible'"
        )
        .await,
        1
    );
    assert_eq!(
        h.count(
            &h.tenant,
            "fragment_links",
            &format!(
                "from_id = '{fridays}' AND to_id = '{mondays}' AND relation_type = 'contradicts'"
            )
        )
        .await,
        1
    );
    assert!(h.has(mondays, "round(importance * 100) = 30").await);
}

#[tokio::test]
async fn a_failing_language_model_leaves_the_pairs_pending_and_trips_its_breaker() {
    let h = harness().await;
    undecided_pairs(&h).await;
    h.consolidator(settings())
        .run_tenant(h.tenant.tenant_id, now(), "manual", false, |_| {})
        .await
        .unwrap();
    let (judge, url) = start_judge(true).await;
    let consolidator = h.consolidator(with_llm(url));
    for _ in 0..2 {
        let run = consolidator
            .run_tenant(h.tenant.tenant_id, now(), "manual", false, |_| {})
            .await
            .unwrap();
        assert!(
            !run.failed(),
            "a failing model fails no stage: {:?}",
            run.stages
        );
    }
    assert_eq!(
        h.count(&h.tenant, "contradiction_candidates", "status = 'pending'")
            .await,
        2
    );
    // Two failures open the breaker; the second run makes no call at all.
    assert_eq!(judge.calls.load(std::sync::atomic::Ordering::SeqCst), 2);
    // Operators see it (nextest runs each test in a process of its own).
    let metrics = mneme_telemetry::metrics::render();
    assert!(
        metrics.contains("mneme_llm_breaker_open{provider=\"0\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("mneme_llm_call_seconds_count{provider=\"0\"} 2"),
        "{metrics}"
    );
}

#[tokio::test]
async fn near_duplicates_are_merged_into_the_newer_but_similar_different_statements_are_not() {
    let h = harness().await;
    let at = |days: i64, axis_of: usize| {
        format!(
            "{}, importance = 0.6, last_decay_at = NOW, created_at = {}",
            axis(axis_of),
            days_ago(days)
        )
    };
    let older = h
        .statement(
            &h.tenant,
            "Staging deploys need a green build first.",
            "deploys",
            &at(3, 10),
        )
        .await;
    let newer = h
        .statement(
            &h.tenant,
            "A green build is needed first for staging deploys.",
            "deploys",
            &at(2, 10),
        )
        .await;
    let linked = h
        .statement(
            &h.tenant,
            "The build farm runs on spot instances.",
            "builds",
            &at(3, 11),
        )
        .await;
    h.remember
        .link(
            &h.tenant.principal(),
            mneme_proto::v1::LinkRequest {
                from_id: older.to_string(),
                to_id: linked.to_string(),
                relation_type: "related".into(),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let mondays = h
        .statement(&h.tenant, "Deploys run on Mondays.", "schedule", &at(3, 12))
        .await;
    let fridays = h
        .statement(&h.tenant, "Deploys run on Fridays.", "schedule", &at(2, 12))
        .await;
    let thirty = h
        .statement(
            &h.tenant,
            "Backups are kept for 30 days.",
            "backups",
            &at(3, 13),
        )
        .await;
    let fourteen = h
        .statement(
            &h.tenant,
            "Backups are kept for 14 days.",
            "backups",
            &at(2, 13),
        )
        .await;

    let run = h
        .consolidator(settings())
        .run_tenant(h.tenant.tenant_id, now(), "manual", false, |_| {})
        .await
        .unwrap();
    let dedup = run.stages.iter().find(|s| s.stage == "dedup").unwrap();
    assert_eq!(dedup.affected, 1, "{:?}", run.stages);
    assert!(
        h.has(older, "valid_to IS NOT NULL").await,
        "the older duplicate is superseded"
    );
    assert!(h.has(newer, "valid_to IS NULL").await);
    let link = |from: Uuid, to: Uuid, relation: &str| {
        format!("from_id = '{from}' AND to_id = '{to}' AND relation_type = '{relation}'")
    };
    assert_eq!(
        h.count(
            &h.tenant,
            "fragment_links",
            &link(older, newer, "superseded_by")
        )
        .await,
        1
    );
    assert_eq!(
        h.count(&h.tenant, "fragment_links", &link(newer, linked, "related"))
            .await,
        1,
        "the duplicate's links move to the kept fragment"
    );
    for id in [mondays, fridays, thirty, fourteen] {
        assert!(
            h.has(id, "valid_to IS NULL").await,
            "different statements are kept"
        );
    }
}

fn provider(url: String) -> mneme_config::LlmConfig {
    mneme_config::LlmConfig {
        url,
        api_key: None,
        model: "stub".into(),
        timeout: Duration::from_secs(5),
        concurrency: 2,
        breaker_failures: 2,
        breaker_cooldown: Duration::from_secs(600),
    }
}

#[tokio::test]
async fn the_fallback_model_answers_when_the_first_fails() {
    let h = harness().await;
    undecided_pairs(&h).await;
    let (down, down_url) = start_judge(true).await;
    let (up, up_url) = start_judge(false).await;
    let mut settings = settings();
    settings.llm = vec![provider(down_url), provider(up_url)];
    let run = h
        .consolidator(settings)
        .run_tenant(h.tenant.tenant_id, now(), "manual", false, |_| {})
        .await
        .unwrap();
    let calls = |judge: &Judge| judge.calls.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(
        h.count(&h.tenant, "contradiction_candidates", "status = 'pending'")
            .await,
        0,
        "{:?}",
        run.stages
    );
    // Two pending pairs: the first model failed twice (then its breaker
    // opened), the fallback answered both.
    assert_eq!((calls(&down), calls(&up)), (2, 2));
    assert_eq!(
        h.count(&h.tenant, "llm_usage", "tokens = 1200 AND calls = 2")
            .await,
        1,
        "the tokens the fallback reported are counted"
    );
}

#[tokio::test]
async fn the_daily_token_budget_of_a_tenant_stops_the_model() {
    let h = harness().await;
    undecided_pairs(&h).await;
    let (judge, url) = start_judge(false).await;
    let mut settings = with_llm(url);
    settings.llm_tenant_daily_tokens = 500;
    let run = h
        .consolidator(settings)
        .run_tenant(h.tenant.tenant_id, now(), "manual", false, |_| {})
        .await
        .unwrap();
    let stage = run
        .stages
        .iter()
        .find(|s| s.stage == "contradiction_adjudication")
        .unwrap();
    // The first call costs 600 tokens; the budget stops the second.
    assert_eq!(judge.calls.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert_eq!(stage.affected, 1);
    assert_eq!(
        stage.skipped.as_deref(),
        Some("token budget of the day spent")
    );
    assert_eq!(
        h.count(&h.tenant, "contradiction_candidates", "status = 'pending'")
            .await,
        1
    );
    assert_eq!(h.count(&h.other, "llm_usage", "true").await, 0);
}

#[tokio::test]
async fn pairs_the_model_cannot_judge_are_parked_after_three_tries() {
    let h = harness().await;
    undecided_pairs(&h).await;
    let (judge, url) = start_judge_with(Judge {
        vague: true,
        ..Judge::default()
    })
    .await;
    let consolidator = h.consolidator(with_llm(url));
    for _ in 0..4 {
        consolidator
            .run_tenant(h.tenant.tenant_id, now(), "manual", false, |_| {})
            .await
            .unwrap();
    }
    // Two pairs, three tries each; the fourth run asks nothing.
    assert_eq!(judge.calls.load(std::sync::atomic::Ordering::SeqCst), 6);
    assert_eq!(
        h.count(
            &h.tenant,
            "contradiction_candidates",
            "status = 'parked' AND attempts = 3 AND error LIKE 'the answer held no %'"
        )
        .await,
        2
    );
}

#[tokio::test]
async fn a_language_model_decides_which_related_memories_replace_older_ones() {
    let h = harness().await;
    let settled = |days: i64| {
        format!(
            "importance = 0.6, last_decay_at = NOW, created_at = {}",
            days_ago(days)
        )
    };
    let old_time = h
        .statement(
            &h.tenant,
            "The team standup is at 09:30 in room 4.",
            "office",
            &format!("{}, {}", axis(20), settled(3)),
        )
        .await;
    let new_time = h
        .statement(
            &h.tenant,
            "The standup moved to 10:00 in room 2.",
            "office",
            &format!("{}, {}", leaning(20, 21, 0.9), settled(2)),
        )
        .await;
    let rack = h
        .statement(
            &h.tenant,
            "The office has a bike rack by the door.",
            "facilities",
            &format!("{}, {}", axis(22), settled(3)),
        )
        .await;
    let espresso = h
        .statement(
            &h.tenant,
            "The office kitchen has an espresso machine.",
            "facilities",
            &format!("{}, {}", leaning(22, 23, 0.9), settled(2)),
        )
        .await;
    let (judge, url) = start_judge(false).await;
    let consolidator = h.consolidator(with_llm(url));
    let calls = || judge.calls.load(std::sync::atomic::Ordering::SeqCst);

    let dry = consolidator
        .run_tenant(h.tenant.tenant_id, now(), "manual", true, |_| {})
        .await
        .unwrap();
    let review = |run: &mneme_store::consolidation::Run| {
        run.stages
            .iter()
            .find(|s| s.stage == "supersession_review")
            .unwrap()
            .affected
    };
    assert_eq!(review(&dry), 1, "{:?}", dry.stages);
    assert!(
        h.has(old_time, "valid_to IS NULL").await,
        "a dry run supersedes nothing"
    );

    let run = consolidator
        .run_tenant(h.tenant.tenant_id, now(), "manual", false, |_| {})
        .await
        .unwrap();
    assert_eq!(review(&run), 1, "{:?}", run.stages);
    assert!(
        h.has(old_time, "valid_to IS NOT NULL").await,
        "the old time is replaced"
    );
    assert_eq!(
        h.count(&h.tenant, "fragment_links",
            &format!("from_id = '{old_time}' AND to_id = '{new_time}' AND relation_type = 'superseded_by'")).await,
        1
    );
    assert!(h.has(rack, "valid_to IS NULL").await && h.has(espresso, "valid_to IS NULL").await);
    // Two questions per run (the dry run asked too); then every fragment is
    // reviewed and nothing is asked again.
    assert_eq!(calls(), 4);
    consolidator
        .run_tenant(h.tenant.tenant_id, now(), "manual", false, |_| {})
        .await
        .unwrap();
    assert_eq!(calls(), 4);
}

#[tokio::test]
async fn old_similar_unimportant_fragments_are_folded_into_the_most_important_of_their_group() {
    let h = harness().await;
    // Not recalled for 40 days, created 60 days ago; decayed just now.
    // Similarities stay below de-duplication's 0.95, which runs first.
    let recalled = |days: i64, importance: f64, vector: String| {
        format!(
            "{vector}, importance = {importance}, last_decay_at = NOW, created_at = {}, accessed_at = {}",
            days_ago(60),
            days_ago(days)
        )
    };
    let old = |importance: f64, vector: String| recalled(40, importance, vector);
    let kept = note(
        &h,
        &h.tenant,
        "Restart the queue worker when it stalls.",
        "runbooks",
        old(0.45, axis(20)),
    )
    .await;
    let folded = [
        note(
            &h,
            &h.tenant,
            "A stalled queue worker comes back after a restart.",
            "runbooks",
            old(0.3, leaning(20, 21, 0.93)),
        )
        .await,
        note(
            &h,
            &h.tenant,
            "Stalls of the queue worker are fixed by restarting it.",
            "runbooks",
            old(0.25, leaning(20, 22, 0.91)),
        )
        .await,
    ];
    let linked = note(
        &h,
        &h.tenant,
        "The queue worker runs on node 7.",
        "hosts",
        old(0.4, axis(30)),
    )
    .await;
    h.remember
        .link(
            &h.tenant.principal(),
            mneme_proto::v1::LinkRequest {
                from_id: folded[0].to_string(),
                to_id: linked.to_string(),
                relation_type: "related".into(),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let kept_apart = [
        // Below the similarity.
        note(
            &h,
            &h.tenant,
            "Queue workers log to the shared volume.",
            "runbooks",
            old(0.3, leaning(20, 23, 0.85)),
        )
        .await,
        // Recalled recently.
        note(
            &h,
            &h.tenant,
            "Queue worker stalls clear up with a restart.",
            "runbooks",
            recalled(5, 0.3, leaning(20, 24, 0.94)),
        )
        .await,
        // Important enough.
        note(
            &h,
            &h.tenant,
            "Restarting the stalled queue worker is the first step.",
            "runbooks",
            old(0.7, leaning(20, 25, 0.94)),
        )
        .await,
        // An anchor.
        note(
            &h,
            &h.tenant,
            "Restart any stalled queue worker at once.",
            "runbooks",
            format!("{}, is_anchor = true", old(0.3, leaning(20, 26, 0.94))),
        )
        .await,
        // Another topic.
        note(
            &h,
            &h.tenant,
            "Restart the queue worker when it stalls, says the wiki.",
            "wiki",
            old(0.3, leaning(20, 27, 0.94)),
        )
        .await,
        // Only two alike: below the group size.
        note(
            &h,
            &h.tenant,
            "Disk alerts page the on-call engineer.",
            "alerts",
            old(0.3, axis(40)),
        )
        .await,
        note(
            &h,
            &h.tenant,
            "The on-call engineer is paged for disk alerts.",
            "alerts",
            old(0.2, leaning(40, 41, 0.94)),
        )
        .await,
    ];
    // The same group in another tenant.
    let elsewhere = [
        note(
            &h,
            &h.other,
            "Restart the queue worker when it stalls.",
            "runbooks",
            old(0.45, axis(20)),
        )
        .await,
        note(
            &h,
            &h.other,
            "A stalled queue worker comes back after a restart.",
            "runbooks",
            old(0.3, leaning(20, 21, 0.93)),
        )
        .await,
        note(
            &h,
            &h.other,
            "Stalls of the queue worker are fixed by restarting it.",
            "runbooks",
            old(0.25, leaning(20, 22, 0.91)),
        )
        .await,
    ];

    let consolidator = h.consolidator(settings());
    let compression = |run: &mneme_store::consolidation::Run| {
        run.stages
            .iter()
            .find(|s| s.stage == "compression")
            .map(|s| s.affected)
    };
    let dry = consolidator
        .run_tenant(h.tenant.tenant_id, now(), "manual", true, |_| {})
        .await
        .unwrap();
    assert_eq!(compression(&dry), Some(2), "{:?}", dry.stages);
    assert!(
        h.has(folded[0], "valid_to IS NULL").await,
        "a dry run changes nothing"
    );

    let run = consolidator
        .run_tenant(h.tenant.tenant_id, now(), "manual", false, |_| {})
        .await
        .unwrap();
    assert_eq!(compression(&run), Some(2), "{:?}", run.stages);
    assert!(h.has(kept, "valid_to IS NULL").await);
    for id in folded {
        assert!(h.has(id, "valid_to IS NOT NULL").await, "folded away");
        assert_eq!(
            h.count(
                &h.tenant,
                "fragment_links",
                &format!(
                    "from_id = '{id}' AND to_id = '{kept}' AND relation_type = 'superseded_by'"
                )
            )
            .await,
            1
        );
    }
    assert_eq!(
        h.count(
            &h.tenant,
            "fragment_links",
            &format!("from_id = '{kept}' AND to_id = '{linked}' AND relation_type = 'related'")
        )
        .await,
        1,
        "a folded fragment's links move to the kept one"
    );
    for id in kept_apart {
        assert!(h.has(id, "valid_to IS NULL").await, "{id} was folded");
    }
    assert_eq!(
        h.db.count_rows(
            h.other.tenant_id,
            "fragments",
            &format!(
                "id IN ('{}', '{}', '{}') AND valid_to IS NULL",
                elsewhere[0], elsewhere[1], elsewhere[2]
            )
        )
        .await,
        3,
        "another tenant's fragments are untouched"
    );
}

/// What `run` recorded for the stage called `name`.
fn stage_of(run: &mneme_store::consolidation::Run, name: &str) -> StageResult {
    run.stages
        .iter()
        .find(|s| s.stage == name)
        .cloned()
        .unwrap_or_else(|| panic!("no stage {name} in {:?}", run.stages))
}

/// [`Harness::statement`] with owned assignments.
async fn note(
    h: &Harness,
    tenant: &TestTenant,
    content: &str,
    topic: &str,
    assignments: String,
) -> Uuid {
    h.statement(tenant, content, topic, &assignments).await
}

#[tokio::test]
async fn a_language_model_splits_long_fragments_into_linked_parts_and_leaves_the_rest() {
    let h = harness().await;
    let long = [
        "The API is deployed every Monday at 10:00 UTC by the on-call engineer of that week.",
        "Each deploy needs a green build of the main branch and a changelog entry in the release notes.",
        "Rollbacks use the previous container image, which the pipeline keeps for thirty days after every release.",
        "The database migrations run before the new pods start, and they must stay compatible with the old pods.",
    ]
    .join(" ");
    assert!(long.chars().count() > 300);
    // Stored short, then made long, as before a lower MNEME_MAX_CONTENT_CHARS.
    let set_content = |content: &str| {
        format!(
            "content = '{}', importance = 0.7, last_decay_at = NOW",
            content.replace('\'', "''")
        )
    };
    let deploys = h
        .statement(
            &h.tenant,
            "Deploy rules, long version.",
            "deploys",
            &set_content(&long),
        )
        .await;
    let whole = format!("Keep me whole. {long}");
    let kept = h
        .statement(
            &h.tenant,
            "A note that stays whole.",
            "deploys",
            &set_content(&whole),
        )
        .await;
    let short = h
        .statement(
            &h.tenant,
            "Deploys happen on Mondays.",
            "deploys",
            "last_decay_at = NOW",
        )
        .await;
    let episode = h
        .statement(
            &h.tenant,
            "The outage story, long version.",
            "incidents",
            &format!("type = 'episode', {}", set_content(&long)),
        )
        .await;
    let elsewhere = h
        .statement(
            &h.other,
            "Another tenant's long note.",
            "deploys",
            &set_content(&long),
        )
        .await;

    // Without a model the stage is skipped.
    let run = h
        .consolidator(settings())
        .run_tenant(h.tenant.tenant_id, now(), "manual", false, |_| {})
        .await
        .unwrap();
    let stage = |run: &mneme_store::consolidation::Run| stage_of(run, "split_long");
    assert_eq!(stage(&run).skipped.as_deref(), Some("no llm configured"));

    let (judge, url) = start_judge(false).await;
    let consolidator = h.consolidator(with_llm(url));
    let calls = || judge.calls.load(std::sync::atomic::Ordering::SeqCst);
    let dry = consolidator
        .run_tenant(h.tenant.tenant_id, now(), "manual", true, |_| {})
        .await
        .unwrap();
    assert_eq!(stage(&dry).affected, 5, "the original and its 4 parts");
    assert!(
        h.has(deploys, "valid_to IS NULL AND split_checked_at IS NULL")
            .await
    );
    assert_eq!(
        calls(),
        2,
        "the two long notes, not the episode or the short one"
    );

    let run = consolidator
        .run_tenant(h.tenant.tenant_id, now(), "manual", false, |_| {})
        .await
        .unwrap();
    assert_eq!(stage(&run).affected, 5, "{:?}", run.stages);
    assert!(
        h.has(deploys, "valid_to IS NOT NULL").await,
        "the original is history"
    );
    let parts = format!(
        "id IN (SELECT from_id FROM mneme.fragment_links
                 WHERE to_id = '{deploys}' AND relation_type = 'part_of')"
    );
    assert_eq!(h.count(&h.tenant, "fragments", &parts).await, 4);
    assert_eq!(
        h.count(
            &h.tenant,
            "fragments",
            &format!(
                "{parts} AND valid_to IS NULL AND topic = 'deploys' AND type = 'fact'
                 AND importance BETWEEN 0.69 AND 0.71 AND embedding IS NULL
                 AND char_length(content) <= 300"
            )
        )
        .await,
        4,
        "parts keep the original's topic, type and importance, and wait for embeddings"
    );
    assert_eq!(
        h.count(
            &h.tenant,
            "fragment_links",
            &format!(
                "relation_type = 'related' AND from_id IN (SELECT id FROM mneme.fragments WHERE {parts})"
            )
        )
        .await,
        6,
        "every pair of siblings is related"
    );
    for untouched in [kept, short, episode] {
        assert!(h.has(untouched, "valid_to IS NULL").await);
    }
    assert!(
        h.has(kept, "split_checked_at IS NOT NULL").await,
        "an answer that is no split settles the note"
    );
    assert_eq!(
        h.count(
            &h.other,
            "fragments",
            &format!("id = '{elsewhere}' AND valid_to IS NULL AND split_checked_at IS NULL")
        )
        .await,
        1,
        "another tenant's note is not touched"
    );

    // Everything long has been answered: nothing is asked again.
    assert_eq!(calls(), 4);
    let again = consolidator
        .run_tenant(h.tenant.tenant_id, now(), "manual", false, |_| {})
        .await
        .unwrap();
    assert_eq!(stage(&again).affected, 0);
    assert_eq!(calls(), 4);
}

#[tokio::test]
async fn a_language_model_reviews_decisions_preferences_and_relations_once() {
    let h = harness().await;
    let with_type = |kind: &str| format!("type = '{kind}', importance = 0.6, last_decay_at = NOW");
    let sound = h
        .statement(
            &h.tenant,
            "The store runs on PostgreSQL 15 with pgvector 0.8.",
            "stack",
            &with_type("decision"),
        )
        .await;
    let unsound = h
        .statement(
            &h.tenant,
            "The user maybe prefers tabs, or not.",
            "style",
            &with_type("preference"),
        )
        .await;
    let anchored = h
        .statement(
            &h.tenant,
            "We maybe move to Kubernetes at some point.",
            "stack",
            &format!("{}, is_anchor = true", with_type("decision")),
        )
        .await;
    let fact = h
        .statement(
            &h.tenant,
            "The build maybe takes four minutes.",
            "stack",
            "importance = 0.6, last_decay_at = NOW",
        )
        .await;
    let elsewhere = h
        .statement(
            &h.other,
            "Another tenant maybe decided this.",
            "stack",
            &with_type("decision"),
        )
        .await;
    let (judge, url) = start_judge(false).await;
    let consolidator = h.consolidator(with_llm(url));
    let calls = || judge.calls.load(std::sync::atomic::Ordering::SeqCst);
    let review = |run: &mneme_store::consolidation::Run| stage_of(run, "quality_review").affected;

    let run = consolidator
        .run_tenant(h.tenant.tenant_id, now(), "manual", false, |_| {})
        .await
        .unwrap();
    assert_eq!(review(&run), 3, "{:?}", run.stages);
    assert_eq!(calls(), 3, "the fact is not a reviewed type");
    assert!(
        h.has(
            sound,
            "quality_verified AND importance BETWEEN 0.59 AND 0.61"
        )
        .await
    );
    assert!(
        h.has(
            unsound,
            "quality_verified = false AND importance BETWEEN 0.29 AND 0.31"
        )
        .await,
        "an unsound preference loses half its importance"
    );
    assert!(
        h.has(
            anchored,
            "quality_verified = false AND importance BETWEEN 0.59 AND 0.61"
        )
        .await,
        "an anchor keeps its importance"
    );
    assert!(
        h.has(
            fact,
            "quality_verified IS NULL AND quality_checked_at IS NULL"
        )
        .await
    );
    assert_eq!(
        h.count(
            &h.other,
            "fragments",
            &format!("id = '{elsewhere}' AND quality_checked_at IS NULL")
        )
        .await,
        1,
        "another tenant's fragments wait for their own run"
    );

    // Reviewed once: the next run asks nothing and changes nothing.
    let again = consolidator
        .run_tenant(h.tenant.tenant_id, now(), "manual", false, |_| {})
        .await
        .unwrap();
    assert_eq!(review(&again), 0);
    assert_eq!(calls(), 3);
    assert!(h.has(unsound, "importance BETWEEN 0.29 AND 0.31").await);
}
