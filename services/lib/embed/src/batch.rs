//! Micro-batching of query embeddings.
//!
//! Every recall embeds its query: one short text. Under concurrent load the
//! in-process engines serialise those calls on the model lock, and an engine
//! call with one text wastes most of what a batched call shares (the weights
//! stream through the cache once per call, not once per text). The
//! [`QueryBatcher`] hands concurrent query calls to one task that embeds
//! whatever is waiting in a single provider call and gives each caller its
//! own vectors back.
//!
//! - **No added wait.** The task never holds a query back to fill a batch:
//!   a lone query goes on at once, and batches form only from the queries
//!   that arrived while the previous call was running. An idle process
//!   answers exactly as without the batcher.
//! - **Abandoned queries cost nothing.** A caller whose deadline passed (the
//!   guard drops its future) is skipped before its batch is embedded, and a
//!   batch whose callers have all gone is dropped mid-call, which stops the
//!   in-process engines between chunks (see [`crate::local`]).
//! - **Passages go straight through.** The embedding worker already sends
//!   its fragments in batches, and a query must not wait behind one.
//!
//! Batch size is bounded by `MNEME_EMBED_QUERY_BATCH` and, since the batcher
//! sits inside the [`crate::guard`], by the callers holding one of the
//! `MNEME_EMBED_CONCURRENCY` slots.

use std::sync::{Arc, LazyLock, OnceLock};

use mneme_telemetry::metrics::register;
use prometheus::{Histogram, HistogramOpts};
use tokio::sync::{mpsc, oneshot};

use crate::{EmbedError, Embedder, TextKind};

static BATCH_TEXTS: LazyLock<Histogram> = LazyLock::new(|| {
    register(
        Histogram::with_opts(
            HistogramOpts::new(
                "mneme_embedding_query_batch_texts",
                "Query texts per provider call made by the query batcher.",
            )
            .buckets(vec![1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 32.0, 64.0]),
        )
        .expect("valid metric"),
    )
});

type Reply = oneshot::Sender<Result<Vec<Vec<f32>>, EmbedError>>;

/// One caller's query texts and where its vectors go.
struct Waiting {
    texts: Vec<String>,
    reply: Reply,
}

/// Embeds concurrent query calls together (see the module docs).
#[derive(Debug)]
pub struct QueryBatcher {
    inner: Arc<dyn Embedder>,
    max_texts: usize,
    /// The batching task's queue; the task starts with the first query, so
    /// the batcher can be built outside a runtime.
    queue: OnceLock<mpsc::UnboundedSender<Waiting>>,
}

impl QueryBatcher {
    /// Batches up to `max_texts` query texts per call of `inner`; 1 turns
    /// batching off.
    pub fn new(inner: Arc<dyn Embedder>, max_texts: usize) -> Self {
        Self {
            inner,
            max_texts: max_texts.max(1),
            queue: OnceLock::new(),
        }
    }

    fn queue(&self) -> &mpsc::UnboundedSender<Waiting> {
        self.queue.get_or_init(|| {
            let (sender, receiver) = mpsc::unbounded_channel();
            tokio::spawn(run(Arc::clone(&self.inner), self.max_texts, receiver));
            sender
        })
    }
}

#[async_trait::async_trait]
impl Embedder for QueryBatcher {
    fn model_id(&self) -> &str {
        self.inner.model_id()
    }

    fn dimension(&self) -> usize {
        self.inner.dimension()
    }

    async fn embed(&self, texts: &[String], kind: TextKind) -> Result<Vec<Vec<f32>>, EmbedError> {
        if kind == TextKind::Passage || self.max_texts == 1 || texts.is_empty() {
            return self.inner.embed(texts, kind).await;
        }
        let (reply, answer) = oneshot::channel();
        let waiting = Waiting {
            texts: texts.to_vec(),
            reply,
        };
        if self.queue().send(waiting).is_err() {
            // The task is gone (it only ends if a provider call panicked):
            // embed directly rather than fail every later recall.
            return self.inner.embed(texts, kind).await;
        }
        answer.await.unwrap_or_else(|_| {
            Err(EmbedError::Failed(
                "the query batcher stopped before answering".into(),
            ))
        })
    }
}

