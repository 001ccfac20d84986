//! The one error vocabulary of mneme.
//!
//! Every failure a client can observe is one of the [`ErrorCode`]s below. The
//! code decides, in exactly one place ([`ErrorCode::http_status`],
//! [`ErrorCode::grpc_code`], [`ErrorCode::jsonrpc_code`]), what a client sees
//! on each protocol. The message of an [`Error`] is safe to show to clients;
//! internal detail (SQL errors, stack traces) is logged where it happens and
//! never travels in an `Error`.

use std::fmt;

/// What went wrong, in terms a client can act on.
///
/// Deliberately small (after quickwit's `ServiceErrorCode`): add a variant only
/// when a client must react to it differently from every existing one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    /// The request is malformed or violates a documented limit.
    InvalidArgument,
    /// The object does not exist *or is outside the caller's view*; the two
    /// cases are indistinguishable on purpose.
    NotFound,
    /// The caller is known but lacks the permission for this operation.
    PermissionDenied,
    /// The caller could not be identified.
    Unauthenticated,
    /// A stored-data quota (fragments per key, …) is exhausted.
    QuotaExceeded,
    /// A request-rate limit is exhausted; retry later.
    RateLimited,
    /// The request conflicts with the current state (e.g. a concurrent change).
    Conflict,
    /// A dependency is down; the request may be retried.
    Unavailable,
    /// The deadline passed before the work completed; the request may be retried.
    Timeout,
    /// A bug or an unexpected failure. Details are in the server logs only.
    Internal,
}

impl ErrorCode {
    /// Every code, for exhaustive tests and documentation.
    pub const ALL: [ErrorCode; 10] = [
        ErrorCode::InvalidArgument,
        ErrorCode::NotFound,
        ErrorCode::PermissionDenied,
        ErrorCode::Unauthenticated,
        ErrorCode::QuotaExceeded,
        ErrorCode::RateLimited,
        ErrorCode::Conflict,
        ErrorCode::Unavailable,
        ErrorCode::Timeout,
        ErrorCode::Internal,
    ];

