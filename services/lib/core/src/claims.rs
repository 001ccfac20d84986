//! Claims: what a fragment asserts, as (subject, predicate, object,
//! polarity) with a confidence, extracted by rules from English and Korean
//! text. The symbolic layer stores them and compares the claims of a new
//! fragment with stored ones: the same subject, predicate and object with
//! opposite polarity is a contradiction worth telling the agent about.
//!
//! The rules are deliberately shallow (no parser, no model): they find the
//! verb of a simple clause, take what precedes it as the subject and what
//! follows it as the object, and decide the polarity from markers. Words are
//! normalised (lowercased, English words stemmed, Korean particles and verb
//! endings stripped) so that `uses` and `does not use`, or `사용한다` and
//! `사용하지 않는다`, meet on the same predicate.
//!
//! Polarity follows the reference's priority: *uncertain* over *negative*
//! over *positive* — a hedged negation is uncertain, a negation wins over
//! any positive marker. Rule-based confidence stays within 0.5–0.8, and
//! within 0.4–0.5 for uncertain claims, so a later model-based extractor can
//! outrank it.

use std::fmt;
use std::str::FromStr;

use rust_stemmers::{Algorithm, Stemmer};
use unicode_normalization::UnicodeNormalization;

/// The extractor name stored with rule-based claims.
pub const RULE_EXTRACTOR: &str = "rule";
/// Claims kept per fragment; fragments are short, so more means noise.
pub const MAX_CLAIMS: usize = 8;
/// Words kept of a subject or an object.
const MAX_PHRASE_WORDS: usize = 4;
/// Characters kept of a subject, predicate or object (a "word" may be a
/// long identifier).
pub const MAX_FIELD_CHARS: usize = 100;

/// Whether a claim asserts, denies or hedges.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Polarity {
    Positive,
    Negative,
    Uncertain,
}

impl Polarity {
    pub const fn as_str(self) -> &'static str {
        match self {
            Polarity::Positive => "positive",
            Polarity::Negative => "negative",
            Polarity::Uncertain => "uncertain",
        }
    }

    /// The polarity that contradicts this one; uncertain claims contradict
    /// nothing.
    pub const fn opposite(self) -> Option<Polarity> {
        match self {
            Polarity::Positive => Some(Polarity::Negative),
            Polarity::Negative => Some(Polarity::Positive),
            Polarity::Uncertain => None,
        }
    }
}

impl fmt::Display for Polarity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Polarity {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "positive" => Ok(Polarity::Positive),
            "negative" => Ok(Polarity::Negative),
            "uncertain" => Ok(Polarity::Uncertain),
            other => Err(format!(
                "unknown polarity `{other}` (expected positive, negative or uncertain)"
            )),
        }
    }
}

/// One claim. `object` is empty when the clause has none.
#[derive(Debug, Clone, PartialEq)]
pub struct Claim {
    pub subject: String,
    pub predicate: String,
    pub object: String,
    pub polarity: Polarity,
    pub confidence: f32,
}

impl Claim {
    /// Whether `other` says the opposite about the same thing.
    pub fn contradicts(&self, other: &Claim) -> bool {
        self.subject == other.subject
            && self.predicate == other.predicate
            && self.object == other.object
            && self.polarity.opposite() == Some(other.polarity)
    }

    /// `subject predicate object`, for messages.
    pub fn statement(&self) -> String {
        let mut out = format!("{} {}", self.subject, self.predicate);
        if !self.object.is_empty() {
            out.push(' ');
            out.push_str(&self.object);
        }
        out
    }
}

/// How serious a set of contradictions is, by count (reference: one is
/// low, two or three medium, four or more high).
pub fn conflict_severity(conflicts: usize) -> &'static str {
    match conflicts {
        0 | 1 => "low",
        2 | 3 => "medium",
        _ => "high",
    }
}

