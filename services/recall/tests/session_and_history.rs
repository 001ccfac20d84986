//! Session tools and the inspection tools against real PostgreSQL and
//! Redis: context, reflect, tool feedback, stats, graph, history,
//! reconstruction, traces and fetch.

mod common;

use std::sync::Arc;

use common::Harness;
use mneme_core::{ErrorCode, Principal};
use mneme_embed::hash::HashEmbedder;
use mneme_proto::v1::{
    AmendRequest, ContextRequest, FetchRequest, FragmentHistoryRequest, GraphExploreRequest,
    LinkRequest, RecallRequest, ReconstructHistoryRequest, ReflectRequest, RememberRequest,
    SearchTracesRequest, StatsRequest, TaskEffectiveness, ToolFeedbackRequest,
};
use mneme_store::{TenantTx, api_keys};
use mneme_test_support::{ALL_PERMISSIONS, create_tenant};

async fn harness() -> Harness {
    Harness::new(Arc::new(HashEmbedder::new(384))).await
}

fn memory(content: &str, kind: &str, topic: &str) -> RememberRequest {
    RememberRequest {
        content: content.into(),
        r#type: kind.into(),
        topic: topic.into(),
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

    async fn link(&self, from: &str, to: &str, relation: &str) {
        self.remember
            .link(
                &self.principal(),
                LinkRequest {
                    from_id: from.into(),
                    to_id: to.into(),
                    relation_type: relation.into(),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
    }

    fn in_session(&self, session: &str) -> Principal {
        Principal {
            session_id: Some(session.into()),
            ..self.principal()
        }
    }

    /// A principal of another tenant.
    async fn stranger(&self) -> Principal {
        let other = create_tenant(&self.db.store(), "stranger", ALL_PERMISSIONS).await;
        Principal {
            tenant_id: other.tenant_id,
            key_id: other.key_id,
            ..self.principal()
        }
    }

    async fn link_weight(&self, from: &str, to: &str) -> f32 {
        let graph = self
            .recall
            .graph_explore(
                &self.principal(),
                GraphExploreRequest {
                    start_id: from.into(),
                    relation_types: vec!["related".into()],
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        graph
            .edges
            .iter()
            .find(|e| e.from_id == from && e.to_id == to)
            .map(|e| e.weight)
            .expect("the link")
    }
}

#[tokio::test]
async fn context_shows_anchors_core_memories_by_type_and_working_memory_within_budget() {
    let h = harness().await;
    let session = h.in_session("s-ctx");
    h.put(RememberRequest {
        is_anchor: true,
        importance: Some(1.0),
        ..memory("The user's name is Mina Park.", "fact", "user")
    })
    .await;
    let preference = h
        .put(memory(
            "Mina prefers answers in Korean with English code comments.",
            "preference",
            "user",
        ))
        .await;
    for i in 0..8 {
        h.put(RememberRequest {
            importance: Some(0.9),
            ..memory(
                &format!("Procedure {i}: restart the ingest worker after changing its queue."),
                "procedure",
                "ops",
            )
        })
        .await;
    }
    h.put(memory(
        "Chose Postgres over Mongo for the billing ledger.",
        "decision",
        "billing",
    ))
    .await;
    h.remember
        .remember(
            &session,
            RememberRequest {
                scope: Some("session".into()),
                ..memory(
                    "Currently refactoring the ingest worker config.",
                    "fact",
                    "work",
                )
            },
        )
        .await
        .unwrap();

    let block = h
        .recall
        .context(&session, ContextRequest::default())
        .await
        .unwrap();
    assert_eq!(block.anchors.len(), 1);
    assert!(
        block
            .injection_text
            .starts_with("[ANCHOR MEMORY]\n- The user's name")
    );
    let types: Vec<&str> = block.core.iter().map(|f| f.r#type.as_str()).collect();
    for kind in ["preference", "procedure", "decision"] {
        assert!(types.contains(&kind), "{kind} has a slot: {types:?}");
    }
    assert_eq!(
        types.iter().filter(|t| **t == "procedure").count(),
        5,
        "procedures are capped at five"
    );
    assert_eq!(block.working.len(), 1);
    assert!(
        block
            .injection_text
            .contains("[WORKING MEMORY]\n- Currently refactoring")
    );
    let sum: u32 = block
        .anchors
        .iter()
        .chain(&block.core)
        .map(|f| f.estimated_tokens)
        .sum();
    assert!(block.total_tokens >= sum);

    // What the block showed, recall skips for the rest of the session.
    let recalled = h
        .recall
        .recall(
            &session,
            RecallRequest {
                text: Some("answers in Korean".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert!(recalled.fragments.iter().all(|f| f.id != preference));

    // A tiny budget keeps the block within it.
    let small = h
        .recall
        .context(
            &session,
            ContextRequest {
                token_budget: Some(30),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert!(small.total_tokens <= 30, "{}", small.total_tokens);

    let unknown = h
        .recall
        .context(
            &session,
            ContextRequest {
                types: vec!["feelings".into()],
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert_eq!(unknown.code, ErrorCode::InvalidArgument);
}

#[tokio::test]
async fn reflect_stores_a_session_as_linked_fragments_an_episode_and_a_milestone_chain() {
    let h = harness().await;
    let session = h.in_session("s-reflect");
    let reflected = h
        .remember
        .reflect(
            &session,
            ReflectRequest {
                summary: vec![
                    "We moved the billing ledger to Postgres 16. Replication lag stayed under a second.".into(),
                ],
                decisions: vec!["Keep the ledger in a single region until audits pass.".into()],
                errors_resolved: vec!["Deploys failed on the expired TLS certificate; renewed it with certbot.".into()],
                new_procedures: vec!["LEARNING: run the migration dry run before every ledger deploy.".into()],
                open_questions: vec!["Should the audit log move to cold storage after a year?".into()],
                task_effectiveness: Some(TaskEffectiveness {
                    overall_success: true,
                    tool_highlights: vec!["recall".into()],
                    tool_pain_points: vec![],
                }),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert!(reflected.warnings.is_empty(), "{:?}", reflected.warnings);
    let kinds: Vec<&str> = reflected
        .fragments
        .iter()
        .map(|f| f.r#type.as_str())
        .collect();
    assert_eq!(
        kinds,
        [
            "fact",
            "fact",
            "decision",
            "error",
            "procedure",
            "fact",
            "episode"
        ],
        "the summary text was split into its two sentences"
    );
    assert!(reflected.fragments[3].content.starts_with("[resolved] "));
    assert!(reflected.fragments[5].content.starts_with("[open] "));
    assert!(reflected.task_feedback_recorded);
    assert_eq!(
        h.db.count_rows(h.tenant.tenant_id, "task_feedback", "overall_success")
            .await,
        1
    );
    let episode = reflected.episode_id.clone().expect("an episode");
    assert_eq!(reflected.fragments[6].id, episode);
    let count = |name: &str| {
        reflected
            .breakdown
            .iter()
            .find(|c| c.name == name)
            .map_or(0, |c| c.count)
    };
    assert_eq!((count("summary"), count("episode")), (2, 1));

    // Every item is part of the episode.
    let graph = h
        .recall
        .graph_explore(
            &h.principal(),
            GraphExploreRequest {
                start_id: episode.clone(),
                relation_types: vec!["part_of".into()],
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(graph.nodes.len(), 7);

    // Statuses and the lesson's source are stored.
    let traces = h
        .recall
        .search_traces(
            &h.principal(),
            SearchTracesRequest {
                session_id: Some("s-reflect".into()),
                limit: Some(100),
                ..Default::default()
            },
        )
        .await
        .unwrap()
        .traces;
    let by_type = |kind: &str| traces.iter().find(|f| f.r#type == kind).unwrap();
    assert_eq!(
        by_type("error").resolution_status.as_deref(),
        Some("resolved")
    );
    assert_eq!(
        by_type("procedure").source.as_deref(),
        Some("learning_extraction")
    );
    assert!(!by_type("procedure").content.starts_with("LEARNING"));

    // A second reflection chains its milestone to the first.
    let second = h
        .remember
        .reflect(
            &session,
            ReflectRequest {
                summary: vec!["The audit export job now runs nightly.".into()],
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert!(second.episode_id.is_some());
    let case_id = format!("episodes:{}:default", h.tenant.key_id);
    let story = h
        .recall
        .reconstruct_history(
            &h.principal(),
            ReconstructHistoryRequest {
                case_id: Some(case_id),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(story.events.len(), 2);
    assert!(
        story
            .events
            .iter()
            .all(|e| e.event_type == "milestone_reached")
    );
    assert_eq!(story.event_edges.len(), 1);
    assert_eq!(story.event_edges[0].edge_type, "preceded_by");
    assert_eq!(story.event_edges[0].from_event, story.events[1].id);
    assert_eq!(
        h.db.count_in_tenant(h.tenant.tenant_id, "true").await,
        9,
        "7 + 2 fragments"
    );
}

#[tokio::test]
async fn reflect_rejects_nothing_reports_bad_items_and_respects_the_quota() {
    let h = harness().await;
    let empty = h
        .remember
        .reflect(&h.principal(), ReflectRequest::default())
        .await
        .unwrap_err();
    assert_eq!(empty.code, ErrorCode::InvalidArgument);

    let partly = h
        .remember
        .reflect(
            &h.principal(),
            ReflectRequest {
                decisions: vec![
                    "Adopt the new on-call rotation from March.".into(),
                    "x".repeat(400),
                ],
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(partly.warnings.len(), 1, "{:?}", partly.warnings);
    assert!(partly.warnings[0].starts_with("decisions[1]:"));
    assert_eq!(
        partly.fragments.len(),
        2,
        "the valid decision and the episode"
    );

    let mut client = h.db.store().client().await.unwrap();
    let tx = TenantTx::begin(&mut client, h.tenant.tenant_id)
        .await
        .unwrap();
    api_keys::set_fragment_limit(&tx, h.tenant.key_id, Some(3))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let over = h
        .remember
        .reflect(
            &h.principal(),
            ReflectRequest {
                summary: vec!["One thing.".into(), "Another thing entirely.".into()],
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert_eq!(over.code, ErrorCode::QuotaExceeded);
    assert_eq!(
        h.db.count_in_tenant(h.tenant.tenant_id, "true").await,
        2,
        "nothing of the refused reflection was stored"
    );
}

#[tokio::test]
async fn tool_feedback_moves_activation_and_link_weights_and_rate_limits_decay() {
    // Without automatic links, the one link below is all there is.
    let mut settings = mneme_config::Config::defaults().remember;
    settings.temporal_link_hours = 0.0;
    settings.proactive_links = false;
    let h = Harness::with_remember_config(Arc::new(HashEmbedder::new(384)), settings).await;
    let a = h
        .put(memory(
            "Grafana alerts route to the ops channel.",
            "fact",
            "ops",
        ))
        .await;
    let b = h
        .put(memory(
            "The ops channel is muted on weekends.",
            "fact",
            "ops",
        ))
        .await;
    h.link(&a, &b, "related").await;
    let before = h.link_weight(&a, &b).await;

    let feedback = |relevant: bool, ids: Vec<String>| ToolFeedbackRequest {
        tool_name: "recall".into(),
        relevant,
        sufficient: relevant,
        fragment_ids: ids,
        ..Default::default()
    };
    let liked = h
        .remember
        .record_tool_feedback(&h.principal(), feedback(true, vec![a.clone(), b.clone()]))
        .await
        .unwrap();
    assert_eq!((liked.fragments_adjusted, liked.links_adjusted), (2, 1));
    let reinforced = h.link_weight(&a, &b).await;
    assert!(
        (reinforced - (before + 0.2)).abs() < 1e-4,
        "{before} → {reinforced}"
    );

    let disliked = h
        .remember
        .record_tool_feedback(&h.principal(), feedback(false, vec![a.clone(), b.clone()]))
        .await
        .unwrap();
    assert_eq!(disliked.links_adjusted, 1);
    let decayed = h.link_weight(&a, &b).await;
    assert!((decayed - (reinforced - 0.15)).abs() < 1e-4);
    let again = h
        .remember
        .record_tool_feedback(&h.principal(), feedback(false, vec![a.clone(), b.clone()]))
        .await
        .unwrap();
    assert_eq!(again.links_adjusted, 0, "decay is rate limited per link");
    assert_eq!(h.link_weight(&a, &b).await, decayed);
    let audited =
        h.db.count_rows(h.tenant.tenant_id, "link_reconsolidations", "true")
            .await;
    assert_eq!(audited, 2);

    // Another tenant's feedback touches nothing here.
    let stranger = h.stranger().await;
    let foreign = h
        .remember
        .record_tool_feedback(&stranger, feedback(true, vec![a.clone(), b.clone()]))
        .await
        .unwrap();
    assert_eq!((foreign.fragments_adjusted, foreign.links_adjusted), (0, 0));

    let bad = h
        .remember
        .record_tool_feedback(
            &h.principal(),
            ToolFeedbackRequest {
                trigger_type: Some("forced".into()),
                ..feedback(true, vec![])
            },
        )
        .await
        .unwrap_err();
    assert_eq!(bad.code, ErrorCode::InvalidArgument);
    let bad_id = h
        .remember
        .record_tool_feedback(&h.principal(), feedback(true, vec!["nope".into()]))
        .await
        .unwrap_err();
    assert_eq!(bad_id.code, ErrorCode::InvalidArgument);

    let stats = h
        .recall
        .stats(&h.principal(), StatsRequest::default())
        .await
        .unwrap();
    assert_eq!(stats.feedback_7d, 3);
    // Rates are rounded to three places, so clients never see float noise.
    assert_eq!(stats.relevant_rate_7d, 0.333);
}

#[tokio::test]
async fn stats_count_only_the_callers_memories() {
    let h = harness().await;
    h.put(memory("Deploys happen on Tuesdays.", "fact", "deploy"))
        .await;
    h.put(memory(
        "Use blue-green deploys for the API.",
        "decision",
        "deploy",
    ))
    .await;
    h.put(RememberRequest {
        is_anchor: true,
        ..memory("Never deploy on Fridays.", "preference", "deploy")
    })
    .await;
    h.recall(RecallRequest {
        text: Some("deploy".into()),
        ..Default::default()
    })
    .await;
    let stats = h
        .recall
        .stats(&h.principal(), StatsRequest::default())
        .await
        .unwrap();
    assert_eq!((stats.total, stats.anchors, stats.topics), (3, 1, 1));
    assert_eq!(stats.awaiting_embedding, 3);
    assert_eq!(stats.searches_7d, 1);
    let counts = |list: &[_]| -> Vec<(String, u64)> {
        list.iter()
            .map(|c: &mneme_proto::v1::CountByName| (c.name.clone(), c.count))
            .collect()
    };
    // Each breakdown lists its own column only, types and tiers by name.
    assert_eq!(counts(&stats.top_topics), [("deploy".into(), 3)]);
    assert_eq!(
        counts(&stats.by_type),
        [
            ("decision".into(), 1),
            ("fact".into(), 1),
            ("preference".into(), 1)
        ]
    );
    assert_eq!(
        stats.by_tier.iter().map(|c| c.count).sum::<u64>(),
        3,
        "{:?}",
        stats.by_tier
    );
    h.embed_all().await;
    let embedded = h
        .recall
        .stats(&h.principal(), StatsRequest::default())
        .await
        .unwrap();
    assert_eq!((embedded.embedded, embedded.awaiting_embedding), (3, 0));

    let stranger = h.stranger().await;
    let theirs = h
        .recall
        .stats(&stranger, StatsRequest::default())
        .await
        .unwrap();
    assert_eq!((theirs.total, theirs.searches_7d), (0, 0));
}

/// `mneme_recall_stats_cache_total{outcome}` so far in this process.
fn stats_cache_count(outcome: &str) -> f64 {
    mneme_telemetry::metrics::registry()
        .gather()
        .iter()
        .filter(|family| family.name() == "mneme_recall_stats_cache_total")
        .flat_map(|family| family.get_metric())
        .filter(|metric| metric.get_label().iter().any(|l| l.value() == outcome))
        .map(|metric| metric.get_counter().get_value())
        .sum()
}

#[tokio::test]
async fn concurrent_stats_calls_that_miss_the_cache_compute_once() {
    let h = harness().await;
    h.put(memory("Deploys happen on Tuesdays.", "fact", "deploy"))
        .await;
    let (misses, hits) = (stats_cache_count("miss"), stats_cache_count("hit"));
    let principal = h.principal();
    let calls = (0..8).map(|_| h.recall.stats(&principal, StatsRequest::default()));
    for stats in futures::future::join_all(calls).await {
        assert_eq!(stats.unwrap().total, 1);
    }
    // One computation; the other seven waited for it (nextest runs each
    // test in a process of its own, so the counts are this test's).
    assert_eq!(stats_cache_count("miss") - misses, 1.0);
    assert_eq!(stats_cache_count("hit"), hits);
    h.recall
        .stats(&principal, StatsRequest::default())
        .await
        .unwrap();
    assert_eq!(stats_cache_count("hit") - hits, 1.0);
}

#[tokio::test]
async fn graph_history_reconstruction_traces_and_fetch() {
    let h = harness().await;
    let error = h
        .put(RememberRequest {
            case_id: Some("case-tls".into()),
            ..memory(
                "Deploys fail with an expired TLS certificate.",
                "error",
                "tls",
            )
        })
        .await;
    let cause = h
        .put(RememberRequest {
            case_id: Some("case-tls".into()),
            ..memory(
                "The certificate renewal cron job was disabled.",
                "fact",
                "tls",
            )
        })
        .await;
    let fix = h
        .put(RememberRequest {
            case_id: Some("case-tls".into()),
            ..memory(
                "Re-enabled the renewal cron and renewed the certificate.",
                "procedure",
                "tls",
            )
        })
        .await;
    let other_error = h
        .put(RememberRequest {
            case_id: Some("case-tls".into()),
            ..memory(
                "The staging load balancer still serves the old chain.",
                "error",
                "tls",
            )
        })
        .await;
    h.link(&error, &cause, "caused_by").await;
    h.link(&error, &fix, "resolved_by").await;

    // graph_explore follows causes and resolutions.
    let graph = h
        .recall
        .graph_explore(
            &h.principal(),
            GraphExploreRequest {
                start_id: cause.clone(),
                depth: Some(2),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let depth_of = |id: &str| graph.nodes.iter().find(|n| n.id == id).map(|n| n.depth);
    assert_eq!(
        (depth_of(&cause), depth_of(&error), depth_of(&fix)),
        (Some(0), Some(1), Some(2))
    );
    assert_eq!(graph.edges.len(), 2);
    let truncated = h
        .recall
        .graph_explore(
            &h.principal(),
            GraphExploreRequest {
                start_id: cause.clone(),
                depth: Some(2),
                limit: Some(2),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert!(truncated.truncated && truncated.nodes.len() == 2);

    // reconstruct_history tells the case in order, with its chains.
    let story = h
        .recall
        .reconstruct_history(
            &h.principal(),
            ReconstructHistoryRequest {
                case_id: Some("case-tls".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let timeline: Vec<&str> = story.timeline.iter().map(|f| f.id.as_str()).collect();
    assert_eq!(timeline, [&error, &cause, &fix, &other_error]);
    assert!(!story.causal_chains.is_empty());
    let unresolved: Vec<&str> = story.unresolved.iter().map(|f| f.id.as_str()).collect();
    assert_eq!(unresolved, [&other_error], "the fixed error is resolved");
    assert!(story.summary.contains("4"), "{}", story.summary);
    let by_entity = h
        .recall
        .reconstruct_history(
            &h.principal(),
            ReconstructHistoryRequest {
                entity: Some("tls".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(by_entity.timeline.len(), 4);
    for both_or_neither in [
        ReconstructHistoryRequest::default(),
        ReconstructHistoryRequest {
            case_id: Some("case-tls".into()),
            entity: Some("tls".into()),
            ..Default::default()
        },
    ] {
        let refused = h
            .recall
            .reconstruct_history(&h.principal(), both_or_neither)
            .await
            .unwrap_err();
        assert_eq!(refused.code, ErrorCode::InvalidArgument);
    }

    // fragment_history shows amendments and supersession.
    h.remember
        .amend(
            &h.principal(),
            AmendRequest {
                id: fix.clone(),
                content: Some(
                    "Re-enabled the renewal cron job and renewed the certificate.".into(),
                ),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let replaced = h
        .remember
        .amend(
            &h.principal(),
            AmendRequest {
                id: fix.clone(),
                content: Some("Renewal now runs from a systemd timer instead of cron.".into()),
                supersede: true,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let history = h
        .recall
        .fragment_history(
            &h.principal(),
            FragmentHistoryRequest {
                id: fix.clone(),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(history.versions.len(), 1);
    assert!(
        history.versions[0]
            .content
            .starts_with("Re-enabled the renewal cron and")
    );
    assert_eq!(history.superseded_by.len(), 1);
    assert_eq!(history.superseded_by[0].id, replaced.id);

    // search_traces filters exactly, newest first.
    let errors = h
        .recall
        .search_traces(
            &h.principal(),
            SearchTracesRequest {
                event_type: Some("error".into()),
                keyword: Some("load balancer".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let found: Vec<&str> = errors.traces.iter().map(|f| f.id.as_str()).collect();
    assert_eq!(found, [&other_error]);

    // fetch returns one memory, and nothing of another tenant.
    let fetched = h
        .recall
        .fetch(
            &h.principal(),
            FetchRequest {
                id: cause.clone(),
                agent_id: None,
            },
        )
        .await
        .unwrap();
    assert_eq!(
        fetched.content,
        "The certificate renewal cron job was disabled."
    );
    let stranger = h.stranger().await;
    for result in [
        h.recall
            .fetch(
                &stranger,
                FetchRequest {
                    id: cause.clone(),
                    agent_id: None,
                },
            )
            .await
            .map(|_| ()),
        h.recall
            .graph_explore(
                &stranger,
                GraphExploreRequest {
                    start_id: cause.clone(),
                    ..Default::default()
                },
            )
            .await
            .map(|_| ()),
        h.recall
            .fragment_history(
                &stranger,
                FragmentHistoryRequest {
                    id: cause.clone(),
                    ..Default::default()
                },
            )
            .await
            .map(|_| ()),
    ] {
        assert_eq!(result.unwrap_err().code, ErrorCode::NotFound);
    }
}

#[tokio::test]
async fn a_contradiction_quarantines_related_links_and_useful_feedback_restores_them() {
    let mut settings = mneme_config::Config::defaults().remember;
    settings.temporal_link_hours = 0.0;
    settings.proactive_links = false;
    // The graph layer (off by default) must be on for its filter to show.
    let mut recall = mneme_config::Config::defaults().recall;
    recall.graph_weight = 0.5;
    let h = Harness::with_configs(Arc::new(HashEmbedder::new(384)), settings, recall).await;
    let a = h
        .put(memory("Staging deploys run every hour.", "fact", "deploy"))
        .await;
    let b = h
        .put(memory("Staging deploys run once a day.", "fact", "deploy"))
        .await;
    let c = h
        .put(memory("Staging lives in eu-west-1.", "fact", "deploy"))
        .await;
    h.link(&a, &b, "related").await;
    h.link(&a, &c, "related").await;
    let links = |condition: String| {
        let h = &h;
        async move {
            h.db.count_rows(h.tenant.tenant_id, "fragment_links", &condition)
                .await
        }
    };
    let between = |from: &str, to: &str, rest: &str| {
        format!("from_id = '{from}' AND to_id = '{to}' AND relation_type = 'related' AND {rest}")
    };

    h.link(&a, &b, "contradicts").await;
    assert_eq!(
        links(between(
            &a,
            &b,
            "quarantine_state = 'soft' AND round(weight * 10) = 7"
        ))
        .await,
        1,
        "the related link between the contradicting pair is quarantined (1.0 - 0.3)"
    );
    assert_eq!(
        links(between(&a, &c, "quarantine_state IS NULL AND weight = 1")).await,
        1,
        "links to others stay as they were"
    );
    assert_eq!(
        links("relation_type = 'contradicts' AND quarantine_state IS NULL".to_owned()).await,
        1
    );
    // The graph layer no longer follows the quarantined link.
    let graph = h
        .recall
        .recall(
            &h.principal(),
            mneme_proto::v1::RecallRequest {
                keywords: vec!["hour".into()],
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert!(
        graph
            .fragments
            .iter()
            .all(|f| f.id != b || !f.matched_by.contains(&"graph".to_owned())),
        "b is not reached through the quarantined link"
    );

    // Useful together after all: the link is restored (+0.3) and released.
    h.remember
        .record_tool_feedback(
            &h.principal(),
            ToolFeedbackRequest {
                tool_name: "recall".into(),
                relevant: true,
                sufficient: true,
                fragment_ids: vec![a.clone(), b.clone()],
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(
        links(between(
            &a,
            &b,
            "quarantine_state = 'released' AND round(weight * 10) = 10"
        ))
        .await,
        1
    );
    let audited =
        h.db.count_rows(
            h.tenant.tenant_id,
            "link_reconsolidations",
            "action IN ('quarantine', 'restore')",
        )
        .await;
    assert_eq!(audited, 2);
}
