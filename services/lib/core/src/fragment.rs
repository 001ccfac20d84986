//! Fragments: the unit of long-term memory, and the rules that turn a
//! `remember` request into a row that is safe to store.
//!
//! [`prepare`] is pure: validation, redaction, keyword extraction, importance
//! defaults and clamps, TTL-tier inference, hashing and search lexemes. The
//! remember service only adds the principal and the transaction.

use std::fmt;
use std::str::FromStr;
use std::sync::LazyLock;

use chrono::{DateTime, Utc};
use regex::Regex;
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::redact::redact;
use crate::text::{Tokenizer, estimate_tokens, weighted_len};

macro_rules! string_enum {
    ($(#[$meta:meta])* $name:ident { $($variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name { $($variant),+ }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            pub const fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $name {
            type Err = Error;

            fn from_str(s: &str) -> Result<Self> {
                Self::ALL.iter().copied().find(|v| v.as_str() == s).ok_or_else(|| {
                    let allowed: Vec<&str> = Self::ALL.iter().map(|v| v.as_str()).collect();
                    Error::invalid_argument(format!(
                        "unknown {} `{s}` (expected one of: {})",
                        stringify!($name), allowed.join(", ")
                    ))
                })
            }
        }
    };
}

string_enum! {
    /// What kind of knowledge a fragment holds.
    FragmentType {
        Fact => "fact",
        Decision => "decision",
        Error => "error",
        Preference => "preference",
        Procedure => "procedure",
        Relation => "relation",
        Episode => "episode",
    }
}

string_enum! {
    /// Retention class; the consolidator moves fragments between tiers.
    TtlTier {
        Short => "short",
        Hot => "hot",
        Warm => "warm",
        Cold => "cold",
        Permanent => "permanent",
    }
}

string_enum! {
    /// Whether the problem a fragment belongs to is settled.
    ResolutionStatus {
        Open => "open",
        Resolved => "resolved",
        Abandoned => "abandoned",
    }
}

string_enum! {
    /// How sure the agent is of a fragment.
    AssertionStatus {
        Observed => "observed",
        Inferred => "inferred",
        Verified => "verified",
        Rejected => "rejected",
    }
}

string_enum! {
    /// The emotional tone attached to a memory.
    Affect {
        Neutral => "neutral",
        Frustration => "frustration",
        Confidence => "confidence",
        Surprise => "surprise",
        Doubt => "doubt",
        Satisfaction => "satisfaction",
    }
}

string_enum! {
    /// Relations between fragments.
    RelationType {
        Related => "related",
        CausedBy => "caused_by",
        ResolvedBy => "resolved_by",
        PartOf => "part_of",
        Contradicts => "contradicts",
        SupersededBy => "superseded_by",
        CoRetrieved => "co_retrieved",
        Temporal => "temporal",
    }
}

impl RelationType {
    /// The relations agents may create with `link`; the others are made by
    /// mneme itself.
    pub const USER: &'static [RelationType] = &[
        RelationType::Related,
        RelationType::CausedBy,
        RelationType::ResolvedBy,
        RelationType::PartOf,
        RelationType::Contradicts,
    ];

    /// Directional relations, where a cycle would be a contradiction in
    /// terms (A caused B caused A).
    pub const fn is_directional(self) -> bool {
        matches!(
            self,
            RelationType::CausedBy
                | RelationType::ResolvedBy
                | RelationType::PartOf
                | RelationType::SupersededBy
        )
    }
}

impl FragmentType {
    /// Importance used when the caller gives none (LTM reference values).
    pub const fn default_importance(self) -> f32 {
        match self {
            FragmentType::Error => 0.9,
            FragmentType::Decision => 0.8,
            FragmentType::Procedure => 0.7,
            FragmentType::Preference => 0.95,
            FragmentType::Relation | FragmentType::Episode => 0.6,
            FragmentType::Fact => 0.5,
        }
    }

