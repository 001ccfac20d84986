//! `mneme-bench`: retrieval quality and latency of mneme, measured end to
//! end. Memories go in through the real write path and queries through the
//! real read path: a whole stack (`mneme up`, as the end-to-end tests start
//! it) on a fresh database, driven by an rmcp client over Streamable HTTP,
//! calling `remember` and `recall` exactly as an agent would.
//!
//! Layout:
//! - [`metrics`]: Recall@k, MRR@k, nDCG@k (memtomem's definitions),
//!   recall_any/all@k (LoCoMo), percentiles; pure functions with unit tests.
//! - [`data`]: the JSON Lines datasets of `shared/bench`.
//! - [`generated`]: generated memories and questions of a software team
//!   (the haystack of `--haystack`, and `mneme-loadtest`'s data).
//! - [`harness`]: the stack, tenants, typed tool calls, the wait for the
//!   embedding worker, the run environment.
//! - [`memtomem`]: the bilingual corpus (Recall@10 / MRR@10 / nDCG@10 by
//!   language and query type, and a failure report).
//! - [`locomo`]: the long-conversation set (recall_any@5 / recall_all@5).
//! - [`surfacing`]: active surfacing on the memtomem corpus (coverage,
//!   precision by language and bucket, added latency).
//! - [`proxy`]: what the MCP proxy adds to a tool call (direct, through
//!   mneme, through mneme with surfacing), against the reference server.
//! - [`report`]: settings, ingest figures and JSON output shared by both.
//!
//! The binary (`src/main.rs`) is the command line; `docs/BENCHMARKS.md`
//! describes the protocols and records measured figures.
#![forbid(unsafe_code)]

pub mod data;
pub mod generated;
pub mod harness;
pub mod locomo;
pub mod memtomem;
pub mod metrics;
pub mod proxy;
pub mod report;
pub mod surfacing;
