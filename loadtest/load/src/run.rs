//! Driving a workload: open loop (requests on a fixed schedule, whatever
//! the server does) or closed loop (N workers, each sending its next
//! request when the previous one is answered), a warm-up that is not
//! counted, a measured window, and a progress line once a second.
//!
//! Open-loop latency is measured from the moment a request was *due*, not
//! from when it was sent: when the server (or this generator's in-flight
//! cap) falls behind, the waiting counts as latency, as it would for a
//! real client. Measuring from the send would hide exactly the stalls a
//! load test is for ("coordinated omission").

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::mcp::{ErrorKind, Failure};
use crate::stats::OperationStats;

/// A successful request.
#[derive(Debug, Clone, Copy, Default)]
pub struct Success {
    /// The answer carried surfaced memories (`surfacing` only).
    pub surfaced: bool,
    /// When the answer came, if the request went on with unmeasured work
    /// afterwards (`connect-storm` closes its session); else the latency
    /// ends when the request returns.
    pub answered_at: Option<Instant>,
}

/// Latency of a request that started (or was due) at `from`.
fn latency_since(from: Instant, result: &Result<Success, Failure>) -> Duration {
    match result {
        Ok(Success {
            answered_at: Some(answered),
            ..
        }) => answered.saturating_duration_since(from),
        _ => from.elapsed(),
    }
}

/// What the runner drives: request `seq` is an `operation(seq)`, performed
/// by virtual client `client`.
pub trait Workload: Send + Sync + 'static {
    /// The operation's name in the report; a pure function of `seq`, so a
    /// request that timed out is still counted under its operation.
    fn operation(&self, seq: u64) -> &'static str;

    fn execute(
        &self,
        client: usize,
        seq: u64,
    ) -> impl Future<Output = Result<Success, Failure>> + Send;
}

/// How hard to push.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Load {
    /// `rate` requests per second on a fixed schedule, at most
    /// `max_in_flight` outstanding.
    Open { rate: f64, max_in_flight: usize },
    /// `concurrency` workers, each with one request outstanding.
    Closed { concurrency: usize },
}

/// A run's shape.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    pub load: Load,
    /// Virtual clients; request `seq` (open loop) or worker `w` (closed
    /// loop) uses client `seq % clients` or `w % clients`.
    pub clients: usize,
    pub warmup: Duration,
    pub duration: Duration,
    /// A request without an answer after this long is a `timeout`.
    pub timeout: Duration,
    /// Print a progress line on stderr every second.
    pub progress: bool,
}

/// What a run measured.
#[derive(Debug, Clone, Default)]
pub struct Measured {
    /// Requests started during the warm-up (not in `operations`).
    pub warmup_requests: u64,
    pub warmup_errors: u64,
    /// Requests started in the measured window, by operation.
    pub operations: BTreeMap<&'static str, OperationStats>,
}

impl Measured {
    /// Every operation together.
    pub fn total(&self) -> OperationStats {
        let mut total = OperationStats::new();
        for stats in self.operations.values() {
            total.merge(stats);
        }
        total
    }
}

/// When each request of an open-loop run is due: `seq / rate` seconds
/// after the start, computed from the start every time so rounding never
/// accumulates into drift.
#[derive(Debug, Clone, Copy)]
pub struct OpenLoopSchedule {
    pub start: Instant,
    rate: f64,
}

impl OpenLoopSchedule {
    pub fn new(start: Instant, rate: f64) -> Self {
        assert!(
            rate.is_finite() && rate > 0.0,
            "the rate must be positive, got {rate}"
        );
        Self { start, rate }
    }

    /// How long after the start request `seq` is due.
    pub fn offset(&self, seq: u64) -> Duration {
        Duration::from_secs_f64(seq as f64 / self.rate)
    }

    pub fn due(&self, seq: u64) -> Instant {
        self.start + self.offset(seq)
    }

    /// How many requests are due in the first `span` after the start.
    pub fn due_within(&self, span: Duration) -> u64 {
        let mut count = (span.as_secs_f64() * self.rate).ceil() as u64;
        while count > 0 && self.offset(count - 1) >= span {
            count -= 1;
        }
        while self.offset(count) < span {
            count += 1;
        }
        count
    }
}

/// Counters the progress line reads, and the measurements.
#[derive(Debug, Default)]
struct Shared {
    completed: AtomicU64,
    failed: AtomicU64,
    in_flight: AtomicU64,
    measured: Mutex<Measured>,
}

