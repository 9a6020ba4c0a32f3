//! Calendar periods (CALENDAR day|week|month|year, TZ): pure. Where the
//! period that holds an instant starts and ends, in a zone given as a
//! fixed offset from UTC or an IANA name (`zone.rs`; a daylight-saving day
//! is 23 or 25 hours long). Weeks start on Monday (ISO 8601); months and years have their
//! real lengths, leap years included (the proleptic Gregorian calendar).

/// A calendar period.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Period {
    Day,
    Week,
    Month,
    Year,
}

/// The periods' names, as CALENDAR takes them (any case) and COMMAND
/// DOCS shows them.
pub const PERIODS: [(&CStr, Period); 4] = [
    (c"day", Period::Day),
    (c"week", Period::Week),
    (c"month", Period::Month),
    (c"year", Period::Year),
];

/// What CALENDAR's value must be, for errors.
pub const PERIOD_NAMES: &str = "one of day, week, month, year";
/// What TZ's value must be, for errors.
pub const OFFSET_FORM: &str =
    "a fixed offset from UTC such as +05:30 or -08:00, or an IANA zone name such as Europe/Berlin";

const MS_PER_DAY: i64 = 86_400_000;

use std::ffi::CStr;

pub use super::zone::Zone;
use super::zone::{Kind, Rule};

impl Period {
    pub fn parse(word: &[u8]) -> Option<Period> {
        PERIODS
            .iter()
            .find(|(name, _)| word.eq_ignore_ascii_case(name.to_bytes()))
            .map(|&(_, p)| p)
    }
}

/// A TZ offset, `+HH:MM` or `-HH:MM` (00 to 23 hours, 00 to 59 minutes), in
/// ms east of UTC (at most a day: an i32).
pub fn parse_offset(text: &[u8]) -> Option<i32> {
    let &[sign, h1, h2, b':', m1, m2] = text else {
        return None;
    };
    let digit = |b: u8| b.is_ascii_digit().then(|| i32::from(b - b'0'));
    let (hours, minutes) = (digit(h1)? * 10 + digit(h2)?, digit(m1)? * 10 + digit(m2)?);
    if hours > 23 || minutes > 59 {
        return None;
    }
    let ms = (hours * 60 + minutes) * 60_000;
    match sign {
        b'+' => Some(ms),
        b'-' => Some(-ms),
        _ => None,
    }
}

/// A TZ value: a fixed offset (`parse_offset`), or an IANA zone name as
/// the generated table spells it (`zone.rs`).
pub fn parse_zone(text: &[u8]) -> Option<Zone> {
    match parse_offset(text) {
        Some(offset) => Some(Zone::fixed(offset)),
        None => Zone::named(text),
    }
}

/// Days since 1970-01-01 of a civil date (H. Hinnant's `days_from_civil`).
pub fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The civil date (year, month, day) of a day since 1970-01-01.
pub fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// The local day a `period` holding local day `day` starts on.
#[inline(always)]
fn start_day(period: Period, day: i64) -> i64 {
    match period {
        Period::Day => day,
        // 1970-01-01 was a Thursday: Monday is day 4 of that week.
        Period::Week => day - (day + 3).rem_euclid(7),
        Period::Month => {
            let (y, m, _) = civil_from_days(day);
            days_from_civil(y, m, 1)
        }
        Period::Year => days_from_civil(civil_from_days(day).0, 1, 1),
    }
}

/// The local day after the `period` holding local day `day`.
#[inline(always)]
fn end_day(period: Period, day: i64) -> i64 {
    match period {
        Period::Day => day + 1,
        Period::Week => day - (day + 3).rem_euclid(7) + 7,
        Period::Month => {
            let (y, m, _) = civil_from_days(day);
            match m {
                12 => days_from_civil(y + 1, 1, 1),
                _ => days_from_civil(y, m + 1, 1),
            }
        }
        Period::Year => days_from_civil(civil_from_days(day).0 + 1, 1, 1),
    }
}

/// The end (absolute ms, exclusive) of the `period` that holds `now_ms`,
/// in `zone`: the next boundary after now. `now_ms` is a server clock (0
/// to about 2^62): nothing here overflows.
pub fn period_end(period: Period, zone: Zone, now_ms: i64) -> i64 {
    match zone.kind() {
        Kind::Fixed(offset_ms) => {
            let offset_ms = i64::from(offset_ms);
            let day = (now_ms + offset_ms).div_euclid(MS_PER_DAY);
            end_day(period, day) * MS_PER_DAY - offset_ms
        }
        Kind::Rule(rule) => rule_bounds(period, rule, now_ms).1,
    }
}

