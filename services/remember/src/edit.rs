//! Changing what is stored: `forget`, `amend` and `link`.
//!
//! Every operation sees exactly what the caller can read (its keys and key
//! groups, its agent and the shared one); anything else answers like a
//! missing id.

use mneme_core::fragment::RelationType;
use mneme_core::fragment::{RememberInput, prepare};
use mneme_core::principal::resolve_agent_id;
use mneme_core::{Error, Permission, Principal, Result};
use mneme_proto::v1::{
    AmendRequest, AmendResponse, ForgetRequest, ForgetResponse, LinkRequest, LinkResponse,
};
use mneme_store::feedback::{self, LinkLesson};
use mneme_store::fragments::{self, Author, ForgetTarget, StoredFragment};
use mneme_store::{TenantTx, cases, links, versions};
use uuid::Uuid;

use crate::RememberServer;

/// Most fragments one `forget` by topic deletes.
const FORGET_TOPIC_LIMIT: i64 = 200;
/// Tries of a `forget` that keeps meeting deadlocks before it gives up.
const FORGET_ATTEMPTS: u32 = 3;
/// How deep the cycle check of directional links looks.
const CYCLE_DEPTH: i32 = 16;

/// A fragment id from a request; a malformed one cannot name any fragment,
/// so it answers like an unknown one.
fn fragment_id(raw: &str) -> Result<Uuid> {
    raw.trim().parse().map_err(|_| Error::fragment_not_found())
}

impl RememberServer {
    /// Deletes one fragment by id, or the oldest up to 200 of a topic.
    pub async fn forget(
        &self,
        principal: &Principal,
        request: ForgetRequest,
    ) -> Result<ForgetResponse> {
        principal.require(Permission::Write)?;
        let agent_id = resolve_agent_id(request.agent_id.as_deref(), principal)?;
        let topic = request
            .topic
            .as_deref()
            .map(str::trim)
            .filter(|t| !t.is_empty());
        let target = match (request.id.trim().is_empty(), topic) {
            (false, None) => ForgetTarget::Id(fragment_id(&request.id)?),
            (true, Some(topic)) => ForgetTarget::Topic {
                topic,
                limit: FORGET_TOPIC_LIMIT,
            },
            _ => return Err(Error::invalid_argument("give either id or topic")),
        };
        // Deleting many rows can deadlock with links being written to them
        // in the background; such a conflict is transient, so retry it.
        let mut attempts = 0;
        let forgotten = loop {
            attempts += 1;
            let attempt = async {
                let mut client = self.store.client().await?;
                let tx = TenantTx::begin(&mut client, principal.tenant_id).await?;
                let forgotten = fragments::forget(
                    &tx,
                    principal.key_id,
                    &principal.readable_key_ids(),
                    &agent_id,
                    target,
                    request.force,
                    request.dry_run,
                )
                .await?;
                tx.commit().await?;
                Ok::<_, mneme_store::StoreError>(forgotten)
            }
            .await;
            match attempt {
                Err(error) if error.is_conflict() && attempts < FORGET_ATTEMPTS => {
                    tracing::debug!(
                        attempts,
                        "forget conflicted with a concurrent write; retrying"
                    );
                }
                other => break other?,
            }
        };
        if !forgotten.matched && matches!(target, ForgetTarget::Id(_)) {
            return Err(Error::fragment_not_found());
        }
        if forgotten.held_by_group_peer {
            return Err(held_by_group_peer("forget it"));
        }
        if !request.dry_run && !forgotten.deleted.is_empty() {
            tracing::info!(tenant.id = %principal.tenant_id, count = forgotten.deleted.len(), "fragments forgotten");
        }
        Ok(ForgetResponse {
            deleted: if request.dry_run {
                0
            } else {
                forgotten.deleted.len() as u32
            },
            protected: forgotten.protected,
            dry_run: request.dry_run,
            ids: forgotten.deleted.iter().map(Uuid::to_string).collect(),
        })
    }

