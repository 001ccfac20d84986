//! Text normalisation for full-text search and keyword extraction.
//!
//! PostgreSQL's text-search parsers split Korean into whole eojeol (word plus
//! particle: `에스프레소를`), so `에스프레소` would never match, and their
//! behaviour depends on the cluster's locale. mneme therefore tokenises in
//! Rust, identically for stored fragments and for queries, and hands
//! PostgreSQL finished lexemes as `tsvector`/`tsquery` literals: no parser,
//! dictionary or locale is involved on the database side.
//!
//! The tokens:
//! - **Latin-script and digit words**: lowercased (after NFKC), English stop
//!   words dropped, ASCII words stemmed with the Snowball English stemmer.
//! - **Hangul words**: a trailing particle (조사) is stripped when at least
//!   two syllables remain, then the stem is indexed whole *and* as syllable
//!   bigrams, so `에스프레소를` matches `에스프레소` and partial compounds.
//! - **Han and Kana runs**: character bigrams (unigram for a single char).
//!
//! A morphological analyser can replace the Hangul rules later without any
//! schema change: only the lexemes change.

use std::collections::{BTreeMap, HashMap};

use rust_stemmers::{Algorithm, Stemmer};
use unicode_normalization::UnicodeNormalization;

/// The version of the search-document rules (`fragments.search_version`):
/// raise it, with a migration moving the column default and the stale
/// documents' index, whenever a change to the tokeniser or to
/// [`Tokenizer::search_document`] changes stored documents; the
/// consolidator's `search_reindex` stage then rewrites older ones.
pub const SEARCH_DOCUMENT_VERSION: i16 = 2;

/// PostgreSQL's limit on a lexeme position.
const MAX_TSVECTOR_POSITION: usize = 16_383;
/// PostgreSQL keeps at most 256 positions per lexeme.
const MAX_POSITIONS_PER_LEXEME: usize = 256;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CharClass {
    Word,
    Hangul,
    Cjk,
    Separator,
}

fn classify(c: char) -> CharClass {
    match c as u32 {
        // Hangul syllables, Jamo and compatibility Jamo.
        0xAC00..=0xD7A3 | 0x1100..=0x11FF | 0x3130..=0x318F => CharClass::Hangul,
        // CJK ideographs (incl. extension A and compatibility), Hiragana, Katakana.
        0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xF900..=0xFAFF | 0x3040..=0x30FF => CharClass::Cjk,
        _ if c.is_alphanumeric() => CharClass::Word,
        _ => CharClass::Separator,
    }
}

/// A maximal run of characters of one class, lowercased.
#[derive(Debug)]
struct Run {
    class: CharClass,
    text: String,
}

fn runs(input: &str) -> Vec<Run> {
    let mut runs: Vec<Run> = Vec::new();
    for c in input.nfkc().flat_map(char::to_lowercase) {
        let class = classify(c);
        if class == CharClass::Separator {
            // Keep apostrophes inside words out of the way: "don't" → "don", "t".
            if let Some(last) = runs.last_mut()
                && last.class != CharClass::Separator
            {
                runs.push(Run {
                    class: CharClass::Separator,
                    text: String::new(),
                });
            }
            continue;
        }
        match runs.last_mut() {
            Some(last) if last.class == class => last.text.push(c),
            _ => runs.push(Run {
                class,
                text: c.to_string(),
            }),
        }
    }
    runs.retain(|r| r.class != CharClass::Separator);
    runs
}

/// Korean particles, longest first so that `에서는` wins over `는`.
const HANGUL_PARTICLES: &[&str] = &[
    "에서부터",
    "으로부터",
    "에게서",
    "한테서",
    "이라고",
    "에서는",
    "에서도",
    "으로는",
    "으로도",
    "에게는",
    "이라는",
    "에게",
    "한테",
    "께서",
    "에서",
    "으로",
    "부터",
    "까지",
    "처럼",
    "보다",
    "라고",
    "이랑",
    "하고",
    "이나",
    "라는",
    "은",
    "는",
    "이",
    "가",
    "을",
    "를",
    "에",
    "의",
    "도",
    "만",
    "와",
    "과",
    "로",
    "랑",
];

/// Strips one trailing particle when at least two syllables remain.
fn hangul_stem(word: &str) -> &str {
    for particle in HANGUL_PARTICLES {
        if let Some(stem) = word.strip_suffix(particle)
            && stem.chars().count() >= 2
        {
            return stem;
        }
    }
    word
}

