//! What happens to the text of a proxied tool result before the agent sees
//! it: cleaning, truncation and progressive delivery.
//!
//! Every character of a result is paid for in the agent's context, and
//! upstream servers return a lot of noise (scraped HTML, repeated
//! boilerplate, walls of navigation links). Yet a damaged result is worse
//! than a long one, so each step is conservative:
//! - [`clean`] never touches JSON, and keeps the indentation of code and
//!   Markdown; only HTML is rewritten.
//! - [`truncate`] never cuts inside a JSON value: a JSON array or object
//!   keeps whole elements and stays valid JSON.
//! - [`chunk`] is lossless: concatenating [`strip_footer`] of every chunk
//!   reproduces the content byte for byte, so an agent can read a long
//!   result piece by piece.
//! - [`plan`] chooses among them per [`Compression`], for the hosted and
//!   the local proxy alike.
//!
//! All lengths and positions are in characters (Unicode scalar values), the
//! unit agents and limits are expressed in; a UTF-8 sequence is never split.

use std::collections::HashSet;
use std::sync::LazyLock;

use regex::{Captures, Regex};
use serde::de::IgnoredAny;

/// Fragments with fewer recognisable tags than this are treated as text
/// that merely mentions a tag, not as HTML.
const HTML_FRAGMENT_MIN_TAGS: usize = 3;
/// Repeated paragraphs shorter than this are legitimate (`---`, `}`, `end`).
const MIN_DEDUPLICATED_PARAGRAPH_CHARS: usize = 40;
/// Consecutive link-only lines kept before the rest are counted instead.
const MAX_CONSECUTIVE_LINK_LINES: usize = 20;
/// How far back (as a fraction of the budget) a cut may move to land on a
/// paragraph, line or word boundary: one fifth.
const BOUNDARY_LOOK_BACK_DIVISOR: usize = 5;
/// Headings listed in a progressive footer's `[Remaining: …]` line.
const MAX_LISTED_HEADINGS: usize = 5;

static HTML_DOCUMENT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)<!doctype\s+html|<html[\s>]|<body[\s>]").expect("static regex compiles")
});
static HTML_TAG_HINT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)<(?:div|p|span|br|li|ul|ol|table|tr|td|h[1-6])\b[^>]*>|<a\s[^>]*href")
        .expect("static regex compiles")
});
// The `\z` alternatives also drop an unterminated script or comment, whose
// content would otherwise leak into the text.
static HTML_INVISIBLE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?is)<script\b.*?(?:</script\s*>|\z)|<style\b.*?(?:</style\s*>|\z)|<noscript\b.*?(?:</noscript\s*>|\z)|<!--.*?(?:-->|\z)",
    )
    .expect("static regex compiles")
});
static HTML_BLOCK_TAG: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)</?(?:p|div|br|li|tr|h[1-6]|section|article|header|footer|ul|ol|table)\b[^>]*>",
    )
    .expect("static regex compiles")
});
static HTML_ANY_TAG: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"</?[A-Za-z][^>]*>|<![^>]*>|<\?[^>]*>").expect("static regex compiles")
});
static HTML_ENTITY: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"&(?:#([0-9]{1,7})|#[xX]([0-9A-Fa-f]{1,6})|(amp|lt|gt|quot|apos|nbsp));")
        .expect("static regex compiles")
});
static BLANK_LINE_RUNS: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\n{3,}").expect("static regex compiles"));
static HEADING_OR_FENCE_LINE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?m)^(?:[ \t]*(?:```|~~~).*|#{1,6} .*)$").expect("static regex compiles")
});
// A bare URL or a Markdown link, optionally as a list item.
static LINK_ONLY_LINE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"^[ \t]*(?:[-*+][ \t]+|[0-9]+[.)][ \t]+)?(?:<?https?://\S+|\[[^\]]*\]\([^)]*\))[ \t]*$",
    )
    .expect("static regex compiles")
});

/// Conservatively cleans an upstream result's text.
///
/// JSON (after trimming) is returned unchanged. HTML loses its scripts,
/// styles, comments and tags, block tags becoming line breaks, and its
/// common entities are decoded. Then, for all non-JSON text: `\r\n` becomes
/// `\n`, trailing whitespace goes, runs of blank lines shrink to one, a
/// paragraph of 40+ characters that repeats an earlier one is dropped, and
/// more than 20 consecutive link-only lines are cut to 20 plus a
/// `[… N more links]` line. Indentation is always kept.
pub fn clean(text: &str) -> String {
    if is_json(text) {
        return text.to_owned();
    }
    let normalised = text.replace("\r\n", "\n");
    let readable = if looks_like_html(&normalised) {
        html_to_text(&normalised)
    } else {
        normalised
    };
    let trimmed = strip_trailing_whitespace(&readable);
    let collapsed = BLANK_LINE_RUNS.replace_all(&trimmed, "\n\n");
    let links_collapsed = collapse_link_floods(&collapsed);
    drop_repeated_paragraphs(&links_collapsed)
}

fn is_json(text: &str) -> bool {
    serde_json::from_str::<IgnoredAny>(text.trim()).is_ok()
}

fn looks_like_html(text: &str) -> bool {
    // Markdown with code fences is documentation that may show HTML in its
    // examples, and rewriting it would damage them; only a text that is an
    // HTML document from its first character is rewritten anyway.
    if text.lines().any(is_code_fence) {
        return HTML_DOCUMENT
            .find(text.trim_start())
            .is_some_and(|found| found.start() == 0);
    }
    HTML_DOCUMENT.is_match(text)
        || HTML_TAG_HINT
            .find_iter(text)
            .take(HTML_FRAGMENT_MIN_TAGS)
            .count()
            >= HTML_FRAGMENT_MIN_TAGS
}

fn html_to_text(html: &str) -> String {
    let visible = HTML_INVISIBLE.replace_all(html, "");
    let blocks_broken = HTML_BLOCK_TAG.replace_all(&visible, "\n");
    let untagged = HTML_ANY_TAG.replace_all(&blocks_broken, "");
    // Entities are decoded last, and in one pass, so that an escaped tag
    // (`&lt;script&gt;`) survives as text and `&amp;lt;` becomes `&lt;`.
    HTML_ENTITY
        .replace_all(&untagged, |captures: &Captures<'_>| {
            decode_entity(captures).unwrap_or_else(|| captures[0].to_owned())
        })
        .into_owned()
}

fn decode_entity(captures: &Captures<'_>) -> Option<String> {
    let code_point = if let Some(decimal) = captures.get(1) {
        decimal.as_str().parse::<u32>().ok()?
    } else if let Some(hex) = captures.get(2) {
        u32::from_str_radix(hex.as_str(), 16).ok()?
    } else {
        let named = match captures.get(3)?.as_str() {
            "amp" => "&",
            "lt" => "<",
            "gt" => ">",
            "quot" => "\"",
            "apos" => "'",
            // A plain space: agents gain nothing from U+00A0.
            "nbsp" => " ",
            _ => return None,
        };
        return Some(named.to_owned());
    };
    char::from_u32(code_point).map(String::from)
}

fn strip_trailing_whitespace(text: &str) -> String {
    text.split('\n')
        .map(str::trim_end)
        .collect::<Vec<_>>()
        .join("\n")
}

fn collapse_link_floods(text: &str) -> String {
    let mut kept: Vec<String> = Vec::new();
    let mut run = 0usize;
    let flush = |kept: &mut Vec<String>, run: usize| {
        if run > MAX_CONSECUTIVE_LINK_LINES {
            kept.push(format!(
                "[… {} more links]",
                run - MAX_CONSECUTIVE_LINK_LINES
            ));
        }
    };
    for line in text.split('\n') {
        if LINK_ONLY_LINE.is_match(line) {
            run += 1;
            if run <= MAX_CONSECUTIVE_LINK_LINES {
                kept.push(line.to_owned());
            }
            continue;
        }
        flush(&mut kept, run);
        run = 0;
        kept.push(line.to_owned());
    }
    flush(&mut kept, run);
    kept.join("\n")
}

fn drop_repeated_paragraphs(text: &str) -> String {
    let mut seen = HashSet::new();
    let mut kept = Vec::new();
    let mut in_code_fence = false;
    for paragraph in text.split("\n\n") {
        // Code may legitimately repeat a block; only prose is deduplicated.
        let fences = paragraph.lines().filter(|line| is_code_fence(line)).count();
        let is_code = in_code_fence || fences > 0;
        if fences % 2 == 1 {
            in_code_fence = !in_code_fence;
        }
        let is_repeat = !is_code
            && paragraph.chars().count() >= MIN_DEDUPLICATED_PARAGRAPH_CHARS
            && !seen.insert(paragraph);
        if !is_repeat {
            kept.push(paragraph);
        }
    }
    kept.join("\n\n")
}

fn is_code_fence(line: &str) -> bool {
    let trimmed = line.trim_start();
    trimmed.starts_with("```") || trimmed.starts_with("~~~")
}

/// The outcome of [`truncate`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Truncated {
    /// The text to show, with a `[truncated: …]` line when shortened.
    pub text: String,
    /// Whether anything was left out.
    pub truncated: bool,
    /// The input's length in characters.
    pub original_chars: usize,
}

