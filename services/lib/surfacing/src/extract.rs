//! Context extraction: the search query of one tool call.
//!
//! Five stages, tried in priority order; the first one whose query passes the
//! minimum-signal rule wins, otherwise the next stage is tried:
//! 1. [`Stage::Template`]: a per-tool template (`server__tool` beats `tool`).
//! 2. [`Stage::ContextQuery`]: the caller's explicit `_context_query`.
//! 3. [`Stage::Path`] and 4. [`Stage::Semantic`], merged: words of path-like
//!    arguments first, then words of semantic arguments (queries, titles,
//!    URLs, shell commands, other strings). The stage reported is `Path` when
//!    any path word exists.
//! 5. [`Stage::ToolName`]: the tool name split into words.
//!
//! **Minimum-signal rule.** The reference's floor of three whitespace tokens
//! dropped short but meaningful queries ("인증 토큰", "jwt rotation"). Here a
//! query passes when it holds at least `min_signal` *signal tokens* (a value
//! of 0 is treated as 1). A signal token is a whitespace token that, with
//! surrounding punctuation trimmed,
//! - contains a Hangul or CJK character (one such word is already a topic), or
//! - mixes digits and letters and is at least 3 characters long (`http2`,
//!   `v1.2`), or
//! - has at least 3 characters, contains a letter and is not in the short
//!   stop list below.
//!
//! A query built from the tool name alone needs at least **two** signal tokens:
//! a lone tool name (`read`, `search`) says nothing about the task.
//!
//! **Determinism.** Argument maps are processed in a fixed key order (path
//! keys, then the semantic key list, then the other keys sorted by name), so
//! clients that reorder keys get the same query, and so the same cooldown and
//! cache keys. Keys starting with `_` belong to the proxy and are skipped.
//! Queries are capped at 300 characters on a word boundary.

use std::collections::{HashMap, HashSet};
use std::sync::LazyLock;

use regex::Regex;
use serde_json::{Map, Value};

/// The argument that carries an explicit context query. Only the proxy
/// understands it; it must be removed before the call goes upstream.
pub const CONTEXT_QUERY_ARG: &str = "_context_query";

const MAX_QUERY_CHARS: usize = 300;
const MAX_SENTENCE_CHARS: usize = 200;

/// Keys whose values are file paths (matched case-insensitively).
const PATH_KEYS: &[&str] = &["path", "file", "filepath", "file_path", "filename"];
/// Keys whose values are paths or globs when they look like one.
const GLOB_KEYS: &[&str] = &["pattern", "glob"];
/// Keys that usually describe what the agent is after, in processing order.
#[rustfmt::skip]
const SEMANTIC_KEYS: &[&str] = &[
    "query", "q", "search", "prompt", "question", "topic", "title", "name", "description", "url",
    "command", "cmd", "pattern", "text", "message", "content", "subject", "keywords",
];
const SHELL_KEYS: &[&str] = &["command", "cmd"];

/// Words too common in tool names and requests to identify a topic. Kept
/// short on purpose: recall ranks the rest, this only decides "is there
/// anything to search for at all".
const STOP_WORDS: &[&str] = &[
    "the", "and", "for", "with", "from", "this", "that", "these", "those", "into", "onto", "are",
    "was", "were", "has", "have", "not", "but", "you", "your", "all", "any", "can", "how", "what",
    "when", "where", "which", "who", "why", "its", "our", "out", "file", "files", "read", "get",
    "list", "run", "tool", "tools", "call", "use", "show",
];

/// Text-plumbing programs: they say how the agent looks, not what for. Project
/// tools (git, cargo, npm, docker, kubectl) are kept because they do carry
/// context.
const SHELL_PROGRAMS: &[&str] = &[
    "ag", "awk", "bash", "cat", "cd", "cut", "echo", "egrep", "env", "fd", "fgrep", "find", "grep",
    "head", "jq", "less", "ls", "more", "pwd", "rg", "sed", "sh", "sort", "sudo", "tail", "tee",
    "time", "tr", "uniq", "wc", "xargs", "zsh",
];

/// URL parts that appear in every address and so identify nothing.
const URL_NOISE: &[&str] = &[
    "http", "https", "www", "com", "org", "net", "html", "htm", "php", "asp", "aspx", "index",
];

/// Query parameters that only track clicks.
const URL_TRACKING_PARAMS: &[&str] = &["ref", "fbclid", "gclid", "mc_cid", "mc_eid"];