fn bigrams(text: &str) -> impl Iterator<Item = String> + '_ {
    let chars: Vec<char> = text.chars().collect();
    let single = (chars.len() == 1).then(|| chars[0].to_string());
    let pairs: Vec<String> = chars.windows(2).map(|w| w.iter().collect()).collect();
    single.into_iter().chain(pairs)
}

/// Common English words that carry no retrieval signal.
const ENGLISH_STOP_WORDS: &[&str] = &[
    "a",
    "about",
    "above",
    "after",
    "again",
    "against",
    "all",
    "am",
    "an",
    "and",
    "any",
    "are",
    "as",
    "at",
    "be",
    "because",
    "been",
    "before",
    "being",
    "below",
    "between",
    "both",
    "but",
    "by",
    "can",
    "could",
    "did",
    "do",
    "does",
    "doing",
    "down",
    "during",
    "each",
    "few",
    "for",
    "from",
    "further",
    "had",
    "has",
    "have",
    "having",
    "he",
    "her",
    "here",
    "hers",
    "herself",
    "him",
    "himself",
    "his",
    "how",
    "i",
    "if",
    "in",
    "into",
    "is",
    "it",
    "its",
    "itself",
    "just",
    "me",
    "more",
    "most",
    "my",
    "myself",
    "no",
    "nor",
    "not",
    "now",
    "of",
    "off",
    "on",
    "once",
    "only",
    "or",
    "other",
    "our",
    "ours",
    "ourselves",
    "out",
    "over",
    "own",
    "same",
    "she",
    "should",
    "so",
    "some",
    "such",
    "than",
    "that",
    "the",
    "their",
    "theirs",
    "them",
    "themselves",
    "then",
    "there",
    "these",
    "they",
    "this",
    "those",
    "through",
    "to",
    "too",
    "under",
    "until",
    "up",
    "very",
    "was",
    "we",
    "were",
    "what",
    "when",
    "where",
    "which",
    "while",
    "who",
    "whom",
    "why",
    "will",
    "with",
    "would",
    "you",
    "your",
    "yours",
    "yourself",
    "yourselves",
    "s",
    "t",
    "d",
    "ll",
    "m",
    "re",
    "ve",
    "don",
    "didn",
    "doesn",
    "isn",
    "wasn",
];

/// Korean words too common to be useful as keywords.
const KOREAN_STOP_WORDS: &[&str] = &[
    "그리고",
    "그러나",
    "하지만",
    "그래서",
    "또는",
    "및",
    "등",
    "것",
    "수",
    "때",
    "이것",
    "저것",
    "그것",
    "여기",
    "거기",
    "우리",
    "저희",
    "제가",
    "내가",
    "있다",
    "없다",
    "하다",
    "된다",
    "한다",
];

fn is_stop_word(word: &str) -> bool {
    ENGLISH_STOP_WORDS.contains(&word) || KOREAN_STOP_WORDS.contains(&word)
}

/// Tokenises text into search lexemes (see the module docs for the rules).
pub struct Tokenizer {
    stemmer: Stemmer,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tokenizer(english-snowball, hangul-bigrams)")
    }
}

impl Default for Tokenizer {
    fn default() -> Self {
        Self {
            stemmer: Stemmer::create(Algorithm::English),
        }
    }
}

impl Tokenizer {
    /// Lexemes in text order (duplicates kept, so positions and frequencies
    /// survive into the `tsvector`).
    pub fn lexemes(&self, text: &str) -> Vec<String> {
        let mut out = Vec::new();
        for run in runs(text) {
            match run.class {
                CharClass::Word => {
                    if run.text.chars().count() < 2 || is_stop_word(&run.text) {
                        continue;
                    }
                    if run.text.is_ascii() {
                        out.push(self.stemmer.stem(&run.text).into_owned());
                    } else {
                        out.push(run.text);
                    }
                }
                CharClass::Hangul => {
                    let stem = hangul_stem(&run.text);
                    if stem.chars().count() >= 2 {
                        out.push(stem.to_owned());
                    }
                    if stem.chars().count() != 2 {
                        out.extend(bigrams(stem));
                    }
                }
                CharClass::Cjk => out.extend(bigrams(&run.text)),
                CharClass::Separator => {}
            }
        }
        out
    }