impl Shared {
    fn record(
        &self,
        in_warmup: bool,
        operation: &'static str,
        latency: Duration,
        result: &Result<Success, Failure>,
    ) {
        self.completed.fetch_add(1, Ordering::Relaxed);
        if result.is_err() {
            self.failed.fetch_add(1, Ordering::Relaxed);
        }
        // Never held across an await: a plain mutex is the cheapest lock.
        let mut measured = self.measured.lock().unwrap_or_else(|e| e.into_inner());
        if in_warmup {
            measured.warmup_requests += 1;
            measured.warmup_errors += u64::from(result.is_err());
            return;
        }
        let stats = measured.operations.entry(operation).or_default();
        match result {
            Ok(success) => stats.record_ok(latency, success.surfaced),
            Err(failure) => stats.record_failure(failure),
        }
    }
}

/// Runs `workload` as `plan` says and returns what was measured.
pub async fn run<W: Workload>(workload: Arc<W>, plan: Plan) -> Measured {
    assert!(plan.clients > 0, "a run needs at least one client");
    let shared = Arc::new(Shared::default());
    let start = Instant::now();
    let progress = plan
        .progress
        .then(|| tokio::spawn(report_progress(shared.clone(), start, plan)));
    match plan.load {
        Load::Open {
            rate,
            max_in_flight,
        } => {
            let schedule = OpenLoopSchedule::new(start, rate);
            open_loop(workload, plan, schedule, max_in_flight, &shared).await;
        }
        Load::Closed { concurrency } => {
            closed_loop(workload, plan, start, concurrency, &shared).await;
        }
    }
    if let Some(progress) = progress {
        progress.abort();
    }
    let measured = shared.measured.lock().unwrap_or_else(|e| e.into_inner());
    measured.clone()
}

async fn open_loop<W: Workload>(
    workload: Arc<W>,
    plan: Plan,
    schedule: OpenLoopSchedule,
    max_in_flight: usize,
    shared: &Arc<Shared>,
) {
    let warmup_end = schedule.start + plan.warmup;
    let end = warmup_end + plan.duration;
    let total = schedule.due_within(plan.warmup + plan.duration);
    let permits = Arc::new(Semaphore::new(max_in_flight.max(1)));
    let mut tasks = JoinSet::new();
    for seq in 0..total {
        let due = schedule.due(seq);
        tokio::time::sleep_until(due).await;
        let permit = match tokio::time::timeout_at(end, permits.clone().acquire_owned()).await {
            Ok(Ok(permit)) => permit,
            _ => {
                // The run is over and these were never sent: count them,
                // or a saturated generator would look like a fast server.
                for late in seq..total {
                    let failure = Failure::new(
                        ErrorKind::NotSent,
                        format!("{max_in_flight} requests were still in flight"),
                    );
                    let due = schedule.due(late);
                    shared.record(
                        due < warmup_end,
                        workload.operation(late),
                        Duration::ZERO,
                        &Err(failure),
                    );
                }
                break;
            }
        };
        let workload = workload.clone();
        let shared = shared.clone();
        shared.in_flight.fetch_add(1, Ordering::Relaxed);
        tasks.spawn(async move {
            let client = (seq % plan.clients as u64) as usize;
            let result = tokio::time::timeout(plan.timeout, workload.execute(client, seq))
                .await
                .unwrap_or_else(|_| Err(Failure::timeout(plan.timeout)));
            let latency = latency_since(due, &result);
            shared.record(due < warmup_end, workload.operation(seq), latency, &result);
            shared.in_flight.fetch_sub(1, Ordering::Relaxed);
            drop(permit);
        });
        // Reap what finished so the set stays as small as what is in flight.
        while let Some(joined) = tasks.try_join_next() {
            propagate_panic(joined);
        }
    }
    while let Some(joined) = tasks.join_next().await {
        propagate_panic(joined);
    }
}

