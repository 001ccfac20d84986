//! Passwords of people (tenant users): argon2id hashes in PHC form, the
//! rules a new password must meet, and verification that costs the same
//! whether or not the account exists.
//!
//! API keys are not passwords: they carry 256 random bits and are stored as
//! SHA-256 ([`crate::api_key`]); only human-chosen secrets need a slow KDF.

use std::sync::LazyLock;

use argon2::Argon2;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};

use crate::Error;

/// Shortest accepted password, in characters.
pub const MIN_LENGTH: usize = 12;
/// Longest accepted password (bounds the hashing work per attempt).
pub const MAX_LENGTH: usize = 256;

/// Checks a new password against the rules.
pub fn validate(password: &str) -> Result<(), Error> {
    let length = password.chars().count();
    if length < MIN_LENGTH {
        return Err(Error::invalid_argument(format!(
            "a password needs at least {MIN_LENGTH} characters"
        )));
    }
    if length > MAX_LENGTH {
        return Err(Error::invalid_argument(format!(
            "a password has at most {MAX_LENGTH} characters"
        )));
    }
    Ok(())
}

/// The argon2id hash of a valid password (CPU-bound: call it off the async
/// runtime's worker threads).
pub fn hash(password: &str) -> Result<String, Error> {
    validate(password)?;
    // 16 random bytes from the thread RNG (a CSPRNG seeded by the OS).
    let salt = SaltString::encode_b64(&rand::random::<[u8; 16]>())
        .map_err(|e| Error::new(crate::ErrorCode::Internal, format!("salt: {e}")))?;
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|hash| hash.to_string())
        .map_err(|e| Error::new(crate::ErrorCode::Internal, format!("hashing failed: {e}")))
}

/// A hash of nothing anyone knows, verified against when an account does
/// not exist, so a wrong email costs as long as a wrong password.
static DECOY: LazyLock<String> =
    LazyLock::new(|| hash("mneme decoy password that nobody can know").expect("the decoy hashes"));

/// Whether `password` matches `stored` (a PHC string); `None` as `stored`
/// still does the work of a verification and fails.
pub fn verify(password: &str, stored: Option<&str>) -> bool {
    let target = stored.unwrap_or(DECOY.as_str());
    let matches = PasswordHash::new(target).is_ok_and(|parsed| {
        Argon2::default()
            .verify_password(password.as_bytes(), &parsed)
            .is_ok()
    });
    matches && stored.is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_verify_only_their_password_and_short_ones_are_refused() {
        let stored = hash("correct horse battery").unwrap();
        assert!(stored.starts_with("$argon2id$"));
        assert!(verify("correct horse battery", Some(&stored)));
        assert!(!verify("correct horse batterY", Some(&stored)));
        assert!(
            !verify("correct horse battery", None),
            "no account, no match"
        );
        assert!(hash("short").is_err());
    }
}
