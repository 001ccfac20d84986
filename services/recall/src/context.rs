//! `context`: the memory block injected at the start of a session.
//!
//! Anchors first (the most important, at most 10), then core memories by
//! type — every requested type is guaranteed a slot, the remaining slots go
//! to the "warmest" fragments (importance, recent use, frequent use) — then
//! the session's working memory. Everything fits the token budget, and the
//! ids shown are remembered for the session so `recall` can skip them.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use mneme_core::principal::resolve_agent_id;
use mneme_core::{FragmentType, Permission, Principal, Result};
use mneme_proto::v1::{
    ContextRequest, ContextResponse, Hint, RecalledFragment, WorkingMemoryEntry,
};
use mneme_store::TenantTx;
use mneme_store::fragments::{self, Fragment, SearchScope};
use uuid::Uuid;

use crate::RecallServer;
use crate::rank::plain;

/// Default size of the whole block.
const DEFAULT_BUDGET: u32 = 2000;
/// Most anchors in the block.
const MAX_ANCHORS: usize = 10;
/// Most core memories in the block.
const MAX_CORE: usize = 15;
/// Most working-memory items in the block.
const MAX_WORKING: usize = 10;
/// Core memories below this importance are left out.
const MIN_CORE_IMPORTANCE: f32 = 0.3;
/// How long context-shown ids are remembered for `recall(excludeSeen)`.
const SEEN_TTL: Duration = Duration::from_secs(86_400);

/// Slots per type: the reference's caps.
fn slots(fragment_type: &str) -> usize {
    match fragment_type {
        "preference" | "error" | "procedure" => 5,
        _ => 3,
    }
}

/// How present a memory is: importance, raised by recent and frequent use
/// and by being a learned lesson.
fn warmth(fragment: &Fragment, now: DateTime<Utc>) -> f64 {
    let mut warmth = f64::from(fragment.importance);
    if fragment
        .accessed_at
        .is_some_and(|at| now - at < chrono::Duration::days(7))
    {
        warmth += 0.2;
    }
    if fragment.access_count >= 5 {
        warmth += 0.15;
    }
    if fragment.source.as_deref() == Some("learning_extraction") {
        warmth += 0.3;
    }
    warmth
}

/// Picks core memories: the warmest of each type first (one guaranteed slot
/// per type), then the warmest of the rest, within per-type caps.
fn choose_core(mut by_type: Vec<(String, Vec<Fragment>)>, now: DateTime<Utc>) -> Vec<Fragment> {
    for (_, fragments) in &mut by_type {
        fragments.sort_by(|a, b| warmth(b, now).total_cmp(&warmth(a, now)));
    }
    let mut chosen: Vec<Fragment> = Vec::new();
    let mut taken: HashMap<String, usize> = HashMap::new();
    let mut rest: Vec<Fragment> = Vec::new();
    for (fragment_type, fragments) in by_type {
        let mut fragments = fragments.into_iter();
        if let Some(first) = fragments.next() {
            taken.insert(fragment_type.clone(), 1);
            chosen.push(first);
        }
        rest.extend(fragments);
    }
    rest.sort_by(|a, b| warmth(b, now).total_cmp(&warmth(a, now)));
    for fragment in rest {
        if chosen.len() >= MAX_CORE {
            break;
        }
        let count = taken.entry(fragment.fragment_type.clone()).or_default();
        if *count < slots(&fragment.fragment_type) {
            *count += 1;
            chosen.push(fragment);
        }
    }
    chosen
}

/// The block as text: one section per kind, one line per memory.
fn render(
    anchors: &[RecalledFragment],
    core: &[RecalledFragment],
    working: &[WorkingMemoryEntry],
) -> String {
    let mut text = String::new();
    if !anchors.is_empty() {
        text.push_str("[ANCHOR MEMORY]\n");
        for fragment in anchors {
            text.push_str(&format!("- {}\n", fragment.content));
        }
    }
    if !core.is_empty() {
        text.push_str("[CORE MEMORY]\n");
        let mut current = "";
        for fragment in core {
            if fragment.r#type != current {
                current = &fragment.r#type;
                text.push_str(&format!("[{}]\n", current.to_uppercase()));
            }
            text.push_str(&format!("- {}\n", fragment.content));
        }
    }
    if !working.is_empty() {
        text.push_str("[WORKING MEMORY]\n");
        for item in working {
            text.push_str(&format!("- {}\n", item.content));
        }
    }
    text
}

/// Adds fragments while they fit; returns what fit.
fn within_budget(
    fragments: Vec<RecalledFragment>,
    used: &mut u32,
    budget: u32,
) -> Vec<RecalledFragment> {
    let mut kept = Vec::new();
    for fragment in fragments {
        if *used + fragment.estimated_tokens > budget {
            continue;
        }
        *used += fragment.estimated_tokens;
        kept.push(fragment);
    }
    kept
}