/// The batching task: takes the first waiting query, adds every other one
/// already queued (up to `max_texts` texts), embeds them in one call and
/// answers each caller. Ends when the batcher is dropped.
async fn run(
    inner: Arc<dyn Embedder>,
    max_texts: usize,
    mut queue: mpsc::UnboundedReceiver<Waiting>,
) {
    let mut carried: Option<Waiting> = None;
    loop {
        let first = match carried.take() {
            Some(waiting) => waiting,
            None => match queue.recv().await {
                Some(waiting) => waiting,
                None => return,
            },
        };
        let mut texts = first.texts.len();
        let mut batch = vec![first];
        while texts < max_texts {
            match queue.try_recv() {
                Ok(next) if texts + next.texts.len() <= max_texts => {
                    texts += next.texts.len();
                    batch.push(next);
                }
                Ok(next) => {
                    carried = Some(next);
                    break;
                }
                Err(_) => break,
            }
        }
        batch.retain(|waiting| !waiting.reply.is_closed());
        if !batch.is_empty() {
            embed_batch(&*inner, batch).await;
        }
    }
}

/// Embeds the texts of `batch` in one call and splits the vectors among the
/// callers, in order. Gives up as soon as every caller has gone.
async fn embed_batch(inner: &dyn Embedder, mut batch: Vec<Waiting>) {
    let texts: Vec<String> = batch
        .iter()
        .flat_map(|waiting| waiting.texts.iter().cloned())
        .collect();
    BATCH_TEXTS.observe(texts.len() as f64);
    let all_gone = futures::future::join_all(batch.iter_mut().map(|w| w.reply.closed()));
    let outcome = tokio::select! {
        outcome = inner.embed(&texts, TextKind::Query) => outcome,
        _ = all_gone => return,
    };
    match outcome {
        Ok(vectors) if vectors.len() == texts.len() => {
            let mut vectors = vectors.into_iter();
            for waiting in batch {
                let own = vectors.by_ref().take(waiting.texts.len()).collect();
                // A caller that has gone meanwhile simply gets nothing.
                let _ = waiting.reply.send(Ok(own));
            }
        }
        Ok(vectors) => {
            let error = EmbedError::Failed(format!(
                "the provider returned {} vectors for {} texts",
                vectors.len(),
                texts.len()
            ));
            answer_all(batch, &error);
        }
        Err(error) => answer_all(batch, &error),
    }
}