/// Literal values that are flags, not topics.
const LITERALS: &[&str] = &["true", "false", "null", "none"];

static UUID: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")
        .expect("valid UUID pattern")
});
static NUMBER: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[+-]?\d+(?:[.,]\d+)*$").expect("valid number pattern"));

/// Which stage produced a query (recorded with every surfacing event).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stage {
    /// A per-tool query template.
    Template,
    /// The caller's explicit `_context_query`.
    ContextQuery,
    /// Path-like arguments (possibly merged with semantic words).
    Path,
    /// Semantic arguments only.
    Semantic,
    /// The tool name.
    ToolName,
}

impl Stage {
    /// The stable label used in metrics and stored events.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Template => "template",
            Self::ContextQuery => "context_query",
            Self::Path => "path",
            Self::Semantic => "semantic",
            Self::ToolName => "tool_name",
        }
    }
}

/// An extracted query and the stage it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Extracted {
    /// The search query, whitespace-collapsed and at most 300 characters.
    pub query: String,
    /// The stage that produced it.
    pub stage: Stage,
}

/// Per-tool query templates, keyed by "server__tool" or bare "tool" (the
/// qualified key wins, so one server's `search` can differ from another's).
/// Placeholders: `{tool}` (alias `{tool_name}`), `{server}`, `{arg.NAME}`.
/// A template whose referenced arguments are missing or empty is skipped and
/// extraction falls to the next stage. Unknown placeholders stay literal.
#[derive(Debug, Clone, Default)]
pub struct Templates {
    by_tool: HashMap<String, String>,
}

impl Templates {
    /// Builds the template table from `(key, template)` pairs.
    pub fn new(map: impl IntoIterator<Item = (String, String)>) -> Self {
        Self {
            by_tool: map.into_iter().collect(),
        }
    }

    /// True when no template is configured.
    pub fn is_empty(&self) -> bool {
        self.by_tool.is_empty()
    }

    fn lookup(&self, server: &str, tool: &str) -> Option<&str> {
        self.by_tool
            .get(&format!("{server}__{tool}"))
            .or_else(|| self.by_tool.get(tool))
            .map(String::as_str)
    }
}

/// Removes `_context_query` from the arguments (it must never reach the
/// upstream) and returns its trimmed string value (non-strings are removed and
/// ignored; an empty string counts as absent).
pub fn take_context_query(args: &mut Map<String, Value>) -> Option<String> {
    match args.remove(CONTEXT_QUERY_ARG)? {
        Value::String(text) => {
            let trimmed = text.trim();
            (!trimmed.is_empty()).then(|| trimmed.to_owned())
        }
        _ => None,
    }
}

/// Extracts the search query of a tool call, or `None` when no stage yields a
/// query with enough signal (the caller then skips with `no_query`).
pub fn extract_query(
    server: &str,
    tool: &str,
    args: &Map<String, Value>,
    context_query: Option<&str>,
    templates: &Templates,
    min_signal: usize,
) -> Option<Extracted> {
    let min_signal = min_signal.max(1);
    let accept = |words: Vec<&str>, stage: Stage, needed: usize| {
        let query = join_capped(words);
        (signal_count(&query) >= needed).then_some(Extracted { query, stage })
    };

    if let Some(template) = templates.lookup(server, tool)
        && let Some(rendered) = render_template(template, server, tool, args)
        && let Some(found) = accept(
            rendered.split_whitespace().collect(),
            Stage::Template,
            min_signal,
        )
    {
        return Some(found);
    }
    if let Some(text) = context_query
        && let Some(found) = accept(
            text.split_whitespace().collect(),
            Stage::ContextQuery,
            min_signal,
        )
    {
        return Some(found);
    }
    let (words, has_path) = argument_words(args);
    let stage = if has_path {
        Stage::Path
    } else {
        Stage::Semantic
    };
    if let Some(found) = accept(
        words.iter().map(String::as_str).collect(),
        stage,
        min_signal,
    ) {
        return Some(found);
    }
    let name_words = tool_words(tool);
    accept(
        name_words.iter().map(String::as_str).collect(),
        Stage::ToolName,
        min_signal.max(2),
    )
}