    /// Candidate keywords: content words in surface form (Hangul without
    /// particles), without stems or n-grams.
    fn keyword_candidates(&self, text: &str) -> Vec<String> {
        runs(text)
            .into_iter()
            .filter_map(|run| match run.class {
                CharClass::Word => (run.text.chars().count() >= 3
                    && !is_stop_word(&run.text)
                    && !run.text.chars().all(|c| c.is_ascii_digit()))
                .then_some(run.text),
                CharClass::Hangul => {
                    let stem = hangul_stem(&run.text);
                    (stem.chars().count() >= 2 && !is_stop_word(stem)).then(|| stem.to_owned())
                }
                CharClass::Cjk => (run.text.chars().count() >= 2).then_some(run.text),
                CharClass::Separator => None,
            })
            .collect()
    }

    /// The `limit` most frequent keywords, ties broken by first occurrence.
    pub fn extract_keywords(&self, text: &str, limit: usize) -> Vec<String> {
        let candidates = self.keyword_candidates(text);
        let mut stats: HashMap<&str, (usize, usize)> = HashMap::new();
        for (position, word) in candidates.iter().enumerate() {
            let entry = stats.entry(word).or_insert((0, position));
            entry.0 += 1;
        }
        let mut ranked: Vec<(&str, (usize, usize))> = stats.into_iter().collect();
        ranked.sort_by(|a, b| b.1.0.cmp(&a.1.0).then(a.1.1.cmp(&b.1.1)));
        ranked
            .into_iter()
            .take(limit)
            .map(|(word, _)| word.to_owned())
            .collect()
    }

    /// A memory's search document: topic, keywords and content, each
    /// labelled with its [`Field`]. Topic and keywords come first because
    /// a lexeme keeps at most 256 positions, and the labelled ones are
    /// those that must not be cut.
    pub fn search_document(&self, topic: &str, keywords: &[String], content: &str) -> String {
        self.fields_tsvector_literal(&[
            (Field::Topic, topic),
            (Field::Keywords, &keywords.join(" ")),
            (Field::Content, content),
        ])
    }

    /// A `tsvector` literal of a document made of `fields` in order
    /// (`'lexeme':1A,4 'other':2`), each position labelled with its field's
    /// weight, so that `ts_rank` can count a match in the topic more than
    /// one in passing.
    fn fields_tsvector_literal(&self, fields: &[(Field, &str)]) -> String {
        let mut positions: BTreeMap<String, Vec<(usize, Field)>> = BTreeMap::new();
        let lexemes = fields.iter().flat_map(|&(field, text)| {
            self.lexemes(text)
                .into_iter()
                .map(move |lexeme| (field, lexeme))
        });
        for (index, (field, lexeme)) in lexemes.enumerate() {
            let position = (index + 1).min(MAX_TSVECTOR_POSITION);
            let entry = positions.entry(lexeme).or_default();
            if entry.len() < MAX_POSITIONS_PER_LEXEME {
                entry.push((position, field));
            }
        }
        let mut literal = String::new();
        for (lexeme, positions) in positions {
            if !literal.is_empty() {
                literal.push(' ');
            }
            push_quoted(&mut literal, &lexeme);
            for (i, (position, field)) in positions.into_iter().enumerate() {
                literal.push(if i == 0 { ':' } else { ',' });
                literal.push_str(&position.to_string());
                literal.push_str(field.label());
            }
        }
        literal
    }

    /// The distinct lexemes of `text`, sorted: the terms of a query.
    pub fn query_lexemes(&self, text: &str) -> Vec<String> {
        let mut lexemes = self.lexemes(text);
        lexemes.sort();
        lexemes.dedup();
        lexemes
    }

    /// A `tsquery` literal matching any lexeme of `text` (`'a' | 'b'`), or
    /// `None` when the text has no searchable lexeme. OR semantics: ranking,
    /// not the query, decides how many terms must match.
    pub fn tsquery_literal(&self, text: &str) -> Option<String> {
        any_of(&self.query_lexemes(text))
    }
}

/// A part of a memory's search document. Each is stored with its own
/// `tsvector` weight label (PostgreSQL's A–D), so ranking can weigh a match
/// by where it is without re-tokenising: [`FieldWeights`] turns the
/// configured weights into `ts_rank`'s weight array.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    /// What the memory is about, as its writer named it.
    Topic,
    /// Its keywords, given or extracted.
    Keywords,
    /// Its text.
    Content,
}