impl RecallServer {
    pub async fn context(
        &self,
        principal: &Principal,
        request: ContextRequest,
    ) -> Result<ContextResponse> {
        principal.require(Permission::Read)?;
        let now = Utc::now();
        let budget = request.token_budget.unwrap_or(DEFAULT_BUDGET).max(1);
        let agent_id = resolve_agent_id(request.agent_id.as_deref(), principal)?;
        let types: Vec<String> = if request.types.is_empty() {
            ["preference", "error", "procedure", "decision"]
                .map(String::from)
                .to_vec()
        } else {
            request
                .types
                .iter()
                .map(|t| {
                    t.trim()
                        .parse::<FragmentType>()
                        .map(|t| t.as_str().to_owned())
                })
                .collect::<Result<_>>()?
        };
        let workspace = request
            .workspace
            .clone()
            .or_else(|| principal.workspace.clone());
        let session = request
            .session_id
            .clone()
            .or_else(|| principal.session_id.clone());
        let key_ids = principal.readable_key_ids();
        let scope = SearchScope {
            key_ids: &key_ids,
            agent_id: &agent_id,
            workspace: workspace.as_deref(),
            ..SearchScope::default()
        };

        let mut client = self.store.client().await?;
        let tx = TenantTx::begin(&mut client, principal.tenant_id).await?;
        let anchor_scope = SearchScope {
            is_anchor: Some(true),
            ..scope.clone()
        };
        let anchor_ids: Vec<Uuid> = fragments::recent(&tx, &anchor_scope, MAX_ANCHORS as i64)
            .await?
            .into_iter()
            .map(|hit| hit.id)
            .collect();
        let mut by_type = Vec::with_capacity(types.len());
        for fragment_type in &types {
            let typed = [fragment_type.clone()];
            let core_scope = SearchScope {
                types: Some(&typed),
                is_anchor: Some(false),
                min_importance: Some(MIN_CORE_IMPORTANCE),
                ..scope.clone()
            };
            let ids: Vec<Uuid> = fragments::recent(&tx, &core_scope, (MAX_CORE * 2) as i64)
                .await?
                .into_iter()
                .map(|hit| hit.id)
                .collect();
            by_type.push((
                fragment_type.clone(),
                fragments::fetch(&tx, &key_ids, &ids).await?,
            ));
        }
        let mut anchors = fragments::fetch(&tx, &key_ids, &anchor_ids).await?;
        let open_errors = fragments::traces(
            &tx,
            &key_ids,
            &agent_id,
            &fragments::TraceFilter {
                fragment_type: Some("error"),
                workspace: workspace.as_deref(),
                ..Default::default()
            },
            50,
        )
        .await?
        .into_iter()
        .filter(|f| f.valid_to.is_none() && f.resolution_status.as_deref() != Some("resolved"))
        .count();
        tx.commit().await?;

        anchors.sort_by(|a, b| b.importance.total_cmp(&a.importance));
        let mut used = 0;
        let anchors = within_budget(anchors.into_iter().map(plain).collect(), &mut used, budget);
        let mut core: Vec<RecalledFragment> =
            choose_core(by_type, now).into_iter().map(plain).collect();
        core.sort_by(|a, b| {
            let position = |t: &str| types.iter().position(|x| x == t).unwrap_or(usize::MAX);
            position(&a.r#type).cmp(&position(&b.r#type))
        });
        let core = within_budget(core, &mut used, budget);

        let owner = mneme_cache::session_owner(principal.tenant_id, principal.key_id);
        let mut working = Vec::new();
        if let Some(session) = &session {
            let items = self
                .cache
                .working_memory(&owner, session)
                .await
                .unwrap_or_default();
            for item in items.into_iter().rev().take(MAX_WORKING) {
                if used + item.tokens > budget {
                    continue;
                }
                used += item.tokens;
                working.push(WorkingMemoryEntry {
                    id: item.id,
                    content: item.content,
                    topic: item.topic,
                    r#type: item.fragment_type,
                    created_at_unix_ms: item.created_at_unix_ms,
                });
            }
            working.reverse();
            let shown: Vec<String> = anchors.iter().chain(&core).map(|f| f.id.clone()).collect();
            self.cache
                .mark_seen(&owner, session, &shown, SEEN_TTL)
                .await;
        }

        let mut hints = Vec::new();
        if anchors.is_empty() && core.is_empty() && working.is_empty() {
            hints.push(Hint {
                signal: "empty_context".into(),
                suggestion: "no memories yet: remember preferences, decisions and procedures as you learn them".into(),
                tool: "remember".into(),
            });
        }
        if open_errors > 0 {
            hints.push(Hint {
                signal: "active_errors".into(),
                suggestion: format!(
                    "{open_errors} error memories are unresolved; link their fix with resolved_by or forget them"
                ),
                tool: "link".into(),
            });
        }
        Ok(ContextResponse {
            injection_text: render(&anchors, &core, &working),
            total_tokens: used,
            anchors,
            core,
            working,
            hints,
        })
    }
}

#[cfg(test)]
mod tests {
    use mneme_test_support::stored_fragment;

    use super::*;

    fn fragment(fragment_type: &str, importance: f32) -> Fragment {
        stored_fragment(
            &format!("{fragment_type} {importance}"),
            fragment_type,
            importance,
        )
    }

    #[test]
    fn every_type_gets_a_slot_and_caps_hold() {
        let now = Utc::now();
        let many_preferences: Vec<Fragment> = (0..12)
            .map(|i| fragment("preference", 0.9 - i as f32 * 0.01))
            .collect();
        let one_decision = vec![fragment("decision", 0.35)];
        let chosen = choose_core(
            vec![
                ("preference".into(), many_preferences),
                ("decision".into(), one_decision),
            ],
            now,
        );
        let count = |t: &str| chosen.iter().filter(|f| f.fragment_type == t).count();
        assert_eq!(
            count("decision"),
            1,
            "the weak decision still gets its slot"
        );
        assert_eq!(count("preference"), 5, "preferences are capped at 5");
    }

    #[test]
    fn recent_and_frequent_use_warms_a_memory() {
        let now = Utc::now();
        let mut used = fragment("fact", 0.5);
        used.accessed_at = Some(now);
        used.access_count = 9;
        assert!(warmth(&used, now) > warmth(&fragment("fact", 0.8), now));
    }
}
