//! Static gates that decide, before any recall, whether a call may surface:
//! tool globs (exclusions, write tools), MCP annotations and the query
//! cooldown.
//!
//! Fixes of the reference: write tools are recognised by MCP annotations
//! first (`readOnlyHint`, `destructiveHint`) and by a longer default pattern
//! list (`update_*`, `edit_*`, `move_*` … were missed); globs match
//! case-insensitively on every platform. The default list errs towards
//! "write" (`*put*` also matches `output`): a false positive only costs one
//! surfacing, and a `readOnlyHint=true` annotation overrides it.

use regex::RegexSet;
use thiserror::Error;

/// Name patterns of tools that change state, used when a tool has no
/// annotations saying otherwise.
pub const DEFAULT_WRITE_TOOL_PATTERNS: &[&str] = &[
    "*write*",
    "*create*",
    "*delete*",
    "*remove*",
    "*update*",
    "*edit*",
    "*move*",
    "*rename*",
    "*push*",
    "*send*",
    "post_*",
    "*_post",
    "put_*",
    "*_put",
    "*insert*",
    "*upsert*",
    "*merge*",
    "*patch*",
    "*drop*",
    "*set_*",
    "commit*",
    "*_commit",
    "*deploy*",
    "*publish*",
];

/// The MCP tool annotations that matter for surfacing.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ToolAnnotations {
    /// `readOnlyHint`.
    pub read_only: Option<bool>,
    /// `destructiveHint`.
    pub destructive: Option<bool>,
}

/// A glob that cannot be compiled.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PatternError {
    /// A `[` without its closing `]`.
    #[error("tool pattern {0:?}: unclosed '['")]
    UnclosedClass(String),
    /// A class the matcher rejects (for example a reversed range `[z-a]`).
    #[error("tool pattern {pattern:?}: {reason}")]
    Invalid {
        /// The pattern as configured.
        pattern: String,
        /// Why it was rejected.
        reason: String,
    },
}

/// Compiled fnmatch-style globs (`*`, `?`, `[...]` classes, `[!...]`
/// negation), matched case-insensitively against both `server__tool` and the
/// bare `tool`.
#[derive(Debug, Clone)]
pub struct ToolPatterns {
    set: RegexSet,
}

impl ToolPatterns {
    /// Compiles the globs; the first invalid one is an error.
    pub fn new(patterns: &[String]) -> Result<Self, PatternError> {
        let regexes = patterns
            .iter()
            .map(|pattern| glob_to_regex(pattern))
            .collect::<Result<Vec<_>, _>>()?;
        let set = RegexSet::new(&regexes).map_err(|error| PatternError::Invalid {
            pattern: patterns.join(", "),
            reason: error.to_string(),
        })?;
        Ok(Self { set })
    }

    /// True when any glob matches `server__tool` or `tool`.
    pub fn matches(&self, server: &str, tool: &str) -> bool {
        self.set.is_match(&format!("{server}__{tool}")) || self.set.is_match(tool)
    }

    /// True when no glob is configured.
    pub fn is_empty(&self) -> bool {
        self.set.is_empty()
    }
}

/// Translates one glob into an anchored, case-insensitive regex; everything
/// that is not a wildcard is matched literally.
fn glob_to_regex(pattern: &str) -> Result<String, PatternError> {
    let chars: Vec<char> = pattern.chars().collect();
    let mut out = String::from("(?is)^");
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '*' => out.push_str(".*"),
            '?' => out.push('.'),
            '[' => {
                let (class, next) = class_to_regex(pattern, &chars, i)?;
                out.push_str(&class);
                i = next;
                continue;
            }
            c => out.push_str(&regex::escape(c.encode_utf8(&mut [0; 4]))),
        }
        i += 1;
    }
    out.push('$');
    Ok(out)
}