impl Field {
    /// The position label in a `tsvector` literal (D, the default, is
    /// written as nothing).
    fn label(self) -> &'static str {
        match self {
            Self::Topic => "A",
            Self::Keywords => "B",
            Self::Content => "",
        }
    }
}

/// How much a query term matching each [`Field`] counts in full-text
/// ranking, relative to a match in the content (1).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FieldWeights {
    pub topic: f32,
    pub keywords: f32,
}

impl FieldWeights {
    /// Every field counts the same (the ranking of unlabelled documents).
    pub const EQUAL: Self = Self {
        topic: 1.0,
        keywords: 1.0,
    };

    /// `ts_rank`'s weight array, in its order {D, C, B, A}. PostgreSQL
    /// accepts weights up to 1 only, so all are divided by the largest;
    /// ranks scale by a constant, which no ranking or score normalisation
    /// sees. C labels no field.
    pub fn ts_rank_weights(self) -> Vec<f32> {
        let largest = self.topic.max(self.keywords).max(1.0);
        let content = 1.0 / largest;
        vec![
            content,
            content,
            self.keywords / largest,
            self.topic / largest,
        ]
    }
}

/// A `tsquery` literal matching texts with any of `lexemes` (`'a' | 'b'`),
/// `None` for no lexeme.
pub fn any_of<S: AsRef<str>>(lexemes: &[S]) -> Option<String> {
    joined(lexemes, " | ")
}

/// A `tsquery` literal matching texts with all of `lexemes` (`'a' & 'b'`),
/// `None` for no lexeme.
pub fn all_of<S: AsRef<str>>(lexemes: &[S]) -> Option<String> {
    joined(lexemes, " & ")
}

fn joined<S: AsRef<str>>(lexemes: &[S], operator: &str) -> Option<String> {
    if lexemes.is_empty() {
        return None;
    }
    let mut literal = String::new();
    for lexeme in lexemes {
        if !literal.is_empty() {
            literal.push_str(operator);
        }
        push_quoted(&mut literal, lexeme.as_ref());
    }
    Some(literal)
}

impl Tokenizer {
    /// The `n` most distinctive lexemes of `text` (longest first; digits
    /// last), a cheap stand-in for rarity that needs no corpus statistics.
    pub fn distinctive_lexemes(&self, text: &str, n: usize) -> Vec<String> {
        let mut lexemes = self.query_lexemes(text);
        lexemes.sort_by(|a, b| {
            let digits = |l: &String| l.chars().all(|c| c.is_ascii_digit());
            digits(a)
                .cmp(&digits(b))
                .then(b.chars().count().cmp(&a.chars().count()))
                .then(a.cmp(b))
        });
        lexemes.truncate(n);
        lexemes
    }

    /// A `tsquery` literal matching texts that share at least two of the
    /// `n` most distinctive lexemes of `text` (`(a & b) | (a & c) | …`), or
    /// the one lexeme when there is only one. Unlike an OR of all lexemes it
    /// stays selective, so the index does the filtering.
    pub fn shared_pairs_query(&self, text: &str, n: usize) -> Option<String> {
        let lexemes = self.distinctive_lexemes(text, n);
        let quoted: Vec<String> = lexemes
            .iter()
            .map(|l| {
                let mut q = String::new();
                push_quoted(&mut q, l);
                q
            })
            .collect();
        match quoted.len() {
            0 => None,
            1 => Some(quoted[0].clone()),
            _ => {
                let mut pairs = Vec::new();
                for (i, a) in quoted.iter().enumerate() {
                    for b in &quoted[i + 1..] {
                        pairs.push(format!("({a} & {b})"));
                    }
                }
                Some(pairs.join(" | "))
            }
        }
    }
}

fn push_quoted(out: &mut String, lexeme: &str) {
    out.push('\'');
    for c in lexeme.chars() {
        match c {
            '\'' => out.push_str("''"),
            '\\' => out.push_str("\\\\"),
            _ => out.push(c),
        }
    }
    out.push('\'');
}

