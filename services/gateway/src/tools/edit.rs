//! `forget`, `amend` and `link`.

use mneme_core::Error;
use mneme_proto::v1;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::kinds::{AffectArg, AssertionStatusArg, FragmentKind, ResolutionStatusArg, wire_name};
use super::{EXAMPLE_FRAGMENT_ID, EXAMPLE_OTHER_FRAGMENT_ID, ToolContext, ToolSpec};

/// Arguments of `forget`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct ForgetArgs {
    /// Id of the memory to delete. Give either `id` or `topic`.
    pub id: Option<String>,
    /// Delete the oldest memories (up to 200) of this topic instead.
    pub topic: Option<String>,
    /// Required to delete permanent memories and anchors.
    #[serde(default)]
    pub force: bool,
    /// List what would be deleted, deleting nothing.
    #[serde(default)]
    pub dry_run: bool,
    /// The agent whose memories to act on besides the shared ones; defaults to the shared agent.
    pub agent_id: Option<String>,
}

/// Result of `forget`.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ForgetResult {
    pub deleted: u32,
    /// Kept because permanent or anchored; call again with `force: true`.
    pub protected: u32,
    /// Ids deleted (or, on a dry run, that would be).
    pub ids: Vec<String>,
    pub dry_run: bool,
}

/// Arguments of `amend`. Only the fields given change.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct AmendArgs {
    /// Id of the memory to change.
    pub id: String,
    /// New content (replaces the old; the old is kept as a version).
    pub content: Option<String>,
    /// New topic.
    pub topic: Option<String>,
    /// Replaces the keywords; `[]` extracts them anew from the content.
    pub keywords: Option<Vec<String>>,
    #[serde(rename = "type")]
    pub kind: Option<FragmentKind>,
    /// New importance, 0–1.
    pub importance: Option<f32>,
    /// Make it (or stop it being) core knowledge that never decays or expires.
    pub is_anchor: Option<bool>,
    /// `verified` or `rejected` on a memory of a case also records a
    /// verification event in the case.
    pub assertion_status: Option<AssertionStatusArg>,
    /// For errors and open questions: whether they are open, resolved or abandoned.
    pub resolution_status: Option<ResolutionStatusArg>,
    /// Emotional tone.
    pub affect: Option<AffectArg>,
    /// Move it to this case (problem being worked on).
    pub case_id: Option<String>,
    /// Stage of the work, e.g. "investigation", "fix", "verification".
    pub phase: Option<String>,
    /// Store the change as a new memory that supersedes this one (keeps
    /// the old one, no longer valid, for `asOf` and history) instead of
    /// changing it in place.
    #[serde(default)]
    pub supersede: bool,
    /// Report what would change, and change nothing.
    #[serde(default)]
    pub dry_run: bool,
    /// The agent whose memories to act on besides the shared ones; defaults to the shared agent.
    pub agent_id: Option<String>,
}

/// Result of `amend`.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AmendResult {
    pub updated: bool,
    /// The amended memory, or the new one when `supersede` was set.
    pub id: String,
    /// Set when another memory already holds the new content; nothing was
    /// changed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub existing_id: Option<String>,
    /// Earlier versions now kept for this memory (see `fragment_history`).
    pub versions: u32,
    pub dry_run: bool,
    pub warnings: Vec<String>,
}

/// Relations agents can create.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum RelationArg {
    Related,
    CausedBy,
    ResolvedBy,
    PartOf,
    Contradicts,
}

/// Arguments of `link`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct LinkArgs {
    /// The memory the link starts from (for `caused_by`: the effect; for `resolved_by`: the error).
    pub from_id: String,
    /// The memory the link points to.
    pub to_id: String,
    /// Default `related`. `fromId resolved_by toId` also marks an error
    /// `fromId` resolved.
    pub relation_type: Option<RelationArg>,
    /// 0–1, default 1.
    pub weight: Option<f32>,
    /// Check the link (both memories, no cycle) and create nothing.
    #[serde(default)]
    pub dry_run: bool,
    /// The agent whose memories to act on besides the shared ones; defaults to the shared agent.
    pub agent_id: Option<String>,
}

