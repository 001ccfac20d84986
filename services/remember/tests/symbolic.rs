//! The symbolic layer on the write path, against a real PostgreSQL: claims
//! stored per tenant, polarity conflicts within what a key can read, the
//! policy gates, the flags, and degradation when the claim step breaks.

use std::time::Duration;

use mneme_cache::Cache;
use mneme_config::{Config, RememberConfig};
use mneme_core::{ErrorCode, Permission, Principal};
use mneme_proto::v1::{RememberRequest, RememberResponse, WriteOutcome};
use mneme_remember::RememberServer;
use mneme_store::{Store, TenantTx, claims};
use mneme_test_support::{ALL_PERMISSIONS, TestDatabase, TestRedis, TestTenant, create_tenant};
use uuid::Uuid;

struct Harness {
    db: TestDatabase,
    store: Store,
    tenant: TestTenant,
    server: RememberServer,
}

/// Every symbolic feature of the write path on, with a deadline no test
/// machine misses.
fn symbolic_on() -> RememberConfig {
    let mut settings = Config::defaults().remember;
    settings.symbolic.enabled = true;
    settings.symbolic.claim_extraction = true;
    settings.symbolic.polarity_conflict = true;
    settings.symbolic.policy_rules = true;
    settings.symbolic.timeout = Duration::from_secs(10);
    settings
}

async fn start(settings: RememberConfig) -> Harness {
    let db = TestDatabase::create().await;
    let redis = TestRedis::new();
    let store = db.store();
    let tenant = create_tenant(&store, "symbolic", ALL_PERMISSIONS).await;
    let cache = Cache::connect(&redis.url, &redis.prefix).await.unwrap();
    let server = RememberServer::new(store.clone(), cache, settings);
    Harness {
        db,
        store,
        tenant,
        server,
    }
}

fn principal_of(tenant_id: Uuid, key_id: Uuid) -> Principal {
    Principal {
        tenant_id,
        key_id,
        group_key_ids: vec![],
        user_id: None,
        permissions: vec![Permission::Read, Permission::Write],
        workspace: None,
        mode: None,
        session_id: None,
        agent_id: "default".into(),
    }
}

fn memory(kind: &str, content: &str) -> RememberRequest {
    RememberRequest {
        content: content.into(),
        topic: "infra".into(),
        r#type: kind.into(),
        ..Default::default()
    }
}

impl Harness {
    fn principal(&self) -> Principal {
        principal_of(self.tenant.tenant_id, self.tenant.key_id)
    }

    async fn remember(&self, principal: &Principal, kind: &str, content: &str) -> RememberResponse {
        self.server
            .remember(principal, memory(kind, content))
            .await
            .unwrap()
    }

    async fn claims(&self, tenant_id: Uuid, condition: &str) -> i64 {
        self.db
            .count_rows(tenant_id, "fragment_claims", condition)
            .await
    }

    /// A second key of the harness's tenant, in no group with the first.
    async fn second_key(&self) -> Uuid {
        mneme_test_support::add_key(&self.store, &self.tenant, "second-key").await
    }

    async fn set_hard_gate(&self, on: bool) {
        let mut client = self.store.client().await.unwrap();
        let tx = TenantTx::begin(&mut client, self.tenant.tenant_id)
            .await
            .unwrap();
        tx.execute(
            "UPDATE mneme.api_keys SET symbolic_hard_gate = $3 WHERE tenant_id = $1 AND id = $2",
            &[&self.tenant.tenant_id, &self.tenant.key_id, &on],
        )
        .await
        .unwrap();
        tx.commit().await.unwrap();
    }
}

fn symbolic_warnings(response: &RememberResponse) -> Vec<&String> {
    response
        .warnings
        .iter()
        .filter(|w| w.starts_with("symbolic") || w.starts_with("policy"))
        .collect()
}

fn claim_conflicts(response: &RememberResponse) -> Vec<&String> {
    response
        .warnings
        .iter()
        .filter(|w| w.starts_with("symbolic claim_conflict"))
        .collect()
}

