//! The optional external cross-encoder (`MNEME_RERANKER_URL`).
//!
//! The best fused results go to a text-embeddings-inference style
//! `POST /rerank`; its order is final (the reference re-sorted by importance
//! and recency afterwards and so threw the reranker's work away). A failing
//! reranker never fails a recall: the fused order is returned, and after
//! `max_failures` consecutive failures the reranker is skipped for a
//! cooldown, so an outage costs one timeout per cooldown instead of one per
//! recall.

use std::sync::LazyLock;

use mneme_config::RerankerConfig;
use mneme_core::breaker::CircuitBreaker;
use mneme_proto::v1::RecalledFragment;
use mneme_telemetry::metrics::register;
use prometheus::{IntCounterVec, Opts};
use serde::{Deserialize, Serialize};

/// Reason code added to the explanations of reranked results.
pub(crate) const RERANKED: &str = "reranked";

static CALLS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register(
        IntCounterVec::new(
            Opts::new(
                "mneme_reranker_calls_total",
                "Reranker requests by outcome (ok, error, skipped during a cooldown).",
            ),
            &["outcome"],
        )
        .expect("valid metric"),
    )
});

#[derive(Serialize)]
struct RerankRequest<'a> {
    query: &'a str,
    /// TEI's field name.
    texts: &'a [&'a str],
    /// The field name of Cohere/Jina-style servers; sending both lets one
    /// client talk to either.
    documents: &'a [&'a str],
    truncate: bool,
}

#[derive(Deserialize)]
struct Scored {
    index: usize,
    #[serde(alias = "relevance_score")]
    score: f64,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RerankResponse {
    /// TEI: `[{index, score}]`.
    Ranked(Vec<Scored>),
    /// `{scores: [..]}` in input order.
    Scores { scores: Vec<f64> },
    /// Cohere/Jina: `{results: [{index, relevance_score}]}`.
    Results { results: Vec<Scored> },
}

impl RerankResponse {
    /// Scores in input order; `None` when the answer does not cover exactly
    /// the `count` inputs.
    fn into_scores(self, count: usize) -> Option<Vec<f64>> {
        let scored = match self {
            Self::Scores { scores } => return (scores.len() == count).then_some(scores),
            Self::Ranked(scored) | Self::Results { results: scored } => scored,
        };
        let mut scores = vec![None; count];
        for Scored { index, score } in scored {
            *scores.get_mut(index)? = Some(score);
        }
        scores.into_iter().collect()
    }
}

/// Client of the external reranker, shared by all recalls of a process.
#[derive(Debug)]
pub(crate) struct Reranker {
    client: reqwest::Client,
    endpoint: String,
    settings: RerankerConfig,
    breaker: CircuitBreaker,
}

impl Reranker {
    pub(crate) fn new(settings: RerankerConfig) -> anyhow::Result<Self> {
        Ok(Self {
            client: reqwest::Client::builder()
                .timeout(settings.timeout)
                .build()?,
            endpoint: format!("{}/rerank", settings.url),
            breaker: CircuitBreaker::new(settings.max_failures, settings.cooldown),
            settings,
        })
    }

    fn record(&self, ok: bool) {
        if self.breaker.record(ok) {
            tracing::warn!(
                cooldown_secs = self.breaker.cooldown().as_secs(),
                "reranker keeps failing; recalling without it for a while"
            );
        }
    }

    /// Reorders the head of `ranked` by the reranker's scores and keeps the
    /// configured number of results; returns `ranked` unchanged when the
    /// reranker is cooling down or fails.
    pub(crate) async fn rerank(
        &self,
        query: &str,
        mut ranked: Vec<RecalledFragment>,
    ) -> Vec<RecalledFragment> {
        if ranked.len() < 2 {
            return ranked;
        }
        if self.breaker.is_open() {
            CALLS.with_label_values(&["skipped"]).inc();
            return ranked;
        }
        let head_len = ranked.len().min(self.settings.candidates);
        let texts: Vec<&str> = ranked[..head_len]
            .iter()
            .map(|f| f.content.as_str())
            .collect();
        match self.scores(query, &texts).await {
            Ok(scores) => {
                self.record(true);
                CALLS.with_label_values(&["ok"]).inc();
                ranked.truncate(head_len);
                let mut scored: Vec<(f64, RecalledFragment)> =
                    scores.into_iter().zip(ranked).collect();
                // Stable: equal scores keep the fused order.
                scored.sort_by(|a, b| b.0.total_cmp(&a.0));
                scored
                    .into_iter()
                    .take(self.settings.keep)
                    .map(|(score, mut fragment)| {
                        fragment.score = score;
                        fragment.explanations.push(RERANKED.into());
                        fragment
                    })
                    .collect()
            }
            Err(error) => {
                self.record(false);
                CALLS.with_label_values(&["error"]).inc();
                tracing::warn!(%error, "reranker failed; keeping the fused order");
                ranked
            }
        }
    }

    async fn scores(&self, query: &str, texts: &[&str]) -> Result<Vec<f64>, String> {
        let mut request = self.client.post(&self.endpoint).json(&RerankRequest {
            query,
            texts,
            documents: texts,
            truncate: true,
        });
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
        let body: RerankResponse = response
            .json()
            .await
            .map_err(|e| e.without_url().to_string())?;
        body.into_scores(texts.len())
            .ok_or_else(|| "the answer does not score every text".to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str, count: usize) -> Option<Vec<f64>> {
        serde_json::from_str::<RerankResponse>(json)
            .ok()?
            .into_scores(count)
    }

    #[test]
    fn every_supported_answer_shape_gives_scores_in_input_order() {
        let tei = r#"[{"index":1,"score":0.9},{"index":0,"score":0.1}]"#;
        assert_eq!(parse(tei, 2), Some(vec![0.1, 0.9]));
        assert_eq!(parse(r#"{"scores":[0.3,0.7]}"#, 2), Some(vec![0.3, 0.7]));
        let cohere =
            r#"{"results":[{"index":0,"relevance_score":0.5},{"index":1,"relevance_score":0.2}]}"#;
        assert_eq!(parse(cohere, 2), Some(vec![0.5, 0.2]));
    }

    #[test]
    fn answers_that_miss_or_invent_texts_are_rejected() {
        assert_eq!(parse(r#"[{"index":0,"score":0.9}]"#, 2), None);
        assert_eq!(
            parse(r#"[{"index":5,"score":0.9},{"index":0,"score":0.1}]"#, 2),
            None
        );
        assert_eq!(parse(r#"{"scores":[0.3]}"#, 2), None);
        assert_eq!(parse(r#"{"error":"overloaded"}"#, 2), None);
    }
}
