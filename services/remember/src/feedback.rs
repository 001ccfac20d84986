//! `tool_feedback`: an agent's judgement of a result. It is stored for the
//! retrieval analytics, and it teaches: the judged fragments' activation
//! rises (relevant) or falls (not relevant), and so do the weights of the
//! links among them (link reconsolidation, audited).

use mneme_core::{Error, Permission, Principal, Result};
use mneme_proto::v1::{ToolFeedbackRequest, ToolFeedbackResponse};
use mneme_store::TenantTx;
use mneme_store::feedback::{self, LinkLesson, ToolFeedback};
use uuid::Uuid;

use crate::RememberServer;

const MAX_TOOL_NAME_CHARS: usize = 100;
const MAX_SUGGESTION_CHARS: usize = 100;
const MAX_CONTEXT_CHARS: usize = 50;
const MAX_FRAGMENT_IDS: usize = 50;
/// Activation change of a fragment judged relevant or not.
const RELEVANT_ACTIVATION: f32 = 0.1;
const IRRELEVANT_ACTIVATION: f32 = -0.15;

fn clipped(value: Option<&str>, max: usize) -> Option<String> {
    value
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(|v| v.chars().take(max).collect())
}

impl RememberServer {
    pub async fn record_tool_feedback(
        &self,
        principal: &Principal,
        request: ToolFeedbackRequest,
    ) -> Result<ToolFeedbackResponse> {
        principal.require(Permission::Write)?;
        let tool_name = request.tool_name.trim();
        if tool_name.is_empty() || tool_name.chars().count() > MAX_TOOL_NAME_CHARS {
            return Err(Error::invalid_argument(format!(
                "tool_name must be 1 to {MAX_TOOL_NAME_CHARS} characters"
            )));
        }
        let trigger_type = match request.trigger_type.as_deref().map(str::trim) {
            None | Some("") | Some("voluntary") => "voluntary",
            Some("sampled") => "sampled",
            Some(other) => {
                return Err(Error::invalid_argument(format!(
                    "unknown trigger_type `{other}` (expected sampled or voluntary)"
                )));
            }
        };
        if request.fragment_ids.len() > MAX_FRAGMENT_IDS {
            return Err(Error::invalid_argument(format!(
                "at most {MAX_FRAGMENT_IDS} fragment_ids per feedback"
            )));
        }
        let mut fragment_ids = Vec::with_capacity(request.fragment_ids.len());
        for raw in &request.fragment_ids {
            let id: Uuid = raw.trim().parse().map_err(|_| {
                Error::invalid_argument(format!("fragment_ids: `{raw}` is not a fragment id"))
            })?;
            if !fragment_ids.contains(&id) {
                fragment_ids.push(id);
            }
        }
        let suggestion = clipped(request.suggestion.as_deref(), MAX_SUGGESTION_CHARS);
        let context = clipped(request.context.as_deref(), MAX_CONTEXT_CHARS);
        let session_id = request
            .session_id
            .clone()
            .filter(|s| !s.trim().is_empty())
            .or_else(|| principal.session_id.clone());

        let mut client = self.store.client().await?;
        let tx = TenantTx::begin(&mut client, principal.tenant_id).await?;
        let id = feedback::record_tool(
            &tx,
            &ToolFeedback {
                key_id: principal.key_id,
                session_id: session_id.as_deref(),
                tool_name,
                relevant: request.relevant,
                sufficient: request.sufficient,
                suggestion: suggestion.as_deref(),
                context: context.as_deref(),
                trigger_type,
                search_event_id: request.search_event_id,
                fragment_ids: &fragment_ids,
            },
        )
        .await?;
        let (mut fragments_adjusted, mut links_adjusted) = (0, 0);
        if !fragment_ids.is_empty() {
            let delta = if request.relevant {
                RELEVANT_ACTIVATION
            } else {
                IRRELEVANT_ACTIVATION
            };
            let adjusted = feedback::adjust_activation(
                &tx,
                &principal.readable_key_ids(),
                &fragment_ids,
                delta,
            )
            .await?;
            fragments_adjusted = adjusted.len();
            if self.settings.link_reconsolidation {
                // Positive feedback reinforces the links in good standing
                // and restores quarantined ones (in this order, so a
                // restored link is not reinforced too).
                let lessons: &[LinkLesson] = if request.relevant {
                    &[LinkLesson::REINFORCE, LinkLesson::RESTORE]
                } else {
                    &[LinkLesson::DECAY]
                };
                for lesson in lessons {
                    links_adjusted += feedback::reconsolidate_links(
                        &tx,
                        principal.key_id,
                        &adjusted,
                        &[],
                        *lesson,
                        &format!("tool_feedback:{id}"),
                        self.settings.link_decay_interval,
                    )
                    .await?;
                }
            }
        }
        tx.commit().await?;
        Ok(ToolFeedbackResponse {
            id,
            fragments_adjusted: u32::try_from(fragments_adjusted).unwrap_or(u32::MAX),
            links_adjusted: u32::try_from(links_adjusted).unwrap_or(u32::MAX),
        })
    }
}