async fn closed_loop<W: Workload>(
    workload: Arc<W>,
    plan: Plan,
    start: Instant,
    concurrency: usize,
    shared: &Arc<Shared>,
) {
    let warmup_end = start + plan.warmup;
    let end = warmup_end + plan.duration;
    // One sequence for all workers, so a mix (e.g. 9 recalls : 1 remember)
    // holds over the whole run, not per worker.
    let next_seq = Arc::new(AtomicU64::new(0));
    let mut tasks = JoinSet::new();
    for worker in 0..concurrency.max(1) {
        let workload = workload.clone();
        let shared = shared.clone();
        let next_seq = next_seq.clone();
        tasks.spawn(async move {
            let client = worker % plan.clients;
            loop {
                let started = Instant::now();
                if started >= end {
                    break;
                }
                let seq = next_seq.fetch_add(1, Ordering::Relaxed);
                shared.in_flight.fetch_add(1, Ordering::Relaxed);
                let result = tokio::time::timeout(plan.timeout, workload.execute(client, seq))
                    .await
                    .unwrap_or_else(|_| Err(Failure::timeout(plan.timeout)));
                shared.in_flight.fetch_sub(1, Ordering::Relaxed);
                shared.record(
                    started < warmup_end,
                    workload.operation(seq),
                    latency_since(started, &result),
                    &result,
                );
            }
        });
    }
    while let Some(joined) = tasks.join_next().await {
        propagate_panic(joined);
    }
}

fn propagate_panic(joined: Result<(), tokio::task::JoinError>) {
    if let Err(error) = joined
        && error.is_panic()
    {
        std::panic::resume_unwind(error.into_panic());
    }
}

/// One line a second on stderr: elapsed time and phase, requests done,
/// their rate over the last second, failures, requests in flight.
async fn report_progress(shared: Arc<Shared>, start: Instant, plan: Plan) {
    let tick = Duration::from_secs(1);
    let mut ticker = tokio::time::interval_at(start + tick, tick);
    let mut last_completed = 0;
    let mut last_tick = start;
    loop {
        let now = ticker.tick().await;
        let elapsed = now - start;
        let phase = if elapsed < plan.warmup {
            "warm-up"
        } else if elapsed < plan.warmup + plan.duration {
            "measuring"
        } else {
            "draining"
        };
        let completed = shared.completed.load(Ordering::Relaxed);
        let rate = (completed - last_completed) as f64 / (now - last_tick).as_secs_f64();
        eprintln!(
            "[{:>6.1} s {phase:<9}] done {completed:>8}  rate {rate:>8.1}/s  errors {:>6}  in flight {:>5}",
            elapsed.as_secs_f64(),
            shared.failed.load(Ordering::Relaxed),
            shared.in_flight.load(Ordering::Relaxed),
        );
        last_completed = completed;
        last_tick = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_due_at_even_intervals_from_the_start() {
        let start = Instant::now();
        let schedule = OpenLoopSchedule::new(start, 100.0);
        assert_eq!(schedule.due(0), start);
        assert_eq!(schedule.offset(1), Duration::from_millis(10));
        assert_eq!(schedule.offset(100), Duration::from_secs(1));
        // No drift after many intervals of a rate that is not a round
        // number of nanoseconds.
        let thirds = OpenLoopSchedule::new(start, 3.0);
        assert_eq!(thirds.offset(3_000_000), Duration::from_secs(1_000_000));
        for seq in 0..1000 {
            assert!(schedule.due(seq) < schedule.due(seq + 1));
        }
    }

    #[test]
    fn due_within_counts_the_requests_of_a_span() {
        let schedule = OpenLoopSchedule::new(Instant::now(), 100.0);
        assert_eq!(schedule.due_within(Duration::ZERO), 0);
        assert_eq!(schedule.due_within(Duration::from_secs(1)), 100);
        assert_eq!(schedule.due_within(Duration::from_secs(3)), 300);
        // A warm-up of 1 s and a window of 2 s: 100 warm-up requests, then 200.
        let warmup = schedule.due_within(Duration::from_secs(1));
        let all = schedule.due_within(Duration::from_secs(3));
        assert_eq!((warmup, all - warmup), (100, 200));
        // Slow and odd rates: due at 0 s and 2 s within 3 s; 0, ⅓, ⅔ within 1 s.
        let slow = OpenLoopSchedule::new(Instant::now(), 0.5);
        assert_eq!(slow.due_within(Duration::from_secs(3)), 2);
        let thirds = OpenLoopSchedule::new(Instant::now(), 3.0);
        assert_eq!(thirds.due_within(Duration::from_secs(1)), 3);
        assert_eq!(thirds.due_within(Duration::from_millis(334)), 2);
    }

    #[test]
    #[should_panic(expected = "the rate must be positive")]
    fn a_zero_rate_is_refused() {
        let _ = OpenLoopSchedule::new(Instant::now(), 0.0);
    }
}
