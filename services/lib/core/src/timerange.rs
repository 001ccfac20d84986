//! Time expressions for `recall`'s `timeRange`: RFC 3339 instants, ISO
//! dates, and relative expressions in English and Korean, resolved against
//! a reference time in UTC.
//!
//! An expression names a period ("yesterday", "last week", "3일 전", "the
//! last 2 hours"); a range's `from` takes the period's start and its `to`
//! the period's end, so `{from: "last week", to: "last week"}` covers the
//! whole week and `{from: "last 2 hours"}` the two hours up to now.
//!
//! Recognised (case-insensitive, surrounding space ignored):
//! - `2024-05-01`, `2024-05-01T10:00:00Z`, and date-times without an
//!   offset (`2024-05-01T10:00`, `2024-05-01 10:00:00`), read as UTC
//! - `now`, `today`, `yesterday`, `the day before yesterday`
//! - `N unit(s) ago` for seconds, minutes, hours, days, weeks, months and
//!   years: the one unit that holds that moment (`3 days ago` is that
//!   whole day, `2 hours ago` that clock hour)
//! - `last|past N units`, `the last|past N units`, `past unit`, `last
//!   hour|minute`: the window of that length ending now (`last week` and
//!   `last month|year` stay the calendar period before this one)
//! - `this|last week|month|year`, `last monday` … `last sunday`
//! - `오늘`, `어제`, `그제`/`그저께`, `N초|분|시간|일|주|개월|달|년 전`, `지난|최근 N시간|일|…`
//!   (the window ending now; `간` and `동안` may follow), `이번 주`,
//!   `지난 주`/`지난주`, `이번 달`, `지난 달`/`지난달`, `올해`, `작년`,
//!   `지난 월요일` … `지난 일요일`

use chrono::{
    DateTime, Datelike, Days, DurationRound, Months, NaiveDate, NaiveDateTime, NaiveTime,
    TimeDelta, TimeZone, Utc, Weekday,
};

use crate::error::{Error, Result};

/// Which end of a named period an expression stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    Start,
    End,
}

/// A closed period `[start, end)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Period {
    start: DateTime<Utc>,
    end: DateTime<Utc>,
}

fn day_start(date: NaiveDate) -> DateTime<Utc> {
    Utc.from_utc_datetime(&date.and_time(NaiveTime::MIN))
}

// Every helper below returns `None` when a date would leave chrono's range
// (about ±262,000 years): "4294967295 days ago" is unreadable, not a panic.

fn days_back(date: NaiveDate, days: u64) -> Option<NaiveDate> {
    date.checked_sub_days(Days::new(days))
}

fn day(date: NaiveDate) -> Option<Period> {
    Some(Period {
        start: day_start(date),
        end: day_start(date.succ_opt()?),
    })
}

fn week_of(date: NaiveDate) -> Option<Period> {
    let monday = days_back(date, u64::from(date.weekday().num_days_from_monday()))?;
    Some(Period {
        start: day_start(monday),
        end: day_start(monday.checked_add_days(Days::new(7))?),
    })
}

fn month_of(date: NaiveDate) -> Option<Period> {
    let first = date.with_day(1)?;
    Some(Period {
        start: day_start(first),
        end: day_start(first.checked_add_months(Months::new(1))?),
    })
}

fn year_of(year: i32) -> Option<Period> {
    Some(Period {
        start: day_start(NaiveDate::from_ymd_opt(year, 1, 1)?),
        end: day_start(NaiveDate::from_ymd_opt(year.checked_add(1)?, 1, 1)?),
    })
}

fn months_back(date: NaiveDate, months: u32) -> Option<NaiveDate> {
    date.checked_sub_months(Months::new(months))
}

fn weekday(name: &str) -> Option<Weekday> {
    Some(match name {
        "monday" | "월요일" => Weekday::Mon,
        "tuesday" | "화요일" => Weekday::Tue,
        "wednesday" | "수요일" => Weekday::Wed,
        "thursday" | "목요일" => Weekday::Thu,
        "friday" | "금요일" => Weekday::Fri,
        "saturday" | "토요일" => Weekday::Sat,
        "sunday" | "일요일" => Weekday::Sun,
        _ => return None,
    })
}

/// The most recent `target` strictly before `today`.
fn last_weekday(today: NaiveDate, target: Weekday) -> Option<NaiveDate> {
    let mut date = today.pred_opt()?;
    while date.weekday() != target {
        date = date.pred_opt()?;
    }
    Some(date)
}

