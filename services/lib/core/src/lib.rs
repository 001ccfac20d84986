//! Domain logic of mneme with no I/O: what a fragment is, how a `remember`
//! request is validated, how text is tokenised for search, how results are
//! ranked, who the caller is, and the one error vocabulary.
//!
//! Layout:
//! - [`api_key`]: the API key format, generation and verification.
//! - [`batch_size`]: batch sizes of background workers that halve after a
//!   batch ran out of time and grow back after successes.
//! - [`breaker`]: circuit breakers of outside services (a shared one, and a
//!   single-probe one kept per tenant and dependency).
//! - [`net`]: which addresses are public (the SSRF guards' rule).
//! - [`cursor`]: pagination cursors of `recall` and of the admin memory
//!   browser (encode, untrusted decode).
//! - [`claims`]: rule-based claim extraction (subject, predicate, object,
//!   polarity) for the symbolic layer.
//! - [`contradiction`]: the rules that judge two similar memories
//!   contradictory without a language model.
//! - [`error`]: [`ErrorCode`] and its single mapping to HTTP, gRPC and JSON-RPC.
//! - [`principal`]: the authenticated caller and its permissions.
//! - [`password`]: people's passwords (argon2id), rules and verification.
//! - [`fragment`]: fragment types, tiers, limits and [`fragment::prepare`].
//! - [`json`]: strict JSON reading (no repeated names) for bodies that two
//!   parsers read.
//! - [`policy`]: the symbolic layer's policy rules for writes.
//! - [`text`]: tokenisation (Latin, Hangul, CJK), keywords, search literals.
//! - [`redact`]: secret and PII redaction.
//! - [`scoring`]: fusion of the search layers and the final score.
//! - [`session_id`]: MCP session ids that prove mneme issued them.
//! - [`timerange`]: time expressions (ISO, English, Korean) for recall filters.
#![forbid(unsafe_code)]

pub mod api_key;
pub mod batch_size;
pub mod breaker;
pub mod claims;
pub mod contradiction;
pub mod cursor;
pub mod error;
pub mod fragment;
pub mod json;
pub mod net;
pub mod password;
pub mod policy;
pub mod principal;
pub mod redact;
pub mod scoring;
pub mod session_id;
pub mod text;
pub mod timerange;

pub use error::{Error, ErrorCode, Result};
pub use fragment::{FragmentType, TtlTier};
pub use principal::{Permission, Principal};
