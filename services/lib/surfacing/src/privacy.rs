//! Query privacy: detecting credentials and personal data in extracted
//! queries, and deciding what may be stored.
//!
//! A sensitive query is **not sent to recall at all**: callers skip with the
//! reason `sensitive_query`. The reference hashed such queries and searched
//! for the digest, which can never match anything yet still cost a round trip
//! and a rate-limit slot (its weak point 15). Stored events keep the query
//! text only when the operator allows it and the query is not sensitive;
//! otherwise they keep [`digest`], which still lets cooldown and statistics
//! group equal queries.
//!
//! Detection reuses `mneme_core::redact` (secrets and PII) and adds the
//! provider formats it does not cover. Pattern matching is best-effort.

use std::sync::LazyLock;

use regex::RegexSet;
use sha2::{Digest, Sha256};

/// Credential formats beyond those `mneme_core::redact` already knows.
static EXTRA_SECRETS: LazyLock<RegexSet> = LazyLock::new(|| {
    RegexSet::new([
        r"\bASIA[0-9A-Z]{16}\b",
        r"(?i)aws_?secret_?access_?key|aws_?session_?token|x-amz-security-token",
        r"(?i)\b(?:secret[_-]?key|api[_-]?key|access[_-]?token)\s*[:=]",
        r"(?i)\b(?:password|passwd|pwd)\s*[:=]",
        r"\b(?:sk|pk|rk)_(?:live|test)_[0-9A-Za-z]{10,}",
        r"\bwhsec_[0-9A-Za-z]{16,}",
        r"\bnpm_[0-9A-Za-z]{36}\b",
        r"\bglpat-[0-9A-Za-z_-]{20,}",
        r"\bhf_[A-Za-z0-9]{30,}",
        r"\bpypi-AgEIcHlwaS5vcmc[A-Za-z0-9_-]{16,}",
        r"-----BEGIN [A-Z ]*PRIVATE KEY-----",
    ])
    .expect("valid secret patterns")
});

/// True when the text contains something that looks like a credential or
/// personal data (e-mail addresses, phone numbers).
pub fn contains_sensitive(text: &str) -> bool {
    EXTRA_SECRETS.is_match(text) || mneme_core::redact::redact(text, true).replaced > 0
}

/// `"sha256:"` + the first 16 hex characters of SHA-256(text).
pub fn digest(text: &str) -> String {
    let hash = Sha256::digest(text.as_bytes());
    format!("sha256:{}", &hex::encode(hash)[..16])
}

/// What may be stored for a query: the text itself when `persist_text` is on
/// and the query is not sensitive, otherwise its [`digest`].
pub fn stored_query(query: &str, persist_text: bool) -> String {
    if persist_text && !contains_sensitive(query) {
        query.to_owned()
    } else {
        digest(query)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_and_pii_are_sensitive() {
        for text in [
            "api_key=abcd1234",
            "password: hunter2",
            "AKIAIOSFODNN7EXAMPLE",
            "ASIAIOSFODNN7EXAMPLE",
            "aws_secret_access_key",
            "sk-proj-abcdefghijklmnop1234",
            "sk-ant-api03-abcdefghijklmnopqrstuv",
            "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
            "gho_abcdefghijklmnopqrstuvwxyz0123456789",
            "github_pat_11ABCDEFG0123456789_abcdefghijkl",
            "xoxb-1234567890-abcdefghij",
            "sk_live_abcdefghij1234",
            "pk_test_abcdefghij1234",
            "whsec_abcdefghijklmnop1234",
            "npm_abcdefghijklmnopqrstuvwxyz0123456789",
            "eyJhbGciOiJI.eyJzdWIiOiIx.SflKxwRJSMeKKF2QT4",
            "-----BEGIN RSA PRIVATE KEY-----",
            "AIzaSyA1234567890abcdefghijklmnopqrstuv",
            "glpat-abcdefghij0123456789",
            "hf_abcdefghijklmnopqrstuvwxyz01234567",
            "mail kim@example.com about it",
        ] {
            assert!(contains_sensitive(text), "{text}");
        }
    }

    #[test]
    fn ordinary_queries_are_not_sensitive() {
        for text in [
            "jwt handler token rotation",
            "password reset flow design",
            "인증 토큰 만료",
            "src auth session",
            "sk learn pipeline",
        ] {
            assert!(!contains_sensitive(text), "{text}");
        }
    }

    #[test]
    fn digest_format() {
        let d = digest("hello");
        assert_eq!(d, "sha256:2cf24dba5fb0a30e");
        assert_eq!(d.len(), "sha256:".len() + 16);
    }

    #[test]
    fn stored_query_respects_setting_and_sensitivity() {
        assert_eq!(stored_query("jwt rotation", true), "jwt rotation");
        assert_eq!(stored_query("jwt rotation", false), digest("jwt rotation"));
        assert_eq!(
            stored_query("password=hunter2", true),
            digest("password=hunter2")
        );
    }
}