/// Shortens `text` to `max_chars` characters, marker included, without
/// cutting inside a JSON value.
///
/// - A JSON array or object keeps the longest run of whole leading elements
///   (members), byte for byte as in the input, and is closed so it stays
///   valid JSON. When the next element is itself an array (or an object,
///   when no whole element fits), as much of it as fits is kept the same way,
///   so `{"results": [...]}` shows some results rather than `{}`. A line
///   `[truncated: kept K of N items; M of T characters]` follows. If nothing
///   fits, the empty container is followed by
///   `[truncated: the first item alone is X characters]`.
/// - A top-level JSON string is shown as its decoded content, shortened as
///   plain text (counted in decoded characters), so that no partial JSON
///   string is emitted; if the decoded content fits, it is returned whole
///   with `truncated: false`.
/// - Plain text is cut at the last paragraph break, line break or space in
///   the final 20% of the budget (else exactly at the budget) and followed
///   by `[truncated: showed X of T characters]`.
///
/// The result never exceeds `max_chars` when `max_chars >= 80`; smaller
/// budgets may be exceeded by the marker.
pub fn truncate(text: &str, max_chars: usize) -> Truncated {
    let original_chars = text.chars().count();
    if original_chars <= max_chars {
        return Truncated {
            text: text.to_owned(),
            truncated: false,
            original_chars,
        };
    }
    let json = text.trim_matches(is_json_whitespace);
    let shortened = match json.as_bytes().first() {
        Some(b'[' | b'{') if serde_json::from_str::<IgnoredAny>(json).is_ok() => {
            truncate_json_container(json, max_chars, original_chars)
        }
        Some(b'"') => match serde_json::from_str::<String>(json) {
            Ok(decoded) => {
                let decoded_chars = decoded.chars().count();
                if decoded_chars <= max_chars {
                    return Truncated {
                        text: decoded,
                        truncated: false,
                        original_chars,
                    };
                }
                truncate_plain(&decoded, max_chars, decoded_chars)
            }
            Err(_) => truncate_plain(text, max_chars, original_chars),
        },
        _ => truncate_plain(text, max_chars, original_chars),
    };
    Truncated {
        text: shortened,
        truncated: true,
        original_chars,
    }
}

