//! Splitting long fragments (stage `split_long`): a language model cuts a
//! fragment longer than `MNEME_SPLIT_MIN_CHARS` into 2–8 atomic statements.
//! Each part is validated as a `remember` of the original's key would be
//! (length, redaction, keywords) and stored with the original's key, agent,
//! topic, type, importance and case fields; every part is `part_of` the
//! original and `related` to its siblings, and the original's validity ends
//! at the split, so it stays as history (`includeSuperseded`,
//! `fragment_history`). An answer that is not 2–8 usable parts leaves the
//! fragment as it is, and it is not asked about again.

use chrono::{DateTime, Utc};
use mneme_core::fragment::{self, FragmentLimits, PreparedFragment, RememberInput};
use mneme_core::text::Tokenizer;
use mneme_store::fragments::{self, Author, StoredFragment};
use mneme_store::{TenantTx, consolidation, links};
use serde_json::Value;

pub(crate) const SPLIT_INSTRUCTIONS: &str = "You split a note an AI agent stored into atomic \
    notes. Each part states one fact, decision or step on its own: resolve pronouns, name the \
    concrete things and numbers, keep a cause with its effect, keep the note's language, add \
    nothing that is not in the note. Use between 2 and 8 parts. Answer with JSON only: \
    {\"parts\": [\"...\", \"...\"]}.";

/// Fewest and most parts a split may have.
const PARTS: std::ops::RangeInclusive<usize> = 2..=8;

/// Weight of the `related` links between the parts of one fragment.
const SIBLING_WEIGHT: f32 = 0.5;

/// A long fragment and the validated parts a model cut it into.
#[derive(Debug)]
pub(crate) struct Split {
    pub(crate) original: StoredFragment,
    pub(crate) parts: Vec<PreparedFragment>,
}

/// The parts of `original` in a model's `answer`, each prepared as a
/// `remember` with the original's metadata; `Err` says why the answer
/// cannot be used.
pub(crate) fn parts_of(
    original: &StoredFragment,
    answer: &Value,
    limits: &FragmentLimits,
    tokenizer: &Tokenizer,
) -> Result<Vec<PreparedFragment>, String> {
    let parts: Vec<&str> = answer["parts"]
        .as_array()
        .ok_or("the answer holds no parts")?
        .iter()
        .filter_map(Value::as_str)
        .map(str::trim)
        .filter(|part| !part.is_empty())
        .collect();
    if !PARTS.contains(&parts.len()) {
        return Err(format!(
            "{} parts; a split has {} to {}",
            parts.len(),
            PARTS.start(),
            PARTS.end()
        ));
    }
    let mut prepared: Vec<PreparedFragment> = Vec::with_capacity(parts.len());
    for part in parts {
        let input = RememberInput {
            content: part.to_owned(),
            topic: original.topic.clone(),
            fragment_type: original.fragment_type.clone(),
            importance: Some(original.importance),
            source: original.source.clone(),
            workspace: original.workspace.clone(),
            context_summary: original.context_summary.clone(),
            case_id: original.case_id.clone(),
            goal: original.goal.clone(),
            outcome: original.outcome.clone(),
            phase: original.phase.clone(),
            resolution_status: original.resolution_status.clone(),
            assertion_status: Some(original.assertion_status.clone()),
            affect: Some(original.affect.clone()),
            occurred_at: original.occurred_at,
            ..RememberInput::default()
        };
        let part = fragment::prepare(input, limits, tokenizer)
            .map_err(|error| format!("a part is not a valid fragment: {}", error.message))?;
        if prepared.iter().any(|p| p.content_hash == part.content_hash) {
            return Err("two parts are the same".to_owned());
        }
        prepared.push(part);
    }
    Ok(prepared)
}

