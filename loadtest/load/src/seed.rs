//! Filling tenants with generated memories through `batch_remember`: up to
//! 200 per call (the tool's limit), several calls in flight, a progress
//! line with the rate and the time left.
//!
//! The memories of key `k` are `data::memory(seed, k, 0..fragments)`, so
//! the same seed gives the same memories, and seeding again stores
//! nothing new (identical content comes back as `existing`). Some memories
//! link to memories of the key's first batch (`linkedTo`), which is why
//! that batch goes first: the ids it returns are the link targets. Which
//! memory links to which is fixed by the seed too.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::data::{self, SplitMix64};
use crate::db_time::StatementTime;
use crate::mcp::{self, Client, Failure, Lifecycle};
use crate::scenario::connect_all;
use crate::stats::{LatencySummary, OperationStats};
use crate::target::Target;

/// `batch_remember`'s limit of items per call.
pub const MAX_BATCH: usize = 200;

/// Share of memories (after each key's first batch) that link to one or
/// two memories of that first batch.
const LINK_SHARE: f64 = 0.15;

/// How many times a failed batch is sent again (it is idempotent: stored
/// items come back as `existing`), with a doubling pause from 1 s.
const RETRIES: u32 = 4;

#[derive(Debug, Clone)]
pub struct SeedOptions {
    /// Memories per key.
    pub fragments: usize,
    pub seed: u64,
    pub batch_size: usize,
    /// `batch_remember` calls in flight at once.
    pub parallel: usize,
    pub lifecycle: Lifecycle,
    /// Print a progress line on stderr every second.
    pub progress: bool,
}

/// What seeding did.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SeedReport {
    pub seed: u64,
    pub fragments_per_key: usize,
    pub batch_size: usize,
    pub parallel: usize,
    pub seconds: f64,
    /// Items sent per second of the whole seeding.
    pub fragments_per_second: f64,
    pub created: u64,
    pub existing: u64,
    pub rejected: u64,
    /// Items that asked for links.
    pub linked: u64,
    /// Rejection messages by error code (the first of each).
    pub rejection_examples: BTreeMap<String, String>,
    /// Round trips of the `batch_remember` calls.
    pub batch_latency_ms: LatencySummary,
    pub keys: Vec<KeySeed>,
    /// Self-hosted: the automatic links of the seeded memories, which
    /// follow the acknowledged writes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_links: Option<AutoLinkSettling>,
    /// Self-hosted: the database time of the seeding (and of its automatic
    /// links) by statement.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub database: Vec<StatementTime>,
}

/// How long the automatic links of a seeding took to catch up.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AutoLinkSettling {
    /// Memories waiting for their links when the last batch was
    /// acknowledged.
    pub queued_at_end: i64,
    /// Seconds from the start of the seeding until none was waiting.
    pub settled_seconds: f64,
    /// Memories created per second of `settled_seconds`: the import's rate
    /// with its links included.
    pub linked_per_second: f64,
}

/// One key's share.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct KeySeed {
    /// Position of the key in the target's list.
    pub key_index: usize,
    pub created: u64,
    pub existing: u64,
    pub rejected: u64,
    /// `memory_stats.total` after seeding: the key's valid memories,
    /// including any stored before.
    pub stored_total: Option<u64>,
}

/// One `batch_remember` call's worth.
#[derive(Debug, Clone)]
struct Batch {
    key: usize,
    /// Indexes of the key's memories.
    first: usize,
    len: usize,
}

#[derive(Debug, Default)]
struct BatchOutcome {
    created: u64,
    existing: u64,
    rejected: u64,
    linked: u64,
    rejections: BTreeMap<String, String>,
    /// Ids by memory index, for the first batch (the link targets).
    ids: Vec<Option<String>>,
}

