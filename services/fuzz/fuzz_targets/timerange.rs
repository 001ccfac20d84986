//! Relative-time parser: `mneme_core::timerange::{parse_bound, parse_range}`
//! (recall's `timeRange`), English and Korean expressions.
//!
//! Input: UTF-8 text `NOW\nFROM\nTO`. `NOW` is Unix milliseconds, folded into
//! the range chrono can represent (unreadable: 2026-11-18T15:30:00Z); `FROM`
//! and `TO` are the two expressions (a missing line is an open end). Any
//! other bytes are used as a single expression against the reference time.
//!
//! Properties: no panic for any expression and any `now`; each expression's
//! start is not after its end; an accepted range has `from <= to`; results
//! format as RFC 3339 (they are within chrono's range).
#![no_main]

use chrono::{DateTime, TimeZone, Utc};
use libfuzzer_sys::fuzz_target;
use mneme_core::timerange::{Bound, parse_bound, parse_range};

fn reference() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 18, 15, 30, 0).unwrap()
}

/// Any `i64` mapped onto an instant chrono can hold.
fn now_from(text: &str) -> DateTime<Utc> {
    let Ok(ms) = text.trim().parse::<i64>() else {
        return reference();
    };
    let min = DateTime::<Utc>::MIN_UTC.timestamp_millis();
    let max = DateTime::<Utc>::MAX_UTC.timestamp_millis();
    let folded = if (min..=max).contains(&ms) {
        ms
    } else {
        min + ms.rem_euclid(max - min + 1)
    };
    DateTime::<Utc>::from_timestamp_millis(folded).expect("folded into chrono's range")
}

fn check_bound(expression: &str, now: DateTime<Utc>) {
    let start = parse_bound(expression, Bound::Start, now);
    let end = parse_bound(expression, Bound::End, now);
    assert_eq!(start.is_ok(), end.is_ok(), "{expression:?}: one end only");
    if let (Ok(start), Ok(end)) = (start, end) {
        assert!(start <= end, "{expression:?}: {start} after {end}");
        let _ = (start.to_rfc3339(), end.to_rfc3339());
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut lines = text.splitn(3, '\n');
    let (now, from, to) = match (lines.next(), lines.next(), lines.next()) {
        (Some(now), Some(from), to) => (now_from(now), Some(from), to),
        _ => (reference(), Some(text), None),
    };
    for expression in [from, to].into_iter().flatten() {
        check_bound(expression, now);
    }
    if let Ok((Some(from), Some(to))) = parse_range(from, to, now) {
        assert!(from <= to, "accepted range {from} > {to}");
    }
});