/// Fills a template; `None` when a referenced argument is missing or empty.
fn render_template(
    template: &str,
    server: &str,
    tool: &str,
    args: &Map<String, Value>,
) -> Option<String> {
    let mut out = String::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let Some(close) = after.find('}') else {
            out.push_str(&rest[open..]);
            return Some(out);
        };
        let name = &after[..close];
        match name {
            "tool" | "tool_name" => out.push_str(tool),
            "server" => out.push_str(server),
            _ => match name.strip_prefix("arg.") {
                Some(arg) => out.push_str(&template_value(args.get(arg)?)?),
                None => out.push_str(&rest[open..open + close + 2]),
            },
        }
        rest = &after[close + 1..];
    }
    out.push_str(rest);
    Some(out)
}

fn template_value(value: &Value) -> Option<String> {
    let text = match value {
        Value::String(text) => text.trim().to_owned(),
        Value::Number(number) => number.to_string(),
        Value::Bool(flag) => flag.to_string(),
        Value::Array(items) => strings_of(items).join(" "),
        _ => return None,
    };
    (!text.is_empty()).then_some(text)
}

fn strings_of(items: &[Value]) -> Vec<&str> {
    items
        .iter()
        .filter_map(Value::as_str)
        .map(str::trim)
        .filter(|text| !text.is_empty())
        .collect()
}

/// Words deduplicated case-insensitively, first occurrence kept.
#[derive(Default)]
struct Words {
    list: Vec<String>,
    seen: HashSet<String>,
}

impl Words {
    fn push(&mut self, word: &str) {
        if self.seen.insert(word.to_lowercase()) {
            self.list.push(word.to_owned());
        }
    }

    fn extend(&mut self, words: Vec<String>) {
        for word in words {
            self.push(&word);
        }
    }
}

/// Stages 3 and 4: path words, then semantic words, deduplicated across both
/// and in a fixed key order; the flag says whether any path word exists.
fn argument_words(args: &Map<String, Value>) -> (Vec<String>, bool) {
    let mut entries: Vec<(String, &str, &Value)> = args
        .iter()
        .filter(|(key, _)| !key.starts_with('_'))
        .map(|(key, value)| (key.to_lowercase(), key.as_str(), value))
        .collect();
    entries.sort_by(|a, b| a.1.cmp(b.1));

    let mut words = Words::default();
    let mut consumed: HashSet<&str> = HashSet::new();
    for path_key in PATH_KEYS.iter().chain(GLOB_KEYS) {
        for (lower, key, value) in &entries {
            let Some(text) = value.as_str() else { continue };
            if lower != path_key || (GLOB_KEYS.contains(path_key) && !looks_like_glob(text)) {
                continue;
            }
            words.extend(path_words(&strip_uuids(text)));
            consumed.insert(key);
        }
    }

    let has_path = !words.list.is_empty();
    let rank = |lower: &str| {
        SEMANTIC_KEYS
            .iter()
            .position(|key| *key == lower)
            .unwrap_or(SEMANTIC_KEYS.len())
    };
    entries.retain(|(_, key, _)| !consumed.contains(key));
    entries.sort_by(|a, b| rank(&a.0).cmp(&rank(&b.0)).then(a.1.cmp(b.1)));
    for (lower, _, value) in &entries {
        words.extend(semantic_words(
            lower,
            value,
            rank(lower) < SEMANTIC_KEYS.len(),
        ));
    }
    (words.list, has_path)
}

/// A `pattern`/`glob` value is a path or glob when it has no spaces and a
/// separator or wildcard; otherwise (a grep regex, a search term) it is
/// handled as a semantic value.
fn looks_like_glob(text: &str) -> bool {
    let text = text.trim();
    !text.is_empty()
        && !text.contains(char::is_whitespace)
        && (text.contains('/') || text.contains('*') || is_windows_path(text))
}

fn is_windows_path(text: &str) -> bool {
    let bytes = text.as_bytes();
    bytes.len() > 2 && bytes[0].is_ascii_alphabetic() && bytes[1] == b':' && bytes[2] == b'\\'
}

