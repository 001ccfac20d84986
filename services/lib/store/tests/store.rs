//! The store against a real PostgreSQL with pgvector: schema, row-level
//! security, deduplication, forgetting, search layers and the embedding queue.

use std::collections::HashMap;

use mneme_core::Permission;
use mneme_core::fragment::{FragmentLimits, RememberInput, prepare};
use mneme_core::text::{FieldWeights, Tokenizer};
use mneme_store::api_keys::NewKey;
use mneme_store::fragments::{self, Author, ForgetTarget, RankTerms, SearchScope, WriteOutcome};
use mneme_store::{
    StatisticsUpkeep, Store, StoreOptions, TenantTx, api_keys, cases, key_groups, links, tenants,
};
use mneme_test_support::{ALL_PERMISSIONS, TestDatabase, TestTenant, create_tenant};
use pgvector::Vector;
use uuid::Uuid;

fn prepared(content: &str, topic: &str) -> mneme_core::fragment::PreparedFragment {
    prepare(
        RememberInput {
            content: content.into(),
            topic: topic.into(),
            fragment_type: "fact".into(),
            ..Default::default()
        },
        &FragmentLimits::default(),
        &Tokenizer::default(),
    )
    .expect("valid fragment")
}

/// The full-text field weights of the default configuration.
const FIELDS: FieldWeights = FieldWeights {
    topic: 10.0,
    keywords: 1.0,
};

async fn remember(store: &Store, tenant: &TestTenant, content: &str) -> Uuid {
    remember_in(store, tenant, content, "test").await
}

async fn remember_in(store: &Store, tenant: &TestTenant, content: &str, topic: &str) -> Uuid {
    let mut client = store.client().await.unwrap();
    let tx = TenantTx::begin(&mut client, tenant.tenant_id)
        .await
        .unwrap();
    let written = fragments::insert(&tx, author(tenant), &prepared(content, topic))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    written.id
}

fn author(tenant: &TestTenant) -> Author<'static> {
    Author {
        key_id: tenant.key_id,
        agent_id: "default",
        session_id: None,
    }
}

fn scope(keys: &[Uuid]) -> SearchScope<'_> {
    SearchScope {
        key_ids: keys,
        agent_id: "default",
        ..SearchScope::default()
    }
}

/// A tenant holding one memory about a ledger among 3,000 about the
/// weather, written in one bulk insert and analysed: finding the rare term
/// through its index is then the cheapest plan, if the index may be used.
async fn ledger_among_fillers(db: &TestDatabase, store: &Store, name: &str) -> TestTenant {
    let tenant = create_tenant(store, name, ALL_PERMISSIONS).await;
    remember(store, &tenant, "The ledger closes at midnight UTC.").await;
    let fillers: Vec<_> = (0..3000)
        .map(|i| prepared(&format!("Filler note {i} about the weather."), "test"))
        .collect();
    let mut client = store.client().await.unwrap();
    let tx = TenantTx::begin(&mut client, tenant.tenant_id)
        .await
        .unwrap();
    let rows: Vec<_> = fillers.iter().map(|f| (author(&tenant), f)).collect();
    fragments::insert_many(&tx, &rows).await.unwrap();
    tx.commit().await.unwrap();
    db.owner_client()
        .await
        .batch_execute("ANALYZE mneme.fragments")
        .await
        .unwrap();
    tenant
}

/// The plan, as `EXPLAIN (<options>)` prints it, of a search of the
/// transaction's tenant for `condition`.
async fn explain(tx: &TenantTx<'_>, options: &str, condition: &str) -> Vec<String> {
    plan_lines(
        tx,
        &format!(
            "EXPLAIN ({options}) SELECT id FROM mneme.fragments
              WHERE tenant_id = $1 AND {condition}"
        ),
        &[&tx.tenant_id()],
    )
    .await
}

/// The lines an `EXPLAIN` statement prints.
async fn plan_lines(
    tx: &TenantTx<'_>,
    statement: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> Vec<String> {
    tx.query(statement, params)
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect()
}

/// Searches read the GIN indexes whole, not through a pending list of
/// unmerged entries (migrations/V25): right after a bulk write, with no
/// VACUUM in between, a rare term's index search reads a handful of pages
/// (60 with the pending list 3,000 new memories leave).
#[tokio::test]
async fn gin_indexes_serve_searches_right_after_writes() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let lazy: Vec<String> = db
        .owner_client()
        .await
        .query(
            "SELECT c.oid::regclass::text FROM pg_class c JOIN pg_am am ON am.oid = c.relam
              WHERE am.amname = 'gin' AND c.relkind = 'i'
                AND c.relnamespace = 'mneme'::regnamespace
                AND NOT coalesce('fastupdate=off' = ANY(c.reloptions), false)",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert!(lazy.is_empty(), "GIN indexes with a pending list: {lazy:?}");

    let tenant = ledger_among_fillers(&db, &store, "fresh").await;
    let mut client = store.client().await.unwrap();
    let tx = TenantTx::begin(&mut client, tenant.tenant_id)
        .await
        .unwrap();
    let plan = explain(&tx, "ANALYZE, BUFFERS", "search_tsv @@ 'ledger'::tsquery").await;
    let index_scan = plan
        .iter()
        .position(|line| line.contains("Bitmap Index Scan"))
        .unwrap_or_else(|| panic!("the search did not use its index: {plan:#?}"));
    let buffers: u64 = plan[index_scan..]
        .iter()
        .find_map(|line| line.trim().strip_prefix("Buffers: shared hit="))
        .and_then(|hits| hits.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no buffer count: {plan:#?}"));
    assert!(
        buffers < 20,
        "the index search read {buffers} pages: {plan:#?}"
    );
}

/// Under row-level security only leakproof conditions may be evaluated by
/// an index ahead of the policy; the set-up marks the full-text and keyword
/// operators so (migrations/V23), and their indexes must then answer.
#[tokio::test]
async fn text_and_keyword_indexes_serve_searches_under_row_level_security() {
    let db = TestDatabase::create().await;
    let store = db.store();
    assert!(store.check_search_operators().await.unwrap());
    let tenant = ledger_among_fillers(&db, &store, "indexed").await;
    let mut client = store.client().await.unwrap();
    let tx = TenantTx::begin(&mut client, tenant.tenant_id)
        .await
        .unwrap();
    tx.batch_execute("SET LOCAL enable_seqscan = off")
        .await
        .unwrap();
    for condition in [
        "search_tsv @@ 'ledger'::tsquery",
        "keyword_hashes && mneme.keyword_hashes($1, ARRAY['ledger'])",
    ] {
        let plan = explain(&tx, "COSTS", condition).await;
        let index_condition = plan
            .iter()
            .find(|line| line.contains("Index Cond"))
            .unwrap_or_else(|| panic!("no index condition for {condition}: {plan:#?}"));
        let operator = if condition.contains("@@") { "@@" } else { "&&" };
        assert!(
            index_condition.contains(operator),
            "{condition} is filtered after the index, not searched in it: {plan:#?}"
        );
    }
}

/// The keyword index lists one tenant's memories per entry: a keyword's
/// hash depends on the tenant, and a memory's hashes follow its keywords
/// when they change (migrations/V30).
#[tokio::test]
async fn keyword_hashes_are_per_tenant_and_follow_the_keywords() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let tenant = create_tenant(&store, "hashed", ALL_PERMISSIONS).await;
    let id = remember(&store, &tenant, "The ledger closes at midnight UTC.").await;
    let mut client = store.client().await.unwrap();
    let tx = TenantTx::begin(&mut client, tenant.tenant_id)
        .await
        .unwrap();
    let other_tenant = Uuid::new_v4();
    let row = tx
        .query_one(
            "SELECT mneme.keyword_hashes($1, ARRAY['ledger', 'wal']),
                    mneme.keyword_hashes($2, ARRAY['ledger', 'wal']),
                    mneme.keyword_hashes($1, ARRAY['wal'])",
            &[&tenant.tenant_id, &other_tenant],
        )
        .await
        .unwrap();
    let (own, others, wal): (Vec<i64>, Vec<i64>, Vec<i64>) = (row.get(0), row.get(1), row.get(2));
    assert_eq!(own.len(), 2);
    assert_eq!(own[1..], wal[..], "one hash per keyword, in order");
    assert!(
        own.iter().all(|hash| !others.contains(hash)),
        "another tenant's hashes of the same keywords: {own:?} {others:?}"
    );

    let matches = |keyword: &'static str| {
        let tx = &tx;
        async move {
            tx.query_one(
                "SELECT count(*) FROM mneme.fragments
                  WHERE tenant_id = $1 AND id = $2
                    AND keyword_hashes && mneme.keyword_hashes($1, ARRAY[$3])",
                &[&tenant.tenant_id, &id, &keyword],
            )
            .await
            .unwrap()
            .get::<_, i64>(0)
        }
    };
    assert_eq!(matches("ledger").await, 1);
    tx.execute(
        "UPDATE mneme.fragments SET keywords = ARRAY['audit'] WHERE tenant_id = $1 AND id = $2",
        &[&tenant.tenant_id, &id],
    )
    .await
    .unwrap();
    assert_eq!(matches("ledger").await, 0);
    assert_eq!(matches("audit").await, 1);
}

#[tokio::test]
async fn service_role_is_checked_and_owner_role_refused() {
    let db = TestDatabase::create().await;
    db.store().check_service_role(false).await.unwrap();
    db.store().check_embedding_dimension(384).await.unwrap();
    let err = db.store().check_embedding_dimension(768).await.unwrap_err();
    assert!(err.to_string().contains("vector(384)"), "{err}");

    let owner = Store::connect(&db.owner_url, &StoreOptions::default()).unwrap();
    let err = owner.check_service_role(false).await.unwrap_err();
    assert!(err.to_string().contains("owns mneme's tables"), "{err}");
    owner.check_service_role(true).await.unwrap();
}

/// A statement the planner estimates as expensive is not compiled: JIT
/// spent 0.6-1.0 s compiling 20 ms link lookups (docs/BENCHMARKS.md).
/// The start-up check reports autovacuum as the server runs it (read here
/// from `pg_settings`, in seconds, not by the check's own interval parsing)
/// and exports it.
#[tokio::test]
async fn statistics_upkeep_is_reported_as_the_server_runs_it() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let row = db
        .owner_client()
        .await
        .query_one(
            "SELECT (SELECT setting FROM pg_settings WHERE name = 'autovacuum'),
                    (SELECT setting::int8 FROM pg_settings WHERE name = 'autovacuum_naptime')",
            &[],
        )
        .await
        .unwrap();
    let (autovacuum, naptime_secs): (String, i64) = (row.get(0), row.get(1));
    let expected = StatisticsUpkeep {
        autovacuum: autovacuum == "on",
        naptime: std::time::Duration::from_secs(naptime_secs as u64),
    };

    assert_eq!(store.check_statistics_upkeep().await.unwrap(), expected);
    let exported = if expected.autovacuum { naptime_secs } else { 0 };
    assert!(
        mneme_telemetry::metrics::render()
            .lines()
            .any(|line| line == format!("mneme_db_autovacuum_naptime_seconds {exported}")),
        "the gauge reads {exported}"
    );
}

