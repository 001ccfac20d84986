//! memtomem corpus v2: 192 English/Korean heading chunks and 100 queries.
//!
//! Protocol (`docs/BENCHMARKS.md` has the prose version):
//! 1. every chunk becomes one memory: content = heading + newline + text,
//!    topic = the chunk's topic, type `fact`, or `episode` above the
//!    300-character content limit; in one tenant (default) or one tenant per
//!    language;
//! 2. after every fragment has its embedding, each query is sent once as
//!    `recall {text, limit: 10}`, sequentially, from one client;
//! 3. relevance is memtomem's portfolio rule
//!    (`tools/retrieval-eval/calibrate_portfolio.py: build_relevance`): only
//!    chunks in the query's language count; a chunk whose primary tag is a
//!    target has grade 1.0, else one whose secondary tag is a target 0.5;
//!    Recall@10 and MRR@10 use grade-1.0 chunks, nDCG@10 the grades.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use serde::Serialize;
use serde_json::json;

use crate::data::{Chunk, Corpus, Query};
use crate::harness::{Bench, Environment, Recalled, Rejection, Tenant};
use crate::metrics::{self, LatencySummary};
use crate::report::{self, IngestCounter, IngestStats, RunSettings};

/// The cut-off of every metric.
pub const K: usize = 10;
/// Deepest rank inspected when locating missed chunks (`MNEME_RECALL_MAX_LIMIT`).
const DEEP_LIMIT: u32 = 50;
/// Default `MNEME_MAX_CONTENT_CHARS`; longer chunks are stored as episodes.
const FACT_LIMIT_CHARS: usize = 300;
/// Default `MNEME_MAX_EPISODE_CHARS`.
const EPISODE_LIMIT_CHARS: usize = 1000;
/// Sent once per tenant before measuring, so the first measured call does
/// not pay for connection set-up.
const WARM_UP_QUERY: &str = "warm-up query before measuring";

/// How to run the benchmark.
#[derive(Debug, Clone)]
pub struct Options {
    pub embedder: String,
    /// Extra `MNEME_*` settings for the stack.
    pub settings: Vec<(String, String)>,
    /// `tokenBudget` of each recall: large by default so that the budget
    /// cannot cut a top 10 short (see `docs/BENCHMARKS.md`).
    pub token_budget: u32,
    /// One tenant per language instead of one for the whole corpus, the
    /// layout of memtomem's per-language tracks.
    pub tenant_per_language: bool,
    /// Generated memories stored in each tenant before the corpus
    /// ([`Tenant::store_haystack`]); never relevant to a query.
    pub haystack: usize,
    pub embed_timeout: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            embedder: "e5".into(),
            settings: Vec::new(),
            token_budget: 100_000,
            tenant_per_language: false,
            haystack: 0,
            embed_timeout: Duration::from_secs(600),
        }
    }
}

/// Scores averaged over a group of queries.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Scores {
    pub queries: usize,
    #[serde(rename = "recall@10")]
    pub recall: f64,
    #[serde(rename = "mrr@10")]
    pub mrr: f64,
    #[serde(rename = "ndcg@10")]
    pub ndcg: f64,
}

impl Scores {
    fn of<'a>(results: impl Iterator<Item = &'a QueryResult>) -> Self {
        let results: Vec<&QueryResult> = results.collect();
        let column = |f: fn(&QueryResult) -> f64| {
            metrics::mean(&results.iter().map(|r| f(r)).collect::<Vec<_>>())
        };
        Self {
            queries: results.len(),
            recall: column(|r| r.recall),
            mrr: column(|r| r.mrr),
            ndcg: column(|r| r.ndcg),
        }
    }
}