/// The claims of `content`, at most [`MAX_CLAIMS`], without duplicates.
pub fn extract(content: &str) -> Vec<Claim> {
    let stemmer = Stemmer::create(Algorithm::English);
    let text: String = content.nfkc().collect::<String>().replace(['’', '‘'], "'");
    let mut claims: Vec<Claim> = Vec::new();
    for clause in clauses(&text) {
        let claim = if clause.chars().any(is_hangul) {
            korean_claim(clause)
        } else {
            english_claim(clause, &stemmer)
        };
        let claim = claim.map(|mut claim| {
            for field in [&mut claim.subject, &mut claim.predicate, &mut claim.object] {
                if field.chars().count() > MAX_FIELD_CHARS {
                    *field = field.chars().take(MAX_FIELD_CHARS).collect();
                }
            }
            claim
        });
        if let Some(claim) = claim
            && !claims.iter().any(|c| {
                c.subject == claim.subject
                    && c.predicate == claim.predicate
                    && c.object == claim.object
            })
        {
            claims.push(claim);
            if claims.len() == MAX_CLAIMS {
                break;
            }
        }
    }
    claims
}

fn is_hangul(c: char) -> bool {
    matches!(c as u32, 0xAC00..=0xD7A3)
}

/// Clauses: sentences split further at commas and semicolons. A dot ends a
/// sentence only before whitespace or the end, so `v1.2` and `e.g` survive.
fn clauses(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        let next_is_space = chars.peek().is_none_or(|(_, n)| n.is_whitespace());
        let ends = match c {
            '!' | '?' | ';' | ',' | '\n' | '。' | '·' => true,
            '.' => next_is_space,
            _ => false,
        };
        if ends {
            out.push(&text[start..i]);
            start = i + c.len_utf8();
        }
    }
    out.push(&text[start..]);
    out.into_iter()
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect()
}

fn confidence(polarity: Polarity, has_object: bool, anchored: bool) -> f32 {
    match polarity {
        Polarity::Uncertain => {
            if has_object {
                0.5
            } else {
                0.4
            }
        }
        _ => {
            let mut value: f32 = 0.6;
            if has_object {
                value += 0.1;
            }
            if anchored {
                value += 0.1;
            }
            value.min(0.8)
        }
    }
}

// ---------------------------------------------------------------- English

const DETERMINERS: &[&str] = &[
    "the", "a", "an", "this", "that", "these", "those", "our", "my", "your", "their", "its", "his",
    "her", "some", "any",
];
/// Discourse words that open a clause without being part of its subject.
const OPENERS: &[&str] = &[
    "however",
    "also",
    "now",
    "actually",
    "currently",
    "today",
    "still",
    "and",
    "but",
    "so",
    "then",
    "yet",
    "anymore",
];
const COPULAS: &[&str] = &["is", "are", "was", "were", "am", "be", "been", "being"];
const DO_FORMS: &[&str] = &["do", "does", "did"];
const HAVE_FORMS: &[&str] = &["has", "have", "had"];
const MODALS: &[&str] = &[
    "can", "could", "will", "would", "should", "must", "shall", "may", "might",
];
/// Modal verbs that hedge a statement.
const HEDGING_MODALS: &[&str] = &["may", "might", "could"];
const HEDGES: &[&str] = &[
    "maybe",
    "perhaps",
    "probably",
    "possibly",
    "likely",
    "unlikely",
    "seems",
    "seem",
    "apparently",
    "unclear",
    "unsure",
    "guess",
];
/// Common verbs recognised without an auxiliary (matched by stem).
const VERBS: &[&str] = &[
    "use",
    "support",
    "requir",
    "prefer",
    "like",
    "love",
    "hate",
    "need",
    "want",
    "run",
    "work",
    "depend",
    "contain",
    "includ",
    "allow",
    "enabl",
    "disabl",
    "handl",
    "store",
    "cach",
    "call",
    "return",
    "accept",
    "send",
    "receiv",
    "own",
    "know",
    "drink",
    "eat",
    "live",
    "speak",
    "read",
    "write",
    "deploy",
    "build",
    "test",
    "block",
    "break",
    "fail",
    "pass",
    "expir",
    "retri",
    "encrypt",
    "log",
    "track",
    "follow",
    "trust",
    "recommend",
    "approv",
    "reject",
    "belong",
    "exist",
    "mean",
    "avoid",
    "prevent",
    "replac",
    "ship",
    "host",
    "serv",
    "target",
    "compil",
    "scale",
    "match",
    "save",
    "keep",
    "hold",
    "provid",
    "respect",
    "honor",
    "expos",
    "persist",
    "mount",
    "migrat",
    "leak",
    "crash",
    "timeout",
];
/// Words that end an object phrase: what follows is another clause.
const CLAUSE_BREAKS: &[&str] = &[
    "because", "since", "but", "although", "though", "while", "which", "who", "when", "if",
    "unless", "until", "so", "and", "or", "whereas",
];