#[tokio::test]
async fn statements_are_never_jit_compiled_however_costly_their_estimate() {
    let db = TestDatabase::create().await;
    let tenant = create_tenant(&db.store(), "jit", ALL_PERMISSIONS).await;
    let mut client = db.store().client().await.unwrap();
    let tx = TenantTx::begin(&mut client, tenant.tenant_id)
        .await
        .unwrap();
    let plan = plan_lines(
        &tx,
        "EXPLAIN SELECT sum(g) FROM generate_series(1, 100000000) g",
        &[],
    )
    .await;
    let cost: f64 = plan[0]
        .split("cost=")
        .nth(1)
        .and_then(|rest| rest.split("..").nth(1))
        .and_then(|total| total.split(' ').next())
        .and_then(|total| total.parse().ok())
        .expect("a total cost in the plan");
    assert!(
        cost > 1_000_000.0,
        "the estimate passes every JIT threshold: {plan:?}"
    );
    assert!(!plan.iter().any(|line| line.starts_with("JIT")), "{plan:?}");
}

#[tokio::test]
async fn database_errors_say_what_failed_without_quoting_values() {
    let db = TestDatabase::create().await;
    let client = db.store().client().await.unwrap();
    let error = |result: Result<Vec<tokio_postgres::Row>, tokio_postgres::Error>| {
        mneme_store::StoreError::from(result.unwrap_err()).to_string()
    };

    let missing = error(client.query("SELECT * FROM mneme.no_such_table", &[]).await);
    assert!(missing.contains("ERROR 42P01"), "{missing}");
    assert!(missing.contains("no_such_table"), "{missing}");

    // A data exception quotes the value it could not read: code only.
    let malformed = error(
        client
            .query("SELECT 'sk-not-for-the-logs'::uuid", &[])
            .await,
    );
    assert!(malformed.contains("ERROR 22P02"), "{malformed}");
    assert!(!malformed.contains("sk-not-for-the-logs"), "{malformed}");

    // A violation's detail quotes the row: the constraint is named, the
    // value is not.
    client
        .batch_execute(
            "CREATE TEMP TABLE ledger (entry int PRIMARY KEY);
             INSERT INTO ledger VALUES (987654)",
        )
        .await
        .unwrap();
    let violation = error(
        client
            .query("INSERT INTO ledger VALUES (987654)", &[])
            .await,
    );
    assert!(
        violation.starts_with("database: ERROR 23505"),
        "{violation}"
    );
    assert!(
        violation.contains("(constraint ledger_pkey)"),
        "{violation}"
    );
    assert!(!violation.contains("987654"), "{violation}");
}