/// One measured query.
#[derive(Debug, Clone, Serialize)]
pub struct QueryResult {
    pub id: String,
    pub lang: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub text: String,
    pub targets: Vec<String>,
    /// Chunks with grade 1.0.
    pub relevant: Vec<String>,
    #[serde(rename = "recall@10")]
    pub recall: f64,
    #[serde(rename = "mrr@10")]
    pub mrr: f64,
    #[serde(rename = "ndcg@10")]
    pub ndcg: f64,
    pub latency_ms: f64,
    pub truncated_by_budget: bool,
    /// Returned chunk ids, best first.
    pub retrieved: Vec<String>,
    /// mneme's ranking scores of the returned memories.
    pub scores: Vec<f64>,
    /// The repeated query's ranking, when it differed from the first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retrieved_on_repeat: Option<Vec<String>>,
    /// Returned chunks in another language than the query's.
    pub other_language_in_top10: usize,
}

/// Where one relevant chunk that the top 10 missed ended up.
#[derive(Debug, Clone, Serialize)]
pub struct MissingChunk {
    pub chunk: String,
    pub primary: Vec<String>,
    pub secondary: Vec<String>,
    /// Rank in a `limit: 50` recall of the same query; `None` when absent.
    pub rank: Option<usize>,
    #[serde(rename = "matchedBy")]
    pub matched_by: Vec<String>,
    pub similarity: Option<f64>,
}

/// One returned memory, with the tags of its chunk.
#[derive(Debug, Clone, Serialize)]
pub struct Hit {
    pub rank: usize,
    pub chunk: String,
    pub lang: String,
    pub genre: String,
    pub primary: Vec<String>,
    pub secondary: Vec<String>,
    /// 1.0 primary, 0.5 secondary, 0 not relevant.
    pub grade: f64,
    #[serde(rename = "type")]
    pub kind: String,
    pub score: f64,
    pub similarity: Option<f64>,
    #[serde(rename = "matchedBy")]
    pub matched_by: Vec<String>,
}

/// A query whose Recall@10 is below 1, for failure analysis.
#[derive(Debug, Clone, Serialize)]
pub struct Miss {
    pub id: String,
    pub lang: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub genre: Option<String>,
    pub text: String,
    pub targets: Vec<String>,
    #[serde(rename = "recall@10")]
    pub recall: f64,
    #[serde(rename = "mrr@10")]
    pub mrr: f64,
    pub top10: Vec<Hit>,
    pub missing: Vec<MissingChunk>,
}

/// Missed relevant chunks by where a deeper recall put them.
#[derive(Debug, Clone, Default, Serialize)]
pub struct MissPositions {
    pub missing_chunks: usize,
    /// Ranked within the top 10 when asked again: the ranking is unstable.
    pub top_10_on_repeat: usize,
    pub ranks_11_to_30: usize,
    pub ranks_31_to_50: usize,
    pub absent_from_top_50: usize,
}

/// The whole result.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub benchmark: &'static str,
    pub environment: Environment,
    pub settings: RunSettings,
    pub chunks: usize,
    /// Generated memories stored in each tenant besides the corpus.
    pub haystack: usize,
    pub episodes: usize,
    pub longest_content_chars: usize,
    pub ingest: IngestStats,
    /// First pass: every query embedded by the model.
    pub recall_latency: LatencySummary,
    /// Second pass over the same queries, embeddings from the Redis cache.
    pub recall_latency_cached_embedding: LatencySummary,
    /// Queries whose top 10 differed between the two passes.
    pub rankings_changed_on_repeat: usize,
    pub overall: Scores,
    pub by_language: BTreeMap<String, Scores>,
    pub by_type: BTreeMap<String, Scores>,
    /// Keyed `lang|type`, as memtomem keys its aggregates.
    pub by_language_and_type: BTreeMap<String, Scores>,
    /// Per language: where the missed relevant chunks ranked.
    pub miss_positions: BTreeMap<String, MissPositions>,
    /// Per language: mean number of other-language chunks in a top 10.
    pub other_language_in_top10: BTreeMap<String, f64>,
    pub per_query: Vec<QueryResult>,
    #[serde(skip)]
    pub misses: Vec<Miss>,
}

/// Relevance judgements of one query.
struct Judgement {
    primary: HashSet<String>,
    graded: HashMap<String, f64>,
}

