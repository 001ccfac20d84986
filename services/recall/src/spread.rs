//! Spreading activation (`MNEME_SPREADING_ACTIVATION`): what the agent is
//! working on (`contextText`) warms up the fragments matching its keywords
//! and their graph neighbours, so `context` and decay favour them later.
//!
//! It runs after the answer and never changes it; it touches only the
//! activation of fragments the caller can read, and each fragment at most
//! once per session (or per key outside sessions) within the dedup window,
//! shared by all pods through Redis.

use mneme_cache::Cache;
use mneme_store::fragments::{self, SearchScope};
use mneme_store::{Store, TenantTx, feedback};
use uuid::Uuid;

/// Fragments matching the context's keywords that seed the spread.
const SEEDS: i64 = 10;
/// Neighbours one link away from the seeds that are warmed up too.
const NEIGHBOURS: i64 = 10;

/// One spread, owned so it can run in the background.
#[derive(Debug)]
pub(crate) struct Spread {
    pub(crate) tenant_id: Uuid,
    pub(crate) key_id: Uuid,
    pub(crate) readable_keys: Vec<Uuid>,
    pub(crate) agent_id: String,
    pub(crate) workspace: Option<String>,
    pub(crate) session_id: Option<String>,
    pub(crate) keywords: Vec<String>,
}

impl Spread {
    /// Warms up the reached fragments by `step`; returns the ids warmed.
    pub(crate) async fn run(
        self,
        store: &Store,
        cache: &Cache,
        step: f32,
        dedup: std::time::Duration,
    ) -> mneme_store::Result<Vec<Uuid>> {
        let mut client = store.client().await?;
        let tx = TenantTx::begin(&mut client, self.tenant_id).await?;
        let scope = SearchScope {
            key_ids: &self.readable_keys,
            agent_id: &self.agent_id,
            workspace: self.workspace.as_deref(),
            topic: None,
            types: None,
            as_of: None,
            include_superseded: false,
            time_from: None,
            time_to: None,
            case_id: None,
            phase: None,
            resolution_status: None,
            min_importance: None,
            is_anchor: None,
            affects: None,
            created_before: None,
            exclude: &[],
        };
        let seeds: Vec<Uuid> = fragments::keyword_search(&tx, &scope, &self.keywords, SEEDS)
            .await?
            .into_iter()
            .map(|hit| hit.id)
            .collect();
        if seeds.is_empty() {
            return Ok(Vec::new());
        }
        let mut reached = seeds.clone();
        // Every seed matches the context alike: neighbours rank by link
        // strength alone.
        let alike = vec![1.0; seeds.len()];
        for hit in fragments::graph_neighbors(&tx, &scope, &seeds, &alike, NEIGHBOURS).await? {
            if !reached.contains(&hit.id) {
                reached.push(hit.id);
            }
        }
        let tenant = self.tenant_id.to_string();
        let key = self.key_id.to_string();
        let session = self.session_id.as_deref().unwrap_or("-");
        let candidates: Vec<String> = reached.iter().map(Uuid::to_string).collect();
        let fresh: Vec<Uuid> = cache
            .first_spread(&[&tenant, &key, session], &candidates, dedup)
            .await
            .iter()
            .filter_map(|id| id.parse().ok())
            .collect();
        if fresh.is_empty() {
            return Ok(fresh);
        }
        let warmed = feedback::adjust_activation(&tx, &self.readable_keys, &fresh, step).await?;
        tx.commit().await?;
        Ok(warmed)
    }
}