fn plain_marker(shown_chars: usize, total_chars: usize) -> String {
    format!("\n[truncated: showed {shown_chars} of {total_chars} characters]")
}

fn truncate_plain(text: &str, max_chars: usize, total_chars: usize) -> String {
    // Reserved at its longest (shown == total) so the real one always fits.
    let marker_chars = plain_marker(total_chars, total_chars).chars().count();
    let budget = if max_chars > marker_chars {
        max_chars - marker_chars
    } else {
        max_chars
    };
    let hard_end = byte_offset(text, budget);
    let window_start = byte_offset(text, budget - budget / BOUNDARY_LOOK_BACK_DIVISOR);
    let window = &text[window_start..hard_end];
    let cut = window
        .rfind("\n\n")
        .or_else(|| window.rfind('\n'))
        .or_else(|| window.rfind(' '))
        .map_or(hard_end, |found| window_start + found);
    let kept = text[..cut].trim_end();
    let marker = plain_marker(kept.chars().count(), total_chars);
    format!("{kept}{marker}")
}

fn json_marker(
    whole: usize,
    total_items: usize,
    partial: bool,
    kept_chars: usize,
    total_chars: usize,
) -> String {
    let partly = if partial {
        format!(" and part of item {}", whole + 1)
    } else {
        String::new()
    };
    format!(
        "\n[truncated: kept {whole} of {total_items} items{partly}; {kept_chars} of {total_chars} characters]"
    )
}

fn truncate_json_container(json: &str, max_chars: usize, original_chars: usize) -> String {
    let top = scan_container(json, 0);
    let total_items = top.members.len();
    // Reserved at its longest so the real marker always fits.
    let marker_chars = json_marker(
        total_items,
        total_items,
        total_items > 0,
        original_chars,
        original_chars,
    )
    .chars()
    .count();
    let budget = max_chars.saturating_sub(marker_chars);
    if let Some(kept) = shrink_container(json, &top, budget)
        && (kept.whole > 0 || kept.partial)
    {
        let marker = json_marker(
            kept.whole,
            total_items,
            kept.partial,
            kept.text.chars().count(),
            original_chars,
        );
        return format!("{}{marker}", kept.text);
    }
    let empty = if json.starts_with('[') { "[]" } else { "{}" };
    match top.members.first() {
        Some(first) => {
            let first_chars = json[first.start..first.end].chars().count();
            format!("{empty}\n[truncated: the first item alone is {first_chars} characters]")
        }
        None => format!("{empty}{}", json_marker(0, 0, false, 2, original_chars)),
    }
}

/// One direct child of a JSON container, as byte offsets into the text.
/// For an object member, `start` is at the key and `value_start` at the
/// value; for an array element they are equal.
#[derive(Debug, Clone, Copy)]
struct Member {
    start: usize,
    value_start: usize,
    end: usize,
}

/// A JSON array or object located in the text: its opening bracket, its
/// direct children and its closing bracket.
#[derive(Debug)]
struct Container {
    open: usize,
    members: Vec<Member>,
    close: usize,
}

/// What [`shrink_container`] kept.
#[derive(Debug)]
struct Shrunk {
    text: String,
    whole: usize,
    partial: bool,
}

/// The longest valid-JSON prefix of `container` within `budget` characters:
/// whole members copied from the text, then possibly part of the next one
/// when it is a container, then the original closing whitespace and bracket.
/// `None` when not even the empty container fits.
fn shrink_container(json: &str, container: &Container, budget: usize) -> Option<Shrunk> {
    let after_members = container
        .members
        .last()
        .map_or(container.open + 1, |last| last.end);
    let closing = json.get(after_members..=container.close)?;
    let mut used = 1 + closing.chars().count();
    if used > budget {
        return None;
    }
    let mut whole = 0;
    let mut cursor = container.open + 1;
    for member in &container.members {
        let cost = json[cursor..member.end].chars().count();
        if used + cost > budget {
            break;
        }
        used += cost;
        whole += 1;
        cursor = member.end;
    }
    let mut text = json[container.open..cursor].to_owned();
    let mut partial = false;
    if let Some(next) = container.members.get(whole) {
        // A cut-short list reads naturally, so an array is entered; an object
        // missing members could pass for a complete one, so it is entered
        // only when nothing else would be shown.
        let worth_entering = match json.as_bytes().get(next.value_start) {
            Some(b'[') => true,
            Some(b'{') => whole == 0,
            _ => false,
        };
        let lead = &json[cursor..next.value_start];
        if worth_entering
            && let Some(room) = budget.checked_sub(used + lead.chars().count())
            && let Some(inner) =
                shrink_container(json, &scan_container(json, next.value_start), room)
            && (inner.whole > 0 || inner.partial)
        {
            text.push_str(lead);
            text.push_str(&inner.text);
            partial = true;
        }
    }
    text.push_str(closing);
    Some(Shrunk {
        text,
        whole,
        partial,
    })
}

// The scanner below assumes valid JSON (checked by serde_json beforehand);
// on anything else it stops at the end of the text rather than panicking.

fn is_json_whitespace(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\r')
}

fn skip_json_whitespace(bytes: &[u8], mut index: usize) -> usize {
    while bytes
        .get(index)
        .is_some_and(|byte| matches!(byte, b' ' | b'\t' | b'\n' | b'\r'))
    {
        index += 1;
    }
    index
}

/// The index just past the string whose opening quote is at `start`.
fn json_string_end(bytes: &[u8], start: usize) -> usize {
    let mut index = start + 1;
    while let Some(byte) = bytes.get(index) {
        match byte {
            b'\\' => index += 2,
            b'"' => return index + 1,
            _ => index += 1,
        }
    }
    bytes.len()
}