/// Seeds every key of `target` with `options.fragments` memories.
pub async fn seed(target: &Target, options: &SeedOptions) -> anyhow::Result<SeedReport> {
    if options.batch_size == 0 || options.batch_size > MAX_BATCH {
        bail!("the batch size must be between 1 and {MAX_BATCH}");
    }
    let keys = target.keys.len();
    let clients = Arc::new(connect_all(target, keys, options.lifecycle).await?);
    let started = Instant::now();
    let done = Arc::new(AtomicU64::new(0));
    let total = (keys * options.fragments) as u64;
    let progress = options
        .progress
        .then(|| tokio::spawn(report_progress(done.clone(), total, started)));

    let batches: Vec<Batch> = (0..keys)
        .flat_map(|key| {
            (0..options.fragments)
                .step_by(options.batch_size)
                .map(move |first| Batch {
                    key,
                    first,
                    len: options.batch_size.min(options.fragments - first),
                })
        })
        .collect();
    let (first_batches, rest): (Vec<Batch>, Vec<Batch>) =
        batches.into_iter().partition(|batch| batch.first == 0);

    let latencies = Arc::new(std::sync::Mutex::new(OperationStats::new()));
    let no_targets = Arc::new(vec![Vec::new(); keys]);
    let firsts = send_all(
        first_batches,
        &clients,
        &no_targets,
        options,
        &done,
        &latencies,
    )
    .await?;
    let mut link_targets = vec![Vec::new(); keys];
    for (batch, outcome) in &firsts {
        link_targets[batch.key] = outcome.ids.clone();
    }
    let others = send_all(
        rest,
        &clients,
        &Arc::new(link_targets),
        options,
        &done,
        &latencies,
    )
    .await?;
    let seconds = started.elapsed().as_secs_f64();
    if let Some(progress) = progress {
        progress.abort();
    }

    let mut report = SeedReport {
        seed: options.seed,
        fragments_per_key: options.fragments,
        batch_size: options.batch_size,
        parallel: options.parallel,
        seconds,
        fragments_per_second: if seconds > 0.0 {
            total as f64 / seconds
        } else {
            0.0
        },
        created: 0,
        existing: 0,
        rejected: 0,
        linked: 0,
        rejection_examples: BTreeMap::new(),
        batch_latency_ms: LatencySummary::default(),
        keys: (0..keys)
            .map(|key_index| KeySeed {
                key_index,
                ..KeySeed::default()
            })
            .collect(),
        auto_links: None,
        database: Vec::new(),
    };
    for (batch, outcome) in firsts.iter().chain(&others) {
        let key = &mut report.keys[batch.key];
        key.created += outcome.created;
        key.existing += outcome.existing;
        key.rejected += outcome.rejected;
        report.created += outcome.created;
        report.existing += outcome.existing;
        report.rejected += outcome.rejected;
        report.linked += outcome.linked;
        for (code, message) in &outcome.rejections {
            report
                .rejection_examples
                .entry(code.clone())
                .or_insert_with(|| message.clone());
        }
    }
    report.batch_latency_ms = latencies
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .summary(seconds, false)
        .latency_ms;
    for (key, client) in clients.iter().enumerate() {
        report.keys[key].stored_total = stored_total(client).await.ok();
    }
    if let Ok(clients) = Arc::try_unwrap(clients) {
        for client in clients {
            mcp::close(client).await;
        }
    }
    Ok(report)
}

/// `memory_stats.total` of the key a client holds.
pub async fn stored_total(client: &Client) -> Result<u64, Failure> {
    let result = mcp::call_tool(client, "memory_stats", Map::new()).await?;
    let stats = mcp::structured(&result)?;
    stats["total"].as_u64().ok_or_else(|| {
        Failure::new(
            mcp::ErrorKind::Unexpected,
            format!("memory_stats without a total: {stats}"),
        )
    })
}

async fn send_all(
    batches: Vec<Batch>,
    clients: &Arc<Vec<Client>>,
    link_targets: &Arc<Vec<Vec<Option<String>>>>,
    options: &SeedOptions,
    done: &Arc<AtomicU64>,
    latencies: &Arc<std::sync::Mutex<OperationStats>>,
) -> anyhow::Result<Vec<(Batch, BatchOutcome)>> {
    let permits = Arc::new(Semaphore::new(options.parallel.max(1)));
    let mut sending = JoinSet::new();
    for batch in batches {
        let permits = permits.clone();
        let clients = clients.clone();
        let link_targets = link_targets.clone();
        let done = done.clone();
        let latencies = latencies.clone();
        let seed = options.seed;
        sending.spawn(async move {
            let _permit = permits.acquire_owned().await;
            let items = batch_items(seed, &batch, &link_targets[batch.key]);
            let linked = items
                .iter()
                .filter(|item| item.contains_key("linkedTo"))
                .count() as u64;
            let sent = Instant::now();
            let outcome = send_batch(&clients[batch.key], items, &batch).await;
            if outcome.is_ok() {
                latencies
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .record_ok(sent.elapsed(), false);
            }
            done.fetch_add(batch.len as u64, Ordering::Relaxed);
            outcome.map(|mut outcome| {
                outcome.linked = linked;
                (batch, outcome)
            })
        });
    }
    let mut outcomes = Vec::new();
    while let Some(joined) = sending.join_next().await {
        outcomes.push(joined.context("a seeding task panicked")??);
    }
    Ok(outcomes)
}

