//! Relevance buckets shown to the agent instead of raw scores.
//!
//! The reference applied thirds of `[floor, 1]` to rank-fusion scores that
//! never exceed ~0.033, so every memory was `[weak]`. mneme feeds this with a
//! *calibrated* relevance in `[0, 1]` (recall's contract), so the thirds carry
//! information: a memory just over the active `min_score` is weak, one near
//! certainty is strong.
//!
//! [`close_to_best`] decides how many of a query's memories go into one
//! block: the best, and those nearly as relevant as it.

/// How relevant a surfaced memory is, relative to the active floor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Bucket {
    /// Lower third of `[floor, 1]`.
    Weak,
    /// Middle third.
    Related,
    /// Upper third.
    Strong,
}

impl Bucket {
    /// The stable label used in metrics: `weak`, `related`, `strong`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Weak => "weak",
            Self::Related => "related",
            Self::Strong => "strong",
        }
    }

    /// The tag shown in the block: `[weak]`, `[related]`, `[strong]`.
    pub fn label(self) -> &'static str {
        match self {
            Self::Weak => "[weak]",
            Self::Related => "[related]",
            Self::Strong => "[strong]",
        }
    }
}

/// Thirds of `[floor, 1.0]`: score < floor + span/3 → Weak, < floor +
/// 2·span/3 → Related, else Strong. Floors ≥ 1.0 give Strong for score ≥
/// floor. A negative floor counts as 0; a NaN score is Weak. The arithmetic
/// runs in `f64` so that boundaries do not drift with `f32` rounding.
pub fn bucket(score: f32, floor: f32) -> Bucket {
    let (score, floor) = (f64::from(score), f64::from(floor.max(0.0)));
    if score.is_nan() {
        return Bucket::Weak;
    }
    if floor >= 1.0 {
        return if score >= floor {
            Bucket::Strong
        } else {
            Bucket::Weak
        };
    }
    let third = (1.0 - floor) / 3.0;
    if score < floor + third {
        Bucket::Weak
    } else if score < floor + 2.0 * third {
        Bucket::Related
    } else {
        Bucket::Strong
    }
}

/// How many of `relevances` (best first) are within `gap` of the first.
///
/// The threshold alone admits a memory on its own calibrated relevance, but
/// a query's runners-up are less often relevant than their calibration
/// says when the best stands well clear of them: on the memtomem corpus,
/// memories over 0.5 more than 0.05 below their query's best were relevant
/// 65% of the time, those within 0.05 80%, like the best memories
/// themselves (docs/BENCHMARKS.md). A gap of 1 or more keeps every memory;
/// a NaN relevance ends the list.
pub fn close_to_best(relevances: impl IntoIterator<Item = f32>, gap: f32) -> usize {
    let mut relevances = relevances.into_iter().map(f64::from);
    let Some(best) = relevances.next() else {
        return 0;
    };
    if best.is_nan() {
        return 0;
    }
    // In f64, so that a relevance exactly `gap` below the best stays in.
    let floor = best - f64::from(gap);
    1 + relevances.take_while(|&r| r >= floor).count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use Bucket::{Related, Strong, Weak};

    #[test]
    fn runners_up_just_inside_the_gap_stay_and_those_outside_go() {
        assert_eq!(close_to_best([0.9, 0.86, 0.84], 0.05), 2);
        assert_eq!(close_to_best([0.9, 0.85, 0.84], 0.05), 2);
        assert_eq!(close_to_best([0.9, 0.849], 0.05), 1);
        // The list is cut at the first memory outside the gap.
        assert_eq!(close_to_best([0.9, 0.7, 0.89], 0.05), 1);
        assert_eq!(close_to_best([0.9, 0.2, 0.1], 1.0), 3);
        assert_eq!(close_to_best([0.9, 0.9], 0.0), 2);
        assert_eq!(close_to_best([], 0.05), 0);
        assert_eq!(close_to_best([f32::NAN, 0.5], 0.05), 0);
        assert_eq!(close_to_best([0.9, f32::NAN], 0.05), 1);
    }

    #[test]
    fn reference_cases() {
        assert_eq!(bucket(0.04, 0.03), Weak);
        assert_eq!(bucket(0.50, 0.03), Related);
        assert_eq!(bucket(0.95, 0.03), Strong);
        assert_eq!(bucket(0.55, 0.4), Weak);
        assert_eq!(bucket(0.70, 0.4), Related);
        assert_eq!(bucket(0.90, 0.4), Strong);
        assert_eq!(bucket(0.70, 0.6), Weak);
    }

    #[test]
    fn boundaries_are_inclusive_upwards() {
        // Floor 0.25: thirds of 0.75 → exact boundaries at 0.5 and 0.75.
        let below = |x: f32| f32::from_bits(x.to_bits() - 1);
        assert_eq!(bucket(below(0.5), 0.25), Weak);
        assert_eq!(bucket(0.5, 0.25), Related);
        assert_eq!(bucket(below(0.75), 0.25), Related);
        assert_eq!(bucket(0.75, 0.25), Strong);
        assert_eq!(bucket(1.0, 0.25), Strong);
        // Floor 0: boundaries at 1/3 and 2/3.
        assert_eq!(bucket(0.333, 0.0), Weak);
        assert_eq!(bucket(0.334, 0.0), Related);
        assert_eq!(bucket(0.666, 0.0), Related);
        assert_eq!(bucket(0.667, 0.0), Strong);
    }

    #[test]
    fn degenerate_floors_and_scores() {
        assert_eq!(bucket(1.0, 1.0), Strong);
        assert_eq!(bucket(0.99, 1.0), Weak);
        assert_eq!(bucket(1.2, 1.5), Weak);
        assert_eq!(bucket(0.2, -1.0), Weak);
        assert_eq!(bucket(f32::NAN, 0.3), Weak);
        assert_eq!(bucket(0.1, 0.3), Weak);
    }

    #[test]
    fn labels() {
        assert_eq!(Weak.as_str(), "weak");
        assert_eq!(Related.label(), "[related]");
        assert_eq!(Strong.label(), "[strong]");
    }
}
