//! Links mneme adds on its own to new fragments: `temporal` to the nearest
//! fragments of the same key, agent and topic, and `related` to fragments
//! of the key sharing most keywords (ProactiveRecall in the reference).
//!
//! A write queues its new fragments in `auto_link_queue` inside its own
//! transaction ([`AutoLinker::enqueue`]) and is acknowledged without
//! waiting for their links: an import runs at the speed of its inserts,
//! and no link is lost to a crash or to an overflowing in-memory queue.
//! [`AutoLinker`] drains the queue. After each commit the writing process
//! drains that tenant ([`AutoLinker::kick`]), so links follow a write within
//! milliseconds when the queue is short; every `MNEME_AUTO_LINK_SWEEP_SECS`
//! it also looks at every tenant's queue, for fragments a stopped process
//! left behind. Batches are taken with `SKIP LOCKED`, so any number of
//! processes can drain one tenant together.
//!
//! A batch (up to `MNEME_AUTO_LINK_BATCH_SIZE` fragments; half as many
//! after a batch timed out, growing back after each success) is linked in
//! one transaction, which also removes it from the queue: three statements per
//! key it touches, however many fragments: the temporal neighbours, the
//! keyword neighbours (found through pairs of keywords any qualifying
//! fragment must carry, [`probe_pairs`], and counted exactly on the stored
//! keywords) and the links. At most `MNEME_AUTO_LINK_CONCURRENCY` batches
//! are linked at once per process, and tenants take turns batch by batch, so one
//! tenant's import cannot hold back another's links.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, LazyLock, Mutex};

use mneme_config::RememberConfig;
use mneme_core::batch_size::AdaptiveBatchSize;
use mneme_core::{ErrorCode, Result};
use mneme_store::auto_link_queue::{self, QueuedFragment};
use mneme_store::fragments::{self, KeywordProbe};
use mneme_store::links::{self, Edge};
use mneme_store::{Store, TenantTx, tenants};
use mneme_telemetry::metrics::register;
use prometheus::{Gauge, IntCounter, IntGauge};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// `related` links a new fragment gets at most.
const RELATED_LINKS: i64 = 5;

/// The queue over all tenants as of the last sweep, and the work done.
static QUEUE: LazyLock<(IntGauge, Gauge, IntCounter)> = LazyLock::new(|| {
    (
        register(
            IntGauge::new(
                "mneme_auto_link_queue_depth",
                "New fragments waiting for their automatic links over all tenants, as of this process's last sweep.",
            )
            .expect("valid metric"),
        ),
        register(
            Gauge::new(
                "mneme_auto_link_queue_oldest_seconds",
                "Age of the oldest fragment waiting for its automatic links, as of this process's last sweep.",
            )
            .expect("valid metric"),
        ),
        register(
            IntCounter::new(
                "mneme_auto_linked_fragments_total",
                "New fragments this process took from the automatic-link queue and linked.",
            )
            .expect("valid metric"),
        ),
    )
});

/// Drains the automatic-link queue; cheap to clone (one per process).
#[derive(Debug, Clone)]
pub(crate) struct AutoLinker {
    store: Store,
    settings: Arc<RememberConfig>,
    /// Tenants this process is draining; `true` when more was queued since
    /// the drain last found the queue empty.
    draining: Arc<Mutex<HashMap<Uuid, bool>>>,
    slots: Arc<Semaphore>,
    /// Fragments the next batch takes, at most
    /// `MNEME_AUTO_LINK_BATCH_SIZE`; halved after a batch timed out.
    batch_size: AdaptiveBatchSize,
}

impl AutoLinker {
    pub(crate) fn new(store: Store, settings: Arc<RememberConfig>) -> Self {
        // Registered up front, so the metrics are exported before the
        // first sweep.
        LazyLock::force(&QUEUE);
        Self {
            store,
            draining: Arc::default(),
            slots: Arc::new(Semaphore::new(settings.auto_link_concurrency)),
            batch_size: AdaptiveBatchSize::new(settings.auto_link_batch_size),
            settings,
        }
    }

    fn temporal_links_on(&self) -> bool {
        self.settings.temporal_link_hours > 0.0 && self.settings.temporal_link_max > 0
    }

    fn enabled(&self) -> bool {
        self.temporal_links_on() || self.settings.proactive_links
    }

    /// Queues new fragments for linking in their write's transaction.
    pub(crate) async fn enqueue(&self, tx: &TenantTx<'_>, fragment_ids: &[Uuid]) -> Result<()> {
        if self.enabled() {
            auto_link_queue::enqueue(tx, fragment_ids).await?;
        }
        Ok(())
    }

    /// Makes sure this process drains the tenant's queue soon: starts a
    /// drain, or tells the running one to look again before it stops.
    pub(crate) fn kick(&self, tenant_id: Uuid) {
        if !self.enabled() {
            return;
        }
        {
            let mut draining = self.draining_lock();
            if let Some(again) = draining.get_mut(&tenant_id) {
                *again = true;
                return;
            }
            draining.insert(tenant_id, false);
        }
        tokio::spawn(self.clone().drain(tenant_id));
    }

