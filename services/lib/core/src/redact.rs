//! Removes obvious secrets (and, optionally, personal data) from content
//! before it is stored.
//!
//! Agents paste logs and configs into memories; a memory store must not
//! become a credential store. Secrets are always redacted; e-mail addresses
//! and phone numbers only when PII redaction is on (`MNEME_REDACT_PII`).

use std::sync::LazyLock;

use regex::{Captures, Regex};

const REDACTED: &str = "[REDACTED]";
const EMAIL: &str = "[EMAIL]";
const PHONE: &str = "[PHONE]";

struct Rule {
    pattern: Regex,
    /// Replacement; `$label` keeps a captured label (`password=` stays readable).
    replacement: &'static str,
}

fn rule(pattern: &str, replacement: &'static str) -> Rule {
    Rule {
        pattern: Regex::new(pattern).expect("redaction patterns are valid"),
        replacement,
    }
}

static SECRET_RULES: LazyLock<Vec<Rule>> = LazyLock::new(|| {
    vec![
        rule(
            r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----",
            REDACTED,
        ),
        rule(
            r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
            REDACTED,
        ),
        rule(
            r"(?i)(?P<label>\bbearer\s+)[A-Za-z0-9._~+/-]{16,}=*",
            "${label}[REDACTED]",
        ),
        rule(r"\bsk-[A-Za-z0-9_-]{16,}", REDACTED),
        rule(r"\bAIza[0-9A-Za-z_-]{35}", REDACTED),
        rule(r"\bgh[pousr]_[A-Za-z0-9]{30,}", REDACTED),
        rule(r"\bgithub_pat_[A-Za-z0-9_]{22,}", REDACTED),
        rule(r"\bAKIA[0-9A-Z]{16}\b", REDACTED),
        rule(r"\bxox[abprs]-[A-Za-z0-9-]{10,}", REDACTED),
        rule(r"\bmn_[A-Za-z0-9]+_[A-Za-z0-9_-]{20,}", REDACTED),
        rule(
            r#"(?i)(?P<label>\b(?:password|passwd|pwd|secret|api[_-]?key|access[_-]?token|auth[_-]?token|client[_-]?secret)\s*[:=]\s*)["']?[^\s"',;]+["']?"#,
            "${label}[REDACTED]",
        ),
    ]
});

static PII_RULES: LazyLock<Vec<Rule>> = LazyLock::new(|| {
    vec![
        rule(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}\b", EMAIL),
        rule(r"\b01[016789]-?\d{3,4}-?\d{4}\b", PHONE),
        rule(
            r"\+?\b\d{1,3}[ -]\(?\d{2,4}\)?[ -]\d{3,4}[ -]\d{3,4}\b",
            PHONE,
        ),
    ]
});

/// The result of redaction: the cleaned text and how many spans were replaced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redacted {
    pub text: String,
    pub replaced: usize,
}

/// Redacts secrets, and PII when `redact_pii` is set.
pub fn redact(text: &str, redact_pii: bool) -> Redacted {
    let mut current = text.to_owned();
    let mut replaced = 0;
    let rules = SECRET_RULES
        .iter()
        .chain(PII_RULES.iter().filter(|_| redact_pii));
    for rule in rules {
        let mut count = 0;
        let next = rule.pattern.replace_all(&current, |caps: &Captures<'_>| {
            count += 1;
            let mut out = String::new();
            caps.expand(rule.replacement, &mut out);
            out
        });
        if count > 0 {
            replaced += count;
            current = next.into_owned();
        }
    }
    Redacted {
        text: current,
        replaced,
    }
}

/// `text` without the marks [`redact`] leaves, for what must not take them
/// for words of the memory (its extracted keywords).
pub fn without_marks(text: &str) -> String {
    [REDACTED, EMAIL, PHONE]
        .iter()
        .fold(text.to_owned(), |text, mark| text.replace(mark, " "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_marks_can_be_taken_out_again() {
        let out = redact("password=hunter2, mail ana@acme.example", true);
        assert_eq!(out.text, "password=[REDACTED], mail [EMAIL]");
        assert_eq!(without_marks(&out.text), "password= , mail  ");
    }

    #[test]
    fn secrets_are_replaced_and_labels_kept() {
        let out = redact(
            "deploy with password=hunter2! and key sk-proj-abcdefghijklmnop1234 via Bearer abcdefghijklmnopqrstuvwxyz",
            false,
        );
        assert_eq!(
            out.text,
            "deploy with password=[REDACTED] and key [REDACTED] via Bearer [REDACTED]"
        );
        assert_eq!(out.replaced, 3);
    }

    #[test]
    fn mneme_keys_and_jwts_are_secrets() {
        let out = redact(
            "key mn_ab12cd34_QWERTYUIOPASDFGHJKLZXCVBNM and eyJhbGciOiJI.eyJzdWIiOiIx.SflKxwRJSMeKKF2QT4",
            false,
        );
        assert_eq!(out.text, "key [REDACTED] and [REDACTED]");
    }

    #[test]
    fn pii_is_only_redacted_when_asked() {
        let text = "mail kim@example.com or call 010-1234-5678";
        assert_eq!(redact(text, false).replaced, 0);
        assert_eq!(redact(text, true).text, "mail [EMAIL] or call [PHONE]");
    }

    #[test]
    fn ordinary_text_is_untouched() {
        let text = "The user prefers espresso; 사용자는 에스프레소를 좋아한다.";
        assert_eq!(redact(text, true).text, text);
    }
}
