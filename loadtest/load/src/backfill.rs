//! `backfill`: how fast the embedding worker clears a queue, against what
//! the embedding model alone does on the same texts in the same run.
//!
//! A self-hosted stack is seeded through `batch_remember`, which stores the
//! memories at once and queues their embeddings; the worker starts on them
//! while seeding goes on. From the moment seeding ends, the memories still
//! waiting are timed until none is left: that is the backfill rate, with no
//! writes competing. A second instance of the same embedder (same
//! settings, same passage recipe) embeds a sample of the seeded memories in
//! the worker's batch size on the idle stack, once before seeding and once
//! after the backfill: the model's own rate is the mean of the two, which
//! brackets the backfill in time (on a shared machine the model's speed
//! drifts by a fifth from one minute to the next). The ratio of the rates
//! is what the pipeline around the model costs (locking the queue, storing
//! vectors, index updates, whatever else the stack does meanwhile); the
//! target is ≥ 0.9.

use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use mneme_config::Config;
use mneme_embed::{Embedder, PassageRecipe, TextKind};
use serde::{Deserialize, Serialize};

use crate::data;
use crate::db_time::{self, StatementTime};
use crate::mcp::Lifecycle;
use crate::seed::{self, MAX_BATCH, SeedOptions, SeedReport};
use crate::self_hosted::{SelfHosted, SelfHostedOptions};

/// What the issue asks of the pipeline: at least this share of the model's
/// own throughput.
pub const TARGET_RATIO: f64 = 0.9;

/// How often the queue is counted: often enough to time a backfill of a
/// minute to within 1 %, seldom enough not to load the database measured.
const POLL: Duration = Duration::from_millis(250);

#[derive(Debug, Clone)]
pub struct BackfillOptions {
    pub hosted: SelfHostedOptions,
    /// Memories seeded per tenant.
    pub fragments: usize,
    pub seed: u64,
    /// Seeded memories the model alone embeds for the comparison (at most
    /// all of them).
    pub sample: usize,
    /// Give up when the queue is not empty after this long.
    pub timeout: Duration,
    /// Print a progress line on stderr every second.
    pub progress: bool,
}

/// The model alone on a sample of the seeded memories.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ModelRate {
    pub texts: usize,
    /// Texts per call, as the worker sends them (`MNEME_EMBED_BATCH_SIZE`).
    pub batch_size: usize,
    pub seconds: f64,
    pub per_second: f64,
    /// Mean length of the embedded texts in characters.
    pub mean_chars: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BackfillReport {
    pub embedder: String,
    pub model: String,
    pub tenants: usize,
    pub settings: Vec<(String, String)>,
    pub seeding: SeedReport,
    /// Memories still waiting for their vector when seeding ended.
    pub queued: i64,
    /// From the end of seeding until none was waiting.
    pub seconds: f64,
    pub per_second: f64,
    /// The model alone before seeding and after the backfill.
    pub model_before: ModelRate,
    pub model_after: ModelRate,
    /// The mean of the two.
    pub model_per_second: f64,
    /// `per_second / model_per_second`.
    pub ratio: f64,
    pub target_ratio: f64,
    /// The database time of the backfill by statement.
    pub database: Vec<StatementTime>,
}

/// Seeds a self-hosted stack, times its embedding worker, then the model.
pub async fn backfill(options: &BackfillOptions) -> anyhow::Result<BackfillReport> {
    if options.fragments == 0 {
        bail!("--fragments must be at least 1");
    }
    let hosted = SelfHosted::start(&options.hosted).await?;
    let result = measure(&hosted, options).await;
    hosted.shutdown().await?;
    result
}