fn judge(query: &Query, chunks: &[Chunk]) -> Judgement {
    let targets: HashSet<&str> = query.targets.iter().map(String::as_str).collect();
    let mut primary = HashSet::new();
    let mut graded = HashMap::new();
    for chunk in chunks.iter().filter(|c| c.lang == query.lang) {
        if chunk.primary.iter().any(|t| targets.contains(t.as_str())) {
            primary.insert(chunk.id.clone());
            graded.insert(chunk.id.clone(), 1.0);
        } else if chunk.secondary.iter().any(|t| targets.contains(t.as_str())) {
            graded.insert(chunk.id.clone(), 0.5);
        }
    }
    Judgement { primary, graded }
}

/// The `MNEME_MAX_EPISODE_CHARS` needed when a chunk is longer than the
/// default episode limit (`None` for corpus v2, whose longest is 499).
pub fn episode_limit_needed(chunks: &[Chunk]) -> Option<usize> {
    let longest = chunks.iter().map(|c| c.content().chars().count()).max()?;
    (longest > EPISODE_LIMIT_CHARS).then_some(longest)
}

/// The type a chunk is stored as: `fact` up to the fact limit, else `episode`.
pub(crate) fn memory_type(content: &str) -> &'static str {
    if content.chars().count() > FACT_LIMIT_CHARS {
        "episode"
    } else {
        "fact"
    }
}

/// Runs the whole benchmark on `corpus` (the full corpus, or a subset in
/// tests) against a fresh stack.
pub async fn run(corpus: &Corpus, options: &Options) -> anyhow::Result<Report> {
    let mut seen = HashSet::new();
    for chunk in &corpus.chunks {
        if !seen.insert(chunk.id.as_str()) {
            bail!("chunk id {} appears twice", chunk.id);
        }
    }
    let mut settings = options.settings.clone();
    if let Some(longest) = episode_limit_needed(&corpus.chunks)
        && !settings.iter().any(|(k, _)| k == "MNEME_MAX_EPISODE_CHARS")
    {
        eprintln!("a chunk has {longest} characters: raising MNEME_MAX_EPISODE_CHARS to {longest}");
        settings.push(("MNEME_MAX_EPISODE_CHARS".into(), longest.to_string()));
    }

    let environment = Environment::capture();
    let bench = Bench::start(&options.embedder, &settings).await?;
    let result = measure(&bench, corpus, options, environment).await;
    bench.shutdown().await.context("stopping the stack")?;
    result
}

