//! The consolidation worker: the embedding worker and the scheduled,
//! tenant-scoped maintenance stages.
//!
//! Layout: [`EmbeddingWorker`] (the embedding queue consumer, in this file),
//! [`consolidate`] (the stages and their per-tenant schedule), `split` (the
//! `split_long` stage's question and what it stores), [`llm`] (the
//! language model of the stages that need judgement) and [`run`] (process
//! wiring).
//!
//! The embedding queue is the `fragments` table itself: rows whose
//! `embedding IS NULL`. A worker takes a batch of one tenant's rows with
//! `FOR NO KEY UPDATE SKIP LOCKED` (which, unlike `FOR UPDATE`, does not
//! wait for or skip rows that a concurrent link insert merely references),
//! embeds them and commits, all in one
//! transaction. Any number of workers can run; a worker killed mid-batch
//! loses nothing (its transaction rolls back and the rows are taken again).
//! Workers learn about new rows from a Redis wake-up published by the
//! remember service, and sweep every tenant periodically in case a wake-up
//! was lost.
//!
//! A vector computed by another model or from another [`PassageRecipe`]
//! is stale. Once a tenant's queue is empty the worker re-embeds its stale
//! vectors in batches, each after a look at the queue, so new fragments
//! never wait behind them; a stale vector keeps serving its model's
//! searches until it is replaced.
//! Once a tenant has none left (none waiting for a retry either), the worker
//! does not look at it again until it restarts: only a restart can change
//! the model or recipe.
#![forbid(unsafe_code)]

pub mod consolidate;
pub mod llm;
mod split;

pub use consolidate::{Consolidator, ModelReply, STAGES, Stage};

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use mneme_cache::Cache;
use mneme_config::Config;
use mneme_core::batch_size::AdaptiveBatchSize;
use mneme_embed::{EmbedError, Embedder, PassageRecipe, TextKind};
use mneme_store::{Store, StoreError, TenantTx, fragments, tenants};
use mneme_telemetry::metrics::register;
use pgvector::Vector;
use prometheus::{Gauge, IntCounter, IntGauge};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// Longest a drain of one tenant spends re-embedding stale vectors before
/// the worker moves on; the rest waits for the next sweep.
const STALE_SLICE: Duration = Duration::from_secs(5);
/// How long a tenant found without stale vectors is taken to stay so. Only
/// another model's worker (the old pods of a rolling deploy) or a requeue
/// can make vectors stale again; they are picked up within this time.
const STALE_RECHECK: Duration = Duration::from_secs(600);

/// Pause after a failed batch before the tenant is tried again.
const RETRY_BACKOFF: Duration = Duration::from_secs(2);

#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Embed(#[from] mneme_embed::EmbedError),
}

/// The embedding backlog over all tenants, as of the last sweep.
static BACKLOG: LazyLock<(IntGauge, Gauge)> = LazyLock::new(|| {
    (
        register(
            IntGauge::new(
                "mneme_embedding_queue_depth",
                "Fragments waiting for an embedding over all tenants (parked ones excluded), as of the embedding worker's last sweep.",
            )
            .expect("valid metric"),
        ),
        register(
            Gauge::new(
                "mneme_embedding_queue_oldest_seconds",
                "Age of the oldest fragment waiting for an embedding, as of the last sweep.",
            )
            .expect("valid metric"),
        ),
    )
});

/// Re-embedding of stale vectors.
static STALE: LazyLock<(IntGauge, IntCounter)> = LazyLock::new(|| {
    (
        register(
            IntGauge::new(
                "mneme_embedding_stale",
                "Stored vectors computed by another model or passage recipe than the current one, over the tenants not yet re-embedded, as of the embedding worker's last sweep.",
            )
            .expect("valid metric"),
        ),
        register(
            IntCounter::new(
                "mneme_embedding_reembedded_total",
                "Stale vectors the embedding worker replaced.",
            )
            .expect("valid metric"),
        ),
    )
});

