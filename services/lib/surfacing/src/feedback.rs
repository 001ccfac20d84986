//! The feedback loop: parsing `stm_surfacing_feedback` arguments and local
//! demotion of memories that keep being rated negative.
//!
//! Every error is a user-facing sentence: the agent reads it and retries, so
//! it names the offending entry (`ratings[2]: …`). A batch is validated whole
//! before anything is accepted, so a bad entry never leaves half a batch
//! recorded. A memory id must belong to the surfacing event it rates.

use std::collections::{HashMap, HashSet};
use std::str::FromStr;

use serde_json::Value;
use thiserror::Error;

/// The valid ratings, in the order shown to users.
pub const RATINGS: [&str; 4] = [
    "helpful",
    "partially_helpful",
    "not_relevant",
    "already_known",
];

/// Most entries one `ratings` batch may hold.
const MAX_BATCH: usize = 50;
/// Longest id echoed back in an error message.
const MAX_ECHOED_ID_CHARS: usize = 80;

/// How useful a surfaced memory (or block) was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Rating {
    /// It helped.
    Helpful,
    /// It helped somewhat; neutral for tuning.
    PartiallyHelpful,
    /// It had nothing to do with the task.
    NotRelevant,
    /// The agent knew it already.
    AlreadyKnown,
}

impl Rating {
    /// The wire spelling (one of [`RATINGS`]).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Helpful => RATINGS[0],
            Self::PartiallyHelpful => RATINGS[1],
            Self::NotRelevant => RATINGS[2],
            Self::AlreadyKnown => RATINGS[3],
        }
    }

    /// `not_relevant` and `already_known`: both mean "do not show this again".
    pub fn is_negative(self) -> bool {
        matches!(self, Self::NotRelevant | Self::AlreadyKnown)
    }
}

impl FromStr for Rating {
    type Err = FeedbackError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.trim() {
            "helpful" => Ok(Self::Helpful),
            "partially_helpful" => Ok(Self::PartiallyHelpful),
            "not_relevant" => Ok(Self::NotRelevant),
            "already_known" => Ok(Self::AlreadyKnown),
            _ => Err(FeedbackError::InvalidRating(echo(text))),
        }
    }
}

/// A rating of one memory of a surfacing event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryRating {
    /// The rated memory (one of the event's delivered ids).
    pub memory_id: String,
    /// Its rating.
    pub rating: Rating,
}

/// What one feedback call says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FeedbackInput {
    /// One rating for the whole block.
    Event(Rating),
    /// Ratings of individual memories.
    Memories(Vec<MemoryRating>),
}

/// Why feedback arguments were refused; `Display` is the message for the agent.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum FeedbackError {
    /// A rating outside [`RATINGS`].
    #[error(
        "rating must be one of helpful, partially_helpful, not_relevant, already_known (got {0:?})"
    )]
    InvalidRating(String),
    /// Both call shapes were used at once.
    #[error("give either `rating` (optionally with `memory_id`) or `ratings`, not both")]
    BothShapes,
    /// Neither call shape was used.
    #[error("give `rating` (optionally with `memory_id`) or `ratings`")]
    NoRating,
    /// `ratings` is not a list.
    #[error("`ratings` must be a list of {{\"memory_id\": …, \"rating\": …}} objects")]
    RatingsNotList,
    /// `ratings` is empty or too long.
    #[error("`ratings` must hold 1 to 50 entries (got {0})")]
    RatingsCount(usize),
    /// The `memory_id` of the single-rating shape is not part of the event.
    #[error("memory {0:?} was not surfaced in this event")]
    NotSurfaced(String),
    /// One entry of `ratings` is wrong.
    #[error("ratings[{index}]: {problem}")]
    Entry {
        /// Position in the list, from 0.
        index: usize,
        /// What is wrong with it.
        problem: String,
    },
}

/// Shortens untrusted ids before they are echoed in a message.
fn echo(text: &str) -> String {
    let mut shown: String = text.chars().take(MAX_ECHOED_ID_CHARS).collect();
    if shown.len() < text.len() {
        shown.push('…');
    }
    shown
}

/// Treats `""` (which some clients send for every optional argument) as absent.
fn present(text: Option<&str>) -> Option<&str> {
    text.map(str::trim).filter(|text| !text.is_empty())
}

