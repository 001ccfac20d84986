//! Active surfacing on the memtomem corpus: coverage and precision of what
//! is surfaced at the default threshold, by language and relevance bucket,
//! and the latency surfacing adds to a call.
//!
//! Protocol (`docs/BENCHMARKS.md` has the prose version):
//! 1. the corpus is stored as in [`crate::memtomem`] (one tenant);
//! 2. each query is the `_context_query` of a tool call
//!    (`POST /v1/surface {server: "bench", tool: "search"}`), with an agent
//!    id of its own so no query's dedup hides another's memories;
//! 3. a surfaced memory is relevant when its chunk is in the query's
//!    language and one of its primary or secondary tags is a target
//!    (memtomem's portfolio rule, grades 1.0 and 0.5);
//! 4. the same queries are sent again under new agent ids: the query
//!    embeddings are then cached, and the round trip of `/v1/surface` is the
//!    latency surfacing adds to a call.
//!
//! With `--candidates FILE`, every surfaced memory's evidence (similarity,
//! lexical share, relevance, judgement) is written out; run with
//! `--setting MNEME_SURFACING_MIN_SCORE=0 --setting
//! MNEME_SURFACING_MAX_RESULTS=10` it is the data the calibration of
//! `mneme-recall`'s `surface` module is fitted on.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde::Serialize;
use serde_json::{Value, json};

use crate::data::{Chunk, Corpus, Query};
use crate::harness::{Bench, Environment, Tenant};
use crate::metrics::LatencySummary;

/// Settings every run uses: the benchmark sends 200 surfacings in a few
/// seconds from one tenant, which the default per-tenant rate (15 a
/// minute) would rightly refuse.
const PROTOCOL_SETTINGS: &[(&str, &str)] = &[("MNEME_SURFACING_RATE_PER_MINUTE", "1000000")];

/// How to run.
#[derive(Debug, Clone)]
pub struct Options {
    pub embedder: String,
    pub settings: Vec<(String, String)>,
    pub embed_timeout: Duration,
}

/// Coverage and precision of a group of queries.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Quality {
    pub queries: usize,
    /// Share of queries with at least one surfaced memory.
    pub coverage: f64,
    pub surfaced: usize,
    /// Relevant surfaced memories / surfaced memories.
    pub precision: Option<f64>,
    /// Per bucket: (surfaced, precision).
    pub buckets: BTreeMap<String, BucketQuality>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct BucketQuality {
    pub surfaced: usize,
    pub precision: Option<f64>,
}

/// One surfaced memory, judged.
#[derive(Debug, Clone, Serialize)]
pub struct Judged {
    pub query: String,
    pub lang: String,
    pub chunk: String,
    pub grade: f64,
    pub relevance: f64,
    pub bucket: String,
    pub similarity: Option<f64>,
    pub lexical: f64,
    pub similarity_margin: f64,
    pub lexical_margin: f64,
}

/// One query's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct QueryOutcome {
    pub id: String,
    pub lang: String,
    #[serde(rename = "type")]
    pub kind: String,
    /// `surfaced`, or the reason nothing was.
    pub outcome: String,
    pub memories: Vec<Judged>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub benchmark: &'static str,
    pub environment: Environment,
    pub embedder: String,
    pub settings: Vec<(String, String)>,
    pub min_score: Option<f64>,
    pub overall: Quality,
    pub by_language: BTreeMap<String, Quality>,
    /// `/v1/surface` round trips, query embeddings computed by the model.
    pub latency_cold: LatencySummary,
    /// The same with the query embeddings cached: surfacing's added latency.
    pub latency_warm: LatencySummary,
    pub per_query: Vec<QueryOutcome>,
}

fn grade(query: &Query, chunk: &Chunk) -> f64 {
    if chunk.lang != query.lang {
        return 0.0;
    }
    let targets: HashSet<&str> = query.targets.iter().map(String::as_str).collect();
    if chunk.primary.iter().any(|t| targets.contains(t.as_str())) {
        1.0
    } else if chunk.secondary.iter().any(|t| targets.contains(t.as_str())) {
        0.5
    } else {
        0.0
    }
}