#[tokio::test]
async fn claims_are_extracted_and_stored_scoped_to_the_tenant() {
    let h = start(symbolic_on()).await;
    let other = create_tenant(&h.store, "elsewhere", ALL_PERMISSIONS).await;
    let stored = h
        .remember(
            &h.principal(),
            "fact",
            "The billing service uses Redis for sessions. 결제 API는 페이지네이션이 없다.",
        )
        .await;
    assert_eq!(stored.outcome(), WriteOutcome::Created);
    let id: Uuid = stored.id.parse().unwrap();

    let mine = format!("fragment_id = '{id}' AND key_id = '{}'", h.tenant.key_id);
    assert_eq!(h.claims(h.tenant.tenant_id, &mine).await, 2);
    assert_eq!(
        h.claims(
            h.tenant.tenant_id,
            "subject = 'bill servic' AND predicate = 'use' AND object = 'redi for session' \
             AND polarity = 'positive' AND extractor = 'rule' AND rule_version = 'v1'"
        )
        .await,
        1
    );
    assert_eq!(
        h.claims(
            h.tenant.tenant_id,
            "subject = '결제 api' AND predicate = '있' AND polarity = 'negative'"
        )
        .await,
        1
    );
    // Nothing is visible from the other tenant, by SQL or by the repository.
    assert_eq!(h.claims(other.tenant_id, "true").await, 0);
    let mut client = h.store.client().await.unwrap();
    let tx = TenantTx::begin(&mut client, other.tenant_id).await.unwrap();
    let seen = claims::of_fragments(&tx, &[other.key_id, h.tenant.key_id], &[id])
        .await
        .unwrap();
    assert!(seen.is_empty(), "{seen:?}");
    drop(tx);
    let tx = TenantTx::begin(&mut client, h.tenant.tenant_id)
        .await
        .unwrap();
    let own = claims::of_fragments(&tx, &[h.tenant.key_id], &[id])
        .await
        .unwrap();
    assert_eq!(own.len(), 2);
    // A key that cannot read the fragment does not see its claims either.
    let stranger = claims::of_fragments(&tx, &[Uuid::now_v7()], &[id])
        .await
        .unwrap();
    assert!(stranger.is_empty());
}

#[tokio::test]
async fn an_opposite_claim_of_the_same_key_is_reported_as_a_conflict() {
    let h = start(symbolic_on()).await;
    let who = h.principal();
    let first = h.remember(&who, "fact", "Alice drinks coffee.").await;
    assert!(claim_conflicts(&first).is_empty(), "{:?}", first.warnings);

    let opposite = h.remember(&who, "fact", "Alice never drinks coffee").await;
    assert_eq!(opposite.outcome(), WriteOutcome::Created);
    let conflicts = claim_conflicts(&opposite);
    assert_eq!(conflicts.len(), 1, "{:?}", opposite.warnings);
    assert!(conflicts[0].contains("low"), "{}", conflicts[0]);
    assert!(conflicts[0].contains(&first.id), "{}", conflicts[0]);
    // The contradicted fragment is listed first among the conflicts.
    assert_eq!(opposite.conflicts[0].id, first.id);
    assert!(
        opposite.conflicts[0]
            .content
            .starts_with("Alice drinks coffee")
    );

    // Another denial contradicts the assertion, not the earlier denial.
    let again = h
        .remember(&who, "fact", "Alice doesn't drink coffee!")
        .await;
    let conflicts = claim_conflicts(&again);
    assert_eq!(conflicts.len(), 1, "{:?}", again.warnings);
    assert!(conflicts[0].contains(&first.id) && !conflicts[0].contains(&opposite.id));

    // Korean, with the negation written as an auxiliary verb.
    let uses = h
        .remember(&who, "fact", "이 서비스는 Redis를 사용한다")
        .await;
    let does_not = h
        .remember(&who, "fact", "이 서비스는 Redis를 사용하지 않는다")
        .await;
    let conflicts = claim_conflicts(&does_not);
    assert_eq!(conflicts.len(), 1, "{:?}", does_not.warnings);
    assert!(conflicts[0].contains(&uses.id));

    // A hedged claim contradicts nothing.
    let hedged = h
        .remember(&who, "fact", "Alice probably drinks coffee on weekends")
        .await;
    assert!(claim_conflicts(&hedged).is_empty(), "{:?}", hedged.warnings);
}