    /// The stable wire name, used in JSON bodies and gRPC error details.
    pub const fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidArgument => "invalid_argument",
            ErrorCode::NotFound => "not_found",
            ErrorCode::PermissionDenied => "permission_denied",
            ErrorCode::Unauthenticated => "unauthenticated",
            ErrorCode::QuotaExceeded => "quota_exceeded",
            ErrorCode::RateLimited => "rate_limited",
            ErrorCode::Conflict => "conflict",
            ErrorCode::Unavailable => "unavailable",
            ErrorCode::Timeout => "timeout",
            ErrorCode::Internal => "internal",
        }
    }

    /// Parses a wire name produced by [`ErrorCode::as_str`].
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|code| code.as_str() == name)
    }

    /// The HTTP status for REST and transport-level responses.
    pub const fn http_status(self) -> u16 {
        match self {
            ErrorCode::InvalidArgument => 400,
            ErrorCode::NotFound => 404,
            ErrorCode::PermissionDenied => 403,
            ErrorCode::Unauthenticated => 401,
            ErrorCode::QuotaExceeded => 403,
            ErrorCode::RateLimited => 429,
            ErrorCode::Conflict => 409,
            ErrorCode::Unavailable => 503,
            ErrorCode::Timeout => 504,
            ErrorCode::Internal => 500,
        }
    }

    /// The gRPC status code (numeric values of `google.rpc.Code`).
    pub const fn grpc_code(self) -> i32 {
        match self {
            ErrorCode::InvalidArgument => 3,  // INVALID_ARGUMENT
            ErrorCode::NotFound => 5,         // NOT_FOUND
            ErrorCode::PermissionDenied => 7, // PERMISSION_DENIED
            ErrorCode::Unauthenticated => 16, // UNAUTHENTICATED
            ErrorCode::QuotaExceeded => 8,    // RESOURCE_EXHAUSTED
            ErrorCode::RateLimited => 8,      // RESOURCE_EXHAUSTED
            ErrorCode::Conflict => 10,        // ABORTED
            ErrorCode::Unavailable => 14,     // UNAVAILABLE
            ErrorCode::Timeout => 4,          // DEADLINE_EXCEEDED
            ErrorCode::Internal => 13,        // INTERNAL
        }
    }

    /// Maps a gRPC status code back when the peer sent no [`ErrorCode`] name
    /// (a proxy, a transport failure): deadline and cancellation become
    /// `Timeout`, unavailability stays `Unavailable`, anything else `Internal`.
    pub const fn from_grpc_code(code: i32) -> Self {
        match code {
            1 | 4 => ErrorCode::Timeout, // CANCELLED, DEADLINE_EXCEEDED
            14 => ErrorCode::Unavailable,
            16 => ErrorCode::Unauthenticated,
            _ => ErrorCode::Internal,
        }
    }

    /// How the MCP layer reports the error.
    ///
    /// `None` means "a tool result with `isError: true`": argument and domain
    /// errors are tool errors the model can read and correct (MCP 2025-11-25,
    /// SEP-1303). `Some(code)` is a JSON-RPC protocol error for faults of the
    /// exchange itself.
    pub const fn jsonrpc_code(self) -> Option<i32> {
        match self {
            ErrorCode::InvalidArgument
            | ErrorCode::NotFound
            | ErrorCode::PermissionDenied
            | ErrorCode::QuotaExceeded
            | ErrorCode::RateLimited
            | ErrorCode::Conflict
            | ErrorCode::Unavailable
            | ErrorCode::Timeout => None,
            ErrorCode::Unauthenticated => Some(-32001),
            ErrorCode::Internal => Some(-32603),
        }
    }

    /// The JSON-RPC code of this error when it answers a request other than
    /// `tools/call` (`prompts/get`, `resources/read`), where there is no
    /// tool result to carry it. The mneme code always travels in `data`.
    pub const fn jsonrpc_request_code(self) -> i32 {
        match self {
            ErrorCode::InvalidArgument => -32602,
            // MCP's "resource not found".
            ErrorCode::NotFound => -32002,
            ErrorCode::Unauthenticated => -32001,
            // Server-defined range: a refusal is not an "Internal error".
            ErrorCode::PermissionDenied => -32003,
            _ => -32603,
        }
    }

    /// True when the same request may succeed if simply retried.
    pub const fn is_retryable(self) -> bool {
        matches!(
            self,
            ErrorCode::Unavailable | ErrorCode::Timeout | ErrorCode::RateLimited
        )
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An error a client may see: a code and a message that is safe to show.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct Error {
    pub code: ErrorCode,
    pub message: String,
}

impl Error {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    pub fn invalid_argument(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidArgument, message)
    }

    /// The one "not found" message for fragments: identical for ids that do
    /// not exist and ids that belong to somebody else, so it cannot be used
    /// as an existence oracle.
    pub fn fragment_not_found() -> Self {
        Self::new(ErrorCode::NotFound, "fragment not found")
    }

    pub fn permission_denied(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::PermissionDenied, message)
    }

    pub fn unauthenticated(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Unauthenticated, message)
    }

    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Unavailable, message)
    }

    /// An internal failure. The caller logs the cause; clients only learn
    /// that something failed on the server.
    pub fn internal() -> Self {
        Self::new(ErrorCode::Internal, "internal error")
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_names_round_trip() {
        for code in ErrorCode::ALL {
            assert_eq!(ErrorCode::from_name(code.as_str()), Some(code));
        }
        assert_eq!(ErrorCode::from_name("nope"), None);
    }

    #[test]
    fn client_errors_are_tool_errors_and_faults_are_protocol_errors() {
        assert_eq!(ErrorCode::InvalidArgument.jsonrpc_code(), None);
        assert_eq!(ErrorCode::NotFound.jsonrpc_code(), None);
        assert_eq!(ErrorCode::Internal.jsonrpc_code(), Some(-32603));
    }

    #[test]
    fn grpc_codes_map_back_for_transport_failures() {
        assert_eq!(ErrorCode::from_grpc_code(4), ErrorCode::Timeout);
        assert_eq!(ErrorCode::from_grpc_code(14), ErrorCode::Unavailable);
        assert_eq!(ErrorCode::from_grpc_code(2), ErrorCode::Internal);
    }
}