fn quality<'a>(outcomes: impl Iterator<Item = &'a QueryOutcome>) -> Quality {
    let outcomes: Vec<&QueryOutcome> = outcomes.collect();
    let memories: Vec<&Judged> = outcomes.iter().flat_map(|o| &o.memories).collect();
    let precision = |items: &[&Judged]| {
        (!items.is_empty())
            .then(|| items.iter().filter(|m| m.grade > 0.0).count() as f64 / items.len() as f64)
    };
    let mut buckets = BTreeMap::new();
    for name in ["weak", "related", "strong"] {
        let items: Vec<&Judged> = memories
            .iter()
            .copied()
            .filter(|m| m.bucket == name)
            .collect();
        buckets.insert(
            name.to_owned(),
            BucketQuality {
                surfaced: items.len(),
                precision: precision(&items),
            },
        );
    }
    Quality {
        queries: outcomes.len(),
        coverage: if outcomes.is_empty() {
            0.0
        } else {
            outcomes.iter().filter(|o| !o.memories.is_empty()).count() as f64
                / outcomes.len() as f64
        },
        surfaced: memories.len(),
        precision: precision(&memories),
        buckets,
    }
}

async fn surface(
    http: &reqwest::Client,
    url: &str,
    tenant: &Tenant,
    query: &str,
    agent: &str,
) -> anyhow::Result<(Value, Duration)> {
    let started = Instant::now();
    let response = http
        .post(url)
        .bearer_auth(&tenant.api_key)
        .json(&json!({"server": "bench", "tool": "search",
                      "arguments": {"_context_query": query}, "agentId": agent}))
        .send()
        .await
        .context("POST /v1/surface")?;
    let status = response.status();
    let answer: Value = response.json().await.context("the answer is not JSON")?;
    let elapsed = started.elapsed();
    anyhow::ensure!(
        status.is_success(),
        "/v1/surface answered {status}: {answer}"
    );
    Ok((answer, elapsed))
}

pub async fn run(corpus: &Corpus, options: &Options) -> anyhow::Result<Report> {
    let mut settings: Vec<(String, String)> = PROTOCOL_SETTINGS
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    settings.extend(options.settings.iter().cloned());
    let environment = Environment::capture();
    let bench = Bench::start(&options.embedder, &settings).await?;
    let result = measure(&bench, corpus, options, environment, settings).await;
    bench.shutdown().await.context("stopping the stack")?;
    result
}

