//! A three-state circuit breaker with a **single** half-open
//! probe (the reference let every concurrent caller probe a recovering
//! service at once).
//!
//! Closed: calls pass; the `failures_to_open`-th consecutive failure opens
//! the breaker. Open: calls are refused until `reset_ms` has elapsed.
//! Half-open: the first caller is admitted as the probe and everyone else is
//! refused until the probe reports; success closes the breaker, failure
//! opens it for another `reset_ms`. A probe that never reports (its caller
//! was cancelled) expires after `reset_ms`, so the breaker cannot stick.
//!
//! The struct is plain data with no lock and no clock: callers keep one per
//! (tenant, upstream) inside a `Mutex` and pass `now_ms`.

/// The breaker's state as seen at a given time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    /// Calls pass.
    Closed,
    /// Calls are refused until the reset time.
    Open,
    /// The reset time has passed; one probe decides.
    HalfOpen,
}

/// The answer to "may this call go ahead?".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// The breaker is closed.
    Yes,
    /// This caller is the single half-open probe and must report its outcome.
    Probe,
    /// Refused (open, or another probe is in flight).
    No,
}

/// See the module documentation.
#[derive(Debug, Clone)]
pub struct Breaker {
    failures_to_open: u32,
    reset_ms: u64,
    consecutive_failures: u32,
    open_until_ms: Option<u64>,
    probe_started_ms: Option<u64>,
}

impl Breaker {
    /// A closed breaker; `failures_to_open` of 0 is treated as 1.
    pub fn new(failures_to_open: u32, reset_ms: u64) -> Self {
        Self {
            failures_to_open: failures_to_open.max(1),
            reset_ms,
            consecutive_failures: 0,
            open_until_ms: None,
            probe_started_ms: None,
        }
    }

    /// The state at `now_ms`; reading changes nothing.
    pub fn state(&self, now_ms: u64) -> BreakerState {
        match (self.open_until_ms, self.probe_started_ms) {
            (_, Some(_)) => BreakerState::HalfOpen,
            (Some(until), None) if now_ms < until => BreakerState::Open,
            (Some(_), None) => BreakerState::HalfOpen,
            (None, None) => BreakerState::Closed,
        }
    }

    /// Decides whether a call may start at `now_ms`. In half-open state the
    /// first caller gets [`Admit::Probe`] and the others [`Admit::No`] until
    /// the probe reports (or its lease of `reset_ms` runs out).
    pub fn admit(&mut self, now_ms: u64) -> Admit {
        match self.state(now_ms) {
            BreakerState::Closed => Admit::Yes,
            BreakerState::Open => Admit::No,
            BreakerState::HalfOpen => {
                let probe_alive = self
                    .probe_started_ms
                    .is_some_and(|started| now_ms.saturating_sub(started) < self.reset_ms);
                if probe_alive {
                    Admit::No
                } else {
                    self.probe_started_ms = Some(now_ms);
                    Admit::Probe
                }
            }
        }
    }

    /// Records the outcome of an admitted call. While a probe is in flight
    /// the report is the probe's: success closes, failure reopens for
    /// `reset_ms`. Late reports of calls admitted before the breaker opened
    /// are ignored while it is open, so they cannot skip the probe.
    pub fn record(&mut self, ok: bool, now_ms: u64) {
        if self.probe_started_ms.take().is_some() {
            if ok {
                self.close();
            } else {
                self.open(now_ms);
            }
            return;
        }
        if self.open_until_ms.is_some() {
            return;
        }
        if ok {
            self.consecutive_failures = 0;
            return;
        }
        self.consecutive_failures += 1;
        if self.consecutive_failures >= self.failures_to_open {
            self.open(now_ms);
        }
    }

    fn open(&mut self, now_ms: u64) {
        self.consecutive_failures = 0;
        self.open_until_ms = Some(now_ms.saturating_add(self.reset_ms));
    }

