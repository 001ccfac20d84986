//! mneme's MCP proxy toward a tenant's upstream MCP servers.
//!
//! Layout:
//! - [`ssrf`]: which upstream URLs may be dialled (public addresses only,
//!   unless the operator allows private ranges).
//! - [`sealed`]: upstream headers encrypted at rest (XChaCha20-Poly1305).
//! - [`pool`]: rmcp clients per (tenant, upstream): connect, call and overall
//!   timeouts, bounded retries with backoff, a circuit breaker, a
//!   concurrency limit, and the upstream's tool list cached with a TTL.
//! - [`sse`]: the legacy HTTP+SSE client transport (2024-11-05), which rmcp
//!   no longer ships.
//! - [`registration`]: what a tenant may register (admin API and CLI),
//!   and the limits once the operator's defaults fill the gaps.
//! - [`naming`]: what the client sees: `prefix__tool` names within the
//!   64-character limit, `[proxied]` descriptions, `_context_query`.
//! - [`shape`]: what happens to a result's text: cleaning, truncation that
//!   never cuts inside a JSON value, and progressive chunks whose
//!   concatenation reproduces the original byte for byte.
#![forbid(unsafe_code)]

pub mod naming;
pub mod pool;
pub mod registration;
pub mod sealed;
pub mod shape;
pub mod sse;
pub mod ssrf;
