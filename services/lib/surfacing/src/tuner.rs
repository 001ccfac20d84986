//! The `min_score` auto-tuner, one threshold per (tenant, server, tool).
//!
//! Fixes of the reference: thresholds are keyed by server and tenant (the
//! caller's key), there is no cold-start fallback to a global ratio (one noisy
//! tool cannot steer the others), a step needs fresh feedback (the caller
//! resets the counts after each step, so one window cannot push twice and
//! nothing drifts without new ratings), and hysteresis stops oscillation: a
//! step against the previous direction must clear its band by an extra
//! margin.

/// Tuning parameters, from the `MNEME_SURFACING_TUNER_*` settings (their
/// defaults are in docs/CONFIG.md).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TunerSettings {
    /// Ratings needed before any step.
    pub min_samples: u32,
    /// Size of one step.
    pub step: f32,
    /// Lowest threshold the tuner may set.
    pub floor: f32,
    /// Highest threshold the tuner may set.
    pub ceiling: f32,
    /// Raise when the negative share exceeds this.
    pub raise_above: f64,
    /// Lower when the helpful share exceeds this.
    pub lower_above: f64,
    /// Extra share needed to reverse the last direction.
    pub hysteresis: f64,
}

/// Ratings gathered since the last adjustment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FeedbackCounts {
    /// `helpful` ratings.
    pub helpful: u32,
    /// `partially_helpful` ratings: neutral, counted in the denominators only.
    pub partially_helpful: u32,
    /// `not_relevant` ratings.
    pub not_relevant: u32,
    /// `already_known` ratings.
    pub already_known: u32,
}

impl FeedbackCounts {
    /// `not_relevant + already_known`.
    pub fn negative(&self) -> u32 {
        self.not_relevant.saturating_add(self.already_known)
    }

    /// All ratings.
    pub fn total(&self) -> u32 {
        self.helpful
            .saturating_add(self.partially_helpful)
            .saturating_add(self.negative())
    }
}

/// Which way a step moved the threshold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Stricter: fewer, better memories.
    Raise,
    /// Looser: more memories.
    Lower,
}

/// One decided step, with the evidence behind it (for the audit row).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Adjustment {
    /// The threshold before.
    pub from: f32,
    /// The threshold after.
    pub to: f32,
    /// Which way it moved.
    pub direction: Direction,
    /// Negative ratings / all ratings.
    pub negative_share: f64,
    /// Helpful ratings / all ratings.
    pub helpful_share: f64,
    /// All ratings considered.
    pub samples: u32,
}

