//! Logging, tracing, metrics and process lifecycle for every mneme binary.
//!
//! - Logging ([`init`]): `tracing` with an env-style filter, as
//!   human-readable text or JSON lines (`MNEME_LOG`, `MNEME_LOG_FORMAT`),
//!   with secrets masked in every line ([`redact`]).
//! - [`trace`]: OpenTelemetry spans over OTLP (`MNEME_OTLP_ENDPOINT`) and
//!   W3C trace context in and out of every service.
//! - [`metrics`]: the process-wide Prometheus registry and its `/metrics`
//!   listener (`MNEME_METRICS_ADDR`); [`span_metrics`] turns library spans
//!   (Redis commands) into metrics.
//! - [`shutdown_signal`]: Ctrl-C / SIGTERM for graceful draining.
//!
//! Conventions (see `docs/OPERATIONS.md`): lowercase messages without
//! trailing punctuation, structured fields instead of interpolation, and
//! never a secret or memory content in a field.
#![forbid(unsafe_code)]

pub mod metrics;
pub mod redact;
pub mod span_metrics;
pub mod trace;

use mneme_config::{LogConfig, LogFormat};
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::level_filters::LevelFilter;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, Registry};

/// Keeps the tracer provider of the process; dropping it exports the spans
/// still buffered. Hold it until `main` returns.
#[derive(Debug)]
#[must_use = "dropping the guard stops trace export"]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Some(provider) = self.provider.take() {
            // The export runs on the batch processor's thread and needs the
            // async runtime's I/O, so wait for it from a thread of its own
            // rather than blocking a runtime worker.
            let flushed = std::thread::spawn(move || provider.shutdown()).join();
            if let Ok(Err(error)) = flushed {
                eprintln!("traces not flushed at exit: {error}");
            }
        }
    }
}

/// Installs the global subscriber: logs (filtered by `MNEME_LOG`),
/// OpenTelemetry spans named after `role` unless `MNEME_SERVICE_NAME` says
/// otherwise, and span-derived metrics. Call once, at the start of `main`;
/// a second call (tests) leaves the first subscriber in place.
pub fn init(config: &LogConfig, role: &str) -> Telemetry {
    let filter = log_filter(&config.filter);
    let logs: Box<dyn Layer<Registry> + Send + Sync> = match config.format {
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(true)
            .with_writer(redact::RedactingStderr)
            .with_filter(filter)
            .boxed(),
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .compact()
            .with_writer(redact::RedactingStderr)
            .with_filter(filter)
            .boxed(),
    };
    let tracing = trace::provider(&config.tracing, role);
    // Without an exporter the layer only keeps ids and context flowing, so
    // it needs no database or Redis spans.
    let traced = if tracing.exporting {
        Targets::new().with_default(LevelFilter::INFO)
    } else {
        Targets::new()
            .with_default(LevelFilter::INFO)
            .with_target("fred", LevelFilter::OFF)
            .with_target(DB_SPAN_TARGET, LevelFilter::OFF)
    };
    let spans = tracing_opentelemetry::layer()
        .with_tracer(tracing.tracer)
        .with_tracked_inactivity(false)
        .with_filter(traced)
        .boxed();
    let span_metrics = span_metrics::SpanMetrics
        .with_filter(span_metrics::SpanMetrics::filter())
        .boxed();
    let installed = tracing_subscriber::registry()
        .with(vec![logs, spans, span_metrics])
        .try_init()
        .is_ok();
    Telemetry {
        provider: (installed && tracing.exporting).then_some(tracing.provider),
    }
}

/// Libraries that log whole requests, statements or their parameters at
/// `debug` or below: memory content and tokens would reach the logs with a
/// plain `MNEME_LOG=debug`.
const PAYLOAD_LOGGING_TARGETS: &[&str] = &[
    "rmcp",
    "tokio_postgres",
    "fred",
    "h2",
    "hyper",
    "hyper_util",
    "reqwest",
    "tonic",
];

/// `MNEME_LOG` as a filter, with [`PAYLOAD_LOGGING_TARGETS`] held at
/// `info` at most unless the filter names them itself (an operator who
/// writes `rmcp=debug` asked for it). The hold only caps: under `warn`
/// they log at `warn`, and a filter with no default level (`mneme=debug`)
/// leaves them off.
fn log_filter(spec: &str) -> EnvFilter {
    let mut filter = EnvFilter::try_new(spec).unwrap_or_else(|error| {
        eprintln!("invalid MNEME_LOG filter {spec:?} ({error}); using `info`");
        EnvFilter::new("info")
    });
    let directives = || spec.split(',').map(str::trim);
    // The level of targets no directive names: the last bare level.
    let Some(default) = directives()
        .rev()
        .find_map(|directive| directive.parse::<LevelFilter>().ok())
    else {
        return filter;
    };
    let held = default.min(LevelFilter::INFO);
    for target in PAYLOAD_LOGGING_TARGETS {
        let named =
            directives().any(|directive| directive.split(['=', '[']).next() == Some(*target));
        if !named {
            let directive = format!("{target}={held}")
                .parse()
                .expect("a valid directive");
            filter = filter.add_directive(directive);
        }
    }
    filter
}

/// The `tracing` target of the database's query spans.
pub const DB_SPAN_TARGET: &str = "mneme::db";

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

#[cfg(test)]
mod tests {
    use super::*;

    fn directive_of(filter: &EnvFilter, target: &str) -> Option<String> {
        filter
            .to_string()
            .split(',')
            .find(|d| d.split('=').next() == Some(target))
            .map(str::to_owned)
    }

    #[test]
    fn payload_logging_libraries_are_capped_at_info_and_never_raised() {
        assert_eq!(
            directive_of(&log_filter("debug"), "rmcp").as_deref(),
            Some("rmcp=info")
        );
        assert_eq!(
            directive_of(&log_filter("trace,mneme=trace"), "tokio_postgres").as_deref(),
            Some("tokio_postgres=info")
        );
        // A quieter default keeps them as quiet: `warn` is not raised to info.
        assert_eq!(
            directive_of(&log_filter("warn,mneme=info"), "rmcp").as_deref(),
            Some("rmcp=warn")
        );
        assert_eq!(
            directive_of(&log_filter("error"), "hyper").as_deref(),
            Some("hyper=error")
        );
        // Without a default level, targets no directive names stay off.
        assert_eq!(directive_of(&log_filter("mneme=debug"), "rmcp"), None);
        // A target the operator names keeps the operator's level.
        assert_eq!(
            directive_of(&log_filter("info,rmcp=debug"), "rmcp").as_deref(),
            Some("rmcp=debug")
        );
    }
}
