//! Links mneme adds on its own to new fragments: `temporal` to the nearest
//! fragments of the same key, agent and topic, and `related` to fragments
//! of the key sharing most keywords (ProactiveRecall in the reference).
//!
//! Optional enrichment, so it runs after the write commits, off the request
//! path, in a transaction of its own; a failure is logged and loses nothing
//! that was acknowledged. A whole write's links take three statements
//! however many fragments it created: the temporal neighbours, the keyword
//! neighbours (found through pairs of keywords any qualifying fragment must
//! carry, [`probe_pairs`], and counted exactly on the stored keywords) and
//! the links.
//!
//! [`AutoLinkSlots`] bounds the work per process: at most
//! [`LINKING_WRITES`] writes are linked at once. A multi-fragment write
//! (`batch_remember`, a reflection) waits for its slot before it is
//! acknowledged, so link work cannot pile up behind a stream of imports and
//! starve the writes themselves. A single `remember` never waits, whatever
//! another tenant is importing: its links queue for a slot in the
//! background, and beyond [`QUEUED_WRITES`] queued ones they are skipped and
//! counted in `mneme_auto_links_skipped_total`.

use std::sync::{Arc, LazyLock};

use mneme_core::{Principal, Result};
use mneme_store::TenantTx;
use mneme_store::fragments::{self, KeywordProbe};
use mneme_store::links::{self, Edge};
use mneme_telemetry::metrics::register;
use prometheus::IntCounter;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use uuid::Uuid;

use crate::RememberServer;
use crate::write::Write;

/// Writes whose automatic links are computed at once, per process.
pub(crate) const LINKING_WRITES: usize = 2;
/// Single writes whose links may wait for a slot, per process.
pub(crate) const QUEUED_WRITES: usize = 1024;
/// `related` links a new fragment gets at most.
const RELATED_LINKS: i64 = 5;

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
            let min_share = self.settings.proactive_link_overlap;
            let probes: Vec<KeywordProbe<'_>> = created
                .iter()
                .flat_map(|(id, write)| {
                    probe_pairs(&write.fragment.keywords, min_share)
                        .into_iter()
                        .map(|(first, second)| KeywordProbe {
                            fragment_id: *id,
                            first,
                            second,
                        })
                })
                .collect();
            let related = fragments::keyword_neighbors(
                &tx,
                principal.key_id,
                &probes,
                min_share,
                RELATED_LINKS,
            )
            .await?;
            edges.extend(related.into_iter().map(|(from_id, to_id)| Edge {
                from_id,
                to_id,
                relation_type: "related".to_owned(),
                weight: 0.5,
            }));
        }
        links::upsert_edges(&tx, &[principal.key_id], &edges).await?;
        tx.commit().await?;
        Ok(())
    }
}

/// Keyword pairs of which a fragment sharing at least `min_share` of
/// `keywords` must carry one pair entirely: with k keywords of which n must
/// be shared, such a fragment misses at most k − n of them, so it carries
/// at least two of any k − n + 2. The longest are taken, as the likeliest
/// to be rare. When one shared keyword is enough, each keyword is its own
/// probe (paired with itself).
pub(crate) fn probe_pairs(keywords: &[String], min_share: f64) -> Vec<(&str, &str)> {
    let mut distinct: Vec<&str> = keywords.iter().map(String::as_str).collect();
    distinct.sort_by(|a, b| b.chars().count().cmp(&a.chars().count()).then(a.cmp(b)));
    distinct.dedup();
    let k = distinct.len();
    let Some(needed) = (1..=k).find(|n| *n as f64 / k as f64 >= min_share) else {
        return Vec::new();
    };
    if needed == 1 {
        return distinct.iter().map(|term| (*term, *term)).collect();
    }
    let probed = &distinct[..k - needed + 2];
    probed
        .iter()
        .enumerate()
        .flat_map(|(i, first)| probed[i + 1..].iter().map(move |second| (*first, *second)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::probe_pairs;

    fn words(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("w{i:02}")).collect()
    }

    #[test]
    fn every_keyword_probes_alone_when_one_shared_is_enough() {
        let keywords = words(2);
        assert_eq!(
            probe_pairs(&keywords, 0.5),
            vec![("w00", "w00"), ("w01", "w01")]
        );
        assert!(probe_pairs(&[], 0.5).is_empty());
    }

    #[test]
    fn five_keywords_at_half_probe_the_pairs_of_the_four_longest() {
        let keywords: Vec<String> = ["db", "postgres", "vacuum", "wal", "replica"]
            .map(String::from)
            .to_vec();
        let pairs = probe_pairs(&keywords, 0.5);
        assert_eq!(pairs.len(), 6, "{pairs:?}");
        assert!(pairs.iter().all(|(a, b)| *a != "db" && *b != "db"));
    }

    /// Every subset sharing enough keywords carries a probed pair: the
    /// probes lose no neighbour, for every size and share up to 8.
    #[test]
    fn any_fragment_sharing_enough_keywords_matches_a_probe() {
        for k in 1..=8usize {
            let keywords = words(k);
            for min_share in [0.1, 0.34, 0.5, 0.6, 0.75, 1.0] {
                let pairs = probe_pairs(&keywords, min_share);
                for mask in 1u32..(1 << k) {
                    let shared: Vec<&str> = (0..k)
                        .filter(|i| mask & (1 << i) != 0)
                        .map(|i| keywords[i].as_str())
                        .collect();
                    if (shared.len() as f64 / k as f64) < min_share {
                        continue;
                    }
                    assert!(
                        pairs
                            .iter()
                            .any(|(a, b)| shared.contains(a) && shared.contains(b)),
                        "k={k} share={min_share} shared={shared:?} pairs={pairs:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn no_probe_when_no_fragment_can_share_enough() {
        assert!(probe_pairs(&words(3), 1.5).is_empty());
    }
}
