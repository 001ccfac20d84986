//! Time expressions for `recall`'s `timeRange`: RFC 3339 instants, ISO
//! dates, and relative expressions in English and Korean, resolved against
//! a reference time in UTC.
//!
//! An expression names a period ("yesterday", "last week", "3일 전"); a
//! range's `from` takes the period's start and its `to` the period's end,
//! so `{from: "last week", to: "last week"}` covers the whole week.
//!
//! Recognised (case-insensitive, surrounding space ignored):
//! - `2024-05-01`, `2024-05-01T10:00:00Z`
//! - `now`, `today`, `yesterday`, `the day before yesterday`
//! - `N day(s)|week(s)|month(s)|year(s) ago`
//! - `this|last week|month|year`, `last monday` … `last sunday`
//! - `오늘`, `어제`, `그제`/`그저께`, `N일|주|개월|달|년 전`, `이번 주`, `지난 주`/`지난주`,
//!   `이번 달`, `지난 달`/`지난달`, `올해`, `작년`, `지난 월요일` … `지난 일요일`

use chrono::{DateTime, Datelike, Duration, NaiveDate, NaiveTime, TimeZone, Utc, Weekday};

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

fn day(date: NaiveDate) -> Period {
    Period {
        start: day_start(date),
        end: day_start(date + Duration::days(1)),
    }
}

fn week_of(date: NaiveDate) -> Period {
    let monday = date - Duration::days(i64::from(date.weekday().num_days_from_monday()));
    Period {
        start: day_start(monday),
        end: day_start(monday + Duration::days(7)),
    }
}

fn month_of(year: i32, month: u32) -> Period {
    let first = NaiveDate::from_ymd_opt(year, month, 1).expect("valid month");
    let next = if month == 12 {
        NaiveDate::from_ymd_opt(year + 1, 1, 1)
    } else {
        NaiveDate::from_ymd_opt(year, month + 1, 1)
    }
    .expect("valid month");
    Period {
        start: day_start(first),
        end: day_start(next),
    }
}

fn year_of(year: i32) -> Period {
    Period {
        start: day_start(NaiveDate::from_ymd_opt(year, 1, 1).expect("valid year")),
        end: day_start(NaiveDate::from_ymd_opt(year + 1, 1, 1).expect("valid year")),
    }
}

fn months_back(date: NaiveDate, months: u32) -> NaiveDate {
    date.checked_sub_months(chrono::Months::new(months))
        .unwrap_or(NaiveDate::MIN)
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
fn last_weekday(today: NaiveDate, target: Weekday) -> NaiveDate {
    let mut date = today - Duration::days(1);
    while date.weekday() != target {
        date -= Duration::days(1);
    }
    date
}

/// "N unit(s) ago" and "N단위 전": the period of that day, week, month or year.
fn ago(count: u32, unit: &str, today: NaiveDate) -> Option<Period> {
    Some(match unit {
        "day" | "days" | "일" => day(today - Duration::days(i64::from(count))),
        "week" | "weeks" | "주" => week_of(today - Duration::weeks(i64::from(count))),
        "month" | "months" | "개월" | "달" => {
            let date = months_back(today, count);
            month_of(date.year(), date.month())
        }
        "year" | "years" | "년" => year_of(today.year() - count as i32),
        _ => return None,
    })
}

fn parse_period(expression: &str, now: DateTime<Utc>) -> Option<Period> {
    let today = now.date_naive();
    let text: String = expression.trim().to_lowercase();
    let compact: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let last_month = months_back(today, 1);
    let fixed = match compact.as_str() {
        "now" | "지금" => Some(Period {
            start: now,
            end: now,
        }),
        "today" | "오늘" => Some(day(today)),
        "yesterday" | "어제" => Some(day(today - Duration::days(1))),
        "the day before yesterday" | "그제" | "그저께" => Some(day(today - Duration::days(2))),
        "this week" | "이번 주" | "이번주" => Some(week_of(today)),
        "last week" | "지난 주" | "지난주" => Some(week_of(today - Duration::weeks(1))),
        "this month" | "이번 달" | "이번달" => Some(month_of(today.year(), today.month())),
        "last month" | "지난 달" | "지난달" => {
            Some(month_of(last_month.year(), last_month.month()))
        }
        "this year" | "올해" => Some(year_of(today.year())),
        "last year" | "작년" | "지난해" => Some(year_of(today.year() - 1)),
        _ => None,
    };
    if fixed.is_some() {
        return fixed;
    }
    let words: Vec<&str> = compact.split(' ').collect();
    match words.as_slice() {
        ["last" | "지난", name] => weekday(name).map(|w| day(last_weekday(today, w))),
        [count, unit, "ago"] => ago(count.parse().ok()?, unit, today),
        [amount, "전"] => {
            let split = amount.find(|c: char| !c.is_ascii_digit())?;
            ago(amount[..split].parse().ok()?, &amount[split..], today)
        }
        [count, unit, "전"] => ago(count.parse().ok()?, unit, today),
        _ => None,
    }
}

/// Resolves one end of a time range.
pub fn parse_bound(expression: &str, bound: Bound, now: DateTime<Utc>) -> Result<DateTime<Utc>> {
    let trimmed = expression.trim();
    if let Ok(instant) = DateTime::parse_from_rfc3339(trimmed) {
        return Ok(instant.with_timezone(&Utc));
    }
    if let Ok(date) = NaiveDate::parse_from_str(trimmed, "%Y-%m-%d") {
        let period = day(date);
        return Ok(match bound {
            Bound::Start => period.start,
            Bound::End => period.end,
        });
    }
    let period = parse_period(trimmed, now).ok_or_else(|| {
        Error::invalid_argument(format!(
            "cannot read the time `{trimmed}`: use an RFC 3339 time, a date (2024-05-01), or \
             expressions such as `yesterday`, `3 days ago`, `last week`, `어제`, `3일 전`, `지난주`"
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

    #[test]
    fn nonsense_and_reversed_ranges_are_explained() {
        let err = parse_range(Some("sometime soon"), None, now()).unwrap_err();
        assert!(err.message.contains("cannot read the time `sometime soon`"));
        let err = parse_range(Some("today"), Some("last week"), now()).unwrap_err();
        assert!(err.message.contains("after"));
    }
}