    /// Upper bound applied on insert so that agents cannot mark everything
    /// as critical (anchors are exempt).
    const fn importance_ceiling(self) -> f32 {
        match self {
            FragmentType::Error | FragmentType::Procedure => 0.6,
            FragmentType::Preference => 0.9,
            _ => 0.7,
        }
    }
}

/// Size limits for stored fragments (all configurable, see `docs/CONFIG.md`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FragmentLimits {
    /// Maximum characters of content for every type but `episode`.
    pub max_content_chars: usize,
    /// Maximum characters of content for `episode` fragments.
    pub max_episode_chars: usize,
    /// Content shorter than this (weighted length, CJK counting double) is
    /// rejected unless it has at least three words.
    pub min_content_weighted_len: usize,
    pub max_topic_chars: usize,
    pub max_keywords: usize,
    pub max_keyword_chars: usize,
    /// Keywords extracted automatically when the caller gives none.
    pub extracted_keywords: usize,
    pub max_idempotency_key_chars: usize,
    pub max_workspace_chars: usize,
    pub max_source_chars: usize,
    pub max_context_summary_chars: usize,
    /// Redact e-mail addresses and phone numbers as well as secrets.
    pub redact_pii: bool,
}

impl Default for FragmentLimits {
    fn default() -> Self {
        Self {
            max_content_chars: 300,
            max_episode_chars: 1000,
            min_content_weighted_len: 10,
            max_topic_chars: 200,
            max_keywords: 20,
            max_keyword_chars: 64,
            extracted_keywords: 5,
            max_idempotency_key_chars: 128,
            max_workspace_chars: 255,
            max_source_chars: 255,
            max_context_summary_chars: 1000,
            redact_pii: true,
        }
    }
}

/// A `remember` request as the caller sent it (already parsed from the wire).
#[derive(Debug, Clone, Default)]
pub struct RememberInput {
    pub content: String,
    pub topic: String,
    pub fragment_type: String,
    pub keywords: Vec<String>,
    pub importance: Option<f32>,
    pub is_anchor: bool,
    pub source: Option<String>,
    pub workspace: Option<String>,
    pub idempotency_key: Option<String>,
    pub context_summary: Option<String>,
    pub case_id: Option<String>,
    pub goal: Option<String>,
    pub outcome: Option<String>,
    pub phase: Option<String>,
    pub resolution_status: Option<String>,
    pub assertion_status: Option<String>,
    pub affect: Option<String>,
    /// When the remembered thing happened, if known.
    pub occurred_at: Option<DateTime<Utc>>,
}

/// Case metadata of a fragment (all optional).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CaseFields {
    pub case_id: Option<String>,
    pub goal: Option<String>,
    pub outcome: Option<String>,
    pub phase: Option<String>,
    pub resolution_status: Option<ResolutionStatus>,
}

/// Parses an optional enum argument, naming the argument in the error.
fn parse_optional<T: FromStr<Err = Error>>(
    field: &str,
    value: Option<String>,
) -> Result<Option<T>> {
    match non_empty(value) {
        None => Ok(None),
        Some(v) => v
            .parse()
            .map(Some)
            .map_err(|e: Error| Error::invalid_argument(format!("{field}: {}", e.message))),
    }
}

/// A validated fragment, ready to insert.
#[derive(Debug, Clone, PartialEq)]
pub struct PreparedFragment {
    pub content: String,
    /// SHA-256 (hex) of the stored content; unique per tenant and key.
    pub content_hash: String,
    pub topic: String,
    pub fragment_type: FragmentType,
    pub keywords: Vec<String>,
    pub importance: f32,
    pub ttl_tier: TtlTier,
    pub is_anchor: bool,
    pub source: Option<String>,
    pub workspace: Option<String>,
    pub idempotency_key: Option<String>,
    pub context_summary: Option<String>,
    pub case: CaseFields,
    pub assertion_status: AssertionStatus,
    pub affect: Affect,
    pub occurred_at: Option<DateTime<Utc>>,
    pub estimated_tokens: u32,
    /// `tsvector` literal of topic, keywords and content, each position
    /// labelled with its [`Field`](crate::text::Field).
    pub search_lexemes: String,
    /// How many secret or PII spans were redacted from the content.
    pub redactions: usize,
}