static PARKED: LazyLock<IntCounter> = LazyLock::new(|| {
    register(
        IntCounter::new(
            "mneme_embedding_parked_total",
            "Fragments taken out of the embedding queue after the provider rejected them repeatedly.",
        )
        .expect("valid metric"),
    )
});

/// Consumes the embedding queue.
///
/// Several batches of a tenant are in flight at once (`batches_in_flight`,
/// two by default), each in its own transaction, but the model embeds one
/// batch at a time (`embedding_turn`): while one batch's vectors are stored
/// (an index insertion per row, a few milliseconds each), the next batch is
/// being embedded. Letting the batches embed at once instead would
/// interleave them chunk by chunk on the model's lock, so all of them would
/// reach the database together and the model would wait for it again.
///
/// The batch size adapts: a batch the provider cannot finish in time (it is
/// slow or the machine is loaded) halves the next one, down to a single
/// fragment, and every batch that succeeds grows it back towards the
/// configured size. Without this a batch that misses the provider's deadline
/// would be retried whole, and miss it again, for ever.
#[derive(Debug, Clone)]
pub struct EmbeddingWorker {
    store: Store,
    embedder: Arc<dyn Embedder>,
    batch_size: AdaptiveBatchSize,
    batches_in_flight: usize,
    /// Held while a batch is embedded (see the type's docs).
    embedding_turn: Arc<tokio::sync::Mutex<()>>,
    max_attempts: i16,
    retry_backoff: Duration,
    recipe: PassageRecipe,
    /// Tenants found to hold no stale vector, and when.
    up_to_date: Arc<Mutex<HashMap<Uuid, std::time::Instant>>>,
    /// Wake-ups arrive here, and it is told when a tenant's vectors
    /// changed; `None`: periodic sweeps only.
    cache: Option<Cache>,
}

impl EmbeddingWorker {
    pub fn new(store: Store, embedder: Arc<dyn Embedder>, batch_size: usize) -> Self {
        let defaults = Config::defaults().embedding;
        Self {
            store,
            embedder,
            batch_size: AdaptiveBatchSize::new(batch_size),
            batches_in_flight: defaults.worker_batches_in_flight,
            embedding_turn: Arc::default(),
            max_attempts: defaults.max_attempts,
            retry_backoff: defaults.retry_backoff,
            recipe: PassageRecipe::from_config(&defaults),
            up_to_date: Arc::default(),
            cache: None,
        }
    }

    /// A worker with every embedding setting of `config`.
    pub fn from_config(
        store: Store,
        embedder: Arc<dyn Embedder>,
        config: &mneme_config::EmbeddingConfig,
    ) -> Self {
        Self::new(store, embedder, config.worker_batch_size)
            .with_recipe(PassageRecipe::from_config(config))
            .with_retries(config.max_attempts, config.retry_backoff)
            .with_batches_in_flight(config.worker_batches_in_flight)
    }

    /// Batches of one tenant worked on at once (at least one).
    pub fn with_batches_in_flight(mut self, batches: usize) -> Self {
        self.batches_in_flight = batches.max(1);
        self
    }

    /// Listens for embedding wake-ups on `cache`, and tells it when a
    /// tenant's memories got vectors (so cached statistics refresh).
    pub fn with_cache(mut self, cache: Cache) -> Self {
        self.cache = Some(cache);
        self
    }

    /// The text recipe of new vectors (default: the settings' default).
    pub fn with_recipe(mut self, recipe: PassageRecipe) -> Self {
        self.recipe = recipe;
        self
    }

    /// Retries of rejected fragments: `max_attempts` tries, the first retry
    /// after `backoff`, doubling.
    pub fn with_retries(mut self, max_attempts: i16, backoff: Duration) -> Self {
        self.max_attempts = max_attempts.max(1);
        self.retry_backoff = backoff;
        self
    }