/// From the tool's raw arguments: `rating` (event-level, optionally with
/// `memory_id` for one memory) XOR `ratings: [{memory_id, rating}]` (1..=50
/// entries, no duplicate memory ids). Empty strings and `null` count as
/// absent. Every entry is validated before anything is accepted; `delivered`
/// are the memory ids of the surfacing event.
pub fn parse_feedback(
    rating: Option<&str>,
    memory_id: Option<&str>,
    ratings: Option<&Value>,
    delivered: &[String],
) -> Result<FeedbackInput, FeedbackError> {
    let (rating, memory_id) = (present(rating), present(memory_id));
    let ratings = ratings.filter(|value| !value.is_null());
    match (rating, ratings) {
        (Some(_), Some(_)) => Err(FeedbackError::BothShapes),
        (None, Some(_)) if memory_id.is_some() => Err(FeedbackError::BothShapes),
        (None, None) => Err(FeedbackError::NoRating),
        (Some(rating), None) => {
            let rating: Rating = rating.parse()?;
            match memory_id {
                None => Ok(FeedbackInput::Event(rating)),
                Some(id) if delivered.iter().any(|d| d == id) => {
                    Ok(FeedbackInput::Memories(vec![MemoryRating {
                        memory_id: id.to_owned(),
                        rating,
                    }]))
                }
                Some(id) => Err(FeedbackError::NotSurfaced(echo(id))),
            }
        }
        (None, Some(list)) => parse_batch(list, delivered).map(FeedbackInput::Memories),
    }
}

fn parse_batch(list: &Value, delivered: &[String]) -> Result<Vec<MemoryRating>, FeedbackError> {
    let entries = list.as_array().ok_or(FeedbackError::RatingsNotList)?;
    if entries.is_empty() || entries.len() > MAX_BATCH {
        return Err(FeedbackError::RatingsCount(entries.len()));
    }
    let mut seen = HashSet::new();
    let mut parsed = Vec::with_capacity(entries.len());
    for (index, entry) in entries.iter().enumerate() {
        let problem = |problem: String| FeedbackError::Entry { index, problem };
        let memory_id = present(entry.get("memory_id").and_then(Value::as_str))
            .ok_or_else(|| problem("`memory_id` must be a non-empty string".to_owned()))?;
        let rating = entry
            .get("rating")
            .and_then(Value::as_str)
            .ok_or_else(|| problem("`rating` must be a string".to_owned()))?
            .parse::<Rating>()
            .map_err(|error| problem(error.to_string()))?;
        if !delivered.iter().any(|d| d == memory_id) {
            let id = echo(memory_id);
            return Err(problem(format!(
                "memory {id:?} was not surfaced in this event"
            )));
        }
        if !seen.insert(memory_id) {
            let id = echo(memory_id);
            return Err(problem(format!("memory {id:?} is rated more than once")));
        }
        parsed.push(MemoryRating {
            memory_id: memory_id.to_owned(),
            rating,
        });
    }
    Ok(parsed)
}

