//! The language model of the LLM-backed consolidation stages: a chain of
//! OpenAI-compatible `/chat/completions` endpoints (`MNEME_LLM_URL`, then
//! `MNEME_LLM_FALLBACK_URL`). Each provider has a deadline per call, a limit
//! on calls in flight and a circuit breaker (after `breaker_failures`
//! consecutive failures it is skipped for the cooldown); a call goes to the
//! first provider whose breaker is closed and falls through to the next on
//! any failure (429, 5xx, timeout, a malformed answer).
//!
//! Without `MNEME_LLM_URL` there is no model: the stages that need one
//! report `skipped` and everything else runs.

use std::sync::LazyLock;

use mneme_config::LlmConfig;
use mneme_core::breaker::CircuitBreaker;
use mneme_telemetry::metrics::register;
use prometheus::{HistogramVec, IntCounterVec, IntGaugeVec, Opts};
use serde::Deserialize;
use serde_json::json;
use tokio::sync::Semaphore;

static CALLS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register(
        IntCounterVec::new(
            Opts::new(
                "mneme_llm_calls_total",
                "Language-model calls of consolidation, by provider position in the chain and outcome (ok, error, breaker_open).",
            ),
            &["provider", "outcome"],
        )
        .expect("valid metric"),
    )
});

static CALL_SECONDS: LazyLock<HistogramVec> = LazyLock::new(|| {
    mneme_telemetry::metrics::latency_histogram(
        "mneme_llm_call_seconds",
        "Duration of language-model calls that were sent (answered or failed), by provider position in the chain.",
        &["provider"],
    )
});

static BREAKER_OPEN: LazyLock<IntGaugeVec> = LazyLock::new(|| {
    register(
        IntGaugeVec::new(
            Opts::new(
                "mneme_llm_breaker_open",
                "1 while a language-model provider's circuit breaker is open (calls skip it until its cooldown ends), 0 while closed; as of its last call or skip.",
            ),
            &["provider"],
        )
        .expect("valid metric"),
    )
});

#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    /// Every provider's breaker is open: do not call before the cooldown.
    #[error("every language model failed repeatedly; paused until a cooldown ends")]
    BreakerOpen,
    #[error("language model call failed: {0}")]
    Failed(String),
}

/// A model's answer and what it cost.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub text: String,
    /// Tokens billed (the API's `usage.total_tokens`, else an estimate).
    pub tokens: u64,
}

#[derive(Debug)]
struct Provider {
    client: reqwest::Client,
    endpoint: String,
    settings: LlmConfig,
    slots: Semaphore,
    breaker: CircuitBreaker,
}

#[derive(Deserialize)]
struct Completion {
    choices: Vec<Choice>,
    usage: Option<Usage>,
}

#[derive(Deserialize)]
struct Choice {
    message: Message,
}

#[derive(Deserialize)]
struct Message {
    content: String,
}

#[derive(Deserialize)]
struct Usage {
    total_tokens: u64,
}

impl Provider {
    fn new(settings: LlmConfig) -> anyhow::Result<Self> {
        Ok(Self {
            client: reqwest::Client::builder()
                .timeout(settings.timeout)
                .build()?,
            endpoint: format!("{}/chat/completions", settings.url),
            slots: Semaphore::new(settings.concurrency.max(1)),
            breaker: CircuitBreaker::new(settings.breaker_failures, settings.breaker_cooldown),
            settings,
        })
    }

    fn record(&self, ok: bool) {
        if self.breaker.record(ok) {
            tracing::warn!(
                model = %self.settings.model,
                cooldown_secs = self.breaker.cooldown().as_secs(),
                "language model keeps failing; pausing calls to it"
            );
        }
    }

    async fn call(&self, system: &str, prompt: &str) -> Result<Answer, String> {
        let _slot = self
            .slots
            .acquire()
            .await
            .map_err(|_| "closed".to_owned())?;
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
        let text = completion
            .choices
            .into_iter()
            .next()
            .map(|choice| choice.message.content)
            .ok_or_else(|| "the answer has no choices".to_owned())?;
        let tokens = completion.usage.map_or_else(
            || ((system.len() + prompt.len() + text.len()) / 4) as u64,
            |usage| usage.total_tokens,
        );
        Ok(Answer { text, tokens })
    }
}

/// The chain of providers.
#[derive(Debug)]
pub struct Llm {
    providers: Vec<Provider>,
}

impl Llm {
    /// `None` for an empty chain.
    pub fn new(chain: &[LlmConfig]) -> anyhow::Result<Option<Self>> {
        if chain.is_empty() {
            return Ok(None);
        }
        let providers = chain
            .iter()
            .cloned()
            .map(Provider::new)
            .collect::<anyhow::Result<_>>()?;
        Ok(Some(Self { providers }))
    }

    /// The first answer of the chain to `prompt` under `system`.
    pub async fn complete(&self, system: &str, prompt: &str) -> Result<Answer, LlmError> {
        let mut last_error = None;
        for (position, provider) in self.providers.iter().enumerate() {
            let label = position.to_string();
            if provider.breaker.is_open() {
                CALLS.with_label_values(&[&label, "breaker_open"]).inc();
                BREAKER_OPEN.with_label_values(&[&label]).set(1);
                continue;
            }
            let started = std::time::Instant::now();
            let outcome = provider.call(system, prompt).await;
            CALL_SECONDS
                .with_label_values(&[&label])
                .observe(started.elapsed().as_secs_f64());
            provider.record(outcome.is_ok());
            BREAKER_OPEN
                .with_label_values(&[&label])
                .set(i64::from(provider.breaker.is_open()));
            match outcome {
                Ok(answer) => {
                    CALLS.with_label_values(&[&label, "ok"]).inc();
                    return Ok(answer);
                }
                Err(error) => {
                    CALLS.with_label_values(&[&label, "error"]).inc();
                    tracing::warn!(model = %provider.settings.model, %error, "language model call failed; trying the next one");
                    last_error = Some(error);
                }
            }
        }
        Err(last_error.map_or(LlmError::BreakerOpen, LlmError::Failed))
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
