//! API keys: `mn_<prefix>_<secret>`.
//!
//! The prefix (12 base-62 characters) identifies the key row; the secret (43
//! base-62 characters, ~256 bits) proves possession. Only SHA-256 of the
//! whole key is stored: with this much entropy a slow KDF adds nothing, and
//! lookups stay cheap on every request.

use rand::Rng;
use rand::distr::Alphanumeric;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

const PREFIX_LEN: usize = 12;
const SECRET_LEN: usize = 43;

/// A freshly generated key. `raw` is shown to the user once and then dropped.
#[derive(Debug)]
pub struct NewApiKey {
    pub prefix: String,
    pub raw: String,
    pub hash: [u8; 32],
}

fn random_alphanumeric(len: usize) -> String {
    rand::rng()
        .sample_iter(Alphanumeric)
        .take(len)
        .map(char::from)
        .collect()
}

/// Generates a new random key.
pub fn generate() -> NewApiKey {
    let prefix = random_alphanumeric(PREFIX_LEN);
    let raw = format!("mn_{prefix}_{}", random_alphanumeric(SECRET_LEN));
    let hash = hash(&raw);
    NewApiKey { prefix, raw, hash }
}

/// SHA-256 of the whole raw key.
pub fn hash(raw: &str) -> [u8; 32] {
    Sha256::digest(raw.as_bytes()).into()
}

/// The prefix of a well-formed key, or `None` for anything else. Cheap
/// syntax checks reject garbage before it reaches the database.
pub fn parse_prefix(raw: &str) -> Option<&str> {
    let rest = raw.strip_prefix("mn_")?;
    let (prefix, secret) = rest.split_once('_')?;
    let well_formed = prefix.len() == PREFIX_LEN
        && secret.len() == SECRET_LEN
        && prefix
            .bytes()
            .chain(secret.bytes())
            .all(|b| b.is_ascii_alphanumeric());
    well_formed.then_some(prefix)
}

/// Constant-time comparison of a presented key with a stored hash.
pub fn verify(raw: &str, stored_hash: &[u8]) -> bool {
    hash(raw).ct_eq(stored_hash).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_keys_parse_and_verify() {
        let key = generate();
        assert_eq!(parse_prefix(&key.raw), Some(key.prefix.as_str()));
        assert!(verify(&key.raw, &key.hash));
        assert!(!verify(&generate().raw, &key.hash));
        assert_ne!(generate().raw, key.raw);
    }

    #[test]
    fn malformed_keys_are_rejected_before_lookup() {
        assert_eq!(parse_prefix("mn_short_secret"), None);
        assert_eq!(parse_prefix("sk-abc"), None);
        let key = generate();
        assert_eq!(parse_prefix(&format!("{}!", key.raw)), None);
        assert!(!verify(&key.raw, &key.hash[..16]));
    }
}