/// The start (absolute ms, inclusive) of the `period` that holds `now_ms`,
/// in `zone`: the last boundary at or before now.
pub fn period_start(period: Period, zone: Zone, now_ms: i64) -> i64 {
    match zone.kind() {
        Kind::Fixed(offset_ms) => {
            let offset_ms = i64::from(offset_ms);
            let day = (now_ms + offset_ms).div_euclid(MS_PER_DAY);
            start_day(period, day) * MS_PER_DAY - offset_ms
        }
        Kind::Rule(rule) => rule_bounds(period, rule, now_ms).0,
    }
}

/// The start and end of the `period` holding `now_ms` under a
/// daylight-saving rule: the local midnights that start the local day at
/// now's period and the next, each at its first instant (`zone.rs`); were
/// the end at or before now (a fall-back over midnight, which today's
/// rules never do), the period is the next one.
#[cold]
fn rule_bounds(period: Period, rule: &Rule, now_ms: i64) -> (i64, i64) {
    let day = (now_ms + i64::from(rule.offset_at(now_ms))).div_euclid(MS_PER_DAY);
    let end = end_day(period, day);
    let at = |day: i64| rule.first_at_or_after(day * MS_PER_DAY);
    let (start_ms, end_ms) = (at(start_day(period, day)), at(end));
    match end_ms <= now_ms {
        true => (end_ms, at(end_day(period, end))),
        false => (start_ms, end_ms),
    }
}

/// The periods a sliding window over calendar periods sees at `now_ms`:
/// the previous period's start, the current one's start and end, and the
/// next one's end. Each period has its own length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Periods {
    pub previous_start: i64,
    pub start: i64,
    pub end: i64,
    pub next_end: i64,
}

