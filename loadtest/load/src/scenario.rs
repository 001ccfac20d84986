//! The scenarios: what one request of each is, on which client, with
//! which arguments.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use serde_json::{Map, Value, json};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::data;
use crate::mcp::{self, Client, ErrorKind, Failure, Lifecycle};
use crate::run::{Success, Workload};
use crate::target::Target;

/// What the virtual clients do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Scenario {
    /// `remember` of new memories.
    Remember,
    /// `recall` of questions in English and Korean.
    Recall,
    /// `recall` and `remember` in the ratio of `--mix`.
    Mixed,
    /// `memory_stats`, the cheapest tool (cached between writes).
    Stats,
    /// A new MCP session per request (`initialize`, then `memory_stats`),
    /// as connector hosts do; both are timed together.
    ConnectStorm,
    /// A proxied upstream tool with `_context_query`, so every call runs
    /// the surfacing pipeline.
    Surfacing,
}

impl Scenario {
    pub fn name(self) -> &'static str {
        match self {
            Self::Remember => "remember",
            Self::Recall => "recall",
            Self::Mixed => "mixed",
            Self::Stats => "stats",
            Self::ConnectStorm => "connect-storm",
            Self::Surfacing => "surfacing",
        }
    }

    /// Whether the virtual clients are connected once, before the run (all
    /// but `connect-storm`, which connects per request).
    pub fn uses_long_lived_clients(self) -> bool {
        self != Self::ConnectStorm
    }
}

/// `RECALL:REMEMBER`, e.g. `9:1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mix {
    pub recall: u32,
    pub remember: u32,
}

impl Default for Mix {
    fn default() -> Self {
        Self {
            recall: 9,
            remember: 1,
        }
    }
}

impl FromStr for Mix {
    type Err = String;

    fn from_str(raw: &str) -> Result<Self, String> {
        let parse = |part: &str| {
            part.trim()
                .parse::<u32>()
                .map_err(|_| format!("expected RECALL:REMEMBER such as 9:1, got {raw:?}"))
        };
        let (recall, remember) = raw
            .split_once(':')
            .ok_or_else(|| format!("expected RECALL:REMEMBER such as 9:1, got {raw:?}"))?;
        let mix = Self {
            recall: parse(recall)?,
            remember: parse(remember)?,
        };
        if mix.recall.checked_add(mix.remember).unwrap_or(0) == 0 {
            return Err(format!("{raw:?} sends nothing"));
        }
        Ok(mix)
    }
}

impl std::fmt::Display for Mix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.recall, self.remember)
    }
}

impl Mix {
    /// Whether request `seq` is a recall: in every run of `recall +
    /// remember` consecutive requests, the first `recall` are, so the
    /// ratio holds exactly over any window of that length.
    pub fn is_recall(self, seq: u64) -> bool {
        let period = u64::from(self.recall) + u64::from(self.remember);
        seq % period < u64::from(self.recall)
    }
}

/// Settings of a scenario's requests.
#[derive(Debug, Clone)]
pub struct ScenarioOptions {
    pub scenario: Scenario,
    pub mix: Mix,
    /// Seeds the generated memories and questions.
    pub seed: u64,
    /// Added to the stream of `remember` content, so each run writes new
    /// memories rather than duplicates of the previous run's.
    pub run_nonce: u64,
    /// The proxied tool of `surfacing` (`prefix__tool`).
    pub surfacing_tool: String,
    pub lifecycle: Lifecycle,
}

/// A scenario bound to its target and clients.
#[derive(Debug)]
pub struct ScenarioWorkload {
    options: ScenarioOptions,
    target: Target,
    /// Connected before the run; empty for `connect-storm`.
    clients: Vec<Client>,
}

impl ScenarioWorkload {
    /// Connects `clients` virtual clients (unless the scenario connects per
    /// request), `parallel` handshakes at a time.
    pub async fn connect(
        options: ScenarioOptions,
        target: Target,
        clients: usize,
    ) -> anyhow::Result<Self> {
        let clients = if options.scenario.uses_long_lived_clients() {
            connect_all(&target, clients, options.lifecycle).await?
        } else {
            Vec::new()
        };
        Ok(Self {
            options,
            target,
            clients,
        })
    }