    /// Embeds one batch of the tenant's pending fragments, or when none is
    /// pending, re-embeds a batch of its stale vectors, in one transaction.
    /// Returns how many were embedded (0: nothing left to do) and whether
    /// they were stale.
    async fn embed_batch(&self, tenant_id: Uuid) -> Result<(usize, bool), WorkerError> {
        let mut client = self.store.client().await?;
        let tx = TenantTx::begin(&mut client, tenant_id).await?;
        let batch_size = self.batch_size.current();
        let pending = fragments::lock_pending_embeddings(&tx, batch_size as i64).await?;
        let (batch, stale) = if !pending.is_empty() {
            (pending, false)
        } else if self.is_up_to_date(tenant_id) {
            return Ok((0, false));
        } else {
            let (model, recipe) = (self.embedder.model_id(), self.recipe.version());
            let stale =
                fragments::lock_stale_embeddings(&tx, model, recipe, batch_size as i64).await?;
            if stale.is_empty() {
                // Nothing to take now; stale vectors waiting for a retry
                // (or locked by another worker) keep the tenant on the list.
                if fragments::count_stale_embeddings(&tx, model, recipe).await? == 0 {
                    self.up_to_date_lock()
                        .insert(tenant_id, std::time::Instant::now());
                }
                return Ok((0, false));
            }
            (stale, true)
        };
        let texts: Vec<String> = batch
            .iter()
            .map(|p| self.recipe.text(&p.topic, &p.content))
            .collect();
        let embedded = {
            let _turn = self.embedding_turn.lock().await;
            self.embedder.embed(&texts, TextKind::Passage).await
        };
        let vectors = match embedded {
            Ok(vectors) => {
                self.adapt_batch_size(batch_size, true);
                vectors
            }
            Err(error @ EmbedError::Unavailable(_)) => {
                self.adapt_batch_size(batch_size, false);
                return Err(error.into());
            }
            // The provider rejected something in the batch: find out what,
            // one fragment at a time, so one bad text cannot block the rest.
            Err(EmbedError::Failed(_)) => {
                let handled = self.embed_one_by_one(&tx, &batch, &texts).await?;
                tx.commit().await?;
                return Ok((handled, stale));
            }
        };
        let ids: Vec<Uuid> = batch.iter().map(|p| p.id).collect();
        let vectors: Vec<Vector> = vectors.into_iter().map(Vector::from).collect();
        self.store_vectors(&tx, &ids, &vectors).await?;
        tx.commit().await?;
        if stale {
            STALE.1.inc_by(ids.len() as u64);
        }
        Ok((ids.len(), stale))
    }

    async fn store_vectors(
        &self,
        tx: &TenantTx<'_>,
        ids: &[Uuid],
        vectors: &[Vector],
    ) -> Result<u64, StoreError> {
        let (model, recipe) = (self.embedder.model_id(), self.recipe.version());
        fragments::store_embeddings(tx, model, recipe, ids, vectors).await
    }

    fn up_to_date_lock(&self) -> std::sync::MutexGuard<'_, HashMap<Uuid, std::time::Instant>> {
        self.up_to_date.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn is_up_to_date(&self, tenant_id: Uuid) -> bool {
        self.up_to_date_lock()
            .get(&tenant_id)
            .is_some_and(|checked| checked.elapsed() < STALE_RECHECK)
    }

    /// Halves the batch size after a batch the provider could not take,
    /// grows it by half after one it took.
    fn adapt_batch_size(&self, used: usize, succeeded: bool) {
        let next = if succeeded {
            self.batch_size.succeeded(used)
        } else {
            self.batch_size.timed_out(used)
        };
        if next != used {
            tracing::debug!(from = used, to = next, "embedding batch size adapted");
        }
    }

    /// The batch size the next batch will use.
    pub fn current_batch_size(&self) -> usize {
        self.batch_size.current()
    }