#[tokio::test]
async fn row_level_security_hides_other_tenants_even_without_predicates() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let a = create_tenant(&store, "alpha", ALL_PERMISSIONS).await;
    let b = create_tenant(&store, "beta", ALL_PERMISSIONS).await;
    remember(&store, &a, "Alpha's deploys run from the blue pipeline.").await;
    remember(&store, &b, "Beta's deploys run from the green pipeline.").await;

    let mut client = store.client().await.unwrap();
    // No tenant set: nothing is visible at all.
    let count: i64 = client
        .query_one("SELECT count(*) FROM mneme.fragments", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(count, 0);
    let keys: i64 = client
        .query_one("SELECT count(*) FROM mneme.api_keys", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(keys, 0);

    // Tenant A set: a query that forgets the tenant predicate still sees A only.
    let tx = TenantTx::begin(&mut client, a.tenant_id).await.unwrap();
    let rows = tx
        .query("SELECT content FROM mneme.fragments", &[])
        .await
        .unwrap();
    assert_eq!(rows.len(), 1);
    assert!(rows[0].get::<_, String>(0).starts_with("Alpha"));
    // Writing a row for another tenant is refused by the policy.
    let err = tx
        .execute("UPDATE mneme.fragments SET tenant_id = $1", &[&b.tenant_id])
        .await
        .unwrap_err();
    let message = err.as_db_error().expect("a database error").message();
    assert!(message.contains("row-level security"), "{message}");
}

#[tokio::test]
async fn duplicates_and_idempotent_retries_return_the_original() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let t = create_tenant(&store, "dedupe", ALL_PERMISSIONS).await;
    let mut client = store.client().await.unwrap();
    let tx = TenantTx::begin(&mut client, t.tenant_id).await.unwrap();

    let first = fragments::insert(
        &tx,
        author(&t),
        &prepared("The cache TTL is ten minutes.", "cache"),
    )
    .await
    .unwrap();
    assert_eq!(first.outcome, WriteOutcome::Created);
    let mut more_important = prepared("The cache TTL is ten minutes.", "cache");
    more_important.importance = 0.7;
    let second = fragments::insert(&tx, author(&t), &more_important)
        .await
        .unwrap();
    assert_eq!(
        (second.id, second.outcome),
        (first.id, WriteOutcome::Duplicate)
    );
    assert_eq!(second.importance, 0.7);

    let mut keyed = prepared("Retries use exponential backoff.", "http");
    keyed.idempotency_key = Some("req-1".into());
    let created = fragments::insert(&tx, author(&t), &keyed).await.unwrap();
    let mut retried = prepared("Retries use exponential backoff.", "http");
    retried.idempotency_key = Some("req-1".into());
    retried.importance = 0.9;
    let replay = fragments::insert(&tx, author(&t), &retried).await.unwrap();
    assert_eq!(
        (replay.id, replay.outcome, replay.importance),
        (created.id, WriteOutcome::Replayed, created.importance),
        "a retry returns what the first attempt stored"
    );
    // The key reused for another memory: told apart, nothing written.
    let mut reused = prepared("Retries use exponential backoff, capped.", "http");
    reused.idempotency_key = Some("req-1".into());
    let taken = fragments::insert(&tx, author(&t), &reused).await.unwrap();
    assert_eq!(
        (taken.id, taken.outcome),
        (created.id, WriteOutcome::KeyTaken)
    );
    let count: i64 = tx
        .query_one(
            "SELECT count(*) FROM mneme.fragments WHERE topic = 'http'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(count, 1);
    // A retry of the first request after the memory was amended still
    // replays.
    tx.execute(
        "INSERT INTO mneme.fragment_versions
             (tenant_id, fragment_id, content, topic, keywords, type, importance, is_anchor,
              amended_by)
         SELECT tenant_id, id, content, topic, keywords, type, importance, is_anchor, key_id
           FROM mneme.fragments WHERE id = $1",
        &[&created.id],
    )
    .await
    .unwrap();
    tx.execute(
        "UPDATE mneme.fragments SET content = 'Retries back off, at most 30 s apart.',
                content_hash = 'amended' WHERE id = $1",
        &[&created.id],
    )
    .await
    .unwrap();
    let after_amend = fragments::insert(&tx, author(&t), &keyed).await.unwrap();
    assert_eq!(after_amend.outcome, WriteOutcome::Replayed);
    tx.commit().await.unwrap();
}

#[tokio::test]
async fn duplicates_are_settled_together_and_only_rewritten_when_raised() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let t = create_tenant(&store, "dedupe-many", ALL_PERMISSIONS).await;
    let other = create_tenant(&store, "dedupe-other", ALL_PERMISSIONS).await;
    remember(&store, &other, "The queue drains every hour.").await;
    let mut client = store.client().await.unwrap();
    let tx = TenantTx::begin(&mut client, t.tenant_id).await.unwrap();
    let mut low = prepared("The queue drains every hour.", "queue");
    low.importance = 0.4;
    let kept = fragments::insert(&tx, author(&t), &low).await.unwrap();
    let raised = fragments::insert(
        &tx,
        author(&t),
        &prepared("Backups run at 02:00.", "backup"),
    )
    .await
    .unwrap();
    let version = |id: Uuid| {
        let tx = &tx;
        async move {
            tx.query_one(
                "SELECT ctid::text FROM mneme.fragments WHERE tenant_id = $1 AND id = $2",
                &[&tx.tenant_id(), &id],
            )
            .await
            .unwrap()
            .get::<_, String>(0)
        }
    };
    let (kept_before, raised_before) = (version(kept.id).await, version(raised.id).await);

    let mut lower = prepared("The queue drains every hour.", "queue");
    lower.importance = 0.2;
    let mut higher = prepared("Backups run at 02:00.", "backup");
    higher.importance = 0.9;
    let mut anchor = prepared("Backups run at 02:00.", "backup");
    anchor.importance = 0.1;
    anchor.is_anchor = true;
    let unknown = prepared("Nobody stored this yet.", "misc");
    let settled =
        fragments::settle_duplicates(&tx, t.key_id, &[&lower, &higher, &unknown, &anchor])
            .await
            .unwrap();

    let outcome = |w: &Option<fragments::Written>| w.as_ref().map(|w| (w.id, w.outcome));
    assert_eq!(
        outcome(&settled[0]),
        Some((kept.id, WriteOutcome::Duplicate))
    );
    assert_eq!(
        outcome(&settled[1]),
        Some((raised.id, WriteOutcome::Duplicate))
    );
    assert_eq!(settled[2], None, "content the key does not hold");
    assert_eq!(
        outcome(&settled[3]),
        Some((raised.id, WriteOutcome::Duplicate))
    );
    // The largest importance asked for wins; a lower one changes nothing.
    assert_eq!(settled[0].as_ref().unwrap().importance, 0.4);
    assert_eq!(settled[1].as_ref().unwrap().importance, 0.9);
    let anchored: bool = tx
        .query_one(
            "SELECT is_anchor FROM mneme.fragments WHERE tenant_id = $1 AND id = $2",
            &[&tx.tenant_id(), &raised.id],
        )
        .await
        .unwrap()
        .get(0);
    assert!(anchored);
    assert_eq!(
        version(kept.id).await,
        kept_before,
        "an unchanged row is not rewritten"
    );
    assert_ne!(version(raised.id).await, raised_before);
    tx.commit().await.unwrap();
}

#[tokio::test]
async fn forget_is_tenant_scoped_and_respects_protection() {
    async fn forget(
        tx: &TenantTx<'_>,
        keys: &[Uuid],
        target: ForgetTarget<'_>,
        force: bool,
    ) -> fragments::Forgotten {
        fragments::forget(tx, keys[0], keys, "default", target, force, false)
            .await
            .unwrap()
    }

    let db = TestDatabase::create().await;
    let store = db.store();
    let a = create_tenant(&store, "owner-a", ALL_PERMISSIONS).await;
    let b = create_tenant(&store, "owner-b", ALL_PERMISSIONS).await;
    let id = remember(&store, &a, "Tenant A keeps its invoices in S3.").await;

    let mut client = store.client().await.unwrap();
    let tx = TenantTx::begin(&mut client, b.tenant_id).await.unwrap();
    let other_tenant = forget(&tx, &[b.key_id], ForgetTarget::Id(id), true).await;
    assert!(!other_tenant.matched && other_tenant.deleted.is_empty());
    let random = forget(&tx, &[b.key_id], ForgetTarget::Id(Uuid::new_v4()), true).await;
    assert_eq!(random, other_tenant);
    drop(tx);

    let tx = TenantTx::begin(&mut client, a.tenant_id).await.unwrap();
    let mut anchor = prepared(
        "Never rotate the root CA without a change ticket.",
        "security",
    );
    anchor.is_anchor = true;
    anchor.ttl_tier = mneme_core::TtlTier::Permanent;
    let anchor = fragments::insert(&tx, author(&a), &anchor).await.unwrap();
    let kept = forget(&tx, &[a.key_id], ForgetTarget::Id(anchor.id), false).await;
    assert_eq!(
        (kept.matched, kept.protected, kept.deleted.len()),
        (true, 1, 0)
    );
    let forced = forget(&tx, &[a.key_id], ForgetTarget::Id(anchor.id), true).await;
    assert_eq!(forced.deleted, vec![anchor.id]);
    let plain = forget(&tx, &[a.key_id], ForgetTarget::Id(id), false).await;
    assert_eq!(plain.deleted, vec![id]);
    tx.commit().await.unwrap();
}

#[tokio::test]
async fn api_keys_authenticate_only_when_valid_and_active() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let t = create_tenant(&store, "keys", &[Permission::Read]).await;
    let mut client = store.client().await.unwrap();

    let found = api_keys::authenticate(&mut client, &t.api_key)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((found.key.id, found.key.tenant_id), (t.key_id, t.tenant_id));
    assert_eq!(found.key.permissions, vec![Permission::Read]);
    assert!(found.group_key_ids.is_empty());

    // Same prefix, wrong secret.
    let forged = format!(
        "{}{}",
        &t.api_key[..t.api_key.len() - 1],
        if t.api_key.ends_with('a') { 'b' } else { 'a' }
    );
    assert!(
        api_keys::authenticate(&mut client, &forged)
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        api_keys::authenticate(&mut client, "mn_garbage")
            .await
            .unwrap()
            .is_none()
    );

    let tx = TenantTx::begin(&mut client, t.tenant_id).await.unwrap();
    assert!(api_keys::revoke(&tx, t.key_id).await.unwrap());
    tx.commit().await.unwrap();
    assert!(
        api_keys::authenticate(&mut client, &t.api_key)
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test]
async fn tenant_names_are_unique() {
    let db = TestDatabase::create().await;
    let client = db.store().client().await.unwrap();
    tenants::create(&client, "dup").await.unwrap();
    let err = tenants::create(&client, "dup").await.unwrap_err();
    assert!(err.is_unique_violation());
}

