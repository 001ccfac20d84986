//! The recall service against real PostgreSQL and Redis: layers, filters,
//! budgets and degradation. Services are called in-process (the gRPC hop is
//! covered by the end-to-end tests).

mod common;

use std::sync::Arc;

use common::{DownEmbedder, Harness};
use mneme_core::{ErrorCode, Permission};
use mneme_embed::hash::HashEmbedder;
use mneme_proto::v1::{RecallRequest, RecallResponse, RememberRequest};
use mneme_recall::RecallServer;

/// The graph layer's weight in tests of the layer (it is off by default).
const GRAPH_WEIGHT: f64 = 0.5;

fn text(query: &str) -> RecallRequest {
    RecallRequest {
        text: Some(query.into()),
        ..Default::default()
    }
}

fn ids(response: &RecallResponse) -> Vec<&str> {
    response.fragments.iter().map(|f| f.id.as_str()).collect()
}

#[tokio::test]
async fn fresh_fragments_are_found_by_full_text_before_their_embedding_exists() {
    let h = Harness::new(Arc::new(HashEmbedder::new(384))).await;
    let id = h
        .store(
            "The billing service retries failed card payments three times.",
            "fact",
            "billing",
            Default::default(),
        )
        .await;
    let response = h.recall(text("how often are card payments retried?")).await;
    assert_eq!(ids(&response), vec![id.as_str()]);
    // The keyword layer runs on the request's keywords only.
    assert_eq!(response.layers, vec!["vector", "fulltext"]);
    assert!(
        response.fragments[0]
            .matched_by
            .contains(&"fulltext".to_owned())
    );
    assert!(
        !response.fragments[0]
            .matched_by
            .contains(&"vector".to_owned())
    );

    // Once embedded, the vector layer finds it too.
    h.embed_all().await;
    let response = h.recall(text("how often are card payments retried?")).await;
    assert!(
        response.fragments[0]
            .matched_by
            .contains(&"vector".to_owned())
    );
    assert!(response.fragments[0].similarity.is_some());
}

#[tokio::test]
async fn type_topic_workspace_and_agent_filters_limit_the_search() {
    let h = Harness::new(Arc::new(HashEmbedder::new(384))).await;
    let decision = h
        .store(
            "We chose PostgreSQL for the ledger database.",
            "decision",
            "ledger",
            Default::default(),
        )
        .await;
    let fact = h
        .store(
            "The ledger database holds seven years of entries.",
            "fact",
            "ledger",
            Default::default(),
        )
        .await;
    let other_topic = h
        .store(
            "The ledger team meets on Tuesdays.",
            "fact",
            "team",
            Default::default(),
        )
        .await;
    let in_a = h
        .store(
            "Workspace A keeps its ledger exports in bucket alpha.",
            "fact",
            "ledger",
            RememberRequest {
                workspace: Some("a".into()),
                ..Default::default()
            },
        )
        .await;
    let in_b = h
        .store(
            "Workspace B keeps its ledger exports in bucket beta.",
            "fact",
            "ledger",
            RememberRequest {
                workspace: Some("b".into()),
                ..Default::default()
            },
        )
        .await;
    let by_coder = h
        .store(
            "The coder agent found a ledger rounding bug.",
            "error",
            "ledger",
            RememberRequest {
                agent_id: Some("coder".into()),
                ..Default::default()
            },
        )
        .await;
    h.embed_all().await;

    let only = |kind: &str| RecallRequest {
        text: Some("ledger".into()),
        r#type: Some(kind.into()),
        ..Default::default()
    };
    assert_eq!(
        ids(&h.recall(only("decision")).await),
        vec![decision.as_str()]
    );

    let by_topic = h
        .recall(RecallRequest {
            text: Some("ledger".into()),
            topic: Some("team".into()),
            ..Default::default()
        })
        .await;
    assert_eq!(ids(&by_topic), vec![other_topic.as_str()]);

    let in_workspace_a = h
        .recall(RecallRequest {
            text: Some("ledger".into()),
            workspace: Some("a".into()),
            ..Default::default()
        })
        .await;
    let found = ids(&in_workspace_a);
    assert!(
        found.contains(&in_a.as_str()) && found.contains(&fact.as_str()),
        "{found:?}"
    );
    assert!(!found.contains(&in_b.as_str()), "{found:?}");

    // The coder's memory is the coder's; shared (default-agent) ones are everybody's.
    let as_writer = h
        .recall(RecallRequest {
            text: Some("ledger rounding bug".into()),
            agent_id: Some("writer".into()),
            ..Default::default()
        })
        .await;
    assert!(!ids(&as_writer).contains(&by_coder.as_str()));
    assert!(ids(&as_writer).contains(&fact.as_str()));
    let as_coder = h
        .recall(RecallRequest {
            text: Some("ledger rounding bug".into()),
            agent_id: Some("coder".into()),
            ..Default::default()
        })
        .await;
    assert_eq!(ids(&as_coder)[0], by_coder);

    let unknown = h
        .recall
        .recall(&h.principal(), only("opinion"))
        .await
        .unwrap_err();
    assert_eq!(unknown.code, ErrorCode::InvalidArgument);
}