async fn measure(
    bench: &Bench,
    corpus: &Corpus,
    options: &Options,
    environment: Environment,
) -> anyhow::Result<Report> {
    let languages: Vec<String> = {
        let mut langs: Vec<String> = corpus.chunks.iter().map(|c| c.lang.clone()).collect();
        langs.sort();
        langs.dedup();
        langs
    };
    // Tenant per language, or every language mapped to the one tenant.
    let mut tenants: BTreeMap<String, Tenant> = BTreeMap::new();
    let layout;
    if options.tenant_per_language {
        for lang in &languages {
            tenants.insert(
                lang.clone(),
                bench.tenant(&format!("memtomem-{lang}")).await?,
            );
        }
        layout = "one tenant per language".to_owned();
    } else {
        tenants.insert(String::new(), bench.tenant("memtomem").await?);
        layout = "one tenant for the whole corpus".to_owned();
    }
    let tenant_for = |lang: &str| -> anyhow::Result<&Tenant> {
        let key = if options.tenant_per_language {
            lang
        } else {
            ""
        };
        tenants
            .get(key)
            .with_context(|| format!("no tenant holds language {lang:?}"))
    };

    // The haystack first, so the corpus arrives last, as the newest
    // memories of a tenant that already holds many.
    // Its embeddings are waited for, so that the corpus's ingest figures
    // do not include the haystack's backlog.
    let mut haystack = 0;
    if options.haystack > 0 {
        for tenant in tenants.values() {
            haystack = tenant.store_haystack(options.haystack).await?;
        }
        let ids: Vec<_> = tenants.values().map(|t| t.id).collect();
        bench
            .wait_for_embeddings(&ids, options.embed_timeout)
            .await?;
    }

    // Ingest: sequential, one client, in corpus order.
    let mut fragment_chunks: HashMap<String, Vec<String>> = HashMap::new();
    let mut counter = IngestCounter::default();
    let mut episodes = 0;
    let mut longest = 0;
    let started = Instant::now();
    for (index, chunk) in corpus.chunks.iter().enumerate() {
        let content = chunk.content();
        longest = longest.max(content.chars().count());
        let kind = memory_type(&content);
        if kind == "episode" {
            episodes += 1;
        }
        let tenant = tenant_for(&chunk.lang)?;
        let call = Instant::now();
        let outcome = tenant
            .remember(json!({"content": content, "topic": chunk.topic, "type": kind}))
            .await
            .with_context(|| format!("remembering chunk {}", chunk.id))?;
        counter
            .latencies_ms
            .push(call.elapsed().as_secs_f64() * 1000.0);
        match outcome {
            Ok(remembered) => {
                counter.redactions += u64::from(remembered.redactions);
                if remembered.outcome == "created" {
                    counter.created += 1;
                } else {
                    counter.duplicates += 1;
                }
                fragment_chunks
                    .entry(remembered.id)
                    .or_default()
                    .push(chunk.id.clone());
            }
            Err(error) => counter.rejected.push(Rejection {
                item: chunk.id.clone(),
                error,
            }),
        }
        if (index + 1) % 50 == 0 {
            eprintln!("remembered {}/{}", index + 1, corpus.chunks.len());
        }
    }
    let ingest = started.elapsed();
    let tenant_ids: Vec<_> = tenants.values().map(|t| t.id).collect();
    bench
        .wait_for_embeddings(&tenant_ids, options.embed_timeout)
        .await?;
    let ingest = counter.finish(ingest, started.elapsed());
    if options.haystack > 0 {
        // The planner must know the tenant holds thousands of memories, as
        // autovacuum would tell it (this machine runs without it).
        bench.analyze().await?;
    }

    let mut settings = RunSettings::new(bench, K as u32, options.token_budget, layout);
    if let Some(tenant) = tenant_ids.first()
        && let Some((model, dimension)) = bench.embedding_model(*tenant).await?
    {
        settings.embedding_model = Some(model);
        settings.embedding_dimension = Some(dimension);
    }

    for tenant in tenants.values() {
        tenant
            .recall(json!({"text": WARM_UP_QUERY, "limit": K}))
            .await?;
    }

    let chunks_by_id: HashMap<&str, &Chunk> =
        corpus.chunks.iter().map(|c| (c.id.as_str(), c)).collect();
    // A haystack memory keeps its rank under an id of its own that no
    // query counts as relevant.
    let chunk_ids_of = |recalled: &Recalled| -> Vec<String> {
        recalled
            .fragments
            .iter()
            .flat_map(|f| {
                fragment_chunks
                    .get(&f.id)
                    .cloned()
                    .unwrap_or_else(|| vec![haystack_id(&f.id)])
            })
            .collect()
    };

    // Measured queries: sequential, one client, each once.
    let mut results = Vec::with_capacity(corpus.queries.len());
    let mut latencies = Vec::with_capacity(corpus.queries.len());
    let mut recalled_top = Vec::with_capacity(corpus.queries.len());
    for query in &corpus.queries {
        let tenant = tenant_for(&query.lang)?;
        let (recalled, elapsed) = tenant
            .recall(json!({"text": query.text, "limit": K, "tokenBudget": options.token_budget}))
            .await
            .with_context(|| format!("query {}", query.id))?;
        let latency_ms = elapsed.as_secs_f64() * 1000.0;
        latencies.push(latency_ms);
        let retrieved = chunk_ids_of(&recalled);
        let judgement = judge(query, &corpus.chunks);
        let mut relevant: Vec<String> = judgement.primary.iter().cloned().collect();
        relevant.sort();
        let other_language = retrieved
            .iter()
            .take(K)
            .filter(|id| {
                chunks_by_id
                    .get(id.as_str())
                    .is_some_and(|c| c.lang != query.lang)
            })
            .count();
        results.push(QueryResult {
            id: query.id.clone(),
            lang: query.lang.clone(),
            kind: query.kind.clone(),
            text: query.text.clone(),
            targets: query.targets.clone(),
            relevant,
            recall: metrics::recall_at_k(&retrieved, &judgement.primary, K),
            mrr: metrics::reciprocal_rank_at_k(&retrieved, &judgement.primary, K),
            ndcg: metrics::ndcg_at_k(&retrieved, &judgement.graded, K),
            latency_ms,
            truncated_by_budget: recalled.truncated_by_budget,
            retrieved,
            scores: recalled.fragments.iter().map(|f| f.score).collect(),
            retrieved_on_repeat: None,
            other_language_in_top10: other_language,
        });
        recalled_top.push(recalled);
    }

    // The same queries again: their embeddings now come from the Redis
    // cache, so this pass shows what recall costs without the model, and
    // whether rankings are stable.
    let mut cached_latencies = Vec::with_capacity(corpus.queries.len());
    let mut rankings_changed_on_repeat = 0;
    for (query, result) in corpus.queries.iter().zip(results.iter_mut()) {
        let tenant = tenant_for(&query.lang)?;
        let (recalled, elapsed) = tenant
            .recall(json!({"text": query.text, "limit": K, "tokenBudget": options.token_budget}))
            .await
            .with_context(|| format!("query {} (repeat)", query.id))?;
        cached_latencies.push(elapsed.as_secs_f64() * 1000.0);
        let again = chunk_ids_of(&recalled);
        if again != result.retrieved {
            rankings_changed_on_repeat += 1;
            result.retrieved_on_repeat = Some(again);
        }
    }

    // Failure analysis, after (and outside) the timed queries.
    let mut misses = Vec::new();
    let mut miss_positions: BTreeMap<String, MissPositions> = BTreeMap::new();
    for ((query, result), top) in corpus.queries.iter().zip(&results).zip(&recalled_top) {
        if result.recall >= 1.0 {
            continue;
        }
        let miss = analyse_miss(
            tenant_for(&query.lang)?,
            query,
            result,
            top,
            &judge(query, &corpus.chunks),
            &Lookup {
                fragment_chunks: &fragment_chunks,
                chunks_by_id: &chunks_by_id,
            },
            options.token_budget,
        )
        .await?;
        miss_positions
            .entry(query.lang.clone())
            .or_default()
            .count(&miss.missing);
        misses.push(miss);
    }

    let group = |key: fn(&QueryResult) -> String| {
        let mut groups: BTreeMap<String, Scores> = BTreeMap::new();
        let keys: HashSet<String> = results.iter().map(key).collect();
        for k in keys {
            groups.insert(
                k.clone(),
                Scores::of(results.iter().filter(|r| key(r) == k)),
            );
        }
        groups
    };
    let other_language_in_top10 = languages
        .iter()
        .map(|lang| {
            let counts: Vec<f64> = results
                .iter()
                .filter(|r| &r.lang == lang)
                .map(|r| r.other_language_in_top10 as f64)
                .collect();
            (lang.clone(), metrics::mean(&counts))
        })
        .collect();

    for tenant in tenants.into_values() {
        tenant.close().await;
    }
    Ok(Report {
        benchmark: "memtomem-corpus-v2",
        environment,
        settings,
        chunks: corpus.chunks.len(),
        haystack,
        episodes,
        longest_content_chars: longest,
        ingest,
        recall_latency: LatencySummary::of(&latencies),
        recall_latency_cached_embedding: LatencySummary::of(&cached_latencies),
        rankings_changed_on_repeat,
        overall: Scores::of(results.iter()),
        by_language: group(|r| r.lang.clone()),
        by_type: group(|r| r.kind.clone()),
        by_language_and_type: group(|r| format!("{}|{}", r.lang, r.kind)),
        miss_positions,
        other_language_in_top10,
        per_query: results,
        misses,
    })
}

