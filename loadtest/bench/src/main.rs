//! `mneme-bench`: the command line of the retrieval benchmarks (see the
//! library docs and `docs/BENCHMARKS.md`).
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::{Args, Parser, Subcommand};
use mneme_bench::data::{Corpus, Locomo};
use mneme_bench::harness::parse_setting;
use mneme_bench::report::write_json;
use mneme_bench::{locomo, memtomem, proxy, surfacing};
use mneme_config::{LogConfig, LogFormat};

/// Retrieval quality and latency of mneme, end to end over MCP.
///
/// Starts a whole stack in-process on a fresh database (needs the
/// environment from `source ~/.local/share/mneme/env`).
#[derive(Debug, Parser)]
#[command(name = "mneme-bench", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// memtomem corpus v2 (English + Korean): Recall@10, MRR@10, nDCG@10.
    Memtomem {
        #[command(flatten)]
        common: Common,
        /// Write every query with Recall@10 < 1, its targets and its top 10
        /// (chunk ids, tags, layers, similarity) to this JSON file.
        #[arg(long, value_name = "FILE")]
        misses: Option<PathBuf>,
        /// One tenant per language instead of one for the whole corpus.
        #[arg(long)]
        tenant_per_language: bool,
        /// Store this many generated memories of a software team in each
        /// tenant before the corpus (none is relevant to a query): recall
        /// in a tenant of realistic size.
        #[arg(long, value_name = "N", default_value_t = 0)]
        haystack: usize,
    },
    /// Active surfacing on the memtomem corpus: coverage and precision at
    /// the default threshold, by language and bucket; added latency.
    Surfacing {
        #[command(flatten)]
        common: Common,
        /// Write every surfaced memory's evidence and judgement (for the
        /// calibration of relevance) to this JSON file.
        #[arg(long, value_name = "FILE")]
        candidates: Option<PathBuf>,
    },
    /// What the MCP proxy adds to a call of the reference server's `echo`
    /// (needs `node` and MNEME_TEST_MCP_SERVERS from the local set-up).
    Proxy {
        /// Write the figures as JSON to this file.
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
        /// `MNEME_EMBEDDER` of the stack.
        #[arg(long, default_value = "e5")]
        embedder: String,
        /// Timed calls per path.
        #[arg(long, default_value_t = 500)]
        calls: usize,
        /// Untimed calls per path first.
        #[arg(long, default_value_t = 50)]
        warmup: usize,
        /// Memories stored before the surfacing path.
        #[arg(long, default_value_t = 200)]
        memories: usize,
        /// An extra `MNEME_*` setting for the stack, as KEY=VALUE (repeatable).
        #[arg(long = "setting", value_name = "KEY=VALUE", value_parser = parse_setting)]
        settings: Vec<(String, String)>,
    },
    /// LoCoMo conversations: recall_any@5, recall_all@5.
    Locomo {
        #[command(flatten)]
        common: Common,
        /// Only the first N conversations.
        #[arg(long, value_name = "N")]
        conversations: Option<usize>,
        /// Only the first N eligible questions of each conversation.
        #[arg(long, value_name = "N")]
        questions: Option<usize>,
    },
}

#[derive(Debug, Args)]
struct Common {
    /// Directory holding `memtomem-corpus-v2/` and `locomo/`.
    #[arg(
        long,
        value_name = "DIR",
        env = "MNEME_BENCH_DATA",
        default_value = "/work/shared/bench"
    )]
    data: PathBuf,
    /// Write the figures and settings as JSON to this file.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// `MNEME_EMBEDDER` of the stack.
    #[arg(long, default_value = "e5")]
    embedder: String,
    /// `tokenBudget` of each recall. The default is large so that only
    /// `limit` cuts the list; pass 2000 to measure mneme's default budget.
    #[arg(long, default_value_t = 100_000)]
    token_budget: u32,
    /// An extra `MNEME_*` setting for the stack, as KEY=VALUE (repeatable).
    /// Recorded in the JSON report.
    #[arg(long = "setting", value_name = "KEY=VALUE", value_parser = parse_setting)]
    settings: Vec<(String, String)>,
    /// Give up waiting for the embedding worker after this many seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 1800)]
    embed_timeout: u64,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    // The services log through tracing; only warnings matter during a run.
    let _telemetry = mneme_telemetry::init(
        &LogConfig {
            filter: std::env::var("MNEME_LOG").unwrap_or_else(|_| "warn".into()),
            format: LogFormat::Text,
            tracing: mneme_config::TracingConfig::off(),
        },
        "mneme-bench",
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    runtime.block_on(run(cli.command))
}