#[tokio::test]
async fn claims_of_another_tenant_or_key_never_conflict() {
    let h = start(symbolic_on()).await;
    let other = create_tenant(&h.store, "neighbour", ALL_PERMISSIONS).await;
    let neighbour = principal_of(other.tenant_id, other.key_id);
    let second = principal_of(h.tenant.tenant_id, h.second_key().await);

    let theirs = h
        .remember(&neighbour, "fact", "The gateway uses sticky sessions")
        .await;
    let colleague = h
        .remember(&second, "fact", "The gateway uses sticky sessions")
        .await;
    assert_eq!(h.claims(other.tenant_id, "true").await, 1);

    let mine = h
        .remember(
            &h.principal(),
            "fact",
            "The gateway does not use sticky sessions",
        )
        .await;
    assert_eq!(mine.outcome(), WriteOutcome::Created);
    assert!(claim_conflicts(&mine).is_empty(), "{:?}", mine.warnings);
    assert!(
        mine.conflicts
            .iter()
            .all(|c| c.id != theirs.id && c.id != colleague.id),
        "{:?}",
        mine.conflicts
    );

    // Once the first key reads the second (a key group), it sees the
    // contradiction; the other tenant stays invisible.
    let mut grouped = h.principal();
    grouped.group_key_ids = vec![second.key_id];
    let again = h
        .remember(&grouped, "fact", "The gateway never uses sticky sessions")
        .await;
    let conflicts = claim_conflicts(&again);
    assert_eq!(conflicts.len(), 1, "{:?}", again.warnings);
    assert!(conflicts[0].contains(&colleague.id));
    assert!(!conflicts[0].contains(&theirs.id));
}

#[tokio::test]
async fn the_policy_gate_warns_softly_and_a_hard_gate_refuses_without_storing() {
    let h = start(symbolic_on()).await;
    let who = h.principal();
    let kept = h
        .remember(&who, "fact", "The staging cluster has three nodes")
        .await;

    // Soft gate: stored, with the rule named.
    let soft = h
        .remember(&who, "decision", "We run the queue on Postgres")
        .await;
    assert_eq!(soft.outcome(), WriteOutcome::Created);
    assert!(
        soft.warnings
            .iter()
            .any(|w| w.starts_with("policy decision_has_rationale")),
        "{:?}",
        soft.warnings
    );

    h.set_hard_gate(true).await;
    let before = h.db.count_in_tenant(h.tenant.tenant_id, "true").await;
    let claims_before = h.claims(h.tenant.tenant_id, "true").await;
    let refused = h
        .server
        .remember(&who, memory("decision", "We cache sessions in Redis"))
        .await
        .unwrap_err();
    assert_eq!(refused.code, ErrorCode::InvalidArgument);
    assert!(
        refused.message.contains("decision_has_rationale"),
        "{}",
        refused.message
    );
    // A dry run predicts the refusal.
    let dry = h
        .server
        .remember(
            &who,
            RememberRequest {
                dry_run: true,
                ..memory("error", "The deploy failed with exit code 137")
            },
        )
        .await
        .unwrap_err();
    assert!(dry.message.contains("error_has_resolution_path"));
    assert_eq!(
        h.db.count_in_tenant(h.tenant.tenant_id, "true").await,
        before
    );
    assert_eq!(h.claims(h.tenant.tenant_id, "true").await, claims_before);
    assert_eq!(
        h.db.count_in_tenant(h.tenant.tenant_id, &format!("id = '{}'", kept.id))
            .await,
        1
    );

    // What follows the rules still passes the hard gate.
    let reasoned = h
        .remember(
            &who,
            "decision",
            "We cache sessions in Redis because logins must survive restarts",
        )
        .await;
    assert_eq!(reasoned.outcome(), WriteOutcome::Created);
    assert!(
        symbolic_warnings(&reasoned).is_empty(),
        "{:?}",
        reasoned.warnings
    );
    h.set_hard_gate(false).await;
}

#[tokio::test]
async fn with_the_flags_off_no_claims_are_written() {
    let h = start(Config::defaults().remember).await;
    let off = h
        .remember(&h.principal(), "decision", "The billing service uses Redis")
        .await;
    assert_eq!(off.outcome(), WriteOutcome::Created);
    assert!(symbolic_warnings(&off).is_empty(), "{:?}", off.warnings);
    assert_eq!(h.claims(h.tenant.tenant_id, "true").await, 0);

    // Every feature flag on, but not the master switch: still nothing.
    let mut settings = symbolic_on();
    settings.symbolic.enabled = false;
    let h = start(settings).await;
    let first = h
        .remember(&h.principal(), "decision", "The billing service uses Redis")
        .await;
    let second = h
        .remember(
            &h.principal(),
            "fact",
            "The billing service does not use Redis",
        )
        .await;
    assert!(symbolic_warnings(&first).is_empty() && symbolic_warnings(&second).is_empty());
    assert_eq!(h.claims(h.tenant.tenant_id, "true").await, 0);
}

