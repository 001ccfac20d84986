//! `Consolidate`: an administrator runs the consolidation stages for their
//! tenant now, through the same runner and the same per-tenant lease as the
//! consolidator's schedule (so a manual run never overlaps a scheduled
//! one). Served here rather than by the consolidator so that on-demand runs
//! need no extra listener: the remember service is already the write path
//! the gateway reaches.

use mneme_consolidator::STAGES;
use mneme_core::{Error, ErrorCode, Permission, Principal, Result};
use mneme_proto::v1::{
    ConsolidateProgress, ConsolidateRequest, ConsolidateResult, ConsolidationStage,
};
use mneme_store::consolidation::StageResult;

use crate::RememberServer;

fn stage_message(stage: &StageResult) -> ConsolidationStage {
    ConsolidationStage {
        stage: stage.stage.to_owned(),
        affected: stage.affected,
        millis: stage.millis,
        error: stage.error.clone(),
        skipped: stage.skipped.clone(),
    }
}

impl RememberServer {
    /// Runs every stage for the principal's tenant; `progress` hears each
    /// stage as it finishes.
    pub async fn consolidate(
        &self,
        principal: &Principal,
        request: ConsolidateRequest,
        progress: impl Fn(ConsolidateProgress),
    ) -> Result<ConsolidateResult> {
        principal.require(Permission::Admin)?;
        let total = u32::try_from(STAGES.len()).unwrap_or(u32::MAX);
        let done = std::sync::atomic::AtomicU32::new(0);
        let run = self
            .consolidator
            .run_now(principal.tenant_id, request.dry_run, |stage| {
                let done = done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                progress(ConsolidateProgress {
                    stage: Some(stage_message(stage)),
                    done,
                    total,
                });
            })
            .await?
            .ok_or_else(|| {
                Error::new(
                    ErrorCode::Conflict,
                    "a consolidation of this tenant is running; try again when it has finished",
                )
            })?;
        tracing::info!(tenant.id = %principal.tenant_id, dry_run = run.dry_run, failed = run.failed(), "consolidation run on demand");
        Ok(ConsolidateResult {
            run_id: run.id.to_string(),
            dry_run: run.dry_run,
            failed: run.failed(),
            stages: run.stages.iter().map(stage_message).collect(),
        })
    }
}
