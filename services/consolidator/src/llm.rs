//! The language model of the LLM-backed consolidation stages: any
//! OpenAI-compatible `/chat/completions` endpoint (`MNEME_LLM_URL`), with a
//! deadline per call, a limit on calls in flight and a circuit breaker (after
//! `breaker_failures` consecutive failures no call is made for the
//! cooldown, and the stages leave their work for the next run).
//!
//! Without `MNEME_LLM_URL` there is no model: the stages that need one
//! report `skipped` and everything else runs.

use std::sync::{LazyLock, Mutex};
use std::time::Instant;

use mneme_config::LlmConfig;
use mneme_telemetry::metrics::register;
use prometheus::{IntCounterVec, Opts};
use serde::Deserialize;
use serde_json::json;
use tokio::sync::Semaphore;

static CALLS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register(
        IntCounterVec::new(
            Opts::new(
                "mneme_llm_calls_total",
                "Language-model calls of consolidation, by outcome (ok, error, breaker_open).",
            ),
            &["outcome"],
        )
        .expect("valid metric"),
    )
});

#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    /// The breaker is open: do not call again before the cooldown.
    #[error("the language model failed repeatedly; paused until its cooldown ends")]
    BreakerOpen,
    #[error("language model call failed: {0}")]
    Failed(String),
}

#[derive(Debug, Default)]
struct Breaker {
    consecutive_failures: u32,
    open_until: Option<Instant>,
}

/// A chat-completions client.
#[derive(Debug)]
pub struct Llm {
    client: reqwest::Client,
    endpoint: String,
    settings: LlmConfig,
    slots: Semaphore,
    breaker: Mutex<Breaker>,
}

#[derive(Deserialize)]
struct Completion {
    choices: Vec<Choice>,
}

#[derive(Deserialize)]
struct Choice {
    message: Message,
}

#[derive(Deserialize)]
struct Message {
    content: String,
}

impl Llm {
    pub fn new(settings: LlmConfig) -> anyhow::Result<Self> {
        Ok(Self {
            client: reqwest::Client::builder()
                .timeout(settings.timeout)
                .build()?,
            endpoint: format!("{}/chat/completions", settings.url),
            slots: Semaphore::new(settings.concurrency.max(1)),
            settings,
            breaker: Mutex::new(Breaker::default()),
        })
    }

    fn breaker_open(&self) -> bool {
        let breaker = self.breaker.lock().unwrap_or_else(|e| e.into_inner());
        breaker
            .open_until
            .is_some_and(|until| Instant::now() < until)
    }

    fn record(&self, ok: bool) {
        let mut breaker = self.breaker.lock().unwrap_or_else(|e| e.into_inner());
        if ok {
            *breaker = Breaker::default();
            return;
        }
        breaker.consecutive_failures += 1;
        if breaker.consecutive_failures >= self.settings.breaker_failures {
            breaker.consecutive_failures = 0;
            breaker.open_until = Some(Instant::now() + self.settings.breaker_cooldown);
            tracing::warn!(
                cooldown_secs = self.settings.breaker_cooldown.as_secs(),
                "language model keeps failing; pausing calls"
            );
        }
    }

    /// The model's answer to `prompt` under `system` instructions.
    pub async fn complete(&self, system: &str, prompt: &str) -> Result<String, LlmError> {
        if self.breaker_open() {
            CALLS.with_label_values(&["breaker_open"]).inc();
            return Err(LlmError::BreakerOpen);
        }
        let _slot = self
            .slots
            .acquire()
            .await
            .map_err(|_| LlmError::Failed("closed".into()))?;
        let outcome = self.call(system, prompt).await;
        self.record(outcome.is_ok());
        CALLS
            .with_label_values(&[if outcome.is_ok() { "ok" } else { "error" }])
            .inc();
        outcome.map_err(LlmError::Failed)
    }

    async fn call(&self, system: &str, prompt: &str) -> Result<String, String> {
        let mut request = self.client.post(&self.endpoint).json(&json!({
            "model": self.settings.model,
            "temperature": 0,
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": prompt},
            ],
        }));
        if let Some(key) = &self.settings.api_key {
            request = request.bearer_auth(key.expose());
        }
        let response = request
            .send()
            .await
            .map_err(|e| e.without_url().to_string())?;
        let status = response.status();
        if !status.is_success() {
            return Err(format!("HTTP {status}"));
        }
        let completion: Completion = response
            .json()
            .await
            .map_err(|e| e.without_url().to_string())?;
        completion
            .choices
            .into_iter()
            .next()
            .map(|choice| choice.message.content)
            .ok_or_else(|| "the answer has no choices".to_owned())
    }
}

/// The first JSON object in a model's answer (models wrap JSON in prose or
/// code fences).
pub fn json_object(answer: &str) -> Option<serde_json::Value> {
    let start = answer.find('{')?;
    let end = answer.rfind('}')?;
    serde_json::from_str(answer.get(start..=end)?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_is_found_inside_prose_and_fences() {
        let answer = "Sure!\n```json\n{\"verdict\": \"contradiction\"}\n```";
        assert_eq!(json_object(answer).unwrap()["verdict"], "contradiction");
        assert!(json_object("no json here").is_none());
    }
}
