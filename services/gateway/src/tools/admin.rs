//! `memory_consolidate`: tenant administrators run consolidation now.

use mneme_core::Error;
use mneme_proto::v1;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::{ToolContext, ToolSpec};

/// Arguments of `memory_consolidate`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct ConsolidateArgs {
    /// Report what each stage would change, and change nothing.
    #[serde(default)]
    pub dry_run: bool,
}

/// What one stage did.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct StageOutcome {
    /// `ttl_transition`, `decay`, `feedback_calibration`, `dedup`,
    /// `expired_delete`, `reflection_purge`, `utility`, `anchor_promotion`,
    /// `contradiction_detection`, `contradiction_adjudication`,
    /// `supersession_review` or `search_events_gc`.
    pub stage: String,
    /// Memories (or events) changed, or in a dry run that would change.
    pub affected: u64,
    pub millis: u64,
    /// Why the stage failed; the other stages still ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Why the stage did not run (e.g. `no llm configured`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
}

/// Result of `memory_consolidate`.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ConsolidateResult {
    pub run_id: String,
    pub dry_run: bool,
    /// Some stage failed (see its `error`).
    pub failed: bool,
    pub stages: Vec<StageOutcome>,
}

pub(super) fn tools() -> Vec<ToolSpec> {
    let mut consolidate = ToolSpec::new(
        "memory_consolidate",
        "Consolidate memory",
        "Run the maintenance stages on this tenant's memory now instead of at the next scheduled \
         run: TTL tiers, importance and activation decay, feedback calibration, merging of \
         near-duplicates, garbage \
         collection of forgettable memories and old reflections, utility scores, anchor \
         promotion, contradiction detection, and (with a language model configured) \
         contradiction adjudication and supersession review, old search events. Administrators only. Use `dryRun: true` to \
         see what would change. Sends a progress notification per stage when the request carries \
         a progress token.",
        consolidate,
    )
    .destroys(false)
    .example(json!({ "dryRun": true }));
    consolidate.requires_admin = true;
    vec![consolidate]
}

fn outcome(stage: v1::ConsolidationStage) -> StageOutcome {
    StageOutcome {
        stage: stage.stage,
        affected: stage.affected,
        millis: stage.millis,
        error: stage.error,
        skipped: stage.skipped,
    }
}

async fn consolidate(
    context: ToolContext,
    args: ConsolidateArgs,
) -> Result<ConsolidateResult, Error> {
    let sink = context.progress.clone();
    let result = context
        .backends
        .consolidate(
            &context.principal,
            v1::ConsolidateRequest {
                dry_run: args.dry_run,
            },
            move |progress| {
                let sink = sink.clone();
                Box::pin(async move {
                    if let Some(sink) = sink {
                        let stage = progress.stage.map(|s| s.stage).unwrap_or_default();
                        sink.report(
                            u64::from(progress.done),
                            Some(u64::from(progress.total)),
                            Some(format!("{stage}: {}/{}", progress.done, progress.total)),
                        )
                        .await;
                    }
                })
            },
        )
        .await?;
    Ok(ConsolidateResult {
        run_id: result.run_id,
        dry_run: result.dry_run,
        failed: result.failed,
        stages: result.stages.into_iter().map(outcome).collect(),
    })
}
