//! `mneme proxy`: the local MCP proxy. A desktop client (Claude Desktop,
//! Claude Code) starts it as its one MCP server over stdio; it offers the
//! tools of the long-term memory (a hosted mneme, reached over MCP) and of
//! the user's other MCP servers, which it starts (stdio) or dials (HTTP),
//! and adds related memories to what those servers return.
//!
//! Why a local proxy next to the hosted one: the servers that matter most
//! to a coding agent (the filesystem, git, a local database) run on the
//! user's machine and speak stdio, which the hosted gateway cannot reach.
//! The pipeline is the hosted gateway's (same shaping, same progressive
//! contract, surfacing by the LTM's own engine through `POST /v1/surface`).
//!
//! Layout:
//! - [`config`]: the file (`proxy.json`), its validation with JSON paths,
//!   and `mneme proxy validate`'s summary.
//! - [`server`]: the MCP server, the call pipeline and hot reload.
//! - [`progressive`]: the in-memory store behind `stm_proxy_read_more`.
//! - [`surface`]: the surfacing request and the injection of its block.
//!
//! stdout is the MCP channel: everything else (logs, the problems of a
//! reloaded file, the stderr of stdio servers) goes to stderr.

pub mod config;
pub mod progressive;
pub mod server;
pub mod surface;

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use mneme_config::{LogConfig, LogFormat};
use rmcp::ServiceExt;

/// What `mneme proxy` was asked to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Serve MCP on stdio.
    Serve,
    /// Check the file and print its problems or a summary.
    Validate,
}

fn path_or_default(path: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    match path {
        Some(path) => Ok(path),
        None => config::default_path(),
    }
}

/// Runs `mneme proxy [validate]`. `init_logging` is false when the caller
/// already installed a subscriber.
pub async fn command(
    action: Action,
    path: Option<PathBuf>,
    init_logging: bool,
) -> anyhow::Result<()> {
    let path = path_or_default(path)?;
    match action {
        Action::Validate => validate(&path),
        Action::Serve => {
            if init_logging {
                let _ = mneme_telemetry::init(
                    &LogConfig {
                        filter: std::env::var("MNEME_LOG")
                            .ok()
                            .filter(|f| !f.trim().is_empty())
                            .unwrap_or_else(|| "warn,mneme=info".to_owned()),
                        format: LogFormat::Text,
                        tracing: mneme_config::TracingConfig::off(),
                    },
                    "mneme-proxy",
                );
            }
            serve(path).await
        }
    }
}

/// `mneme proxy validate`: problems (with their JSON paths) on stdout and
/// an error, or `ok` and a summary. Warnings go to stderr.
pub fn validate(path: &std::path::Path) -> anyhow::Result<()> {
    let (settings, report) = config::load(path);
    for warning in &report.warnings {
        eprintln!("warning: {warning}");
    }
    if let Some(mode) = readable_by_others(path) {
        eprintln!(
            "warning: {} holds credentials but others may read it (mode {mode:o}); run \
             `chmod 600 {}`",
            path.display(),
            path.display()
        );
    }
    match settings {
        Some(settings) => {
            if settings.ltm.uses_login()
                && crate::login::credentials_path().is_ok_and(|p| !p.exists())
            {
                eprintln!(
                    "warning: ltm: no `apiKey` and no stored sign-in; run `mneme login {}` \
                     before starting the proxy",
                    settings.ltm.url
                );
            }
            println!("ok: {}", path.display());
            for line in config::summary(&settings) {
                println!("  {line}");
            }
            Ok(())
        }
        None => {
            for problem in &report.problems {
                println!("{problem}");
            }
            anyhow::bail!("{} problem(s) in {}", report.problems.len(), path.display())
        }
    }
}

/// The file's permission bits when its group or others may read it.
#[cfg(unix)]
fn readable_by_others(path: &std::path::Path) -> Option<u32> {
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(path).ok()?.permissions().mode() & 0o777;
    (mode & 0o044 != 0).then_some(mode)
}

#[cfg(not(unix))]
fn readable_by_others(_path: &std::path::Path) -> Option<u32> {
    None
}

/// Serves MCP on stdio until the client closes it.
pub async fn serve(path: PathBuf) -> anyhow::Result<()> {
    let proxy = Arc::new(server::Proxy::start(path.clone())?);
    tracing::info!("mneme proxy serving {} on stdio", path.display());
    proxy.warm_up();
    let running = server::Server::new(proxy)
        .serve(rmcp::transport::stdio())
        .await
        .context("the MCP client did not initialize")?;
    running.waiting().await.context("the MCP session failed")?;
    Ok(())
}
