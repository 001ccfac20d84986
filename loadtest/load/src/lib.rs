//! `mneme-loadtest`: load on a running mneme over real MCP Streamable HTTP.
//! Many virtual clients (one MCP session each, holding the API keys of
//! several tenants round robin) call `remember`, `recall`, `memory_stats`,
//! new sessions per call, or a proxied upstream tool, either on a fixed
//! schedule (open loop, `--rate`) or as fast as N outstanding requests
//! allow (closed loop, `--concurrency`). After a warm-up that is not
//! counted, it measures throughput, latency percentiles (HDR histogram)
//! and failures by kind, and reports them as a table and as JSON. `seed`
//! fills tenants with generated English and Korean memories first;
//! `backfill` times the embedding worker on such a queue.
//!
//! Layout:
//! - [`target`]: the endpoint and keys; the loopback check.
//! - [`mcp`]: connecting, calling a tool, naming failures
//!   (`http_429`, `jsonrpc_-32000`, `tool_rate_limited`, `timeout`, …).
//! - [`data`]: the deterministic generator of memories and questions
//!   (`mneme_bench::generated`, shared with the benchmarks' haystack).
//! - [`run`]: open and closed loop, warm-up, the progress line; latency
//!   from the scheduled time in open loop (no coordinated omission).
//! - [`stats`]: histograms and failure counts per operation; percentiles.
//! - [`scenario`]: what one request of each scenario is.
//! - [`seed`]: `batch_remember` in parallel, with links and progress.
//! - [`self_hosted`]: `--self-hosted`, a stack on a fresh database
//!   (mneme-bench's harness) with tenants of its own.
//! - [`upstream`]: the echo MCP server behind the `surfacing` scenario.
//! - [`report`]: the table and the JSON report.
//! - [`db_time`]: a self-hosted run's database time by statement.
//! - [`backfill`]: the embedding worker's rate against the model's own.
//! - [`commands`]: the binary's commands as functions (tests call them).
//!
//! The binary (`src/main.rs`) is the command line; `loadtest/README.md`
//! shows how to run each scenario.
#![forbid(unsafe_code)]

pub mod backfill;
pub mod commands;
pub use mneme_bench::generated as data;
pub mod db_time;
pub mod mcp;
pub mod report;
pub mod run;
pub mod scenario;
pub mod seed;
pub mod self_hosted;
pub mod stats;
pub mod target;
pub mod upstream;
