//! `reflect`: a session's summary becomes fragments in one transaction —
//! facts, decisions, resolved errors, procedures and open questions, all
//! `part_of` one narrative episode — plus a `milestone_reached` event that
//! chains the episode to the agent's previous one, and the task feedback.

use mneme_core::principal::resolve_agent_id;
use mneme_core::{Error, Permission, Principal, Result};
use mneme_proto::v1::{
    CountByName, ReflectRequest, ReflectResponse, ReflectedFragment, RememberRequest, WriteOutcome,
};
use mneme_store::feedback::{self, TaskFeedback};
use mneme_store::links::{self, Edge};
use mneme_store::{TenantTx, cases};
use uuid::Uuid;

use crate::RememberServer;
use crate::write::Write;

/// Topic of reflected fragments unless the caller names one.
const DEFAULT_TOPIC: &str = "session_reflect";
/// Items marked this way are lessons: `context` ranks them higher.
const LEARNING_PREFIX: &str = "LEARNING:";
/// `source` of what `reflect` stores.
const REFLECT_SOURCE: &str = "reflect";
/// Items a generated narrative is built from.
const NARRATIVE_ITEMS: usize = 8;

/// One kind of reflected item and how it is stored.
struct Kind {
    /// Name in the response's breakdown.
    name: &'static str,
    fragment_type: &'static str,
    importance: f32,
    prefix: &'static str,
    resolution_status: Option<&'static str>,
}

const FACT: Kind = Kind {
    name: "summary",
    fragment_type: "fact",
    importance: 0.5,
    prefix: "",
    resolution_status: None,
};
const DECISION: Kind = Kind {
    name: "decisions",
    fragment_type: "decision",
    importance: 0.8,
    prefix: "",
    resolution_status: None,
};
const RESOLVED_ERROR: Kind = Kind {
    name: "errors_resolved",
    fragment_type: "error",
    importance: 0.5,
    prefix: "[resolved] ",
    resolution_status: Some("resolved"),
};
const PROCEDURE: Kind = Kind {
    name: "new_procedures",
    fragment_type: "procedure",
    importance: 0.7,
    prefix: "",
    resolution_status: None,
};
const OPEN_QUESTION: Kind = Kind {
    name: "open_questions",
    fragment_type: "fact",
    importance: 0.4,
    prefix: "[open] ",
    resolution_status: Some("open"),
};

/// Splits prose into sentences: after `.`, `!`, `?` (and their CJK forms)
/// followed by white space, and at line breaks.
fn sentences(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\n' {
            out.push(std::mem::take(&mut current));
            continue;
        }
        current.push(c);
        let ends = matches!(c, '.' | '!' | '?') && chars.peek().is_none_or(|n| n.is_whitespace());
        if ends || matches!(c, '。' | '！' | '？') {
            out.push(std::mem::take(&mut current));
        }
    }
    out.push(current);
    out.into_iter()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .collect()
}

/// A narrative built from the first items, for when the caller gives none.
fn narrative_of(items: &[String], max_chars: usize) -> String {
    let mut narrative = String::from("Session reflection: ");
    for item in items.iter().take(NARRATIVE_ITEMS) {
        let sentence = item.trim_end_matches(['.', ' ']);
        let addition = format!("{sentence}. ");
        if narrative.chars().count() + addition.chars().count() > max_chars {
            break;
        }
        narrative.push_str(&addition);
    }
    narrative.trim_end().to_owned()
}

/// The case that chains a key's agent's episodes.
fn episode_case(key_id: Uuid, agent_id: &str) -> String {
    format!("episodes:{key_id}:{agent_id}")
}

impl RememberServer {
    /// Stores a session's reflection.
    pub async fn reflect(
        &self,
        principal: &Principal,
        request: ReflectRequest,
    ) -> Result<ReflectResponse> {
        self.reflect_from(principal, request, REFLECT_SOURCE).await
    }