/// Translates the class starting at `chars[start] == '['`; returns the regex
/// class and the index after its `]`. As in fnmatch, `!` negates and a `]`
/// right after the opening (or after `!`) is a literal.
fn class_to_regex(
    pattern: &str,
    chars: &[char],
    start: usize,
) -> Result<(String, usize), PatternError> {
    let mut i = start + 1;
    let mut out = String::from("[");
    if chars.get(i) == Some(&'!') {
        out.push('^');
        i += 1;
    }
    let first = i;
    while i < chars.len() && (chars[i] != ']' || i == first) {
        let low = chars[i];
        out.push_str(&regex::escape(low.encode_utf8(&mut [0; 4])));
        let is_range =
            chars.get(i + 1) == Some(&'-') && chars.get(i + 2).is_some_and(|c| *c != ']');
        if is_range {
            let high = chars[i + 2];
            if high < low {
                return Err(PatternError::Invalid {
                    pattern: pattern.to_owned(),
                    reason: format!("reversed range '{low}-{high}'"),
                });
            }
            out.push('-');
            out.push_str(&regex::escape(high.encode_utf8(&mut [0; 4])));
            i += 3;
        } else {
            i += 1;
        }
    }
    if i >= chars.len() {
        return Err(PatternError::UnclosedClass(pattern.to_owned()));
    }
    out.push(']');
    Ok((out, i + 1))
}

/// MCP annotations first: `readOnlyHint=true` → not a write tool;
/// `destructiveHint=true` or `readOnlyHint=false` → write tool; otherwise the
/// name patterns decide.
pub fn is_write_tool(
    annotations: ToolAnnotations,
    write_patterns: &ToolPatterns,
    server: &str,
    tool: &str,
) -> bool {
    if annotations.read_only == Some(true) {
        return false;
    }
    annotations.destructive == Some(true)
        || annotations.read_only == Some(false)
        || write_patterns.matches(server, tool)
}

/// Jaccard similarity of the sets of lowercase whitespace tokens (two empty
/// queries: 1.0).
pub fn jaccard(a: &str, b: &str) -> f64 {
    let tokens = |text: &str| {
        text.split_whitespace()
            .map(str::to_lowercase)
            .collect::<std::collections::HashSet<_>>()
    };
    let (a, b) = (tokens(a), tokens(b));
    let union = a.union(&b).count();
    if union == 0 {
        return 1.0;
    }
    a.intersection(&b).count() as f64 / union as f64
}

