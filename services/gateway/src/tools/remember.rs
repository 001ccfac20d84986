//! `remember` and `batch_remember`.

use chrono::{DateTime, Utc};
use mneme_core::Error;
use mneme_proto::v1;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::kinds::{
    AffectArg, AssertionStatusArg, FragmentKind, ResolutionStatusArg, Scope, wire_name,
};
use super::{ToolContext, ToolSpec};

/// Arguments of `remember`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct RememberArgs {
    /// One self-contained fact: resolve pronouns, name concrete entities and
    /// numbers, one topic per call, cause and effect together. At most 300
    /// characters (1000 for `episode`).
    pub content: String,
    /// Short subject label, reused across related memories (e.g. "deploy",
    /// "user-preferences").
    pub topic: String,
    /// What kind of knowledge this is.
    #[serde(rename = "type")]
    pub kind: FragmentKind,
    /// Search keywords; extracted automatically when omitted.
    #[serde(default)]
    pub keywords: Vec<String>,
    /// 0–1. Defaults by type; capped per type unless `isAnchor`.
    pub importance: Option<f32>,
    /// Core knowledge that never decays or expires.
    #[serde(default)]
    pub is_anchor: bool,
    /// Where this came from (a URL, a file, a conversation).
    pub source: Option<String>,
    /// Sub-partition of the key's memories; defaults to the key's workspace.
    pub workspace: Option<String>,
    /// The agent this memory belongs to; defaults to the shared agent.
    pub agent_id: Option<String>,
    /// Retrying with the same key returns the first result instead of storing
    /// twice; the key used again for other content is an error.
    pub idempotency_key: Option<String>,
    /// The surrounding situation, kept with the fragment.
    pub context_summary: Option<String>,
    /// Ids of memories to link to as `related`.
    #[serde(default)]
    pub linked_to: Vec<String>,
    /// `permanent` (default) or `session`: kept only in this session's
    /// working memory (see `context`), never stored for good.
    pub scope: Option<Scope>,
    /// Ids of memories this one replaces; they stop being valid (see
    /// `recall`'s `includeSuperseded` and `asOf`).
    #[serde(default)]
    pub supersedes: Vec<String>,
    /// The case (problem being worked on) this belongs to; errors,
    /// decisions and procedures of a session and topic get one automatically.
    pub case_id: Option<String>,
    /// What the case is trying to achieve.
    pub goal: Option<String>,
    /// How the case ended.
    pub outcome: Option<String>,
    /// Stage of the work, e.g. "investigation", "fix", "verification".
    pub phase: Option<String>,
    /// For errors and open questions: `open`, `resolved` or `abandoned` (a `resolved_by` link also marks an error resolved).
    pub resolution_status: Option<ResolutionStatusArg>,
    /// How certain this is (default `observed`).
    pub assertion_status: Option<AssertionStatusArg>,
    /// Emotional tone (default `neutral`).
    pub affect: Option<AffectArg>,
    /// When it happened (RFC 3339), if not now.
    pub occurred_at: Option<DateTime<Utc>>,
    /// Validate and report what would be stored, without storing anything.
    #[serde(default)]
    pub dry_run: bool,
}

/// Result of `remember`.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RememberResult {
    /// Id of the stored (or already existing) fragment; absent on dry runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// `created`, `duplicate` (same content already stored), `replayed` (a
    /// retry: same idempotency key and content) or `simulated` (dry run).
    pub outcome: String,
    /// `permanent` or `session`.
    pub scope: String,
    pub keywords: Vec<String>,
    pub importance: f32,
    pub ttl_tier: String,
    /// Secrets or personal data replaced before storing.
    pub redactions: u32,
    /// Stored memories saying much the same: check whether one should be
    /// amended or superseded instead.
    pub conflicts: Vec<ConflictHint>,
    /// Things to look at (unknown link targets, low importance, quota).
    pub warnings: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub case_id: Option<String>,
    /// Ids that stopped being valid because of `supersedes`.
    pub superseded: Vec<String>,
    pub links_created: u32,
    /// The key's quota (dry runs only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quota: Option<QuotaInfo>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct ConflictHint {
    pub id: String,
    /// The first 100 characters.
    pub content: String,
    /// Share of the new memory's terms it also contains (0–1).
    pub overlap: f32,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct QuotaInfo {
    /// Absent when unlimited.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    pub used: u64,
}

/// Arguments of `batch_remember`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct BatchRememberArgs {
    /// The memories, each with the arguments of `remember` (at most 200).
    pub fragments: Vec<RememberArgs>,
    /// Workspace for items that name none.
    pub workspace: Option<String>,
    /// Agent for items that name none.
    pub agent_id: Option<String>,
}

/// The outcome of one item of a batch.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct BatchItem {
    /// Position of the item in `fragments`.
    pub index: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// `created`, `duplicate`, `replayed`, or `rejected` (see `error`).
    pub outcome: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ItemError>,
}

/// Why an item was rejected.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct ItemError {
    pub code: String,
    pub message: String,
}

/// Result of `batch_remember`.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct BatchRememberResult {
    pub results: Vec<BatchItem>,
    pub created: u32,
    /// Items that matched a stored memory (same content or idempotency key).
    pub existing: u32,
    pub rejected: u32,
}