/// The id under which a returned haystack memory is listed.
pub fn haystack_id(fragment_id: &str) -> String {
    format!("{HAYSTACK_PREFIX}{fragment_id}")
}

/// Prefix of [`haystack_id`].
pub const HAYSTACK_PREFIX: &str = "haystack:";

/// Maps returned fragments back to corpus chunks.
struct Lookup<'a> {
    fragment_chunks: &'a HashMap<String, Vec<String>>,
    chunks_by_id: &'a HashMap<&'a str, &'a Chunk>,
}

impl Lookup<'_> {
    fn chunk_of(&self, fragment_id: &str) -> Option<&Chunk> {
        let id = self.fragment_chunks.get(fragment_id)?.first()?;
        self.chunks_by_id.get(id.as_str()).copied()
    }
}

impl MissPositions {
    fn count(&mut self, missing: &[MissingChunk]) {
        for chunk in missing {
            self.missing_chunks += 1;
            match chunk.rank {
                Some(rank) if rank <= K => self.top_10_on_repeat += 1,
                Some(rank) if rank <= 30 => self.ranks_11_to_30 += 1,
                Some(_) => self.ranks_31_to_50 += 1,
                None => self.absent_from_top_50 += 1,
            }
        }
    }
}

/// Where the relevant chunks that `top` missed rank in a deeper recall of
/// the same query, and what `top` held instead.
async fn analyse_miss(
    tenant: &Tenant,
    query: &Query,
    result: &QueryResult,
    top: &Recalled,
    judgement: &Judgement,
    lookup: &Lookup<'_>,
    token_budget: u32,
) -> anyhow::Result<Miss> {
    let (deep, _) = tenant
        .recall(json!({"text": query.text, "limit": DEEP_LIMIT, "tokenBudget": token_budget}))
        .await
        .with_context(|| format!("query {} (limit {DEEP_LIMIT})", query.id))?;
    let found: HashSet<&String> = result.retrieved.iter().take(K).collect();
    let mut wanted: Vec<&String> = judgement
        .primary
        .iter()
        .filter(|id| !found.contains(id))
        .collect();
    wanted.sort();
    let mut missing = Vec::with_capacity(wanted.len());
    for chunk_id in wanted {
        let chunk = lookup
            .chunks_by_id
            .get(chunk_id.as_str())
            .context("relevant chunks come from the corpus")?;
        let position = deep.fragments.iter().position(|f| {
            lookup
                .fragment_chunks
                .get(&f.id)
                .is_some_and(|ids| ids.contains(chunk_id))
        });
        let fragment = position.map(|i| &deep.fragments[i]);
        missing.push(MissingChunk {
            chunk: chunk_id.clone(),
            primary: chunk.primary.clone(),
            secondary: chunk.secondary.clone(),
            rank: position.map(|i| i + 1),
            matched_by: fragment.map(|f| f.matched_by.clone()).unwrap_or_default(),
            similarity: fragment.and_then(|f| f.similarity),
        });
    }
    let top10 = top
        .fragments
        .iter()
        .enumerate()
        .map(|(index, fragment)| {
            let chunk = lookup.chunk_of(&fragment.id);
            let chunk_id = chunk.map_or_else(|| haystack_id(&fragment.id), |c| c.id.clone());
            Hit {
                rank: index + 1,
                lang: chunk.map(|c| c.lang.clone()).unwrap_or_default(),
                genre: chunk.map(|c| c.genre.clone()).unwrap_or_default(),
                primary: chunk.map(|c| c.primary.clone()).unwrap_or_default(),
                secondary: chunk.map(|c| c.secondary.clone()).unwrap_or_default(),
                grade: judgement.graded.get(&chunk_id).copied().unwrap_or(0.0),
                chunk: chunk_id,
                kind: fragment.kind.clone(),
                score: fragment.score,
                similarity: fragment.similarity,
                matched_by: fragment.matched_by.clone(),
            }
        })
        .collect();
    Ok(Miss {
        id: query.id.clone(),
        lang: query.lang.clone(),
        kind: query.kind.clone(),
        genre: query.genre.clone(),
        text: query.text.clone(),
        targets: query.targets.clone(),
        recall: result.recall,
        mrr: result.mrr,
        top10,
        missing,
    })
}

