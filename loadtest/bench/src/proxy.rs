//! What the MCP proxy adds to a tool call: the reference server
//! `@modelcontextprotocol/server-everything` (npm, Streamable HTTP) is called
//! directly and through mneme as a tenant upstream, with surfacing off and
//! on, and the client-observed latencies are compared.
//!
//! Protocol: one upstream process, one mneme stack, one MCP client per path,
//! `echo` with a short message, `calls` sequential calls per path after
//! `warmup` unmeasured ones (connections, tool lists and the embedding cache
//! warm, as in steady use). The surfacing path stores `memories` memories
//! first (one about a rollout, the rest unrelated) and passes a
//! `_context_query` about that rollout, so the whole surfacing pipeline
//! runs (lookup, gates, block, event write); cooldown and dedup are off so
//! every call does the lookup.

use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde::Serialize;
use serde_json::{Value, json};

use crate::harness::{Bench, Environment};
use crate::metrics::LatencySummary;

/// How to run.
#[derive(Debug, Clone)]
pub struct Options {
    pub embedder: String,
    pub settings: Vec<(String, String)>,
    pub calls: usize,
    pub warmup: usize,
    pub memories: usize,
}

/// The figures.
#[derive(Debug, Serialize)]
pub struct Report {
    pub environment: Environment,
    pub embedder: String,
    pub settings: Vec<(String, String)>,
    pub calls: usize,
    /// Straight to the upstream.
    pub direct: LatencySummary,
    /// Through mneme, surfacing off for the upstream.
    pub proxied: LatencySummary,
    /// Through mneme, surfacing on, with a matching `_context_query`.
    pub proxied_surfacing: LatencySummary,
    /// Share of surfacing-path calls that came back with memories.
    pub surfaced_share: f64,
}

/// The reference server, killed on drop.
struct Upstream {
    _child: tokio::process::Child,
    url: String,
}

async fn start_upstream() -> anyhow::Result<Upstream> {
    let modules = std::env::var("MNEME_TEST_MCP_SERVERS").context(
        "MNEME_TEST_MCP_SERVERS is not set; run `source ~/.local/share/mneme/env` first",
    )?;
    let script = format!("{modules}/@modelcontextprotocol/server-everything/dist/index.js");
    let port = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await?
        .local_addr()?
        .port();
    let child = tokio::process::Command::new("node")
        .args([script.as_str(), "streamableHttp"])
        .env("PORT", port.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .context("starting server-everything with node")?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        if Instant::now() > deadline {
            bail!("server-everything did not listen within 30 s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(Upstream {
        _child: child,
        url: format!("http://127.0.0.1:{port}/mcp"),
    })
}

type Client = rmcp::service::RunningService<rmcp::RoleClient, ()>;

async fn client(url: &str, key: Option<&str>) -> anyhow::Result<Client> {
    let mut config = StreamableHttpClientTransportConfig::with_uri(url.to_owned());
    if let Some(key) = key {
        config = config.auth_header(key.to_owned());
    }
    Ok(
        ().serve(StreamableHttpClientTransport::from_config(config))
            .await?,
    )
}

/// Times `calls` calls of `tool` after `warmup` untimed ones; returns the
/// latencies in ms and how many answers held surfaced memories.
async fn measure(
    client: &Client,
    tool: &str,
    arguments: &Value,
    options: &Options,
) -> anyhow::Result<(Vec<f64>, usize)> {
    let Value::Object(arguments) = arguments.clone() else {
        bail!("arguments must be an object");
    };
    let mut samples = Vec::with_capacity(options.calls);
    let mut surfaced = 0;
    for i in 0..options.warmup + options.calls {
        let params = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments.clone());
        let started = Instant::now();
        let result = client.call_tool(params).await?;
        let elapsed = started.elapsed().as_secs_f64() * 1000.0;
        if result.is_error == Some(true) {
            bail!("{tool} failed: {result:?}");
        }
        if i >= options.warmup {
            samples.push(elapsed);
            let text: String = result
                .content
                .iter()
                .filter_map(|c| c.as_text())
                .map(|t| t.text.as_str())
                .collect();
            surfaced += usize::from(text.contains("<surfaced-memories"));
        }
    }
    Ok((samples, surfaced))
}

