//! The commands of the binary, as functions the tests call too: a load
//! run against a running stack or a self-hosted one, and seeding.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::bail;

use crate::db_time;
use crate::mcp::Lifecycle;
use crate::report::{ReportHeader, RunReport, TargetInfo};
use crate::run::{self, Plan};
use crate::scenario::{Scenario, ScenarioOptions, ScenarioWorkload};
use crate::seed::{self, AutoLinkSettling, SeedOptions, SeedReport};
use crate::self_hosted::{SelfHosted, SelfHostedOptions};
use crate::target::Target;
use crate::upstream;

/// Where the load goes.
#[derive(Debug, Clone)]
pub enum TargetChoice {
    /// A running mneme (already checked to be loopback or allowed).
    Running(Target),
    /// A stack started here on a fresh database.
    SelfHosted(SelfHostedOptions),
}

/// A load run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub target: TargetChoice,
    pub scenario: ScenarioOptions,
    pub plan: Plan,
    /// Self-hosted: memories stored per tenant before the run (recall,
    /// stats and surfacing need something to find).
    pub seed_fragments: usize,
    /// Self-hosted: give up waiting for embeddings after this long.
    pub embed_timeout: Duration,
}

/// Runs a scenario and returns its report (the caller prints it).
pub async fn run_load(options: RunOptions) -> anyhow::Result<RunReport> {
    let hosted = match &options.target {
        TargetChoice::Running(_) => None,
        TargetChoice::SelfHosted(hosted) => {
            let mut hosted = hosted.clone();
            hosted.admin_keys |= options.scenario.scenario == Scenario::Surfacing;
            eprintln!(
                "starting a self-hosted stack (embedder {}, {} tenants)",
                hosted.embedder, hosted.tenants
            );
            Some(SelfHosted::start(&hosted).await?)
        }
    };
    // The echo upstream outlives the stack, whose proxy clients close
    // their sessions with it on shutdown.
    let echo = match (&hosted, options.scenario.scenario) {
        (Some(_), Scenario::Surfacing) => {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
            Some(upstream::spawn(listener)?)
        }
        _ => None,
    };
    // The stack stops (and its database goes) whatever happened.
    let result = run_on(
        &options,
        hosted.as_ref(),
        echo.as_ref().map(|(url, _)| url.as_str()),
    )
    .await;
    if let Some(hosted) = hosted {
        hosted.shutdown().await?;
    }
    if let Some((_, task)) = echo {
        task.abort();
    }
    result
}