/// Fails before a long run rather than after it when an output file
/// cannot be created.
fn check_output(path: Option<&PathBuf>) -> anyhow::Result<()> {
    if let Some(path) = path {
        let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
        if let Some(parent) = parent
            && !parent.is_dir()
        {
            bail!(
                "cannot write {}: {} is not a directory",
                path.display(),
                parent.display()
            );
        }
    }
    Ok(())
}

async fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Memtomem {
            common,
            misses,
            tenant_per_language,
            haystack,
        } => {
            check_output(common.out.as_ref())?;
            check_output(misses.as_ref())?;
            let dir = common.data.join("memtomem-corpus-v2");
            let corpus = Corpus::load(&dir)
                .with_context(|| format!("loading the memtomem corpus from {}", dir.display()))?;
            if corpus.chunks.is_empty() || corpus.queries.is_empty() {
                bail!("{} holds no chunks or no queries", dir.display());
            }
            let options = memtomem::Options {
                embedder: common.embedder,
                settings: common.settings,
                token_budget: common.token_budget,
                tenant_per_language,
                haystack,
                embed_timeout: Duration::from_secs(common.embed_timeout),
            };
            let report = memtomem::run(&corpus, &options).await?;
            println!("{}", memtomem::summary(&report));
            if let Some(path) = &common.out {
                write_json(path, &report)?;
                eprintln!("wrote {}", path.display());
            }
            if let Some(path) = &misses {
                write_json(path, &report.misses)?;
                eprintln!("wrote {} ({} queries)", path.display(), report.misses.len());
            }
        }
        Command::Surfacing { common, candidates } => {
            check_output(common.out.as_ref())?;
            check_output(candidates.as_ref())?;
            let dir = common.data.join("memtomem-corpus-v2");
            let corpus = Corpus::load(&dir)
                .with_context(|| format!("loading the memtomem corpus from {}", dir.display()))?;
            let options = surfacing::Options {
                embedder: common.embedder,
                settings: common.settings,
                embed_timeout: Duration::from_secs(common.embed_timeout),
            };
            let report = surfacing::run(&corpus, &options).await?;
            println!("{}", surfacing::summary(&report));
            if let Some(path) = &common.out {
                write_json(path, &report)?;
                eprintln!("wrote {}", path.display());
            }
            if let Some(path) = &candidates {
                write_json(path, &surfacing::candidates(&report))?;
                eprintln!("wrote {}", path.display());
            }
        }
        Command::Proxy {
            out,
            embedder,
            calls,
            warmup,
            memories,
            settings,
        } => {
            check_output(out.as_ref())?;
            if calls == 0 {
                bail!("--calls must be at least 1");
            }
            let options = proxy::Options {
                embedder,
                settings,
                calls,
                warmup,
                memories,
            };
            let report = proxy::run(&options).await?;
            println!("{}", proxy::summary(&report));
            if let Some(path) = &out {
                write_json(path, &report)?;
                eprintln!("wrote {}", path.display());
            }
        }
        Command::Locomo {
            common,
            conversations,
            questions,
        } => {
            check_output(common.out.as_ref())?;
            let dir = common.data.join("locomo");
            let data = Locomo::load(&dir)
                .with_context(|| format!("loading LoCoMo from {}", dir.display()))?;
            if conversations == Some(0) || questions == Some(0) {
                bail!("--conversations and --questions must be at least 1");
            }
            let options = locomo::Options {
                embedder: common.embedder,
                settings: common.settings,
                conversations,
                questions,
                token_budget: common.token_budget,
                embed_timeout: Duration::from_secs(common.embed_timeout),
            };
            let report = locomo::run(&data, &options).await?;
            println!("{}", locomo::summary(&report));
            if let Some(path) = &common.out {
                write_json(path, &report)?;
                eprintln!("wrote {}", path.display());
            }
        }
    }
    Ok(())
}
