//! The keys that sign and verify access tokens (EdDSA over Ed25519), the
//! JWKS that publishes them, and the token's claims.
//!
//! Every pod must sign and verify alike, so the key is configuration, not
//! state: `MNEME_OAUTH_SIGNING_KEY`, or one derived from the deployment's
//! internal token. Rotation: publish the old key in
//! `MNEME_OAUTH_PREVIOUS_KEYS` while tokens it signed may still be alive.

use anyhow::Context;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ed25519_dalek::SigningKey;
use ed25519_dalek::pkcs8::{DecodePrivateKey, EncodePrivateKey};
use hmac::{Hmac, Mac};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use uuid::Uuid;

/// The claims of a mneme access token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct AccessClaims {
    pub(crate) iss: String,
    /// The resource: mneme's MCP endpoint URL.
    pub(crate) aud: String,
    /// Who consented: `user:<id>`, or `key:<id>` when an API key signed in.
    pub(crate) sub: String,
    pub(crate) exp: i64,
    pub(crate) iat: i64,
    pub(crate) jti: String,
    pub(crate) client_id: String,
    pub(crate) scope: String,
    /// The tenant and the key the token acts as (always a concrete key).
    pub(crate) tenant_id: Uuid,
    pub(crate) key_id: Uuid,
}

/// Why a token does not verify (never shown in detail to clients).
#[derive(Debug, thiserror::Error)]
#[error("invalid access token: {0}")]
pub(crate) struct InvalidToken(String);

struct VerifyingKey {
    kid: String,
    x: String,
    key: DecodingKey,
}

/// Signs and verifies access tokens.
pub(crate) struct TokenKeys {
    kid: String,
    signing: EncodingKey,
    verifying: Vec<VerifyingKey>,
    validation: Validation,
}

impl std::fmt::Debug for TokenKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenKeys")
            .field("kid", &self.kid)
            .finish_non_exhaustive()
    }
}

/// A key id: the first bytes of the public key's SHA-256, so every pod
/// names the same key the same way.
fn kid(public: &[u8]) -> String {
    hex::encode(&Sha256::digest(public)[..8])
}

fn verifying(x: &str) -> anyhow::Result<VerifyingKey> {
    let raw = URL_SAFE_NO_PAD
        .decode(x.trim())
        .with_context(|| format!("`{x}` is not a base64url Ed25519 public key"))?;
    anyhow::ensure!(raw.len() == 32, "an Ed25519 public key has 32 bytes");
    Ok(VerifyingKey {
        kid: kid(&raw),
        x: x.trim().to_owned(),
        key: DecodingKey::from_ed_components(x.trim())?,
    })
}

impl TokenKeys {
    /// The keys from configuration; `issuer` and `audience` are what every
    /// token must name.
    pub(crate) fn new(
        config: &mneme_config::OAuthConfig,
        internal_token: &str,
        issuer: &str,
        audience: &str,
    ) -> anyhow::Result<Self> {
        let signing = match &config.signing_key {
            Some(pem) => SigningKey::from_pkcs8_pem(pem.expose())
                .context("MNEME_OAUTH_SIGNING_KEY is not an Ed25519 PKCS#8 PEM private key")?,
            None => {
                let mut mac = <Hmac<Sha256>>::new_from_slice(internal_token.as_bytes())
                    .expect("HMAC takes keys of any length");
                mac.update(b"mneme oauth access-token signing key v1");
                SigningKey::from_bytes(&mac.finalize().into_bytes().into())
            }
        };
        let public = signing.verifying_key().to_bytes();
        let x = URL_SAFE_NO_PAD.encode(public);
        let der = signing
            .to_pkcs8_der()
            .context("cannot encode the signing key")?;
        let mut verifying_keys = vec![verifying(&x)?];
        for previous in &config.previous_keys {
            verifying_keys.push(verifying(previous).context("in MNEME_OAUTH_PREVIOUS_KEYS")?);
        }
        let mut validation = Validation::new(Algorithm::EdDSA);
        validation.set_audience(&[audience]);
        validation.set_issuer(&[issuer]);
        validation.set_required_spec_claims(&["exp", "aud", "iss", "sub"]);
        validation.leeway = config.clock_skew.as_secs();
        Ok(Self {
            kid: kid(&public),
            signing: EncodingKey::from_ed_der(der.as_bytes()),
            verifying: verifying_keys,
            validation,
        })
    }

