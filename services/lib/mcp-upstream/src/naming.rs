//! What the client sees of a proxied tool: its name, its description and one
//! extra argument.
//!
//! An upstream tool `search` behind the prefix `gh` is exposed as
//! `gh__search`. Prefixes may not contain `__`, so splitting an exposed name
//! at its first `__` always recovers the pair even when the upstream tool's
//! own name contains `__`. MCP clients reject tool names longer than 64
//! characters, and some (Claude Code's `mcp__<server>__`) count their own
//! prefix in that limit, so [`exposable`] takes the client's prefix length
//! into account.
//!
//! Descriptions are labelled `[proxied]` so the agent knows the call leaves
//! mneme, and are kept within a character budget because every tool
//! description is paid for in the agent's context on every turn.
//!
//! [`with_context_query`] adds an optional `_context_query` argument to a
//! tool's input schema: the agent may say what it is working on, mneme uses
//! it to surface related memories, and the argument is stripped before the
//! call goes upstream.

use rmcp::model::JsonObject;
use serde_json::Value;

/// The longest tool name MCP clients accept, including a client's own
/// prefix such as Claude Code's `mcp__<server>__`.
pub const MAX_TOOL_NAME_CHARS: usize = 64;

/// What joins a prefix and an upstream tool name in an exposed name.
pub const SEPARATOR: &str = "__";

/// The longest accepted prefix, in characters: short enough to leave most of
/// the 64-character budget to the upstream tool's own name.
pub const MAX_PREFIX_CHARS: usize = 24;

/// The argument added by [`with_context_query`].
pub const CONTEXT_QUERY_ARG: &str = "_context_query";

/// The description given to [`CONTEXT_QUERY_ARG`] in input schemas.
pub const CONTEXT_QUERY_DESCRIPTION: &str = "Optional: what you are working on, in a few words. \
     Used by mneme to find related memories; never sent to the tool.";

const DESCRIPTION_LABEL: &str = "[proxied] ";
const SUFFIX_SEPARATOR: &str = " | ";
const ELLIPSIS: char = '…';

/// Checks an upstream's prefix: 1 to 24 characters matching
/// `[a-z0-9][a-z0-9_-]*`, without `__` and not ending with `_`.
///
/// # Errors
/// A sentence, meant for the API user, saying what is wrong.
pub fn validate_prefix(prefix: &str) -> Result<(), String> {
    let Some(first) = prefix.chars().next() else {
        return Err("The prefix must not be empty.".to_owned());
    };
    let chars = prefix.chars().count();
    if chars > MAX_PREFIX_CHARS {
        return Err(format!(
            "The prefix \"{prefix}\" has {chars} characters; at most {MAX_PREFIX_CHARS} are allowed."
        ));
    }
    if !(first.is_ascii_lowercase() || first.is_ascii_digit()) {
        return Err(format!(
            "The prefix \"{prefix}\" must start with a lowercase letter or a digit."
        ));
    }
    if let Some(bad) = prefix
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '_' | '-')))
    {
        return Err(format!(
            "The prefix \"{prefix}\" contains {bad:?}; only lowercase letters, digits, '_' and '-' are allowed."
        ));
    }
    // `__` inside the prefix would make the split of an exposed name ambiguous.
    if prefix.contains(SEPARATOR) {
        return Err(format!(
            "The prefix \"{prefix}\" must not contain \"__\", which separates the prefix from the tool name."
        ));
    }
    // A trailing `_` would run into the separator (`gh___search`), which
    // splits as prefix `gh` and tool `_search`.
    if prefix.ends_with('_') {
        return Err(format!(
            "The prefix \"{prefix}\" must not end with '_', because it would merge with the \"__\" separator."
        ));
    }
    Ok(())
}

/// The name under which an upstream tool is exposed: `prefix__tool`.
pub fn exposed_name(prefix: &str, tool: &str) -> String {
    format!("{prefix}{SEPARATOR}{tool}")
}

