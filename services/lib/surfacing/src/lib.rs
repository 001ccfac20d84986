//! Active surfacing, pure logic: when an agent calls a tool (through the MCP
//! proxy or a Claude Code PostToolUse hook), mneme builds a search query from
//! the call, recalls memories, filters them and injects a
//! `<surfaced-memories>` block into the result. This crate holds every
//! decision of that pipeline and none of its I/O: no network, no storage, no
//! async and no clock reads. Time arrives as `now_ms` parameters so that the
//! callers (which own Redis, PostgreSQL and gRPC) and the tests agree on it.
//!
//! Layout, in pipeline order:
//! - [`hook`]: Claude Code PostToolUse payloads in, `additionalContext` out.
//! - [`extract`]: the search query of a tool call (template, explicit context
//!   query, path and semantic arguments, tool name) and the minimum-signal rule.
//! - [`privacy`]: sensitive-query detection, digests and what may be stored.
//! - [`gate`]: static gates: tool globs, write-tool detection, cooldown.
//! - the circuit breaker around recall is `mneme_core::breaker::Breaker`.
//! - [`relevance`]: `[weak]` / `[related]` / `[strong]` buckets.
//! - [`render`]: the escaped, size-capped block and its injection.
//! - [`model`]: budgets that follow the consumer model's context window.
//! - [`feedback`]: parsing `stm_surfacing_feedback` arguments, demotion.
//! - [`tuner`]: the per (tenant, server, tool) `min_score` auto-tuner.
#![forbid(unsafe_code)]

pub mod extract;
pub mod feedback;
pub mod gate;
pub mod hook;
pub mod model;
pub mod privacy;
pub mod relevance;
pub mod render;
pub mod tuner;