/// Demotion: the memories rated negative in ≥ `threshold` distinct surfacing
/// events (a threshold of 0 counts as 1). Rows are `(event_id, memory_id,
/// rating)`. An event-level rating counts for every memory delivered in that
/// event, so the caller passes it as one row per delivered memory (the store
/// query joins ratings with the event's memory ids); several negative rows of
/// one event for one memory count once.
pub fn demoted(rows: &[(String, String, Rating)], threshold: u32) -> HashSet<String> {
    let mut negative_events: HashMap<&str, HashSet<&str>> = HashMap::new();
    for (event, memory, rating) in rows {
        if rating.is_negative() {
            negative_events.entry(memory).or_default().insert(event);
        }
    }
    let needed = usize::try_from(threshold.max(1)).unwrap_or(usize::MAX);
    negative_events
        .into_iter()
        .filter(|(_, events)| events.len() >= needed)
        .map(|(memory, _)| memory.to_owned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn delivered() -> Vec<String> {
        vec!["m1".to_owned(), "m2".to_owned(), "m3".to_owned()]
    }

    #[test]
    fn ratings_round_trip() {
        for name in RATINGS {
            assert_eq!(name.parse::<Rating>().unwrap().as_str(), name);
        }
        assert!(Rating::NotRelevant.is_negative() && Rating::AlreadyKnown.is_negative());
        assert!(!Rating::Helpful.is_negative() && !Rating::PartiallyHelpful.is_negative());
        assert_eq!(
            "great".parse::<Rating>().unwrap_err().to_string(),
            "rating must be one of helpful, partially_helpful, not_relevant, already_known (got \"great\")"
        );
    }

    #[test]
    fn event_and_single_memory_shapes() {
        assert_eq!(
            parse_feedback(Some("helpful"), None, None, &delivered()),
            Ok(FeedbackInput::Event(Rating::Helpful))
        );
        assert_eq!(
            parse_feedback(
                Some("not_relevant"),
                Some("m2"),
                Some(&Value::Null),
                &delivered()
            ),
            Ok(FeedbackInput::Memories(vec![MemoryRating {
                memory_id: "m2".into(),
                rating: Rating::NotRelevant
            }]))
        );
        assert_eq!(
            parse_feedback(Some("helpful"), Some("m9"), None, &delivered()),
            Err(FeedbackError::NotSurfaced("m9".into()))
        );
        assert_eq!(
            parse_feedback(Some(""), Some(""), None, &delivered()),
            Err(FeedbackError::NoRating)
        );
    }

    #[test]
    fn shapes_are_exclusive() {
        let list = json!([{"memory_id": "m1", "rating": "helpful"}]);
        assert_eq!(
            parse_feedback(Some("helpful"), None, Some(&list), &delivered()),
            Err(FeedbackError::BothShapes)
        );
        assert_eq!(
            parse_feedback(None, Some("m1"), Some(&list), &delivered()),
            Err(FeedbackError::BothShapes)
        );
    }

    #[test]
    fn batch_is_parsed_in_order() {
        let list = json!([
            {"memory_id": "m3", "rating": "already_known"},
            {"memory_id": "m1", "rating": "partially_helpful"},
        ]);
        let parsed = parse_feedback(None, None, Some(&list), &delivered()).unwrap();
        assert_eq!(
            parsed,
            FeedbackInput::Memories(vec![
                MemoryRating {
                    memory_id: "m3".into(),
                    rating: Rating::AlreadyKnown
                },
                MemoryRating {
                    memory_id: "m1".into(),
                    rating: Rating::PartiallyHelpful
                },
            ])
        );
    }

    #[test]
    fn batch_errors_name_the_entry() {
        let check = |list: Value, message: &str| {
            let error = parse_feedback(None, None, Some(&list), &delivered()).unwrap_err();
            assert_eq!(error.to_string(), message);
        };
        check(
            json!([{"memory_id": "m1", "rating": "helpful"}, {"memory_id": "m2", "rating": "helpful"},
                   {"memory_id": "zz", "rating": "helpful"}]),
            "ratings[2]: memory \"zz\" was not surfaced in this event",
        );
        check(
            json!([{"memory_id": "m1", "rating": "helpful"}, {"memory_id": "m1", "rating": "not_relevant"}]),
            "ratings[1]: memory \"m1\" is rated more than once",
        );
        check(
            json!([{"memory_id": "m1", "rating": "meh"}]),
            "ratings[0]: rating must be one of helpful, partially_helpful, not_relevant, already_known (got \"meh\")",
        );
        check(
            json!([{"rating": "helpful"}]),
            "ratings[0]: `memory_id` must be a non-empty string",
        );
        check(
            json!(["m1"]),
            "ratings[0]: `memory_id` must be a non-empty string",
        );
        check(
            json!([{"memory_id": "m1"}]),
            "ratings[0]: `rating` must be a string",
        );
        check(json!([]), "`ratings` must hold 1 to 50 entries (got 0)");
        check(
            json!({"m1": "helpful"}),
            FeedbackError::RatingsNotList.to_string().as_str(),
        );
    }

    #[test]
    fn batch_size_limit() {
        let ids: Vec<String> = (0..51).map(|i| format!("m{i}")).collect();
        let entries = |n: usize| {
            Value::Array(
                ids[..n]
                    .iter()
                    .map(|id| json!({"memory_id": id, "rating": "helpful"}))
                    .collect(),
            )
        };
        assert!(parse_feedback(None, None, Some(&entries(50)), &ids).is_ok());
        assert_eq!(
            parse_feedback(None, None, Some(&entries(51)), &ids),
            Err(FeedbackError::RatingsCount(51))
        );
    }

    #[test]
    fn long_ids_are_shortened_in_messages() {
        let long = "x".repeat(500);
        let error = parse_feedback(Some("helpful"), Some(&long), None, &delivered()).unwrap_err();
        assert!(error.to_string().chars().count() < 130);
    }

    fn row(event: &str, memory: &str, rating: Rating) -> (String, String, Rating) {
        (event.to_owned(), memory.to_owned(), rating)
    }

    #[test]
    fn demotion_counts_distinct_negative_events() {
        use Rating::*;
        let mut rows = vec![
            row("e1", "m1", NotRelevant),
            row("e2", "m1", AlreadyKnown),
            row("e2", "m1", NotRelevant),
            row("e3", "m1", Helpful),
        ];
        assert!(demoted(&rows, 3).is_empty(), "two events are not enough");
        rows.push(row("e4", "m1", NotRelevant));
        assert_eq!(demoted(&rows, 3), HashSet::from(["m1".to_owned()]));
    }

    #[test]
    fn event_level_negative_counts_for_every_delivered_memory() {
        // Three events rated not_relevant as a whole, each delivering m1 and m2:
        // the caller expands them to one row per delivered memory.
        let rows: Vec<_> = ["e1", "e2", "e3"]
            .iter()
            .flat_map(|event| ["m1", "m2"].map(|memory| row(event, memory, Rating::NotRelevant)))
            .collect();
        let expected = HashSet::from(["m1".to_owned(), "m2".to_owned()]);
        assert_eq!(demoted(&rows, 3), expected);
        assert!(demoted(&rows, 4).is_empty());
        assert_eq!(demoted(&rows[..2], 0), expected);
    }
}