#[tokio::test]
async fn limit_and_token_budget_cut_the_results() {
    let h = Harness::new(Arc::new(HashEmbedder::new(384))).await;
    for i in 0..5 {
        h.store(
            &format!("Runbook step {i}: restart the queue consumer and check its lag."),
            "procedure",
            "runbook",
            Default::default(),
        )
        .await;
    }
    let all = h.recall(text("queue consumer runbook")).await;
    assert_eq!(all.fragments.len(), 5);
    let per_fragment = all.fragments[0].estimated_tokens;

    let budget = h
        .recall(RecallRequest {
            token_budget: Some(per_fragment * 2 + 1),
            ..text("queue consumer runbook")
        })
        .await;
    assert_eq!(budget.fragments.len(), 2);
    assert!(budget.truncated_by_budget);
    assert!(budget.total_tokens <= per_fragment * 2 + 1);

    let one = h
        .recall(RecallRequest {
            limit: Some(1),
            ..text("queue consumer")
        })
        .await;
    assert_eq!(one.fragments.len(), 1);
    let many = h
        .recall(RecallRequest {
            limit: Some(10_000),
            ..text("queue consumer")
        })
        .await;
    assert_eq!(many.fragments.len(), 5);
    let zero = h
        .recall
        .recall(
            &h.principal(),
            RecallRequest {
                limit: Some(0),
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert_eq!(zero.code, ErrorCode::InvalidArgument);

    // No query: the most important recent memories.
    let browse = h.recall(RecallRequest::default()).await;
    assert_eq!(browse.fragments.len(), 5);
    assert!(browse.layers.is_empty());
}

#[tokio::test]
async fn recall_degrades_to_the_lexical_layers_when_the_embedder_is_down() {
    let h = Harness::new(Arc::new(DownEmbedder)).await;
    let id = h
        .store(
            "Incident 42 was caused by an expired TLS certificate.",
            "error",
            "incidents",
            Default::default(),
        )
        .await;
    let response = h
        .recall(RecallRequest {
            keywords: vec!["tls".into()],
            ..text("expired certificate incident")
        })
        .await;
    assert_eq!(response.layers, vec!["fulltext", "keyword"]);
    assert_eq!(ids(&response), vec![id.as_str()]);
}

#[tokio::test]
async fn recall_needs_the_read_permission() {
    let h = Harness::new(Arc::new(HashEmbedder::new(384))).await;
    let mut writer = h.principal();
    writer.permissions = vec![Permission::Write];
    let err = h
        .recall
        .recall(&writer, text("anything"))
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::PermissionDenied);
}

mod filters_and_pages {
    use std::time::Duration;

    use chrono::Utc;
    use mneme_core::Permission;
    use mneme_proto::v1::{LinkRequest, RecallRequest, RememberRequest};
    use mneme_test_support::add_group_peer;

    use super::*;

    fn fact(content: &str) -> RememberRequest {
        RememberRequest {
            content: content.into(),
            r#type: "fact".into(),
            topic: "filters".into(),
            ..Default::default()
        }
    }

    impl Harness {
        async fn put(&self, request: RememberRequest) -> String {
            self.remember
                .remember(&self.principal(), request)
                .await
                .unwrap()
                .id
        }

        async fn ids_for(&self, request: RecallRequest) -> Vec<String> {
            self.recall(request)
                .await
                .fragments
                .into_iter()
                .map(|f| f.id)
                .collect()
        }
    }

    /// A harness holding 25 look-alike inventory facts (their ids in
    /// order) and writing no automatic links, and the query that pages
    /// through them ten at a time.
    async fn inventory() -> (Harness, Vec<String>) {
        Box::pin(inventory_ranked_by(mneme_config::Config::defaults().recall)).await
    }

    async fn inventory_ranked_by(recall: mneme_config::RecallConfig) -> (Harness, Vec<String>) {
        let mut settings = mneme_config::Config::defaults().remember;
        settings.proactive_links = false;
        settings.temporal_link_hours = 0.0;
        let embedder = Arc::new(HashEmbedder::new(384));
        let h = Harness::with_configs(embedder, settings, recall).await;
        let mut ids = Vec::new();
        for i in 0..25 {
            let content = format!("Inventory item {i:02} is stored in warehouse aisle {i}.");
            ids.push(h.put(fact(&content)).await);
        }
        (h, ids)
    }

    fn inventory_page(cursor: Option<String>) -> RecallRequest {
        RecallRequest {
            text: Some("inventory item warehouse aisle".into()),
            limit: Some(10),
            cursor,
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn a_cursor_walks_every_result_once_and_pages_do_not_shift() {
        // This test is about fragments written mid-walk; links written
        // mid-walk have their own test below.
        let (h, _) = inventory().await;
        let query = inventory_page;
        let first = h.recall(query(None)).await;
        assert_eq!(first.fragments.len(), 10);
        assert!(first.has_more);
        // Written after the first page: it must not shift the next pages.
        h.put(fact("Inventory item 99 is stored in warehouse aisle 99."))
            .await;
        let second = h.recall(query(first.next_cursor.clone())).await;
        let third = h.recall(query(second.next_cursor.clone())).await;
        assert_eq!((second.fragments.len(), third.fragments.len()), (10, 5));
        assert!(!third.has_more && third.next_cursor.is_none());
        let mut all: Vec<String> = [first, second, third]
            .into_iter()
            .flat_map(|page| page.fragments.into_iter().map(|f| f.content))
            .collect();
        assert!(!all.iter().any(|c| c.contains("99")));
        all.sort();
        all.dedup();
        assert_eq!(all.len(), 25);
    }

    #[tokio::test]
    async fn a_link_committed_late_between_pages_neither_repeats_nor_hides_a_result() {
        // A link whose transaction began before the first page and
        // committed after it carries a time inside the walk's snapshot: the
        // graph layer of later pages sees it, the first page did not (the
        // automatic links of a remember, written in the background, do
        // this). Counting an offset into the moved ranking returned one
        // result twice and another never.
        //
        // Ranked by rank fusion, where a graph hit of weight 0.5 outweighs
        // the near-ties of 25 nearly identical items, so that the link moves
        // its target across a page boundary for certain (score fusion
        // spreads near-ties over [0, 1]); the cursor's guarantees do not
        // depend on the fusion.
        let mut recall = mneme_config::Config::defaults().recall;
        recall.fusion = mneme_core::scoring::Fusion::Rrf { k: 60.0 };
        recall.graph_weight = GRAPH_WEIGHT;
        let (h, ids) = Box::pin(inventory_ranked_by(recall)).await;
        h.embed_all().await;
        let query = inventory_page;
        let first = h.recall(query(None)).await;
        let first_ids: Vec<String> = first.fragments.iter().map(|f| f.id.clone()).collect();
        let lifted = ids
            .iter()
            .find(|id| !first_ids.contains(id))
            .unwrap()
            .clone();
        let owner = h.db.owner_in_tenant(h.tenant.tenant_id).await;
        for seed in &first_ids {
            owner
                .execute(
                    "INSERT INTO mneme.fragment_links
                         (tenant_id, from_id, to_id, relation_type, weight, created_at)
                     VALUES ($1, $2::text::uuid, $3::text::uuid, 'caused_by', 2, now() - interval '1 hour')",
                    &[&h.tenant.tenant_id, &lifted, seed],
                )
                .await
                .unwrap();
        }
        let second = h.recall(query(first.next_cursor.clone())).await;
        let moved = second.fragments.iter().find(|f| f.id == lifted);
        assert!(
            moved.is_some_and(|f| f.matched_by.contains(&"graph".to_owned())),
            "the late link lifts a result of a later page into the second one"
        );
        let third = h.recall(query(second.next_cursor.clone())).await;
        assert!(!third.has_more && third.next_cursor.is_none());
        let walked: Vec<String> = [first, second, third]
            .into_iter()
            .flat_map(|page| page.fragments.into_iter().map(|f| f.id))
            .collect();
        let distinct: std::collections::BTreeSet<&String> = walked.iter().collect();
        assert_eq!((walked.len(), distinct.len()), (25, 25), "{walked:?}");
    }

    #[tokio::test]
    async fn as_of_is_a_real_validity_filter() {
        let h = Harness::new(Arc::new(HashEmbedder::new(384))).await;
        let old = h
            .put(fact("The on-call phone number is extension 4411."))
            .await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        let before_change = Utc::now();
        tokio::time::sleep(Duration::from_millis(50)).await;
        let new = h
            .put(RememberRequest {
                supersedes: vec![old.clone()],
                ..fact("The on-call phone number is extension 5522.")
            })
            .await;
        let text = || RecallRequest {
            text: Some("on-call phone extension".into()),
            ..Default::default()
        };
        assert_eq!(h.ids_for(text()).await, vec![new.clone()]);
        let then = h
            .ids_for(RecallRequest {
                as_of_unix_ms: Some(before_change.timestamp_millis()),
                ..text()
            })
            .await;
        assert_eq!(
            then,
            vec![old.clone()],
            "asOf shows what was valid then, and only that"
        );
        let mut everything = h
            .ids_for(RecallRequest {
                include_superseded: true,
                ..text()
            })
            .await;
        everything.sort();
        let mut expected = vec![old, new];
        expected.sort();
        assert_eq!(everything, expected);
    }

    #[tokio::test]
    async fn time_ranges_use_event_time_and_read_korean_and_english() {
        let h = Harness::new(Arc::new(HashEmbedder::new(384))).await;
        let day = 86_400_000i64;
        let now = Utc::now().timestamp_millis();
        let last_month = h
            .put(RememberRequest {
                occurred_at_unix_ms: Some(now - 40 * day),
                ..fact("The quarterly review meeting covered the hiring plan.")
            })
            .await;
        let yesterday = h
            .put(RememberRequest {
                occurred_at_unix_ms: Some(now - day),
                ..fact("The weekly review meeting covered the release plan.")
            })
            .await;
        let ranged = |from: &str, to: &str| RecallRequest {
            text: Some("review meeting plan".into()),
            time_from: Some(from.into()),
            time_to: Some(to.into()),
            ..Default::default()
        };
        assert_eq!(
            h.ids_for(ranged("어제", "어제")).await,
            vec![yesterday.clone()]
        );
        assert_eq!(
            h.ids_for(ranged("yesterday", "today")).await,
            vec![yesterday]
        );
        assert_eq!(
            h.ids_for(ranged("60 days ago", "30 days ago")).await,
            vec![last_month]
        );
        let nonsense = h
            .recall
            .recall(&h.principal(), ranged("someday", "today"))
            .await
            .unwrap_err();
        assert_eq!(nonsense.code, ErrorCode::InvalidArgument);
    }

    #[tokio::test]
    async fn fragments_found_by_both_keyword_and_vector_search_are_returned_not_dropped() {
        // Regression: the reference's RRF merge dropped hits found by its
        // keyword layer and another layer.
        let h = Harness::new(Arc::new(HashEmbedder::new(384))).await;
        let id = h
            .put(RememberRequest {
                keywords: vec!["kafka".into(), "retention".into()],
                ..fact("Kafka retention on the events topic is seven days.")
            })
            .await;
        h.embed_all().await;
        let response = h
            .recall(RecallRequest {
                text: Some("kafka retention".into()),
                keywords: vec!["kafka".into()],
                ..Default::default()
            })
            .await;
        let found = response
            .fragments
            .iter()
            .find(|f| f.id == id)
            .expect("returned");
        for layer in ["vector", "fulltext", "keyword"] {
            assert!(
                found.matched_by.contains(&layer.to_owned()),
                "{:?}",
                found.matched_by
            );
        }
        assert!(
            found
                .explanations
                .contains(&"semantic_similarity".to_owned())
        );
        assert!(
            found
                .explanations
                .contains(&"direct_keyword_match".to_owned())
        );
        assert!(
            found.content.starts_with("Kafka"),
            "content survives the merge"
        );
    }

    #[tokio::test]
    async fn the_graph_layer_adds_linked_fragments_and_links_carry_previews() {
        let mut recall = mneme_config::Config::defaults().recall;
        recall.graph_weight = GRAPH_WEIGHT;
        let h = Harness::with_recall_config(Arc::new(HashEmbedder::new(384)), recall).await;
        let cause = h
            .put(fact("The payment outage started after the DNS change."))
            .await;
        let effect = h
            .put(fact("Customers saw checkout timeouts for forty minutes."))
            .await;
        h.remember
            .link(
                &h.principal(),
                LinkRequest {
                    from_id: effect.clone(),
                    to_id: cause.clone(),
                    relation_type: "caused_by".into(),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        let response = h.recall(text("payment outage DNS")).await;
        let neighbor = response
            .fragments
            .iter()
            .find(|f| f.id == effect)
            .expect("graph neighbour");
        assert_eq!(neighbor.matched_by, vec!["graph"]);
        let top = response.fragments.iter().find(|f| f.id == cause).unwrap();
        assert_eq!(top.linked.len(), 1);
        assert_eq!(top.linked[0].id, effect);
        assert_eq!(top.linked[0].direction, "incoming");
        assert!(top.linked[0].preview.starts_with("Customers saw"));
        let no_links = h
            .recall(RecallRequest {
                include_links: Some(false),
                ..text("payment outage DNS")
            })
            .await;
        assert!(no_links.fragments.iter().all(|f| f.linked.is_empty()));
    }

    #[tokio::test]
    async fn a_graph_neighbour_inherits_the_relevance_of_the_hit_it_is_linked_to() {
        // Regression: neighbours were scored by link weight alone, so the
        // neighbour of the weakest hit ranked with that of the best one.
        let mut recall = mneme_config::Config::defaults().recall;
        recall.graph_weight = GRAPH_WEIGHT;
        let h = Harness::with_recall_config(Arc::new(HashEmbedder::new(384)), recall).await;
        let strong = h
            .put(fact("The payment outage started after the DNS change."))
            .await;
        let weak = h
            .put(fact("The DNS resolver was upgraded last spring."))
            .await;
        let of_strong = h
            .put(fact("Customers saw checkout timeouts for forty minutes."))
            .await;
        let of_weak = h
            .put(fact("The office plants are watered on Fridays."))
            .await;
        for (from_id, to_id) in [(&of_strong, &strong), (&of_weak, &weak)] {
            h.remember
                .link(
                    &h.principal(),
                    LinkRequest {
                        from_id: from_id.clone(),
                        to_id: to_id.clone(),
                        relation_type: "related".into(),
                        ..Default::default()
                    },
                )
                .await
                .unwrap();
        }
        let response = h.recall(text("payment outage after the DNS change")).await;
        let found = |id: &String| {
            let position = response.fragments.iter().position(|f| &f.id == id);
            let fragment = &response.fragments[position.expect("recalled")];
            (
                position.unwrap(),
                fragment.matched_by.clone(),
                fragment.score,
            )
        };
        let (strong_at, ..) = found(&strong);
        let (weak_at, ..) = found(&weak);
        let (of_strong_at, of_strong_by, of_strong_score) = found(&of_strong);
        let (of_weak_at, of_weak_by, of_weak_score) = found(&of_weak);
        assert_eq!(
            (of_strong_by, of_weak_by),
            (vec!["graph".to_owned()], vec!["graph".to_owned()])
        );
        assert!(strong_at < weak_at, "{response:?}");
        assert!(
            of_strong_at < of_weak_at && of_strong_score > of_weak_score,
            "the neighbour of the better hit ranks higher: {response:?}"
        );
    }

    #[tokio::test]
    async fn link_previews_never_show_what_the_caller_cannot_read() {
        // Regression: the reference filled link previews without scoping
        // them to the caller's key.
        let h = Harness::new(Arc::new(HashEmbedder::new(384))).await;
        let other_key = add_group_peer(&h.db.store(), &h.tenant, "colleague").await;

        let mine = h
            .put(fact("Our team's secret launch date is in the roadmap doc."))
            .await;
        let mut colleague = h.principal();
        colleague.key_id = other_key;
        colleague.group_key_ids = vec![h.tenant.key_id];
        let theirs = h
            .remember
            .remember(
                &colleague,
                fact("The colleague's private note mentions the launch date."),
            )
            .await
            .unwrap()
            .id;
        let mut me = h.principal();
        me.group_key_ids = vec![other_key];
        h.remember
            .link(
                &me,
                LinkRequest {
                    from_id: mine.clone(),
                    to_id: theirs.clone(),
                    relation_type: "related".into(),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        // Without the group, the colleague's fragment must not leak through the link.
        let alone = h.recall(text("secret launch date roadmap")).await;
        let found = alone.fragments.iter().find(|f| f.id == mine).unwrap();
        assert!(found.linked.is_empty(), "{:?}", found.linked);
        assert!(alone.fragments.iter().all(|f| f.id != theirs));
        // Within the group it is visible.
        let grouped = h
            .recall
            .recall(&me, text("secret launch date roadmap"))
            .await
            .unwrap();
        let found = grouped.fragments.iter().find(|f| f.id == mine).unwrap();
        assert_eq!(found.linked.len(), 1);
    }

    #[tokio::test]
    async fn importance_anchor_affect_and_depth_filters() {
        let h = Harness::new(Arc::new(HashEmbedder::new(384))).await;
        let anchor = h
            .put(RememberRequest {
                is_anchor: true,
                importance: Some(0.95),
                ..fact("Production deploys need two approvals from the platform team.")
            })
            .await;
        let doubtful = h
            .put(RememberRequest {
                affect: Some("doubt".into()),
                importance: Some(0.3),
                ..fact("Production deploys might need a change ticket, unclear so far.")
            })
            .await;
        let decision = h
            .put(RememberRequest {
                r#type: "decision".into(),
                ..fact("We decided production deploys happen only on weekdays.")
            })
            .await;
        let q = || RecallRequest {
            text: Some("production deploys".into()),
            ..Default::default()
        };
        assert_eq!(
            h.ids_for(RecallRequest {
                is_anchor: Some(true),
                ..q()
            })
            .await,
            vec![anchor.clone()]
        );
        assert_eq!(
            h.ids_for(RecallRequest {
                affect: vec!["doubt".into()],
                ..q()
            })
            .await,
            vec![doubtful.clone()]
        );
        let important = h
            .ids_for(RecallRequest {
                min_importance: Some(0.6),
                ..q()
            })
            .await;
        assert!(important.contains(&anchor) && !important.contains(&doubtful));
        assert_eq!(
            h.ids_for(RecallRequest {
                depth: Some("high-level".into()),
                ..q()
            })
            .await,
            vec![decision]
        );
    }

    #[tokio::test]
    async fn a_stopping_service_writes_the_accesses_it_still_holds() {
        // Regression: the access writer was detached, so a restart lost up
        // to a flush interval of access statistics.
        let h = Harness::new(Arc::new(HashEmbedder::new(384))).await;
        let id = h
            .put(fact("The staging cluster is rebuilt every Sunday night."))
            .await;
        let mut settings = mneme_config::Config::defaults().recall;
        settings.access_flush = Duration::from_secs(3600);
        let (app_url, redis_url, prefix) = (
            h.db.app_url.clone(),
            h.redis.url.clone(),
            h.redis.prefix.clone(),
        );
        let principal = h.principal();
        // The service stops as a process does: its runtime is dropped once
        // `serve` returns.
        let found = mneme_test_support::on_own_runtime(move || async move {
            let store =
                mneme_store::Store::connect(&app_url, &mneme_store::StoreOptions::default())
                    .unwrap();
            let cache = mneme_cache::Cache::connect(&redis_url, &prefix)
                .await
                .unwrap();
            let embedder = Arc::new(HashEmbedder::new(384));
            let recall = RecallServer::new(store, cache, embedder, settings);
            let found = recall
                .recall(&principal, text("staging cluster rebuilt"))
                .await
                .unwrap();
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let signer = mneme_proto::principal::PrincipalSigner::new("internal-token");
            mneme_recall::serve(recall, signer, listener, std::future::ready(()))
                .await
                .unwrap();
            found
                .fragments
                .into_iter()
                .map(|f| f.id)
                .collect::<Vec<_>>()
        })
        .await;
        assert_eq!(found, vec![id.clone()]);
        let accessed = format!("id = '{id}' AND access_count = 1");
        assert_eq!(
            h.db.count_in_tenant(h.tenant.tenant_id, &accessed).await,
            1,
            "the last flush is done when serve returns"
        );
    }

    #[tokio::test]
    async fn search_events_hints_and_seen_fragments() {
        let h = Harness::new(Arc::new(HashEmbedder::new(384))).await;
        let empty = h.recall(text("nothing stored yet")).await;
        assert_eq!(empty.hints[0].signal, "no_results");
        assert_eq!(empty.hints[0].tool, "remember");
        assert!(empty.search_event_id > 0);
        let seen = h
            .put(fact("The office wifi password rotates every month."))
            .await;
        let unseen = h
            .put(fact("The office wifi network is called mneme-guest."))
            .await;
        // A session that was already shown `seen` (by context).
        let cache = mneme_cache::Cache::connect(&h.redis.url, &h.redis.prefix)
            .await
            .unwrap();
        cache
            .mark_seen(
                &mneme_cache::session_owner(h.tenant.tenant_id, h.tenant.key_id),
                "s-1",
                std::slice::from_ref(&seen),
                Duration::from_secs(60),
            )
            .await;
        let mut in_session = h.principal();
        in_session.session_id = Some("s-1".into());
        let response = h
            .recall
            .recall(&in_session, text("office wifi"))
            .await
            .unwrap();
        let ids: Vec<String> = response.fragments.iter().map(|f| f.id.clone()).collect();
        assert_eq!(ids, vec![unseen.clone()]);
        let again = h
            .recall
            .recall(
                &in_session,
                RecallRequest {
                    exclude_seen: Some(false),
                    ..text("office wifi")
                },
            )
            .await
            .unwrap();
        assert_eq!(again.fragments.len(), 2);
        // Recalling counts as an access, recorded after the answer.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while h
            .db
            .count_in_tenant(
                h.tenant.tenant_id,
                &format!("id = '{unseen}' AND access_count >= 2"),
            )
            .await
            == 0
        {
            assert!(
                std::time::Instant::now() < deadline,
                "access was not recorded"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let events = h.db.count_in_tenant(h.tenant.tenant_id, "true").await;
        assert_eq!(events, 2);
        let _ = Permission::Read;
    }
}