/// A unit of time in an expression.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unit {
    Second,
    Minute,
    Hour,
    Day,
    Week,
    Month,
    Year,
}

impl Unit {
    fn parse(word: &str) -> Option<Self> {
        Some(match word {
            "second" | "seconds" | "sec" | "secs" | "초" => Self::Second,
            "minute" | "minutes" | "min" | "mins" | "분" => Self::Minute,
            "hour" | "hours" | "hr" | "hrs" | "시간" => Self::Hour,
            "day" | "days" | "일" => Self::Day,
            "week" | "weeks" | "주" => Self::Week,
            "month" | "months" | "개월" | "달" => Self::Month,
            "year" | "years" | "년" => Self::Year,
            _ => return None,
        })
    }

    /// The length of a unit shorter than a day.
    fn clock_length(self) -> Option<TimeDelta> {
        match self {
            Self::Second => Some(TimeDelta::seconds(1)),
            Self::Minute => Some(TimeDelta::minutes(1)),
            Self::Hour => Some(TimeDelta::hours(1)),
            _ => None,
        }
    }
}

/// `count` units before `now` (`None` outside chrono's range).
fn before(now: DateTime<Utc>, count: u32, unit: Unit) -> Option<DateTime<Utc>> {
    match unit {
        Unit::Second | Unit::Minute | Unit::Hour => now.checked_sub_signed(
            unit.clock_length()?
                .checked_mul(i32::try_from(count).ok()?)?,
        ),
        Unit::Day => now.checked_sub_days(Days::new(u64::from(count))),
        Unit::Week => now.checked_sub_days(Days::new(u64::from(count) * 7)),
        Unit::Month => now.checked_sub_months(Months::new(count)),
        Unit::Year => now.checked_sub_months(Months::new(count.checked_mul(12)?)),
    }
}

/// "N unit(s) ago" and "N단위 전": the one unit holding that moment (that
/// clock hour, that day, that week, …).
fn ago(count: u32, unit: Unit, now: DateTime<Utc>) -> Option<Period> {
    let today = now.date_naive();
    match unit {
        Unit::Second | Unit::Minute | Unit::Hour => {
            let length = unit.clock_length()?;
            let start = before(now, count, unit)?.duration_trunc(length).ok()?;
            Some(Period {
                start,
                end: start.checked_add_signed(length)?,
            })
        }
        Unit::Day => day(days_back(today, u64::from(count))?),
        Unit::Week => week_of(days_back(today, u64::from(count) * 7)?),
        Unit::Month => month_of(months_back(today, count)?),
        Unit::Year => year_of(today.year().checked_sub(i32::try_from(count).ok()?)?),
    }
}

/// "the last N units" and "최근 N단위": the window of that length ending now.
fn within(count: u32, unit: Unit, now: DateTime<Utc>) -> Option<Period> {
    Some(Period {
        start: before(now, count, unit)?,
        end: now,
    })
}

/// A count and its unit, written together (`3일`, `2시간`, `3일간`) or
/// apart (`3 일`).
fn counted(count: &str, unit: Option<&str>) -> Option<(u32, Unit)> {
    let (count, unit) = match unit {
        Some(unit) => (count, unit),
        None => count.split_at(count.find(|c: char| !c.is_ascii_digit())?),
    };
    let unit = Unit::parse(unit).or_else(|| Unit::parse(unit.strip_suffix('간')?))?;
    Some((count.parse().ok()?, unit))
}