/// The index just past the JSON value starting at `start`.
fn json_value_end(bytes: &[u8], start: usize) -> usize {
    match bytes.get(start) {
        Some(b'"') => json_string_end(bytes, start),
        Some(b'[' | b'{') => {
            let mut depth = 0usize;
            let mut index = start;
            while let Some(byte) = bytes.get(index) {
                match byte {
                    b'"' => {
                        index = json_string_end(bytes, index);
                        continue;
                    }
                    b'[' | b'{' => depth += 1,
                    b']' | b'}' => {
                        depth = depth.saturating_sub(1);
                        if depth == 0 {
                            return index + 1;
                        }
                    }
                    _ => {}
                }
                index += 1;
            }
            bytes.len()
        }
        _ => {
            let mut index = start;
            while bytes.get(index).is_some_and(|byte| {
                !matches!(byte, b',' | b']' | b'}' | b' ' | b'\t' | b'\n' | b'\r')
            }) {
                index += 1;
            }
            index
        }
    }
}

/// Locates the direct children of the array or object opening at `open`.
fn scan_container(json: &str, open: usize) -> Container {
    let bytes = json.as_bytes();
    let is_object = bytes.get(open) == Some(&b'{');
    let mut members = Vec::new();
    let mut index = skip_json_whitespace(bytes, open + 1);
    loop {
        match bytes.get(index) {
            None => {
                return Container {
                    open,
                    members,
                    close: bytes.len().saturating_sub(1),
                };
            }
            Some(b']' | b'}') => {
                return Container {
                    open,
                    members,
                    close: index,
                };
            }
            Some(_) => {}
        }
        let start = index;
        let value_start = if is_object {
            let colon = skip_json_whitespace(bytes, json_string_end(bytes, start));
            skip_json_whitespace(bytes, colon + 1)
        } else {
            start
        };
        let end = json_value_end(bytes, value_start);
        if end <= start {
            // Only reachable on invalid JSON; stop instead of looping.
            return Container {
                open,
                members,
                close: bytes.len().saturating_sub(1),
            };
        }
        members.push(Member {
            start,
            value_start,
            end,
        });
        index = skip_json_whitespace(bytes, end);
        if bytes.get(index) == Some(&b',') {
            index = skip_json_whitespace(bytes, index + 1);
        }
    }
}

/// The byte index of the character at position `chars`, or the text's
/// length when it is shorter.
fn byte_offset(text: &str, chars: usize) -> usize {
    let Some(last_skipped) = chars.checked_sub(1) else {
        return 0;
    };
    // `Chars::nth` skips ahead in blocks, much faster than `char_indices`.
    let mut rest = text.chars();
    rest.nth(last_skipped);
    text.len() - rest.as_str().len()
}

/// What happens to a long text (`MNEME_PROXY_COMPRESSION`, per upstream
/// and per tool).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Compression {
    /// Cleaned, never shortened.
    None,
    /// Cleaned and cut to the budget (never inside a JSON value).
    #[default]
    Truncate,
    /// Delivered whole, in chunks read with `stm_proxy_read_more`.
    Progressive,
}

impl Compression {
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "none" => Some(Self::None),
            "truncate" => Some(Self::Truncate),
            "progressive" => Some(Self::Progressive),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Truncate => "truncate",
            Self::Progressive => "progressive",
        }
    }
}

/// What to send for one text item of a result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// This text.
    Send(String),
    /// Store the original text whole and send its first [`chunk`]; when it
    /// cannot be stored, send [`shorten`] of it instead. Progressive
    /// delivery is lossless, so the text is not cleaned first.
    Deliver,
}

/// Decides what becomes of one text item (`text_items`: how many the
/// result holds; only a lone one is delivered in chunks, so the chunks
/// rebuild exactly one text).
pub fn plan(text: &str, compression: Compression, budget: usize, text_items: usize) -> Plan {
    match compression {
        Compression::Progressive if text_items == 1 && text.chars().count() > budget => {
            Plan::Deliver
        }
        Compression::Truncate | Compression::Progressive => Plan::Send(shorten(text, budget)),
        Compression::None => Plan::Send(clean(text)),
    }
}

/// Cleaned and truncated to `budget` characters.
pub fn shorten(text: &str, budget: usize) -> String {
    truncate(&clean(text), budget).text
}

/// Separates a chunk from its footer in every progressive response.
pub const FOOTER_TOKEN: &str = "\n---\n[progressive: chars=";

/// One piece of a progressively delivered result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// The chunk's content followed by its footer.
    pub text: String,
    /// Position of the chunk's first character in the content.
    pub start: usize,
    /// Position just past the chunk's last character.
    pub end: usize,
    /// The content's length in characters.
    pub total_chars: usize,
    /// Where the next chunk starts; `None` for the last one.
    pub next_offset: Option<usize>,
}