static URL_ONLY: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?i)^<?(https?|ftp)://\S+>?$").expect("valid regex"));

fn non_empty(value: Option<String>) -> Option<String> {
    value.map(|v| v.trim().to_owned()).filter(|v| !v.is_empty())
}

fn check_len(field: &str, value: &Option<String>, max: usize) -> Result<()> {
    match value {
        Some(v) if v.chars().count() > max => Err(Error::invalid_argument(format!(
            "{field} is longer than {max} characters"
        ))),
        _ => Ok(()),
    }
}

/// Validates and normalises a `remember` request.
///
/// Content over the limit is rejected, not truncated: a silently cut memory
/// loses exactly the detail that made it worth remembering, and the error
/// tells the agent how to split it.
pub fn prepare(
    input: RememberInput,
    limits: &FragmentLimits,
    tokenizer: &Tokenizer,
) -> Result<PreparedFragment> {
    let fragment_type: FragmentType = input.fragment_type.trim().parse()?;

    let raw_content = input.content.trim();
    if raw_content.is_empty() {
        return Err(Error::invalid_argument("content must not be empty"));
    }
    if URL_ONLY.is_match(raw_content) {
        return Err(Error::invalid_argument(
            "content is only a URL; store what the link is about, in a sentence",
        ));
    }
    let words = raw_content.split_whitespace().count();
    if weighted_len(raw_content) < limits.min_content_weighted_len && words < 3 {
        return Err(Error::invalid_argument(
            "content is too short to be a self-contained memory; write a full sentence",
        ));
    }
    let redacted = redact(raw_content, limits.redact_pii);
    let content = redacted.text;
    let max_chars = if fragment_type == FragmentType::Episode {
        limits.max_episode_chars
    } else {
        limits.max_content_chars
    };
    let length = content.chars().count();
    if length > max_chars {
        return Err(Error::invalid_argument(format!(
            "content has {length} characters; the limit for type `{fragment_type}` is {max_chars}. \
             Split it into atomic fragments (one fact each){}",
            if fragment_type == FragmentType::Episode {
                ""
            } else {
                ", or store a narrative as type `episode`"
            }
        )));
    }

    let topic = input.topic.trim().to_owned();
    if topic.is_empty() {
        return Err(Error::invalid_argument("topic must not be empty"));
    }
    check_len("topic", &Some(topic.clone()), limits.max_topic_chars)?;

    let source = non_empty(input.source);
    let workspace = non_empty(input.workspace);
    let idempotency_key = non_empty(input.idempotency_key);
    let context_summary = non_empty(input.context_summary);
    check_len("source", &source, limits.max_source_chars)?;
    check_len("workspace", &workspace, limits.max_workspace_chars)?;
    check_len(
        "idempotencyKey",
        &idempotency_key,
        limits.max_idempotency_key_chars,
    )?;
    check_len(
        "contextSummary",
        &context_summary,
        limits.max_context_summary_chars,
    )?;
    let case = CaseFields {
        case_id: non_empty(input.case_id),
        goal: non_empty(input.goal),
        outcome: non_empty(input.outcome),
        phase: non_empty(input.phase),
        resolution_status: parse_optional("resolutionStatus", input.resolution_status)?,
    };
    check_len("caseId", &case.case_id, limits.max_idempotency_key_chars)?;
    check_len("goal", &case.goal, limits.max_context_summary_chars)?;
    check_len("outcome", &case.outcome, limits.max_context_summary_chars)?;
    check_len("phase", &case.phase, 50)?;
    let assertion_status = parse_optional("assertionStatus", input.assertion_status)?
        .unwrap_or(AssertionStatus::Observed);
    let affect = parse_optional("affect", input.affect)?.unwrap_or(Affect::Neutral);

    let mut keywords: Vec<String> = Vec::new();
    for keyword in &input.keywords {
        let keyword = keyword.trim().to_lowercase();
        if keyword.is_empty() || keywords.contains(&keyword) {
            continue;
        }
        if keyword.chars().count() > limits.max_keyword_chars {
            return Err(Error::invalid_argument(format!(
                "keyword `{keyword}` is longer than {} characters",
                limits.max_keyword_chars
            )));
        }
        keywords.push(keyword);
        // Checked as they come: deduplicating a huge list first would be
        // quadratic (100,000 keywords kept a backend busy past its deadline).
        if keywords.len() > limits.max_keywords {
            return Err(Error::invalid_argument(format!(
                "at most {} keywords are allowed",
                limits.max_keywords
            )));
        }
    }
    if keywords.is_empty() {
        // A redaction mark is no word of the memory.
        keywords = tokenizer.extract_keywords(
            &crate::redact::without_marks(&content),
            limits.extracted_keywords,
        );
    }

    let requested = match input.importance {
        Some(v) if !(0.0..=1.0).contains(&v) || v.is_nan() => {
            return Err(Error::invalid_argument(
                "importance must be between 0 and 1",
            ));
        }
        Some(v) => v,
        None => fragment_type.default_importance(),
    };
    let importance = clamp_importance(requested, fragment_type, &content, input.is_anchor);
    let ttl_tier = infer_ttl_tier(fragment_type, requested, importance, input.is_anchor);

    let search_lexemes = tokenizer.search_document(&topic, &keywords, &content);
    Ok(PreparedFragment {
        content_hash: content_hash(&content),
        estimated_tokens: estimate_tokens(&content),
        search_lexemes,
        content,
        topic,
        fragment_type,
        keywords,
        importance,
        ttl_tier,
        is_anchor: input.is_anchor,
        source,
        workspace,
        idempotency_key,
        context_summary,
        case,
        assertion_status,
        affect,
        occurred_at: input.occurred_at,
        redactions: redacted.replaced,
    })
}

