//! Embedding-call hardening, the same for every provider: a per-call
//! deadline (short for queries, which someone waits on; long for passages,
//! which only the background worker embeds), a process-wide limit on calls in flight with a bounded wait for
//! a slot, and Prometheus metrics.
//!
//! Without the limit a slow provider turns every recall into a waiter and
//! the process's whole request queue grows behind it; without the bounded
//! wait callers would queue for the slot instead. Both failures surface as
//! [`EmbedError::Unavailable`], which recall answers with its lexical layers
//! and the embedding worker answers by retrying later.

use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use mneme_telemetry::metrics::register;
use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, IntGauge, Opts};
use tokio::sync::Semaphore;

use crate::{EmbedError, Embedder, TextKind};

struct Metrics {
    calls: IntCounterVec,
    texts: IntCounterVec,
    seconds: HistogramVec,
    in_flight: IntGauge,
}

static METRICS: LazyLock<Metrics> = LazyLock::new(|| Metrics {
    calls: register(
        IntCounterVec::new(
            Opts::new(
                "mneme_embedding_calls_total",
                "Embedding calls by text kind and outcome (ok, error, timeout, queue_full).",
            ),
            &["kind", "outcome"],
        )
        .expect("valid metric"),
    ),
    texts: register(
        IntCounterVec::new(
            Opts::new(
                "mneme_embedding_texts_total",
                "Texts embedded successfully, by text kind.",
            ),
            &["kind"],
        )
        .expect("valid metric"),
    ),
    seconds: register(
        HistogramVec::new(
            HistogramOpts::new(
                "mneme_embedding_call_seconds",
                "Duration of embedding calls that got a slot, by text kind.",
            )
            .buckets(vec![
                0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
            ]),
            &["kind"],
        )
        .expect("valid metric"),
    ),
    in_flight: register(
        IntGauge::new(
            "mneme_embedding_in_flight",
            "Embedding calls holding a slot now.",
        )
        .expect("valid metric"),
    ),
});

fn kind_label(kind: TextKind) -> &'static str {
    match kind {
        TextKind::Query => "query",
        TextKind::Passage => "passage",
    }
}

/// Limits for [`Guarded`].
#[derive(Debug, Clone, Copy)]
pub struct GuardLimits {
    pub query_timeout: Duration,
    pub passage_timeout: Duration,
    pub concurrency: usize,
    pub queue_wait: Duration,
}

/// Wraps a provider with the limits of [`GuardLimits`] and records metrics.
#[derive(Debug)]
pub struct Guarded {
    inner: Arc<dyn Embedder>,
    slots: Semaphore,
    limits: GuardLimits,
}

impl Guarded {
    pub fn new(inner: Arc<dyn Embedder>, limits: GuardLimits) -> Self {
        Self {
            inner,
            slots: Semaphore::new(limits.concurrency.max(1)),
            limits,
        }
    }
}

#[async_trait::async_trait]
impl Embedder for Guarded {
    fn model_id(&self) -> &str {
        self.inner.model_id()
    }

    fn dimension(&self) -> usize {
        self.inner.dimension()
    }