/// Splits an exposed name into (prefix, upstream tool) at the first `__`.
///
/// The first occurrence is the right one because prefixes cannot contain
/// `__` while upstream tool names may. `None` when there is no separator or
/// either side is empty.
pub fn split_exposed(name: &str) -> Option<(&str, &str)> {
    let (prefix, tool) = name.split_once(SEPARATOR)?;
    (!prefix.is_empty() && !tool.is_empty()).then_some((prefix, tool))
}

/// Whether an upstream tool can be exposed under `prefix` to a client that
/// adds `client_prefix_chars` characters of its own to every tool name.
///
/// # Errors
/// A sentence saying why not: the upstream name is empty or uses characters
/// outside MCP's tool-name charset `[A-Za-z0-9_.-]`, or the full name would
/// exceed [`MAX_TOOL_NAME_CHARS`].
pub fn exposable(prefix: &str, tool: &str, client_prefix_chars: usize) -> Result<(), String> {
    if tool.is_empty() {
        return Err("The upstream tool has an empty name.".to_owned());
    }
    if let Some(bad) = tool
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')))
    {
        return Err(format!(
            "The upstream tool \"{tool}\" contains {bad:?}; MCP tool names may only use letters, digits, '_', '.' and '-'."
        ));
    }
    let exposed = exposed_name(prefix, tool);
    let total = exposed.chars().count().saturating_add(client_prefix_chars);
    if total > MAX_TOOL_NAME_CHARS {
        return Err(format!(
            "The exposed name \"{exposed}\" plus the client's {client_prefix_chars}-character prefix \
             is {total} characters; MCP clients accept at most {MAX_TOOL_NAME_CHARS}. \
             Use a shorter prefix."
        ));
    }
    Ok(())
}

/// The description shown for an exposed tool:
/// `"[proxied] " + text + (" | " + suffix)`, at most `max_chars` characters.
///
/// `text` is `description_override` when it is not blank, else the
/// upstream's description, trimmed; when both are blank the exposed name
/// stands in. A long text is cut at a sentence end when that keeps at least
/// 90% of the text's budget, else at a word boundary followed by `…`. The
/// suffix takes precedence over the text, but is dropped when even
/// `"[proxied]  | " + suffix` would not fit.
pub fn describe(
    exposed: &str,
    upstream: Option<&str>,
    description_override: Option<&str>,
    max_chars: usize,
    suffix: Option<&str>,
) -> String {
    let text = non_blank(description_override).or_else(|| non_blank(upstream));
    let suffix_part = non_blank(suffix).map(|s| format!("{SUFFIX_SEPARATOR}{s}"));
    let label_chars = DESCRIPTION_LABEL.chars().count();

    let Some(text) = text else {
        // The exposed name is the only identification left, so it is kept
        // and the suffix is the optional part here.
        let bare = format!("{DESCRIPTION_LABEL}{exposed}");
        if let Some(suffix_part) = suffix_part {
            let with_suffix = format!("{bare}{suffix_part}");
            if with_suffix.chars().count() <= max_chars {
                return with_suffix;
            }
        }
        return take_chars(&bare, max_chars).to_owned();
    };

    let suffix_part = suffix_part
        .filter(|part| label_chars + part.chars().count() <= max_chars)
        .unwrap_or_default();
    let text_budget = max_chars.saturating_sub(label_chars + suffix_part.chars().count());
    let shown = shorten_description(text, text_budget);
    let described = if shown.is_empty() {
        format!("{}{suffix_part}", DESCRIPTION_LABEL.trim_end())
    } else {
        format!("{DESCRIPTION_LABEL}{shown}{suffix_part}")
    };
    take_chars(&described, max_chars).to_owned()
}

/// `text` trimmed, unless that leaves nothing.
fn non_blank(text: Option<&str>) -> Option<&str> {
    text.map(str::trim).filter(|trimmed| !trimmed.is_empty())
}