    /// Ends every session while the server still runs.
    pub async fn close(self) {
        let mut closing = JoinSet::new();
        for client in self.clients {
            closing.spawn(mcp::close(client));
        }
        while closing.join_next().await.is_some() {}
    }

    /// Fails early, with a hint, when the proxied tool of `surfacing` is
    /// not in the first client's tool list (every call would fail).
    pub async fn check_tool_listed(&self, tool: &str) -> anyhow::Result<()> {
        let client = self
            .clients
            .first()
            .context("no client to list tools with")?;
        let tools = client.list_all_tools().await.context("tools/list failed")?;
        if !tools.iter().any(|t| t.name == tool) {
            anyhow::bail!(
                "{tool} is not among the key's tools; register the echo upstream first \
                 (`mneme-loadtest upstream`, then `mneme upstreams add --tenant … --name {} \
                 --url http://127.0.0.1:9100/mcp` on a stack run with \
                 MNEME_PROXY_ALLOW_PRIVATE_UPSTREAMS=true)",
                crate::upstream::UPSTREAM_NAME
            );
        }
        Ok(())
    }

    async fn call(
        &self,
        client: usize,
        tool: &str,
        arguments: Map<String, Value>,
    ) -> Result<Value, Failure> {
        let result = mcp::call_tool(&self.clients[client], tool, arguments).await?;
        mcp::structured(&result)
    }

    async fn recall(&self, client: usize, seq: u64) -> Result<Success, Failure> {
        let arguments = data::recall_arguments(self.options.seed, client as u64, seq);
        let recalled = self.call(client, "recall", arguments).await?;
        expect(recalled["fragments"].is_array(), "recall", &recalled)?;
        Ok(Success::default())
    }

    async fn remember(&self, client: usize, seq: u64) -> Result<Success, Failure> {
        let stream = self.options.run_nonce ^ ((client as u64) << 48);
        let arguments = data::memory(self.options.seed, stream, seq).arguments();
        let stored = self.call(client, "remember", arguments).await?;
        expect(
            matches!(stored["outcome"].as_str(), Some("created" | "duplicate")),
            "remember",
            &stored,
        )?;
        Ok(Success::default())
    }

    async fn stats(&self, client: usize) -> Result<Success, Failure> {
        let stats = self.call(client, "memory_stats", Map::new()).await?;
        expect(stats["total"].is_u64(), "memory_stats", &stats)?;
        Ok(Success::default())
    }

    async fn connect_and_stats(&self, client: usize) -> Result<Success, Failure> {
        let connected = mcp::connect(
            &self.target.url,
            self.target.key_for(client),
            self.options.lifecycle,
        )
        .await?;
        let result = mcp::call_tool(&connected, "memory_stats", Map::new()).await;
        let answered_at = Instant::now();
        // Closing (DELETE) is not part of what a connector host waits for,
        // so it is not timed; but it is awaited, so that this client's next
        // `initialize` cannot be handed the session being deleted (mneme
        // reuses a live session of the same credential).
        mcp::close(connected).await;
        let stats = mcp::structured(&result?)?;
        expect(stats["total"].is_u64(), "memory_stats", &stats)?;
        Ok(Success {
            answered_at: Some(answered_at),
            ..Success::default()
        })
    }

    async fn surfacing(&self, client: usize, seq: u64) -> Result<Success, Failure> {
        let question = data::question(self.options.seed, client as u64, seq);
        let mut arguments = Map::new();
        arguments.insert("message".into(), json!(format!("status of build {seq}")));
        arguments.insert("_context_query".into(), json!(question.text));
        let result = mcp::call_tool(
            &self.clients[client],
            &self.options.surfacing_tool,
            arguments,
        )
        .await?;
        let text = mcp::result_text(&result);
        expect(
            text.contains("status of build"),
            "the proxied tool",
            &json!(text),
        )?;
        Ok(Success {
            surfaced: text.contains("<surfaced-memories"),
            ..Success::default()
        })
    }
}

fn expect(holds: bool, tool: &str, answer: &Value) -> Result<(), Failure> {
    if holds {
        return Ok(());
    }
    let mut shown = answer.to_string();
    shown.truncate(200);
    Err(Failure::new(
        ErrorKind::Unexpected,
        format!("{tool} answered {shown}"),
    ))
}