/// The `batch_remember` items of `batch`; links point into the key's first
/// batch, whose ids are `targets` (empty while that batch is being sent).
fn batch_items(seed: u64, batch: &Batch, targets: &[Option<String>]) -> Vec<Map<String, Value>> {
    (batch.first..batch.first + batch.len)
        .map(|index| {
            let mut item = data::memory(seed, batch.key as u64, index as u64).arguments();
            let mut rng = SplitMix64::for_item(seed ^ 0x6c69_6e6b, batch.key as u64, index as u64);
            if !targets.is_empty() && rng.chance(LINK_SHARE) {
                let mut linked: Vec<&str> = (0..1 + rng.below(2))
                    .filter_map(|_| targets[rng.below(targets.len() as u64) as usize].as_deref())
                    .collect();
                linked.dedup();
                if !linked.is_empty() {
                    item.insert("linkedTo".into(), json!(linked));
                }
            }
            item
        })
        .collect()
}

async fn send_batch(
    client: &Client,
    items: Vec<Map<String, Value>>,
    batch: &Batch,
) -> anyhow::Result<BatchOutcome> {
    let arguments = json!({ "fragments": items });
    let Value::Object(arguments) = arguments else {
        unreachable!("a JSON object literal")
    };
    let mut pause = Duration::from_secs(1);
    let mut attempt = 0;
    let result = loop {
        match mcp::call_tool(client, "batch_remember", arguments.clone()).await {
            Ok(result) => break result,
            Err(failure) if attempt < RETRIES => {
                eprintln!(
                    "seed: batch of key {} at {} failed ({}), retrying in {pause:?}",
                    batch.key, batch.first, failure.kind
                );
                tokio::time::sleep(pause).await;
                pause *= 2;
                attempt += 1;
            }
            Err(failure) => bail!(
                "batch_remember for key {} (memories {}..{}) failed {} times: {} ({})",
                batch.key,
                batch.first,
                batch.first + batch.len,
                RETRIES + 1,
                failure.kind,
                failure.message
            ),
        }
    };
    let answer = mcp::structured(&result).map_err(|f| anyhow::anyhow!(f.message))?;
    let count = |field: &str| answer[field].as_u64().unwrap_or(0);
    let mut outcome = BatchOutcome {
        created: count("created"),
        existing: count("existing"),
        rejected: count("rejected"),
        ids: vec![None; batch.len],
        ..BatchOutcome::default()
    };
    let results = answer["results"]
        .as_array()
        .with_context(|| format!("batch_remember answered without results: {answer}"))?;
    for item in results {
        let index = item["index"].as_u64().unwrap_or(u64::MAX) as usize;
        if let (Some(slot), Some(id)) = (outcome.ids.get_mut(index), item["id"].as_str()) {
            *slot = Some(id.to_owned());
        }
        if let Some(error) = item.get("error").filter(|e| !e.is_null()) {
            let code = error["code"].as_str().unwrap_or("unknown").to_owned();
            let message = error["message"].as_str().unwrap_or_default();
            outcome
                .rejections
                .entry(code)
                .or_insert_with(|| message.to_owned());
        }
    }
    Ok(outcome)
}

/// `seed: 2400/6000 memories (40 %), 812/s, ETA 4 s`, once a second.
async fn report_progress(done: Arc<AtomicU64>, total: u64, started: Instant) {
    let mut ticker = tokio::time::interval(Duration::from_secs(1));
    ticker.tick().await;
    loop {
        ticker.tick().await;
        let done = done.load(Ordering::Relaxed);
        let seconds = started.elapsed().as_secs_f64();
        let rate = done as f64 / seconds.max(1e-9);
        let eta = if rate > 0.0 {
            format!("{:.0} s", total.saturating_sub(done) as f64 / rate)
        } else {
            "unknown".to_owned()
        };
        eprintln!(
            "seed: {done}/{total} memories ({:.0} %), {rate:.0}/s, ETA {eta}",
            done as f64 * 100.0 / total.max(1) as f64
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_point_into_the_first_batch_and_are_seeded() {
        let targets: Vec<Option<String>> = (0..200).map(|i| Some(format!("id-{i}"))).collect();
        let batch = Batch {
            key: 1,
            first: 200,
            len: 200,
        };
        let items = batch_items(5, &batch, &targets);
        assert_eq!(items.len(), 200);
        let linked: Vec<&Map<String, Value>> = items
            .iter()
            .filter(|i| i.contains_key("linkedTo"))
            .collect();
        assert!((15..50).contains(&linked.len()), "{} linked", linked.len());
        for item in &linked {
            for id in item["linkedTo"].as_array().unwrap() {
                assert!(id.as_str().unwrap().starts_with("id-"));
            }
        }
        assert_eq!(items, batch_items(5, &batch, &targets));
        // The first batch has nothing to link to yet.
        let first = Batch {
            key: 1,
            first: 0,
            len: 200,
        };
        assert!(
            batch_items(5, &first, &[])
                .iter()
                .all(|i| !i.contains_key("linkedTo"))
        );
    }
}
