//! Pagination cursors, carried between requests as opaque strings (URL-safe
//! base64, no padding):
//!
//! - [`PageCursor`], `recall`'s: where the next page starts, when the first
//!   page was taken, which query it continues and which results were
//!   already returned (a small JSON object `{"o": offset, "s": snapshot
//!   millis, "h": query digest, "r": result tags}`). The recall service
//!   checks the digest against the query and clamps the offset.
//! - [`KeysetCursor`], the admin memory browser's: the creation time and id
//!   of the last row shown (`unix microseconds|uuid`: every time PostgreSQL
//!   can store, where RFC 3339 stops at year 9999); the next page starts
//!   after it.
//!
//! Cursors come back from callers, so decoding treats them as untrusted
//! input: anything that is not what encoding produces is an argument error,
//! never a panic.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

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
    /// Tags of the results already returned ([`ResultTag`]s, concatenated,
    /// base64). A later page skips them instead of counting an offset into
    /// a ranking that may have moved: a link or fragment that became
    /// visible between two pages (committed late with an earlier time)
    /// then neither repeats a result nor hides one. Empty in cursors of
    /// older versions, which page by offset.
    #[serde(rename = "r", default, skip_serializing_if = "String::is_empty")]
    returned: String,
}

/// A short tag of a result id: its last six bytes, random in both UUID
/// versions mneme issues, so two results of one walk share a tag with odds
/// of about one in 2^48 per pair.
pub type ResultTag = [u8; 6];

/// The tag of `id` (see [`ResultTag`]).
pub fn result_tag(id: &Uuid) -> ResultTag {
    let bytes = id.as_bytes();
    [
        bytes[10], bytes[11], bytes[12], bytes[13], bytes[14], bytes[15],
    ]
}

impl PageCursor {
    /// A cursor after `returned` results (`offset` of them counted).
    pub fn new(
        offset: usize,
        snapshot_ms: i64,
        digest: String,
        returned: impl IntoIterator<Item = ResultTag>,
    ) -> Self {
        let bytes: Vec<u8> = returned.into_iter().flatten().collect();
        Self {
            offset,
            snapshot_ms,
            digest,
            returned: URL_SAFE_NO_PAD.encode(bytes),
        }
    }

    /// The tags of the results already returned, in the order returned.
    pub fn returned(&self) -> Vec<ResultTag> {
        // `decode` checked the encoding.
        URL_SAFE_NO_PAD
            .decode(&self.returned)
            .unwrap_or_default()
            .chunks_exact(6)
            .map(|chunk| [chunk[0], chunk[1], chunk[2], chunk[3], chunk[4], chunk[5]])
            .collect()
    }

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
        let cursor: Self = serde_json::from_slice(&bytes).map_err(|_| invalid())?;
        match URL_SAFE_NO_PAD.decode(&cursor.returned) {
            Ok(tags) if tags.len() % 6 == 0 => Ok(cursor),
            _ => Err(invalid()),
        }
    }
}

/// A position in a list ordered by creation time, newest first, ties by id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeysetCursor {
    pub created_at: DateTime<Utc>,
    pub id: Uuid,
}

impl KeysetCursor {
    /// The opaque string handed to the caller.
    pub fn encode(&self) -> String {
        URL_SAFE_NO_PAD.encode(format!(
            "{}|{}",
            self.created_at.timestamp_micros(),
            self.id
        ))
    }

    /// Reads a cursor a caller sent back.
    pub fn decode(raw: &str) -> Result<Self> {
        let invalid = || Error::invalid_argument("cursor is not one this API returned");
        let bytes = URL_SAFE_NO_PAD.decode(raw).map_err(|_| invalid())?;
        let text = String::from_utf8(bytes).map_err(|_| invalid())?;
        let (micros, id) = text.split_once('|').ok_or_else(invalid)?;
        Ok(Self {
            created_at: micros
                .parse()
                .ok()
                .and_then(DateTime::from_timestamp_micros)
                .ok_or_else(invalid)?,
            id: id.parse().map_err(|_| invalid())?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_keep_their_wire_format() {
        let cursor = PageCursor::new(20, 1_700_000_000_000, "0123456789abcdef".into(), []);
        let raw = cursor.encode();
        assert_eq!(PageCursor::decode(&raw).unwrap(), cursor);
        let json = URL_SAFE_NO_PAD.decode(&raw).unwrap();
        assert_eq!(
            std::str::from_utf8(&json).unwrap(),
            r#"{"o":20,"s":1700000000000,"h":"0123456789abcdef"}"#
        );
        let ids = [Uuid::now_v7(), Uuid::new_v4()];
        let walked = PageCursor::new(2, 0, String::new(), ids.iter().map(result_tag));
        let back = PageCursor::decode(&walked.encode()).unwrap();
        assert_eq!(
            back.returned(),
            vec![result_tag(&ids[0]), result_tag(&ids[1])]
        );
        assert_ne!(result_tag(&ids[0]), result_tag(&Uuid::now_v7()));
    }

    #[test]
    fn a_cursor_whose_result_tags_are_cut_is_an_argument_error() {
        let tags = URL_SAFE_NO_PAD.encode([1u8; 7]);
        let raw = URL_SAFE_NO_PAD.encode(format!(r#"{{"o":1,"s":0,"h":"","r":"{tags}"}}"#));
        let err = PageCursor::decode(&raw).unwrap_err();
        assert_eq!(err.code, crate::ErrorCode::InvalidArgument);
        let raw = URL_SAFE_NO_PAD.encode(r#"{"o":1,"s":0,"h":"","r":"*"}"#);
        assert!(PageCursor::decode(&raw).is_err());
    }

    #[test]
    fn garbage_cursors_are_argument_errors() {
        for raw in ["", "garbage", "e30", "!!!", "eyJvIjotMSwicyI6MCwiaCI6IiJ9"] {
            let err = PageCursor::decode(raw).unwrap_err();
            assert_eq!(err.code, crate::ErrorCode::InvalidArgument, "{raw}");
        }
    }

    #[test]
    fn keyset_cursors_round_trip_to_the_microsecond_and_refuse_garbage() {
        let cursor = KeysetCursor {
            created_at: DateTime::from_timestamp_micros(1_700_000_000_123_456).unwrap(),
            id: Uuid::new_v4(),
        };
        assert_eq!(KeysetCursor::decode(&cursor.encode()).unwrap(), cursor);
        // Found by fuzzing: RFC 3339 cannot write years past 9999, which
        // PostgreSQL stores.
        let far = KeysetCursor {
            created_at: DateTime::from_timestamp_micros(5_067_000_000_000_000_000).unwrap(),
            ..cursor
        };
        assert_eq!(KeysetCursor::decode(&far.encode()).unwrap(), far);
        let no_id = URL_SAFE_NO_PAD.encode("1700000000123456|");
        let no_time = URL_SAFE_NO_PAD.encode(format!("yesterday|{}", cursor.id));
        for raw in [
            "",
            "garbage",
            "!!!",
            &no_id,
            &no_time,
            &cursor.encode()[1..],
        ] {
            let err = KeysetCursor::decode(raw).unwrap_err();
            assert_eq!(err.code, crate::ErrorCode::InvalidArgument, "{raw}");
        }
    }
}