/// `text` within `budget` characters: whole when it fits, else cut at a
/// sentence end keeping at least 90% of the budget, else at a word boundary
/// (or hard, when the last word boundary is in the first half) plus `…`.
fn shorten_description(text: &str, budget: usize) -> String {
    if text.chars().count() <= budget {
        return text.to_owned();
    }
    if budget == 0 {
        return String::new();
    }

    // Kept lengths (in chars) at which a sentence ends, looking one char
    // past the budget so that "end. " right at the limit still counts.
    let mut sentence_end = None;
    let mut previous: Option<char> = None;
    for (index, c) in text.chars().take(budget + 1).enumerate() {
        let ends_here = match c {
            '\n' => Some(index),
            ' ' if matches!(previous, Some('.' | '!' | '?')) => Some(index),
            _ => None,
        };
        if let Some(kept) = ends_here {
            sentence_end = Some(kept);
        }
        previous = Some(c);
    }
    if let Some(kept) = sentence_end {
        let sentence = take_chars(text, kept).trim_end();
        if sentence.chars().count() * 10 >= budget * 9 {
            return sentence.to_owned();
        }
    }

    let words_budget = budget - 1;
    let last_space = text
        .chars()
        .take(words_budget + 1)
        .enumerate()
        .filter(|(_, c)| c.is_whitespace())
        .map(|(index, _)| index)
        .last();
    let cut = match last_space {
        Some(index) if index * 2 >= words_budget => index,
        _ => words_budget,
    };
    let mut shortened = take_chars(text, cut).trim_end().to_owned();
    shortened.push(ELLIPSIS);
    shortened
}

/// The first `max_chars` characters of `text`.
fn take_chars(text: &str, max_chars: usize) -> &str {
    match text.char_indices().nth(max_chars) {
        Some((byte_index, _)) => &text[..byte_index],
        None => text,
    }
}

