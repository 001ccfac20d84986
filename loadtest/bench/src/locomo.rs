//! LoCoMo (five long two-person conversations): does recall bring back the
//! dialogue turns that hold a question's answer?
//!
//! Protocol (`shared/bench/README.md`, `docs/BENCHMARKS.md`):
//! 1. each conversation goes into a tenant of its own; each turn becomes one
//!    memory, content `"Speaker: text"`, type `episode`, the session number
//!    and time in `contextSummary`;
//! 2. after every fragment has its embedding, each question of category 1–4
//!    with evidence is sent once as `recall {text: question, limit: 5}`;
//! 3. `recall_any@5` = 1 when any evidence turn is among the five,
//!    `recall_all@5` = 1 when all are.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde::Serialize;
use serde_json::json;

use crate::data::{Locomo, Question};
use crate::harness::{Bench, Environment, Rejection, Tenant};
use crate::metrics::{self, LatencySummary};
use crate::report::{self, IngestCounter, IngestStats, RunSettings};

/// Results per question.
pub const K: usize = 5;
/// Neutral topic for every turn: the topic is part of the full-text
/// document, so a topic word that questions use would bias the ranking.
const TOPIC: &str = "locomo";
const WARM_UP_QUERY: &str = "warm-up query before measuring";

/// How to run the benchmark.
#[derive(Debug, Clone)]
pub struct Options {
    pub embedder: String,
    pub settings: Vec<(String, String)>,
    /// Only the first N conversations (file order).
    pub conversations: Option<usize>,
    /// Only the first N eligible questions of each conversation.
    pub questions: Option<usize>,
    pub token_budget: u32,
    pub embed_timeout: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            embedder: "e5".into(),
            settings: Vec::new(),
            conversations: None,
            questions: None,
            token_budget: 100_000,
            embed_timeout: Duration::from_secs(1800),
        }
    }
}

/// recall_any / recall_all averaged over a group of questions.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Scores {
    pub questions: usize,
    #[serde(rename = "recall_any@5")]
    pub recall_any: f64,
    #[serde(rename = "recall_all@5")]
    pub recall_all: f64,
}

impl Scores {
    fn of<'a>(results: impl Iterator<Item = &'a QuestionResult>) -> Self {
        let results: Vec<&QuestionResult> = results.collect();
        let any: Vec<f64> = results.iter().map(|r| r.recall_any).collect();
        let all: Vec<f64> = results.iter().map(|r| r.recall_all).collect();
        Self {
            questions: results.len(),
            recall_any: metrics::mean(&any),
            recall_all: metrics::mean(&all),
        }
    }
}

/// One measured question.
#[derive(Debug, Clone, Serialize)]
pub struct QuestionResult {
    pub id: String,
    pub conversation: String,
    pub category: u8,
    pub question: String,
    pub evidence: Vec<String>,
    #[serde(rename = "recall_any@5")]
    pub recall_any: f64,
    #[serde(rename = "recall_all@5")]
    pub recall_all: f64,
    pub latency_ms: f64,
    /// Dialogue ids of the returned turns, best first.
    pub retrieved: Vec<String>,
}

/// Questions left out, and why.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Skipped {
    /// Category 5 (adversarial).
    pub adversarial: usize,
    /// No evidence listed.
    pub no_evidence: usize,
    /// Evidence listed, but no id names a turn of the conversation.
    pub unresolvable_evidence: usize,
    /// Evidence ids dropped from otherwise usable questions (e.g. `D`,
    /// `D:11:26`), as `question id: evidence id`.
    pub dropped_evidence_ids: Vec<String>,
    /// Left out by `--questions`.
    pub over_limit: usize,
}

/// The whole result.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub benchmark: &'static str,
    pub environment: Environment,
    pub settings: RunSettings,
    pub conversations: Vec<String>,
    pub turns: usize,
    pub ingest: IngestStats,
    /// First pass: every question embedded by the model.
    pub recall_latency: LatencySummary,
    /// Second pass over the same questions, embeddings from the Redis cache.
    pub recall_latency_cached_embedding: LatencySummary,
    /// Questions whose top 5 differed between the two passes.
    pub rankings_changed_on_repeat: usize,
    pub overall: Scores,
    /// By LoCoMo's raw category id (vendors name them inconsistently).
    pub by_category: BTreeMap<u8, Scores>,
    pub by_conversation: BTreeMap<String, Scores>,
    pub skipped: Skipped,
    pub per_question: Vec<QuestionResult>,
}