    async fn embed(&self, texts: &[String], kind: TextKind) -> Result<Vec<Vec<f32>>, EmbedError> {
        let metrics = &*METRICS;
        let label = kind_label(kind);
        // Tokio's semaphore is fair, so waiting callers are served in order.
        let Ok(Ok(_slot)) =
            tokio::time::timeout(self.limits.queue_wait, self.slots.acquire()).await
        else {
            metrics
                .calls
                .with_label_values(&[label, "queue_full"])
                .inc();
            return Err(EmbedError::Unavailable(format!(
                "all {} embedding slots stayed busy for {} ms",
                self.limits.concurrency,
                self.limits.queue_wait.as_millis()
            )));
        };
        metrics.in_flight.inc();
        let deadline = match kind {
            TextKind::Query => self.limits.query_timeout,
            TextKind::Passage => self.limits.passage_timeout,
        };
        let started = Instant::now();
        let outcome = tokio::time::timeout(deadline, self.inner.embed(texts, kind)).await;
        metrics.in_flight.dec();
        metrics
            .seconds
            .with_label_values(&[label])
            .observe(started.elapsed().as_secs_f64());
        match outcome {
            Ok(Ok(vectors)) => {
                metrics.calls.with_label_values(&[label, "ok"]).inc();
                metrics
                    .texts
                    .with_label_values(&[label])
                    .inc_by(texts.len() as u64);
                Ok(vectors)
            }
            Ok(Err(error)) => {
                metrics.calls.with_label_values(&[label, "error"]).inc();
                Err(error)
            }
            Err(_) => {
                metrics.calls.with_label_values(&[label, "timeout"]).inc();
                Err(EmbedError::Unavailable(format!(
                    "embedding call exceeded its {} ms deadline",
                    deadline.as_millis()
                )))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sleeps for as long as the text says, in milliseconds.
    #[derive(Debug)]
    struct Sleeper;

    #[async_trait::async_trait]
    impl Embedder for Sleeper {
        fn model_id(&self) -> &str {
            "sleeper"
        }
        fn dimension(&self) -> usize {
            1
        }
        async fn embed(&self, texts: &[String], _: TextKind) -> Result<Vec<Vec<f32>>, EmbedError> {
            let millis: u64 = texts[0].parse().expect("a number of milliseconds");
            tokio::time::sleep(Duration::from_millis(millis)).await;
            Ok(vec![vec![1.0]; texts.len()])
        }
    }

    fn guarded(concurrency: usize) -> Arc<Guarded> {
        Arc::new(Guarded::new(
            Arc::new(Sleeper),
            GuardLimits {
                query_timeout: Duration::from_millis(200),
                passage_timeout: Duration::from_millis(2000),
                concurrency,
                queue_wait: Duration::from_millis(100),
            },
        ))
    }

    fn count(kind: &str, outcome: &str) -> u64 {
        METRICS.calls.with_label_values(&[kind, outcome]).get()
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_past_its_deadline_is_unavailable() {
        let before = count("query", "timeout");
        let error = guarded(1)
            .embed(&["1000".into()], TextKind::Query)
            .await
            .unwrap_err();
        assert!(matches!(error, EmbedError::Unavailable(_)), "{error}");
        assert_eq!(count("query", "timeout"), before + 1);
        assert!(
            guarded(1)
                .embed(&["10".into()], TextKind::Query)
                .await
                .is_ok()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn passages_get_the_longer_deadline() {
        let embedder = guarded(1);
        assert!(
            embedder
                .embed(&["1000".into()], TextKind::Passage)
                .await
                .is_ok(),
            "a passage batch may take longer than a query"
        );
        let before = count("passage", "timeout");
        let error = embedder
            .embed(&["3000".into()], TextKind::Passage)
            .await
            .unwrap_err();
        assert!(error.to_string().contains("2000 ms"), "{error}");
        assert_eq!(count("passage", "timeout"), before + 1);
    }

    #[tokio::test(start_paused = true)]
    async fn callers_wait_for_a_slot_only_as_long_as_allowed() {
        let embedder = guarded(1);
        let busy = tokio::spawn({
            let embedder = Arc::clone(&embedder);
            async move { embedder.embed(&["150".into()], TextKind::Passage).await }
        });
        tokio::task::yield_now().await;
        let before = count("passage", "queue_full");
        // The slot stays busy for 150 ms; this caller may wait 100 ms.
        let error = embedder
            .embed(&["1".into()], TextKind::Passage)
            .await
            .unwrap_err();
        assert!(error.to_string().contains("slots stayed busy"), "{error}");
        assert_eq!(count("passage", "queue_full"), before + 1);
        assert!(busy.await.expect("joined").is_ok());
        // Freed: the next caller gets the slot at once.
        assert!(
            embedder
                .embed(&["1".into()], TextKind::Passage)
                .await
                .is_ok()
        );
    }
}
