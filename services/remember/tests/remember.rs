//! The remember service over real gRPC on loopback: principal checks,
//! health, validation, redaction and idempotency.

use mneme_cache::Cache;
use mneme_config::Config;
use mneme_core::{Permission, Principal};
use mneme_proto::principal::PrincipalSigner;
use mneme_proto::v1::remember_service_client::RememberServiceClient;
use mneme_proto::v1::{ForgetRequest, RememberRequest, WriteOutcome};
use mneme_remember::{RememberServer, serve};
use mneme_test_support::{ALL_PERMISSIONS, TestDatabase, TestRedis, TestTenant, create_tenant};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::Code;
use tonic::transport::Channel;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;

const TOKEN: &str = "test-internal-token-0123456789abcdef";

struct Running {
    _db: TestDatabase,
    tenant: TestTenant,
    channel: Channel,
    stop: CancellationToken,
}

async fn start() -> Running {
    let db = TestDatabase::create().await;
    let redis = TestRedis::new();
    let store = db.store();
    let tenant = create_tenant(&store, "writes", ALL_PERMISSIONS).await;
    let cache = Cache::connect(&redis.url, &redis.prefix).await.unwrap();
    let server = RememberServer::new(store, cache, Config::defaults().remember);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let stop = CancellationToken::new();
    tokio::spawn(serve(
        server,
        PrincipalSigner::new(TOKEN),
        listener,
        stop.clone().cancelled_owned(),
    ));
    let channel = Channel::from_shared(url).unwrap().connect_lazy();
    Running {
        _db: db,
        tenant,
        channel,
        stop,
    }
}

fn principal(tenant: &TestTenant, permissions: &[Permission]) -> Principal {
    Principal {
        tenant_id: tenant.tenant_id,
        key_id: tenant.key_id,
        group_key_ids: vec![],
        user_id: None,
        permissions: permissions.to_vec(),
        workspace: Some("team-docs".into()),
        mode: None,
        session_id: Some("session-1".into()),
        agent_id: "default".into(),
    }
}

fn signed<T>(token: &str, principal: &Principal, message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    PrincipalSigner::new(token).attach(&mut request, principal);
    request
}

fn fact(content: &str) -> RememberRequest {
    RememberRequest {
        content: content.into(),
        topic: "ops".into(),
        r#type: "fact".into(),
        ..Default::default()
    }
}