impl Workload for ScenarioWorkload {
    fn operation(&self, seq: u64) -> &'static str {
        match self.options.scenario {
            Scenario::Remember => "remember",
            Scenario::Recall => "recall",
            Scenario::Mixed if self.options.mix.is_recall(seq) => "recall",
            Scenario::Mixed => "remember",
            Scenario::Stats => "memory_stats",
            Scenario::ConnectStorm => "connect+memory_stats",
            Scenario::Surfacing => "proxied_call",
        }
    }

    async fn execute(&self, client: usize, seq: u64) -> Result<Success, Failure> {
        match self.operation(seq) {
            "recall" => self.recall(client, seq).await,
            "remember" => self.remember(client, seq).await,
            "memory_stats" => self.stats(client).await,
            "connect+memory_stats" => self.connect_and_stats(client).await,
            _ => self.surfacing(client, seq).await,
        }
    }
}

/// Connects `count` clients, key `i % keys` for client `i`, a few
/// handshakes at a time so the start does not become a connect storm of
/// its own.
pub async fn connect_all(
    target: &Target,
    count: usize,
    lifecycle: Lifecycle,
) -> anyhow::Result<Vec<Client>> {
    const PARALLEL_HANDSHAKES: usize = 8;
    const CONNECT_ATTEMPTS: u64 = 3;
    // A handshake is a few milliseconds; one that has not completed after
    // this long never will (its response stream stays open but empty).
    const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
    let permits = Arc::new(tokio::sync::Semaphore::new(PARALLEL_HANDSHAKES));
    let mut connecting = JoinSet::new();
    for index in 0..count {
        let url = target.url.clone();
        let key = target.key_for(index).to_owned();
        let permits = permits.clone();
        connecting.spawn(async move {
            let _permit = permits.acquire_owned().await;
            let mut attempt = 1;
            loop {
                let connected =
                    tokio::time::timeout(CONNECT_TIMEOUT, mcp::connect(&url, &key, lifecycle))
                        .await
                        .unwrap_or_else(|_| Err(Failure::timeout(CONNECT_TIMEOUT)));
                match connected {
                    // Concurrent handshakes of one key can collide where
                    // mneme hands them one reused session; a retry is
                    // what a real client would do.
                    Err(_) if attempt < CONNECT_ATTEMPTS => {
                        tokio::time::sleep(Duration::from_millis(100 * attempt)).await;
                        attempt += 1;
                    }
                    connected => return (index, connected),
                }
            }
        });
    }
    let mut clients: Vec<Option<Client>> = (0..count).map(|_| None).collect();
    let mut first_failure = None;
    while let Some(joined) = connecting.join_next().await {
        let (index, connected) = joined?;
        match connected {
            Ok(client) => clients[index] = Some(client),
            Err(failure) => {
                first_failure.get_or_insert((index, failure));
            }
        }
    }
    if let Some((index, failure)) = first_failure {
        for client in clients.into_iter().flatten() {
            mcp::close(client).await;
        }
        anyhow::bail!(
            "virtual client {index} could not connect to {} ({}): {}",
            target.url,
            failure.kind,
            failure.message
        );
    }
    Ok(clients.into_iter().flatten().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mixes_parse_and_hold_their_ratio() {
        let mix: Mix = "9:1".parse().unwrap();
        assert_eq!(mix, Mix::default());
        let recalls = (0..1000).filter(|&seq| mix.is_recall(seq)).count();
        assert_eq!(recalls, 900);
        let three_to_one: Mix = " 3 : 1 ".parse().unwrap();
        assert_eq!((0..8).filter(|&s| three_to_one.is_recall(s)).count(), 6);
        let writes_only: Mix = "0:1".parse().unwrap();
        assert!(!(0..10).any(|s| writes_only.is_recall(s)));
        for bad in ["9", "a:b", "0:0", "9:1:1", "-1:2"] {
            assert!(bad.parse::<Mix>().is_err(), "{bad}");
        }
        assert_eq!(mix.to_string(), "9:1");
    }
}