fn semantic_words(key: &str, value: &Value, semantic_key: bool) -> Vec<String> {
    let joined;
    let text = match value {
        Value::String(text) => text.as_str(),
        Value::Array(items) if semantic_key => {
            joined = strings_of(items).join(" ");
            joined.as_str()
        }
        _ => return Vec::new(),
    };
    let text = text.trim();
    if text.is_empty() || is_identifier(text) {
        return Vec::new();
    }
    let text = strip_uuids(text);
    let single_word = !text.contains(char::is_whitespace);
    if SHELL_KEYS.contains(&key) {
        shell_words(&text)
    } else if key == "url" || (single_word && text.contains("://")) {
        url_words(&text)
    } else if key == "pattern" {
        symbol_words(&text)
    } else if single_word && (text.contains('/') || text.contains('\\')) {
        path_words(&text)
    } else {
        sentence_words(&text)
    }
}

/// Whole values that identify something instead of describing it.
fn is_identifier(text: &str) -> bool {
    UUID.find(text).is_some_and(|m| m.len() == text.len())
        || LITERALS.contains(&text.to_lowercase().as_str())
        || NUMBER.is_match(text)
        || is_hex_id(text)
}

/// Hex strings of 24+ characters (object ids, digests), and shorter hex runs
/// that mix digits and letters (commit hashes).
fn is_hex_id(word: &str) -> bool {
    let len = word.len();
    word.chars().all(|c| c.is_ascii_hexdigit())
        && (len >= 24
            || (len >= 7
                && word.chars().any(|c| c.is_ascii_digit())
                && word.chars().any(|c| c.is_ascii_alphabetic())))
}

fn strip_uuids(text: &str) -> String {
    UUID.replace_all(text, " ").into_owned()
}

/// Keeps a word unless it is a single character, a number, an identifier or
/// a literal.
fn keep_word(word: &str) -> bool {
    word.chars().count() > 1
        && !word.chars().all(|c| c.is_ascii_digit())
        && !is_hex_id(word)
        && !LITERALS.contains(&word)
}

/// Splits on everything that is not a letter or digit and on camelCase
/// boundaries; lowercases and filters the parts.
fn symbol_words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .flat_map(camel_split)
        .map(str::to_lowercase)
        .filter(|word| keep_word(word))
        .collect()
}

/// `getUserProfile` → get, User, Profile; `HTTPServer` → HTTP, Server.
/// Digits stay attached (`http2`, `v1`).
fn camel_split(word: &str) -> Vec<&str> {
    let chars: Vec<(usize, char)> = word.char_indices().collect();
    let mut parts = Vec::new();
    let mut start = 0;
    for k in 1..chars.len() {
        let (index, c) = chars[k];
        let prev = chars[k - 1].1;
        let next_is_lower = chars
            .get(k + 1)
            .is_some_and(|(_, next)| next.is_lowercase());
        let boundary = c.is_uppercase()
            && (prev.is_lowercase()
                || prev.is_ascii_digit()
                || (prev.is_uppercase() && next_is_lower));
        if boundary {
            parts.push(&word[start..index]);
            start = index;
        }
    }
    parts.push(&word[start..]);
    parts
}

/// Path and glob words: segments split on `/` and `\`, the last segment's
/// extension dropped (`jwt_handler.py` → jwt, handler), glob wildcards and
/// other punctuation treated as separators.
fn path_words(value: &str) -> Vec<String> {
    let mut words = Vec::new();
    for piece in value.split_whitespace() {
        let segments: Vec<&str> = piece.split(['/', '\\']).filter(|s| !s.is_empty()).collect();
        let last = segments.len().saturating_sub(1);
        for (index, segment) in segments.iter().enumerate() {
            let segment = if index == last {
                strip_extension(segment)
            } else {
                segment
            };
            words.extend(symbol_words(segment));
        }
    }
    words
}

/// `name.ext` → `name`; also `*.{ts,tsx}` → `*`. A leading dot (`.bashrc`)
/// is a name, not an extension.
fn strip_extension(segment: &str) -> &str {
    match segment.rfind('.') {
        Some(dot) if dot > 0 => {
            let extension = &segment[dot + 1..];
            let is_extension = !extension.is_empty()
                && extension.len() <= 16
                && extension
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "{}[],*?".contains(c));
            if is_extension {
                &segment[..dot]
            } else {
                segment
            }
        }
        _ => segment,
    }
}

/// Shell commands: split on whitespace and operators, drop flags and the
/// plumbing programs, split the remaining arguments like paths.
fn shell_words(command: &str) -> Vec<String> {
    let mut words = Vec::new();
    let is_break =
        |c: char| c.is_whitespace() || matches!(c, '|' | '&' | ';' | '<' | '>' | '(' | ')' | '`');
    for token in command.split(is_break) {
        let token = token.trim_matches(['"', '\'']);
        if token.is_empty() || token.starts_with('-') {
            continue;
        }
        let program = token.rsplit('/').next().unwrap_or(token).to_lowercase();
        if SHELL_PROGRAMS.contains(&program.as_str()) {
            continue;
        }
        words.extend(path_words(token));
    }
    words
}