/// A word of a clause, with contractions already expanded (`don't` → `do`
/// `not`).
fn english_words(clause: &str) -> Vec<String> {
    let mut words = Vec::new();
    for raw in clause.split_whitespace() {
        let word: String = raw
            .trim_matches(|c: char| !(c.is_alphanumeric() || c == '\'' || c == '-'))
            .trim_matches('\'')
            .to_lowercase();
        if word.is_empty() {
            continue;
        }
        if word == "cannot" {
            words.push("can".to_owned());
            words.push("not".to_owned());
        } else if let Some(base) = word.strip_suffix("n't") {
            let base = match base {
                "wo" => "will",
                "ca" => "can",
                "ai" => "is",
                "sha" => "shall",
                other => other,
            };
            words.push(base.to_owned());
            words.push("not".to_owned());
        } else {
            words.push(word);
        }
    }
    words
}

/// How many words at `i` form a negation: `not`, `never`, `no longer`,
/// `no` (before a noun: `has no tests`).
fn negation_at(words: &[String], i: usize) -> usize {
    match words.get(i).map(String::as_str) {
        Some("not" | "never" | "neither" | "nor") => 1,
        Some("no") if words.get(i + 1).is_some_and(|w| w == "longer") => 2,
        Some("no") => 1,
        _ => 0,
    }
}

fn is_verb(word: &str, stemmer: &Stemmer) -> bool {
    let stem = stemmer.stem(word);
    VERBS.contains(&stem.as_ref()) || (word.len() > 4 && word.ends_with("ed"))
}

/// A phrase normalised for comparison: determiners dropped, words stemmed,
/// at most [`MAX_PHRASE_WORDS`] words (the last ones of a subject, the first
/// ones of an object).
fn english_phrase(words: &[String], stemmer: &Stemmer, keep_last: bool) -> String {
    let kept: Vec<String> = words
        .iter()
        .filter(|w| !DETERMINERS.contains(&w.as_str()) && !OPENERS.contains(&w.as_str()))
        .map(|w| stemmer.stem(w).into_owned())
        .collect();
    let range = if keep_last {
        kept.len().saturating_sub(MAX_PHRASE_WORDS)..kept.len()
    } else {
        0..kept.len().min(MAX_PHRASE_WORDS)
    };
    kept[range].join(" ")
}