fn parse_period(expression: &str, now: DateTime<Utc>) -> Option<Period> {
    let today = now.date_naive();
    let text: String = expression.trim().to_lowercase();
    let compact: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match compact.as_str() {
        "now" | "지금" => {
            return Some(Period {
                start: now,
                end: now,
            });
        }
        "today" | "오늘" => return day(today),
        "yesterday" | "어제" => return day(today.pred_opt()?),
        "the day before yesterday" | "그제" | "그저께" => return day(days_back(today, 2)?),
        "this week" | "이번 주" | "이번주" => return week_of(today),
        "last week" | "지난 주" | "지난주" => return week_of(days_back(today, 7)?),
        "this month" | "이번 달" | "이번달" => return month_of(today),
        "last month" | "지난 달" | "지난달" => return month_of(months_back(today, 1)?),
        "this year" | "올해" => return year_of(today.year()),
        "last year" | "작년" | "지난해" => return year_of(today.year().checked_sub(1)?),
        _ => {}
    }
    let mut words: Vec<&str> = compact.split(' ').collect();
    if words.len() > 1 && words.last() == Some(&"동안") {
        words.pop();
    }
    if words.first() == Some(&"the") && matches!(words.get(1), Some(&("last" | "past"))) {
        words.remove(0);
    }
    match words.as_slice() {
        [count, unit, "ago"] => ago(count.parse().ok()?, Unit::parse(unit)?, now),
        [amount, "전"] => {
            let (count, unit) = counted(amount, None)?;
            ago(count, unit, now)
        }
        [count, unit, "전"] => {
            let (count, unit) = counted(count, Some(unit))?;
            ago(count, unit, now)
        }
        ["last" | "past", count, unit] => within(count.parse().ok()?, Unit::parse(unit)?, now),
        ["지난" | "최근", count, unit] => {
            let (count, unit) = counted(count, Some(unit))?;
            within(count, unit, now)
        }
        ["past", unit] => within(1, Unit::parse(unit)?, now),
        ["last", unit @ ("hour" | "minute")] => within(1, Unit::parse(unit)?, now),
        ["last" | "지난", name] if weekday(name).is_some() => {
            day(last_weekday(today, weekday(name)?)?)
        }
        ["지난" | "최근", amount] => {
            let (count, unit) = counted(amount, None)?;
            within(count, unit, now)
        }
        _ => None,
    }
}

/// A date and time without an offset (`2024-05-01T10:00`, `2024-05-01
/// 10:00:00.5`), as agents often write them: read as UTC.
fn naive_date_time(text: &str) -> Option<DateTime<Utc>> {
    [
        "%Y-%m-%dT%H:%M:%S%.f",
        "%Y-%m-%d %H:%M:%S%.f",
        "%Y-%m-%dT%H:%M",
        "%Y-%m-%d %H:%M",
    ]
    .iter()
    .find_map(|format| NaiveDateTime::parse_from_str(text, format).ok())
    .map(|naive| Utc.from_utc_datetime(&naive))
}

/// Resolves one end of a time range.
pub fn parse_bound(expression: &str, bound: Bound, now: DateTime<Utc>) -> Result<DateTime<Utc>> {
    let trimmed = expression.trim();
    if let Ok(instant) = DateTime::parse_from_rfc3339(trimmed) {
        return Ok(instant.with_timezone(&Utc));
    }
    if let Some(instant) = naive_date_time(trimmed) {
        return Ok(instant);
    }
    if let Ok(date) = NaiveDate::parse_from_str(trimmed, "%Y-%m-%d")
        && let Some(period) = day(date)
    {
        return Ok(match bound {
            Bound::Start => period.start,
            Bound::End => period.end,
        });
    }
    let period = parse_period(trimmed, now).ok_or_else(|| {
        Error::invalid_argument(format!(
            "cannot read the time `{trimmed}`: use an RFC 3339 time, a date (2024-05-01), or \
             expressions such as `yesterday`, `3 days ago`, `last 2 hours`, `last week`, `어제`, \
             `3일 전`, `최근 2시간`, `지난주`"
        ))
    })?;
    Ok(match bound {
        Bound::Start => period.start,
        Bound::End => period.end,
    })
}

/// A resolved `{from, to}`; either end may be open.
pub type Range = (Option<DateTime<Utc>>, Option<DateTime<Utc>>);