async fn run_on(
    options: &RunOptions,
    hosted: Option<&SelfHosted>,
    echo_url: Option<&str>,
) -> anyhow::Result<RunReport> {
    let scenario = options.scenario.scenario;
    let target = match (&options.target, hosted) {
        (_, Some(hosted)) => hosted.target(),
        (TargetChoice::Running(target), None) => target.clone(),
        (TargetChoice::SelfHosted(_), None) => unreachable!("a self-hosted run has its stack"),
    };
    if let Some(hosted) = hosted {
        if options.seed_fragments > 0 {
            eprintln!("seeding {} memories per tenant", options.seed_fragments);
            let seeded = seed::seed(
                &target,
                &SeedOptions {
                    fragments: options.seed_fragments,
                    seed: options.scenario.seed,
                    batch_size: seed::MAX_BATCH,
                    parallel: 2,
                    lifecycle: options.scenario.lifecycle,
                    progress: options.plan.progress,
                },
            )
            .await?;
            if seeded.rejected > 0 {
                bail!(
                    "seeding rejected {} memories: {:?}",
                    seeded.rejected,
                    seeded.rejection_examples
                );
            }
            eprintln!("waiting for the embeddings of the seeded memories");
            hosted.wait_for_embeddings(options.embed_timeout).await?;
        }
        if let Some(url) = echo_url {
            hosted.register_upstream(url).await?;
        }
    }

    if hosted.is_none()
        && scenario.uses_long_lived_clients()
        && options.scenario.lifecycle == Lifecycle::Session
        && options.plan.clients > target.keys.len()
    {
        eprintln!(
            "note: {} clients share {} keys; if the stack runs with \
             MNEME_SESSION_REUSE_BY_TOKEN=true, clients of one key share one MCP session and \
             their requests can collide. Keep it off (the default), or give each client a key \
             of its own.",
            options.plan.clients,
            target.keys.len()
        );
    }
    if scenario.uses_long_lived_clients() {
        eprintln!(
            "{}: connecting {} clients to {}",
            scenario.name(),
            options.plan.clients,
            target.url
        );
    }
    let workload = ScenarioWorkload::connect(
        options.scenario.clone(),
        target.clone(),
        options.plan.clients,
    )
    .await?;
    if scenario == Scenario::Surfacing {
        workload
            .check_tool_listed(&options.scenario.surfacing_tool)
            .await?;
    }
    let workload = Arc::new(workload);
    let before = db_time::Snapshot::take();
    let measured = run::run(workload.clone(), options.plan).await;
    let database = db_time::Snapshot::take().since(&before);
    if let Ok(workload) = Arc::try_unwrap(workload) {
        workload.close().await;
    }

    let header = ReportHeader {
        scenario: scenario.name(),
        mix: (scenario == Scenario::Mixed).then(|| options.scenario.mix.to_string()),
        proxied_tool: (scenario == Scenario::Surfacing)
            .then(|| options.scenario.surfacing_tool.clone()),
        seed: options.scenario.seed,
        target: TargetInfo {
            url: target.url.clone(),
            self_hosted: hosted.is_some(),
            embedder: hosted.map(|h| h.embedder().to_owned()),
            settings: hosted
                .map(|h| h.settings().iter().cloned().collect())
                .unwrap_or_default(),
            keys: target.keys.len(),
            lifecycle: match options.scenario.lifecycle {
                Lifecycle::Session => "session",
                Lifecycle::Stateless => "stateless",
            },
        },
    };
    let mut report = RunReport::new(
        &measured,
        &options.plan,
        scenario == Scenario::Surfacing,
        header,
    );
    report.database = database;
    Ok(report)
}

/// Seeds a running stack's keys, or the tenants of a self-hosted stack
/// (which is then stopped: useful to measure ingest, and for tests).
pub async fn seed_tenants(
    target: TargetChoice,
    options: SeedOptions,
) -> anyhow::Result<SeedReport> {
    match target {
        TargetChoice::Running(target) => seed::seed(&target, &options).await,
        TargetChoice::SelfHosted(hosted) => {
            let hosted = SelfHosted::start(&hosted).await?;
            let before = db_time::Snapshot::take();
            let started = Instant::now();
            let result = match seed::seed(&hosted.target(), &options).await {
                Ok(report) => settle_auto_links(&hosted, &report, started, options.progress)
                    .await
                    .map(|auto_links| (report, auto_links)),
                Err(error) => Err(error),
            };
            let database = db_time::Snapshot::take().since(&before);
            hosted.shutdown().await?;
            result.map(|(report, auto_links)| SeedReport {
                auto_links: Some(auto_links),
                database,
                ..report
            })
        }
    }
}

/// Longest wait for a seeding's automatic links after its last batch.
const AUTO_LINK_TIMEOUT: Duration = Duration::from_secs(1800);

/// Waits until no seeded memory waits for its automatic links, and times it
/// from `started` (the start of the seeding).
async fn settle_auto_links(
    hosted: &SelfHosted,
    seeded: &SeedReport,
    started: Instant,
    progress: bool,
) -> anyhow::Result<AutoLinkSettling> {
    let queued_at_end = hosted.pending_auto_links().await?;
    let acknowledged = Instant::now();
    let mut left = queued_at_end;
    let mut last_report = Instant::now();
    while left > 0 {
        if acknowledged.elapsed() > AUTO_LINK_TIMEOUT {
            anyhow::bail!(
                "{left} memories still wait for their automatic links {AUTO_LINK_TIMEOUT:?} \
                 after the last batch"
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        left = hosted.pending_auto_links().await?;
        if progress && last_report.elapsed() >= Duration::from_secs(1) {
            last_report = Instant::now();
            eprintln!("automatic links: {left} of {queued_at_end} memories still waiting");
        }
    }
    let settled_seconds = started.elapsed().as_secs_f64();
    Ok(AutoLinkSettling {
        queued_at_end,
        settled_seconds,
        linked_per_second: seeded.created as f64 / settled_seconds.max(f64::EPSILON),
    })
}
