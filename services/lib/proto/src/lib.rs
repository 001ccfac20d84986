//! The gRPC contract between mneme's pods.
//!
//! Layout:
//! - [`v1`]: code generated from `proto/mneme/v1/*.proto` (tonic + prost).
//! - [`principal`]: signing the caller's principal into call metadata
//!   (gateway side) and verifying it (backend side).
//! - [`error`]: [`mneme_core::Error`] ⇄ [`tonic::Status`], preserving the
//!   exact [`mneme_core::ErrorCode`] across the hop.
//! - [`server`]: the common gRPC server of every backend (health,
//!   reflection, graceful shutdown, metrics, a span per call that continues
//!   the caller's trace).
//! - [`trace_context`]: the caller's side of that: W3C trace context into
//!   call metadata.
#![forbid(unsafe_code)]

pub mod error;
pub mod principal;
pub mod server;
pub mod trace_context;

/// Generated code of package `mneme.v1`.
#[allow(
    clippy::all,
    unreachable_pub,
    missing_debug_implementations,
    rust_2018_idioms
)]
pub mod v1 {
    tonic::include_proto!("mneme.v1");
}

/// The encoded descriptors of every message and service, for reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("mneme_descriptor");
