//! Batch sizes of background workers that adapt to how the last batch
//! went: a batch that ran out of time (a slow provider, a loaded
//! database) halves the next one, down to one item, and every batch that
//! succeeds grows it by half back towards the configured size. Without
//! this a batch that misses its deadline would be retried whole, and miss
//! it again, for ever.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// An adaptive batch size, shared by the clones of a worker.
#[derive(Debug, Clone)]
pub struct AdaptiveBatchSize {
    max: usize,
    current: Arc<AtomicUsize>,
}

impl AdaptiveBatchSize {
    /// Starts at `max` (at least one).
    pub fn new(max: usize) -> Self {
        let max = max.max(1);
        Self {
            max,
            current: Arc::new(AtomicUsize::new(max)),
        }
    }

    /// The size the next batch takes.
    pub fn current(&self) -> usize {
        self.current.load(Ordering::Relaxed)
    }

    /// After a batch of `used` items succeeded: grows by half, up to the
    /// configured size. Returns the next size.
    pub fn succeeded(&self, used: usize) -> usize {
        self.set((used + used.div_ceil(2)).min(self.max))
    }

    /// After a batch of `used` items ran out of time: halves, down to one.
    /// Returns the next size.
    pub fn timed_out(&self, used: usize) -> usize {
        self.set((used / 2).max(1))
    }

    fn set(&self, next: usize) -> usize {
        self.current.store(next, Ordering::Relaxed);
        next
    }
}

#[cfg(test)]
mod tests {
    use super::AdaptiveBatchSize;

    #[test]
    fn halves_down_to_one_and_grows_back_to_the_configured_size() {
        let size = AdaptiveBatchSize::new(500);
        assert_eq!(size.current(), 500);
        assert_eq!(size.timed_out(500), 250);
        assert_eq!(size.timed_out(1), 1);
        assert_eq!(size.succeeded(1), 2);
        assert_eq!(size.succeeded(250), 375);
        assert_eq!(size.succeeded(375), 500);
        assert_eq!(size.clone().current(), 500, "clones share the size");
        assert_eq!(AdaptiveBatchSize::new(0).current(), 1);
    }
}