    /// Embeds `pending` singly; a fragment the provider rejects is retried
    /// later with backoff, and parked after the last attempt. An outage
    /// (not a rejection) aborts the batch, which is then retried whole; so
    /// does a batch whose every text is rejected, which points at the
    /// provider's configuration rather than at the texts.
    async fn embed_one_by_one(
        &self,
        tx: &TenantTx<'_>,
        pending: &[fragments::PendingEmbedding],
        texts: &[String],
    ) -> Result<usize, WorkerError> {
        let mut rejected = Vec::new();
        for (item, text) in pending.iter().zip(texts) {
            let embedded = {
                let _turn = self.embedding_turn.lock().await;
                self.embedder
                    .embed(std::slice::from_ref(text), TextKind::Passage)
                    .await
            };
            match embedded {
                Ok(mut vectors) => {
                    let vector = Vector::from(vectors.pop().unwrap_or_default());
                    self.store_vectors(tx, &[item.id], &[vector]).await?;
                }
                Err(EmbedError::Failed(reason)) => rejected.push((item.id, reason)),
                Err(error) => return Err(error.into()),
            }
        }
        if pending.len() > 1 && rejected.len() == pending.len() {
            let reason = rejected.pop().map(|(_, reason)| reason).unwrap_or_default();
            return Err(EmbedError::Failed(reason).into());
        }
        for (id, reason) in rejected {
            let parked =
                fragments::embedding_failed(tx, id, &reason, self.retry_backoff, self.max_attempts)
                    .await?;
            if parked {
                PARKED.inc();
                tracing::warn!(fragment.id = %id, %reason, "fragment parked: the embedding provider keeps rejecting it");
            } else {
                tracing::info!(fragment.id = %id, %reason, "embedding rejected; will retry");
            }
        }
        Ok(pending.len())
    }

    /// Embeds batches until the tenant's queue is empty or `stop` fires,
    /// then re-embeds its stale vectors for at most `STALE_SLICE`, so a
    /// tenant re-embedding a large store cannot hold up the others' queues.
    /// `batches_in_flight` lanes take batches side by side.
    pub async fn drain_tenant(
        &self,
        tenant_id: Uuid,
        stop: &CancellationToken,
    ) -> Result<usize, WorkerError> {
        let lanes = (0..self.batches_in_flight).map(|_| Box::pin(self.drain_lane(tenant_id, stop)));
        let total: usize = futures::future::try_join_all(lanes)
            .await?
            .into_iter()
            .sum();
        if total > 0 {
            tracing::info!(tenant.id = %tenant_id, count = total, "fragments embedded");
            if let Some(cache) = &self.cache {
                cache.note_tenant_changed(&tenant_id.to_string()).await;
            }
        }
        Ok(total)
    }

    /// One lane of [`Self::drain_tenant`]: batch after batch until none is
    /// left to take (the other lanes may still hold some).
    async fn drain_lane(
        &self,
        tenant_id: Uuid,
        stop: &CancellationToken,
    ) -> Result<usize, WorkerError> {
        let mut stale_since = None;
        let mut total = 0;
        while !stop.is_cancelled() {
            let (embedded, stale) = self.embed_batch(tenant_id).await?;
            if embedded == 0 {
                break;
            }
            total += embedded;
            if stale
                && stale_since
                    .get_or_insert_with(std::time::Instant::now)
                    .elapsed()
                    > STALE_SLICE
            {
                break;
            }
        }
        Ok(total)
    }

    /// The tenant's waiting fragments, the age of the oldest, and its stale
    /// vectors (not counted once it is known to have none).
    async fn backlog(&self, tenant_id: Uuid) -> Result<(i64, f64, i64), WorkerError> {
        let mut client = self.store.client().await?;
        let tx = TenantTx::begin(&mut client, tenant_id).await?;
        let (waiting, age) = fragments::pending_embedding_backlog(&tx).await?;
        let stale = if self.is_up_to_date(tenant_id) {
            0
        } else {
            let (model, recipe) = (self.embedder.model_id(), self.recipe.version());
            fragments::count_stale_embeddings(&tx, model, recipe).await?
        };
        Ok((waiting, age, stale))
    }