#[tokio::test]
async fn fulltext_and_keyword_layers_find_korean_and_english() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let t = create_tenant(&store, "search", ALL_PERMISSIONS).await;
    let espresso = remember(&store, &t, "사용자는 매일 아침 에스프레소를 두 잔 마신다.").await;
    let deploy = remember(&store, &t, "Deployments are blocked on Fridays after noon.").await;
    let tokenizer = Tokenizer::default();

    let mut client = store.client().await.unwrap();
    let tx = TenantTx::begin(&mut client, t.tenant_id).await.unwrap();
    let keys = [t.key_id];
    let korean = tokenizer.tsquery_literal("에스프레소 좋아해?").unwrap();
    let hits = fragments::fulltext_search(
        &tx,
        &scope(&keys),
        &korean,
        &RankTerms::whole(&korean),
        FIELDS,
        10,
    )
    .await
    .unwrap();
    assert_eq!(
        hits.iter().map(|h| h.id).collect::<Vec<_>>(),
        vec![espresso]
    );
    let english = tokenizer
        .tsquery_literal("when are deploys blocked")
        .unwrap();
    let hits = fragments::fulltext_search(
        &tx,
        &scope(&keys),
        &english,
        &RankTerms::whole(&english),
        FIELDS,
        10,
    )
    .await
    .unwrap();
    assert_eq!(hits.first().map(|h| h.id), Some(deploy));

    let hits = fragments::keyword_search(&tx, &scope(&keys), &["deployments".into()], 10)
        .await
        .unwrap();
    assert_eq!(hits.iter().map(|h| h.id).collect::<Vec<_>>(), vec![deploy]);
    // Another key of the same tenant sees nothing of this key's fragments.
    let other = [Uuid::new_v4()];
    assert!(
        fragments::fulltext_search(
            &tx,
            &scope(&other),
            &english,
            &RankTerms::whole(&english),
            FIELDS,
            10
        )
        .await
        .unwrap()
        .is_empty()
    );
}

#[tokio::test]
async fn fulltext_matches_by_its_filter_and_ranks_by_every_term() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let t = create_tenant(&store, "narrowed", ALL_PERMISSIONS).await;
    let both = remember(&store, &t, "The canary deploy of the ledger failed.").await;
    let rare = remember(&store, &t, "A canary build was promoted.").await;
    remember(&store, &t, "The ledger deploy finished.").await;
    let tokenizer = Tokenizer::default();

    let mut client = store.client().await.unwrap();
    let tx = TenantTx::begin(&mut client, t.tenant_id).await.unwrap();
    let keys = [t.key_id];
    let rank = tokenizer.tsquery_literal("canary ledger deploy").unwrap();
    let filter = tokenizer.tsquery_literal("canary").unwrap();
    let hits = fragments::fulltext_search(
        &tx,
        &scope(&keys),
        &filter,
        &RankTerms::whole(&rank),
        FIELDS,
        10,
    )
    .await
    .unwrap();
    // Only fragments with the filter's term; the one sharing more of the
    // ranking terms first.
    assert_eq!(
        hits.iter().map(|h| h.id).collect::<Vec<_>>(),
        vec![both, rare]
    );
}

#[tokio::test]
async fn fulltext_counts_each_rank_term_by_its_weight() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let t = create_tenant(&store, "weighted", ALL_PERMISSIONS).await;
    let canary = remember(&store, &t, "The canary build was promoted.").await;
    let ledger = remember(&store, &t, "The ledger export finished.").await;
    let tokenizer = Tokenizer::default();

    let mut client = store.client().await.unwrap();
    let tx = TenantTx::begin(&mut client, t.tenant_id).await.unwrap();
    let keys = [t.key_id];
    let filter = tokenizer.tsquery_literal("canary ledger").unwrap();
    let terms = |canary: f32, ledger: f32| RankTerms {
        literals: vec![
            tokenizer.tsquery_literal("canary").unwrap(),
            tokenizer.tsquery_literal("ledger").unwrap(),
        ],
        weights: vec![canary, ledger],
    };
    let ranked = |rank: RankTerms| {
        let (tx, keys, filter) = (&tx, &keys, &filter);
        async move {
            fragments::fulltext_search(tx, &scope(keys), filter, &rank, FIELDS, 10)
                .await
                .unwrap()
        }
    };
    let first = ranked(terms(0.9, 0.1)).await;
    assert_eq!(
        first.iter().map(|h| h.id).collect::<Vec<_>>(),
        vec![canary, ledger]
    );
    let second = ranked(terms(0.1, 0.9)).await;
    assert_eq!(
        second.iter().map(|h| h.id).collect::<Vec<_>>(),
        vec![ledger, canary]
    );
    // A weight scales its term's own rank: the canary memory's rank fell
    // from 0.9 to 0.1 of the same `ts_rank`.
    let ratio = first[0].score / second[1].score;
    assert!((ratio - 9.0).abs() < 0.01, "{ratio}");
}

#[tokio::test]
async fn fulltext_ranks_a_topic_match_by_the_field_weights() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let t = create_tenant(&store, "fields", ALL_PERMISSIONS).await;
    let about = remember_in(&store, &t, "The nightly export finished.", "ledger").await;
    let passing = remember_in(
        &store,
        &t,
        "The ledger job ran after the ledger export.",
        "exports",
    )
    .await;
    let tokenizer = Tokenizer::default();

    let mut client = store.client().await.unwrap();
    let tx = TenantTx::begin(&mut client, t.tenant_id).await.unwrap();
    let keys = [t.key_id];
    let query = tokenizer.tsquery_literal("ledger job").unwrap();
    let ranked = |fields| {
        let (tx, keys, query) = (&tx, &keys, &query);
        async move {
            fragments::fulltext_search(
                tx,
                &scope(keys),
                query,
                &RankTerms::whole(query),
                fields,
                10,
            )
            .await
            .unwrap()
            .iter()
            .map(|h| h.id)
            .collect::<Vec<_>>()
        }
    };
    // Counted alike, the memory with both terms, one twice, matches more.
    assert_eq!(ranked(FieldWeights::EQUAL).await, vec![passing, about]);
    // The memory whose topic is the ledger is about it.
    assert_eq!(ranked(FIELDS).await, vec![about, passing]);
}

#[tokio::test]
async fn several_accesses_in_one_call_count_as_that_many_in_a_row() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let t = create_tenant(&store, "accessed", ALL_PERMISSIONS).await;
    let once = remember(&store, &t, "recalled once").await;
    let thrice = remember(&store, &t, "recalled three times").await;
    let untouched = remember(&store, &t, "never recalled").await;

    let mut client = store.client().await.unwrap();
    let tx = TenantTx::begin(&mut client, t.tenant_id).await.unwrap();
    fragments::record_access(&tx, &[once, thrice], &[1, 3])
        .await
        .unwrap();
    let rows = fragments::fetch(&tx, &[t.key_id], &[once, thrice, untouched])
        .await
        .unwrap();
    let row = |id| rows.iter().find(|f| f.id == id).unwrap();
    // A fresh fragment's first access moves the estimate 0.3 of the way to
    // 1; each further one another 0.3 of what is left: 0.3, 0.51, 0.657.
    assert_eq!(row(once).access_count, 1);
    assert!(
        (row(once).ema_activation - 0.3).abs() < 1e-4,
        "{:?}",
        row(once)
    );
    assert_eq!(row(thrice).access_count, 3);
    assert!(
        (row(thrice).ema_activation - 0.657).abs() < 1e-4,
        "{:?}",
        row(thrice)
    );
    assert!(row(thrice).accessed_at.is_some());
    assert_eq!(row(untouched).access_count, 0);
    assert_eq!(row(untouched).accessed_at, None);
}

#[tokio::test]
async fn term_samples_count_documents_among_the_newest_fragments_of_the_keys() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let t = create_tenant(&store, "sampled", ALL_PERMISSIONS).await;
    remember(&store, &t, "ledger ledger canary").await;
    remember(&store, &t, "ledger rollout").await;
    remember(&store, &t, "ledger canary").await;
    remember(&store, &t, "payments rollout").await;

    let mut client = store.client().await.unwrap();
    let tx = TenantTx::begin(&mut client, t.tenant_id).await.unwrap();
    let all = fragments::term_sample(&tx, &[t.key_id], 10).await.unwrap();
    assert_eq!((all.total, all.sampled), (4, 4));
    // Documents, not occurrences; terms in a single fragment are left out.
    assert_eq!(all.counts.get("ledger"), Some(&3));
    assert_eq!(all.counts.get("canari"), Some(&2));
    assert_eq!(all.counts.get("rollout"), Some(&2));
    assert_eq!(all.counts.get("payment"), None);

    // The newest three: the first fragment is not sampled.
    let newest = fragments::term_sample(&tx, &[t.key_id], 3).await.unwrap();
    assert_eq!((newest.total, newest.sampled), (4, 3));
    assert_eq!(newest.counts.get("ledger"), Some(&2), "{newest:?}");
    assert_eq!(newest.counts.get("canari"), None);

    let other = fragments::term_sample(&tx, &[Uuid::new_v4()], 10)
        .await
        .unwrap();
    assert_eq!((other.total, other.sampled), (0, 0));
    assert!(other.counts.is_empty());
}