    fn close(&mut self) {
        self.consecutive_failures = 0;
        self.open_until_ms = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RESET: u64 = 60_000;

    fn opened_at(t: u64) -> Breaker {
        let mut breaker = Breaker::new(3, RESET);
        for _ in 0..3 {
            breaker.record(false, t);
        }
        breaker
    }

    #[test]
    fn opens_on_the_nth_consecutive_failure() {
        let mut breaker = Breaker::new(3, RESET);
        breaker.record(false, 0);
        breaker.record(false, 1);
        assert_eq!(breaker.state(2), BreakerState::Closed);
        assert_eq!(breaker.admit(2), Admit::Yes);
        breaker.record(false, 2);
        assert_eq!(breaker.state(2), BreakerState::Open);
        assert_eq!(breaker.admit(3), Admit::No);
    }

    #[test]
    fn a_success_resets_the_failure_count() {
        let mut breaker = Breaker::new(3, RESET);
        breaker.record(false, 0);
        breaker.record(false, 1);
        breaker.record(true, 2);
        breaker.record(false, 3);
        breaker.record(false, 4);
        assert_eq!(breaker.state(5), BreakerState::Closed);
    }

    #[test]
    fn stays_open_until_reset_then_admits_a_single_probe() {
        let mut breaker = opened_at(1_000);
        assert_eq!(breaker.state(1_000 + RESET - 1), BreakerState::Open);
        assert_eq!(breaker.admit(1_000 + RESET - 1), Admit::No);
        assert_eq!(breaker.state(1_000 + RESET), BreakerState::HalfOpen);
        assert_eq!(breaker.admit(1_000 + RESET), Admit::Probe);
        assert_eq!(breaker.admit(1_000 + RESET), Admit::No);
        assert_eq!(breaker.admit(1_000 + RESET + 10), Admit::No);
        assert_eq!(breaker.state(1_000 + RESET + 10), BreakerState::HalfOpen);
    }

    #[test]
    fn reading_the_state_changes_nothing() {
        let breaker = opened_at(0);
        assert_eq!(breaker.state(RESET), BreakerState::HalfOpen);
        let mut breaker = breaker;
        assert_eq!(breaker.admit(RESET), Admit::Probe);
    }

    #[test]
    fn probe_success_closes() {
        let mut breaker = opened_at(0);
        assert_eq!(breaker.admit(RESET), Admit::Probe);
        breaker.record(true, RESET + 5);
        assert_eq!(breaker.state(RESET + 5), BreakerState::Closed);
        assert_eq!(breaker.admit(RESET + 6), Admit::Yes);
        // The failure count starts from zero again.
        breaker.record(false, RESET + 7);
        breaker.record(false, RESET + 8);
        assert_eq!(breaker.state(RESET + 9), BreakerState::Closed);
    }

    #[test]
    fn probe_failure_reopens_for_a_full_reset() {
        let mut breaker = opened_at(0);
        assert_eq!(breaker.admit(RESET), Admit::Probe);
        breaker.record(false, RESET + 100);
        assert_eq!(breaker.state(RESET + 100), BreakerState::Open);
        assert_eq!(breaker.admit(2 * RESET + 99), Admit::No);
        assert_eq!(breaker.admit(2 * RESET + 100), Admit::Probe);
    }

    #[test]
    fn a_lost_probe_expires_after_reset() {
        let mut breaker = opened_at(0);
        assert_eq!(breaker.admit(RESET), Admit::Probe);
        assert_eq!(breaker.admit(2 * RESET - 1), Admit::No);
        assert_eq!(breaker.admit(2 * RESET), Admit::Probe);
    }

    #[test]
    fn late_reports_while_open_are_ignored() {
        let mut breaker = opened_at(0);
        breaker.record(true, 10);
        assert_eq!(breaker.state(10), BreakerState::Open);
        breaker.record(false, RESET - 1);
        assert_eq!(breaker.admit(RESET), Admit::Probe);
    }

    #[test]
    fn zero_failures_to_open_means_one() {
        let mut breaker = Breaker::new(0, RESET);
        breaker.record(false, 0);
        assert_eq!(breaker.state(0), BreakerState::Open);
    }
}