pub async fn run(options: &Options) -> anyhow::Result<Report> {
    let upstream = start_upstream().await?;
    let mut settings = options.settings.clone();
    settings.push(("MNEME_PROXY_ALLOW_PRIVATE_UPSTREAMS".into(), "true".into()));
    // Every call of the surfacing path asks again; without this the
    // cooldown and dedup would skip most lookups after the first.
    settings.push(("MNEME_SURFACING_COOLDOWN_MS".into(), "0".into()));
    settings.push(("MNEME_SURFACING_DEDUP_TTL_SECS".into(), "0".into()));
    settings.push(("MNEME_SURFACING_RATE_PER_MINUTE".into(), "1000000".into()));
    // One key sends over a thousand calls a minute: the request limits
    // (meant for agents) would answer 429.
    settings.push(("MNEME_RATE_LIMIT_KEY".into(), "1000000".into()));
    settings.push(("MNEME_RATE_LIMIT_TENANT".into(), "1000000".into()));
    let bench = Bench::start(&options.embedder, &settings).await?;
    let tenant = bench
        .tenant_with("proxy-bench", &[mneme_core::Permission::Admin])
        .await?;
    // One memory the surfacing path is about, among unrelated ones (many
    // near-identical memories would make none stand out; see SURFACING.md).
    const SUBJECTS: [&str; 8] = [
        "billing dashboard",
        "office printer",
        "release calendar",
        "on-call rota",
        "design review",
        "travel policy",
        "laptop refresh",
        "team offsite",
    ];
    let mut contents = vec![
        "The payments-api service is rolled out with a canary stage and rolled back with \
         deploy/rollback.sh when its error rate passes 2%."
            .to_owned(),
    ];
    contents.extend((1..options.memories).map(|i| {
        format!(
            "Note {i}: the {} was discussed on day {} and owner {} took the follow-up.",
            SUBJECTS[i % SUBJECTS.len()],
            i % 28 + 1,
            i % 13
        )
    }));
    for content in contents {
        tenant
            .remember(json!({"content": content, "topic": "notes", "type": "fact"}))
            .await?
            .map_err(anyhow::Error::msg)?;
    }
    bench
        .wait_for_embeddings(&[tenant.id], Duration::from_secs(600))
        .await?;
    let http = reqwest::Client::new();
    let register = |name: &str, surfacing: bool| {
        http.post(format!("http://{}/v1/upstreams", bench.stack.http_addr))
            .bearer_auth(&tenant.api_key)
            .json(&json!({"name": name, "url": upstream.url, "surfacingEnabled": surfacing}))
            .send()
    };
    for (name, surfacing) in [("plain", false), ("surf", true)] {
        let response = register(name, surfacing).await?;
        if !response.status().is_success() {
            bail!(
                "registering the upstream failed: {}",
                response.text().await?
            );
        }
    }

    let direct = client(&upstream.url, None).await?;
    let through = client(&bench.stack.mcp_url(), Some(&tenant.api_key)).await?;
    let plain = json!({"message": "status of the nightly build"});
    let (direct_ms, _) = measure(&direct, "echo", &plain, options).await?;
    let (proxied_ms, _) = measure(&through, "plain__echo", &plain, options).await?;
    let matching = json!({"message": "status of the nightly build",
                          "_context_query": "canary rollout and rollback of payments-api"});
    let (surfacing_ms, surfaced) = measure(&through, "surf__echo", &matching, options).await?;
    Ok(Report {
        environment: Environment::capture(),
        embedder: options.embedder.clone(),
        settings,
        calls: options.calls,
        direct: LatencySummary::of(&direct_ms),
        proxied: LatencySummary::of(&proxied_ms),
        proxied_surfacing: LatencySummary::of(&surfacing_ms),
        surfaced_share: surfaced as f64 / options.calls.max(1) as f64,
    })
}

/// The report for humans.
pub fn summary(report: &Report) -> String {
    let row = |name: &str, l: &LatencySummary| {
        format!(
            "{name:<26} p50 {:>7.2} ms  p95 {:>7.2} ms  p99 {:>7.2} ms  mean {:>7.2} ms",
            l.p50_ms, l.p95_ms, l.p99_ms, l.mean_ms
        )
    };
    format!(
        "proxy overhead ({} calls each, embedder {})\n{}\n{}\n{}\nadded by the proxy: p50 {:.2} ms, \
         p95 {:.2} ms; by surfacing on top: p50 {:.2} ms, p95 {:.2} ms; surfaced on {:.0}% of calls",
        report.calls,
        report.embedder,
        row("direct", &report.direct),
        row("through mneme", &report.proxied),
        row("through mneme + surfacing", &report.proxied_surfacing),
        report.proxied.p50_ms - report.direct.p50_ms,
        report.proxied.p95_ms - report.direct.p95_ms,
        report.proxied_surfacing.p50_ms - report.proxied.p50_ms,
        report.proxied_surfacing.p95_ms - report.proxied.p95_ms,
        report.surfaced_share * 100.0,
    )
}
