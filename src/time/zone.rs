//! Time zones for calendar periods (TZ): pure. A zone is a fixed offset
//! from UTC, or an IANA zone's daylight-saving rule from the generated
//! table (`tzdb.rs`, `make tzdb`): a standard and a daylight offset and the
//! two yearly changes between them, as the POSIX TZ rule in the zone's TZif
//! file gives them. Local midnights become instants as the first instant
//! whose local time is at or after them: in a spring-forward gap, the
//! change itself; in a fall-back overlap, the earlier instant.
//!
//! The types the table is written in, and their arithmetic; what reads the
//! table (`Zone::kind`, `Zone::named`) is `tz.rs`, so the table imports
//! this file and this file nothing but `civil.rs`.

use super::civil::{civil_from_days, days_from_civil, MS_PER_DAY};

/// Where CALENDAR's boundaries fall: a fixed offset (ms east of UTC, less
/// than a day either way), or a rule of the generated table, held as
/// `i32::MIN` plus its index. One i32, as the offset alone was: the hot
/// path copies the policies that hold it (make budget).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Zone(
    /// The raw value: `tz.rs` reads it against the table.
    pub(super) i32,
);

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
    /// `tz::parse_offset` gives).
    pub const fn fixed(offset_ms: i32) -> Zone {
        assert!(offset_ms > -86_400_000 && offset_ms < 86_400_000);
        Zone(offset_ms)
    }

    /// Rule `index` of the generated table.
    pub const fn rule(index: u16) -> Zone {
        Zone(i32::MIN + index as i32)
    }
}

/// The year (proleptic Gregorian) of a day since 1970-01-01.
fn year_of(day: i64) -> i64 {
    civil_from_days(day).0
}

impl Change {
    /// The instant (UTC ms) of this change in `year`, where `before` is
    /// the offset in force until it.
    fn at(&self, year: i64, before: i32) -> i64 {
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