/// The evidence ids of `question` that name turns of its conversation.
/// One record lists two ids in one string (`"D8:6; D9:17"`), so entries are
/// split on `;`; anything still unknown is dropped and reported.
fn resolve_evidence(
    question: &Question,
    turn_ids: &HashSet<&str>,
    dropped: &mut Vec<String>,
) -> Vec<String> {
    let mut evidence = Vec::new();
    for id in question
        .evidence
        .iter()
        .flat_map(|e| e.split(';'))
        .map(str::trim)
    {
        if turn_ids.contains(id) {
            if !evidence.iter().any(|e| e == id) {
                evidence.push(id.to_owned());
            }
        } else {
            dropped.push(format!("{}: {id}", question.id));
        }
    }
    evidence
}

/// Runs the benchmark against a fresh stack.
pub async fn run(data: &Locomo, options: &Options) -> anyhow::Result<Report> {
    let environment = Environment::capture();
    let bench = Bench::start(&options.embedder, &options.settings).await?;
    let result = measure(&bench, data, options, environment).await;
    bench.shutdown().await.context("stopping the stack")?;
    result
}

async fn measure(
    bench: &Bench,
    data: &Locomo,
    options: &Options,
    environment: Environment,
) -> anyhow::Result<Report> {
    let mut conversations = data.conversations();
    if let Some(n) = options.conversations {
        conversations.truncate(n);
    }

    // Ingest every conversation first, so throughput and embedding time are
    // one figure each for the whole run.
    let mut tenants: BTreeMap<String, Tenant> = BTreeMap::new();
    let mut dialogue_of: HashMap<String, Vec<String>> = HashMap::new();
    let mut counter = IngestCounter::default();
    let mut ingest = Duration::ZERO;
    let started = Instant::now();
    let mut turns = 0;
    for conversation in &conversations {
        let tenant = bench.tenant(&format!("locomo-{conversation}")).await?;
        let begun = Instant::now();
        for turn in data
            .turns
            .iter()
            .filter(|t| &t.conversation == conversation)
        {
            turns += 1;
            let call = Instant::now();
            let outcome = tenant
                .remember(json!({
                    "content": turn.content(),
                    "topic": TOPIC,
                    "type": "episode",
                    "contextSummary": format!("session {}, {}", turn.session, turn.session_time),
                }))
                .await
                .with_context(|| format!("remembering {conversation}/{}", turn.dia_id))?;
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
                    dialogue_of
                        .entry(remembered.id)
                        .or_default()
                        .push(turn.dia_id.clone());
                }
                Err(error) => counter.rejected.push(Rejection {
                    item: format!("{conversation}/{}: {}", turn.dia_id, turn.content()),
                    error,
                }),
            }
        }
        ingest += begun.elapsed();
        eprintln!("conversation {conversation}: remembered, {turns} turns so far");
        tenants.insert(conversation.clone(), tenant);
    }
    let tenant_ids: Vec<_> = tenants.values().map(|t| t.id).collect();
    bench
        .wait_for_embeddings(&tenant_ids, options.embed_timeout)
        .await?;
    // Tenant creation between conversations is excluded from the ingest
    // time but not from the embedding clock, which runs from the start of
    // the first conversation.
    let ingest = counter.finish(ingest, started.elapsed());

    let mut settings = RunSettings::new(
        bench,
        K as u32,
        options.token_budget,
        "one tenant per conversation".to_owned(),
    );
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

    let mut skipped = Skipped::default();
    let mut results = Vec::new();
    let mut latencies = Vec::new();
    for (conversation, tenant) in &tenants {
        let turn_ids: HashSet<&str> = data
            .turns
            .iter()
            .filter(|t| &t.conversation == conversation)
            .map(|t| t.dia_id.as_str())
            .collect();
        let mut taken = 0;
        for question in data
            .questions
            .iter()
            .filter(|q| &q.conversation == conversation)
        {
            if !(1..=4).contains(&question.category) {
                skipped.adversarial += 1;
                continue;
            }
            if question.evidence.is_empty() {
                skipped.no_evidence += 1;
                continue;
            }
            let mut dropped = Vec::new();
            let evidence = resolve_evidence(question, &turn_ids, &mut dropped);
            if evidence.is_empty() {
                skipped.unresolvable_evidence += 1;
                continue;
            }
            if options.questions.is_some_and(|limit| taken >= limit) {
                skipped.over_limit += 1;
                continue;
            }
            skipped.dropped_evidence_ids.extend(dropped);
            taken += 1;

            let (recalled, elapsed) = tenant
                .recall(json!({
                    "text": question.question,
                    "limit": K,
                    "tokenBudget": options.token_budget,
                }))
                .await
                .with_context(|| format!("question {}", question.id))?;
            let latency_ms = elapsed.as_secs_f64() * 1000.0;
            latencies.push(latency_ms);
            let retrieved: Vec<String> = recalled
                .fragments
                .iter()
                .flat_map(|f| dialogue_of.get(&f.id).cloned().unwrap_or_default())
                .collect();
            // A fragment holding several identical turns stands for all of
            // them, so the five fragments may name more than five turns.
            let window = retrieved.len();
            let wanted: HashSet<String> = evidence.iter().cloned().collect();
            results.push(QuestionResult {
                id: question.id.clone(),
                conversation: conversation.clone(),
                category: question.category,
                question: question.question.clone(),
                recall_any: metrics::recall_any_at_k(&retrieved, &wanted, window),
                recall_all: metrics::recall_all_at_k(&retrieved, &wanted, window),
                evidence,
                latency_ms,
                retrieved,
            });
        }
    }

    // The same questions again, with cached query embeddings (see memtomem).
    let mut cached_latencies = Vec::with_capacity(results.len());
    let mut rankings_changed_on_repeat = 0;
    for result in &results {
        let tenant = tenants
            .get(&result.conversation)
            .context("every result's conversation has a tenant")?;
        let (recalled, elapsed) = tenant
            .recall(json!({
                "text": result.question,
                "limit": K,
                "tokenBudget": options.token_budget,
            }))
            .await
            .with_context(|| format!("question {} (repeat)", result.id))?;
        cached_latencies.push(elapsed.as_secs_f64() * 1000.0);
        let retrieved: Vec<String> = recalled
            .fragments
            .iter()
            .flat_map(|f| dialogue_of.get(&f.id).cloned().unwrap_or_default())
            .collect();
        if retrieved != result.retrieved {
            rankings_changed_on_repeat += 1;
        }
    }

    let mut by_category = BTreeMap::new();
    for category in results.iter().map(|r| r.category).collect::<HashSet<_>>() {
        by_category.insert(
            category,
            Scores::of(results.iter().filter(|r| r.category == category)),
        );
    }
    let by_conversation = conversations
        .iter()
        .map(|c| {
            (
                c.clone(),
                Scores::of(results.iter().filter(|r| &r.conversation == c)),
            )
        })
        .collect();

    for tenant in tenants.into_values() {
        tenant.close().await;
    }
    Ok(Report {
        benchmark: "locomo",
        environment,
        settings,
        conversations,
        turns,
        ingest,
        recall_latency: LatencySummary::of(&latencies),
        recall_latency_cached_embedding: LatencySummary::of(&cached_latencies),
        rankings_changed_on_repeat,
        overall: Scores::of(results.iter()),
        by_category,
        by_conversation,
        skipped,
        per_question: results,
    })
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
        "LoCoMo: conversations {} ({} turns), {} questions; embedder {} ({model})\n\n",
        report.conversations.join(", "),
        report.turns,
        report.overall.questions,
        report.settings.embedder,
    ));
    out.push_str(&format!(
        "{:<20}{:>6}{:>15}{:>15}\n",
        "", "n", "recall_any@5", "recall_all@5"
    ));
    let row = |label: &str, s: &Scores| {
        format!(
            "{label:<20}{:>6}{:>15.3}{:>15.3}\n",
            s.questions, s.recall_any, s.recall_all
        )
    };
    for (category, scores) in &report.by_category {
        out.push_str(&row(&format!("category {category}"), scores));
    }
    for (conversation, scores) in &report.by_conversation {
        out.push_str(&row(&format!("conversation {conversation}"), scores));
    }
    out.push_str(&row("all", &report.overall));
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
    let s = &report.skipped;
    out.push_str(&format!(
        "skipped questions: {} adversarial, {} without evidence, {} with unresolvable evidence, \
         {} over the limit; {} evidence ids dropped\n",
        s.adversarial,
        s.no_evidence,
        s.unresolvable_evidence,
        s.over_limit,
        s.dropped_evidence_ids.len()
    ));
    out
}