/// The chunk of `content` starting at character `offset`, at most `limit`
/// characters long (0 counts as 1), with its footer; `None` when `offset`
/// is at or past the end.
///
/// A chunk that is not the last ends just after the last `\n\n`, else `\n`,
/// else space found in the final 20% of `limit`, else exactly at the limit.
/// Its footer gives the range, what remains, the headings still to come and
/// the call that reads on:
///
/// ```text
/// <chunk>
/// ---
/// [progressive: chars=START-END/TOTAL | remaining=R | has_more=true | ttl=1800s]
/// [Remaining: "Heading A", "Heading B" (+N more)]
/// [-> stm_proxy_read_more(key="KEY", offset=END)]
/// ```
///
/// The last chunk's footer is only
/// `[progressive: chars=START-END/TOTAL | remaining=0 | has_more=false]`.
pub fn chunk(
    content: &str,
    key: &str,
    offset: usize,
    limit: usize,
    ttl_secs: u64,
) -> Option<Chunk> {
    let total_chars = content.chars().count();
    if offset >= total_chars {
        return None;
    }
    let limit = limit.max(1);
    let start_byte = byte_offset(content, offset);
    let rest = &content[start_byte..];
    let wanted = limit.min(total_chars - offset);
    let hard_end = byte_offset(rest, wanted);
    let chunk_len = if offset + wanted < total_chars {
        let look_back = (limit / BOUNDARY_LOOK_BACK_DIVISOR).min(wanted);
        let window_start = byte_offset(rest, wanted - look_back);
        let window = &rest[window_start..hard_end];
        // Every separator found lies inside the window, so the chunk ends
        // after at least one character: it is never empty.
        window
            .rfind("\n\n")
            .map(|found| found + 2)
            .or_else(|| window.rfind('\n').map(|found| found + 1))
            .or_else(|| window.rfind(' ').map(|found| found + 1))
            .map_or(hard_end, |found| window_start + found)
    } else {
        hard_end
    };
    let body = &rest[..chunk_len];
    let end = offset + body.chars().count();
    let remaining = total_chars - end;

    let range = format!("{offset}-{end}/{total_chars} | remaining={remaining}");
    if remaining == 0 {
        return Some(Chunk {
            text: format!("{body}{FOOTER_TOKEN}{range} | has_more=false]"),
            start: offset,
            end,
            total_chars,
            next_offset: None,
        });
    }
    let upcoming = upcoming_headings_line(content, start_byte + chunk_len);
    Some(Chunk {
        text: format!(
            "{body}{FOOTER_TOKEN}{range} | has_more=true | ttl={ttl_secs}s]{upcoming}\n\
             [-> stm_proxy_read_more(key=\"{key}\", offset={end})]"
        ),
        start: offset,
        end,
        total_chars,
        next_offset: Some(end),
    })
}

/// The footer's `\n[Remaining: "A", "B" (+N more)]` line for the headings
/// whose lines start at or after `end_byte`, or nothing when there are none.
fn upcoming_headings_line(content: &str, end_byte: usize) -> String {
    let mut upcoming = headings_with_offsets(content)
        .filter(|(line_start, _)| *line_start >= end_byte)
        .map(|(_, heading)| heading);
    // Quotes inside a heading would make the list ambiguous to read.
    let listed: Vec<String> = upcoming
        .by_ref()
        .take(MAX_LISTED_HEADINGS)
        .map(|heading| format!("\"{}\"", heading.replace('"', "'")))
        .collect();
    if listed.is_empty() {
        return String::new();
    }
    let more = match upcoming.count() {
        0 => String::new(),
        more => format!(" (+{more} more)"),
    };
    format!("\n[Remaining: {}{more}]", listed.join(", "))
}

/// The content part of a progressive response: everything before the last
/// [`FOOTER_TOKEN`], or the whole response when there is none.
///
/// The last occurrence is the footer's own even when the content contains
/// the token's text, and a block appended after the footer does not matter.
pub fn strip_footer(response: &str) -> &str {
    response
        .rfind(FOOTER_TOKEN)
        .map_or(response, |footer| &response[..footer])
}

/// The Markdown ATX headings of `text` (`#` to `######` then a space), as
/// their trimmed text, skipping fenced code blocks where `#` starts comments.
pub fn markdown_headings(text: &str) -> impl Iterator<Item = &str> {
    headings_with_offsets(text).map(|(_, heading)| heading)
}

/// [`markdown_headings`] with the byte offset where each heading's line
/// starts.
fn headings_with_offsets(text: &str) -> impl Iterator<Item = (usize, &str)> {
    let mut in_code_fence = false;
    // The regex finds the few candidate lines, which keeps this cheap on a
    // megabyte that is re-scanned for every chunk.
    HEADING_OR_FENCE_LINE
        .find_iter(text)
        .filter_map(move |found| {
            let line = found.as_str();
            if is_code_fence(line) {
                in_code_fence = !in_code_fence;
                return None;
            }
            if in_code_fence {
                return None;
            }
            heading_text(line).map(|heading| (found.start(), heading))
        })
}