#[tokio::test]
async fn a_broken_symbolic_step_does_not_fail_remember() {
    let h = start(symbolic_on()).await;
    let owner = h.db.owner_client().await;
    owner
        .batch_execute("REVOKE ALL ON mneme.fragment_claims FROM mneme_service")
        .await
        .unwrap();

    let stored = h
        .remember(&h.principal(), "fact", "The billing service uses Redis")
        .await;
    assert_eq!(stored.outcome(), WriteOutcome::Created);
    assert!(
        stored
            .warnings
            .iter()
            .any(|w| w.starts_with("symbolic: the memory is stored")),
        "{:?}",
        stored.warnings
    );
    assert_eq!(
        h.db.count_in_tenant(h.tenant.tenant_id, &format!("id = '{}'", stored.id))
            .await,
        1
    );
    owner
        .batch_execute(
            "GRANT SELECT, INSERT, UPDATE, DELETE ON mneme.fragment_claims TO mneme_service",
        )
        .await
        .unwrap();

    // A claim step that misses its deadline (here: the claims table is
    // locked by someone else) is skipped the same way.
    let mut hurried = symbolic_on();
    hurried.symbolic.timeout = Duration::from_millis(300);
    let h = start(hurried).await;
    let mut owner = h.db.owner_client().await;
    let lock = owner.transaction().await.unwrap();
    lock.batch_execute("LOCK TABLE mneme.fragment_claims IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    let stored = h
        .remember(&h.principal(), "fact", "The billing service uses Redis")
        .await;
    lock.rollback().await.unwrap();
    assert_eq!(stored.outcome(), WriteOutcome::Created);
    assert!(
        stored.warnings.iter().any(|w| w.contains("took too long")),
        "{:?}",
        stored.warnings
    );
    assert_eq!(
        h.db.count_in_tenant(h.tenant.tenant_id, &format!("id = '{}'", stored.id))
            .await,
        1
    );
}

#[tokio::test]
async fn claims_of_batch_writes_are_stored_so_later_writes_conflict_with_them() {
    let h = start(symbolic_on()).await;
    let who = h.principal();
    let batch = h
        .server
        .batch_remember(
            &who,
            mneme_proto::v1::BatchRememberRequest {
                items: vec![
                    memory("fact", "Bob drinks tea."),
                    memory("fact", "The cache uses Redis."),
                ],
                ..Default::default()
            },
            |_| {},
        )
        .await
        .unwrap();
    let tea = batch.results[0].id.clone().expect("stored");
    // Stored in the background, after the batch's own commit.
    let mut stored = 0;
    for _ in 0..100 {
        stored = h
            .claims(h.tenant.tenant_id, &format!("fragment_id = '{tea}'"))
            .await;
        if stored > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(stored > 0, "the batch item's claims are stored");

    let denial = h.remember(&who, "fact", "Bob never drinks tea").await;
    let conflicts = claim_conflicts(&denial);
    assert_eq!(conflicts.len(), 1, "{:?}", denial.warnings);
    assert!(conflicts[0].contains(&tea), "{}", conflicts[0]);
}

#[tokio::test]
async fn a_stopping_service_stores_the_claims_of_its_last_bulk_write() {
    // Regression: the claims of a bulk write were stored by a detached
    // task, which a stopping process dropped.
    let h = start(symbolic_on()).await;
    let who = h.principal();
    let app_url = h.db.app_url.clone();
    let redis = TestRedis::new();
    // The service stops as a process does: its runtime is dropped once
    // `serve` returns.
    let stored = mneme_test_support::on_own_runtime(move || async move {
        let store = Store::connect(&app_url, &mneme_store::StoreOptions::default()).unwrap();
        let cache = Cache::connect(&redis.url, &redis.prefix).await.unwrap();
        let server = RememberServer::new(store, cache, symbolic_on());
        let batch = server
            .batch_remember(
                &who,
                mneme_proto::v1::BatchRememberRequest {
                    items: vec![memory("fact", "Carol drinks coffee.")],
                    ..Default::default()
                },
                |_| {},
            )
            .await
            .unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let signer = mneme_proto::principal::PrincipalSigner::new("internal-token");
        mneme_remember::serve(server, signer, listener, std::future::ready(()))
            .await
            .unwrap();
        batch.results[0].id.clone().expect("stored")
    })
    .await;
    assert!(
        h.claims(h.tenant.tenant_id, &format!("fragment_id = '{stored}'"))
            .await
            > 0,
        "the claims are stored when serve returns"
    );
}