/// Result of `link`.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct LinkResult {
    pub linked: bool,
    pub relation_type: String,
    pub dry_run: bool,
}

pub(super) fn tools() -> Vec<ToolSpec> {
    vec![
        ToolSpec::new(
            "forget",
            "Forget",
            "Delete one memory by id, or the oldest memories (up to 200) of a topic. Permanent \
             memories and anchors need `force: true`; `dryRun` lists what would go. Use it for \
             memories that are wrong or obsolete.",
            forget,
        )
        .destroys(true)
        .example(json!({"id": EXAMPLE_FRAGMENT_ID, "dryRun": true})),
        ToolSpec::new(
            "amend",
            "Amend",
            "Change a memory's content, topic, keywords, type, importance, anchor flag or status. \
             The previous version is kept in its history; with `supersede: true` the change \
             becomes a new memory and the old one stops being valid.",
            amend,
        )
        .destroys(false)
        .example(json!({
            "id": EXAMPLE_FRAGMENT_ID,
            "content": "The payments API allows 200 requests per minute per client key since \
                        the v2 gateway.",
            "importance": 0.8,
            "supersede": true
        })),
        ToolSpec::new(
            "link",
            "Link",
            "Connect two memories: related, caused_by, resolved_by, part_of or contradicts. \
             Directional links that would form a cycle are refused.",
            link,
        )
        .writes(true)
        .example(json!({
            "fromId": EXAMPLE_FRAGMENT_ID,
            "toId": EXAMPLE_OTHER_FRAGMENT_ID,
            "relationType": "caused_by",
            "weight": 0.9
        })),
    ]
}

async fn forget(context: ToolContext, args: ForgetArgs) -> Result<ForgetResult, Error> {
    let response = context
        .backends
        .forget(
            &context.principal,
            v1::ForgetRequest {
                id: args.id.unwrap_or_default(),
                topic: args.topic,
                force: args.force,
                dry_run: args.dry_run,
                agent_id: args.agent_id,
            },
        )
        .await?;
    Ok(ForgetResult {
        deleted: response.deleted,
        protected: response.protected,
        ids: response.ids,
        dry_run: response.dry_run,
    })
}

async fn amend(context: ToolContext, args: AmendArgs) -> Result<AmendResult, Error> {
    let response = context
        .backends
        .amend(
            &context.principal,
            v1::AmendRequest {
                id: args.id,
                content: args.content,
                topic: args.topic,
                keywords: args.keywords.map(|values| v1::KeywordList { values }),
                r#type: args.kind.map(|k| k.as_str().to_owned()),
                importance: args.importance,
                is_anchor: args.is_anchor,
                assertion_status: args.assertion_status.map(wire_name),
                resolution_status: args.resolution_status.map(wire_name),
                affect: args.affect.map(wire_name),
                case_id: args.case_id,
                phase: args.phase,
                supersede: args.supersede,
                dry_run: args.dry_run,
                agent_id: args.agent_id,
            },
        )
        .await?;
    Ok(AmendResult {
        updated: response.updated,
        id: response.id,
        existing_id: response.existing_id,
        versions: response.versions,
        dry_run: response.dry_run,
        warnings: response.warnings,
    })
}

async fn link(context: ToolContext, args: LinkArgs) -> Result<LinkResult, Error> {
    let relation = args.relation_type.map_or_else(
        || "related".to_owned(),
        |r| {
            match r {
                RelationArg::Related => "related",
                RelationArg::CausedBy => "caused_by",
                RelationArg::ResolvedBy => "resolved_by",
                RelationArg::PartOf => "part_of",
                RelationArg::Contradicts => "contradicts",
            }
            .to_owned()
        },
    );
    let response = context
        .backends
        .link(
            &context.principal,
            v1::LinkRequest {
                from_id: args.from_id,
                to_id: args.to_id,
                relation_type: relation,
                weight: args.weight,
                dry_run: args.dry_run,
                agent_id: args.agent_id,
            },
        )
        .await?;
    Ok(LinkResult {
        linked: response.linked,
        relation_type: response.relation_type,
        dry_run: response.dry_run,
    })
}
