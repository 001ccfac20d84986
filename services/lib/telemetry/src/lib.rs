//! Logging, metrics and process lifecycle for every mneme binary.
//!
//! - Logging ([`init`]): `tracing` with an env-style filter, as
//!   human-readable text or JSON lines (`MNEME_LOG`, `MNEME_LOG_FORMAT`).
//! - [`metrics`]: the process-wide Prometheus registry and its `/metrics`
//!   listener (`MNEME_METRICS_ADDR`).
//! - [`shutdown_signal`]: Ctrl-C / SIGTERM for graceful draining.
//!
//! Conventions (see `docs/OPERATIONS.md`): lowercase messages without
//! trailing punctuation, structured fields instead of interpolation, and
//! never a secret or memory content in a field.
#![forbid(unsafe_code)]

pub mod metrics;

use mneme_config::{LogConfig, LogFormat};
use tracing_subscriber::EnvFilter;

/// Installs the global subscriber. Call once, at the start of `main`.
pub fn init(config: &LogConfig) {
    let filter = EnvFilter::try_new(&config.filter).unwrap_or_else(|error| {
        eprintln!(
            "invalid MNEME_LOG filter {:?} ({error}); using `info`",
            config.filter
        );
        EnvFilter::new("info")
    });
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match config.format {
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .init(),
        LogFormat::Text => builder.compact().init(),
    }
}

/// Completes on Ctrl-C or SIGTERM (what Kubernetes sends before killing a
/// pod), so servers can drain in-flight requests.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(error) = tokio::signal::ctrl_c().await {
            tracing::error!(%error, "cannot listen for ctrl-c");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(error) => {
                tracing::error!(%error, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = terminate => {}
    }
    tracing::info!("shutdown requested");
}