fn english_claim(clause: &str, stemmer: &Stemmer) -> Option<Claim> {
    let words = english_words(clause);
    let hedged = words.iter().any(|w| HEDGES.contains(&w.as_str()))
        || clause.to_lowercase().contains("i think")
        || clause.to_lowercase().contains("not sure");

    // The anchor: the first auxiliary, copula, negation or known verb after
    // a non-empty subject (`The deprecated endpoint returns 404`: not
    // `deprecated`, whose subject would be only `the`).
    let anchor = (1..words.len()).find(|&i| {
        let w = words[i].as_str();
        (COPULAS.contains(&w)
            || DO_FORMS.contains(&w)
            || HAVE_FORMS.contains(&w)
            || MODALS.contains(&w)
            || negation_at(&words, i) > 0
            || is_verb(w, stemmer))
            && !english_phrase(&words[..i], stemmer, true).is_empty()
    })?;
    let subject = english_phrase(&words[..anchor], stemmer, true);

    let mut negated = false;
    let mut hedged = hedged;
    let mut i = anchor;
    let anchor_word = words[i].as_str();
    let predicate: String;
    if negation_at(&words, i) > 0 {
        // `X never drinks coffee`, `X no longer uses Y`.
        negated = true;
        i += negation_at(&words, i);
        let verb = words.get(i)?;
        predicate = stemmer.stem(verb).into_owned();
        i += 1;
    } else if COPULAS.contains(&anchor_word) {
        i += 1;
        if negation_at(&words, i) > 0 {
            negated = true;
            i += negation_at(&words, i);
        }
        predicate = "be".to_owned();
    } else if DO_FORMS.contains(&anchor_word) || MODALS.contains(&anchor_word) {
        hedged |= HEDGING_MODALS.contains(&anchor_word);
        i += 1;
        if negation_at(&words, i) > 0 {
            negated = true;
            i += negation_at(&words, i);
        }
        // `does not support X` → support; a bare `does` → do.
        match words.get(i) {
            Some(verb) if !CLAUSE_BREAKS.contains(&verb.as_str()) => {
                predicate = stemmer.stem(verb).into_owned();
                i += 1;
            }
            _ => predicate = stemmer.stem(anchor_word).into_owned(),
        }
    } else if HAVE_FORMS.contains(&anchor_word) {
        i += 1;
        if negation_at(&words, i) > 0 {
            negated = true;
            i += negation_at(&words, i);
        }
        // `has been deprecated`, `has migrated` → the participle; `has
        // tests` → have.
        match words.get(i) {
            Some(w) if w == "been" => {
                predicate = "be".to_owned();
                i += 1;
            }
            Some(w) if w.len() > 4 && w.ends_with("ed") => {
                predicate = stemmer.stem(w).into_owned();
                i += 1;
            }
            _ => predicate = "have".to_owned(),
        }
    } else {
        predicate = stemmer.stem(anchor_word).into_owned();
        i += 1;
        // `requires no login`.
        if negation_at(&words, i) > 0 {
            negated = true;
            i += negation_at(&words, i);
        }
    }

    let rest = words.get(i..).unwrap_or_default();
    let end = rest
        .iter()
        .position(|w| CLAUSE_BREAKS.contains(&w.as_str()))
        .unwrap_or(rest.len());
    let object_words: Vec<String> = rest[..end]
        .iter()
        .filter(|w| !matches!(w.as_str(), "anymore" | "longer" | "any" | "ever"))
        .cloned()
        .collect();
    let object = english_phrase(&object_words, stemmer, false);

    let polarity = if hedged {
        Polarity::Uncertain
    } else if negated {
        Polarity::Negative
    } else {
        Polarity::Positive
    };
    Some(Claim {
        confidence: confidence(polarity, !object.is_empty(), true),
        subject,
        predicate,
        object,
        polarity,
    })
}

// ----------------------------------------------------------------- Korean

/// Particles stripped from the subject (topic and subject markers).
const KO_SUBJECT_PARTICLES: &[&str] = &["께서는", "께서", "에서는", "은", "는", "이", "가"];
/// Particles stripped from object and complement words, longest first.
const KO_OBJECT_PARTICLES: &[&str] = &[
    "에서는",
    "으로는",
    "에서",
    "으로",
    "에게",
    "한테",
    "부터",
    "까지",
    "처럼",
    "보다",
    "을",
    "를",
    "이",
    "가",
    "에",
    "로",
    "와",
    "과",
    "도",
    "만",
    "의",
    "은",
    "는",
];
/// Determiners standing alone before a noun (`이 서비스는`).
const KO_DETERMINERS: &[&str] = &["이", "그", "저", "해당", "우리의"];
const KO_HEDGES: &[&str] = &[
    "아마",
    "아마도",
    "어쩌면",
    "듯",
    "듯하다",
    "모르겠다",
    "같다",
];
/// Verb endings, longest first; what remains is the stem.
const KO_ENDINGS: &[&str] = &[
    "했습니다",
    "하였다",
    "합니다",
    "했어요",
    "했다",
    "한다",
    "하다",
    "해요",
    "하지",
    "하는",
    "하고",
    "되지",
    "된다",
    "됩니다",
    "되다",
    "습니다",
    "니다",
    "는다",
    "었다",
    "았다",
    "어요",
    "아요",
    "함",
    "해",
    "한",
    "지",
    "다",
    "요",
    "음",
];
/// Copula forms after a noun (`저장소이다`, `저장소입니다`).
const KO_COPULAS: &[&str] = &["이었다", "이에요", "입니다", "이다", "였다", "예요"];

