//! Tool argument validation: what a `remember` (and `stm_surfacing_feedback`)
//! call's arguments go through before anything is stored.
//!
//! The gateway's own argument types (`services/gateway/src/tools/*.rs`) are
//! private to the gateway crate, which is too heavy to instrument; they only
//! deserialise and forward. The validation proper is pure and lives in the
//! library crates, and that is what this target drives:
//! `mneme_core::fragment::prepare` (content, topic, type, keywords,
//! importance, lengths, enums, redaction, TTL tier), then
//! `mneme_core::claims::extract` and `mneme_core::policy::check` on the
//! prepared content (the remember service's symbolic layer),
//! `mneme_core::principal::resolve_agent_id`, `Permission::parse_list` and
//! `mneme_surfacing::feedback::parse_feedback`.
//!
//! Input: a JSON object with `remember`'s argument names (`content`, `topic`,
//! `type`, `keywords`, `importance`, …, `agentId`), plus `rating`,
//! `memory_id`, `ratings` and `delivered` for the feedback parser and
//! `permissions` for the key permission list. Fields of the wrong JSON type
//! count as absent (the gateway refuses them before `prepare`). With
//! `"tightLimits": true` the limits are small, to reach the length checks.
//!
//! Properties: no panic; an accepted fragment is within every limit, its
//! optional fields are trimmed and non-empty, its importance is in [0, 1]
//! and its hash is the content's; preparing is deterministic; claims are
//! bounded; accepted feedback only rates delivered memories, once each.
#![no_main]

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use libfuzzer_sys::fuzz_target;
use mneme_core::claims::{self, MAX_CLAIMS, MAX_FIELD_CHARS};
use mneme_core::fragment::{self, FragmentLimits, FragmentType, RememberInput};
use mneme_core::policy::{self, PolicyInput};
use mneme_core::principal::{Permission, Principal, resolve_agent_id};
use mneme_core::text::Tokenizer;
use mneme_surfacing::feedback::{FeedbackInput, parse_feedback};
use serde_json::{Map, Value};

fn text(args: &Map<String, Value>, key: &str) -> Option<String> {
    args.get(key).and_then(Value::as_str).map(str::to_owned)
}

