//! Access statistics of recalled fragments, gathered in memory and written
//! once per tenant and `MNEME_RECALL_ACCESS_FLUSH_MS`.
//!
//! Written per recall, they cost an `UPDATE` of ten rows and a pooled
//! connection each time, and concurrent recalls of the same popular
//! fragments queued on each other's row locks: 196 ms mean per statement
//! at 20 clients on a 100,000-memory tenant (docs/BENCHMARKS.md). Batched,
//! a fragment recalled many times in one interval is updated once.
//!
//! The price: a process that dies loses at most one interval of counts
//! (they steer decay and garbage collection, never correctness), and a
//! full queue drops new counts rather than slow recalls down.

use std::collections::HashMap;
use std::sync::LazyLock;
use std::time::Duration;

use mneme_store::{Store, StoreError, TenantTx, fragments};
use mneme_telemetry::metrics::register;
use prometheus::{IntCounterVec, Opts};
use tokio::sync::mpsc;
use tokio_util::task::TaskTracker;
use uuid::Uuid;

/// Recalls whose accesses may wait for a flush before new ones are dropped.
const QUEUED_RECALLS: usize = 8_192;
/// Fragments updated per statement. An update that cannot stay on its
/// page adds an entry to every index of the row, HNSW included (about 180
/// buffers a row on a 100,000-memory tenant): pages written before V24
/// left no room for that, and one statement for a busy tenant's whole
/// interval ran past the statement timeout and lost it all.
const FRAGMENTS_PER_WRITE: usize = 500;
/// Attempts of each write that meets a deadlock with another process.
const FLUSH_ATTEMPTS: usize = 3;

static LOST: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register(
        IntCounterVec::new(
            Opts::new(
                "mneme_recall_accesses_lost_total",
                "Fragment accesses never written to the access statistics: the queue was full, or the flush failed.",
            ),
            &["reason"],
        )
        .expect("valid metric"),
    )
});

/// The fragments one recall returned.
struct Accessed {
    tenant_id: Uuid,
    ids: Vec<Uuid>,
}

/// Where recalls leave their accesses; the writer flushes when its last
/// handle is dropped.
#[derive(Debug, Clone)]
pub(crate) struct AccessRecorder {
    queue: mpsc::Sender<Accessed>,
}

impl AccessRecorder {
    /// Starts the writer on the current runtime, tracked by `tasks` (it
    /// ends after its last flush, once every handle is dropped).
    pub(crate) fn spawn(store: Store, flush_every: Duration, tasks: &TaskTracker) -> Self {
        // Exported at zero before the first loss.
        for reason in ["queue_full", "write_failed"] {
            LOST.with_label_values(&[reason]);
        }
        let (queue, received) = mpsc::channel(QUEUED_RECALLS);
        tasks.spawn(write_batches(store, received, flush_every));
        Self { queue }
    }

    pub(crate) fn record(&self, tenant_id: Uuid, ids: Vec<Uuid>) {
        let accesses = ids.len() as u64;
        if self.queue.try_send(Accessed { tenant_id, ids }).is_err() {
            LOST.with_label_values(&["queue_full"]).inc_by(accesses);
            tracing::debug!("access statistics queue full; this recall's accesses are dropped");
        }
    }
}

/// Times each fragment was returned since the last flush, per tenant.
type Pending = HashMap<Uuid, HashMap<Uuid, i32>>;

async fn write_batches(
    store: Store,
    mut received: mpsc::Receiver<Accessed>,
    flush_every: Duration,
) {
    let mut pending = Pending::new();
    let mut ticks = tokio::time::interval(flush_every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            accessed = received.recv() => match accessed {
                Some(accessed) => {
                    let counts = pending.entry(accessed.tenant_id).or_default();
                    for id in accessed.ids {
                        *counts.entry(id).or_default() += 1;
                    }
                }
                None => break,
            },
            _ = ticks.tick() => flush(&store, std::mem::take(&mut pending)).await,
        }
    }
    flush(&store, pending).await;
}

async fn flush(store: &Store, pending: Pending) {
    for (tenant_id, counts) in pending {
        // Sorted, so two processes flushing the same fragments lock them in
        // the same order as far as the plan allows; a deadlock is retried.
        let mut counts: Vec<(Uuid, i32)> = counts.into_iter().collect();
        counts.sort_unstable();
        for chunk in counts.chunks(FRAGMENTS_PER_WRITE) {
            let (ids, times): (Vec<Uuid>, Vec<i32>) = chunk.iter().copied().unzip();
            let mut attempt = 1;
            loop {
                match write(store, tenant_id, &ids, &times).await {
                    Ok(()) => break,
                    Err(error) if error.is_conflict() && attempt < FLUSH_ATTEMPTS => attempt += 1,
                    Err(error) => {
                        let accesses = times.iter().map(|&n| n as u64).sum();
                        LOST.with_label_values(&["write_failed"]).inc_by(accesses);
                        tracing::warn!(%error, %tenant_id, fragments = ids.len(), "recording recall accesses failed");
                        break;
                    }
                }
            }
        }
    }
}

async fn write(
    store: &Store,
    tenant_id: Uuid,
    ids: &[Uuid],
    times: &[i32],
) -> Result<(), StoreError> {
    let mut client = store.client().await?;
    let tx = TenantTx::begin(&mut client, tenant_id).await?;
    fragments::record_access(&tx, ids, times).await?;
    tx.commit().await
}