    /// Amends a fragment. The previous state goes to its history; with
    /// `supersede`, the amendment becomes a new fragment and the old one
    /// stops being valid instead.
    pub async fn amend(
        &self,
        principal: &Principal,
        request: AmendRequest,
    ) -> Result<AmendResponse> {
        principal.require(Permission::Write)?;
        let agent_id = resolve_agent_id(request.agent_id.as_deref(), principal)?;
        let id = fragment_id(&request.id)?;
        if !asks_a_change(&request) {
            // Else an empty version would join the memory's history.
            return Err(Error::invalid_argument(
                "nothing to amend: give at least one of content, topic, keywords, type, \
                 importance, isAnchor, assertionStatus, resolutionStatus, affect, caseId or phase",
            ));
        }
        let mut client = self.store.client().await?;
        let tx = TenantTx::begin(&mut client, principal.tenant_id).await?;
        let stored = fragments::load(&tx, &principal.readable_key_ids(), &agent_id, &[id], true)
            .await?
            .pop()
            .ok_or_else(Error::fragment_not_found)?;
        if stored.key_id != principal.key_id {
            return Err(held_by_group_peer("amend it"));
        }
        if stored.valid_to.is_some() {
            return Err(Error::invalid_argument(
                "this fragment was superseded; amend the fragment that replaced it",
            ));
        }
        let changes_importance =
            request.importance.is_some() || request.r#type.is_some() || request.is_anchor.is_some();
        let amended = prepare(
            merge(&stored, &request),
            &self.settings.limits,
            &self.tokenizer,
        )?;
        let content_changed = amended.content_hash != stored.content_hash;
        // The vector is computed from topic and content (see
        // `mneme_embed::PassageRecipe`).
        let reembed = content_changed || amended.topic != stored.topic;
        let mut amended = amended;
        if !changes_importance {
            // Only what the caller changed changes: an untouched importance
            // is not re-capped, an untouched tier not re-inferred.
            amended.importance = stored.importance;
            amended.ttl_tier = stored.ttl_tier.parse()?;
        }

        if content_changed
            && let Some(existing) =
                fragments::find_by_hash(&tx, stored.key_id, &amended.content_hash, id).await?
        {
            return Ok(AmendResponse {
                updated: false,
                id: id.to_string(),
                existing_id: Some(existing.to_string()),
                warnings: vec!["another memory already says exactly this; use it instead".into()],
                ..AmendResponse::default()
            });
        }
        if request.dry_run {
            return Ok(AmendResponse {
                updated: false,
                id: id.to_string(),
                dry_run: true,
                versions: versions::count(&tx, id).await?,
                ..AmendResponse::default()
            });
        }

        if request.supersede && !content_changed {
            return Err(Error::invalid_argument(
                "supersede replaces a memory with a new content; give the new content",
            ));
        }
        let verification = match (
            amended.assertion_status.as_str(),
            stored.assertion_status.as_str(),
        ) {
            (now, before) if now != before && (now == "verified" || now == "rejected") => Some(now),
            _ => None,
        };
        let (result_id, version_count) = if request.supersede {
            let author = Author {
                key_id: principal.key_id,
                agent_id: &stored.agent_id,
                session_id: principal.session_id.as_deref(),
            };
            let written = fragments::insert(&tx, author, &amended).await?;
            fragments::supersede(&tx, principal.key_id, &[id], written.id).await?;
            (written.id, 0)
        } else {
            let count = versions::record(&tx, &stored, principal.key_id).await?;
            fragments::apply_amendment(&tx, id, &amended, reembed).await?;
            (id, count)
        };
        if let (Some(outcome), Some(case_id)) = (verification, &amended.case.case_id) {
            let event_type = if outcome == "verified" {
                "verification_passed"
            } else {
                "verification_failed"
            };
            let summary: String = amended.content.chars().take(200).collect();
            cases::append(
                &tx,
                &cases::NewEvent {
                    key_id: principal.key_id,
                    case_id,
                    session_id: principal.session_id.as_deref(),
                    event_type,
                    summary: &summary,
                    entity_keys: &amended.keywords,
                    source_fragment_id: Some(result_id),
                },
            )
            .await?;
            if self.settings.case_reward_backprop {
                let delta = if outcome == "verified" {
                    self.settings.case_reward_passed
                } else {
                    -self.settings.case_reward_failed
                };
                let moved = cases::reward_evidence(
                    &tx,
                    principal.key_id,
                    &principal.readable_key_ids(),
                    case_id,
                    result_id,
                    delta,
                )
                .await?;
                tracing::debug!(moved, delta, "case verification rewarded its evidence");
            }
        }
        tx.commit().await?;
        if reembed || request.supersede {
            self.cache
                .wake_embedding_worker(&principal.tenant_id.to_string())
                .await;
        }
        tracing::info!(tenant.id = %principal.tenant_id, fragment.id = %result_id, "fragment amended");
        Ok(AmendResponse {
            updated: true,
            id: result_id.to_string(),
            existing_id: None,
            dry_run: false,
            versions: version_count,
            warnings: Vec::new(),
        })
    }