/// Decides a step from the counts gathered *since the last adjustment* (the
/// caller resets counts after each step, so one noisy window cannot push
/// twice and no drift happens without new feedback). Needs ≥ `min_samples`.
/// Raise when the negative share > `raise_above`; lower when the helpful
/// share > `lower_above` (raising wins if both hold). Hysteresis: a step in
/// the direction opposite to `last` needs the share to exceed its band by
/// `hysteresis` more. The result is clamped to `[floor, ceiling]`; `None`
/// when nothing changes.
pub fn decide(
    current: f32,
    counts: FeedbackCounts,
    last: Option<Direction>,
    settings: &TunerSettings,
) -> Option<Adjustment> {
    let samples = counts.total();
    if samples == 0 || samples < settings.min_samples || !current.is_finite() {
        return None;
    }
    let share = |count: u32| f64::from(count) / f64::from(samples);
    let (negative_share, helpful_share) = (share(counts.negative()), share(counts.helpful));
    let margin = |against: Direction| {
        if last == Some(against) {
            settings.hysteresis
        } else {
            0.0
        }
    };
    let direction = if negative_share > settings.raise_above + margin(Direction::Lower) {
        Direction::Raise
    } else if helpful_share > settings.lower_above + margin(Direction::Raise) {
        Direction::Lower
    } else {
        return None;
    };
    let (low, high) = (
        settings.floor.min(settings.ceiling),
        settings.floor.max(settings.ceiling),
    );
    let moved = match direction {
        Direction::Raise => current + settings.step,
        Direction::Lower => current - settings.step,
    };
    let to = moved.clamp(low, high);
    if (to - current).abs() <= f32::EPSILON {
        return None;
    }
    Some(Adjustment {
        from: current,
        to,
        direction,
        negative_share,
        helpful_share,
        samples,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(helpful: u32, partially: u32, not_relevant: u32, known: u32) -> FeedbackCounts {
        FeedbackCounts {
            helpful,
            partially_helpful: partially,
            not_relevant,
            already_known: known,
        }
    }

    /// A wider band than the service's default (0.3 to 0.9), so that steps
    /// from 0.3 in either direction are seen.
    fn settings() -> TunerSettings {
        TunerSettings {
            min_samples: 20,
            step: 0.02,
            floor: 0.1,
            ceiling: 0.8,
            raise_above: 0.6,
            lower_above: 0.8,
            hysteresis: 0.05,
        }
    }

    #[test]
    fn counts_helpers() {
        let c = counts(1, 2, 3, 4);
        assert_eq!((c.negative(), c.total()), (7, 10));
    }

    #[test]
    fn below_min_samples_nothing_happens() {
        assert_eq!(decide(0.3, counts(0, 0, 19, 0), None, &settings()), None);
        let no_minimum = TunerSettings {
            min_samples: 0,
            ..settings()
        };
        assert_eq!(decide(0.3, counts(0, 0, 0, 0), None, &no_minimum), None);
    }

    #[test]
    fn raises_when_negative_share_exceeds_the_band() {
        // 12 of 20 = 0.60: not above → no step; 13 of 20 → raise.
        assert_eq!(decide(0.3, counts(8, 0, 6, 6), None, &settings()), None);
        let step = decide(0.3, counts(7, 0, 7, 6), None, &settings()).unwrap();
        assert_eq!(step.direction, Direction::Raise);
        assert!((step.to - 0.32).abs() < 1e-6);
        assert_eq!(step.samples, 20);
        assert!((step.negative_share - 0.65).abs() < 1e-12);
    }

    #[test]
    fn lowers_when_helpful_share_exceeds_the_band() {
        // 16 of 20 = 0.80: not above; 17 of 20 → lower. Partial ratings dilute.
        assert_eq!(decide(0.3, counts(16, 4, 0, 0), None, &settings()), None);
        let step = decide(0.3, counts(17, 3, 0, 0), None, &settings()).unwrap();
        assert_eq!(step.direction, Direction::Lower);
        assert!((step.to - 0.28).abs() < 1e-6);
        assert_eq!(decide(0.3, counts(17, 6, 0, 0), None, &settings()), None);
    }

    #[test]
    fn hysteresis_blocks_an_immediate_reversal_at_the_plain_threshold() {
        // 0.85 helpful lowers normally, but right after a raise it must exceed 0.85.
        let plain = counts(17, 3, 0, 0);
        assert!(decide(0.3, plain, Some(Direction::Lower), &settings()).is_some());
        assert_eq!(
            decide(0.3, plain, Some(Direction::Raise), &settings()),
            None
        );
        let beyond = counts(18, 2, 0, 0); // 0.90
        let step = decide(0.3, beyond, Some(Direction::Raise), &settings()).unwrap();
        assert_eq!(step.direction, Direction::Lower);
        // After a lower, raising needs > 0.65 negative.
        assert_eq!(
            decide(
                0.3,
                counts(7, 0, 13, 0),
                Some(Direction::Lower),
                &settings()
            ),
            None
        );
        let step = decide(
            0.3,
            counts(6, 0, 14, 0),
            Some(Direction::Lower),
            &settings(),
        )
        .unwrap();
        assert_eq!(step.direction, Direction::Raise);
    }

    #[test]
    fn clamps_to_the_band() {
        let s = settings();
        let up = decide(0.79, counts(0, 0, 20, 0), None, &s).unwrap();
        assert_eq!(up.to, 0.8);
        assert_eq!(decide(0.8, counts(0, 0, 20, 0), None, &s), None);
        let down = decide(0.11, counts(20, 0, 0, 0), None, &s).unwrap();
        assert_eq!(down.to, 0.1);
        assert_eq!(decide(0.1, counts(20, 0, 0, 0), None, &s), None);
        // A threshold left outside the band by a config change comes back in.
        let back = decide(0.95, counts(0, 0, 20, 0), None, &s).unwrap();
        assert_eq!(back.to, 0.8);
    }
}