    pub(crate) fn sign(&self, claims: &AccessClaims) -> String {
        let mut header = Header::new(Algorithm::EdDSA);
        header.kid = Some(self.kid.clone());
        header.typ = Some("at+jwt".into());
        jsonwebtoken::encode(&header, claims, &self.signing).expect("EdDSA signing cannot fail")
    }

    /// The claims of a valid token: signed by a known key, for this
    /// issuer and audience, not expired.
    pub(crate) fn verify(&self, token: &str) -> Result<AccessClaims, InvalidToken> {
        let header = jsonwebtoken::decode_header(token).map_err(|e| InvalidToken(e.to_string()))?;
        let key = self
            .verifying
            .iter()
            .find(|k| header.kid.as_deref() == Some(k.kid.as_str()))
            .ok_or_else(|| InvalidToken("unknown signing key".into()))?;
        jsonwebtoken::decode::<AccessClaims>(token, &key.key, &self.validation)
            .map(|data| data.claims)
            .map_err(|e| InvalidToken(e.to_string()))
    }

    /// The public keys, as a JWK Set.
    pub(crate) fn jwks(&self) -> Value {
        let keys: Vec<Value> = self
            .verifying
            .iter()
            .map(|k| {
                json!({
                    "kty": "OKP", "crv": "Ed25519", "alg": "EdDSA", "use": "sig",
                    "kid": k.kid, "x": k.x,
                })
            })
            .collect();
        json!({ "keys": keys })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> mneme_config::OAuthConfig {
        mneme_config::Config::defaults().gateway.oauth
    }

    fn claims(aud: &str, exp_in: i64) -> AccessClaims {
        let now = chrono::Utc::now().timestamp();
        AccessClaims {
            iss: "https://mneme.example".into(),
            aud: aud.into(),
            sub: "user:1".into(),
            exp: now + exp_in,
            iat: now,
            jti: "j".into(),
            client_id: "c".into(),
            scope: "memory:read".into(),
            tenant_id: Uuid::nil(),
            key_id: Uuid::nil(),
        }
    }

    const TOKEN: &str = "an-internal-token-of-at-least-32-chars!";
    const AUD: &str = "https://mneme.example/mcp";

    #[test]
    fn tokens_verify_only_with_the_right_key_audience_and_lifetime() {
        let keys = TokenKeys::new(&config(), TOKEN, "https://mneme.example", AUD).unwrap();
        let token = keys.sign(&claims(AUD, 60));
        assert_eq!(keys.verify(&token).unwrap().scope, "memory:read");

        assert!(
            keys.verify(&keys.sign(&claims("https://other/mcp", 60)))
                .is_err()
        );
        assert!(
            keys.verify(&keys.sign(&claims(AUD, -120))).is_err(),
            "expired"
        );

        let other = TokenKeys::new(
            &config(),
            "another-internal-token-of-32-chars!!",
            "https://mneme.example",
            AUD,
        )
        .unwrap();
        assert!(other.verify(&token).is_err(), "another deployment's key");

        // After rotation, the previous key still verifies what it signed.
        let old_x = keys.jwks()["keys"][0]["x"].as_str().unwrap().to_owned();
        let mut rotated_config = config();
        rotated_config.previous_keys = vec![old_x];
        let rotated = TokenKeys::new(
            &rotated_config,
            "another-internal-token-of-32-chars!!",
            "https://mneme.example",
            AUD,
        )
        .unwrap();
        assert!(rotated.verify(&token).is_ok());
        assert_eq!(rotated.jwks()["keys"].as_array().unwrap().len(), 2);
    }
}