#[tokio::test]
async fn embedding_queue_hands_each_row_to_one_worker_and_vectors_are_searchable() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let t = create_tenant(&store, "queue", ALL_PERMISSIONS).await;
    for i in 0..6 {
        remember(
            &store,
            &t,
            &format!("Queue item number {i} waits for its embedding."),
        )
        .await;
    }
    let mut first = store.client().await.unwrap();
    let mut second = store.client().await.unwrap();
    let tx1 = TenantTx::begin(&mut first, t.tenant_id).await.unwrap();
    let tx2 = TenantTx::begin(&mut second, t.tenant_id).await.unwrap();
    let batch1 = fragments::lock_pending_embeddings(&tx1, 4).await.unwrap();
    let batch2 = fragments::lock_pending_embeddings(&tx2, 4).await.unwrap();
    assert_eq!((batch1.len(), batch2.len()), (4, 2));
    assert!(batch1.iter().all(|a| batch2.iter().all(|b| a.id != b.id)));

    let mut unit = vec![0.0f32; 384];
    unit[0] = 1.0;
    let ids: Vec<Uuid> = batch1.iter().map(|p| p.id).collect();
    let vectors = vec![Vector::from(unit.clone()); ids.len()];
    assert_eq!(
        fragments::store_embeddings(&tx1, "test-model", 1, &ids, &vectors)
            .await
            .unwrap(),
        4
    );
    tx1.commit().await.unwrap();
    drop(tx2); // a worker that dies: its rows go back to the queue

    let tx = TenantTx::begin(&mut first, t.tenant_id).await.unwrap();
    assert_eq!(fragments::count_pending_embeddings(&tx).await.unwrap(), 2);
    let keys = [t.key_id];
    let hits = fragments::vector_search(
        &tx,
        &scope(&keys),
        &Vector::from(unit),
        "test-model",
        40,
        10,
    )
    .await
    .unwrap();
    assert_eq!(hits.len(), 4);
    assert!((hits[0].score - 1.0).abs() < 1e-5);
    let other_model = fragments::vector_search(
        &tx,
        &scope(&keys),
        &Vector::from(vec![1.0; 384]),
        "other",
        40,
        10,
    )
    .await
    .unwrap();
    assert!(other_model.is_empty());
}

/// The vector layer's ordering is the expression the HNSW graphs index
/// (migrations/V28: half-precision copies of the vectors), so a search can
/// walk the graph instead of sorting the partition. With scans and sorts of
/// the whole partition priced out, as they are for a large tenant, the
/// search scans an HNSW index: an ordering the index cannot serve would
/// sort instead.
#[tokio::test]
async fn vector_search_walks_the_hnsw_graph() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let t = create_tenant(&store, "graph", ALL_PERMISSIONS).await;
    let ids = [
        remember(&store, &t, "The first vector points along one axis.").await,
        remember(&store, &t, "The second vector points along another.").await,
    ];
    let mut client = store.client().await.unwrap();
    let tx = TenantTx::begin(&mut client, t.tenant_id).await.unwrap();
    let vectors: Vec<Vector> = (0..2)
        .map(|axis| {
            let mut unit = vec![0.0f32; 384];
            unit[axis] = 1.0;
            Vector::from(unit)
        })
        .collect();
    fragments::store_embeddings(&tx, "test-model", 1, &ids, &vectors)
        .await
        .unwrap();
    tx.batch_execute("SET LOCAL enable_seqscan = off; SET LOCAL enable_sort = off")
        .await
        .unwrap();
    let keys = [t.key_id];
    let hits = fragments::vector_search(&tx, &scope(&keys), &vectors[1], "test-model", 40, 10)
        .await
        .unwrap();
    assert_eq!(
        hits.iter().map(|h| h.id).collect::<Vec<_>>(),
        vec![ids[1], ids[0]]
    );
    assert!((hits[0].score - 1.0).abs() < 1e-5 && hits[1].score.abs() < 1e-5);
    let graph_scans: i64 = tx
        .query_one(
            "SELECT coalesce(sum(pg_stat_get_xact_numscans(c.oid)), 0)::bigint
               FROM pg_class c JOIN pg_am am ON am.oid = c.relam
              WHERE am.amname = 'hnsw' AND c.relnamespace = 'mneme'::regnamespace",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(graph_scans, 1, "the search did not scan an HNSW graph");
}

/// Writes `count` memories for `tenant` in one bulk insert; returns their ids.
async fn bulk_remember(store: &Store, tenant: &TestTenant, count: usize) -> Vec<Uuid> {
    let batch = Uuid::now_v7();
    let fragments: Vec<_> = (0..count)
        .map(|i| prepared(&format!("Bulk note {i} of batch {batch}."), "bulk"))
        .collect();
    let rows: Vec<_> = fragments.iter().map(|f| (author(tenant), f)).collect();
    let mut client = store.client().await.unwrap();
    let tx = TenantTx::begin(&mut client, tenant.tenant_id)
        .await
        .unwrap();
    let written = fragments::insert_many(&tx, &rows).await.unwrap();
    tx.commit().await.unwrap();
    written.into_iter().map(|w| w.unwrap().id).collect()
}

/// Index scans of the partitions of `fragments` this connection counted
/// and has not yet reported (so within one transaction, the difference
/// between two calls is what happened between them), by index and whether
/// it is a primary key.
async fn fragment_index_scans(tx: &TenantTx<'_>) -> HashMap<(String, bool), i64> {
    tx.query(
        "SELECT i.indexrelid::regclass::text, i.indisprimary,
                pg_stat_get_xact_numscans(i.indexrelid)
           FROM pg_index i JOIN pg_inherits h ON h.inhrelid = i.indrelid
          WHERE h.inhparent = 'mneme.fragments'::regclass",
        &[],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| ((r.get(0), r.get(1)), r.get(2)))
    .collect()
}

/// The index scans of `fragments` between two [`fragment_index_scans`]:
/// through primary keys, and through each other index that was used.
fn scans_between(
    before: &HashMap<(String, bool), i64>,
    after: &HashMap<(String, bool), i64>,
) -> (i64, Vec<(String, i64)>) {
    let mut primary = 0;
    let mut other = Vec::new();
    for ((index, is_primary), count) in after {
        let scans = count - before.get(&(index.clone(), *is_primary)).unwrap_or(&0);
        if *is_primary {
            primary += scans;
        } else if scans > 0 {
            other.push((index.clone(), scans));
        }
    }
    (primary, other)
}

fn chain(ids: &[Uuid]) -> Vec<links::Edge> {
    ids.windows(2)
        .map(|pair| links::Edge {
            from_id: pair[0],
            to_id: pair[1],
            relation_type: "related".into(),
            weight: 0.5,
        })
        .collect()
}

