//! The pagination cursor of `recall`: where the next page starts, when the
//! first page was taken and which query it continues, carried between
//! requests as an opaque string (URL-safe base64, no padding, of a small JSON
//! object `{"o": offset, "s": snapshot millis, "h": query digest}`).
//!
//! Cursors come back from callers, so [`PageCursor::decode`] treats them as
//! untrusted input: anything that is not exactly what
//! [`PageCursor::encode`] produces is an argument error, never a panic. The
//! recall service checks the digest against the query and clamps the offset.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// A decoded page cursor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageCursor {
    /// Results already returned.
    #[serde(rename = "o")]
    pub offset: usize,
    /// The first page's time (Unix milliseconds): later fragments stay out
    /// of later pages, so pages do not shift under the caller.
    #[serde(rename = "s")]
    pub snapshot_ms: i64,
    /// Digest of the query; a cursor only continues the query it came from.
    #[serde(rename = "h")]
    pub digest: String,
}

impl PageCursor {
    /// The opaque string handed to the caller as `nextCursor`.
    pub fn encode(&self) -> String {
        URL_SAFE_NO_PAD.encode(serde_json::to_vec(self).expect("cursors serialise"))
    }

    /// Reads a cursor a caller sent back.
    pub fn decode(raw: &str) -> Result<Self> {
        let invalid = || {
            Error::invalid_argument(
                "cursor is not valid; use the nextCursor of a previous response",
            )
        };
        let bytes = URL_SAFE_NO_PAD.decode(raw).map_err(|_| invalid())?;
        serde_json::from_slice(&bytes).map_err(|_| invalid())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_keep_their_wire_format() {
        let cursor = PageCursor {
            offset: 20,
            snapshot_ms: 1_700_000_000_000,
            digest: "0123456789abcdef".into(),
        };
        let raw = cursor.encode();
        assert_eq!(PageCursor::decode(&raw).unwrap(), cursor);
        let json = URL_SAFE_NO_PAD.decode(&raw).unwrap();
        assert_eq!(
            std::str::from_utf8(&json).unwrap(),
            r#"{"o":20,"s":1700000000000,"h":"0123456789abcdef"}"#
        );
    }

    #[test]
    fn garbage_cursors_are_argument_errors() {
        for raw in ["", "garbage", "e30", "!!!", "eyJvIjotMSwicyI6MCwiaCI6IiJ9"] {
            let err = PageCursor::decode(raw).unwrap_err();
            assert_eq!(err.code, crate::ErrorCode::InvalidArgument, "{raw}");
        }
    }
}
