//! Masks secrets in log lines before they leave the process.
//!
//! mneme's code never puts a secret or memory content in a log field on
//! purpose; this is the second line of defence for what arrives by
//! accident, inside an error message from a driver or a library (a
//! database URL with its password, an `Authorization` header echoed by an
//! HTTP client, an API key a user pasted into a tool argument that failed
//! validation). It works on the formatted line, so it covers both log
//! formats and every field.

use std::borrow::Cow;
use std::io::{self, Write};
use std::sync::LazyLock;

use regex::Regex;
use tracing_subscriber::fmt::MakeWriter;

/// Patterns and their replacements, applied in order.
static RULES: LazyLock<Vec<(Regex, &'static str)>> = LazyLock::new(|| {
    [
        // mneme API keys: the prefix identifies the key and is shown in
        // the dashboard; the secret part is not.
        (r"\bmn_([A-Za-z0-9]{4,})_[A-Za-z0-9]{8,}", "mn_${1}_[redacted]"),
        // JWTs (OAuth access tokens, ID tokens).
        (
            r"\beyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]+",
            "[redacted-jwt]",
        ),
        (r"(?i)\b(bearer)(\s+)[A-Za-z0-9._~+/=-]{8,}", "${1}${2}[redacted]"),
        // user:password@ in any URL.
        (r#"(://[^:/@\s"']*):[^@\s"'/]+@"#, "${1}:[redacted]@"),
        // key=value and "key": "value" forms of well-known secret names.
        (
            r#"(?i)\b(password|passwd|secret|client_secret|api_key|apikey|access_token|refresh_token|id_token|code_verifier|internal_token)(["']?\s*[:=]\s*["']?)[^\s"'&,;}]+"#,
            "${1}${2}[redacted]",
        ),
    ]
    .into_iter()
    .map(|(pattern, replacement)| (Regex::new(pattern).expect("valid pattern"), replacement))
    .collect()
});

/// `line` with every secret the rules recognise masked.
pub fn redact(line: &str) -> Cow<'_, str> {
    let mut text = Cow::Borrowed(line);
    for (pattern, replacement) in RULES.iter() {
        if let Cow::Owned(replaced) = pattern.replace_all(&text, *replacement) {
            text = Cow::Owned(replaced);
        }
    }
    text
}

/// A [`MakeWriter`] whose writers mask secrets in what they write.
/// `tracing-subscriber` formats each event into a buffer and writes it
/// with one `write_all`, so each write is one whole line.
#[derive(Debug, Clone, Copy, Default)]
pub struct RedactingStderr;

impl<'a> MakeWriter<'a> for RedactingStderr {
    type Writer = RedactingWriter;

    fn make_writer(&'a self) -> Self::Writer {
        RedactingWriter
    }
}

/// See [`RedactingStderr`].
#[derive(Debug)]
pub struct RedactingWriter;

impl Write for RedactingWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        io::stderr().lock().write_all(redact(&text).as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        io::stderr().flush()
    }
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn secrets_are_masked() {
        let cases = [
            (
                "key mn_AbCd1234_abcdefghijklmnopqrstuvwxyz012345 rejected",
                "key mn_AbCd1234_[redacted] rejected",
            ),
            (
                "authorization: Bearer abc.def-ghi_jkl+mno/pqr=",
                "authorization: Bearer [redacted]",
            ),
            (
                "token eyJhbGciOiJFZERTQSJ9.eyJzdWIiOiJ1In0.c2lnbmF0dXJl expired",
                "token [redacted-jwt] expired",
            ),
            (
                "error connecting to postgres://mneme:s3cr3t@db:5432/mneme",
                "error connecting to postgres://mneme:[redacted]@db:5432/mneme",
            ),
            (
                r#"{"password":"hunter22","email":"a@b.c"}"#,
                r#"{"password":"[redacted]","email":"a@b.c"}"#,
            ),
            (
                "grant_type=refresh_token&refresh_token=Zm9vYmFy123&client_id=x",
                "grant_type=refresh_token&refresh_token=[redacted]&client_id=x",
            ),
            (
                "redis://:p4ss@cache:6379/0 unreachable",
                "redis://:[redacted]@cache:6379/0 unreachable",
            ),
        ];
        for (line, expected) in cases {
            assert_eq!(redact(line), expected, "{line}");
        }
    }

    #[test]
    fn ordinary_lines_are_left_alone() {
        for line in [
            "recall answered in 12 ms with 5 fragments",
            "GET /mcp 200 token_endpoint=https://mneme.example/oauth/token",
            "connecting to postgres://db:5432/mneme",
            "tenant.id=01a231e0-2fa5-754c-a371-a608e6dffbff",
        ] {
            assert_eq!(redact(line), line);
        }
    }
}