/// URLs: host and path words plus the values of non-tracking query
/// parameters; schemes, `www`, TLDs like `com` and page suffixes dropped.
fn url_words(url: &str) -> Vec<String> {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let rest = rest.split('#').next().unwrap_or_default();
    let (base, query) = rest.split_once('?').unwrap_or((rest, ""));
    let mut text = base.to_owned();
    for pair in query.split('&') {
        let (key, value) = pair.split_once('=').unwrap_or(("", pair));
        let key = key.to_lowercase();
        if !key.starts_with("utm_") && !URL_TRACKING_PARAMS.contains(&key.as_str()) {
            text.push(' ');
            text.push_str(value);
        }
    }
    symbol_words(&text)
        .into_iter()
        .filter(|word| !URL_NOISE.contains(&word.as_str()))
        .collect()
}

/// Free text: its first sentence, identifiers dropped, words otherwise kept
/// as written (natural text embeds better than lowercased fragments).
fn sentence_words(text: &str) -> Vec<String> {
    first_sentence(text)
        .split_whitespace()
        .filter(|word| {
            let core = word.trim_matches(|c: char| !c.is_alphanumeric());
            !is_hex_id(core) && !LITERALS.contains(&core.to_lowercase().as_str())
        })
        .map(str::to_owned)
        .collect()
}

/// Cuts at the first `. `, `! `, `? `, newline or `。`, or at 200 characters
/// on a word boundary, whichever comes first.
fn first_sentence(text: &str) -> &str {
    let mut prev = ' ';
    for (count, (index, c)) in text.char_indices().enumerate() {
        if count == MAX_SENTENCE_CHARS {
            let head = &text[..index];
            return match head.rfind(char::is_whitespace) {
                Some(space) if space > 0 => &head[..space],
                _ => head,
            };
        }
        let sentence_end =
            c == '\n' || c == '。' || (c.is_whitespace() && matches!(prev, '.' | '!' | '?'));
        if sentence_end {
            return text[..index].trim_end_matches(['.', '!', '?']);
        }
        prev = c;
    }
    text
}