/// Strips the first of `particles` that leaves something behind.
fn strip_particle<'a>(word: &'a str, particles: &[&str]) -> &'a str {
    for particle in particles {
        if let Some(stem) = word.strip_suffix(particle)
            && !stem.is_empty()
        {
            return stem;
        }
    }
    word
}

/// Removes a final ㄴ or ㅂ batchim left by `-ㄴ다` / `-ㅂ니다`
/// (`마신` → `마시`, `마십` → `마시`).
fn drop_tense_batchim(stem: &str) -> String {
    let mut chars: Vec<char> = stem.chars().collect();
    if chars.len() > 1
        && let Some(last) = chars.pop()
    {
        let batchim = if is_hangul(last) {
            (last as u32 - 0xAC00) % 28
        } else {
            0
        };
        // 4 = ㄴ, 17 = ㅂ
        let plain = match batchim {
            4 | 17 => char::from_u32(last as u32 - batchim).unwrap_or(last),
            _ => last,
        };
        chars.push(plain);
    }
    chars.into_iter().collect()
}

fn korean_verb_stem(word: &str) -> String {
    for ending in KO_ENDINGS {
        if let Some(stem) = word.strip_suffix(ending)
            && !stem.is_empty()
        {
            return drop_tense_batchim(stem);
        }
    }
    word.to_owned()
}

/// What the last word(s) of a Korean clause say about the verb.
enum KoreanEnd {
    /// `없다`: the negation of `있다`.
    Absent,
    /// `있다`.
    Present,
    /// `아니다`: the negated copula; the complement precedes it.
    NotCopula,
    /// `저장소이다`: the copula on a noun (the noun is part of the object).
    Copula(String),
    /// An ordinary verb stem, negated or not.
    Verb { stem: String, negated: bool },
}

fn is_negative_auxiliary(word: &str) -> bool {
    word.starts_with('않') || (word.starts_with('못') && word.chars().count() > 1)
}