    /// [`Self::reflect`], with the fragments' `source` (lessons keep
    /// `learning_extraction`).
    pub(crate) async fn reflect_from(
        &self,
        principal: &Principal,
        request: ReflectRequest,
        source: &str,
    ) -> Result<ReflectResponse> {
        principal.require(Permission::Write)?;
        let agent_id = resolve_agent_id(request.agent_id.as_deref(), principal)?;
        let session_id = request
            .session_id
            .clone()
            .filter(|s| !s.trim().is_empty())
            .or_else(|| principal.session_id.clone());
        let topic = request
            .topic
            .clone()
            .filter(|t| !t.trim().is_empty())
            .unwrap_or_else(|| DEFAULT_TOPIC.to_owned());
        let workspace = request.workspace.clone();

        let summary = match request.summary.as_slice() {
            [single] => sentences(single),
            many => many.to_vec(),
        };
        let groups: [(&Kind, &[String]); 5] = [
            (&FACT, &summary),
            (&DECISION, &request.decisions),
            (&RESOLVED_ERROR, &request.errors_resolved),
            (&PROCEDURE, &request.new_procedures),
            (&OPEN_QUESTION, &request.open_questions),
        ];
        let narrative = request
            .narrative_summary
            .clone()
            .filter(|n| !n.trim().is_empty());
        let item_count: usize = groups.iter().map(|(_, items)| items.len()).sum();
        if item_count == 0 && narrative.is_none() && request.task_effectiveness.is_none() {
            return Err(Error::invalid_argument(
                "nothing to reflect: give summary, decisions, errors_resolved, new_procedures, \
                 open_questions, narrative_summary or task_effectiveness",
            ));
        }

        let base = |content: String, fragment_type: &str, importance: f32| RememberRequest {
            content,
            topic: topic.clone(),
            r#type: fragment_type.to_owned(),
            importance: Some(importance),
            source: Some(source.into()),
            workspace: workspace.clone(),
            agent_id: Some(agent_id.clone()),
            session_id: session_id.clone(),
            ..RememberRequest::default()
        };
        let mut warnings = Vec::new();
        // (breakdown name, validated write); the episode comes last.
        let mut writes: Vec<(&'static str, Write)> = Vec::new();
        let mut all_items: Vec<String> = Vec::new();
        for (kind, items) in groups {
            for (i, item) in items.iter().enumerate() {
                let item = item.trim();
                if item.is_empty() {
                    continue;
                }
                all_items.push(item.to_owned());
                let (text, source) = match item.strip_prefix(LEARNING_PREFIX) {
                    Some(lesson) => (lesson.trim(), "learning_extraction"),
                    None => (item, source),
                };
                let mut remember = base(
                    format!("{}{text}", kind.prefix),
                    kind.fragment_type,
                    kind.importance,
                );
                remember.source = Some(source.into());
                remember.resolution_status = kind.resolution_status.map(str::to_owned);
                match self.validate(principal, remember) {
                    Ok(write) => writes.push((kind.name, write)),
                    Err(error) => warnings.push(format!("{}[{i}]: {}", kind.name, error.message)),
                }
            }
        }
        let narrative = narrative.or_else(|| {
            (!all_items.is_empty())
                .then(|| narrative_of(&all_items, self.settings.limits.max_episode_chars))
        });
        if let Some(narrative) = narrative {
            match self.validate(principal, base(narrative, "episode", 0.6)) {
                Ok(write) => writes.push(("episode", write)),
                Err(error) => warnings.push(format!("narrative_summary: {}", error.message)),
            }
        }

        let mut client = self.store.client().await?;
        let tx = TenantTx::begin(&mut client, principal.tenant_id).await?;
        self.check_quota(&tx, principal, writes.len() as u64)
            .await?;
        let names: Vec<&'static str> = writes.iter().map(|(name, _)| *name).collect();
        let shown: Vec<(String, String)> = writes
            .iter()
            .map(|(_, w)| {
                (
                    w.fragment.content.clone(),
                    w.fragment.fragment_type.as_str().to_owned(),
                )
            })
            .collect();
        let indexed = writes.into_iter().map(|(_, w)| w).enumerate().collect();
        let (stored, new_fragments) = self.store_all(&tx, principal, indexed, |_| {}).await?;
        let episode = stored.iter().find(|s| names[s.index] == "episode");
        let episode_id = episode.map(|s| s.id);
        if let Some(episode) = episode {
            let episode_id = episode.id;
            // The parts are the caller's own fragments, stored just now.
            let parts: Vec<Edge> = stored
                .iter()
                .filter(|s| s.id != episode_id)
                .map(|s| Edge {
                    from_id: s.id,
                    to_id: episode_id,
                    relation_type: "part_of".to_owned(),
                    weight: 1.0,
                })
                .collect();
            links::upsert_edges(&tx, &[principal.key_id], &parts).await?;
            let case_id = episode_case(principal.key_id, &agent_id);
            let summary: String = shown[episode.index].0.chars().take(200).collect();
            cases::append(
                &tx,
                &cases::NewEvent {
                    key_id: principal.key_id,
                    case_id: &case_id,
                    session_id: session_id.as_deref(),
                    event_type: "milestone_reached",
                    summary: &summary,
                    entity_keys: std::slice::from_ref(&topic),
                    source_fragment_id: Some(episode_id),
                },
            )
            .await?;
        }
        let task_feedback_recorded = match &request.task_effectiveness {
            Some(task) => {
                feedback::record_task(
                    &tx,
                    &TaskFeedback {
                        key_id: principal.key_id,
                        session_id: session_id.as_deref(),
                        overall_success: task.overall_success,
                        tool_highlights: &task.tool_highlights,
                        tool_pain_points: &task.tool_pain_points,
                    },
                )
                .await?;
                true
            }
            None => false,
        };
        tx.commit().await?;

        let created = stored
            .iter()
            .filter(|s| s.outcome == WriteOutcome::Created)
            .count() as u32;
        self.spawn_claim_storage(principal, &new_fragments);
        self.after_commit(principal, created).await;
        let mut breakdown: Vec<CountByName> = Vec::new();
        for name in &names {
            match breakdown.iter_mut().find(|c| c.name == *name) {
                Some(count) => count.count += 1,
                None => breakdown.push(CountByName {
                    name: (*name).to_owned(),
                    count: 1,
                }),
            }
        }
        tracing::info!(tenant.id = %principal.tenant_id, fragments = stored.len(), created, "session reflected");
        Ok(ReflectResponse {
            fragments: stored
                .into_iter()
                .map(|s| ReflectedFragment {
                    id: s.id.to_string(),
                    content: shown[s.index].0.clone(),
                    r#type: shown[s.index].1.clone(),
                    keywords: s.keywords,
                    outcome: s.outcome as i32,
                })
                .collect(),
            breakdown,
            episode_id: episode_id.map(|id| id.to_string()),
            task_feedback_recorded,
            warnings,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prose_splits_into_sentences() {
        assert_eq!(
            sentences("We moved to Postgres 16. It was fast!\nNext: tune vacuum"),
            [
                "We moved to Postgres 16.",
                "It was fast!",
                "Next: tune vacuum"
            ]
        );
        assert_eq!(
            sentences("배포를 마쳤다。 테스트는 통과했다"),
            ["배포를 마쳤다。", "테스트는 통과했다"]
        );
    }

    #[test]
    fn numbers_and_versions_do_not_split() {
        assert_eq!(sentences("Use v1.2.3 for this."), ["Use v1.2.3 for this."]);
    }

    #[test]
    fn generated_narratives_fit_the_episode_limit() {
        let items: Vec<String> = (0..20)
            .map(|i| format!("item number {i} was done"))
            .collect();
        let narrative = narrative_of(&items, 120);
        assert!(narrative.chars().count() <= 120, "{narrative}");
        assert!(narrative.contains("item number 0 was done."));
        assert!(!narrative.contains("item number 8"));
    }
}