/// A tenant whose memories arrived in a partition after its last ANALYZE
/// is unknown to the statistics. Planned for that tenant, the foreign-key
/// check of each written row (`tenant_id = $1 AND id = $2`) expects no rows
/// under any index that starts with `tenant_id`, and may walk all of the
/// tenant's rows through one of them to find a single id. Bulk writes of
/// rows that reference memories must check through the primary key.
#[tokio::test]
async fn bulk_writes_check_a_new_tenants_memories_through_the_primary_key() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let known = create_tenant(&store, "known", ALL_PERMISSIONS).await;
    bulk_remember(&store, &known, 400).await;
    let mut client = store.client().await.unwrap();
    let tx = TenantTx::begin(&mut client, known.tenant_id).await.unwrap();
    let partition: String = tx
        .query_one(
            "SELECT tableoid::regclass::text FROM mneme.fragments WHERE tenant_id = $1 LIMIT 1",
            &[&known.tenant_id],
        )
        .await
        .unwrap()
        .get(0);
    drop(tx);
    let owner = db.owner_client().await;
    let remainder: i32 = partition.rsplit('p').next().unwrap().parse().unwrap();
    let mut newcomer = None;
    for attempt in 0..200 {
        let candidate =
            create_tenant(&store, &format!("newcomer-{attempt}"), ALL_PERMISSIONS).await;
        let same: bool = owner
            .query_one(
                "SELECT satisfies_hash_partition('mneme.fragments'::regclass, 16, $1, $2::uuid)",
                &[&remainder, &candidate.tenant_id],
            )
            .await
            .unwrap()
            .get(0);
        if same {
            newcomer = Some(candidate);
            break;
        }
    }
    let newcomer = newcomer.expect("a tenant in the known tenant's partition");
    owner
        .batch_execute("ANALYZE mneme.fragments")
        .await
        .unwrap();
    let ids = bulk_remember(&store, &newcomer, 300).await;

    let tx = TenantTx::begin(&mut client, newcomer.tenant_id)
        .await
        .unwrap();
    let before = fragment_index_scans(&tx).await;
    let linked = links::upsert_edges(&tx, &[newcomer.key_id], &chain(&ids))
        .await
        .unwrap();
    assert_eq!(linked.len(), ids.len() - 1);
    let summaries: Vec<String> = (0..ids.len()).map(|i| format!("event {i}")).collect();
    let events: Vec<cases::NewEvent<'_>> = ids
        .iter()
        .zip(&summaries)
        .map(|(&id, summary)| cases::NewEvent {
            key_id: newcomer.key_id,
            case_id: "bulk-case",
            session_id: None,
            event_type: "error_observed",
            summary,
            entity_keys: &[],
            source_fragment_id: Some(id),
        })
        .collect();
    cases::append_many(&tx, &events).await.unwrap();
    let (primary, other) = scans_between(&before, &fragment_index_scans(&tx).await);
    // The statements' own joins may read an index once; a check per row
    // through one would scan it hundreds of times.
    assert!(
        other.iter().all(|(_, scans)| *scans <= 2),
        "foreign-key checks walked a tenant-wide index: {other:?}"
    );
    assert!(
        primary >= 3 * ids.len() as i64 - 2,
        "{primary} primary-key scans"
    );
    tx.commit().await.unwrap();
}

/// A generic plan of those checks made while the partition was empty and
/// never analysed has the same flaw; PostgreSQL would keep it for the
/// connection until the partition is next analysed (on a fresh database,
/// the first minute of an import), so each statement plans anew.
#[tokio::test]
async fn a_check_planned_on_an_empty_partition_is_not_kept() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let t = create_tenant(&store, "fresh", ALL_PERMISSIONS).await;
    let first = bulk_remember(&store, &t, 2).await;
    let mut client = store.client().await.unwrap();
    let tx = TenantTx::begin(&mut client, t.tenant_id).await.unwrap();
    links::upsert_edges(&tx, &[t.key_id], &chain(&first))
        .await
        .unwrap();
    tx.commit().await.unwrap();

    let ids = bulk_remember(&store, &t, 2000).await;
    let tx = TenantTx::begin(&mut client, t.tenant_id).await.unwrap();
    let before = fragment_index_scans(&tx).await;
    let linked = links::upsert_edges(&tx, &[t.key_id], &chain(&ids))
        .await
        .unwrap();
    assert_eq!(linked.len(), ids.len() - 1);
    let (primary, other) = scans_between(&before, &fragment_index_scans(&tx).await);
    assert!(
        other.iter().all(|(_, scans)| *scans <= 2),
        "a check reused a plan made on an empty partition: {other:?}"
    );
    assert!(
        primary >= 2 * (ids.len() as i64 - 1),
        "{primary} primary-key scans"
    );
    tx.commit().await.unwrap();
}

/// A tenant new to a partition's statistics gets plans that expect none of
/// its rows (its recall sorted all its memories instead of searching the
/// graph), so autovacuum must analyse a partition well before PostgreSQL's
/// default 10 % of it changed (migrations/V29).
#[tokio::test]
async fn every_partition_is_analysed_once_one_percent_of_it_changed() {
    let db = TestDatabase::create().await;
    let rows = db
        .owner_client()
        .await
        .query(
            "SELECT c.relname, coalesce(c.reloptions, '{}')
               FROM pg_inherits h JOIN pg_class c ON c.oid = h.inhrelid
              WHERE h.inhparent = 'mneme.fragments'::regclass",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), 16);
    for row in rows {
        let (partition, options): (String, Vec<String>) = (row.get(0), row.get(1));
        for option in [
            "autovacuum_analyze_scale_factor=0.01",
            "autovacuum_analyze_threshold=500",
        ] {
            assert!(
                options.iter().any(|o| o == option),
                "{partition}: {options:?} lacks {option}"
            );
        }
    }
}

#[tokio::test]
async fn key_groups_share_reading_between_their_members_only() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let t = create_tenant(&store, "groups", ALL_PERMISSIONS).await;
    let other = create_tenant(&store, "outsider", ALL_PERMISSIONS).await;
    let mut client = store.client().await.unwrap();
    let tx = TenantTx::begin(&mut client, t.tenant_id).await.unwrap();
    let new_key = |name: &str| NewKey {
        name: name.into(),
        permissions: ALL_PERMISSIONS.to_vec(),
        default_workspace: None,
        fragment_limit: None,
        expires_at: None,
    };
    let (second, second_raw) = api_keys::create(&tx, &new_key("second")).await.unwrap();
    let (loner, _) = api_keys::create(&tx, &new_key("loner")).await.unwrap();
    let group = key_groups::create(&tx, "team", Some("shared memory"))
        .await
        .unwrap();
    assert!(
        key_groups::add_member(&tx, group.id, t.key_id)
            .await
            .unwrap()
    );
    assert!(
        key_groups::add_member(&tx, group.id, second.id)
            .await
            .unwrap()
    );
    assert!(
        !key_groups::add_member(&tx, group.id, second.id)
            .await
            .unwrap(),
        "already a member"
    );
    // Another tenant's key cannot join.
    assert!(
        !key_groups::add_member(&tx, group.id, other.key_id)
            .await
            .unwrap()
    );
    assert_eq!(
        key_groups::peers(&*tx, t.tenant_id, t.key_id)
            .await
            .unwrap(),
        vec![second.id]
    );
    assert!(
        key_groups::peers(&*tx, t.tenant_id, loner.id)
            .await
            .unwrap()
            .is_empty()
    );
    let listed = key_groups::list(&tx).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].key_ids.len(), 2);
    tx.commit().await.unwrap();

    let found = api_keys::authenticate(&mut client, &second_raw)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(found.group_key_ids, vec![t.key_id]);

    let tx = TenantTx::begin(&mut client, t.tenant_id).await.unwrap();
    assert!(
        key_groups::remove_member(&tx, group.id, t.key_id)
            .await
            .unwrap()
    );
    assert!(
        key_groups::peers(&*tx, t.tenant_id, second.id)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(key_groups::delete(&tx, group.id).await.unwrap());
    tx.commit().await.unwrap();
}

#[tokio::test]
async fn link_upserts_create_readable_edges_and_restore_the_planning_mode() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let tenant = create_tenant(&store, "linked", ALL_PERMISSIONS).await;
    let other_tenant = create_tenant(&store, "elsewhere", ALL_PERMISSIONS).await;
    let from = remember(&store, &tenant, "The release train leaves on Tuesdays.").await;
    let to = remember(&store, &tenant, "Hotfixes may board the train any day.").await;
    let foreign = remember(&store, &other_tenant, "Another tenant's memory.").await;
    let edge = |to_id| links::Edge {
        from_id: from,
        to_id,
        relation_type: "related".into(),
        weight: 0.5,
    };

    let mut client = store.client().await.unwrap();
    let tx = TenantTx::begin(&mut client, tenant.tenant_id)
        .await
        .unwrap();
    let created = links::upsert_edges(&tx, &[tenant.key_id], &[edge(to), edge(foreign)])
        .await
        .unwrap();
    assert_eq!(
        created,
        vec![(from, to, "related".to_owned())],
        "another tenant's memory is never linked"
    );
    // The foreign-key checks ran with generic plans; the statements after
    // them in the transaction are planned per execution again.
    let mode: String = tx
        .query_one("SHOW plan_cache_mode", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(mode, "force_custom_plan");
    tx.commit().await.unwrap();
    assert_eq!(
        db.count_rows(tenant.tenant_id, "fragment_links", "weight = 0.5")
            .await,
        1
    );
}

