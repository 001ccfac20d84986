//! Token and cursor decoders: recall's page cursor and the admin memory
//! browser's keyset cursor (`mneme_core::cursor`), API keys
//! (`mneme_core::api_key`) and MCP session ids (`mneme_core::session_id`).
//!
//! The input is used twice: as the untrusted string a caller sends (cursor,
//! `Authorization: Bearer` key, `Mcp-Session-Id`), and as raw material
//! (`arbitrary`) for cursors, a key and a session id that must survive
//! encode → decode.
//!
//! Properties: no panic; a decoded cursor re-encodes to a string that
//! decodes to the same cursor; every cursor round-trips; `parse_prefix`
//! accepts exactly `mn_` + 12 + `_` + 43 ASCII alphanumerics and returns the
//! 12; a key verifies against its own hash and nothing else does; a session
//! id verifies under the token that issued it only, and a string verifies
//! only if it is exactly such an id.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use mneme_core::api_key;
use mneme_core::cursor::{KeysetCursor, PageCursor};
use mneme_core::session_id::SessionIds;
use std::sync::LazyLock;

static SESSION_IDS: LazyLock<SessionIds> =
    LazyLock::new(|| SessionIds::new("the fuzzer's internal token, 32+ characters"));
static OTHER_SESSION_IDS: LazyLock<SessionIds> =
    LazyLock::new(|| SessionIds::new("another internal token of 32+ characters"));

const ALPHANUMERIC: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

fn alphanumeric(bytes: &[u8], len: usize) -> String {
    (0..len)
        .map(|i| {
            let byte = bytes.get(i).copied().unwrap_or(b'x');
            char::from(ALPHANUMERIC[usize::from(byte) % ALPHANUMERIC.len()])
        })
        .collect()
}

fuzz_target!(|data: &[u8]| {
    let raw = String::from_utf8_lossy(data);

    // The cursor as a caller sends it.
    if let Ok(cursor) = PageCursor::decode(&raw) {
        let again = PageCursor::decode(&cursor.encode()).expect("a re-encoded cursor decodes");
        assert_eq!(again, cursor);
    }

    if let Ok(cursor) = KeysetCursor::decode(&raw) {
        let again = KeysetCursor::decode(&cursor.encode()).expect("a re-encoded cursor decodes");
        assert_eq!(again, cursor);
    }

    // The session id as a caller sends it: accepted only if it is what
    // issuing its random part gives (base64 has one canonical form here).
    if SESSION_IDS.verify(&raw) {
        assert_eq!(raw.len(), 40);
        assert!(!OTHER_SESSION_IDS.verify(&raw));
    }

    // The key as a caller sends it.
    if let Some(prefix) = api_key::parse_prefix(&raw) {
        assert_eq!(raw.len(), 3 + 12 + 1 + 43);
        assert!(raw.starts_with("mn_") && raw[3..].starts_with(prefix));
        assert_eq!(prefix.len(), 12);
        assert!(prefix.bytes().all(|b| b.is_ascii_alphanumeric()));
    }
    let hash = api_key::hash(&raw);
    assert!(api_key::verify(&raw, &hash));
    assert!(!api_key::verify(&raw, &hash[..data.len() % 32]));
    assert!(!api_key::verify(&raw, data) || data == hash);

    // Round trips of values built from the same bytes.
    let mut u = Unstructured::new(data);
    if let Ok((offset, snapshot_ms, digest, returned)) =
        <(usize, i64, String, Vec<[u8; 6]>)>::arbitrary(&mut u)
    {
        let cursor = PageCursor::new(offset, snapshot_ms, digest, returned.clone());
        let decoded = PageCursor::decode(&cursor.encode());
        assert_eq!(decoded.as_ref(), Ok(&cursor));
        assert_eq!(decoded.unwrap().returned(), returned);
    }
    let mut u = Unstructured::new(data);
    if let Ok((micros, id)) = <(i64, u128)>::arbitrary(&mut u)
        && let Some(created_at) = chrono::DateTime::from_timestamp_micros(micros)
    {
        let cursor = KeysetCursor {
            created_at,
            id: uuid::Uuid::from_u128(id),
        };
        assert_eq!(KeysetCursor::decode(&cursor.encode()).as_ref(), Ok(&cursor));
    }
    let mut random = [0u8; 18];
    for (slot, byte) in random.iter_mut().zip(data) {
        *slot = *byte;
    }
    let id = SESSION_IDS.issue_from(random);
    assert!(SESSION_IDS.verify(&id));
    assert!(!OTHER_SESSION_IDS.verify(&id));
    let mut tampered = id.clone().into_bytes();
    let last = tampered.len() - 1;
    tampered[last] = if tampered[last] == b'A' { b'B' } else { b'A' };
    assert!(!SESSION_IDS.verify(std::str::from_utf8(&tampered).unwrap()));

    let prefix = alphanumeric(data, 12);
    let key = format!(
        "mn_{prefix}_{}",
        alphanumeric(data.get(12..).unwrap_or(&[]), 43)
    );
    assert_eq!(api_key::parse_prefix(&key), Some(prefix.as_str()));
    assert!(api_key::verify(&key, &api_key::hash(&key)));
    assert_eq!(api_key::verify(&raw, &api_key::hash(&key)), raw == key);
});
