//! MCP session ids that prove their origin: 18 random bytes and a
//! truncated HMAC-SHA256 of them, under a key derived from the internal
//! token, base64url-encoded without padding (40 visible ASCII characters).
//! Any gateway pod tells an id mneme issued from one it did not without
//! Redis. Ids come back from clients, so [`SessionIds::verify`] takes any
//! string and only ever answers yes or no.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

const ID_RANDOM_BYTES: usize = 18;
const ID_TAG_BYTES: usize = 12;

/// Issues and checks session ids.
pub struct SessionIds {
    key: [u8; 32],
}

impl std::fmt::Debug for SessionIds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SessionIds { key: [redacted] }")
    }
}

impl SessionIds {
    pub fn new(internal_token: &str) -> Self {
        let mut mac = <Hmac<Sha256>>::new_from_slice(internal_token.as_bytes())
            .expect("HMAC takes keys of any length");
        mac.update(b"mneme mcp session ids v1");
        Self {
            key: mac.finalize().into_bytes().into(),
        }
    }

    fn tag(&self, random: &[u8]) -> [u8; ID_TAG_BYTES] {
        let mut mac = <Hmac<Sha256>>::new_from_slice(&self.key).expect("any key length");
        mac.update(random);
        let full = mac.finalize().into_bytes();
        let mut tag = [0; ID_TAG_BYTES];
        tag.copy_from_slice(&full[..ID_TAG_BYTES]);
        tag
    }

    /// A new id.
    pub fn issue(&self) -> String {
        self.issue_from(rand::random())
    }

    /// The id whose random part is `random` (deterministic, for tests and
    /// fuzzing).
    pub fn issue_from(&self, random: [u8; ID_RANDOM_BYTES]) -> String {
        let mut raw = random.to_vec();
        raw.extend_from_slice(&self.tag(&random));
        URL_SAFE_NO_PAD.encode(raw)
    }

    /// Whether mneme issued `id` (under the current internal token).
    pub fn verify(&self, id: &str) -> bool {
        let Ok(raw) = URL_SAFE_NO_PAD.decode(id) else {
            return false;
        };
        if raw.len() != ID_RANDOM_BYTES + ID_TAG_BYTES {
            return false;
        }
        let (random, tag) = raw.split_at(ID_RANDOM_BYTES);
        self.tag(random).ct_eq(tag).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_visible_ascii_and_verifiable_only_under_their_key() {
        let ids = SessionIds::new("a-secret-of-at-least-32-characters!!");
        let id = ids.issue();
        assert_eq!(id.len(), 40);
        assert!(id.bytes().all(|b| (0x21..=0x7e).contains(&b)), "{id}");
        assert!(ids.verify(&id));
        assert_ne!(id, ids.issue());

        let other = SessionIds::new("another-secret-of-at-least-32-chars!");
        assert!(!other.verify(&id));
        assert!(!ids.verify("not-a-session"));
        assert!(!ids.verify(&uuid::Uuid::new_v4().to_string()));
        let mut forged = id.clone().into_bytes();
        forged[0] = if forged[0] == b'A' { b'B' } else { b'A' };
        assert!(!ids.verify(std::str::from_utf8(&forged).unwrap()));
    }
}