async fn measure(
    bench: &Bench,
    corpus: &Corpus,
    options: &Options,
    environment: Environment,
    settings: Vec<(String, String)>,
) -> anyhow::Result<Report> {
    let tenant = bench.tenant("surfacing").await?;
    let mut chunk_of: HashMap<String, &Chunk> = HashMap::new();
    for (index, chunk) in corpus.chunks.iter().enumerate() {
        let content = chunk.content();
        let kind = crate::memtomem::memory_type(&content);
        let remembered = tenant
            .remember(json!({"content": content, "topic": chunk.topic, "type": kind}))
            .await?
            .map_err(|e| anyhow::anyhow!("chunk {} refused: {e}", chunk.id))?;
        chunk_of.insert(remembered.id, chunk);
        if (index + 1) % 50 == 0 {
            eprintln!("remembered {}/{}", index + 1, corpus.chunks.len());
        }
    }
    bench
        .wait_for_embeddings(&[tenant.id], options.embed_timeout)
        .await?;

    let http = reqwest::Client::new();
    let url = format!("http://{}/v1/surface", bench.stack.http_addr);
    surface(
        &http,
        &url,
        &tenant,
        "warm-up query before measuring",
        "warm-up",
    )
    .await?;
    let mut per_query = Vec::new();
    let mut cold = Vec::new();
    let mut min_score = None;
    for query in &corpus.queries {
        let (answer, elapsed) = surface(&http, &url, &tenant, &query.text, &query.id).await?;
        cold.push(elapsed.as_secs_f64() * 1000.0);
        min_score = min_score.or(answer["minScore"].as_f64());
        let memories = answer["memories"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .map(|m| {
                let id = m["id"].as_str().unwrap_or_default();
                let chunk = chunk_of
                    .get(id)
                    .with_context(|| format!("unknown memory {id}"))?;
                Ok(Judged {
                    query: query.id.clone(),
                    lang: query.lang.clone(),
                    chunk: chunk.id.clone(),
                    grade: grade(query, chunk),
                    relevance: m["relevance"].as_f64().unwrap_or_default(),
                    bucket: m["bucket"].as_str().unwrap_or_default().to_owned(),
                    similarity: m["similarity"].as_f64(),
                    lexical: m["lexical"].as_f64().unwrap_or_default(),
                    similarity_margin: m["similarityMargin"].as_f64().unwrap_or_default(),
                    lexical_margin: m["lexicalMargin"].as_f64().unwrap_or_default(),
                })
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        per_query.push(QueryOutcome {
            id: query.id.clone(),
            lang: query.lang.clone(),
            kind: query.kind.clone(),
            outcome: answer["skipped"].as_str().unwrap_or("surfaced").to_owned(),
            memories,
        });
    }
    let mut warm = Vec::new();
    for query in &corpus.queries {
        let agent = format!("{}-warm", query.id);
        let (_, elapsed) = surface(&http, &url, &tenant, &query.text, &agent).await?;
        warm.push(elapsed.as_secs_f64() * 1000.0);
    }
    tenant.close().await;

    let languages: Vec<String> = {
        let mut langs: Vec<String> = per_query.iter().map(|q| q.lang.clone()).collect();
        langs.sort();
        langs.dedup();
        langs
    };
    Ok(Report {
        benchmark: "surfacing (memtomem corpus v2)",
        environment,
        embedder: options.embedder.clone(),
        settings,
        min_score,
        overall: quality(per_query.iter()),
        by_language: languages
            .iter()
            .map(|lang| {
                (
                    lang.clone(),
                    quality(per_query.iter().filter(|q| &q.lang == lang)),
                )
            })
            .collect(),
        latency_cold: LatencySummary::of(&cold),
        latency_warm: LatencySummary::of(&warm),
        per_query,
    })
}

/// The report as a table for the terminal.
pub fn summary(report: &Report) -> String {
    let mut out = format!(
        "surfacing at min score {:?} ({})\n| group | queries | coverage | surfaced | precision | weak | related | strong |\n|---|---|---|---|---|---|---|---|\n",
        report.min_score, report.embedder
    );
    let fmt = |p: Option<f64>| p.map_or("–".to_owned(), |p| format!("{p:.3}"));
    let mut row = |name: &str, q: &Quality| {
        let bucket = |b: &str| {
            q.buckets.get(b).map_or("–".to_owned(), |b| {
                format!("{} @ {}", b.surfaced, fmt(b.precision))
            })
        };
        out.push_str(&format!(
            "| {name} | {} | {:.3} | {} | {} | {} | {} | {} |\n",
            q.queries,
            q.coverage,
            q.surfaced,
            fmt(q.precision),
            bucket("weak"),
            bucket("related"),
            bucket("strong")
        ));
    };
    for (lang, q) in &report.by_language {
        row(lang, q);
    }
    row("all", &report.overall);
    out.push_str(&format!(
        "latency p50/p95/p99 ms: cold {:.1}/{:.1}/{:.1}, warm (cached query embedding) {:.1}/{:.1}/{:.1}\n",
        report.latency_cold.p50_ms,
        report.latency_cold.p95_ms,
        report.latency_cold.p99_ms,
        report.latency_warm.p50_ms,
        report.latency_warm.p95_ms,
        report.latency_warm.p99_ms
    ));
    out
}

/// Every surfaced memory with its evidence, for calibration.
pub fn candidates(report: &Report) -> Vec<&Judged> {
    report.per_query.iter().flat_map(|q| &q.memories).collect()
}