/// Rough token count for budgets: a quarter token per ASCII byte (English
/// averages about four characters per token) and one token per other
/// character (Hangul and Han syllables are one to two tokens each). It
/// errs slightly high for CJK, which keeps budgets safe.
pub fn estimate_tokens(text: &str) -> u32 {
    let ascii = text.bytes().filter(u8::is_ascii).count();
    let other = text.chars().filter(|c| !c.is_ascii()).count();
    u32::try_from(ascii.div_ceil(4) + other).unwrap_or(u32::MAX)
}

/// Display width used by length rules: CJK characters carry about twice the
/// information of a Latin letter, so they count double.
pub fn weighted_len(text: &str) -> usize {
    text.chars()
        .map(|c| match classify(c) {
            CharClass::Hangul | CharClass::Cjk => 2,
            _ => 1,
        })
        .sum()
}

/// The writing system a text is written in: a stand-in for its language
/// that needs no model and works on a few words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Script {
    Hangul,
    /// Han ideographs and kana.
    Cjk,
    /// Latin and the other alphabets (Cyrillic, Greek, …).
    Alphabetic,
}

/// Share of a text's words that mark it as Hangul or Han/kana text.
/// Latin-script words (names, commands, identifiers) turn up in technical
/// writing in every language: a Korean question is often mostly English
/// terms (`Redis maxmemory-policy allkeys-lru eviction 정책`), while
/// Hangul in English text is rare (a name). So a modest share of words in
/// those scripts decides, and an alphabet wins only without them.
const MARKED_SCRIPT_SHARE: f64 = 0.125;