/// Resolves a `{from, to}` pair; either end may be absent.
pub fn parse_range(from: Option<&str>, to: Option<&str>, now: DateTime<Utc>) -> Result<Range> {
    let from = from
        .filter(|f| !f.trim().is_empty())
        .map(|f| parse_bound(f, Bound::Start, now))
        .transpose()?;
    let to = to
        .filter(|t| !t.trim().is_empty())
        .map(|t| parse_bound(t, Bound::End, now))
        .transpose()?;
    if let (Some(from), Some(to)) = (from, to)
        && from > to
    {
        return Err(Error::invalid_argument(
            "timeRange.from is after timeRange.to",
        ));
    }
    Ok((from, to))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Wednesday 2026-11-18, 15:30 UTC.
    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 18, 15, 30, 0).unwrap()
    }

    fn at(y: i32, m: u32, d: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(y, m, d, 0, 0, 0).unwrap()
    }

    fn range(from: &str, to: &str) -> (DateTime<Utc>, DateTime<Utc>) {
        let (f, t) = parse_range(Some(from), Some(to), now()).unwrap();
        (f.unwrap(), t.unwrap())
    }

    #[test]
    fn english_and_korean_name_the_same_periods() {
        assert_eq!(
            range("yesterday", "yesterday"),
            (at(2026, 11, 17), at(2026, 11, 18))
        );
        assert_eq!(range("어제", "어제"), range("yesterday", "yesterday"));
        assert_eq!(
            range("그저께", "그제"),
            range("the day before yesterday", "the day before yesterday")
        );
        assert_eq!(
            range("last week", "last week"),
            (at(2026, 11, 9), at(2026, 11, 16))
        );
        assert_eq!(range("지난주", "지난 주"), range("last week", "last week"));
        assert_eq!(
            range("this month", "this month"),
            (at(2026, 11, 1), at(2026, 12, 1))
        );
        assert_eq!(
            range("지난달", "지난 달"),
            (at(2026, 10, 1), at(2026, 11, 1))
        );
        assert_eq!(range("작년", "last year"), (at(2025, 1, 1), at(2026, 1, 1)));
    }

    #[test]
    fn counted_expressions_and_weekdays() {
        assert_eq!(
            range("3 days ago", "3 days ago"),
            (at(2026, 11, 15), at(2026, 11, 16))
        );
        assert_eq!(
            range("3일 전", "3 일 전"),
            range("3 days ago", "3 days ago")
        );
        assert_eq!(
            range("2 months ago", "2개월 전"),
            (at(2026, 9, 1), at(2026, 10, 1))
        );
        assert_eq!(range("1주 전", "1 week ago").0, at(2026, 11, 9));
        assert_eq!(
            range("last monday", "지난 월요일"),
            (at(2026, 11, 16), at(2026, 11, 17))
        );
        // "last wednesday" on a Wednesday is a week ago, not today.
        assert_eq!(
            range("last wednesday", "last wednesday").0,
            at(2026, 11, 11)
        );
    }

    #[test]
    fn absolute_times_and_open_ends() {
        assert_eq!(
            range("2024-05-01", "2024-05-01"),
            (at(2024, 5, 1), at(2024, 5, 2))
        );
        let (from, to) = parse_range(Some("2024-05-01T10:00:00+02:00"), None, now()).unwrap();
        assert_eq!(
            from,
            Some(Utc.with_ymd_and_hms(2024, 5, 1, 8, 0, 0).unwrap())
        );
        assert_eq!(to, None);
        assert_eq!(
            parse_range(None, Some("now"), now()).unwrap().1,
            Some(now())
        );
    }

    fn at_time(h: u32, m: u32, s: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 18, h, m, s).unwrap()
    }

    #[test]
    fn hours_minutes_and_seconds_ago_name_that_clock_unit() {
        assert_eq!(
            range("2 hours ago", "2 hours ago"),
            (at_time(13, 0, 0), at_time(14, 0, 0))
        );
        assert_eq!(
            range("2시간 전", "2 시간 전"),
            range("2 hours ago", "2 hours ago")
        );
        assert_eq!(
            range("30 minutes ago", "30분 전"),
            (at_time(15, 0, 0), at_time(15, 1, 0))
        );
        assert_eq!(
            range("1 hr ago", "1 min ago"),
            (at_time(14, 0, 0), at_time(15, 30, 0))
        );
        assert_eq!(range("45초 전", "45 seconds ago").0, at_time(15, 29, 15));
    }

    #[test]
    fn the_last_n_units_is_the_window_ending_now() {
        assert_eq!(range("last 2 hours", "now"), (at_time(13, 30, 0), now()));
        assert_eq!(
            range("the past 2 hours", "최근 2시간"),
            range("last 2 hours", "now")
        );
        assert_eq!(
            range("past 3 days", "past 3 days"),
            (
                Utc.with_ymd_and_hms(2026, 11, 15, 15, 30, 0).unwrap(),
                now()
            )
        );
        for korean in [
            "최근 3일",
            "지난 3일",
            "최근 3일간",
            "지난 3일 동안",
            "최근 3 일",
        ] {
            assert_eq!(
                range(korean, korean),
                range("past 3 days", "past 3 days"),
                "{korean}"
            );
        }
        assert_eq!(range("past hour", "last hour"), range("last 1 hour", "now"));
        assert_eq!(range("past hour", "now").0, at_time(14, 30, 0));
        assert_eq!(
            range("past 2 months", "now").0,
            Utc.with_ymd_and_hms(2026, 9, 18, 15, 30, 0).unwrap()
        );
        assert_eq!(
            range("the last 2 weeks", "now").0,
            Utc.with_ymd_and_hms(2026, 11, 4, 15, 30, 0).unwrap()
        );
        // The calendar periods keep their meaning.
        assert_eq!(range("last week", "last week").0, at(2026, 11, 9));
        assert_eq!(range("last monday", "last monday").0, at(2026, 11, 16));
        assert_eq!(range("지난 월요일", "지난 월요일").0, at(2026, 11, 16));
    }

    #[test]
    fn date_times_without_an_offset_are_utc() {
        let ten = Utc.with_ymd_and_hms(2024, 5, 1, 10, 0, 0).unwrap();
        for text in [
            "2024-05-01T10:00",
            "2024-05-01 10:00",
            "2024-05-01T10:00:00",
            "2024-05-01 10:00:00",
        ] {
            assert_eq!(
                parse_bound(text, Bound::Start, now()).unwrap(),
                ten,
                "{text}"
            );
        }
        assert_eq!(
            parse_bound("2024-05-01T10:00:00.250", Bound::End, now()).unwrap(),
            ten + TimeDelta::milliseconds(250)
        );
        assert!(parse_bound("2024-05-01T25:00", Bound::Start, now()).is_err());
    }

    /// Fuzz case (timerange target): `1790407950년 전` panicked with "valid
    /// year"; counts that leave chrono's range are unreadable, not a panic.
    #[test]
    fn fuzz_huge_counts_are_unreadable() {
        for expression in [
            "1790407950년 전",
            "4294967295 years ago",
            "2147483648 years ago",
            "4294967295 days ago",
            "4294967295일 전",
            "4294967295 weeks ago",
            "4294967295 months ago",
            "4294967295개월 전",
            "4294967295 hours ago",
            "4294967295시간 전",
            "last 4294967295 years",
            "past 4294967295 seconds",
            "최근 4294967295년",
            "지난 4294967295분",
        ] {
            let err = parse_range(Some(expression), None, now()).unwrap_err();
            assert!(err.message.contains("cannot read the time"), "{expression}");
        }
        assert_eq!(
            range("262000 years ago", "262000 years ago").0,
            at(2026 - 262000, 1, 1)
        );
    }

    /// Fuzz case (timerange target): every expression at the edges of
    /// chrono's range (a `now` at its first or last day, a date at its last
    /// day) answers or is unreadable, and never panics.
    #[test]
    fn fuzz_edges_of_chronos_range_do_not_panic() {
        let expressions = [
            "now",
            "today",
            "yesterday",
            "the day before yesterday",
            "this week",
            "last week",
            "this month",
            "last month",
            "this year",
            "last year",
            "last monday",
            "1 day ago",
            "1 week ago",
            "1 month ago",
            "1 year ago",
            "1 hour ago",
            "1 second ago",
            "last 1 hour",
            "past year",
            "최근 3일",
        ];
        for now in [DateTime::<Utc>::MIN_UTC, DateTime::<Utc>::MAX_UTC] {
            for expression in expressions {
                for bound in [Bound::Start, Bound::End] {
                    let _ = parse_bound(expression, bound, now);
                }
            }
        }
        let last_day = NaiveDate::MAX.format("%Y-%m-%d").to_string();
        assert!(parse_bound(&last_day, Bound::End, now()).is_err());
        assert_eq!(
            parse_bound("today", Bound::Start, DateTime::<Utc>::MIN_UTC).unwrap(),
            DateTime::<Utc>::MIN_UTC
        );
        assert!(parse_bound("yesterday", Bound::Start, DateTime::<Utc>::MIN_UTC).is_err());
        assert!(parse_bound("this year", Bound::End, DateTime::<Utc>::MAX_UTC).is_err());
    }

    #[test]
    fn nonsense_and_reversed_ranges_are_explained() {
        let err = parse_range(Some("sometime soon"), None, now()).unwrap_err();
        assert!(err.message.contains("cannot read the time `sometime soon`"));
        let err = parse_range(Some("today"), Some("last week"), now()).unwrap_err();
        assert!(err.message.contains("after"));
    }
}