/// True when `query` repeats (Jaccard > threshold) a query surfaced within
/// `window_ms` before `now_ms`. `recent` holds (surfaced_at_ms, query). An
/// entry exactly `window_ms` old is outside the window; entries stamped after
/// `now_ms` (clock skew between instances) count as fresh.
pub fn in_cooldown(
    query: &str,
    recent: &[(u64, String)],
    now_ms: u64,
    window_ms: u64,
    threshold: f64,
) -> bool {
    recent.iter().any(|(surfaced_at, previous)| {
        now_ms.saturating_sub(*surfaced_at) < window_ms && jaccard(query, previous) > threshold
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn patterns(globs: &[&str]) -> ToolPatterns {
        let owned: Vec<String> = globs.iter().map(|g| (*g).to_owned()).collect();
        ToolPatterns::new(&owned).expect("valid globs")
    }

    #[test]
    fn globs_match_both_names_case_insensitively() {
        let excluded = patterns(&["context7__*", "*Debug*"]);
        assert!(excluded.matches("context7", "resolve"));
        assert!(excluded.matches("other", "run_debug_dump"));
        assert!(excluded.matches("Context7", "x"));
        assert!(!excluded.matches("context", "resolve"));
        assert!(!excluded.is_empty());
        assert!(patterns(&[]).is_empty());
        assert!(!patterns(&[]).matches("a", "b"));
    }

    #[test]
    fn glob_wildcards_classes_and_literals() {
        let p = patterns(&["get_?", "[ab]*_x", "[!z]ip", "a.b+c"]);
        assert!(p.matches("s", "get_1"));
        assert!(!p.matches("s", "get_12"));
        assert!(p.matches("s", "b_x") && p.matches("s", "abc_x"));
        assert!(p.matches("s", "zzip") == p.matches("s", "s__zzip"));
        assert!(p.matches("s", "hip") && !p.matches("s", "zip"));
        assert!(p.matches("s", "a.b+c") && !p.matches("s", "axbbc"));
        let ranges = patterns(&["v[0-9]", "[]]x"]);
        assert!(ranges.matches("s", "v7") && !ranges.matches("s", "va"));
        assert!(ranges.matches("s", "]x"));
    }

    #[test]
    fn invalid_globs_are_errors() {
        let unclosed = ToolPatterns::new(&["read_[abc".to_owned()]).unwrap_err();
        assert_eq!(
            unclosed,
            PatternError::UnclosedClass("read_[abc".to_owned())
        );
        assert!(ToolPatterns::new(&["[]".to_owned()]).is_err());
        assert!(matches!(
            ToolPatterns::new(&["[z-a]".to_owned()]),
            Err(PatternError::Invalid { .. })
        ));
    }

    fn is_write(read_only: Option<bool>, destructive: Option<bool>, tool: &str) -> bool {
        let hints = ToolAnnotations {
            read_only,
            destructive,
        };
        is_write_tool(hints, &patterns(DEFAULT_WRITE_TOOL_PATTERNS), "s", tool)
    }

    #[test]
    fn default_patterns_catch_the_names_the_reference_missed() {
        let writes = "update_issue edit_file move_card rename_branch post_message put_object \
                      upsert_row merge_pr set_label git_commit PushFiles";
        for tool in writes.split_whitespace() {
            assert!(is_write(None, None, tool), "{tool}");
        }
        for tool in ["read_file", "search_code", "list_issues", "get_settings"] {
            assert!(!is_write(None, None, tool), "{tool}");
        }
    }

    #[test]
    fn annotations_beat_names() {
        assert!(!is_write(Some(true), None, "create_report_preview"));
        assert!(!is_write(Some(true), Some(true), "delete_nothing"));
        assert!(is_write(Some(false), None, "search"));
        assert!(is_write(None, Some(true), "search"));
        assert!(!is_write(None, Some(false), "search"));
        assert!(is_write(None, Some(false), "delete_row"));
    }

    #[test]
    fn jaccard_over_lowercase_token_sets() {
        assert_eq!(jaccard("", "  "), 1.0);
        assert_eq!(jaccard("a", ""), 0.0);
        assert_eq!(jaccard("Auth Token", "token auth auth"), 1.0);
        assert_eq!(jaccard("a b", "b c"), 1.0 / 3.0);
    }

    #[test]
    fn cooldown_threshold_is_strict() {
        let tokens = |n: usize| (0..n).map(|i| format!("t{i} ")).collect::<String>();
        // 19 shared of 20 distinct tokens: exactly 0.95 → not a repeat.
        let (earlier, at_threshold) = (tokens(19), format!("{} extra", tokens(19)));
        assert_eq!(jaccard(&at_threshold, &earlier), 0.95);
        let recent = vec![(1_000, earlier)];
        assert!(!in_cooldown(&at_threshold, &recent, 2_000, 5_000, 0.95));
        // 20 shared of 21: just above → a repeat.
        let recent = vec![(1_000, tokens(20))];
        let above = format!("{} extra", tokens(20));
        assert!(jaccard(&above, &recent[0].1) > 0.95);
        assert!(in_cooldown(&above, &recent, 2_000, 5_000, 0.95));
    }

    #[test]
    fn cooldown_window_edge_is_outside() {
        let recent = vec![(10_000, "jwt rotation".to_owned())];
        assert!(in_cooldown("jwt rotation", &recent, 14_999, 5_000, 0.95));
        assert!(!in_cooldown("jwt rotation", &recent, 15_000, 5_000, 0.95));
        assert!(in_cooldown("jwt rotation", &recent, 9_000, 5_000, 0.95));
        assert!(!in_cooldown("jwt rotation", &[], 15_000, 5_000, 0.95));
    }
}