fn korean_claim(clause: &str) -> Option<Claim> {
    let lowered = clause.to_lowercase();
    let mut words: Vec<String> = Vec::new();
    for raw in lowered.split_whitespace() {
        let word: String = raw
            .trim_matches(|c: char| !(c.is_alphanumeric() || c == '-'))
            .to_owned();
        if word.is_empty() {
            continue;
        }
        // `사용하지않는다` written without a space: split off the auxiliary.
        if let Some(at) = word.find("지않").or_else(|| word.find("지못")) {
            let split = at + "지".len();
            words.push(word[..split].to_owned());
            words.push(word[split..].to_owned());
        } else {
            words.push(word);
        }
    }
    let hedged = words.iter().any(|w| KO_HEDGES.contains(&w.as_str()))
        || lowered.contains("것 같")
        || lowered.contains("수도 있");

    // The subject: words up to the first one carrying a topic or subject
    // particle.
    let subject_end = words.iter().position(|w| {
        KO_SUBJECT_PARTICLES
            .iter()
            .any(|p| w.len() > p.len() && w.ends_with(p))
    })?;
    let mut subject_words: Vec<String> = words[..subject_end]
        .iter()
        .filter(|w| !KO_DETERMINERS.contains(&w.as_str()))
        .cloned()
        .collect();
    subject_words.push(strip_particle(&words[subject_end], KO_SUBJECT_PARTICLES).to_owned());
    let subject_start = subject_words.len().saturating_sub(MAX_PHRASE_WORDS);
    let subject = subject_words[subject_start..].join(" ");

    let mut body: Vec<String> = words[subject_end + 1..].to_vec();
    if body.is_empty() {
        return None;
    }
    let mut negated = false;
    // A trailing negative auxiliary (`않는다`, `못한다`) negates the verb
    // before it.
    if body.len() >= 2 && body.last().is_some_and(|w| is_negative_auxiliary(w)) {
        body.pop();
        negated = true;
    }
    let last = body.pop()?;
    let end = if last.starts_with('없') {
        KoreanEnd::Absent
    } else if last.starts_with('있') {
        KoreanEnd::Present
    } else if last.starts_with("아니") || last.starts_with("아닙") || last.starts_with("아님")
    {
        KoreanEnd::NotCopula
    } else if let Some(noun) = KO_COPULAS
        .iter()
        .find_map(|c| last.strip_suffix(c).filter(|n| !n.is_empty()))
    {
        KoreanEnd::Copula(noun.to_owned())
    } else {
        KoreanEnd::Verb {
            stem: korean_verb_stem(&last),
            negated: negated || last.contains('않'),
        }
    };
    // Preverbal `안` and `못` negate the verb they precede.
    if body
        .last()
        .is_some_and(|w| matches!(w.as_str(), "안" | "못"))
    {
        body.pop();
        negated = true;
    }
    let (predicate, mut object_words, negated) = match end {
        KoreanEnd::Absent => ("있".to_owned(), body, !negated),
        KoreanEnd::Present => ("있".to_owned(), body, negated),
        KoreanEnd::NotCopula => ("이다".to_owned(), body, true),
        KoreanEnd::Copula(noun) => {
            let mut words = body;
            words.push(noun);
            ("이다".to_owned(), words, negated)
        }
        KoreanEnd::Verb { stem, negated: n } => (stem, body, negated || n),
    };
    if predicate.is_empty() {
        return None;
    }
    object_words.truncate(MAX_PHRASE_WORDS);
    let object = object_words
        .iter()
        .map(|w| strip_particle(w, KO_OBJECT_PARTICLES))
        .filter(|w| !w.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    let polarity = if hedged {
        Polarity::Uncertain
    } else if negated {
        Polarity::Negative
    } else {
        Polarity::Positive
    };
    Some(Claim {
        confidence: confidence(polarity, !object.is_empty(), true),
        subject,
        predicate,
        object,
        polarity,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(content: &str) -> Claim {
        let claims = extract(content);
        assert_eq!(claims.len(), 1, "{content}: {claims:?}");
        claims.into_iter().next().unwrap()
    }

    fn spo(claim: &Claim) -> (&str, &str, &str, Polarity) {
        (
            claim.subject.as_str(),
            claim.predicate.as_str(),
            claim.object.as_str(),
            claim.polarity,
        )
    }

    #[test]
    fn english_verbs_with_and_without_auxiliaries_meet_on_one_predicate() {
        let positive = one("The billing service uses Redis for sessions.");
        let negative = one("The billing service does not use Redis for sessions.");
        assert_eq!(
            spo(&positive),
            ("bill servic", "use", "redi for session", Polarity::Positive)
        );
        assert_eq!(negative.polarity, Polarity::Negative);
        assert!(negative.contradicts(&positive) && positive.contradicts(&negative));
    }

    #[test]
    fn english_negations_are_recognised() {
        for sentence in [
            "Alice never drinks coffee",
            "Alice doesn't drink coffee",
            "Alice does not drink coffee anymore",
            "Alice no longer drinks coffee",
            "Alice can't drink coffee",
            "Alice cannot drink coffee",
        ] {
            assert_eq!(
                spo(&one(sentence)),
                ("alic", "drink", "coffe", Polarity::Negative),
                "{sentence}"
            );
        }
        assert_eq!(
            spo(&one("Alice drinks coffee")),
            ("alic", "drink", "coffe", Polarity::Positive)
        );
    }

    #[test]
    fn copulas_and_have_carry_the_predicate() {
        let is = one("Postgres is the primary store");
        let is_not = one("Postgres isn't the primary store");
        assert_eq!(
            spo(&is),
            ("postgr", "be", "primari store", Polarity::Positive)
        );
        assert!(is_not.contradicts(&is));
        let has_no = one("The API has no pagination");
        let has = one("The API has pagination");
        assert_eq!(spo(&has_no), ("api", "have", "pagin", Polarity::Negative));
        assert!(has.contradicts(&has_no));
    }

    #[test]
    fn hedges_make_claims_uncertain_even_when_negated() {
        let maybe = one("The cache probably does not expire keys");
        assert_eq!(maybe.polarity, Polarity::Uncertain);
        assert!((0.4..=0.5).contains(&maybe.confidence));
        assert_eq!(
            one("Deploys might fail on Fridays").polarity,
            Polarity::Uncertain
        );
        let sure = one("Deploys fail on Fridays");
        assert!((0.5..=0.8).contains(&sure.confidence));
        assert!(!maybe.contradicts(&sure));
    }

    #[test]
    fn an_object_ends_at_the_next_clause() {
        let claim = one("The team prefers tabs because reviews are easier");
        assert_eq!(spo(&claim), ("team", "prefer", "tab", Polarity::Positive));
    }

    #[test]
    fn korean_negations_are_recognised() {
        let positive = one("이 서비스는 Redis를 사용한다");
        assert_eq!(
            spo(&positive),
            ("서비스", "사용", "redis", Polarity::Positive)
        );
        for sentence in [
            "이 서비스는 Redis를 사용하지 않는다",
            "이 서비스는 Redis를 사용하지않습니다",
            "이 서비스는 Redis를 안 사용한다",
            "이 서비스는 Redis를 사용하지 못한다",
        ] {
            let negative = one(sentence);
            assert_eq!(
                spo(&negative),
                ("서비스", "사용", "redis", Polarity::Negative),
                "{sentence}"
            );
            assert!(negative.contradicts(&positive));
        }
    }

    #[test]
    fn korean_verb_endings_are_stripped() {
        let drinks = one("민수는 커피를 마신다");
        let not_drinks = one("민수는 커피를 못 마십니다");
        assert_eq!(spo(&drinks), ("민수", "마시", "커피", Polarity::Positive));
        assert_eq!(
            spo(&not_drinks),
            ("민수", "마시", "커피", Polarity::Negative)
        );
    }

    #[test]
    fn korean_existence_and_copula() {
        let absent = one("결제 API는 페이지네이션이 없다");
        let present = one("결제 API는 페이지네이션이 있습니다");
        assert_eq!(
            spo(&absent),
            ("결제 api", "있", "페이지네이션", Polarity::Negative)
        );
        assert!(present.contradicts(&absent));
        let not_primary = one("Redis는 기본 저장소가 아니다");
        let primary = one("Redis는 기본 저장소이다");
        assert_eq!(
            spo(&not_primary),
            ("redis", "이다", "기본 저장소", Polarity::Negative)
        );
        assert!(primary.contradicts(&not_primary));
    }

    #[test]
    fn korean_hedges_make_claims_uncertain() {
        let claim = one("이 서비스는 아마 Redis를 사용하지 않는다");
        assert_eq!(claim.polarity, Polarity::Uncertain);
    }

    #[test]
    fn several_clauses_give_several_claims_and_noise_gives_none() {
        let claims = extract("Redis is fast, but Redis is not durable. We deploy on Mondays!");
        let statements: Vec<(String, Polarity)> =
            claims.iter().map(|c| (c.statement(), c.polarity)).collect();
        assert_eq!(
            statements,
            vec![
                ("redi be fast".to_owned(), Polarity::Positive),
                ("redi be durabl".to_owned(), Polarity::Negative),
                ("we deploy on monday".to_owned(), Polarity::Positive),
            ]
        );
        assert!(extract("").is_empty());
        assert!(extract("https://example.com").is_empty());
        assert!(extract("ok").is_empty());
        assert!(extract(&"Alice likes tea. ".repeat(20)).len() == 1);
    }

    #[test]
    fn severity_grows_with_the_number_of_conflicts() {
        assert_eq!(conflict_severity(1), "low");
        assert_eq!(conflict_severity(3), "medium");
        assert_eq!(conflict_severity(4), "high");
    }

    #[test]
    fn polarity_round_trips() {
        for p in [Polarity::Positive, Polarity::Negative, Polarity::Uncertain] {
            assert_eq!(p.as_str().parse::<Polarity>(), Ok(p));
        }
        assert!("maybe".parse::<Polarity>().is_err());
    }
}