/// Query types in the order memtomem lists them.
const TYPE_ORDER: &[&str] = &[
    "direct",
    "paraphrase",
    "underspecified",
    "multi_topic",
    "negation",
    "genre_primary",
];

fn type_rank(kind: &str) -> usize {
    TYPE_ORDER
        .iter()
        .position(|t| *t == kind)
        .unwrap_or(TYPE_ORDER.len())
}

/// The human-readable summary.
pub fn summary(report: &Report) -> String {
    let mut out = String::new();
    let model = match (
        &report.settings.embedding_model,
        report.settings.embedding_dimension,
    ) {
        (Some(model), Some(dim)) => format!("{model}, {dim} dimensions"),
        _ => "no vectors".to_owned(),
    };
    out.push_str(&format!(
        "memtomem corpus v2: {} chunks ({} episodes), {} queries; embedder {} ({model}); {}\n",
        report.chunks,
        report.episodes,
        report.overall.queries,
        report.settings.embedder,
        report.settings.tenants,
    ));
    if report.haystack > 0 {
        out.push_str(&format!(
            "among {} generated memories in each tenant\n",
            report.haystack
        ));
    }
    out.push('\n');
    let row = |label: &str, s: &Scores| {
        format!(
            "{label:<24}{:>5}{:>11.3}{:>9.3}{:>10.3}\n",
            s.queries, s.recall, s.mrr, s.ndcg
        )
    };
    out.push_str(&format!(
        "{:<24}{:>5}{:>11}{:>9}{:>10}\n",
        "", "n", "Recall@10", "MRR@10", "nDCG@10"
    ));
    for (lang, scores) in &report.by_language {
        out.push_str(&row(lang, scores));
        let mut types: Vec<(&str, &Scores)> = report
            .by_language_and_type
            .iter()
            .filter_map(|(key, scores)| {
                let (l, kind) = key.split_once('|')?;
                (l == lang).then_some((kind, scores))
            })
            .collect();
        types.sort_by_key(|(kind, _)| type_rank(kind));
        for (kind, scores) in types {
            out.push_str(&row(&format!("  {kind}"), scores));
        }
    }
    out.push_str(&row("all", &report.overall));
    out.push_str("by type, both languages\n");
    let mut types: Vec<(&str, &Scores)> = report
        .by_type
        .iter()
        .map(|(kind, scores)| (kind.as_str(), scores))
        .collect();
    types.sort_by_key(|(kind, _)| type_rank(kind));
    for (kind, scores) in types {
        out.push_str(&row(&format!("  {kind}"), scores));
    }
    out.push('\n');
    out.push_str(&report::ingest_line(&report.ingest));
    out.push('\n');
    out.push_str(&report::latency_line("recall", &report.recall_latency));
    out.push('\n');
    out.push_str(&report::latency_line(
        "recall again (query embedding cached)",
        &report.recall_latency_cached_embedding,
    ));
    out.push_str(&format!(
        "; {} rankings changed\n",
        report.rankings_changed_on_repeat
    ));
    for (lang, positions) in &report.miss_positions {
        out.push_str(&format!(
            "{lang} misses: {} relevant chunks outside the top 10: {} in it when asked again, \
             {} at ranks 11-30, {} at 31-50, {} not in the top 50\n",
            positions.missing_chunks,
            positions.top_10_on_repeat,
            positions.ranks_11_to_30,
            positions.ranks_31_to_50,
            positions.absent_from_top_50
        ));
    }
    let truncated = report
        .per_query
        .iter()
        .filter(|r| r.truncated_by_budget)
        .count();
    if truncated > 0 {
        out.push_str(&format!(
            "{truncated} queries were cut by the token budget ({})\n",
            report.settings.token_budget
        ));
    }
    out
}