/// SHA-256 (lowercase hex) of stored content.
pub fn content_hash(content: &str) -> String {
    hex::encode(Sha256::digest(content.as_bytes()))
}

fn clamp_importance(
    requested: f32,
    fragment_type: FragmentType,
    content: &str,
    anchor: bool,
) -> f32 {
    if anchor {
        return requested;
    }
    let mut ceiling = fragment_type.importance_ceiling();
    if weighted_len(content) < 20 {
        ceiling = ceiling.min(0.2);
    }
    requested.min(ceiling)
}

/// The initial TTL tier. Like the reference, it looks at the importance the
/// caller *asked for* (before clamping), then demotes fragments whose
/// effective importance is low to `short`.
fn infer_ttl_tier(
    fragment_type: FragmentType,
    requested: f32,
    effective: f32,
    anchor: bool,
) -> TtlTier {
    let tier = if anchor || fragment_type == FragmentType::Preference || requested >= 0.8 {
        TtlTier::Permanent
    } else if matches!(fragment_type, FragmentType::Error | FragmentType::Procedure) {
        TtlTier::Hot
    } else if fragment_type == FragmentType::Episode || requested >= 0.5 {
        TtlTier::Warm
    } else {
        TtlTier::Cold
    };
    if !anchor && effective < 0.3 {
        TtlTier::Short
    } else {
        tier
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(content: &str, fragment_type: &str) -> RememberInput {
        RememberInput {
            content: content.into(),
            topic: "coffee".into(),
            fragment_type: fragment_type.into(),
            ..Default::default()
        }
    }

    fn prep(input: RememberInput) -> Result<PreparedFragment> {
        prepare(input, &FragmentLimits::default(), &Tokenizer::default())
    }

    #[test]
    fn defaults_are_clamped_per_type_and_tier_uses_requested_importance() {
        let f = prep(input(
            "The deploy failed because the disk was full.",
            "error",
        ))
        .unwrap();
        assert_eq!(f.importance, 0.6);
        assert_eq!(f.ttl_tier, TtlTier::Permanent);
        let f = prep(input(
            "The user prefers espresso over filter coffee.",
            "preference",
        ))
        .unwrap();
        assert_eq!(f.importance, 0.9);
        let f = prep(input(
            "Rust 1.95 is installed on the build machines.",
            "fact",
        ))
        .unwrap();
        assert_eq!((f.importance, f.ttl_tier), (0.5, TtlTier::Warm));
    }

    #[test]
    fn short_content_is_capped_and_short_lived() {
        let f = prep(input("uses vim daily", "fact")).unwrap();
        assert_eq!((f.importance, f.ttl_tier), (0.2, TtlTier::Short));
    }

    #[test]
    fn anchors_keep_their_importance_and_are_permanent() {
        let mut i = input("Never deploy on Fridays, team rule.", "decision");
        i.importance = Some(1.0);
        i.is_anchor = true;
        let f = prep(i).unwrap();
        assert_eq!((f.importance, f.ttl_tier), (1.0, TtlTier::Permanent));
    }

    #[test]
    fn invalid_input_gets_a_clear_error() {
        let err = |i| prep(i).unwrap_err().message;
        assert!(err(input("ok", "fact")).contains("too short"));
        assert!(err(input("https://example.com/a/b", "fact")).contains("only a URL"));
        assert!(
            err(input("A valid sentence about coffee.", "opinion"))
                .contains("unknown FragmentType")
        );
        assert!(err(input(&"long ".repeat(100), "fact")).contains("limit for type `fact` is 300"));
        assert!(prep(input(&"long ".repeat(100), "episode")).is_ok());
        let mut i = input("A valid sentence about coffee.", "fact");
        i.importance = Some(1.5);
        assert!(err(i).contains("between 0 and 1"));
    }

    #[test]
    fn case_fields_and_statuses_are_validated() {
        let mut i = input("The payment webhook failed with a 502.", "error");
        i.case_id = Some(" case-7 ".into());
        i.resolution_status = Some("open".into());
        i.affect = Some("frustration".into());
        let f = prep(i).unwrap();
        assert_eq!(f.case.case_id.as_deref(), Some("case-7"));
        assert_eq!(f.case.resolution_status, Some(ResolutionStatus::Open));
        assert_eq!(
            (f.affect, f.assertion_status),
            (Affect::Frustration, AssertionStatus::Observed)
        );
        let mut bad = input("The payment webhook failed with a 502.", "error");
        bad.affect = Some("anger".into());
        assert!(
            prep(bad)
                .unwrap_err()
                .message
                .starts_with("affect: unknown Affect")
        );
    }

    #[test]
    fn korean_short_sentences_are_long_enough() {
        assert!(prep(input("커피를 좋아한다", "preference")).is_ok());
    }

    #[test]
    fn secrets_are_redacted_before_hashing() {
        let f = prep(input(
            "The staging password=hunter22 was rotated today.",
            "fact",
        ))
        .unwrap();
        assert_eq!(
            f.content,
            "The staging password=[REDACTED] was rotated today."
        );
        assert_eq!(f.redactions, 1);
        assert_eq!(f.content_hash, content_hash(&f.content));
        assert!(
            !f.keywords.contains(&"redacted".to_owned()),
            "a redaction mark is no keyword: {:?}",
            f.keywords
        );
    }

    #[test]
    fn keywords_are_normalised_or_extracted() {
        let mut i = input("Postgres vacuum runs nightly at two.", "procedure");
        i.keywords = vec![" Postgres ".into(), "postgres".into(), "VACUUM".into()];
        assert_eq!(prep(i).unwrap().keywords, vec!["postgres", "vacuum"]);
        let f = prep(input(
            "Postgres vacuum runs nightly; postgres is slow then.",
            "fact",
        ))
        .unwrap();
        assert_eq!(f.keywords[0], "postgres");
    }
}
