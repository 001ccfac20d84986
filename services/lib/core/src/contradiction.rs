//! Deciding, without a language model, whether two similar memories
//! contradict each other (the consolidator's contradiction stage).
//!
//! Two rules, both conservative (a miss is better than a false alarm: the
//! verdict links and down-weights a memory):
//! - **polarity**: a claim of one is the negation of a claim of the other
//!   (`mneme_core::claims`: "X uses Redis" / "X does not use Redis");
//! - **numbers**: the texts are the same once numbers are masked, but the
//!   numbers differ ("backups are kept 30 days" / "… 14 days").
//!
//! Anything else is undecided; the stage queues very similar undecided
//! pairs for a model to judge later.

use crate::claims;

/// Why two memories contradict each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    Polarity,
    NumericMismatch,
}

impl Reason {
    pub const fn as_str(self) -> &'static str {
        match self {
            Reason::Polarity => "polarity",
            Reason::NumericMismatch => "numeric_mismatch",
        }
    }
}

/// The rule that finds `a` and `b` contradictory, if any.
pub fn judge(a: &str, b: &str) -> Option<Reason> {
    let (claims_a, claims_b) = (claims::extract(a), claims::extract(b));
    if claims_a
        .iter()
        .any(|x| claims_b.iter().any(|y| x.contradicts(y)))
    {
        return Some(Reason::Polarity);
    }
    let (masked_a, numbers_a) = mask_numbers(a);
    let (masked_b, numbers_b) = mask_numbers(b);
    (!numbers_a.is_empty() && masked_a == masked_b && numbers_a != numbers_b)
        .then_some(Reason::NumericMismatch)
}

/// The text lowercased with runs of digits (and decimal points between
/// them) replaced by `#`, words joined by single spaces, trailing
/// punctuation dropped; and the numbers in order.
fn mask_numbers(text: &str) -> (String, Vec<String>) {
    let mut masked = String::with_capacity(text.len());
    let mut numbers = Vec::new();
    let mut chars = text
        .trim()
        .trim_end_matches(['.', '!', '?', '。'])
        .chars()
        .peekable();
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() {
            let mut number = String::from(c);
            while let Some(&next) = chars.peek() {
                if next.is_ascii_digit()
                    || (next == '.' || next == ',')
                        && number.chars().last().is_some_and(|l| l.is_ascii_digit())
                {
                    number.push(next);
                    chars.next();
                } else {
                    break;
                }
            }
            let number = number.trim_end_matches(['.', ',']).replace(',', "");
            numbers.push(number);
            masked.push('#');
        } else if c.is_whitespace() {
            if !masked.ends_with(' ') {
                masked.push(' ');
            }
        } else {
            masked.extend(c.to_lowercase());
        }
    }
    (masked, numbers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negations_of_the_same_claim_contradict() {
        assert_eq!(
            judge(
                "The billing service uses Redis.",
                "The billing service does not use Redis."
            ),
            Some(Reason::Polarity)
        );
        assert_eq!(
            judge(
                "이 서비스는 Redis를 사용한다",
                "이 서비스는 Redis를 사용하지 않는다"
            ),
            Some(Reason::Polarity)
        );
    }

    #[test]
    fn the_same_sentence_with_other_numbers_contradicts() {
        assert_eq!(
            judge(
                "Backups are kept for 30 days.",
                "Backups are kept for 14 days."
            ),
            Some(Reason::NumericMismatch)
        );
        assert_eq!(
            judge(
                "The limit is 1,000 requests per minute",
                "The limit is 1000 requests per minute."
            ),
            None,
            "the same number written differently"
        );
    }

    #[test]
    fn related_but_compatible_statements_are_undecided() {
        assert_eq!(
            judge(
                "Backups are kept for 30 days.",
                "Backups run nightly at 02:00."
            ),
            None
        );
        assert_eq!(
            judge("Deploys run on Mondays.", "Deploys run on Mondays."),
            None
        );
        assert_eq!(
            judge("Alice maybe drinks coffee.", "Alice does not drink coffee."),
            None,
            "a hedge contradicts nothing"
        );
    }
}