/// A fact of `agent_id` carrying exactly `keywords`.
async fn remember_keywords(
    tx: &TenantTx<'_>,
    tenant: &TestTenant,
    agent_id: &str,
    content: &str,
    keywords: &[&str],
) -> Uuid {
    let fragment = prepare(
        RememberInput {
            content: content.into(),
            topic: "storage".into(),
            fragment_type: "fact".into(),
            keywords: keywords.iter().map(|k| k.to_string()).collect(),
            ..Default::default()
        },
        &FragmentLimits::default(),
        &Tokenizer::default(),
    )
    .expect("valid fragment");
    let author = Author {
        agent_id,
        ..author(tenant)
    };
    fragments::insert(tx, author, &fragment).await.unwrap().id
}

#[tokio::test]
async fn keyword_neighbors_share_enough_keywords_within_the_key_and_agent() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let tenant = create_tenant(&store, "keyworded", ALL_PERMISSIONS).await;
    let other_tenant = create_tenant(&store, "elsewhere", ALL_PERMISSIONS).await;
    let all = ["postgres", "vacuum", "wal", "replica"];
    {
        let mut client = store.client().await.unwrap();
        let tx = TenantTx::begin(&mut client, other_tenant.tenant_id)
            .await
            .unwrap();
        remember_keywords(
            &tx,
            &other_tenant,
            "default",
            "Another tenant's twin.",
            &all,
        )
        .await;
        tx.commit().await.unwrap();
    }
    let mut client = store.client().await.unwrap();
    let tx = TenantTx::begin(&mut client, tenant.tenant_id)
        .await
        .unwrap();
    let three = remember_keywords(
        &tx,
        &tenant,
        "default",
        "Vacuum keeps the WAL of postgres small.",
        &["postgres", "vacuum", "wal", "disk"],
    )
    .await;
    let two = remember_keywords(
        &tx,
        &tenant,
        "default",
        "The replica runs postgres 16.",
        &["postgres", "replica", "upgrade"],
    )
    .await;
    let one = remember_keywords(
        &tx,
        &tenant,
        "default",
        "Postgres is the main database.",
        &["postgres", "database"],
    )
    .await;
    let other_agent =
        remember_keywords(&tx, &tenant, "ops", "The ops agent's twin note.", &all).await;
    let superseded =
        remember_keywords(&tx, &tenant, "default", "An outdated twin note.", &all).await;
    tx.execute(
        "UPDATE mneme.fragments SET valid_to = now() WHERE tenant_id = $1 AND id = $2",
        &[&tenant.tenant_id, &superseded],
    )
    .await
    .unwrap();
    let new = remember_keywords(
        &tx,
        &tenant,
        "default",
        "Replica lag grows while vacuum rewrites the WAL of postgres.",
        &all,
    )
    .await;
    let probes: Vec<fragments::KeywordProbe<'_>> = all
        .iter()
        .enumerate()
        .flat_map(|(i, first)| {
            all[i + 1..]
                .iter()
                .map(move |second| fragments::KeywordProbe {
                    fragment_id: new,
                    first,
                    second,
                })
        })
        .collect();

    let found = fragments::keyword_neighbors(&tx, tenant.key_id, &probes, 0.5, 5)
        .await
        .unwrap();
    assert_eq!(
        found,
        vec![(new, three), (new, two)],
        "three of four keywords shared first, then two; one shared ({one}), another \
         agent's ({other_agent}), a superseded and another tenant's are not neighbours"
    );
    let best = fragments::keyword_neighbors(&tx, tenant.key_id, &probes, 0.5, 1)
        .await
        .unwrap();
    assert_eq!(best, vec![(new, three)]);
    let strict = fragments::keyword_neighbors(&tx, tenant.key_id, &probes, 0.75, 5)
        .await
        .unwrap();
    assert_eq!(strict, vec![(new, three)], "exactly three of four is 0.75");
    tx.commit().await.unwrap();
}

#[tokio::test]
async fn the_auto_link_queue_hands_out_each_fragment_once_oldest_first_within_its_tenant() {
    use mneme_store::auto_link_queue::{self, QueuedFragment, Taken};

    let db = TestDatabase::create().await;
    let store = db.store();
    let tenant = create_tenant(&store, "queued", ALL_PERMISSIONS).await;
    let other_tenant = create_tenant(&store, "elsewhere", ALL_PERMISSIONS).await;
    let mut client = store.client().await.unwrap();
    let tx = TenantTx::begin(&mut client, tenant.tenant_id)
        .await
        .unwrap();
    let mut ids = Vec::new();
    for (i, keywords) in [["postgres", "wal"], ["redis", "cache"], ["nginx", "tls"]]
        .iter()
        .enumerate()
    {
        let content = format!("Queued memory number {i}.");
        ids.push(remember_keywords(&tx, &tenant, "default", &content, keywords).await);
    }
    let forgotten = remember_keywords(&tx, &tenant, "default", "Forgotten soon.", &["gone"]).await;
    auto_link_queue::enqueue(&tx, &[ids[2], ids[0], forgotten, ids[1]])
        .await
        .unwrap();
    // A second enqueue (a retried statement) adds nothing.
    auto_link_queue::enqueue(&tx, &ids).await.unwrap();
    tx.execute(
        "DELETE FROM mneme.fragments WHERE tenant_id = $1 AND id = $2",
        &[&tenant.tenant_id, &forgotten],
    )
    .await
    .unwrap();
    assert_eq!(auto_link_queue::backlog(&tx).await.unwrap().0, 4);
    tx.commit().await.unwrap();

    // Another tenant sees nothing of the queue.
    {
        let mut client = store.client().await.unwrap();
        let tx = TenantTx::begin(&mut client, other_tenant.tenant_id)
            .await
            .unwrap();
        assert_eq!(auto_link_queue::backlog(&tx).await.unwrap().0, 0);
        assert!(auto_link_queue::take(&tx, 10).await.unwrap().is_empty());
    }

    // Two drains at once take disjoint batches, oldest first; a rolled
    // back batch is queued again.
    let mut first_client = store.client().await.unwrap();
    let first = TenantTx::begin(&mut first_client, tenant.tenant_id)
        .await
        .unwrap();
    let first_taken = auto_link_queue::take(&first, 2).await.unwrap();
    assert_eq!(
        first_taken,
        vec![
            Taken {
                fragment_id: ids[0],
                fragment: Some(QueuedFragment {
                    key_id: tenant.key_id,
                    keywords: vec!["postgres".into(), "wal".into()],
                }),
            },
            Taken {
                fragment_id: ids[1],
                fragment: Some(QueuedFragment {
                    key_id: tenant.key_id,
                    keywords: vec!["redis".into(), "cache".into()],
                }),
            },
        ]
    );
    let mut second_client = store.client().await.unwrap();
    let second = TenantTx::begin(&mut second_client, tenant.tenant_id)
        .await
        .unwrap();
    let second_taken = auto_link_queue::take(&second, 10).await.unwrap();
    let taken_ids: Vec<Uuid> = second_taken.iter().map(|t| t.fragment_id).collect();
    assert_eq!(taken_ids, vec![ids[2], forgotten]);
    assert_eq!(
        second_taken[1].fragment, None,
        "a forgotten fragment has nothing to link"
    );
    second.commit().await.unwrap();
    drop(first);

    let mut client = store.client().await.unwrap();
    let tx = TenantTx::begin(&mut client, tenant.tenant_id)
        .await
        .unwrap();
    let again: Vec<Uuid> = auto_link_queue::take(&tx, 10)
        .await
        .unwrap()
        .iter()
        .map(|t| t.fragment_id)
        .collect();
    assert_eq!(again, vec![ids[0], ids[1]], "the rolled-back batch");
    tx.commit().await.unwrap();
    let mut client = store.client().await.unwrap();
    let tx = TenantTx::begin(&mut client, tenant.tenant_id)
        .await
        .unwrap();
    assert_eq!(auto_link_queue::backlog(&tx).await.unwrap(), (0, 0.0));
}

/// The rows of a two-uuid query with the tenant as `$1`.
async fn uuid_pairs(
    client: &tokio_postgres::Client,
    sql: &str,
    tenant_id: Uuid,
) -> Vec<(Uuid, Uuid)> {
    client
        .query(sql, &[&tenant_id])
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect()
}

