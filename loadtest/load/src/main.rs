//! `mneme-loadtest`: the command line of the load generator (see the
//! library docs and `loadtest/README.md`).
#![forbid(unsafe_code)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, bail};
use clap::{Args, Parser, Subcommand};
use mneme_bench::harness::parse_setting;
use mneme_bench::report::write_json;
use mneme_loadtest::backfill::{self, BackfillOptions, backfill};
use mneme_loadtest::commands::{RunOptions, TargetChoice, run_load, seed_tenants};
use mneme_loadtest::db_time;
use mneme_loadtest::mcp::Lifecycle;
use mneme_loadtest::report::table;
use mneme_loadtest::run::{Load, Plan};
use mneme_loadtest::scenario::{Mix, Scenario, ScenarioOptions};
use mneme_loadtest::seed::{MAX_BATCH, SeedOptions};
use mneme_loadtest::self_hosted::SelfHostedOptions;
use mneme_loadtest::target::{Target, check_loopback, read_keys_file};
use mneme_loadtest::upstream;

/// Statement sites listed under a self-hosted report (all are in the JSON).
const DB_SITES_SHOWN: usize = 12;

/// Load on mneme over MCP Streamable HTTP: many virtual clients of several
/// tenants, open or closed loop, throughput and latency percentiles.
#[derive(Debug, Parser)]
#[command(name = "mneme-loadtest", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Drive one scenario and report throughput, latency and errors.
    Run {
        scenario: Scenario,
        #[command(flatten)]
        target: TargetArgs,
        #[command(flatten)]
        load: LoadArgs,
        /// `mixed`: recalls to remembers, as RECALL:REMEMBER.
        #[arg(long, default_value = "9:1")]
        mix: Mix,
        /// `surfacing`: the proxied tool to call (`prefix__tool`).
        #[arg(long, default_value = upstream::PROXIED_TOOL)]
        tool: String,
        /// Seeds the generated memories and questions.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// With --self-hosted: memories stored per tenant before the run.
        #[arg(long, value_name = "N", default_value_t = 200)]
        seed_fragments: usize,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Fill tenants with generated memories through `batch_remember`.
    Seed {
        #[command(flatten)]
        target: TargetArgs,
        /// Memories per key (per tenant with --self-hosted).
        #[arg(long, value_name = "N", default_value_t = 1000)]
        fragments: usize,
        /// The same seed gives the same memories (seeding again adds none).
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Memories per `batch_remember` call (at most 200).
        #[arg(long, default_value_t = MAX_BATCH)]
        batch_size: usize,
        /// `batch_remember` calls in flight at once.
        #[arg(long, default_value_t = 4)]
        parallel: usize,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Time the embedding worker clearing a seeded queue against the model
    /// alone on the same texts (self-hosted only).
    Backfill {
        #[command(flatten)]
        target: TargetArgs,
        /// Memories seeded per tenant.
        #[arg(long, value_name = "N", default_value_t = 1000)]
        fragments: usize,
        /// Seeds the generated memories.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Seeded memories the model alone embeds for the comparison.
        #[arg(long, value_name = "N", default_value_t = 256)]
        sample: usize,
        /// Seconds before a backfill that has not finished fails.
        #[arg(long, value_name = "SECS", default_value_t = 1800.0)]
        timeout: f64,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Serve the echo MCP server that `run surfacing` calls through mneme.
    Upstream {
        #[arg(long, default_value = "127.0.0.1:9100")]
        listen: SocketAddr,
    },
}

#[derive(Debug, Args)]
struct TargetArgs {
    /// MCP endpoint of a running mneme [default: http://127.0.0.1:8080/mcp].
    #[arg(long, conflicts_with = "self_hosted")]
    url: Option<String>,
    /// An API key (repeatable); virtual clients take the keys round robin.
    #[arg(long = "api-key", value_name = "KEY", conflicts_with = "self_hosted")]
    api_keys: Vec<String>,
    /// A file with one API key per line (`#` comments allowed).
    #[arg(long, value_name = "FILE", conflicts_with = "self_hosted")]
    keys_file: Option<PathBuf>,
    /// Allow a target that is not on this machine.
    #[arg(long)]
    allow_remote: bool,
    /// Start a stack in this process on a fresh database instead (needs
    /// `source ~/.local/share/mneme/env`); it is dropped afterwards.
    #[arg(long)]
    self_hosted: bool,
    /// With --self-hosted: tenants to create, one key each [default: 2].
    #[arg(long, requires = "self_hosted")]
    tenants: Option<usize>,
    /// With --self-hosted: `MNEME_EMBEDDER` of the stack.
    #[arg(long, default_value = "e5")]
    embedder: String,
    /// With --self-hosted: an extra `MNEME_*` setting, KEY=VALUE (repeatable).
    #[arg(long = "setting", value_name = "KEY=VALUE", value_parser = parse_setting)]
    settings: Vec<(String, String)>,
    /// Use the stateless MCP revision 2026-07-28 (no sessions) instead of
    /// `initialize` and `MCP-Session-Id`.
    #[arg(long)]
    stateless: bool,
}

#[derive(Debug, Args)]
struct OutputArgs {
    /// Write the report as JSON to this file.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// No progress line on stderr.
    #[arg(long)]
    quiet: bool,
}

impl OutputArgs {
    /// Fails before a long run rather than after it when the report cannot
    /// be written.
    fn check(&self) -> anyhow::Result<()> {
        if let Some(parent) = self
            .json
            .as_ref()
            .and_then(|p| p.parent())
            .filter(|p| !p.as_os_str().is_empty())
            && !parent.is_dir()
        {
            bail!(
                "cannot write the report: {} is not a directory",
                parent.display()
            );
        }
        Ok(())
    }

    fn write<T: serde::Serialize>(&self, report: &T) -> anyhow::Result<()> {
        if let Some(path) = &self.json {
            write_json(path, report)?;
            eprintln!("wrote {}", path.display());
        }
        Ok(())
    }
}

#[derive(Debug, Args)]
struct LoadArgs {
    /// Open loop: this many requests per second on a fixed schedule.
    #[arg(long, value_name = "N", conflicts_with = "concurrency")]
    rate: Option<f64>,
    /// Closed loop: this many requests outstanding [default: 8].
    #[arg(long, value_name = "N")]
    concurrency: Option<usize>,
    /// Virtual clients (MCP sessions) [default: the concurrency; 16 in open loop].
    #[arg(long, value_name = "N")]
    clients: Option<usize>,
    /// Open loop: most requests outstanding; requests due beyond it wait
    /// (and the wait counts as latency).
    #[arg(long, value_name = "N", default_value_t = 1000)]
    max_in_flight: usize,
    /// Seconds of load before measuring starts.
    #[arg(long, value_name = "SECS", default_value_t = 5.0)]
    warmup: f64,
    /// Seconds measured.
    #[arg(long, value_name = "SECS", default_value_t = 30.0)]
    duration: f64,
    /// Seconds before a request counts as a timeout.
    #[arg(long, value_name = "SECS", default_value_t = 30.0)]
    timeout: f64,
}

fn seconds(value: f64, name: &str) -> anyhow::Result<Duration> {
    Duration::try_from_secs_f64(value)
        .with_context(|| format!("--{name} must be a number of seconds ≥ 0"))
}

impl TargetArgs {
    fn choice(&self) -> anyhow::Result<TargetChoice> {
        if self.self_hosted {
            return Ok(TargetChoice::SelfHosted(SelfHostedOptions {
                embedder: self.embedder.clone(),
                tenants: self.tenants.unwrap_or(2),
                settings: self.settings.clone(),
                admin_keys: false,
            }));
        }
        if !self.settings.is_empty() {
            bail!("--setting applies to --self-hosted only; set MNEME_* on the running stack");
        }
        let url = self
            .url
            .clone()
            .unwrap_or_else(|| "http://127.0.0.1:8080/mcp".to_owned());
        check_loopback(&url, self.allow_remote)?;
        let mut keys = self.api_keys.clone();
        if let Some(path) = &self.keys_file {
            keys.extend(read_keys_file(path)?);
        }
        if keys.is_empty() {
            bail!(
                "no API key: pass --api-key KEY (repeatable) or --keys-file FILE, \
                 or use --self-hosted"
            );
        }
        Ok(TargetChoice::Running(Target { url, keys }))
    }

    fn lifecycle(&self) -> Lifecycle {
        if self.stateless {
            Lifecycle::Stateless
        } else {
            Lifecycle::Session
        }
    }
}

impl LoadArgs {
    fn plan(&self, progress: bool) -> anyhow::Result<Plan> {
        let load = match (self.rate, self.concurrency) {
            (Some(rate), _) => {
                if !(rate.is_finite() && rate > 0.0) {
                    bail!("--rate must be a positive number of requests per second");
                }
                Load::Open {
                    rate,
                    max_in_flight: self.max_in_flight.max(1),
                }
            }
            (None, concurrency) => Load::Closed {
                concurrency: concurrency.unwrap_or(8).max(1),
            },
        };
        let clients = self.clients.unwrap_or(match load {
            Load::Open { .. } => 16,
            Load::Closed { concurrency } => concurrency,
        });
        if clients == 0 {
            bail!("--clients must be at least 1");
        }
        let duration = seconds(self.duration, "duration")?;
        if duration.is_zero() {
            bail!("--duration must be more than 0 seconds");
        }
        let timeout = seconds(self.timeout, "timeout")?;
        if timeout.is_zero() {
            bail!("--timeout must be more than 0 seconds");
        }
        Ok(Plan {
            load,
            clients,
            warmup: seconds(self.warmup, "warmup")?,
            duration,
            timeout,
            progress,
        })
    }
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    // The self-hosted services log through tracing; only warnings matter
    // during a run, and rmcp's per-request warnings would drown the
    // progress line (failures are counted in the report instead).
    let filter = std::env::var("MNEME_LOG").unwrap_or_else(|_| "warn,rmcp=error".into());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_writer(std::io::stderr)
        .try_init();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    runtime.block_on(execute(cli.command))
}

async fn execute(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Run {
            scenario,
            target,
            load,
            mix,
            tool,
            seed,
            seed_fragments,
            output,
        } => {
            output.check()?;
            let run_nonce = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            let options = RunOptions {
                target: target.choice()?,
                scenario: ScenarioOptions {
                    scenario,
                    mix,
                    seed,
                    run_nonce,
                    surfacing_tool: tool,
                    lifecycle: target.lifecycle(),
                },
                plan: load.plan(!output.quiet)?,
                seed_fragments,
                embed_timeout: Duration::from_secs(600),
            };
            let report = run_load(options).await?;
            println!("{}", table(&report));
            print!("{}", db_time::table(&report.database, DB_SITES_SHOWN));
            output.write(&report)?;
        }
        Command::Seed {
            target,
            fragments,
            seed,
            batch_size,
            parallel,
            output,
        } => {
            output.check()?;
            if fragments == 0 {
                bail!("--fragments must be at least 1");
            }
            let options = SeedOptions {
                fragments,
                seed,
                batch_size,
                parallel,
                lifecycle: target.lifecycle(),
                progress: !output.quiet,
            };
            let report = seed_tenants(target.choice()?, options).await?;
            println!(
                "seeded {} keys: {} created, {} existing, {} rejected ({} with links) in {:.1} s \
                 = {:.0} memories/s; batch_remember p50 {:.0} ms, p99 {:.0} ms",
                report.keys.len(),
                report.created,
                report.existing,
                report.rejected,
                report.linked,
                report.seconds,
                report.fragments_per_second,
                report.batch_latency_ms.p50,
                report.batch_latency_ms.p99,
            );
            if let Some(links) = &report.auto_links {
                println!(
                    "automatic links: {} memories waiting when the last batch was acknowledged; \
                     all linked {:.1} s after the start = {:.0} memories/s with their links",
                    links.queued_at_end, links.settled_seconds, links.linked_per_second
                );
            }
            for key in &report.keys {
                println!(
                    "  key {}: {} created, {} existing, {} rejected; memory_stats total {}",
                    key.key_index,
                    key.created,
                    key.existing,
                    key.rejected,
                    key.stored_total
                        .map_or_else(|| "unknown".to_owned(), |t| t.to_string())
                );
            }
            for (code, message) in &report.rejection_examples {
                println!("  rejected ({code}): {message}");
            }
            print!("{}", db_time::table(&report.database, DB_SITES_SHOWN));
            output.write(&report)?;
        }
        Command::Backfill {
            target,
            fragments,
            seed,
            sample,
            timeout,
            output,
        } => {
            output.check()?;
            let TargetChoice::SelfHosted(hosted) = target.choice()? else {
                bail!("backfill needs --self-hosted: it reads the queue in the stack's database");
            };
            let options = BackfillOptions {
                hosted,
                fragments,
                seed,
                sample,
                timeout: seconds(timeout, "timeout")?,
                progress: !output.quiet,
            };
            let report = backfill(&options).await?;
            print!("{}", backfill::summary(&report));
            print!("{}", db_time::table(&report.database, DB_SITES_SHOWN));
            output.write(&report)?;
        }
        Command::Upstream { listen } => {
            let listener = tokio::net::TcpListener::bind(listen)
                .await
                .with_context(|| format!("listening on {listen}"))?;
            let (url, task) = upstream::spawn(listener)?;
            println!(
                "echo upstream at {url}\n\
                 register it for a tenant of a stack run with MNEME_PROXY_ALLOW_PRIVATE_UPSTREAMS=true:\n  \
                 mneme upstreams add --tenant local --name {} --url {url}\n\
                 then: mneme-loadtest run surfacing --api-key KEY (Ctrl-C stops this server)",
                upstream::UPSTREAM_NAME
            );
            tokio::signal::ctrl_c().await?;
            task.abort();
        }
    }
    Ok(())
}
