//! Running an in-process model (e5, MiniLM) on the blocking thread pool.
//!
//! Two properties matter more than raw speed here:
//! - **An abandoned call stops.** The guard's deadline drops the caller's
//!   future, but a blocking task cannot be cancelled: without a check it
//!   would go on computing (and holding the model's lock) for nobody, and
//!   every retry would queue another such task behind it. On a loaded
//!   machine that is a spiral in which no call meets its deadline again.
//!   The task therefore checks between chunks whether its caller is still
//!   there, and gives up if not.
//! - **Queries do not wait behind a whole passage batch.** The lock is taken
//!   per chunk of [`CHUNK_TEXTS`] texts, so a recall's query embedding
//!   waits for at most one chunk of the embedding worker's batch.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::{Mutex, MutexGuard};

use crate::{EmbedError, TextKind};

/// Texts embedded under one hold of the model's lock. Small enough that a
/// query waits well under a second behind a chunk of long passages on two
/// cores, large enough that the engine still batches.
pub const CHUNK_TEXTS: usize = 8;

/// Sets its flag when dropped: the caller's future is gone.
struct AbandonOnDrop(Arc<AtomicBool>);

impl Drop for AbandonOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Embeds `texts` with `model`, chunk by chunk, on the blocking pool.
pub async fn embed_in_chunks<M, F>(
    model: &Arc<Mutex<M>>,
    texts: &[String],
    kind: TextKind,
    embed: F,
) -> Result<Vec<Vec<f32>>, EmbedError>
where
    M: Send + 'static,
    F: Fn(&mut M, &[String], TextKind) -> Result<Vec<Vec<f32>>, EmbedError> + Send + 'static,
{
    let abandoned = Arc::new(AtomicBool::new(false));
    let _guard = AbandonOnDrop(Arc::clone(&abandoned));
    let model = Arc::clone(model);
    let texts = texts.to_vec();
    tokio::task::spawn_blocking(move || {
        let mut vectors = Vec::with_capacity(texts.len());
        for chunk in texts.chunks(CHUNK_TEXTS) {
            if abandoned.load(Ordering::Relaxed) {
                return Err(EmbedError::Unavailable(
                    "the caller stopped waiting for this embedding".into(),
                ));
            }
            let mut model = model.lock();
            let embedded = embed(&mut model, chunk, kind);
            // Hand the lock straight to a waiting query rather than barging
            // back in for the next chunk.
            MutexGuard::unlock_fair(model);
            vectors.extend(embedded?);
        }
        Ok(vectors)
    })
    .await
    .map_err(|e| EmbedError::Failed(format!("embedding task failed: {e}")))?
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// Counts the chunks it embeds and takes 50 ms for each.
    #[derive(Default)]
    struct SlowModel {
        chunks: usize,
    }

    fn slow_embed(
        model: &mut SlowModel,
        texts: &[String],
        _: TextKind,
    ) -> Result<Vec<Vec<f32>>, EmbedError> {
        std::thread::sleep(Duration::from_millis(50));
        model.chunks += 1;
        Ok(texts.iter().map(|t| vec![t.len() as f32]).collect())
    }

    fn texts(n: usize) -> Vec<String> {
        (0..n).map(|i| "x".repeat(i + 1)).collect()
    }

    #[tokio::test]
    async fn all_chunks_come_back_in_order() {
        let model = Arc::new(Mutex::new(SlowModel::default()));
        let vectors = embed_in_chunks(&model, &texts(20), TextKind::Passage, slow_embed)
            .await
            .unwrap();
        let lengths: Vec<f32> = vectors.iter().map(|v| v[0]).collect();
        assert_eq!(lengths, (1..=20).map(|n| n as f32).collect::<Vec<_>>());
        assert_eq!(model.lock().chunks, 20usize.div_ceil(CHUNK_TEXTS));
    }

    #[tokio::test]
    async fn an_abandoned_call_stops_after_the_chunk_in_progress() {
        let model = Arc::new(Mutex::new(SlowModel::default()));
        let many = texts(CHUNK_TEXTS * 20);
        let call = embed_in_chunks(&model, &many, TextKind::Passage, slow_embed);
        assert!(
            tokio::time::timeout(Duration::from_millis(120), call)
                .await
                .is_err()
        );
        // Give the blocking task time to notice; twenty chunks would take 1 s.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let chunks = model.lock().chunks;
        assert!(chunks <= 4, "the abandoned call went on: {chunks} chunks");
    }

    #[tokio::test]
    async fn a_query_waits_for_one_chunk_not_for_a_whole_batch() {
        let model = Arc::new(Mutex::new(SlowModel::default()));
        let batch = {
            let model = Arc::clone(&model);
            tokio::spawn(async move {
                embed_in_chunks(
                    &model,
                    &texts(CHUNK_TEXTS * 10),
                    TextKind::Passage,
                    slow_embed,
                )
                .await
            })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        let started = std::time::Instant::now();
        embed_in_chunks(&model, &texts(1), TextKind::Query, slow_embed)
            .await
            .unwrap();
        // The whole batch takes 500 ms; the query gets in between chunks.
        assert!(started.elapsed() < Duration::from_millis(400));
        batch.await.unwrap().unwrap();
    }
}