    /// Drains every active tenant once. A failing tenant is logged and
    /// skipped so it cannot block the others.
    pub async fn sweep(&self, stop: &CancellationToken) -> Result<usize, WorkerError> {
        let tenant_ids = {
            let client = self.store.client().await?;
            tenants::active_ids(&client).await?
        };
        let mut total = 0;
        let (mut depth, mut oldest) = (0, 0.0_f64);
        let mut stale = 0;
        for &tenant_id in &tenant_ids {
            match self.backlog(tenant_id).await {
                Ok((waiting, age, stale_vectors)) => {
                    depth += waiting;
                    oldest = oldest.max(age);
                    stale += stale_vectors;
                }
                Err(error) => tracing::debug!(tenant.id = %tenant_id, %error, "backlog not read"),
            }
        }
        BACKLOG.0.set(depth);
        BACKLOG.1.set(oldest);
        STALE.0.set(stale);
        for tenant_id in tenant_ids {
            if stop.is_cancelled() {
                break;
            }
            match self.drain_tenant(tenant_id, stop).await {
                Ok(count) => total += count,
                Err(error) => {
                    tracing::warn!(tenant.id = %tenant_id, %error, "embedding batch failed")
                }
            }
        }
        Ok(total)
    }

    /// Runs until `stop` fires: a sweep at start and every `sweep_interval`,
    /// and a drain of a tenant as soon as its wake-up arrives.
    pub async fn run(self, sweep_interval: Duration, stop: CancellationToken) {
        let mut listener = match &self.cache {
            Some(cache) => match cache.embedding_wake_listener().await {
                Ok(listener) => Some(listener),
                Err(error) => {
                    tracing::warn!(%error, "no embedding wake-ups; relying on periodic sweeps");
                    None
                }
            },
            None => None,
        };
        let mut sweep = tokio::time::interval(sweep_interval);
        sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let woken = async {
                match listener.as_mut() {
                    Some(listener) => listener.recv().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = stop.cancelled() => break,
                _ = sweep.tick() => {
                    if let Err(error) = self.sweep(&stop).await {
                        tracing::warn!(%error, "embedding sweep failed");
                        tokio::time::sleep(RETRY_BACKOFF).await;
                    }
                }
                tenant = woken => match tenant.as_deref().map(str::parse::<Uuid>) {
                    Some(Ok(tenant_id)) => {
                        if let Err(error) = self.drain_tenant(tenant_id, &stop).await {
                            tracing::warn!(tenant.id = %tenant_id, %error, "embedding batch failed");
                            tokio::time::sleep(RETRY_BACKOFF).await;
                        }
                    }
                    Some(Err(_)) => tracing::debug!("ignored a malformed embedding wake-up"),
                    None => listener = None,
                },
            }
        }
        tracing::info!("embedding worker stopped");
    }
}

/// Runs the consolidator as its own process until `shutdown`.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    let store = Store::open(&config).await?;
    let cache = Cache::from_config(&config.redis).await?;
    let embedder = mneme_embed::from_config(&config.embedding)?;
    let worker =
        EmbeddingWorker::from_config(store.clone(), embedder, &config.embedding).with_cache(cache);
    let stop = CancellationToken::new();
    let embedding = tokio::spawn(worker.run(config.embedding.worker_sweep_interval, stop.clone()));
    let consolidation = config.consolidation.enabled.then(|| {
        let consolidator = Consolidator::new(store, config.consolidation.clone());
        tokio::spawn(consolidator.run(stop.clone()))
    });
    shutdown.await;
    stop.cancel();
    embedding.await?;
    if let Some(consolidation) = consolidation {
        consolidation.await?;
    }
    Ok(())
}
