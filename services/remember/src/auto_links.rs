//! Links mneme adds on its own to new fragments: `temporal` to the nearest
//! fragments of the same key, agent and topic, and `related` to fragments
//! of the key sharing most keywords (ProactiveRecall in the reference).
//!
//! Optional enrichment, so it runs after the write commits, off the request
//! path, in a transaction of its own; a failure is logged and loses nothing
//! that was acknowledged. A whole write's links take three statements
//! however many fragments it created (the keyword lookups pipelined on one
//! connection).
//!
//! [`AutoLinkSlots`] bounds the work per process: at most
//! [`LINKING_WRITES`] writes are linked at once. A multi-fragment write
//! (`batch_remember`, a reflection) waits for its slot before it is
//! acknowledged, so link work cannot pile up behind a stream of imports and
//! starve the writes themselves. A single `remember` never waits, whatever
//! another tenant is importing: its links queue for a slot in the
//! background, and beyond [`QUEUED_WRITES`] queued ones they are skipped and
//! counted in `mneme_auto_links_skipped_total`.

use std::collections::HashSet;
use std::sync::{Arc, LazyLock};

use mneme_core::{Principal, Result};
use mneme_store::TenantTx;
use mneme_store::fragments::{self, SearchScope};
use mneme_store::links::{self, Edge};
use mneme_telemetry::metrics::register;
use prometheus::IntCounter;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use uuid::Uuid;

use crate::RememberServer;
use crate::write::{CONFLICT_CANDIDATES, DISTINCTIVE_TERMS, Write, overlap};

/// Writes whose automatic links are computed at once, per process.
pub(crate) const LINKING_WRITES: usize = 2;
/// Single writes whose links may wait for a slot, per process.
pub(crate) const QUEUED_WRITES: usize = 1024;

static SKIPPED: LazyLock<IntCounter> = LazyLock::new(|| {
    register(
        IntCounter::new(
            "mneme_auto_links_skipped_total",
            "Single writes left without automatic links because too many were queued.",
        )
        .expect("valid metric"),
    )
});

/// The per-process bounds on automatic link work.
#[derive(Debug, Clone)]
pub(crate) struct AutoLinkSlots {
    running: Arc<Semaphore>,
    queued: Arc<Semaphore>,
}

impl Default for AutoLinkSlots {
    fn default() -> Self {
        // Registered up front, so the counter is exported (at zero) before
        // the first skip.
        LazyLock::force(&SKIPPED);
        Self {
            running: Arc::new(Semaphore::new(LINKING_WRITES)),
            queued: Arc::new(Semaphore::new(QUEUED_WRITES)),
        }
    }
}

/// How a write holds its place for link work.
enum Place {
    /// A multi-fragment write that waited for its slot.
    Running(OwnedSemaphorePermit),
    /// A single write queued for a slot.
    Queued(OwnedSemaphorePermit),
}

impl RememberServer {
    /// Links `created` (fragments of one write) in the background; see the
    /// module documentation for when the caller waits.
    pub(crate) async fn link_automatically(
        &self,
        principal: &Principal,
        created: Vec<(Uuid, Write)>,
    ) {
        if created.is_empty() || !(self.temporal_links_on() || self.settings.proactive_links) {
            return;
        }
        let slots = &self.auto_link_slots;
        let place = if created.len() > 1 {
            match slots.running.clone().acquire_owned().await {
                Ok(slot) => Place::Running(slot),
                Err(_) => return,
            }
        } else {
            match slots.queued.clone().try_acquire_owned() {
                Ok(queued) => Place::Queued(queued),
                Err(_) => {
                    SKIPPED.inc();
                    return;
                }
            }
        };
        let server = self.clone();
        let principal = principal.clone();
        tokio::spawn(async move {
            let _slot = match place {
                Place::Running(slot) => slot,
                // The queue place is held until a running slot is won, so
                // the queue bound counts writes waiting here too.
                Place::Queued(_queued) => {
                    match server.auto_link_slots.running.clone().acquire_owned().await {
                        Ok(slot) => slot,
                        Err(_) => return,
                    }
                }
            };
            if let Err(error) = server.store_auto_links(&principal, &created).await {
                tracing::warn!(%error, "automatic links were not created");
            }
        });
    }

    fn temporal_links_on(&self) -> bool {
        self.settings.temporal_link_hours > 0.0 && self.settings.temporal_link_max > 0
    }

    async fn store_auto_links(
        &self,
        principal: &Principal,
        created: &[(Uuid, Write)],
    ) -> Result<()> {
        let hours = self.settings.temporal_link_hours;
        let mut client = self.store.client().await?;
        let tx = TenantTx::begin(&mut client, principal.tenant_id).await?;
        let mut edges: Vec<Edge> = Vec::new();
        if self.temporal_links_on() {
            let ids: Vec<Uuid> = created.iter().map(|(id, _)| *id).collect();
            let max = self.settings.temporal_link_max as i64;
            let near =
                fragments::temporal_neighbors(&tx, principal.key_id, &ids, hours, max).await?;
            edges.extend(near.into_iter().map(|(from_id, to_id, apart)| Edge {
                from_id,
                to_id,
                relation_type: "temporal".to_owned(),
                weight: (1.0 - apart / hours).max(0.3) as f32,
            }));
        }
        if self.settings.proactive_links {
            let related = futures::future::try_join_all(
                created
                    .iter()
                    .map(|(id, write)| self.proactive_candidates(&tx, principal, write, *id)),
            )
            .await?;
            for ((from, _), targets) in created.iter().zip(related) {
                edges.extend(targets.into_iter().map(|to_id| Edge {
                    from_id: *from,
                    to_id,
                    relation_type: "related".to_owned(),
                    weight: 0.5,
                }));
            }
        }
        links::upsert_edges(&tx, &[principal.key_id], &edges).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Fragments of the same key carrying most of the new fragment's
    /// keywords, to link as `related`.
    async fn proactive_candidates(
        &self,
        tx: &TenantTx<'_>,
        principal: &Principal,
        write: &Write,
        id: Uuid,
    ) -> Result<Vec<Uuid>> {
        let keywords = write.fragment.keywords.join(" ");
        let Some(tsquery) = self
            .tokenizer
            .shared_pairs_query(&keywords, DISTINCTIVE_TERMS)
        else {
            return Ok(Vec::new());
        };
        let own = [principal.key_id];
        let scope = SearchScope {
            key_ids: &own,
            agent_id: &write.agent_id,
            workspace: write.fragment.workspace.as_deref(),
            ..SearchScope::default()
        };
        let mine: HashSet<&str> = write.fragment.keywords.iter().map(String::as_str).collect();
        let neighbors =
            fragments::lexical_neighbors(tx, &scope, &tsquery, Some(id), CONFLICT_CANDIDATES)
                .await?;
        Ok(neighbors
            .into_iter()
            .filter(|n| {
                let theirs: HashSet<&str> = n.keywords.iter().map(String::as_str).collect();
                overlap(&mine, &theirs) >= self.settings.proactive_link_overlap
            })
            .map(|n| n.id)
            .collect())
    }
}
