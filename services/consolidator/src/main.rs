//! `mneme-consolidator`: the consolidation worker as its own process.

use mneme_config::{Config, ProcessEnv};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = Config::from_env(&ProcessEnv)?;
    let _telemetry = mneme_telemetry::init(&config.log, "mneme-consolidator");
    mneme_telemetry::metrics::spawn_exporter(config.metrics_addr);
    mneme_consolidator::run(config, mneme_telemetry::shutdown_signal()).await
}