fn heading_text(line: &str) -> Option<&str> {
    let hashes = line.bytes().take_while(|byte| *byte == b'#').count();
    if !(1..=6).contains(&hashes) {
        return None;
    }
    let heading = line[hashes..].strip_prefix(' ')?.trim();
    (!heading.is_empty()).then_some(heading)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_follow_the_compression() {
        let long = "word ".repeat(100);
        assert_eq!(plan(&long, Compression::Progressive, 50, 1), Plan::Deliver);
        // Two text items: chunks could rebuild only one of them.
        assert!(
            matches!(plan(&long, Compression::Progressive, 50, 2), Plan::Send(t) if t.chars().count() <= 50)
        );
        assert!(
            matches!(plan(&long, Compression::Truncate, 50, 1), Plan::Send(t) if t.contains("[truncated"))
        );
        assert_eq!(
            plan("short", Compression::Progressive, 50, 1),
            Plan::Send("short".into())
        );
        assert_eq!(
            plan(&long, Compression::None, 50, 1),
            Plan::Send(clean(&long))
        );
        for c in [
            Compression::None,
            Compression::Truncate,
            Compression::Progressive,
        ] {
            assert_eq!(Compression::parse(c.as_str()), Some(c));
        }
    }
    use serde_json::{Value, json};

    /// A tiny deterministic generator, so property tests need no new crate
    /// and always explore the same cases.
    struct XorShift(u64);

    impl XorShift {
        fn next(&mut self) -> u64 {
            let mut x = self.0;
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            self.0 = x;
            x
        }

        fn below(&mut self, bound: usize) -> usize {
            let bound = u64::try_from(bound.max(1)).expect("usize fits in u64");
            usize::try_from(self.next() % bound).expect("below a usize bound")
        }

        fn char_in(&mut self, first: u32, count: usize) -> char {
            let step = u32::try_from(self.below(count)).expect("small");
            char::from_u32(first + step).expect("valid scalar")
        }
    }

    fn generated_content(rng: &mut XorShift, max_chars: usize) -> String {
        let target = rng.below(max_chars);
        let mut content = String::new();
        let mut chars = 0;
        while chars < target {
            let piece: String = match rng.below(12) {
                0..=2 => format!("word{} ", rng.below(1000)),
                3 => (0..rng.below(12))
                    .map(|_| rng.char_in(0xAC00, 11_172))
                    .collect(),
                4 => (0..rng.below(4))
                    .map(|_| rng.char_in(0x1F600, 80))
                    .collect(),
                5 => "\n".repeat(rng.below(4) + 1),
                6 => FOOTER_TOKEN.to_owned(),
                7 => format!("\n## 제목 {}\n", rng.below(100)),
                8 => "```\n# not a heading\n```\n".to_owned(),
                9 => "\n---\n[progressive: cha".to_owned(),
                10 => " ".repeat(rng.below(6) + 1),
                _ => "é\r\n".to_owned(),
            };
            chars += piece.chars().count();
            content.push_str(&piece);
        }
        content.chars().take(target).collect()
    }

    fn reassemble(content: &str, limit: usize) -> String {
        let total = content.chars().count();
        let mut rebuilt = String::new();
        let mut offset = 0;
        while let Some(piece) = chunk(content, "k", offset, limit, 1800) {
            assert_eq!(piece.start, offset);
            assert_eq!(piece.total_chars, total);
            assert!(piece.end > piece.start, "empty chunk at {offset}");
            assert!(piece.end - piece.start <= limit.max(1));
            let body = strip_footer(&piece.text);
            assert_eq!(body.chars().count(), piece.end - piece.start);
            rebuilt.push_str(body);
            let Some(next) = piece.next_offset else {
                assert_eq!(piece.end, total);
                assert!(piece.text.ends_with("| remaining=0 | has_more=false]"));
                break;
            };
            assert!(next > offset);
            assert!(piece.text.contains("has_more=true"));
            offset = next;
        }
        assert!(chunk(content, "k", total, limit, 1800).is_none());
        rebuilt
    }

    #[test]
    fn chunks_reassemble_exactly() {
        let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
        for round in 0..40 {
            let content = generated_content(&mut rng, 20_000);
            for limit in [1, 7, 100, 4000] {
                // Every chunk recounts the whole content, so tiny limits get
                // a shorter prefix to keep the test quick.
                let content: String = if limit < 100 {
                    content.chars().take(1200).collect()
                } else {
                    content.clone()
                };
                assert_eq!(
                    reassemble(&content, limit),
                    content,
                    "round {round} limit {limit}"
                );
            }
        }
    }

    #[test]
    fn a_megabyte_reassembles_in_4000_char_chunks() {
        let mut rng = XorShift(42);
        let mut content = String::new();
        while content.len() < 1_000_000 {
            content.push_str(&generated_content(&mut rng, 5000));
        }
        assert_eq!(reassemble(&content, 4000), content);
    }

    #[test]
    fn chunks_prefer_paragraph_then_line_then_word_boundaries() {
        let content = format!("{}\n\n{}", "a".repeat(90), "b".repeat(100));
        let first = chunk(&content, "k", 0, 100, 60).expect("chunk");
        assert_eq!(first.end, 92);
        let content = format!("{} {}\n{}", "a".repeat(50), "a".repeat(35), "b".repeat(100));
        assert_eq!(chunk(&content, "k", 0, 100, 60).expect("chunk").end, 87);
        let content = format!("{} {}", "a".repeat(85), "b".repeat(100));
        assert_eq!(chunk(&content, "k", 0, 100, 60).expect("chunk").end, 86);
        // A separator further back than 20% of the limit is ignored.
        let content = format!("{}\n{}", "a".repeat(70), "b".repeat(100));
        assert_eq!(chunk(&content, "k", 0, 100, 60).expect("chunk").end, 100);
        assert!(chunk("", "k", 0, 100, 60).is_none());
        assert!(chunk("abc", "k", 3, 100, 60).is_none());
        assert_eq!(chunk("abc", "k", 0, 0, 60).expect("chunk").end, 1);
    }

    #[test]
    fn footers_are_exact() {
        let content = "# Intro\nabc\n\n# One\nx\n## Two\ny\n```\n# code\n```\n# \"Three\"\nz\n";
        let first = chunk(content, "key-1", 0, 13, 1800).expect("chunk");
        assert_eq!(
            first.text,
            "# Intro\nabc\n\n\n---\n[progressive: chars=0-13/57 | remaining=44 | has_more=true | ttl=1800s]\n\
             [Remaining: \"One\", \"Two\", \"'Three'\"]\n\
             [-> stm_proxy_read_more(key=\"key-1\", offset=13)]"
        );
        assert_eq!(first.next_offset, Some(13));
        let last = chunk(content, "key-1", 13, 100, 1800).expect("chunk");
        assert_eq!(
            last.text,
            format!(
                "{}\n---\n[progressive: chars=13-57/57 | remaining=0 | has_more=false]",
                &content[13..]
            )
        );
        assert_eq!(last.next_offset, None);
    }

    #[test]
    fn footers_list_at_most_five_headings() {
        let content = (0..9)
            .map(|n| format!("# H{n}\ntext\n"))
            .collect::<Vec<_>>()
            .concat();
        let first = chunk(&content, "k", 0, 3, 60).expect("chunk");
        assert!(
            first.text.contains(
                "\n[Remaining: \"H1\", \"H2\", \"H3\", \"H4\", \"H5\" (+3 more)]\n[-> stm_proxy_read_more(key=\"k\", offset=3)]"
            ),
            "{}",
            first.text
        );
        // A heading cut in the middle is not "remaining".
        let second = chunk(&content, "k", 0, 11, 60).expect("chunk");
        assert_eq!(second.end, 10);
        assert!(
            second.text.contains("[Remaining: \"H1\""),
            "{}",
            second.text
        );
        let plain = chunk("no headings here at all", "k", 0, 5, 60).expect("chunk");
        assert!(!plain.text.contains("[Remaining:"));
    }

    #[test]
    fn strip_footer_uses_the_last_token() {
        let content = format!("before{FOOTER_TOKEN}inside");
        let piece = chunk(&content, "k", 0, 1000, 60).expect("chunk");
        let appended = format!("{}\n\n[related memories: …]", piece.text);
        assert_eq!(strip_footer(&appended), content);
        assert_eq!(strip_footer("no footer"), "no footer");
    }

    #[test]
    fn markdown_headings_skip_code_and_non_headings() {
        let text =
            "# A\n#B\n####### seven\n###### six \n```\n# comment\n```\n  # indented\n## Last\r\n";
        assert_eq!(
            markdown_headings(text).collect::<Vec<_>>(),
            vec!["A", "six", "Last"]
        );
    }

    #[test]
    fn clean_leaves_json_untouched() {
        for json in [
            "{\"b\": 1,   \"a\": \"x  \\n\"}  \r\n",
            "[\r\n  1,  \r\n\r\n\r\n\r\n  2\r\n]",
            "  \"<div>text</div><p>a</p><br>\"  ",
            "42",
        ] {
            assert_eq!(clean(json), json);
        }
    }

    #[test]
    fn clean_keeps_code_indentation() {
        let code = "fn main() {   \r\n    if x {\r\n        y();\t\r\n    }\r\n}\r\n";
        assert_eq!(
            clean(code),
            "fn main() {\n    if x {\n        y();\n    }\n}\n"
        );
        let markdown = "# Title\n\n- item\n  - nested\n\n    indented code\n\n\n\n\nend";
        assert_eq!(
            clean(markdown),
            "# Title\n\n- item\n  - nested\n\n    indented code\n\nend"
        );
    }

    #[test]
    fn clean_strips_html() {
        let html = "<!DOCTYPE html><html><head><style>body { color: red }</style>\
                    <script type=\"text/javascript\">alert('x')</script></head>\
                    <body><!-- nav --><h1>Title</h1><p>Fish &amp; chips &lt;3 &#39;yes&#x27; &nbsp;ok</p>\
                    <ul><li><a href=\"/a\">One</a></li><li>Two</li></ul><noscript>enable js</noscript>\
                    <p>&amp;lt;kept&amp;gt;</p></body></html>";
        let cleaned = clean(html);
        assert_eq!(
            cleaned,
            "\nTitle\n\nFish & chips <3 'yes'  ok\n\nOne\n\nTwo\n\n&lt;kept&gt;\n"
        );
    }

    #[test]
    fn clean_detects_fragments_by_tag_count() {
        let fragment = "<div><span>Hi</span> <a href=\"x\">there</a></div>";
        assert_eq!(clean(fragment), "\nHi there\n");
        // One tag in prose is not HTML.
        let prose = "Use <br> for a line break & keep <b>this</b>.";
        assert_eq!(clean(prose), prose);
        // Neither is Markdown showing HTML in a code fence.
        let docs = "Example:\n\n```html\n<!DOCTYPE html>\n<div><p>a</p><span>b</span></div>\n```";
        assert_eq!(clean(docs), docs);
        // A document is still a document even if it shows a fence.
        let page = "<!doctype html><p>Run:</p><pre>```\nls\n```</pre>";
        assert_eq!(clean(page), "\nRun:\n```\nls\n```");
        let unterminated = "<div><p>a</p><span>b</span><script>var x = 1;";
        assert_eq!(clean(unterminated), "\n\na\nb");
    }

    #[test]
    fn clean_drops_long_repeated_paragraphs_only() {
        let boilerplate = "This page is provided by the example documentation team.";
        let text = format!(
            "{boilerplate}\n\nBody one.\n\n---\n\n}}\n\n{boilerplate}\n\n---\n\n}}\n\nBody two."
        );
        assert_eq!(
            clean(&text),
            format!("{boilerplate}\n\nBody one.\n\n---\n\n}}\n\n---\n\n}}\n\nBody two.")
        );
        let repeated_code = format!("```\n{boilerplate}\n\n{boilerplate}\n```");
        assert_eq!(clean(&repeated_code), repeated_code);
    }

    #[test]
    fn clean_collapses_link_floods() {
        let links: Vec<String> = (0..25)
            .map(|n| match n % 3 {
                0 => format!("https://example.com/{n}"),
                1 => format!("- [Page {n}](https://example.com/{n})"),
                _ => format!("[Page {n}](/p/{n})"),
            })
            .collect();
        let text = format!("Intro\n{}\nOutro", links.join("\n"));
        let cleaned = clean(&text);
        let expected = format!("Intro\n{}\n[… 5 more links]\nOutro", links[..20].join("\n"));
        assert_eq!(cleaned, expected);
        let twenty = format!("Intro\n{}", links[..20].join("\n"));
        assert_eq!(clean(&twenty), twenty);
    }

    fn json_part(text: &str) -> Value {
        let (json, marker) = text.rsplit_once('\n').expect("a marker line");
        assert!(marker.starts_with("[truncated: "), "{marker}");
        serde_json::from_str(json).expect("valid JSON")
    }

    #[test]
    fn truncate_leaves_short_text_alone() {
        let short = truncate("hello", 5);
        assert_eq!(
            short,
            Truncated {
                text: "hello".to_owned(),
                truncated: false,
                original_chars: 5
            }
        );
    }

    #[test]
    fn truncate_keeps_whole_array_elements() {
        let items: Vec<Value> = (0..200)
            .map(|n| json!({"z": n, "a": format!("항목 {n}")}))
            .collect();
        let text = serde_json::to_string(&items).expect("serialise");
        let result = truncate(&text, 500);
        assert!(result.truncated);
        assert!(result.text.chars().count() <= 500, "{}", result.text);
        let kept = json_part(&result.text);
        let kept = kept.as_array().expect("array");
        assert!(!kept.is_empty());
        assert_eq!(kept[..], items[..kept.len()]);
        // Key order and spacing are the original's, byte for byte.
        let (json, marker) = result.text.rsplit_once('\n').expect("marker");
        assert_eq!(&text[..json.len() - 1], &json[..json.len() - 1]);
        assert_eq!(
            marker,
            format!(
                "[truncated: kept {} of 200 items; {} of {} characters]",
                kept.len(),
                json.chars().count(),
                text.chars().count()
            )
        );
    }

    #[test]
    fn truncate_keeps_whole_object_members_and_pretty_layout() {
        let mut object = serde_json::Map::new();
        for n in 0..50 {
            object.insert(format!("key{n:02}"), json!("value ".repeat(5)));
        }
        let text = serde_json::to_string_pretty(&Value::Object(object)).expect("serialise");
        let result = truncate(&text, 400);
        assert!(result.text.chars().count() <= 400);
        let kept = json_part(&result.text);
        let kept = kept.as_object().expect("object");
        assert!(kept.len() > 1);
        assert_eq!(kept.keys().next().map(String::as_str), Some("key00"));
        assert!(
            result.text.contains("\"\n}\n[truncated: kept"),
            "{}",
            result.text
        );
    }

    #[test]
    fn truncate_descends_into_a_large_first_member() {
        let results: Vec<Value> = (0..100)
            .map(|n| json!({"id": n, "title": "결과"}))
            .collect();
        let text =
            serde_json::to_string(&json!({"results": results, "total": 100})).expect("serialise");
        let result = truncate(&text, 300);
        assert!(result.text.chars().count() <= 300);
        let kept = json_part(&result.text);
        let kept_results = kept["results"].as_array().expect("results");
        assert!(!kept_results.is_empty());
        assert_eq!(kept_results[..], results[..kept_results.len()]);
        assert!(
            result
                .text
                .contains("[truncated: kept 0 of 2 items and part of item 1;"),
            "{}",
            result.text
        );
    }

    #[test]
    fn truncate_never_emits_a_partial_string_element() {
        let text = serde_json::to_string(&json!(["x".repeat(5000), 1])).expect("serialise");
        let result = truncate(&text, 200);
        assert_eq!(
            result.text,
            "[]\n[truncated: the first item alone is 5002 characters]"
        );
        let text = serde_json::to_string(&json!({"big": "y".repeat(5000)})).expect("serialise");
        assert_eq!(
            truncate(&text, 200).text,
            "{}\n[truncated: the first item alone is 5008 characters]"
        );
    }

    #[test]
    fn truncate_decodes_a_top_level_json_string() {
        let text = serde_json::to_string(&"line one\nline two ".repeat(50)).expect("serialise");
        let result = truncate(&text, 200);
        assert!(result.truncated);
        assert!(result.text.starts_with("line one\nline two"));
        assert!(!result.text.contains("\\n"));
        assert!(result.text.chars().count() <= 200);
    }

    #[test]
    fn truncate_plain_text_prefers_paragraphs_then_lines_then_words() {
        let text = format!("{}\n\n{}", "a ".repeat(50).trim_end(), "b".repeat(300));
        let result = truncate(&text, 150);
        assert_eq!(
            result.text,
            format!(
                "{}\n[truncated: showed 99 of 401 characters]",
                "a ".repeat(50).trim_end()
            )
        );
        let text = format!("{}\n{}", "word ".repeat(20), "c".repeat(300));
        let result = truncate(&text, 150);
        assert!(
            result
                .text
                .starts_with(&"word ".repeat(20).trim_end().to_owned())
        );
        let text = "c".repeat(300);
        let result = truncate(&text, 150);
        // The marker is reserved at its longest, "showed 300 of 300" (42).
        assert_eq!(
            result.text,
            format!(
                "{}\n[truncated: showed 108 of 300 characters]",
                "c".repeat(108)
            )
        );
    }

    #[test]
    fn truncate_respects_the_limit_and_char_boundaries() {
        let mut rng = XorShift(7);
        for round in 0..40 {
            let text = generated_content(&mut rng, 3000);
            let items: Vec<Value> = text.split('\n').map(Value::from).collect();
            let nested =
                json!({"meta": {"n": items.len()}, "items": items, "tail": [text.clone()]});
            let json_texts = [
                serde_json::to_string(&items).expect("serialise"),
                serde_json::to_string_pretty(&nested).expect("serialise"),
            ];
            for max in [80, 81, 97, 150, 400, 1000, 2999] {
                let result = truncate(&text, max);
                assert!(
                    result.text.chars().count() <= max,
                    "round {round} max {max}"
                );
                for json in &json_texts {
                    let result = truncate(json, max);
                    assert!(
                        result.text.chars().count() <= max,
                        "round {round} max {max}"
                    );
                    if result.truncated {
                        let (kept, _) = result.text.rsplit_once('\n').expect("marker");
                        serde_json::from_str::<IgnoredAny>(kept).expect("valid JSON");
                    }
                }
            }
            for max in [0, 1, 10, 79] {
                let result = truncate(&text, max);
                let over = result.text.chars().count().saturating_sub(max);
                assert!(
                    over <= plain_marker(3000, 3000).chars().count(),
                    "round {round} max {max}"
                );
            }
        }
    }
}