/// The script `text` is written in, counting words (runs of one script), not
/// letters: Hangul or Han/kana when at least the share `MARKED_SCRIPT_SHARE`
/// of its words are (the more frequent of the two if both), else alphabetic.
/// Digit-only words do not count; `None` for a text without words.
pub fn text_script(text: &str) -> Option<Script> {
    let (mut hangul, mut cjk, mut alphabetic) = (0usize, 0usize, 0usize);
    for run in runs(text) {
        match run.class {
            CharClass::Hangul => hangul += 1,
            CharClass::Cjk => cjk += 1,
            CharClass::Word if run.text.chars().any(char::is_alphabetic) => alphabetic += 1,
            _ => {}
        }
    }
    let words = hangul + cjk + alphabetic;
    if words == 0 {
        return None;
    }
    let (marked, script) = if hangul >= cjk {
        (hangul, Script::Hangul)
    } else {
        (cjk, Script::Cjk)
    };
    if marked as f64 >= MARKED_SCRIPT_SHARE * words as f64 {
        Some(script)
    } else {
        Some(Script::Alphabetic)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokenizer() -> Tokenizer {
        Tokenizer::default()
    }

    #[test]
    fn english_is_lowercased_stemmed_and_stripped_of_stop_words() {
        let lexemes = tokenizer().lexemes("The user DRINKS two cups of espresso every morning.");
        assert_eq!(
            lexemes,
            vec!["user", "drink", "two", "cup", "espresso", "everi", "morn"]
        );
    }

    #[test]
    fn korean_particles_are_stripped_and_bigrams_added() {
        let lexemes = tokenizer().lexemes("사용자는 에스프레소를 마신다");
        assert!(lexemes.contains(&"사용자".to_owned()), "{lexemes:?}");
        assert!(lexemes.contains(&"에스프레소".to_owned()), "{lexemes:?}");
        assert!(lexemes.contains(&"에스".to_owned()), "{lexemes:?}");
        assert!(!lexemes.iter().any(|l| l.contains('를')), "{lexemes:?}");
        // A query without the particle shares the whole-word lexeme.
        let query = tokenizer().lexemes("에스프레소");
        assert!(query.contains(&"에스프레소".to_owned()));
    }

    #[test]
    fn short_hangul_words_keep_their_particle_when_stripping_leaves_one_syllable() {
        // 나이 ("age") ends in the particle-like 이 but is a word of its own.
        assert_eq!(tokenizer().lexemes("나이"), vec!["나이"]);
    }

    #[test]
    fn mixed_script_words_split_by_script() {
        let lexemes = tokenizer().lexemes("API를 redis로 호출");
        assert!(lexemes.contains(&"api".to_owned()), "{lexemes:?}");
        assert!(lexemes.contains(&"redi".to_owned()), "{lexemes:?}");
        assert!(lexemes.contains(&"호출".to_owned()), "{lexemes:?}");
    }

    #[test]
    fn han_and_kana_become_bigrams() {
        assert_eq!(tokenizer().lexemes("東京都"), vec!["東京", "京都"]);
    }

    #[test]
    fn tsvector_literal_groups_positions_and_escapes() {
        let literal =
            tokenizer().fields_tsvector_literal(&[(Field::Content, "coffee, coffee and o'clock")]);
        assert_eq!(literal, "'clock':3 'coffe':1,2");
        let mut quoted = String::new();
        push_quoted(&mut quoted, "it's\\");
        assert_eq!(quoted, "'it''s\\\\'");
    }

    #[test]
    fn fields_label_their_positions_and_count_on() {
        let literal = tokenizer().fields_tsvector_literal(&[
            (Field::Topic, "coffee"),
            (Field::Keywords, "beans"),
            (Field::Content, "coffee beans, roasted"),
        ]);
        assert_eq!(literal, "'bean':2B,4 'coffe':1A,3 'roast':5");
    }

    #[test]
    fn field_weights_fit_ts_rank_range_and_order() {
        let weights = FieldWeights {
            topic: 10.0,
            keywords: 4.0,
        };
        assert_eq!(weights.ts_rank_weights(), vec![0.1, 0.1, 0.4, 1.0]);
        assert_eq!(FieldWeights::EQUAL.ts_rank_weights(), vec![1.0; 4]);
        let below_content = FieldWeights {
            topic: 0.5,
            keywords: 0.0,
        };
        assert_eq!(below_content.ts_rank_weights(), vec![1.0, 1.0, 0.0, 0.5]);
    }

    #[test]
    fn tsquery_literal_is_a_deduplicated_disjunction() {
        assert_eq!(
            tokenizer()
                .tsquery_literal("coffee Coffee espresso")
                .as_deref(),
            Some("'coffe' | 'espresso'")
        );
        assert_eq!(tokenizer().tsquery_literal("the of and"), None);
        assert_eq!(all_of(&["a", "it's"]).as_deref(), Some("'a' & 'it''s'"));
        assert_eq!(all_of::<&str>(&[]), None);
    }

    #[test]
    fn keywords_are_ranked_by_frequency_then_position() {
        let keywords = tokenizer().extract_keywords(
            "Redis outage: the redis cluster failed over; postgres stayed up. 레디스를 재시작했다",
            3,
        );
        assert_eq!(keywords, vec!["redis", "outage", "cluster"]);
    }

    #[test]
    fn shared_pairs_queries_use_the_most_distinctive_terms() {
        let t = tokenizer();
        assert_eq!(
            t.distinctive_lexemes("the 2024 deploy pipeline of staging", 3),
            vec!["pipelin", "deploy", "stage"]
        );
        assert_eq!(
            t.shared_pairs_query("deploy pipeline staging", 3)
                .as_deref(),
            Some("('pipelin' & 'deploy') | ('pipelin' & 'stage') | ('deploy' & 'stage')")
        );
        assert_eq!(
            t.shared_pairs_query("coffee", 3).as_deref(),
            Some("'coffe'")
        );
        assert_eq!(t.shared_pairs_query("the of", 3), None);
    }

    #[test]
    fn token_estimates_count_cjk_per_character() {
        assert_eq!(estimate_tokens("abcdefgh"), 2);
        assert_eq!(estimate_tokens("커피"), 2);
        assert_eq!(weighted_len("커피 a"), 6);
    }

    #[test]
    fn a_few_hangul_or_han_words_mark_the_script_of_a_text() {
        let korean = "Redis maxmemory-policy allkeys-lru eviction 정책";
        assert_eq!(text_script(korean), Some(Script::Hangul));
        assert_eq!(text_script("postgres 접속"), Some(Script::Hangul));
        // One Hangul word in nine is under the share; one in eight is not.
        let name = "Ask 김철수 about the connection pool before the load";
        assert_eq!(text_script(name), Some(Script::Alphabetic));
        let name = "Ask 김철수 about the connection pool before load";
        assert_eq!(text_script(name), Some(Script::Hangul));
        assert_eq!(text_script("東京 天気 予報 and 날씨"), Some(Script::Cjk));
        assert_eq!(text_script("2026-12-06 !"), None);
        assert_eq!(text_script(""), None);
    }
}