pub(crate) fn outcome_name(outcome: i32) -> &'static str {
    match v1::WriteOutcome::try_from(outcome) {
        Ok(v1::WriteOutcome::Created) => "created",
        Ok(v1::WriteOutcome::Duplicate) => "duplicate",
        Ok(v1::WriteOutcome::Replayed) => "replayed",
        _ => "rejected",
    }
}

pub(crate) fn remember_request(args: RememberArgs) -> v1::RememberRequest {
    v1::RememberRequest {
        content: args.content,
        topic: args.topic,
        r#type: args.kind.as_str().to_owned(),
        keywords: args.keywords,
        importance: args.importance,
        is_anchor: args.is_anchor,
        source: args.source,
        workspace: args.workspace,
        agent_id: args.agent_id,
        idempotency_key: args.idempotency_key,
        context_summary: args.context_summary,
        linked_to: args.linked_to,
        scope: args.scope.map(|s| match s {
            Scope::Permanent => "permanent".to_owned(),
            Scope::Session => "session".to_owned(),
        }),
        supersedes: args.supersedes,
        case_id: args.case_id,
        goal: args.goal,
        outcome: args.outcome,
        phase: args.phase,
        resolution_status: args.resolution_status.map(wire_name),
        assertion_status: args.assertion_status.map(wire_name),
        affect: args.affect.map(wire_name),
        dry_run: args.dry_run,
        occurred_at_unix_ms: args.occurred_at.map(|at| at.timestamp_millis()),
        session_id: None,
    }
}

pub(super) fn tools() -> Vec<ToolSpec> {
    vec![
        ToolSpec::new(
            "remember",
            "Remember",
            "Store one durable memory: a fact, decision, error, preference, procedure, relation or \
             episode. Write self-contained sentences (no 'it'/'this'), one fact per call. Returns the \
             memory id; storing the same content again returns the existing id.",
            remember,
        )
        .writes(true)
        .example(json!({
            "content": "The payments API allows 100 requests per minute per client key; \
                        bursts above that get HTTP 429.",
            "topic": "payments-api",
            "type": "fact",
            "keywords": ["payments-api", "rate-limit", "429"],
            "importance": 0.7,
            "source": "https://wiki.example.com/payments/limits"
        })),
        ToolSpec::new(
            "batch_remember",
            "Remember many",
            "Store up to 200 memories in one call and one transaction (same arguments as `remember` \
             per item). Invalid items are reported one by one; the valid ones are all stored or none \
             is. Sends progress notifications when the request carries a progress token.",
            batch_remember,
        )
        .writes(true)
        .example(json!({
            "fragments": [
                {
                    "content": "Mina prefers release notes written in Korean first, English second.",
                    "topic": "release-notes",
                    "type": "preference"
                },
                {
                    "content": "Release notes are published every second Tuesday after the sprint review.",
                    "topic": "release-notes",
                    "type": "procedure"
                }
            ],
            "workspace": "docs-team"
        })),
    ]
}

async fn remember(context: ToolContext, args: RememberArgs) -> Result<RememberResult, Error> {
    let response = context
        .backends
        .remember(&context.principal, remember_request(args))
        .await?;
    Ok(RememberResult {
        outcome: if response.dry_run {
            "simulated".to_owned()
        } else {
            outcome_name(response.outcome).to_owned()
        },
        id: (!response.id.is_empty()).then_some(response.id),
        scope: response.scope,
        keywords: response.keywords,
        importance: response.importance,
        ttl_tier: response.ttl_tier,
        redactions: response.redactions,
        conflicts: response
            .conflicts
            .into_iter()
            .map(|c| ConflictHint {
                id: c.id,
                content: c.content,
                overlap: c.overlap,
            })
            .collect(),
        warnings: response.warnings,
        case_id: response.case_id,
        superseded: response.superseded,
        links_created: response.links_created,
        quota: response.quota.map(|q| QuotaInfo {
            limit: q.limit,
            used: q.used,
        }),
    })
}

async fn batch_remember(
    context: ToolContext,
    args: BatchRememberArgs,
) -> Result<BatchRememberResult, Error> {
    let request = v1::BatchRememberRequest {
        items: args.fragments.into_iter().map(remember_request).collect(),
        workspace: args.workspace,
        agent_id: args.agent_id,
    };
    let sink = context.progress.clone();
    let result = context
        .backends
        .batch_remember(&context.principal, request, move |progress| {
            let sink = sink.clone();
            Box::pin(async move {
                if let Some(sink) = sink {
                    let message = format!(
                        "{}: {}/{}",
                        progress.phase, progress.processed, progress.total
                    );
                    sink.report(
                        u64::from(progress.processed),
                        Some(u64::from(progress.total)),
                        Some(message),
                    )
                    .await;
                }
            })
        })
        .await?;
    Ok(BatchRememberResult {
        results: result
            .results
            .into_iter()
            .map(|item| BatchItem {
                index: item.index,
                id: item.id,
                outcome: outcome_name(item.outcome).to_owned(),
                error: item.error.map(|e| ItemError {
                    code: e.code,
                    message: e.message,
                }),
            })
            .collect(),
        created: result.created,
        existing: result.existing,
        rejected: result.rejected,
    })
}