fn answer_all(batch: Vec<Waiting>, error: &EmbedError) {
    for waiting in batch {
        let _ = waiting.reply.send(Err(error.clone()));
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::Duration;

    use super::*;

    /// Records the texts of each call, takes 50 ms per call, and embeds a
    /// text as `[its length]`. A text `fail` fails its whole call.
    #[derive(Debug, Default)]
    struct Recorder {
        calls: Mutex<Vec<Vec<String>>>,
    }

    #[async_trait::async_trait]
    impl Embedder for Recorder {
        fn model_id(&self) -> &str {
            "recorder"
        }
        fn dimension(&self) -> usize {
            1
        }
        async fn embed(&self, texts: &[String], _: TextKind) -> Result<Vec<Vec<f32>>, EmbedError> {
            self.calls.lock().expect("unpoisoned").push(texts.to_vec());
            tokio::time::sleep(Duration::from_millis(50)).await;
            if texts.iter().any(|text| text == "fail") {
                return Err(EmbedError::Unavailable("told to fail".into()));
            }
            Ok(texts.iter().map(|text| vec![text.len() as f32]).collect())
        }
    }

    impl Recorder {
        fn calls(&self) -> Vec<Vec<String>> {
            self.calls.lock().expect("unpoisoned").clone()
        }
    }

    fn batcher(max_texts: usize) -> (Arc<Recorder>, Arc<QueryBatcher>) {
        let recorder = Arc::new(Recorder::default());
        let batcher = Arc::new(QueryBatcher::new(
            Arc::clone(&recorder) as Arc<dyn Embedder>,
            max_texts,
        ));
        (recorder, batcher)
    }

    fn query(batcher: &Arc<QueryBatcher>, texts: &[&str]) -> tokio::task::JoinHandle<Vec<f32>> {
        let batcher = Arc::clone(batcher);
        let texts: Vec<String> = texts.iter().map(|text| (*text).to_owned()).collect();
        tokio::spawn(async move {
            batcher
                .embed(&texts, TextKind::Query)
                .await
                .expect("embedded")
                .into_iter()
                .flatten()
                .collect()
        })
    }

    #[tokio::test(start_paused = true)]
    async fn queries_arriving_during_a_call_share_the_next_call_and_get_their_own_vectors() {
        let (recorder, batcher) = batcher(16);
        let lone = query(&batcher, &["a"]);
        tokio::time::sleep(Duration::from_millis(10)).await;
        // These three arrive while the lone query is being embedded.
        let second = query(&batcher, &["bb"]);
        let third = query(&batcher, &["ccc", "dddd"]);
        let fourth = query(&batcher, &["eeeee"]);
        assert_eq!(lone.await.expect("joined"), vec![1.0]);
        assert_eq!(second.await.expect("joined"), vec![2.0]);
        assert_eq!(third.await.expect("joined"), vec![3.0, 4.0]);
        assert_eq!(fourth.await.expect("joined"), vec![5.0]);
        assert_eq!(
            recorder.calls(),
            vec![vec!["a"], vec!["bb", "ccc", "dddd", "eeeee"]]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_batch_never_exceeds_its_size_and_the_rest_waits_for_the_next_call() {
        let (recorder, batcher) = batcher(3);
        let first = query(&batcher, &["a"]);
        tokio::time::sleep(Duration::from_millis(10)).await;
        let waiting: Vec<_> = ["b", "c", "d", "e"]
            .iter()
            .map(|text| query(&batcher, &[text]))
            .collect();
        first.await.expect("joined");
        for handle in waiting {
            handle.await.expect("joined");
        }
        assert_eq!(
            recorder.calls(),
            vec![vec!["a"], vec!["b", "c", "d"], vec!["e"]]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_call_fails_every_query_in_it_and_the_next_batch_is_unaffected() {
        let (_, batcher) = batcher(16);
        let blocker = query(&batcher, &["x"]);
        tokio::time::sleep(Duration::from_millis(10)).await;
        let doomed: Vec<_> = ["fail", "ok"]
            .iter()
            .map(|text| {
                let batcher = Arc::clone(&batcher);
                let text = (*text).to_owned();
                tokio::spawn(async move { batcher.embed(&[text], TextKind::Query).await })
            })
            .collect();
        blocker.await.expect("joined");
        for handle in doomed {
            let error = handle.await.expect("joined").unwrap_err();
            assert!(matches!(error, EmbedError::Unavailable(_)), "{error}");
        }
        assert_eq!(query(&batcher, &["fine"]).await.expect("joined"), vec![4.0]);
    }

    #[tokio::test(start_paused = true)]
    async fn callers_that_gave_up_are_not_embedded() {
        let (recorder, batcher) = batcher(16);
        let blocker = query(&batcher, &["x"]);
        tokio::time::sleep(Duration::from_millis(10)).await;
        let impatient = {
            let batcher = Arc::clone(&batcher);
            tokio::spawn(async move {
                tokio::time::timeout(
                    Duration::from_millis(5),
                    batcher.embed(&["gone".into()], TextKind::Query),
                )
                .await
            })
        };
        let patient = query(&batcher, &["here"]);
        assert!(impatient.await.expect("joined").is_err(), "timed out");
        blocker.await.expect("joined");
        assert_eq!(patient.await.expect("joined"), vec![4.0]);
        assert_eq!(recorder.calls(), vec![vec!["x"], vec!["here"]]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_whose_callers_all_gave_up_stops_and_the_next_query_starts_at_once() {
        let (recorder, batcher) = batcher(16);
        let started = tokio::time::Instant::now();
        let gave_up = tokio::time::timeout(
            Duration::from_millis(10),
            batcher.embed(&["gone".into()], TextKind::Query),
        )
        .await;
        assert!(gave_up.is_err(), "timed out");
        assert_eq!(query(&batcher, &["next"]).await.expect("joined"), vec![4.0]);
        // 10 ms of the abandoned call, then the 50 ms of this one; had the
        // abandoned call run to its end, the next would finish at 100 ms.
        assert_eq!(started.elapsed(), Duration::from_millis(60));
        assert_eq!(recorder.calls(), vec![vec!["gone"], vec!["next"]]);
    }

    #[tokio::test(start_paused = true)]
    async fn passages_and_a_batch_size_of_one_bypass_the_batcher() {
        let (recorder, batcher) = batcher(1);
        let handles: Vec<_> = ["a", "b"].iter().map(|t| query(&batcher, &[t])).collect();
        for handle in handles {
            handle.await.expect("joined");
        }
        let (passages, batching) = self::batcher(16);
        let texts = vec!["p".to_owned(), "q".to_owned()];
        batching
            .embed(&texts, TextKind::Passage)
            .await
            .expect("embedded");
        let mut calls = recorder.calls();
        calls.sort();
        assert_eq!(calls, vec![vec!["a"], vec!["b"]]);
        assert_eq!(passages.calls(), vec![vec!["p", "q"]]);
        assert!(batching.queue.get().is_none(), "no batching task started");
    }
}