/// See `Periods`.
pub fn periods(period: Period, zone: Zone, now_ms: i64) -> Periods {
    let start = period_start(period, zone, now_ms);
    let end = period_end(period, zone, now_ms);
    Periods {
        previous_start: period_start(period, zone, start - 1),
        start,
        end,
        next_end: period_end(period, zone, end),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const UTC: Zone = Zone::UTC;

    /// ms of a UTC date and time.
    fn at(y: i64, mo: i64, d: i64, h: i64, mi: i64, s: i64, ms: i64) -> i64 {
        days_from_civil(y, mo, d) * MS_PER_DAY + ((h * 60 + mi) * 60 + s) * 1000 + ms
    }

    #[test]
    fn the_next_boundary_at_chosen_instants() {
        let leap_feb_end = at(2024, 2, 29, 23, 59, 59, 999);
        assert_eq!(
            period_end(Period::Day, UTC, leap_feb_end),
            at(2024, 3, 1, 0, 0, 0, 0)
        );
        assert_eq!(
            period_end(Period::Month, UTC, leap_feb_end),
            at(2024, 3, 1, 0, 0, 0, 0)
        );
        assert_eq!(
            period_end(Period::Year, UTC, leap_feb_end),
            at(2025, 1, 1, 0, 0, 0, 0)
        );
        // 2024-02-29 was a Thursday: the week ends on Monday 2024-03-04.
        assert_eq!(
            period_end(Period::Week, UTC, leap_feb_end),
            at(2024, 3, 4, 0, 0, 0, 0)
        );
        let year_end = at(2025, 12, 31, 23, 59, 59, 999);
        assert_eq!(
            period_end(Period::Year, UTC, year_end),
            at(2026, 1, 1, 0, 0, 0, 0)
        );
        assert_eq!(
            period_end(Period::Month, UTC, year_end),
            at(2026, 1, 1, 0, 0, 0, 0)
        );
        // Sunday 2025-03-16 23:59:59.999: the week ends a ms later.
        let sunday = at(2025, 3, 16, 23, 59, 59, 999);
        assert_eq!(period_end(Period::Week, UTC, sunday), sunday + 1);
        // A Monday's first ms starts a week of its own.
        assert_eq!(
            period_end(Period::Week, UTC, sunday + 1),
            sunday + 1 + 7 * MS_PER_DAY
        );
        // Offsets of both signs: local midnight, in UTC.
        let ist = Zone::fixed(parse_offset(b"+05:30").unwrap());
        let pst = Zone::fixed(parse_offset(b"-08:00").unwrap());
        assert_eq!(
            period_end(Period::Day, ist, at(2024, 2, 29, 18, 29, 59, 999)),
            at(2024, 2, 29, 18, 30, 0, 0)
        );
        assert_eq!(
            period_end(Period::Day, ist, at(2024, 2, 29, 18, 30, 0, 0)),
            at(2024, 3, 1, 18, 30, 0, 0)
        );
        assert_eq!(
            period_end(Period::Month, pst, at(2024, 3, 1, 7, 59, 59, 999)),
            at(2024, 3, 1, 8, 0, 0, 0)
        );
        assert_eq!(
            period_end(Period::Year, pst, at(2025, 1, 1, 7, 0, 0, 0)),
            at(2025, 1, 1, 8, 0, 0, 0)
        );
        // February of a common year, and of a century that is no leap year.
        assert_eq!(
            period_end(Period::Month, UTC, at(2023, 2, 10, 0, 0, 0, 0)),
            at(2023, 3, 1, 0, 0, 0, 0)
        );
        assert_eq!(
            days_from_civil(2100, 3, 1) - days_from_civil(2100, 2, 1),
            28
        );
        assert_eq!(
            days_from_civil(2000, 3, 1) - days_from_civil(2000, 2, 1),
            29
        );
    }

    #[test]
    fn the_periods_around_a_leap_february_end() {
        let ps = periods(Period::Month, UTC, at(2024, 3, 1, 0, 0, 0, 5));
        assert_eq!(ps.previous_start, at(2024, 2, 1, 0, 0, 0, 0));
        assert_eq!(ps.start, at(2024, 3, 1, 0, 0, 0, 0));
        assert_eq!(ps.end, at(2024, 4, 1, 0, 0, 0, 0));
        assert_eq!(ps.next_end, at(2024, 5, 1, 0, 0, 0, 0));
        assert_eq!(ps.start - ps.previous_start, 29 * MS_PER_DAY);
        assert_eq!(ps.end - ps.start, 31 * MS_PER_DAY);
    }

    #[test]
    fn offsets_parse_strictly() {
        assert_eq!(parse_offset(b"+00:00"), Some(0));
        assert_eq!(parse_offset(b"-00:30"), Some(-1_800_000));
        assert_eq!(parse_offset(b"+23:59"), Some((23 * 60 + 59) * 60_000));
        for bad in [
            &b"05:30"[..],
            b"+5:30",
            b"+24:00",
            b"+05:60",
            b"+05-30",
            b"Europe/Berlin",
            b"",
            b"+05:30 ",
        ] {
            assert_eq!(parse_offset(bad), None, "{bad:?}");
        }
    }

    proptest! {
        /// The end is after now, at a local midnight, and at most one
        /// period away; the period holding the end's previous ms is now's.
        #[test]
        fn the_end_is_the_next_boundary(
            now in 0i64..8_000_000_000_000,
            offset_min in -(23 * 60 + 59)..=(23i32 * 60 + 59),
            period in proptest::sample::select(PERIODS.map(|p| p.1).to_vec()),
        ) {
            let zone = Zone::fixed(offset_min * 60_000);
            let end = period_end(period, zone, now);
            prop_assert_eq!(period_end(period, zone, end - 1), end);
            let offset = i64::from(offset_min) * 60_000;
            prop_assert!(end > now);
            prop_assert_eq!((end + offset).rem_euclid(MS_PER_DAY), 0);
            let longest = match period {
                Period::Day => 1, Period::Week => 7, Period::Month => 31, Period::Year => 366,
            };
            prop_assert!(end - now <= longest * MS_PER_DAY);
            let start = period_start(period, zone, now);
            prop_assert!(start <= now);
            prop_assert_eq!(period_end(period, zone, start), end);
            prop_assert_eq!(period_start(period, zone, end - 1), start);
            let ps = periods(period, zone, now);
            prop_assert_eq!(period_end(period, zone, ps.previous_start), start);
            prop_assert_eq!(period_start(period, zone, ps.next_end - 1), end);
            let (y, m, d) = civil_from_days((end + offset).div_euclid(MS_PER_DAY));
            match period {
                Period::Month => prop_assert_eq!(d, 1),
                Period::Year => prop_assert_eq!((m, d), (1, 1)),
                Period::Week => prop_assert_eq!((days_from_civil(y, m, d) + 3).rem_euclid(7), 0),
                Period::Day => {}
            }
        }
    }
}