/// Stage 5: `search_repos` → search repos, `getUserProfile` → get user profile.
fn tool_words(tool: &str) -> Vec<String> {
    tool.split(|c: char| !c.is_alphanumeric())
        .flat_map(camel_split)
        .filter(|part| !part.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// Joins words with single spaces, stopping before 300 characters on a word
/// boundary (a single giant word is cut on a character boundary).
fn join_capped<'a>(words: impl IntoIterator<Item = &'a str>) -> String {
    let mut out = String::new();
    let mut chars = 0;
    for word in words {
        let len = word.chars().count();
        let needed = if out.is_empty() { len } else { len + 1 };
        if chars + needed > MAX_QUERY_CHARS {
            if out.is_empty() {
                out = word.chars().take(MAX_QUERY_CHARS).collect();
            }
            break;
        }
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
        chars += needed;
    }
    out
}

fn signal_count(query: &str) -> usize {
    query.split_whitespace().filter(|t| is_signal(t)).count()
}

fn is_signal(token: &str) -> bool {
    let token = token.trim_matches(|c: char| !c.is_alphanumeric());
    if token.chars().any(is_cjk) {
        return true;
    }
    if !token.chars().any(char::is_alphabetic) || token.chars().count() < 3 {
        return false;
    }
    token.chars().any(|c| c.is_ascii_digit())
        || !STOP_WORDS.contains(&token.to_lowercase().as_str())
}

/// Hangul, kana and CJK ideographs.
fn is_cjk(c: char) -> bool {
    matches!(c,
        '\u{1100}'..='\u{11FF}'
        | '\u{3040}'..='\u{30FF}'
        | '\u{3130}'..='\u{318F}'
        | '\u{3400}'..='\u{4DBF}'
        | '\u{4E00}'..='\u{9FFF}'
        | '\u{AC00}'..='\u{D7A3}'
        | '\u{F900}'..='\u{FAFF}'
        | '\u{20000}'..='\u{2A6DF}')
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    type Found = Option<(String, &'static str)>;

    fn run(tool: &str, value: Value, context: Option<&str>, templates: &Templates) -> Found {
        let args = value.as_object().expect("object").clone();
        extract_query("fs", tool, &args, context, templates, 1)
            .map(|found| (found.query, found.stage.as_str()))
    }

    fn extract(tool: &str, value: Value) -> Found {
        run(tool, value, None, &Templates::default())
    }

    fn found(query: &str, stage: &'static str) -> Found {
        Some((query.to_owned(), stage))
    }

    fn templates(pairs: &[(&str, &str)]) -> Templates {
        Templates::new(
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
        )
    }

    #[test]
    fn qualified_template_wins_over_bare() {
        let table = templates(&[
            ("read_file", "bare {arg.path}"),
            ("fs__read_file", "{server} {tool} doc {arg.path}"),
            ("other__read_file", "{arg.missing} x"),
        ]);
        assert!(!table.is_empty() && Templates::default().is_empty());
        let call = json!({"path": "notes/design"});
        let expected = found("fs read_file doc notes/design", "template");
        assert_eq!(run("read_file", call.clone(), None, &table), expected);
        let args = call.as_object().unwrap();
        let bare = extract_query("git", "read_file", args, None, &table, 1).unwrap();
        assert_eq!(bare.query, "bare notes/design");
    }

    #[test]
    fn templates_with_missing_or_weak_arguments_fall_through() {
        let table = templates(&[("search", "repo {arg.repo}"), ("find", "{arg.id}")]);
        let call = json!({"query": "token rotation", "repo": "  ", "id": "ab"});
        let expected = found("token rotation ab", "semantic");
        assert_eq!(run("search", call.clone(), None, &table), expected);
        assert_eq!(run("find", call, None, &table), expected);
    }

    #[test]
    fn context_query_beats_arguments_and_is_taken_out() {
        let mut call = json!({"path": "/src/lib.rs", "_context_query": "  인증 토큰 "});
        let args = call.as_object_mut().unwrap();
        let context = take_context_query(args);
        assert_eq!(context.as_deref(), Some("인증 토큰"));
        assert!(!args.contains_key(CONTEXT_QUERY_ARG));
        let result = run("read", call, context.as_deref(), &Templates::default());
        assert_eq!(result, found("인증 토큰", "context_query"));
        let mut odd = Map::from_iter([(CONTEXT_QUERY_ARG.to_owned(), json!(42))]);
        assert_eq!(take_context_query(&mut odd), None);
        assert!(odd.is_empty());
    }

    #[test]
    fn weak_context_query_falls_to_arguments() {
        let call = json!({"query": "deploy pipeline"});
        let result = run("run", call, Some("a b"), &Templates::default());
        assert_eq!(result, found("deploy pipeline", "semantic"));
    }

    #[test]
    fn signal_rule() {
        assert_eq!(signal_count("인증 토큰"), 2);
        assert_eq!(signal_count("a b"), 0);
        assert_eq!(signal_count("the file and read"), 0);
        assert_eq!(signal_count("http2 v1.2 42 a1"), 2);
        assert_eq!(signal_count("jwt?"), 1);
        let call = json!({"query": "jwt"});
        let args = call.as_object().unwrap();
        let none = Templates::default();
        assert!(extract_query("s", "x", args, None, &none, 2).is_none());
        assert!(extract_query("s", "x", args, None, &none, 0).is_some());
    }

    #[test]
    fn path_tokenizing_drops_extension_and_one_letter_parts() {
        let result = extract("read_file", json!({"path": "/src/auth/jwt_handler.py"}));
        assert_eq!(result, found("src auth jwt handler", "path"));
        let result = extract("open", json!({"FilePath": "C:\\work\\UserProfile.tsx"}));
        assert_eq!(result, found("work user profile", "path"));
    }

    #[test]
    fn globs_are_tokenized_like_paths() {
        let result = extract("match_components", json!({"pattern": "**/*.tsx"}));
        assert_eq!(result, found("match components", "tool_name"));
        let result = extract(
            "glob",
            json!({"glob": "src/components/**/Button*.{ts,tsx}"}),
        );
        assert_eq!(result, found("src components button", "path"));
        let result = extract("glob", json!({"pattern": "src/components/**/Button*.tsx"}));
        assert_eq!(result, found("src components button", "path"));
        let result = extract("grep", json!({"pattern": "fn\\s+verify_token"}));
        assert_eq!(result, found("fn verify token", "semantic"));
    }

    #[test]
    fn shell_command_keeps_arguments_and_drops_plumbing() {
        let command = "grep -rn \"token_ttl\" src/config.rs | head -5";
        let result = extract("bash", json!({ "command": command }));
        assert_eq!(result, found("token ttl src config", "semantic"));
        let result = extract(
            "bash",
            json!({"cmd": "cd /srv && git log --oneline -- auth.rs"}),
        );
        assert_eq!(result, found("srv git log auth", "semantic"));
    }

    #[test]
    fn url_keeps_host_and_path_words() {
        let url = "https://www.example.com/docs/auth-guide.html?utm_source=x&q=refresh+tokens#top";
        let result = extract("fetch", json!({ "url": url }));
        assert_eq!(
            result,
            found("example docs auth guide refresh tokens", "semantic")
        );
    }

    #[test]
    fn free_text_contributes_its_first_sentence() {
        let call = json!({"question": "Why does login fail? It worked. Twice.", "limit": 5});
        assert_eq!(
            extract("ask", call),
            found("Why does login fail", "semantic")
        );
        let long: Vec<String> = (0..100).map(|i| format!("word{i}")).collect();
        let (query, _) = extract("ask", json!({"text": long.join(" ")})).unwrap();
        assert!(query.chars().count() <= MAX_SENTENCE_CHARS);
        assert!(query.ends_with(char::is_numeric) && long.iter().any(|w| query.ends_with(w)));
    }

    #[test]
    fn path_words_come_first_then_semantic_words() {
        let call = json!({"query": "refresh Auth token", "path": "src/auth/session.rs"});
        let result = extract("grep", call);
        assert_eq!(result, found("src auth session refresh token", "path"));
    }

    #[test]
    fn identifiers_and_private_keys_are_ignored() {
        let call = json!({
            "name": "123e4567-e89b-12d3-a456-426614174000",
            "id": "5f2b6c0e9a7d4e3f8b1c2d3e",
            "title": "true",
            "count": "1234",
            "_trace": "secret stuff here",
        });
        assert_eq!(
            extract("fetch_issue", call),
            found("fetch issue", "tool_name")
        );
    }

    #[test]
    fn extraction_is_deterministic_across_key_order() {
        let pairs = [
            ("zeta", json!("zebra crossing")),
            ("path", json!("docs/api.md")),
            ("title", json!("billing export")),
            ("alpha", json!("apple orchard")),
            ("query", json!("invoice totals")),
        ];
        let to_map = |pairs: Vec<(&str, Value)>| {
            Value::Object(pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
        };
        let forward = extract("t", to_map(pairs.to_vec()));
        let backward = extract("t", to_map(pairs.iter().rev().cloned().collect()));
        assert_eq!(forward, backward);
        let expected = "docs api invoice totals billing export apple orchard zebra crossing";
        assert_eq!(forward, found(expected, "path"));
    }

    #[test]
    fn tool_name_stage_needs_two_signal_tokens() {
        assert_eq!(
            extract("search_repos", json!({})),
            found("search repos", "tool_name")
        );
        assert_eq!(
            extract("getUserProfile", json!({})),
            found("get user profile", "tool_name")
        );
        assert_eq!(extract("read", json!({})), None);
        assert_eq!(extract("Read", json!({"file_path": "/a/b.c"})), None);
    }

    #[test]
    fn query_is_capped_on_a_word_boundary() {
        let many: Vec<String> = (0..200).map(|i| format!("topic{i}")).collect();
        let context = many.join(" ");
        let (query, _) = run("t", json!({}), Some(&context), &Templates::default()).unwrap();
        assert!(query.chars().count() <= MAX_QUERY_CHARS && query.len() > 250);
        assert!(query.split(' ').all(|w| many.contains(&w.to_owned())));
        assert_eq!(join_capped([&*"x".repeat(400)]).len(), MAX_QUERY_CHARS);
    }

    #[test]
    fn stage_labels_are_stable() {
        let stages = [
            Stage::Template,
            Stage::ContextQuery,
            Stage::Semantic,
            Stage::ToolName,
        ];
        let labels = stages.map(Stage::as_str);
        assert_eq!(
            labels,
            ["template", "context_query", "semantic", "tool_name"]
        );
    }
}