    fn draining_lock(&self) -> std::sync::MutexGuard<'_, HashMap<Uuid, bool>> {
        self.draining.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Links batch after batch until the tenant's queue is empty (or what
    /// is left is held by other processes). A batch that times out is
    /// retried at half the size; any other failure is logged and ends the
    /// drain, and the batch stays queued for the next kick or sweep.
    async fn drain(self, tenant_id: Uuid) {
        loop {
            let limit = self.batch_size.current();
            let linked = match self.slots.acquire().await {
                Ok(_slot) => self.link_batch(tenant_id, limit).await,
                Err(_) => return,
            };
            match linked {
                Ok(taken) => {
                    self.batch_size.succeeded(limit);
                    if taken >= limit {
                        continue;
                    }
                    let mut draining = self.draining_lock();
                    if draining.get(&tenant_id).copied().unwrap_or(false) {
                        draining.insert(tenant_id, false);
                        continue;
                    }
                    draining.remove(&tenant_id);
                    return;
                }
                Err(error) if error.code == ErrorCode::Timeout && limit > 1 => {
                    tracing::info!(tenant.id = %tenant_id, limit, "an automatic-link batch timed out; retrying it smaller");
                    self.batch_size.timed_out(limit);
                }
                Err(error) => {
                    tracing::warn!(tenant.id = %tenant_id, %error, "automatic links were not created; the fragments stay queued");
                    self.draining_lock().remove(&tenant_id);
                    return;
                }
            }
        }
    }

    /// Takes up to `limit` queued fragments of the tenant and links them,
    /// in one transaction. Returns how many were taken.
    async fn link_batch(&self, tenant_id: Uuid, limit: usize) -> Result<usize> {
        let mut client = self.store.client().await?;
        let tx = TenantTx::begin(&mut client, tenant_id).await?;
        let taken = auto_link_queue::take(&tx, limit as i64).await?;
        let count = taken.len();
        let mut by_key: BTreeMap<Uuid, Vec<(Uuid, QueuedFragment)>> = BTreeMap::new();
        for item in taken {
            if let Some(fragment) = item.fragment {
                by_key
                    .entry(fragment.key_id)
                    .or_default()
                    .push((item.fragment_id, fragment));
            }
        }
        let mut edges: Vec<Edge> = Vec::new();
        for (key_id, queued) in &by_key {
            edges.extend(self.edges_within_key(&tx, *key_id, queued).await?);
        }
        let key_ids: Vec<Uuid> = by_key.into_keys().collect();
        if let Err(error) = links::upsert_undirected_edges(&tx, &key_ids, &edges).await {
            // How large the failed batch was: upserts that time out under
            // load are not yet explained (docs/BENCHMARKS.md).
            tracing::info!(tenant.id = %tenant_id, fragments = count, links = edges.len(), %error, "upserting a batch's automatic links failed");
            return Err(error.into());
        }
        tx.commit().await?;
        QUEUE.2.inc_by(count as u64);
        Ok(count)
    }

    /// The automatic links of `queued`, new fragments of one key.
    async fn edges_within_key(
        &self,
        tx: &TenantTx<'_>,
        key_id: Uuid,
        queued: &[(Uuid, QueuedFragment)],
    ) -> Result<Vec<Edge>> {
        let mut edges: Vec<Edge> = Vec::new();
        if self.temporal_links_on() {
            let hours = self.settings.temporal_link_hours;
            let ids: Vec<Uuid> = queued.iter().map(|(id, _)| *id).collect();
            let max = self.settings.temporal_link_max as i64;
            let near = fragments::temporal_neighbors(tx, key_id, &ids, hours, max).await?;
            edges.extend(near.into_iter().map(|(from_id, to_id, apart)| Edge {
                from_id,
                to_id,
                relation_type: "temporal".to_owned(),
                weight: (1.0 - apart / hours).max(0.3) as f32,
            }));
        }
        if self.settings.proactive_links {
            let min_share = self.settings.proactive_link_overlap;
            let probes: Vec<KeywordProbe<'_>> = queued
                .iter()
                .flat_map(|(id, fragment)| {
                    probe_pairs(&fragment.keywords, min_share)
                        .into_iter()
                        .map(|(first, second)| KeywordProbe {
                            fragment_id: *id,
                            first,
                            second,
                        })
                })
                .collect();
            let related =
                fragments::keyword_neighbors(tx, key_id, &probes, min_share, RELATED_LINKS).await?;
            edges.extend(related.into_iter().map(|(from_id, to_id)| Edge {
                from_id,
                to_id,
                relation_type: "related".to_owned(),
                weight: 0.5,
            }));
        }
        Ok(edges)
    }

    /// Looks at every active tenant's queue: exports its depth and age, and
    /// drains the tenants with fragments waiting. A tenant that cannot be
    /// read is logged and skipped.
    pub(crate) async fn sweep(&self) -> Result<()> {
        if !self.enabled() {
            return Ok(());
        }
        let tenant_ids = {
            let client = self.store.client().await?;
            tenants::active_ids(&client).await?
        };
        let (mut depth, mut oldest) = (0, 0.0_f64);
        for tenant_id in tenant_ids {
            match self.backlog(tenant_id).await {
                Ok((waiting, age)) => {
                    depth += waiting;
                    oldest = oldest.max(age);
                    if waiting > 0 {
                        self.kick(tenant_id);
                    }
                }
                Err(error) => {
                    tracing::debug!(tenant.id = %tenant_id, %error, "automatic-link queue not read")
                }
            }
        }
        QUEUE.0.set(depth);
        QUEUE.1.set(oldest);
        Ok(())
    }

    async fn backlog(&self, tenant_id: Uuid) -> Result<(i64, f64)> {
        let mut client = self.store.client().await?;
        let tx = TenantTx::begin(&mut client, tenant_id).await?;
        let backlog = auto_link_queue::backlog(&tx).await?;
        tx.commit().await?;
        Ok(backlog)
    }

    /// Sweeps at start and every `MNEME_AUTO_LINK_SWEEP_SECS` until `stop`.
    pub(crate) async fn run_sweeps(self, stop: CancellationToken) {
        let mut every = tokio::time::interval(self.settings.auto_link_sweep_interval);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                _ = every.tick() => {
                    if let Err(error) = self.sweep().await {
                        tracing::warn!(%error, "automatic-link sweep failed");
                    }
                }
            }
        }
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
