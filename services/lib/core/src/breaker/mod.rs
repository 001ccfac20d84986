//! A circuit breaker for optional outside services (the reranker, language
//! models): after `failures_to_open` consecutive failures it opens for
//! `cooldown`, during which callers skip the service; the first call after
//! the cooldown tries again, and one success closes it.
//!
//! [`probe`] holds the stricter three-state [`Breaker`] with a single
//! half-open probe, as plain data without lock or clock, for callers that
//! keep one per (tenant, dependency): surfacing's recall and the proxy's
//! upstreams.

pub mod probe;

pub use probe::{Admit, Breaker, BreakerState};

use std::sync::Mutex;
use std::time::{Duration, Instant};

#[derive(Debug, Default)]
struct State {
    consecutive_failures: u32,
    open_until: Option<Instant>,
}

/// Shared by all callers of one service; cheap to check.
#[derive(Debug)]
pub struct CircuitBreaker {
    failures_to_open: u32,
    cooldown: Duration,
    state: Mutex<State>,
}

impl CircuitBreaker {
    pub fn new(failures_to_open: u32, cooldown: Duration) -> Self {
        Self {
            failures_to_open: failures_to_open.max(1),
            cooldown,
            state: Mutex::new(State::default()),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// True while the service should be left alone.
    pub fn is_open(&self) -> bool {
        self.state()
            .open_until
            .is_some_and(|until| Instant::now() < until)
    }

    /// Records a call's outcome; returns true when this failure opened the
    /// breaker (for a log line).
    pub fn record(&self, ok: bool) -> bool {
        let mut state = self.state();
        if ok {
            *state = State::default();
            return false;
        }
        state.consecutive_failures += 1;
        if state.consecutive_failures < self.failures_to_open {
            return false;
        }
        state.consecutive_failures = 0;
        state.open_until = Some(Instant::now() + self.cooldown);
        true
    }

    pub fn cooldown(&self) -> Duration {
        self.cooldown
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consecutive_failures_open_it_and_a_success_resets_the_count() {
        let breaker = CircuitBreaker::new(3, Duration::from_secs(60));
        assert!(!breaker.record(false));
        assert!(!breaker.record(false));
        assert!(!breaker.record(true), "a success resets the count");
        assert!(!breaker.record(false) && !breaker.record(false));
        assert!(!breaker.is_open());
        assert!(breaker.record(false), "the third failure in a row opens it");
        assert!(breaker.is_open());
    }

    #[test]
    fn it_closes_again_after_the_cooldown() {
        let breaker = CircuitBreaker::new(1, Duration::ZERO);
        assert!(breaker.record(false));
        assert!(!breaker.is_open(), "a zero cooldown ends at once");
    }
}