#[tokio::test]
async fn case_events_chain_within_their_tenant_and_record_their_source() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let tenant = create_tenant(&store, "cased", ALL_PERMISSIONS).await;
    let other_tenant = create_tenant(&store, "cased-elsewhere", ALL_PERMISSIONS).await;
    let error = remember(&store, &tenant, "The nightly import failed on a bad row.").await;
    let foreign = remember(&store, &other_tenant, "Another tenant's error.").await;
    let event = |tenant: &TestTenant, event_type, source| cases::NewEvent {
        key_id: tenant.key_id,
        case_id: "case-import",
        session_id: Some("s-1"),
        event_type,
        summary: "import",
        entity_keys: &[],
        source_fragment_id: source,
    };
    let append = |tenant_id, event: cases::NewEvent<'static>| {
        let store = store.clone();
        async move {
            let mut client = store.client().await.unwrap();
            let tx = TenantTx::begin(&mut client, tenant_id).await.unwrap();
            let id = cases::append(&tx, &event).await.unwrap();
            tx.commit().await.unwrap();
            id
        }
    };

    // The other tenant's case of the same name comes first; it must not
    // become the predecessor of this tenant's first event.
    append(
        other_tenant.tenant_id,
        event(&other_tenant, "error_observed", Some(foreign)),
    )
    .await;
    let first = append(
        tenant.tenant_id,
        event(&tenant, "error_observed", Some(error)),
    )
    .await;
    let second = append(tenant.tenant_id, event(&tenant, "decision_committed", None)).await;
    let third = append(tenant.tenant_id, event(&tenant, "fix_attempted", None)).await;

    let owner = db.owner_in_tenant(tenant.tenant_id).await;
    let chain = uuid_pairs(
        &owner,
        "SELECT from_event, to_event FROM mneme.case_event_edges
              WHERE tenant_id = $1 AND edge_type = 'preceded_by' ORDER BY from_event",
        tenant.tenant_id,
    )
    .await;
    assert_eq!(chain, vec![(second, first), (third, second)]);
    let evidence = uuid_pairs(
        &owner,
        "SELECT fragment_id, event_id FROM mneme.fragment_evidence
              WHERE tenant_id = $1 AND kind = 'produced_by'",
        tenant.tenant_id,
    )
    .await;
    assert_eq!(evidence, vec![(error, first)], "only the sourced event");
}

#[tokio::test]
async fn events_appended_together_chain_per_case_in_their_given_order() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let tenant = create_tenant(&store, "cased-in-bulk", ALL_PERMISSIONS).await;
    let error = remember(&store, &tenant, "The export job timed out.").await;
    let keys = ["export".to_owned()];
    let event = |case_id, event_type, source| cases::NewEvent {
        key_id: tenant.key_id,
        case_id,
        session_id: Some("s-2"),
        event_type,
        summary: "export",
        entity_keys: &keys,
        source_fragment_id: source,
    };
    let mut client = store.client().await.unwrap();
    let tx = TenantTx::begin(&mut client, tenant.tenant_id)
        .await
        .unwrap();
    let stored = cases::append(&tx, &event("case-a", "error_observed", None))
        .await
        .unwrap();
    // Two cases interleaved: each event follows the one before it in its
    // own case, the first of case-a the event stored before.
    let ids = cases::append_many(
        &tx,
        &[
            event("case-a", "decision_committed", None),
            event("case-b", "error_observed", Some(error)),
            event("case-a", "fix_attempted", None),
            event("case-b", "fix_attempted", None),
        ],
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();

    let owner = db.owner_in_tenant(tenant.tenant_id).await;
    let mut chain = uuid_pairs(
        &owner,
        "SELECT from_event, to_event FROM mneme.case_event_edges
              WHERE tenant_id = $1 AND edge_type = 'preceded_by'",
        tenant.tenant_id,
    )
    .await;
    chain.sort();
    let mut expected = vec![(ids[0], stored), (ids[2], ids[0]), (ids[3], ids[1])];
    expected.sort();
    assert_eq!(chain, expected);
    let events: Vec<(Uuid, String, Vec<String>)> = owner
        .query(
            "SELECT id, case_id, entity_keys FROM mneme.case_events
              WHERE tenant_id = $1 ORDER BY created_at, id",
            &[&tenant.tenant_id],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1), row.get(2)))
        .collect();
    assert_eq!(events.len(), 5);
    assert!(events.iter().all(|(_, _, k)| k == &keys), "{events:?}");
    assert_eq!(
        events.iter().map(|(id, ..)| *id).collect::<Vec<_>>(),
        [vec![stored], ids.clone()].concat(),
        "stored in the given order"
    );
    let evidence = uuid_pairs(
        &owner,
        "SELECT fragment_id, event_id FROM mneme.fragment_evidence WHERE tenant_id = $1",
        tenant.tenant_id,
    )
    .await;
    assert_eq!(evidence, vec![(error, ids[1])]);
}

/// Data migrations reach every tenant's rows, although row-level security
/// is forced on the owner that runs them: V31 keeps one rating per rated
/// thing (the latest), V32 one automatic link per pair (the heavier) and
/// leaves directional links alone, V33 marks temporal links automatic.
#[tokio::test]
async fn data_migrations_reach_every_tenants_rows() {
    let db = TestDatabase::create_at_version(30).await;
    let store = db.store();
    let mut seeded = Vec::new();
    for name in ["acme", "globex"] {
        let tenant = create_tenant(&store, name, ALL_PERMISSIONS).await;
        let a = remember_in(&store, &tenant, "Redis evicts with allkeys-lru.", "redis").await;
        let b = remember_in(&store, &tenant, "Redis maxmemory is 4 GB.", "redis").await;
        let (t, k) = (tenant.tenant_id, tenant.key_id);
        db.owner_in_tenant(t)
            .await
            .batch_execute(&format!(
                "INSERT INTO mneme.fragment_links (tenant_id, from_id, to_id, relation_type, weight)
                 VALUES ('{t}', '{a}', '{b}', 'temporal', 0.6), ('{t}', '{b}', '{a}', 'temporal', 0.9),
                        ('{t}', '{a}', '{b}', 'part_of', 1), ('{t}', '{b}', '{a}', 'part_of', 1);
                 INSERT INTO mneme.surfacing_events (tenant_id, id, key_id, agent_id, server, tool,
                        query_stage, memory_ids, relevances, min_score, source)
                 VALUES ('{t}', 'ev-1', '{k}', 'default', 'docs', 'search', 'semantic',
                         ARRAY['{a}']::uuid[], ARRAY[0.8]::real[], 0.5, 'api');
                 INSERT INTO mneme.surfacing_feedback (tenant_id, surfacing_id, key_id, memory_id, rating)
                 VALUES ('{t}', 'ev-1', '{k}', NULL, 'helpful'),
                        ('{t}', 'ev-1', '{k}', NULL, 'not_relevant'),
                        ('{t}', 'ev-1', '{k}', '{a}', 'helpful'),
                        ('{t}', 'ev-1', '{k}', '{a}', 'helpful');"
            ))
            .await
            .unwrap();
        seeded.push((t, a, b));
    }

    let applied = mneme_store::migrate::run(&db.owner_url).await.unwrap();
    assert!(applied.iter().any(|m| m.version == 31) && applied.iter().any(|m| m.version == 32));
    for (tenant_id, a, b) in seeded {
        let owner = db.owner_in_tenant(tenant_id).await;
        let rows = |sql: &'static str| {
            let owner = &owner;
            async move {
                owner
                    .query(sql, &[])
                    .await
                    .unwrap()
                    .iter()
                    .map(|r| (r.get::<_, String>(0), r.get::<_, String>(1)))
                    .collect::<Vec<_>>()
            }
        };
        let linked = rows(
            "SELECT relation_type || ' ' || weight || ' ' || automatic, from_id::text
               FROM mneme.fragment_links ORDER BY 1, 2",
        )
        .await;
        let (a, b) = (a.to_string(), b.to_string());
        let mut directional = vec![
            ("part_of 1 false".to_owned(), a.clone()),
            ("part_of 1 false".into(), b.clone()),
        ];
        directional.sort();
        let mut expected = directional;
        expected.push(("temporal 0.9 true".into(), b));
        assert_eq!(linked, expected, "tenant {tenant_id}");
        let ratings = rows(
            "SELECT coalesce(memory_id::text, 'block'), rating FROM mneme.surfacing_feedback
              ORDER BY 1",
        )
        .await;
        let mut expected = vec![
            (a, "helpful".to_owned()),
            ("block".into(), "not_relevant".into()),
        ];
        expected.sort();
        assert_eq!(ratings, expected, "tenant {tenant_id}");
    }
}