#[tokio::test]
async fn calls_need_a_principal_signed_with_the_internal_token() {
    let running = start().await;
    let mut client = RememberServiceClient::new(running.channel.clone());

    let anonymous = client
        .remember(tonic::Request::new(fact(
            "Nobody signed this request at all.",
        )))
        .await
        .unwrap_err();
    assert_eq!(anonymous.code(), Code::Unauthenticated);

    let who = principal(&running.tenant, ALL_PERMISSIONS);
    let forged = client
        .remember(signed(
            "another-token-0123456789abcdef0123",
            &who,
            fact("Signed with the wrong token."),
        ))
        .await
        .unwrap_err();
    assert_eq!(forged.code(), Code::Unauthenticated);

    let ok = client
        .remember(signed(
            TOKEN,
            &who,
            fact("Signed with the deployment's token."),
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(ok.outcome(), WriteOutcome::Created);

    // Health needs no principal.
    let health = HealthClient::new(running.channel.clone())
        .check(HealthCheckRequest {
            service: "mneme.v1.RememberService".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(health.status, 1);
    running.stop.cancel();
}

#[tokio::test]
async fn writes_are_validated_redacted_and_idempotent() {
    let running = start().await;
    let mut client = RememberServiceClient::new(running.channel.clone());
    let who = principal(&running.tenant, ALL_PERMISSIONS);

    let redacted = client
        .remember(signed(
            TOKEN,
            &who,
            fact("The CI token is ghp_abcdefghijklmnopqrstuvwxyz0123456789 for now."),
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(redacted.redactions, 1);

    let invalid = client
        .remember(signed(TOKEN, &who, fact("https://example.com/runbook")))
        .await
        .unwrap_err();
    assert_eq!(invalid.code(), Code::InvalidArgument);
    assert!(
        invalid.message().contains("only a URL"),
        "{}",
        invalid.message()
    );

    let keyed = RememberRequest {
        idempotency_key: Some("import-7".into()),
        ..fact("Imported fact seven from the old wiki.")
    };
    let first = client
        .remember(signed(TOKEN, &who, keyed.clone()))
        .await
        .unwrap()
        .into_inner();
    let retry = client
        .remember(signed(TOKEN, &who, keyed))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (retry.id.clone(), retry.outcome()),
        (first.id.clone(), WriteOutcome::Replayed)
    );
    // The key reused for another memory is refused, not replayed: the
    // other memory would be lost unseen.
    let reused = client
        .remember(signed(
            TOKEN,
            &who,
            RememberRequest {
                idempotency_key: Some("import-7".into()),
                ..fact("Imported fact eight from the old wiki.")
            },
        ))
        .await
        .unwrap_err();
    assert_eq!(reused.code(), Code::InvalidArgument);
    assert!(
        reused.message().contains("`import-7` was already used")
            && reused.message().contains(&first.id),
        "{}",
        reused.message()
    );

    let reader = principal(&running.tenant, &[Permission::Read]);
    let denied = client
        .remember(signed(
            TOKEN,
            &reader,
            fact("Readers cannot write anything here."),
        ))
        .await
        .unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied);
    let denied = client
        .forget(signed(
            TOKEN,
            &reader,
            ForgetRequest {
                id: retry.id.clone(),
                ..Default::default()
            },
        ))
        .await
        .unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied);

    let forgotten = client
        .forget(signed(
            TOKEN,
            &who,
            ForgetRequest {
                id: retry.id.clone(),
                ..Default::default()
            },
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((forgotten.deleted, forgotten.protected), (1, 0));
    let again = client
        .forget(signed(
            TOKEN,
            &who,
            ForgetRequest {
                id: retry.id,
                ..Default::default()
            },
        ))
        .await
        .unwrap_err();
    assert_eq!(again.code(), Code::NotFound);
    running.stop.cancel();
}

mod write_path {
    use super::*;
    use mneme_cache::Cache;
    use mneme_store::{Store, StoreOptions, TenantTx, api_keys};

    struct Harness {
        db: TestDatabase,
        tenant: TestTenant,
        server: RememberServer,
        cache: Cache,
    }

    async fn harness() -> Harness {
        harness_with(Config::defaults().remember).await
    }

    async fn harness_with(settings: mneme_config::RememberConfig) -> Harness {
        let db = TestDatabase::create().await;
        let redis = TestRedis::new();
        let store = db.store();
        let tenant = create_tenant(&store, "writer", ALL_PERMISSIONS).await;
        let cache = Cache::connect(&redis.url, &redis.prefix).await.unwrap();
        let server = RememberServer::new(store, cache.clone(), settings);
        Harness {
            db,
            tenant,
            server,
            cache,
        }
    }

    impl Harness {
        /// The memory the conflict tests write variants of.
        async fn signing_fact(&self) -> mneme_proto::v1::RememberResponse {
            self.remember(
                None,
                kind(
                    "Release builds are signed with the ops GPG key.",
                    "fact",
                    "release",
                ),
            )
            .await
        }

        fn who(&self, session: Option<&str>) -> Principal {
            let mut principal = principal(&self.tenant, ALL_PERMISSIONS);
            principal.workspace = None;
            principal.session_id = session.map(str::to_owned);
            principal
        }

        async fn remember(
            &self,
            session: Option<&str>,
            request: RememberRequest,
        ) -> mneme_proto::v1::RememberResponse {
            self.server
                .remember(&self.who(session), request)
                .await
                .unwrap()
        }

        async fn count(&self, condition: &str) -> i64 {
            self.db
                .count_in_tenant(self.tenant.tenant_id, condition)
                .await
        }

        async fn scalar(&self, sql: &str) -> i64 {
            let mut client = self.db.owner_client().await;
            let tx = client.transaction().await.unwrap();
            tx.execute(
                "SELECT set_config('mneme.tenant_id', $1, true)",
                &[&self.tenant.tenant_id.to_string()],
            )
            .await
            .unwrap();
            tx.query_one(sql, &[]).await.unwrap().get(0)
        }

        /// Memories at either end of a temporal link.
        async fn memories_linked_in_time(&self) -> i64 {
            self.scalar(
                "SELECT count(DISTINCT id) FROM mneme.fragment_links,
                        unnest(ARRAY[from_id, to_id]) AS id
                  WHERE relation_type = 'temporal'",
            )
            .await
        }

        /// Pairs of memories linked both ways by one relation (automatic
        /// links have no direction, so a pair holds one of them).
        async fn links_both_ways(&self) -> i64 {
            self.scalar(
                "SELECT count(*) FROM mneme.fragment_links l
                   JOIN mneme.fragment_links r
                     ON r.tenant_id = l.tenant_id AND r.from_id = l.to_id
                    AND r.to_id = l.from_id AND r.relation_type = l.relation_type",
            )
            .await
        }

        /// Polls the count `sql` until `done` holds (automatic links follow
        /// the acknowledgement); fails with `what` after ten seconds.
        async fn wait_until(&self, sql: &str, done: impl Fn(i64) -> bool, what: &str) {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while !done(self.scalar(sql).await) {
                assert!(std::time::Instant::now() < deadline, "{what}");
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        }
    }

    fn kind(content: &str, kind: &str, topic: &str) -> RememberRequest {
        RememberRequest {
            content: content.into(),
            topic: topic.into(),
            r#type: kind.into(),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn links_supersession_and_their_warnings() {
        let h = harness().await;
        let old = h
            .remember(
                None,
                kind(
                    "The staging database runs PostgreSQL 14.",
                    "fact",
                    "staging",
                ),
            )
            .await;
        let other = h
            .remember(
                None,
                kind(
                    "Staging is deployed from the release branch.",
                    "fact",
                    "deploys",
                ),
            )
            .await;
        let new = h
            .remember(
                None,
                RememberRequest {
                    linked_to: vec![other.id.clone(), uuid::Uuid::new_v4().to_string()],
                    supersedes: vec![old.id.clone()],
                    ..kind(
                        "The staging database runs PostgreSQL 16 since the upgrade.",
                        "fact",
                        "staging",
                    )
                },
            )
            .await;
        assert_eq!(new.superseded, vec![old.id.clone()]);
        assert!(new.links_created >= 1);
        assert_eq!(new.warnings.len(), 1, "{:?}", new.warnings);
        assert!(new.warnings[0].contains("linkedTo"));
        assert_eq!(
            h.count(&format!(
                "id = '{}' AND valid_to IS NOT NULL AND importance < 0.3",
                old.id
            ))
            .await,
            1
        );
        let links = h
            .scalar(&format!(
                "SELECT count(*) FROM mneme.fragment_links
                  WHERE (from_id = '{}' AND to_id = '{}' AND relation_type = 'superseded_by')
                     OR (from_id = '{}' AND to_id = '{}' AND relation_type = 'related')",
                old.id, new.id, new.id, other.id
            ))
            .await;
        assert_eq!(links, 2);
        // Same topic within a day: a temporal link, added after the commit.
        let sibling = h
            .remember(
                None,
                kind(
                    "Staging backups are taken every six hours.",
                    "fact",
                    "staging",
                ),
            )
            .await;
        let temporal = |one: &str, other: &str| {
            format!(
                "SELECT count(*) FROM mneme.fragment_links
                  WHERE ((from_id = '{one}' AND to_id = '{other}')
                         OR (from_id = '{other}' AND to_id = '{one}'))
                    AND relation_type = 'temporal'"
            )
        };
        h.wait_until(
            &temporal(&sibling.id, &new.id),
            |n| n > 0,
            "no temporal link appeared",
        )
        .await;
        // The superseded fragment is no longer valid, so it is nobody's neighbour.
        assert_eq!(h.scalar(&temporal(&sibling.id, &old.id)).await, 0);
        assert_eq!(h.scalar(&temporal(&new.id, &old.id)).await, 0);
    }

    /// Writes queue their automatic links and are acknowledged without
    /// waiting for them, however stuck linking is; the queue drains once
    /// linking can proceed, and nothing queued is lost.
    #[tokio::test]
    async fn writes_never_wait_for_automatic_links() {
        let h = harness().await;
        let batch = |tag: &str| mneme_proto::v1::BatchRememberRequest {
            items: (0..3)
                .map(|i| kind(&format!("Import {tag} row {i} landed."), "fact", "imports"))
                .collect(),
            ..Default::default()
        };
        // Link work that cannot finish: every link upsert waits on this lock.
        let mut owner = h.db.owner_client().await;
        let lock = owner.transaction().await.unwrap();
        lock.batch_execute("LOCK TABLE mneme.fragment_links IN EXCLUSIVE MODE")
            .await
            .unwrap();
        let who = h.who(None);
        let patience = std::time::Duration::from_secs(3);
        for tag in ["a", "b", "c"] {
            tokio::time::timeout(patience, h.server.batch_remember(&who, batch(tag), |_| {}))
                .await
                .expect("a batch waited for automatic links")
                .unwrap();
        }
        let single = tokio::time::timeout(
            patience,
            h.remember(None, kind("Import d landed alone.", "fact", "imports")),
        )
        .await
        .expect("a single remember waited for automatic links");
        assert_eq!(
            h.scalar("SELECT count(*) FROM mneme.fragment_links WHERE relation_type = 'temporal'")
                .await,
            0,
            "no link could be written yet"
        );
        lock.rollback().await.unwrap();
        // Every write's links follow, and the queue empties.
        h.wait_until(
            "SELECT count(*) FROM mneme.auto_link_queue",
            |n| n == 0,
            "the queue never drained",
        )
        .await;
        h.wait_until(
            &format!(
                "SELECT count(*) FROM mneme.fragment_links
                  WHERE '{}' IN (from_id, to_id) AND relation_type = 'temporal'",
                single.id
            ),
            |n| n > 0,
            "the single write's links never appeared",
        )
        .await;
        assert_eq!(
            h.memories_linked_in_time().await,
            10,
            "all ten new memories were linked to their neighbours in time"
        );
    }

    async fn set_limit(h: &Harness, limit: Option<i32>) {
        let mut client = h.db.store().client().await.unwrap();
        let tx = TenantTx::begin(&mut client, h.tenant.tenant_id)
            .await
            .unwrap();
        assert!(
            api_keys::set_fragment_limit(&tx, h.tenant.key_id, limit)
                .await
                .unwrap()
        );
        tx.commit().await.unwrap();
    }

    #[tokio::test]
    async fn dry_runs_report_without_writing_and_conflicts_are_read_only() {
        let h = harness().await;
        set_limit(&h, Some(100)).await;
        let stored = h.signing_fact().await;
        let dry = h
            .remember(
                None,
                RememberRequest {
                    dry_run: true,
                    ..kind(
                        "Release builds are signed with the ops GPG key every night.",
                        "fact",
                        "release",
                    )
                },
            )
            .await;
        assert!(dry.dry_run && dry.id.is_empty());
        assert_eq!(dry.conflicts.len(), 1);
        assert_eq!(dry.conflicts[0].id, stored.id);
        assert!(dry.conflicts[0].overlap >= 0.5);
        let quota = dry.quota.expect("dry runs report the quota");
        assert_eq!(quota.limit, Some(100));
        assert_eq!(quota.used, 1);
        assert_eq!(h.count("true").await, 1, "a dry run writes nothing");
        assert_eq!(
            h.scalar("SELECT count(*) FROM mneme.fragment_links").await,
            0
        );
    }

    /// A write's conflict hints are looked up beside its transaction when
    /// the pool has a connection to spare, and inside it when it has not
    /// (a pool of one: waiting for a second connection would never end).
    /// Either way they name the similar memory, never the write itself.
    #[tokio::test]
    async fn conflict_hints_are_found_with_or_without_a_spare_connection() {
        let h = harness().await;
        let single = RememberServer::new(
            Store::connect(
                &h.db.app_url,
                &StoreOptions {
                    max_connections: 1,
                    ..StoreOptions::default()
                },
            )
            .unwrap(),
            h.cache.clone(),
            Config::defaults().remember,
        );
        let stored = h.signing_fact().await;
        for (server, content) in [
            (
                &h.server,
                "Release builds are signed with the ops GPG key every night.",
            ),
            (
                &single,
                "Release builds are signed with the ops GPG key every week.",
            ),
        ] {
            let written = tokio::time::timeout(
                std::time::Duration::from_secs(3),
                server.remember(&h.who(None), kind(content, "fact", "release")),
            )
            .await
            .expect("a write does not wait for a second connection")
            .unwrap();
            assert!(
                written.conflicts.iter().any(|c| c.id == stored.id),
                "{content}: {:?}",
                written.conflicts
            );
            assert!(written.conflicts.iter().all(|c| c.id != written.id));
            assert!(written.warnings.is_empty(), "{:?}", written.warnings);
        }
    }

    #[tokio::test]
    async fn the_quota_is_exact_near_the_limit_and_counts_batches() {
        let h = harness().await;
        set_limit(&h, Some(3)).await;
        for i in 0..3 {
            h.remember(
                None,
                kind(
                    &format!("Quota test fact number {i} is stored."),
                    "fact",
                    "quota",
                ),
            )
            .await;
        }
        let over = h
            .server
            .remember(
                &h.who(None),
                kind("Quota test fact number 3 is one too many.", "fact", "quota"),
            )
            .await
            .unwrap_err();
        assert_eq!(over.code, mneme_core::ErrorCode::QuotaExceeded);
        assert!(over.message.contains("3 of its 3"), "{}", over.message);
        let batch = h
            .server
            .batch_remember(
                &h.who(None),
                mneme_proto::v1::BatchRememberRequest {
                    items: vec![kind(
                        "A batch cannot exceed the quota either.",
                        "fact",
                        "quota",
                    )],
                    ..Default::default()
                },
                |_| {},
            )
            .await
            .unwrap_err();
        assert_eq!(batch.code, mneme_core::ErrorCode::QuotaExceeded);
        assert_eq!(h.count("true").await, 3);
    }

    #[tokio::test]
    async fn a_long_batch_is_stored_in_bulk_with_every_outcome_of_single_writes() {
        let h = harness().await;
        let existing = h
            .remember(
                None,
                kind("The ledger closes at midnight UTC.", "fact", "ledger"),
            )
            .await;
        let keyed = h
            .remember(
                None,
                RememberRequest {
                    idempotency_key: Some("import-7".into()),
                    ..kind("The importer retried batch seven.", "fact", "importer")
                },
            )
            .await;

        let mut items: Vec<RememberRequest> = (0..130)
            .map(|i| {
                kind(
                    &format!("Host node-{i} runs shard {i} of the search index."),
                    "fact",
                    "shards",
                )
            })
            .collect();
        items[10] = kind("The ledger closes at midnight UTC.", "fact", "ledger");
        items[60] = RememberRequest {
            idempotency_key: Some("import-7".into()),
            ..kind("The importer retried batch seven.", "fact", "importer")
        };
        items[70] = items[69].clone();
        items[100].linked_to = vec![existing.id.clone()];
        // Two errors of one session and topic: the second joins the case the
        // first opened, which it can only see if the first is stored first.
        items[110] = kind("The importer crashed on row 4411.", "error", "importer");
        items[111] = kind(
            "The importer crashed again on row 4412.",
            "error",
            "importer",
        );
        let events = std::sync::Mutex::new(Vec::new());
        let result = h
            .server
            .batch_remember(
                &h.who(Some("s-9")),
                mneme_proto::v1::BatchRememberRequest {
                    items,
                    ..Default::default()
                },
                |progress| events.lock().unwrap().push(progress.processed),
            )
            .await
            .unwrap();

        assert_eq!(
            (result.created, result.existing, result.rejected),
            (127, 3, 0)
        );
        let outcome = |i: usize| WriteOutcome::try_from(result.results[i].outcome).unwrap();
        let id = |i: usize| result.results[i].id.clone().unwrap();
        assert_eq!(outcome(10), WriteOutcome::Duplicate);
        assert_eq!(id(10), existing.id);
        assert_eq!(outcome(60), WriteOutcome::Replayed);
        assert_eq!(id(60), keyed.id);
        assert_eq!(outcome(70), WriteOutcome::Duplicate);
        assert_eq!(id(70), id(69));
        assert_eq!(outcome(129), WriteOutcome::Created);
        assert_eq!(h.count("topic = 'shards'").await, 125);
        assert_eq!(
            h.scalar(&format!(
                "SELECT count(*) FROM mneme.fragment_links
                  WHERE from_id = '{}' AND to_id = '{}'",
                id(100),
                existing.id
            ))
            .await,
            1
        );
        assert_eq!(
            h.scalar(
                "SELECT count(DISTINCT case_id) FROM mneme.fragments
                  WHERE type = 'error' AND topic = 'importer' AND case_id IS NOT NULL"
            )
            .await,
            1
        );
        assert_eq!(
            h.count("type = 'error' AND topic = 'importer' AND case_id IS NOT NULL")
                .await,
            2
        );
        // Automatic links of the whole batch follow the commit: temporal to
        // its neighbours in time, related by shared keywords.
        let auto_links = |relation: &str| {
            format!(
                "SELECT count(*) FROM mneme.fragment_links
                  WHERE '{}' IN (from_id, to_id) AND relation_type = '{relation}'",
                id(129)
            )
        };
        for relation in ["temporal", "related"] {
            let what = format!("no automatic {relation} links appeared");
            h.wait_until(&auto_links(relation), |n| n > 0, &what).await;
        }
        h.wait_until(
            "SELECT count(*) FROM mneme.auto_link_queue",
            |n| n == 0,
            "the batch's automatic links were not all made",
        )
        .await;
        assert_eq!(
            h.links_both_ways().await,
            0,
            "memories written together are linked once, not both ways"
        );
        // Validation, then progress after every bulk insert up to the
        // total (130 validated + 130 stored), the last once committed.
        let events = events.into_inner().unwrap();
        assert_eq!(
            events,
            vec![130, 180, 230, 260],
            "three inserts of 50, 50, 30"
        );
    }

    #[tokio::test]
    async fn a_batch_reusing_an_idempotency_key_for_other_content_is_refused_whole() {
        let h = harness().await;
        let keyed = h
            .remember(
                None,
                RememberRequest {
                    idempotency_key: Some("import-8".into()),
                    ..kind("The importer retried batch eight.", "fact", "importer")
                },
            )
            .await;
        let items = vec![
            kind("The importer skips empty rows.", "fact", "importer"),
            RememberRequest {
                idempotency_key: Some("import-8".into()),
                ..kind(
                    "The importer now logs every skipped row.",
                    "fact",
                    "importer",
                )
            },
        ];
        let refused = h
            .server
            .batch_remember(
                &h.who(None),
                mneme_proto::v1::BatchRememberRequest {
                    items,
                    ..Default::default()
                },
                |_| {},
            )
            .await
            .unwrap_err();
        assert_eq!(refused.code, mneme_core::ErrorCode::InvalidArgument);
        assert!(
            refused
                .message
                .starts_with("item 1: idempotencyKey `import-8` was already used")
                && refused.message.contains(&keyed.id),
            "{}",
            refused.message
        );
        assert_eq!(
            h.count("topic = 'importer'").await,
            1,
            "nothing of the batch stored"
        );
    }

    /// A link batch that hits the statement timeout is retried smaller
    /// instead of waiting for the next sweep (none runs here): once linking
    /// can proceed again, the queue drains.
    #[tokio::test]
    async fn a_link_batch_that_times_out_is_retried_smaller() {
        let h = harness().await;
        let impatient = RememberServer::new(
            Store::connect(
                &h.db.app_url,
                &StoreOptions {
                    statement_timeout: std::time::Duration::from_millis(700),
                    ..StoreOptions::default()
                },
            )
            .unwrap(),
            h.cache.clone(),
            Config::defaults().remember,
        );
        let mut owner = h.db.owner_client().await;
        let lock = owner.transaction().await.unwrap();
        lock.batch_execute("LOCK TABLE mneme.fragment_links IN EXCLUSIVE MODE")
            .await
            .unwrap();
        let batch = mneme_proto::v1::BatchRememberRequest {
            items: (0..4)
                .map(|i| kind(&format!("Nightly export {i} finished."), "fact", "exports"))
                .collect(),
            ..Default::default()
        };
        impatient
            .batch_remember(&h.who(None), batch, |_| {})
            .await
            .unwrap();
        // Two batches time out meanwhile (500, then 250 fragments).
        tokio::time::sleep(std::time::Duration::from_millis(1600)).await;
        assert_eq!(
            h.scalar("SELECT count(*) FROM mneme.auto_link_queue").await,
            4
        );
        lock.rollback().await.unwrap();
        h.wait_until(
            "SELECT count(*) FROM mneme.auto_link_queue",
            |n| n == 0,
            "the timed-out batch was not retried",
        )
        .await;
        assert_eq!(h.memories_linked_in_time().await, 4);
    }

    /// Fragments a process queued for automatic links but never drained
    /// (it stopped right after the commit) are linked by any remember
    /// process's periodic sweep.
    #[tokio::test]
    async fn fragments_left_in_the_link_queue_are_linked_by_the_sweep() {
        use mneme_core::fragment::{FragmentLimits, RememberInput, prepare};
        use mneme_store::auto_link_queue;
        use mneme_store::fragments::{self, Author};

        let h = harness().await;
        let mut request = kind("The billing service retries webhooks.", "fact", "billing");
        request.keywords = vec!["billing".into(), "webhooks".into(), "retries".into()];
        let first = h.remember(None, request).await;
        let queued = "SELECT count(*) FROM mneme.auto_link_queue";
        // The write's own drain empties the queue first.
        h.wait_until(queued, |n| n == 0, "the write's drain did not run")
            .await;
        let orphan = {
            let fragment = prepare(
                RememberInput {
                    content: "Billing webhooks are retried for three days.".into(),
                    topic: "billing".into(),
                    fragment_type: "fact".into(),
                    keywords: vec!["billing".into(), "webhooks".into(), "retries".into()],
                    ..Default::default()
                },
                &FragmentLimits::default(),
                &mneme_core::text::Tokenizer::default(),
            )
            .unwrap();
            let store = h.db.store();
            let mut client = store.client().await.unwrap();
            let tx = TenantTx::begin(&mut client, h.tenant.tenant_id)
                .await
                .unwrap();
            let author = Author {
                key_id: h.tenant.key_id,
                agent_id: "default",
                session_id: None,
            };
            let id = fragments::insert(&tx, author, &fragment).await.unwrap().id;
            auto_link_queue::enqueue(&tx, &[id]).await.unwrap();
            tx.commit().await.unwrap();
            id
        };
        let links_of_orphan = format!(
            "SELECT count(*) FROM mneme.fragment_links
              WHERE ARRAY[from_id, to_id] <@ ARRAY['{orphan}', '{}']::uuid[]
                AND relation_type = 'related'",
            first.id
        );
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        assert_eq!(
            h.scalar(&links_of_orphan).await,
            0,
            "nothing drained it yet"
        );
        assert_eq!(h.scalar(queued).await, 1);

        let mut settings = Config::defaults().remember;
        settings.auto_link_sweep_interval = std::time::Duration::from_secs(1);
        let sweeper = RememberServer::new(h.db.store(), h.cache.clone(), settings);
        let stop = CancellationToken::new();
        let served = tokio::spawn(serve(
            sweeper,
            PrincipalSigner::new(TOKEN),
            TcpListener::bind("127.0.0.1:0").await.unwrap(),
            stop.clone().cancelled_owned(),
        ));
        h.wait_until(
            &links_of_orphan,
            |n| n > 0,
            "the sweep did not link the queued fragment",
        )
        .await;
        assert_eq!(
            h.scalar(queued).await,
            0,
            "linked fragments leave the queue"
        );
        stop.cancel();
        served.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn a_batch_settles_cases_in_the_callers_order_and_stores_in_bulk() {
        let h = harness().await;
        // An error of the session stored without a case (as an import
        // through `reflect` leaves it): the first case-event write of its
        // topic adopts it.
        let orphan = h
            .remember(
                Some("s-7"),
                kind("The export stalled at 80 percent.", "error", "export"),
            )
            .await;
        h.db.owner_in_tenant(h.tenant.tenant_id)
            .await
            .execute(
                "UPDATE mneme.fragments SET case_id = NULL WHERE id = $1",
                &[&orphan.id.parse::<uuid::Uuid>().unwrap()],
            )
            .await
            .unwrap();

        let items = vec![
            kind("Restarting the cache fixed nothing.", "procedure", "cache"),
            kind("The cache node ran out of memory.", "error", "cache"),
            kind(
                "We decided to shard the export by day.",
                "decision",
                "export",
            ),
            kind("The cache holds sessions for 30 days.", "fact", "cache"),
            kind(
                "Raising the cache memory to 8 GiB fixed it.",
                "procedure",
                "cache",
            ),
            kind(
                "Sharding the export fixed the stall.",
                "procedure",
                "export",
            ),
        ];
        let result = h
            .server
            .batch_remember(
                &h.who(Some("s-7")),
                mneme_proto::v1::BatchRememberRequest {
                    items,
                    ..Default::default()
                },
                |_| {},
            )
            .await
            .unwrap();
        assert_eq!(result.created, 6);
        let id = |i: usize| result.results[i].id.clone().unwrap();
        let case_of = |id: String| {
            let h = &h;
            async move {
                let case: Option<String> =
                    h.db.owner_in_tenant(h.tenant.tenant_id)
                        .await
                        .query_one(
                            "SELECT case_id FROM mneme.fragments WHERE id = $1",
                            &[&id.parse::<uuid::Uuid>().unwrap()],
                        )
                        .await
                        .unwrap()
                        .get(0);
                case
            }
        };
        // A fix before any error of its topic opens nothing; the error
        // opens a case the later fix joins; the fact stays outside.
        assert_eq!(case_of(id(0)).await, None);
        let cache_case = case_of(id(1)).await.expect("the error opens a case");
        assert_eq!(case_of(id(4)).await.as_ref(), Some(&cache_case));
        assert_eq!(case_of(id(3)).await, None);
        // The export decision adopted the orphaned error; the fix joined.
        let export_case = case_of(id(2)).await.expect("the decision adopts the error");
        assert_ne!(export_case, cache_case);
        assert_eq!(
            case_of(orphan.id.clone()).await.as_ref(),
            Some(&export_case)
        );
        assert_eq!(case_of(id(5)).await.as_ref(), Some(&export_case));
        // Each case's events chain in the callers' order, whatever order
        // the rows were inserted in.
        let edge = |from: String, to: String| {
            let h = &h;
            async move {
                h.scalar(&format!(
                    "SELECT count(*) FROM mneme.case_event_edges e
                       JOIN mneme.case_events a ON a.id = e.from_event
                       JOIN mneme.case_events b ON b.id = e.to_event
                      WHERE e.edge_type = 'preceded_by'
                        AND a.source_fragment_id = '{from}' AND b.source_fragment_id = '{to}'"
                ))
                .await
            }
        };
        assert_eq!(edge(id(4), id(1)).await, 1);
        assert_eq!(edge(id(5), id(2)).await, 1);
        assert_eq!(
            h.scalar("SELECT count(*) FROM mneme.case_events").await,
            5,
            "the first error's own event, then the error, the decision and the two fixes"
        );
    }

    #[tokio::test]
    async fn concurrent_batches_of_the_same_memories_in_opposite_orders_all_succeed() {
        // Each batch inserts in chunks. In the callers' orders the second
        // chunk of each would wait for rows the other has not committed, a
        // deadlock PostgreSQL breaks by failing one of them after a second
        // (and again when both are retried together); batches are stored in
        // content-hash order instead, so one waits for the other and both
        // callers get their answer.
        let h = harness().await;
        let who = h.who(None);
        for round in 0..4 {
            let items: Vec<RememberRequest> = (0..100)
                .map(|i| {
                    kind(
                        &format!("Round {round}: replica {i} of the cache tier serves zone {i}."),
                        "fact",
                        "replicas",
                    )
                })
                .collect();
            let reversed: Vec<RememberRequest> = items.iter().rev().cloned().collect();
            let batch = |items| mneme_proto::v1::BatchRememberRequest {
                items,
                ..Default::default()
            };
            let (forward, backward) = tokio::join!(
                h.server.batch_remember(&who, batch(items.clone()), |_| {}),
                h.server.batch_remember(&who, batch(reversed), |_| {}),
            );
            let (forward, backward) = (forward.unwrap(), backward.unwrap());
            assert_eq!(forward.created + backward.created, 100, "round {round}");
            assert_eq!(forward.existing + backward.existing, 100, "round {round}");
            // The same import again, now more important (0.9, clamped to a
            // fact's 0.7): both raise the stored memories, in opposite
            // orders, without a deadlock.
            let raised: Vec<RememberRequest> = items
                .iter()
                .map(|item| RememberRequest {
                    importance: Some(0.9),
                    ..item.clone()
                })
                .collect();
            let reversed: Vec<RememberRequest> = raised.iter().rev().cloned().collect();
            let (forward, backward) = tokio::join!(
                h.server.batch_remember(&who, batch(raised), |_| {}),
                h.server.batch_remember(&who, batch(reversed), |_| {}),
            );
            let (forward, backward) = (forward.unwrap(), backward.unwrap());
            assert_eq!(
                (forward.existing, backward.existing),
                (100, 100),
                "round {round}"
            );
        }
        assert_eq!(h.count("topic = 'replicas'").await, 400);
        assert_eq!(
            h.count("topic = 'replicas' AND importance > 0.65").await,
            400
        );
    }

    #[tokio::test]
    async fn errors_of_a_session_and_topic_form_a_case_with_events() {
        let h = harness().await;
        let first = h
            .remember(
                Some("s-1"),
                kind(
                    "The nightly import crashed with out-of-memory.",
                    "error",
                    "import",
                ),
            )
            .await;
        let case_id = first.case_id.clone().expect("an error opens a case");
        let second = h
            .remember(
                Some("s-1"),
                kind(
                    "The import crashed again after the retry at 03:10.",
                    "error",
                    "import",
                ),
            )
            .await;
        let fix = h
            .remember(
                Some("s-1"),
                kind(
                    "Raising the import worker memory to 4 GiB fixed it.",
                    "procedure",
                    "import",
                ),
            )
            .await;
        assert_eq!(second.case_id.as_deref(), Some(case_id.as_str()));
        assert_eq!(fix.case_id.as_deref(), Some(case_id.as_str()));
        // Another session or topic gets a case of its own.
        let elsewhere = h
            .remember(
                Some("s-2"),
                kind(
                    "The nightly import crashed on a malformed row.",
                    "error",
                    "import",
                ),
            )
            .await;
        assert_ne!(elsewhere.case_id, first.case_id);
        let events = h
            .scalar(&format!(
                "SELECT count(*) FROM mneme.case_events WHERE case_id = '{case_id}'
                   AND event_type IN ('error_observed', 'fix_attempted')"
            ))
            .await;
        assert_eq!(events, 3);
        let chain = h
            .scalar("SELECT count(*) FROM mneme.case_event_edges WHERE edge_type = 'preceded_by'")
            .await;
        assert_eq!(chain, 2);
        // A fact carries no case unless it names one.
        let fact = h
            .remember(
                Some("s-1"),
                kind(
                    "The import reads from the billing replica.",
                    "fact",
                    "import",
                ),
            )
            .await;
        assert_eq!(fact.case_id, None);
    }

    #[tokio::test]
    async fn verifying_a_case_rewards_its_evidence_and_a_failed_verification_costs_it() {
        let mut settings = Config::defaults().remember;
        settings.case_reward_backprop = true;
        let h = harness_with(settings).await;
        let importance = |id: String| {
            let h = &h;
            async move {
                h.scalar(&format!(
                    "SELECT (importance * 1000)::bigint FROM mneme.fragments WHERE id = '{id}'"
                ))
                .await
            }
        };
        let error = h
            .remember(
                Some("s-1"),
                kind(
                    "The deploy failed: the migration lock timed out.",
                    "error",
                    "deploy",
                ),
            )
            .await;
        let case_id = error.case_id.clone().expect("an error opens a case");
        let fix = h
            .remember(
                Some("s-1"),
                kind(
                    "Running migrations before the rollout fixed the lock timeout.",
                    "procedure",
                    "deploy",
                ),
            )
            .await;
        let (error_before, fix_before) = (
            importance(error.id.clone()).await,
            importance(fix.id.clone()).await,
        );
        // Evidence of another case (another session) must not move.
        let other = h
            .remember(
                Some("s-2"),
                kind("The cache warmup failed on start.", "error", "deploy"),
            )
            .await;
        let other_before = importance(other.id.clone()).await;

        let verification = h
            .remember(
                Some("s-1"),
                RememberRequest {
                    case_id: Some(case_id.clone()),
                    ..kind(
                        "The deploy ran clean twice after the fix.",
                        "fact",
                        "deploy",
                    )
                },
            )
            .await;
        let amend = |status: &str| mneme_proto::v1::AmendRequest {
            id: verification.id.clone(),
            assertion_status: Some(status.into()),
            ..Default::default()
        };
        h.server
            .amend(&h.who(Some("s-1")), amend("verified"))
            .await
            .unwrap();
        assert_eq!(
            importance(error.id.clone()).await,
            (error_before + 150).min(1000)
        );
        assert_eq!(
            importance(fix.id.clone()).await,
            (fix_before + 150).min(1000)
        );
        assert_eq!(importance(other.id.clone()).await, other_before);

        h.server
            .amend(&h.who(Some("s-1")), amend("rejected"))
            .await
            .unwrap();
        assert_eq!(
            importance(fix.id.clone()).await,
            (fix_before + 150).min(1000) - 100
        );
        let verdicts = h
            .scalar(&format!(
                "SELECT count(*) FROM mneme.case_events WHERE case_id = '{case_id}'
                   AND event_type IN ('verification_passed', 'verification_failed')"
            ))
            .await;
        assert_eq!(verdicts, 2);
    }

    #[tokio::test]
    async fn session_scope_goes_to_working_memory_only() {
        let h = harness().await;
        let response = h
            .remember(
                Some("s-9"),
                RememberRequest {
                    scope: Some("session".into()),
                    ..kind(
                        "Currently debugging the flaky login test on CI.",
                        "fact",
                        "focus",
                    )
                },
            )
            .await;
        assert_eq!(
            (response.scope.as_str(), response.ttl_tier.as_str()),
            ("session", "session")
        );
        assert_eq!(h.count("true").await, 0);
        let memory = h
            .cache
            .working_memory(
                &mneme_cache::session_owner(h.tenant.tenant_id, h.tenant.key_id),
                "s-9",
            )
            .await
            .unwrap();
        assert_eq!(memory.len(), 1);
        assert_eq!(memory[0].id, response.id);
        let no_session = h
            .server
            .remember(
                &h.who(None),
                RememberRequest {
                    scope: Some("session".into()),
                    ..kind(
                        "Without a session there is no working memory.",
                        "fact",
                        "focus",
                    )
                },
            )
            .await
            .unwrap_err();
        assert_eq!(no_session.code, mneme_core::ErrorCode::InvalidArgument);
    }
}

mod edits {
    use super::*;
    use mneme_cache::Cache;
    use mneme_core::ErrorCode;
    use mneme_proto::v1::{AmendRequest, KeywordList, LinkRequest};

    struct Harness {
        db: TestDatabase,
        tenant: TestTenant,
        server: RememberServer,
    }

    async fn harness() -> Harness {
        let db = TestDatabase::create().await;
        let redis = TestRedis::new();
        let store = db.store();
        let tenant = create_tenant(&store, "editor", ALL_PERMISSIONS).await;
        let cache = Cache::connect(&redis.url, &redis.prefix).await.unwrap();
        let server = RememberServer::new(store, cache, Config::defaults().remember);
        Harness { db, tenant, server }
    }

    impl Harness {
        fn who(&self) -> Principal {
            let mut p = principal(&self.tenant, ALL_PERMISSIONS);
            p.workspace = None;
            p
        }

        async fn store(&self, content: &str, kind: &str, topic: &str) -> String {
            self.server
                .remember(
                    &self.who(),
                    RememberRequest {
                        content: content.into(),
                        r#type: kind.into(),
                        topic: topic.into(),
                        ..Default::default()
                    },
                )
                .await
                .unwrap()
                .id
        }

        async fn count(&self, condition: &str) -> i64 {
            self.db
                .count_in_tenant(self.tenant.tenant_id, condition)
                .await
        }
    }

    #[tokio::test]
    async fn forget_by_topic_respects_protection_and_dry_runs() {
        let h = harness().await;
        for i in 0..4 {
            h.store(
                &format!("Scratch note {i} about the prototype build."),
                "fact",
                "scratch",
            )
            .await;
        }
        h.store(
            "Always keep the prototype signing key offline.",
            "preference",
            "scratch",
        )
        .await;
        let dry = h
            .server
            .forget(
                &h.who(),
                ForgetRequest {
                    topic: Some("scratch".into()),
                    dry_run: true,
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        assert_eq!((dry.deleted, dry.ids.len(), dry.protected), (0, 4, 1));
        assert_eq!(h.count("topic = 'scratch'").await, 5);
        let done = h
            .server
            .forget(
                &h.who(),
                ForgetRequest {
                    topic: Some("scratch".into()),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        assert_eq!((done.deleted, done.protected), (4, 1));
        assert_eq!(h.count("topic = 'scratch'").await, 1);
        let neither = h
            .server
            .forget(&h.who(), ForgetRequest::default())
            .await
            .unwrap_err();
        assert_eq!(neither.code, ErrorCode::InvalidArgument);
    }

    #[tokio::test]
    async fn amendments_keep_history_and_refuse_duplicates() {
        let h = harness().await;
        let id = h
            .store(
                "The API rate limit is 100 requests per minute.",
                "fact",
                "api",
            )
            .await;
        let other = h
            .store(
                "The API rate limit is 200 requests per minute.",
                "fact",
                "api-next",
            )
            .await;
        let amended = h
            .server
            .amend(
                &h.who(),
                AmendRequest {
                    id: id.clone(),
                    content: Some("The API rate limit is 120 requests per minute.".into()),
                    keywords: Some(KeywordList {
                        values: vec!["rate-limit".into()],
                    }),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        assert!(amended.updated);
        assert_eq!((amended.id.as_str(), amended.versions), (id.as_str(), 1));
        assert_eq!(
            h.count(&format!(
                "id = '{id}' AND content LIKE '%120%' AND keywords = '{{rate-limit}}' AND embedding IS NULL"
            ))
            .await,
            1
        );
        // The same content as another memory: nothing changes.
        let clash = h
            .server
            .amend(
                &h.who(),
                AmendRequest {
                    id: id.clone(),
                    content: Some("The API rate limit is 200 requests per minute.".into()),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        assert!(!clash.updated);
        assert_eq!(clash.existing_id.as_deref(), Some(other.as_str()));
        // Nothing to change: refused, and no empty version is kept.
        let empty = h
            .server
            .amend(
                &h.who(),
                AmendRequest {
                    id: id.clone(),
                    ..Default::default()
                },
            )
            .await
            .unwrap_err();
        assert_eq!(empty.code, mneme_core::ErrorCode::InvalidArgument);
        assert!(
            empty.message.starts_with("nothing to amend"),
            "{}",
            empty.message
        );
        let versions: i64 =
            h.db.owner_in_tenant(h.tenant.tenant_id)
                .await
                .query_one(
                    "SELECT count(*) FROM mneme.fragment_versions WHERE fragment_id::text = $1",
                    &[&id],
                )
                .await
                .unwrap()
                .get(0);
        assert_eq!(versions, 1);
        // Supersede: a new memory, the old one stops being valid.
        let replaced = h
            .server
            .amend(
                &h.who(),
                AmendRequest {
                    id: id.clone(),
                    content: Some("The API rate limit is 150 requests per minute.".into()),
                    supersede: true,
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        assert_ne!(replaced.id, id);
        assert_eq!(
            h.count(&format!("id = '{id}' AND valid_to IS NOT NULL"))
                .await,
            1
        );
        let stale = h
            .server
            .amend(
                &h.who(),
                AmendRequest {
                    id: id.clone(),
                    importance: Some(0.4),
                    ..Default::default()
                },
            )
            .await
            .unwrap_err();
        assert!(stale.message.contains("superseded"), "{}", stale.message);
        let missing = h
            .server
            .amend(
                &h.who(),
                AmendRequest {
                    id: uuid::Uuid::new_v4().to_string(),
                    importance: Some(0.5),
                    ..Default::default()
                },
            )
            .await
            .unwrap_err();
        assert_eq!(missing.code, ErrorCode::NotFound);
    }

    #[tokio::test]
    async fn links_refuse_cycles_and_resolving_an_error_marks_it() {
        let h = harness().await;
        let outage = h
            .store(
                "The checkout outage was caused by an expired certificate.",
                "error",
                "checkout",
            )
            .await;
        let cert = h
            .store(
                "The wildcard certificate expired on the first of March.",
                "fact",
                "tls",
            )
            .await;
        let renewal = h
            .store(
                "Certificates now renew automatically thirty days early.",
                "procedure",
                "tls",
            )
            .await;
        let link = |from: &str, to: &str, relation: &str| LinkRequest {
            from_id: from.into(),
            to_id: to.into(),
            relation_type: relation.into(),
            ..Default::default()
        };
        assert!(
            h.server
                .link(&h.who(), link(&outage, &cert, "caused_by"))
                .await
                .unwrap()
                .linked
        );
        let cycle = h
            .server
            .link(&h.who(), link(&cert, &outage, "caused_by"))
            .await
            .unwrap_err();
        assert!(cycle.message.contains("cycle"), "{}", cycle.message);
        // The reverse direction is fine for an undirected relation.
        assert!(
            h.server
                .link(&h.who(), link(&cert, &outage, "related"))
                .await
                .unwrap()
                .linked
        );
        assert!(
            h.server
                .link(&h.who(), link(&outage, &renewal, "resolved_by"))
                .await
                .unwrap()
                .linked
        );
        assert_eq!(
            h.count(&format!(
                "id = '{outage}' AND resolution_status = 'resolved' AND importance <= 0.5"
            ))
            .await,
            1
        );
        let reserved = h
            .server
            .link(&h.who(), link(&cert, &renewal, "temporal"))
            .await
            .unwrap_err();
        assert_eq!(reserved.code, ErrorCode::InvalidArgument);
        let foreign = h
            .server
            .link(
                &h.who(),
                link(&cert, &uuid::Uuid::new_v4().to_string(), "related"),
            )
            .await
            .unwrap_err();
        assert_eq!(foreign.code, ErrorCode::NotFound);
    }

    /// Key groups share reading, not writing: a group peer can read a
    /// key's memories but cannot amend, forget, supersede or resolve them,
    /// while their own key still can.
    #[tokio::test]
    async fn a_group_peer_reads_but_cannot_change_another_keys_memories() {
        let h = harness().await;
        let peer_key =
            mneme_test_support::add_group_peer(&h.db.store(), &h.tenant, "teammate").await;
        let mut owner = h.who();
        owner.group_key_ids = vec![peer_key];
        let mut peer = h.who();
        peer.key_id = peer_key;
        peer.group_key_ids = vec![h.tenant.key_id];

        let deploy = h
            .store(
                "Billing deploys through ArgoCD on Tuesdays.",
                "fact",
                "billing",
            )
            .await;
        let outage = h
            .store(
                "Billing webhooks failed with HTTP 502 after the deploy.",
                "error",
                "billing",
            )
            .await;
        let peer_fix = h
            .server
            .remember(
                &peer,
                RememberRequest {
                    content: "Raising the webhook proxy timeout fixed the 502s.".into(),
                    r#type: "procedure".into(),
                    topic: "billing".into(),
                    supersedes: vec![deploy.clone()],
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        assert!(peer_fix.superseded.is_empty(), "{peer_fix:?}");
        assert!(
            peer_fix.warnings.iter().any(|w| w.contains(&deploy)),
            "{:?}",
            peer_fix.warnings
        );

        let amend = h
            .server
            .amend(
                &peer,
                AmendRequest {
                    id: deploy.clone(),
                    content: Some("Billing deploys through ArgoCD on Fridays.".into()),
                    ..Default::default()
                },
            )
            .await
            .unwrap_err();
        assert_eq!(amend.code, ErrorCode::PermissionDenied, "{}", amend.message);
        assert!(amend.message.contains("key group"), "{}", amend.message);
        let forget = h
            .server
            .forget(
                &peer,
                ForgetRequest {
                    id: deploy.clone(),
                    ..Default::default()
                },
            )
            .await
            .unwrap_err();
        assert_eq!(
            forget.code,
            ErrorCode::PermissionDenied,
            "{}",
            forget.message
        );
        let by_topic = h
            .server
            .forget(
                &peer,
                ForgetRequest {
                    topic: Some("billing".into()),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        assert_eq!(
            by_topic.ids,
            vec![peer_fix.id.clone()],
            "only the peer's own"
        );
        let resolve = h
            .server
            .link(
                &peer,
                LinkRequest {
                    from_id: outage.clone(),
                    to_id: deploy.clone(),
                    relation_type: "resolved_by".into(),
                    ..Default::default()
                },
            )
            .await
            .unwrap_err();
        assert_eq!(
            resolve.code,
            ErrorCode::PermissionDenied,
            "{}",
            resolve.message
        );
        // Linking readable memories stays open to the group.
        let related = h
            .server
            .link(
                &peer,
                LinkRequest {
                    from_id: outage.clone(),
                    to_id: deploy.clone(),
                    relation_type: "related".into(),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        assert!(related.linked);
        let unchanged = format!(
            "(id = '{deploy}' AND valid_to IS NULL AND content LIKE '%Tuesdays%') \
             OR (id = '{outage}' AND resolution_status IS DISTINCT FROM 'resolved')"
        );
        assert_eq!(
            h.count(&unchanged).await,
            2,
            "the owner's memories are unchanged"
        );

        // The owner itself still may.
        let amended = h
            .server
            .amend(
                &owner,
                AmendRequest {
                    id: deploy.clone(),
                    content: Some("Billing deploys through ArgoCD on Fridays.".into()),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        assert!(amended.updated);
        let forgotten = h
            .server
            .forget(
                &owner,
                ForgetRequest {
                    id: deploy.clone(),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        assert_eq!(forgotten.deleted, 1);
    }
}
