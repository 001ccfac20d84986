//! `mneme-gateway`: the gateway as its own process.

use mneme_config::{Config, ProcessEnv};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = Config::from_env(&ProcessEnv)?;
    let _telemetry = mneme_telemetry::init(&config.log, "mneme-gateway");
    // A separate process cannot work without the token: refuse before
    // taking any port.
    config.require_internal_token()?;
    mneme_telemetry::metrics::spawn_exporter(config.metrics_addr);
    let listener = tokio::net::TcpListener::bind(config.gateway.http_addr).await?;
    mneme_gateway::run(config, listener, mneme_telemetry::shutdown_signal()).await
}