    /// Links two fragments the caller can read.
    pub async fn link(&self, principal: &Principal, request: LinkRequest) -> Result<LinkResponse> {
        principal.require(Permission::Write)?;
        let agent_id = resolve_agent_id(request.agent_id.as_deref(), principal)?;
        let relation: RelationType = request.relation_type.trim().parse()?;
        if !RelationType::USER.contains(&relation) {
            return Err(Error::invalid_argument(format!(
                "`{relation}` links are made by mneme itself; use related, caused_by, resolved_by, \
                 part_of or contradicts"
            )));
        }
        let weight = request.weight.unwrap_or(1.0);
        if !(0.0..=1.0).contains(&weight) {
            return Err(Error::invalid_argument("weight must be between 0 and 1"));
        }
        let not_found = || {
            Error::new(
                mneme_core::ErrorCode::NotFound,
                "one or both fragments not found",
            )
        };
        let from = request
            .from_id
            .trim()
            .parse::<Uuid>()
            .map_err(|_| not_found())?;
        let to = request
            .to_id
            .trim()
            .parse::<Uuid>()
            .map_err(|_| not_found())?;
        if from == to {
            return Err(Error::invalid_argument(
                "a fragment cannot be linked to itself",
            ));
        }
        let readable = principal.readable_key_ids();
        let mut client = self.store.client().await?;
        let tx = TenantTx::begin(&mut client, principal.tenant_id).await?;
        let ends = fragments::load(&tx, &readable, &agent_id, &[from, to], false).await?;
        if ends.len() != 2 {
            return Err(not_found());
        }
        // `resolved_by` changes the error's own status, which is a write.
        if relation == RelationType::ResolvedBy
            && ends
                .iter()
                .any(|end| end.id == from && end.key_id != principal.key_id)
        {
            return Err(held_by_group_peer(
                "mark it resolved; link it `related` to your fix instead",
            ));
        }
        if relation.is_directional()
            && links::would_cycle(&tx, from, to, relation.as_str(), CYCLE_DEPTH).await?
        {
            return Err(Error::invalid_argument(format!(
                "linking {from} {relation} {to} would close a cycle of `{relation}` links"
            )));
        }
        if request.dry_run {
            return Ok(LinkResponse {
                linked: false,
                relation_type: relation.as_str().to_owned(),
                dry_run: true,
            });
        }
        links::upsert(&tx, &readable, from, to, relation.as_str(), weight).await?;
        if relation == RelationType::ResolvedBy {
            fragments::resolve_error(&tx, from).await?;
        }
        if relation == RelationType::Contradicts && self.settings.link_reconsolidation {
            // Two memories that contradict each other should not pull each
            // other into results as "related" any more.
            feedback::reconsolidate_links(
                &tx,
                principal.key_id,
                &[from, to],
                &["related", "temporal"],
                LinkLesson::QUARANTINE,
                "contradicts",
                self.settings.link_decay_interval,
            )
            .await?;
        }
        tx.commit().await?;
        Ok(LinkResponse {
            linked: true,
            relation_type: relation.as_str().to_owned(),
            dry_run: false,
        })
    }
}

/// The refusal to change a fragment the caller reads through a key group:
/// groups share reading, while writing stays with the key that stored it.
/// Not an existence oracle, since the caller can already read the fragment.
fn held_by_group_peer(action: &str) -> Error {
    Error::permission_denied(format!(
        "this memory belongs to another API key of your key group; a group shares reading, \
         so only that key (or a tenant administrator) can {action}"
    ))
}

/// Whether an amendment names anything to change.
fn asks_a_change(request: &AmendRequest) -> bool {
    request.content.is_some()
        || request.topic.is_some()
        || request.keywords.is_some()
        || request.r#type.is_some()
        || request.importance.is_some()
        || request.is_anchor.is_some()
        || request.assertion_status.is_some()
        || request.resolution_status.is_some()
        || request.affect.is_some()
        || request.case_id.is_some()
        || request.phase.is_some()
}

/// The amended fragment as a `remember` input: stored values overridden by
/// the request's.
fn merge(stored: &StoredFragment, request: &AmendRequest) -> RememberInput {
    let keywords = match &request.keywords {
        Some(list) => list.values.clone(),
        None => stored.keywords.clone(),
    };
    RememberInput {
        content: request
            .content
            .clone()
            .unwrap_or_else(|| stored.content.clone()),
        topic: request
            .topic
            .clone()
            .unwrap_or_else(|| stored.topic.clone()),
        fragment_type: request
            .r#type
            .clone()
            .unwrap_or_else(|| stored.fragment_type.clone()),
        keywords,
        importance: Some(request.importance.unwrap_or(stored.importance)),
        is_anchor: request.is_anchor.unwrap_or(stored.is_anchor),
        source: stored.source.clone(),
        workspace: stored.workspace.clone(),
        idempotency_key: None,
        context_summary: stored.context_summary.clone(),
        case_id: request.case_id.clone().or_else(|| stored.case_id.clone()),
        goal: stored.goal.clone(),
        outcome: stored.outcome.clone(),
        phase: request.phase.clone().or_else(|| stored.phase.clone()),
        resolution_status: request
            .resolution_status
            .clone()
            .or_else(|| stored.resolution_status.clone()),
        assertion_status: request
            .assertion_status
            .clone()
            .or_else(|| Some(stored.assertion_status.clone())),
        affect: request
            .affect
            .clone()
            .or_else(|| Some(stored.affect.clone())),
        occurred_at: stored.occurred_at,
    }
}
