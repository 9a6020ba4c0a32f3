//! TZ's values, read against the generated table (`tzdb.rs`): a fixed
//! offset (`+05:30`) or an IANA name (`Europe/Berlin`), and a `Zone`'s
//! rule looked up by its index. The table's reader: it imports the table
//! and the types it is written in (`zone.rs`), and nothing imports it back.

use super::tzdb::{RULES, ZONES};
use super::zone::{Kind, Zone};

/// What TZ's value must be, for errors.
pub const OFFSET_FORM: &str =
    "a fixed offset from UTC such as +05:30 or -08:00, or an IANA zone name such as Europe/Berlin";

impl Zone {
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
/// the generated table spells it (`Zone::named`).
pub fn parse_zone(text: &[u8]) -> Option<Zone> {
    match parse_offset(text) {
        Some(offset) => Some(Zone::fixed(offset)),
        None => Zone::named(text),
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
}
