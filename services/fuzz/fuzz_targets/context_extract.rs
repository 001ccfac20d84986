//! Context extraction: the search query of a tool call
//! (`mneme_surfacing::extract::{take_context_query, extract_query}`), fed
//! from proxied MCP calls and from Claude Code hook payloads
//! (`mneme_surfacing::hook::parse_claude_post_tool_use`).
//!
//! Input: a JSON object. With `hook_event_name` it is a hook payload: it is
//! parsed, and an accepted event's `tool_input` is extracted for its tool.
//! Otherwise `server`, `tool`, `arguments` (the call's arguments, in the
//! client's key order), `templates` (`{key: template}`) and `min_signal` are
//! read from it; missing parts default to empty.
//!
//! Properties: no panic; `_context_query` is removed and comes back trimmed
//! and non-empty; the query is at most 300 characters of words separated by
//! single spaces; the result does not depend on the order of the argument
//! keys (reversed and rotated maps give the same query and stage).
#![no_main]

use libfuzzer_sys::fuzz_target;
use mneme_surfacing::extract::{
    CONTEXT_QUERY_ARG, Extracted, Templates, extract_query, take_context_query,
};
use mneme_surfacing::hook::parse_claude_post_tool_use;
use serde_json::{Map, Value};

const MAX_QUERY_CHARS: usize = 300;

fn reordered(args: &Map<String, Value>, rotate: usize) -> Map<String, Value> {
    let mut entries: Vec<(String, Value)> =
        args.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    entries.reverse();
    if !entries.is_empty() {
        let by = rotate % entries.len();
        entries.rotate_left(by);
    }
    entries.into_iter().collect()
}

fn check_query(found: &Extracted) {
    let query = &found.query;
    assert!(query.chars().count() <= MAX_QUERY_CHARS, "{query:?}");
    assert!(!query.is_empty());
    for word in query.split(' ') {
        assert!(!word.is_empty(), "double space in {query:?}");
        assert!(!word.contains(char::is_whitespace), "{query:?}");
    }
}

fn extract(
    server: &str,
    tool: &str,
    mut args: Map<String, Value>,
    templates: &Templates,
    min_signal: usize,
) {
    let context_query = take_context_query(&mut args);
    assert!(!args.contains_key(CONTEXT_QUERY_ARG));
    if let Some(text) = &context_query {
        assert!(!text.is_empty() && text.trim() == text);
    }
    let run = |args: &Map<String, Value>| {
        extract_query(
            server,
            tool,
            args,
            context_query.as_deref(),
            templates,
            min_signal,
        )
    };
    let found = run(&args);
    if let Some(found) = &found {
        check_query(found);
    }
    for rotate in [0, 1, args.len() / 2] {
        assert_eq!(
            run(&reordered(&args, rotate)),
            found,
            "argument order changed the query"
        );
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(Value::Object(input)) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let object = |key: &str| match input.get(key) {
        Some(Value::Object(map)) => map.clone(),
        _ => Map::new(),
    };
    let text = |key: &str| input.get(key).and_then(Value::as_str).unwrap_or_default();
    let templates = Templates::new(
        object("templates")
            .into_iter()
            .filter_map(|(key, value)| Some((key, value.as_str()?.to_owned()))),
    );
    let min_signal = input
        .get("min_signal")
        .and_then(Value::as_u64)
        .map_or(1, |n| (n % 8) as usize);

    if input.contains_key("hook_event_name") {
        let payload = Value::Object(input.clone());
        if let Ok(event) = parse_claude_post_tool_use(&payload) {
            assert!(!event.tool_name.is_empty());
            assert!(!matches!(event.canonical_tool.as_str(), "write" | "edit"));
            extract(
                "claude",
                &event.canonical_tool,
                event.tool_input,
                &templates,
                min_signal,
            );
        }
        return;
    }
    extract(
        text("server"),
        text("tool"),
        object("arguments"),
        &templates,
        min_signal,
    );
});