/// A copy of `schema` with an optional `_context_query` string property.
///
/// Only object schemas (`"type": "object"`, or with `properties`) get it,
/// and only when they do not define it already; `properties` is created
/// when missing, and the argument is never made required. Any other schema
/// is returned unchanged.
pub fn with_context_query(schema: &JsonObject) -> JsonObject {
    let type_is_object = match schema.get("type") {
        Some(Value::String(kind)) => kind == "object",
        Some(Value::Array(kinds)) => kinds.iter().any(|kind| kind == "object"),
        _ => false,
    };
    let has_properties = schema.get("properties").is_some_and(Value::is_object);
    if !(type_is_object || has_properties) {
        return schema.clone();
    }

    let mut extended = schema.clone();
    let properties = extended
        .entry("properties")
        .or_insert_with(|| Value::Object(JsonObject::new()));
    // A malformed `properties` (not an object) is the upstream's business;
    // rewriting it could change what the upstream accepts.
    let Some(properties) = properties.as_object_mut() else {
        return schema.clone();
    };
    if properties.contains_key(CONTEXT_QUERY_ARG) {
        return schema.clone();
    }
    properties.insert(
        CONTEXT_QUERY_ARG.to_owned(),
        serde_json::json!({
            "type": "string",
            "description": CONTEXT_QUERY_DESCRIPTION,
        }),
    );
    extended
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(value: Value) -> JsonObject {
        match value {
            Value::Object(map) => map,
            other => panic!("not an object: {other}"),
        }
    }

    #[test]
    fn prefixes_follow_the_rules() {
        for good in [
            "gh",
            "a",
            "0",
            "gh-",
            "my-server",
            "my_server",
            "a1-b2_c3",
            "abcdefghijklmnopqrstuvwx",
        ] {
            assert_eq!(validate_prefix(good), Ok(()), "{good}");
        }
        for bad in [
            "",
            "abcdefghijklmnopqrstuvwxy",
            "Gh",
            "-gh",
            "_gh",
            "g h",
            "gh.io",
            "한국",
            "a__b",
            "gh_",
        ] {
            let error = validate_prefix(bad).expect_err(bad);
            assert!(error.starts_with("The prefix"), "{error}");
            assert!(error.ends_with('.'), "{error}");
        }
    }

    #[test]
    fn exposed_names_split_at_the_first_separator() {
        assert_eq!(exposed_name("gh", "search"), "gh__search");
        assert_eq!(split_exposed("gh__search"), Some(("gh", "search")));
        assert_eq!(split_exposed("gh__search__v2"), Some(("gh", "search__v2")));
        assert_eq!(split_exposed("gh____x"), Some(("gh", "__x")));
        assert_eq!(split_exposed("ghsearch"), None);
        assert_eq!(split_exposed("__search"), None);
        assert_eq!(split_exposed("gh__"), None);
        let name = exposed_name("my-srv", "a__b");
        assert_eq!(split_exposed(&name), Some(("my-srv", "a__b")));
    }

    #[test]
    fn exposable_counts_the_client_prefix_toward_64_chars() {
        // "gh__" is 4 chars, so a 60-char tool fills the limit exactly.
        let tool = "t".repeat(60);
        assert_eq!(exposable("gh", &tool, 0), Ok(()));
        let error = exposable("gh", &tool, 1).expect_err("65 chars");
        assert!(error.contains("65 characters"), "{error}");
        // Claude Code: mcp__mneme__ is 12 chars.
        assert_eq!(exposable("gh", &"t".repeat(48), 12), Ok(()));
        assert!(exposable("gh", &"t".repeat(49), 12).is_err());
    }

    #[test]
    fn exposable_checks_the_tool_name_charset() {
        assert_eq!(exposable("gh", "get_file.v2-beta", 0), Ok(()));
        assert!(exposable("gh", "", 0).expect_err("empty").contains("empty"));
        for bad in ["get file", "get/file", "검색", "a:b"] {
            let error = exposable("gh", bad, 0).expect_err(bad);
            assert!(error.contains("may only use"), "{error}");
        }
    }

    #[test]
    fn short_descriptions_are_labelled_whole() {
        assert_eq!(
            describe("gh__search", Some("  Search code.  "), None, 200, None),
            "[proxied] Search code."
        );
        assert_eq!(
            describe(
                "gh__search",
                Some("Search code."),
                Some("Find code"),
                200,
                Some("via GitHub")
            ),
            "[proxied] Find code | via GitHub"
        );
        // A blank override falls back to the upstream description.
        assert_eq!(
            describe("gh__search", Some("Search code."), Some("   "), 200, None),
            "[proxied] Search code."
        );
    }

    #[test]
    fn missing_descriptions_fall_back_to_the_exposed_name() {
        assert_eq!(
            describe("gh__search", None, None, 200, None),
            "[proxied] gh__search"
        );
        assert_eq!(
            describe("gh__search", Some(" "), None, 200, Some("s")),
            "[proxied] gh__search | s"
        );
        // Without a description the exposed name outranks the suffix.
        assert_eq!(
            describe("gh__search", None, None, 22, Some("suffix")),
            "[proxied] gh__search"
        );
    }

    #[test]
    fn long_descriptions_prefer_a_sentence_end() {
        let text = "First sentence is here. Second sentence is a bit longer than that. Third.";
        // The text's budget is 60: "First … that." (66 chars) does not fit
        // and "First sentence is here." keeps under 90%, so words win.
        let described = describe("x__y", Some(text), None, 70, None);
        assert!(described.ends_with('…'), "{described}");
        assert!(described.chars().count() <= 70);
        // With a budget of 70, "First … that." keeps over 90%.
        let described = describe("x__y", Some(text), None, 80, None);
        assert_eq!(
            described,
            "[proxied] First sentence is here. Second sentence is a bit longer than that."
        );
    }

    #[test]
    fn sentence_ends_include_newlines_and_other_punctuation() {
        let text = format!("{}!\nrest of it", "a".repeat(95));
        assert_eq!(
            describe("x__y", Some(&text), None, 110, None),
            format!("[proxied] {}!", "a".repeat(95))
        );
        let text = format!("{}? more words here", "b".repeat(95));
        assert_eq!(
            describe("x__y", Some(&text), None, 110, None),
            format!("[proxied] {}?", "b".repeat(95))
        );
    }

    #[test]
    fn word_cuts_end_with_an_ellipsis() {
        let text = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda";
        let described = describe("x__y", Some(text), None, 40, None);
        assert_eq!(described, "[proxied] alpha beta gamma delta…");
        assert!(described.chars().count() <= 40);
        // A single endless word is cut hard.
        let described = describe("x__y", Some(&"z".repeat(100)), None, 30, None);
        assert_eq!(described, format!("[proxied] {}…", "z".repeat(19)));
    }

    #[test]
    fn the_suffix_wins_over_the_text_when_tight() {
        let text = "alpha beta gamma delta epsilon zeta eta theta";
        let described = describe("x__y", Some(text), None, 40, Some("via gh"));
        assert!(described.ends_with(" | via gh"), "{described}");
        assert!(described.chars().count() <= 40, "{described}");
        // "[proxied] " + " | " + "via gh" is 19 chars: it still fits at 19,
        // leaving nothing for the text.
        assert_eq!(
            describe("x__y", Some(text), None, 19, Some("via gh")),
            "[proxied] | via gh"
        );
        // At 18 the suffix is dropped and the text gets the room.
        let described = describe("x__y", Some(text), None, 18, Some("via gh"));
        assert_eq!(described, "[proxied] alpha…");
    }

    #[test]
    fn descriptions_never_exceed_the_budget_nor_split_chars() {
        let texts = [
            "한국어 설명입니다. 두 번째 문장은 조금 더 깁니다! 세 번째?",
            "emoji 🦀🦀🦀 everywhere 🎉 and more 🎉🎉 words",
            "plain words without any sentence end at all but quite long indeed",
        ];
        for text in texts {
            for max in 0..120 {
                for suffix in [None, Some("출처 gh"), Some("🦀")] {
                    let described = describe("x__y", Some(text), None, max, suffix);
                    assert!(described.chars().count() <= max, "{max}: {described}");
                    let described = describe("도구__y", None, None, max, suffix);
                    assert!(described.chars().count() <= max, "{max}: {described}");
                }
            }
        }
    }

    #[test]
    fn context_query_is_added_to_object_schemas_only() {
        let schema = object(json!({
            "type": "object",
            "properties": { "q": { "type": "string" } },
            "required": ["q"],
        }));
        let extended = with_context_query(&schema);
        assert_eq!(
            extended["properties"][CONTEXT_QUERY_ARG],
            json!({ "type": "string", "description": CONTEXT_QUERY_DESCRIPTION })
        );
        assert_eq!(extended["properties"]["q"], json!({ "type": "string" }));
        assert_eq!(extended["required"], json!(["q"]));

        let bare = object(json!({ "type": "object" }));
        let extended = with_context_query(&bare);
        assert!(extended["properties"][CONTEXT_QUERY_ARG].is_object());
        assert!(extended.get("required").is_none());

        let untyped = object(json!({ "properties": {} }));
        assert!(with_context_query(&untyped)["properties"][CONTEXT_QUERY_ARG].is_object());

        let nullable = object(json!({ "type": ["object", "null"] }));
        assert!(with_context_query(&nullable)["properties"][CONTEXT_QUERY_ARG].is_object());
    }

    #[test]
    fn context_query_leaves_other_schemas_alone() {
        let own = object(json!({
            "type": "object",
            "properties": { CONTEXT_QUERY_ARG: { "type": "integer" } },
        }));
        assert_eq!(with_context_query(&own), own);
        for schema in [
            json!({ "type": "string" }),
            json!({}),
            json!({ "type": "object", "properties": [] }),
        ] {
            let schema = object(schema);
            assert_eq!(with_context_query(&schema), schema);
        }
    }
}