async fn measure(hosted: &SelfHosted, options: &BackfillOptions) -> anyhow::Result<BackfillReport> {
    let config = hosted.config();
    let texts = sample_texts(options, config);
    let embedder = mneme_embed::from_config(&config.embedding)?;
    let batch_size = config.embedding.worker_batch_size.max(1);
    let model_before = model_rate(embedder.as_ref(), &texts, batch_size).await?;
    let seeding = seed::seed(
        &hosted.target(),
        &SeedOptions {
            fragments: options.fragments,
            seed: options.seed,
            batch_size: MAX_BATCH,
            parallel: 2,
            lifecycle: Lifecycle::Session,
            progress: options.progress,
        },
    )
    .await?;
    if seeding.rejected > 0 {
        bail!(
            "seeding rejected {} memories: {:?}",
            seeding.rejected,
            seeding.rejection_examples
        );
    }

    let before = db_time::Snapshot::take();
    let started = Instant::now();
    let queued = hosted.pending_embeddings().await;
    let mut left = queued;
    let mut last_report = Instant::now();
    while left > 0 {
        if started.elapsed() > options.timeout {
            bail!(
                "{left} of {queued} memories still wait for their vector after {:?}; \
                 is the embedding worker running?",
                options.timeout
            );
        }
        tokio::time::sleep(POLL).await;
        left = hosted.pending_embeddings().await;
        if options.progress && last_report.elapsed() >= Duration::from_secs(1) {
            last_report = Instant::now();
            let done = queued - left;
            eprintln!(
                "backfill: {done} of {queued} embedded, {:.1}/s",
                done as f64 / started.elapsed().as_secs_f64()
            );
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let database = db_time::Snapshot::take().since(&before);

    let model_after = model_rate(embedder.as_ref(), &texts, batch_size).await?;
    let model_per_second = (model_before.per_second + model_after.per_second) / 2.0;
    let per_second = rate(usize::try_from(queued).unwrap_or(0), seconds);
    Ok(BackfillReport {
        embedder: options.hosted.embedder.clone(),
        model: hosted
            .embedding_model()
            .await?
            .unwrap_or_else(|| "none stored".into()),
        tenants: options.hosted.tenants,
        settings: hosted.settings().to_vec(),
        seeding,
        queued,
        seconds,
        per_second,
        ratio: if model_per_second > 0.0 {
            per_second / model_per_second
        } else {
            0.0
        },
        model_before,
        model_after,
        model_per_second,
        target_ratio: TARGET_RATIO,
        database,
    })
}

/// The first `sample` memories of the seeding (key by key in turn), as
/// the worker's passage recipe writes them.
fn sample_texts(options: &BackfillOptions, config: &Config) -> Vec<String> {
    let recipe = PassageRecipe::from_config(&config.embedding);
    let keys = options.hosted.tenants as u64;
    let count = options
        .sample
        .clamp(1, options.fragments * options.hosted.tenants);
    (0..count as u64)
        .map(|n| {
            let memory = data::memory(options.seed, n % keys, n / keys);
            recipe.text(memory.topic, &memory.content)
        })
        .collect()
}

/// Embeds `texts` in calls of `batch_size`, as the worker sends them.
async fn model_rate(
    embedder: &dyn Embedder,
    texts: &[String],
    batch_size: usize,
) -> anyhow::Result<ModelRate> {
    let started = Instant::now();
    for batch in texts.chunks(batch_size) {
        embedder
            .embed(batch, TextKind::Passage)
            .await
            .context("embedding the sample with the model alone")?;
    }
    let seconds = started.elapsed().as_secs_f64();
    let chars: usize = texts.iter().map(|t| t.chars().count()).sum();
    Ok(ModelRate {
        texts: texts.len(),
        batch_size,
        seconds,
        per_second: rate(texts.len(), seconds),
        mean_chars: if texts.is_empty() {
            0.0
        } else {
            chars as f64 / texts.len() as f64
        },
    })
}

fn rate(count: usize, seconds: f64) -> f64 {
    if seconds > 0.0 {
        count as f64 / seconds
    } else {
        0.0
    }
}

/// The report as the command prints it.
pub fn summary(report: &BackfillReport) -> String {
    let verdict = if report.ratio >= report.target_ratio {
        "met"
    } else {
        "not met"
    };
    format!(
        "seeded {} memories in {:.1} s ({} tenants, embedder {}, model {})\n\
         backfill: {} queued at the end of seeding, embedded in {:.1} s = {:.1}/s\n\
         model alone: {} seeded texts (mean {:.0} characters) in batches of {}: \
         {:.1}/s before seeding, {:.1}/s after the backfill, mean {:.1}/s\n\
         ratio {:.2} (target ≥ {:.2}: {verdict})\n",
        report.seeding.created,
        report.seeding.seconds,
        report.tenants,
        report.embedder,
        report.model,
        report.queued,
        report.seconds,
        report.per_second,
        report.model_before.texts,
        report.model_before.mean_chars,
        report.model_before.batch_size,
        report.model_before.per_second,
        report.model_after.per_second,
        report.model_per_second,
        report.ratio,
        report.target_ratio,
    )
}
