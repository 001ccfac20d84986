//! Upstream headers (a tenant's credentials for its own MCP servers) are
//! stored encrypted: XChaCha20-Poly1305 under the operator's
//! `MNEME_PROXY_HEADER_KEY`, a random 24-byte nonce in front of each
//! ciphertext. The tenant id is bound as associated data, so a sealed blob
//! copied into another tenant's row does not open.

use std::collections::BTreeMap;

use base64::Engine as _;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use rand::RngCore;
use uuid::Uuid;

const NONCE_BYTES: usize = 24;

/// A header map in clear: names to values.
pub type Headers = BTreeMap<String, String>;

/// Why headers could not be sealed or opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    #[error("MNEME_PROXY_HEADER_KEY must be 32 bytes in base64")]
    BadKey,
    #[error("the stored headers do not open with the current key")]
    Corrupt,
}

/// The key that seals upstream headers.
#[derive(Clone)]
pub struct HeaderKey(XChaCha20Poly1305);

impl std::fmt::Debug for HeaderKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HeaderKey(..)")
    }
}

impl HeaderKey {
    /// A key from its base64 form (standard alphabet, 32 bytes).
    pub fn from_base64(encoded: &str) -> Result<Self, SealError> {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(encoded.trim())
            .map_err(|_| SealError::BadKey)?;
        let cipher = XChaCha20Poly1305::new_from_slice(&bytes).map_err(|_| SealError::BadKey)?;
        Ok(Self(cipher))
    }

    /// Seals `headers` for `tenant`; `None` when there are none.
    pub fn seal(&self, tenant: Uuid, headers: &Headers) -> Option<Vec<u8>> {
        if headers.is_empty() {
            return None;
        }
        let plaintext = serde_json::to_vec(headers).expect("a string map serialises");
        let mut nonce = [0u8; NONCE_BYTES];
        rand::rng().fill_bytes(&mut nonce);
        let ciphertext = self
            .0
            .encrypt(
                XNonce::from_slice(&nonce),
                Payload {
                    msg: &plaintext,
                    aad: tenant.as_bytes(),
                },
            )
            .expect("XChaCha20-Poly1305 encrypts any message of this size");
        let mut sealed = nonce.to_vec();
        sealed.extend_from_slice(&ciphertext);
        Some(sealed)
    }

    /// Opens what [`HeaderKey::seal`] produced for the same tenant.
    pub fn open(&self, tenant: Uuid, sealed: Option<&[u8]>) -> Result<Headers, SealError> {
        let Some(sealed) = sealed else {
            return Ok(Headers::new());
        };
        if sealed.len() <= NONCE_BYTES {
            return Err(SealError::Corrupt);
        }
        let (nonce, ciphertext) = sealed.split_at(NONCE_BYTES);
        let plaintext = self
            .0
            .decrypt(
                XNonce::from_slice(nonce),
                Payload {
                    msg: ciphertext,
                    aad: tenant.as_bytes(),
                },
            )
            .map_err(|_| SealError::Corrupt)?;
        serde_json::from_slice(&plaintext).map_err(|_| SealError::Corrupt)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> HeaderKey {
        HeaderKey::from_base64(&base64::engine::general_purpose::STANDARD.encode([7u8; 32]))
            .unwrap()
    }

    #[test]
    fn round_trip_and_tenant_binding() {
        let headers = Headers::from([("Authorization".to_owned(), "Bearer s3cret".to_owned())]);
        let tenant_a = Uuid::from_bytes([1u8; 16]);
        let tenant_b = Uuid::from_bytes([2u8; 16]);
        let sealed = key().seal(tenant_a, &headers).unwrap();
        assert!(!sealed.windows(6).any(|w| w == b"s3cret"));
        assert_eq!(key().open(tenant_a, Some(&sealed)).unwrap(), headers);
        assert_eq!(key().open(tenant_b, Some(&sealed)), Err(SealError::Corrupt));
        let other =
            HeaderKey::from_base64(&base64::engine::general_purpose::STANDARD.encode([8u8; 32]))
                .unwrap();
        assert_eq!(other.open(tenant_a, Some(&sealed)), Err(SealError::Corrupt));
        assert!(key().seal(tenant_a, &Headers::new()).is_none());
        assert_eq!(key().open(tenant_a, None).unwrap(), Headers::new());
    }

    #[test]
    fn bad_keys_are_refused() {
        assert_eq!(
            HeaderKey::from_base64("short").unwrap_err(),
            SealError::BadKey
        );
        assert_eq!(
            HeaderKey::from_base64(&base64::engine::general_purpose::STANDARD.encode([0u8; 16]))
                .unwrap_err(),
            SealError::BadKey
        );
    }
}