/// Stores `split`: ends the original's validity (unless it changed since it
/// was read: then nothing is stored), writes the parts in its key and links
/// them. Returns the fragments written, original included.
pub(crate) async fn apply(
    tx: &TenantTx<'_>,
    split: &Split,
    now: DateTime<Utc>,
) -> mneme_store::Result<u64> {
    let original = &split.original;
    if !consolidation::retire_split_original(tx, original.id, &original.content_hash, now).await? {
        return Ok(0);
    }
    let author = Author {
        key_id: original.key_id,
        agent_id: &original.agent_id,
        session_id: original.session_id.as_deref(),
    };
    let mut ids = Vec::with_capacity(split.parts.len());
    for part in &split.parts {
        // A part the key already holds (same content) is linked, not stored
        // twice.
        ids.push(fragments::insert(tx, author, part).await?.id);
    }
    let keys = [original.key_id];
    for (i, part) in ids.iter().enumerate() {
        links::upsert(tx, &keys, *part, original.id, "part_of", 1.0).await?;
        for sibling in &ids[i + 1..] {
            links::upsert(tx, &keys, *part, *sibling, "related", SIBLING_WEIGHT).await?;
        }
    }
    Ok(1 + ids.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn original(content: &str) -> StoredFragment {
        StoredFragment {
            id: uuid::Uuid::now_v7(),
            key_id: uuid::Uuid::now_v7(),
            agent_id: "default".into(),
            session_id: None,
            workspace: Some("infra".into()),
            content: content.into(),
            content_hash: String::new(),
            topic: "deploys".into(),
            keywords: Vec::new(),
            fragment_type: "decision".into(),
            importance: 0.7,
            ttl_tier: "warm".into(),
            is_anchor: true,
            source: None,
            context_summary: None,
            case_id: Some("case-1".into()),
            goal: None,
            outcome: None,
            phase: None,
            resolution_status: None,
            assertion_status: "observed".into(),
            affect: "neutral".into(),
            occurred_at: None,
            valid_to: None,
            created_at: Utc::now(),
        }
    }

    fn parts(answer: Value) -> Result<Vec<PreparedFragment>, String> {
        parts_of(
            &original("long"),
            &answer,
            &FragmentLimits::default(),
            &Tokenizer::default(),
        )
    }

    #[test]
    fn parts_keep_the_originals_metadata_but_not_its_anchor() {
        let prepared = parts(json!({"parts": [
            "Deploys of the API run every Monday at 10:00 UTC.",
            "  The on-call engineer approves each API deploy.  ",
        ]}))
        .unwrap();
        assert_eq!(prepared.len(), 2);
        assert_eq!(
            prepared[1].content,
            "The on-call engineer approves each API deploy."
        );
        for part in &prepared {
            assert_eq!(part.topic, "deploys");
            assert_eq!(part.fragment_type.as_str(), "decision");
            assert_eq!(part.workspace.as_deref(), Some("infra"));
            assert_eq!(part.case.case_id.as_deref(), Some("case-1"));
            assert!((part.importance - 0.7).abs() < 1e-6);
            assert!(!part.is_anchor, "an anchor is chosen, not inherited");
            assert!(!part.keywords.is_empty(), "keywords are extracted");
        }
    }

    #[test]
    fn unusable_answers_are_refused_with_a_reason() {
        let sentence = |n: usize| format!("Statement number {n} about the deploy pipeline.");
        let nine: Vec<String> = (0..9).map(sentence).collect();
        for (answer, reason) in [
            (json!({"verdict": "split"}), "no parts"),
            (json!({"parts": [sentence(1)]}), "1 parts"),
            (json!({"parts": nine}), "9 parts"),
            (json!({"parts": [sentence(1), ""]}), "1 parts"),
            (json!({"parts": [sentence(1), sentence(1)]}), "the same"),
            (
                json!({"parts": [sentence(1), "x".repeat(301)]}),
                "not a valid",
            ),
        ] {
            let error = parts(answer.clone()).unwrap_err();
            assert!(error.contains(reason), "{answer}: {error}");
        }
    }
}