fn strings(args: &Map<String, Value>, key: &str) -> Vec<String> {
    args.get(key)
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

fn remember_input(args: &Map<String, Value>) -> RememberInput {
    RememberInput {
        content: text(args, "content").unwrap_or_default(),
        topic: text(args, "topic").unwrap_or_default(),
        fragment_type: text(args, "type").unwrap_or_default(),
        keywords: strings(args, "keywords"),
        importance: args
            .get("importance")
            .and_then(Value::as_f64)
            .map(|v| v as f32),
        is_anchor: args.get("isAnchor").and_then(Value::as_bool) == Some(true),
        source: text(args, "source"),
        workspace: text(args, "workspace"),
        idempotency_key: text(args, "idempotencyKey"),
        context_summary: text(args, "contextSummary"),
        case_id: text(args, "caseId"),
        goal: text(args, "goal"),
        outcome: text(args, "outcome"),
        phase: text(args, "phase"),
        resolution_status: text(args, "resolutionStatus"),
        assertion_status: text(args, "assertionStatus"),
        affect: text(args, "affect"),
        occurred_at: text(args, "occurredAt")
            .and_then(|at| DateTime::parse_from_rfc3339(&at).ok())
            .map(|at| at.with_timezone(&Utc)),
    }
}

fn limits(args: &Map<String, Value>) -> FragmentLimits {
    if args.get("tightLimits").and_then(Value::as_bool) == Some(true) {
        FragmentLimits {
            max_content_chars: 40,
            max_episode_chars: 60,
            min_content_weighted_len: 4,
            max_topic_chars: 8,
            max_keywords: 3,
            max_keyword_chars: 6,
            extracted_keywords: 2,
            max_idempotency_key_chars: 8,
            max_workspace_chars: 8,
            max_source_chars: 8,
            max_context_summary_chars: 12,
            redact_pii: false,
        }
    } else {
        FragmentLimits::default()
    }
}

fn trimmed_non_empty(value: &Option<String>, max: usize) {
    if let Some(value) = value {
        assert!(!value.is_empty() && value.trim() == value, "{value:?}");
        assert!(value.chars().count() <= max, "{value:?} over {max}");
    }
}

fn check_remember(args: &Map<String, Value>, tokenizer: &Tokenizer) {
    let limits = limits(args);
    let Ok(prepared) = fragment::prepare(remember_input(args), &limits, tokenizer) else {
        return;
    };
    let again = fragment::prepare(remember_input(args), &limits, tokenizer)
        .expect("preparing is deterministic");
    assert_eq!(again, prepared);

    let max_content = if prepared.fragment_type == FragmentType::Episode {
        limits.max_episode_chars
    } else {
        limits.max_content_chars
    };
    assert!(!prepared.content.is_empty());
    assert!(prepared.content.chars().count() <= max_content);
    assert!(!prepared.topic.is_empty());
    assert!(prepared.topic.chars().count() <= limits.max_topic_chars);
    assert!(prepared.keywords.len() <= limits.max_keywords.max(limits.extracted_keywords));
    assert!(
        (0.0..=1.0).contains(&prepared.importance),
        "{}",
        prepared.importance
    );
    assert_eq!(
        prepared.content_hash,
        fragment::content_hash(&prepared.content)
    );
    trimmed_non_empty(&prepared.source, limits.max_source_chars);
    trimmed_non_empty(&prepared.workspace, limits.max_workspace_chars);
    trimmed_non_empty(&prepared.idempotency_key, limits.max_idempotency_key_chars);
    trimmed_non_empty(&prepared.context_summary, limits.max_context_summary_chars);
    trimmed_non_empty(&prepared.case.case_id, limits.max_idempotency_key_chars);
    trimmed_non_empty(&prepared.case.phase, 50);

    let extracted = claims::extract(&prepared.content);
    assert!(extracted.len() <= MAX_CLAIMS);
    for claim in &extracted {
        for field in [&claim.subject, &claim.predicate, &claim.object] {
            assert!(field.chars().count() <= MAX_FIELD_CHARS);
        }
    }
    let _ = policy::check(&PolicyInput {
        fragment_type: prepared.fragment_type,
        content: &prepared.content,
        linked_to: strings(args, "linkedTo").len(),
        case_id: prepared.case.case_id.as_deref(),
        resolution_status: prepared.case.resolution_status.map(|s| s.as_str()),
    });
}

fn check_agent_and_permissions(args: &Map<String, Value>) {
    let principal = Principal {
        tenant_id: Default::default(),
        key_id: Default::default(),
        group_key_ids: vec![],
        user_id: None,
        permissions: vec![Permission::Read],
        workspace: None,
        mode: None,
        session_id: None,
        agent_id: "default".into(),
    };
    if let Ok(agent) = resolve_agent_id(text(args, "agentId").as_deref(), &principal) {
        assert!(!agent.is_empty() && agent.len() <= 64, "{agent:?}");
    }
    if let Some(list) = text(args, "permissions") {
        let _ = Permission::parse_list(&list);
    }
}

fn check_feedback(args: &Map<String, Value>) {
    let delivered = strings(args, "delivered");
    let parsed = parse_feedback(
        text(args, "rating").as_deref(),
        text(args, "memory_id").as_deref(),
        args.get("ratings"),
        &delivered,
    );
    if let Ok(FeedbackInput::Memories(ratings)) = parsed {
        assert!((1..=50).contains(&ratings.len()));
        let mut seen = HashSet::new();
        for rating in &ratings {
            assert!(delivered.contains(&rating.memory_id));
            assert!(seen.insert(&rating.memory_id), "rated twice");
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(Value::Object(args)) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let tokenizer = Tokenizer::default();
    check_remember(&args, &tokenizer);
    check_agent_and_permissions(&args);
    check_feedback(&args);
});
