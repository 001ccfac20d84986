//! The runner against a fake workload whose requests take a known time:
//! the open loop keeps its schedule and counts waiting as latency, the
//! closed loop keeps N requests outstanding, the warm-up is left out, and
//! timeouts are counted. No stack needed.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use mneme_loadtest::mcp::{ErrorKind, Failure};
use mneme_loadtest::run::{Load, Plan, Success, Workload, run};

/// Every request takes `service_time`; `fail_every` > 0 makes every n-th
/// a tool error. Counts requests and the most outstanding at once.
struct Sleeper {
    service_time: Duration,
    fail_every: u64,
    started: AtomicU64,
    outstanding: AtomicU64,
    most_outstanding: AtomicU64,
}

impl Sleeper {
    fn new(service_time: Duration) -> Self {
        Self {
            service_time,
            fail_every: 0,
            started: AtomicU64::new(0),
            outstanding: AtomicU64::new(0),
            most_outstanding: AtomicU64::new(0),
        }
    }
}

impl Workload for Sleeper {
    fn operation(&self, seq: u64) -> &'static str {
        if seq.is_multiple_of(2) { "even" } else { "odd" }
    }

    async fn execute(&self, _client: usize, seq: u64) -> Result<Success, Failure> {
        self.started.fetch_add(1, Ordering::SeqCst);
        let now = self.outstanding.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_outstanding.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(self.service_time).await;
        self.outstanding.fetch_sub(1, Ordering::SeqCst);
        if self.fail_every > 0 && seq.is_multiple_of(self.fail_every) {
            return Err(Failure::new(ErrorKind::Tool("rate_limited".into()), "no"));
        }
        Ok(Success::default())
    }
}

fn plan(load: Load, warmup_ms: u64, duration_ms: u64) -> Plan {
    Plan {
        load,
        clients: 4,
        warmup: Duration::from_millis(warmup_ms),
        duration: Duration::from_millis(duration_ms),
        timeout: Duration::from_secs(5),
        progress: false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_loop_sends_on_schedule_and_leaves_out_the_warm_up() {
    let workload = Arc::new(Sleeper::new(Duration::from_millis(5)));
    let load = Load::Open {
        rate: 200.0,
        max_in_flight: 100,
    };
    let measured = run(workload.clone(), plan(load, 500, 1000)).await;
    // 200/s: 100 due in the warm-up, 200 in the window, whatever the timing.
    assert_eq!(measured.warmup_requests, 100);
    let total = measured.total();
    assert_eq!(total.ok(), 200);
    assert_eq!(total.failed(), 0);
    assert_eq!(workload.started.load(Ordering::SeqCst), 300);
    // Operations split by the workload's names.
    assert_eq!(measured.operations["even"].ok(), 100);
    assert_eq!(measured.operations["odd"].ok(), 100);
    let summary = total.summary(1.0, false);
    assert_eq!(summary.throughput_rps, 200.0);
    let latency = summary.latency_ms;
    assert!(latency.is_monotone(), "{latency:?}");
    assert!(latency.min >= 5.0, "{latency:?}");
    // Requests do not queue behind each other at 5 ms each and 200/s.
    assert!(latency.p50 < 50.0, "{latency:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_loop_latency_counts_the_wait_of_a_saturated_client() {
    // One request at a time, 100 ms each, but 50 due per second: the
    // schedule falls behind, and each request's latency includes the time
    // since it was due. Measuring from the send would show 100 ms.
    let workload = Arc::new(Sleeper::new(Duration::from_millis(100)));
    let load = Load::Open {
        rate: 50.0,
        max_in_flight: 1,
    };
    let measured = run(workload.clone(), plan(load, 0, 1000)).await;
    let total = measured.total();
    assert_eq!(workload.most_outstanding.load(Ordering::SeqCst), 1);
    let summary = total.summary(1.0, false);
    // About 10 could be served (fewer on a busy machine); the other ~40
    // due were never sent.
    assert!((3..=12).contains(&summary.ok), "{summary:?}");
    assert_eq!(summary.requests, 50, "{summary:?}");
    assert_eq!(
        summary.errors_by_kind.get("not_sent").copied(),
        Some(summary.errors),
        "{summary:?}"
    );
    assert!(summary.latency_ms.max > 500.0, "{summary:?}");
    assert!(summary.latency_ms.p50 > 200.0, "{summary:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_loop_keeps_n_outstanding() {
    let workload = Arc::new(Sleeper::new(Duration::from_millis(20)));
    let measured = run(
        workload.clone(),
        plan(Load::Closed { concurrency: 4 }, 200, 1000),
    )
    .await;
    assert_eq!(workload.most_outstanding.load(Ordering::SeqCst), 4);
    // 4 workers × 50 requests a second at most; timers add a little to
    // each. The upper bounds catch requests counted twice or in the wrong
    // phase; the lower ones are loose because a busy machine (CI builds
    // next door) slows every timer, which says nothing about the runner.
    let summary = measured.total().summary(1.0, false);
    assert!((40..=205).contains(&summary.ok), "{summary:?}");
    assert!(
        (4..=45).contains(&measured.warmup_requests),
        "{} warm-up requests",
        measured.warmup_requests
    );
    assert!(summary.latency_ms.p50 >= 20.0, "{summary:?}");
    assert!(summary.latency_ms.is_monotone(), "{summary:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_and_timeouts_are_counted_by_kind() {
    let mut sleeper = Sleeper::new(Duration::from_millis(5));
    sleeper.fail_every = 4;
    let measured = run(
        Arc::new(sleeper),
        plan(
            Load::Open {
                rate: 100.0,
                max_in_flight: 100,
            },
            0,
            1000,
        ),
    )
    .await;
    let summary = measured.total().summary(1.0, false);
    assert_eq!(summary.requests, 100);
    assert_eq!(summary.errors_by_kind["tool_rate_limited"], 25);
    assert_eq!(summary.ok, 75);

    let slow = Arc::new(Sleeper::new(Duration::from_millis(400)));
    let mut short = plan(Load::Closed { concurrency: 2 }, 0, 500);
    short.timeout = Duration::from_millis(100);
    let measured = run(slow, short).await;
    let summary = measured.total().summary(0.5, false);
    assert_eq!(summary.ok, 0, "{summary:?}");
    assert!(summary.errors >= 6, "{summary:?}");
    assert_eq!(summary.errors_by_kind["timeout"], summary.errors);
}
