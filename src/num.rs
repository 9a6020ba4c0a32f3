//! Integers in and out without temporary strings, with the server's own
//! strictness: optional '-', digits, no '+', no spaces, no leading zeros.

/// Longest decimal i64: "-9223372036854775808".
pub const MAX_DIGITS: usize = 20;

#[inline]
pub fn parse_i64(s: &[u8]) -> Option<i64> {
    let (negative, digits) = match s {
        [b'-', rest @ ..] => (true, rest),
        _ => (false, s),
    };
    if digits.is_empty() || digits.len() > 19 {
        return None;
    }
    if digits[0] == b'0' && (digits.len() > 1 || negative) {
        return None;
    }
    // 19 digits stay below u64::MAX: no overflow until the sign is applied.
    // Eight digits at a time where there are eight, four, then one at a
    // time. At most two chunks of eight, written out: a loop would keep
    // its constants in saved registers, which short numbers pay for too.
    let mut value: u64 = 0;
    let mut rest = digits;
    if let Some((chunk, tail)) = rest.split_first_chunk::<8>() {
        value = eight_digits(*chunk)?;
        rest = tail;
        if let Some((chunk, tail)) = rest.split_first_chunk::<8>() {
            value = value * 100_000_000 + eight_digits(*chunk)?;
            rest = tail;
        }
    }
    if let Some((chunk, tail)) = rest.split_first_chunk::<4>() {
        value = value * 10_000 + four_digits(*chunk)?;
        rest = tail;
    }
    for &b in rest {
        let digit = b.wrapping_sub(b'0');
        if digit > 9 {
            return None;
        }
        value = value * 10 + u64::from(digit);
    }
    if negative {
        // Up to 2^63, which is i64::MIN.
        (value <= i64::MIN.unsigned_abs()).then(|| 0i64.wrapping_sub_unsigned(value))
    } else {
        i64::try_from(value).ok()
    }
}

/// Four ASCII digits as their value, as `eight_digits` does eight.
#[inline]
fn four_digits(chunk: [u8; 4]) -> Option<u64> {
    const EACH: u32 = 0x0101_0101;
    let word = u32::from_le_bytes(chunk);
    let high = word & (0xF0 * EACH);
    let carried = (word.wrapping_add(0x06 * EACH) & (0xF0 * EACH)) >> 4;
    if high | carried != 0x33 * EACH {
        return None;
    }
    let digits = word - 0x30 * EACH;
    let pairs = digits * 10 + (digits >> 8);
    Some(u64::from((pairs & 0xFF) * 100 + ((pairs >> 16) & 0xFF)))
}

/// Eight ASCII digits (the first the most significant) as their value, in
/// a few word operations instead of a loop; `None` if one is not a digit.
#[inline]
fn eight_digits(chunk: [u8; 8]) -> Option<u64> {
    const EACH: u64 = 0x0101_0101_0101_0101;
    let word = u64::from_le_bytes(chunk);
    // Every byte 0x30..=0x39: its high nibble is 3, and adding 6 leaves it 3.
    let high = word & (0xF0 * EACH);
    let carried = (word.wrapping_add(0x06 * EACH) & (0xF0 * EACH)) >> 4;
    if high | carried != 0x33 * EACH {
        return None;
    }
    let digits = word - 0x30 * EACH;
    // Pairs in every other byte (10 * first + second), then the four pairs
    // combined in the high halves of two multiplications.
    let pairs = digits * 10 + (digits >> 8);
    let mask = 0x0000_00FF_0000_00FF;
    let high_pairs = (pairs & mask).wrapping_mul(100 + (1_000_000 << 32));
    let low_pairs = ((pairs >> 16) & mask).wrapping_mul(1 + (10_000 << 32));
    Some(high_pairs.wrapping_add(low_pairs) >> 32)
}

/// "00", "01", ... "99": two digits per division.
const PAIRS: &[u8; 200] = b"\
0001020304050607080910111213141516171819\
2021222324252627282930313233343536373839\
4041424344454647484950515253545556575859\
6061626364656667686970717273747576777879\
8081828384858687888990919293949596979899";

/// Writes `value` into the end of `buf` and returns the digits.
pub fn format_i64(value: i64, buf: &mut [u8; MAX_DIGITS]) -> &[u8] {
    let mut n = value.unsigned_abs();
    let mut at = buf.len();
    // Eight digits at a time in 32-bit arithmetic, which is cheaper.
    while n >= 100_000_000 {
        let mut low = (n % 100_000_000) as u32;
        n /= 100_000_000;
        for _ in 0..4 {
            let pair = (low % 100) as usize * 2;
            low /= 100;
            at -= 2;
            buf[at..at + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
        }
    }
    let mut n = n as u32;
    while n >= 100 {
        let pair = (n % 100) as usize * 2;
        n /= 100;
        at -= 2;
        buf[at..at + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
    }
    if n >= 10 {
        let pair = n as usize * 2;
        at -= 2;
        buf[at..at + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
    } else {
        at -= 1;
        buf[at] = b'0' + n as u8;
    }
    if value < 0 {
        at -= 1;
        buf[at] = b'-';
    }
    &buf[at..]
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn accepts_what_the_server_accepts() {
        assert_eq!(parse_i64(b"0"), Some(0));
        assert_eq!(parse_i64(b"42"), Some(42));
        assert_eq!(parse_i64(b"-7"), Some(-7));
        assert_eq!(parse_i64(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
    }

    #[test]
    fn rejects_everything_else() {
        for bad in [
            &b""[..],
            b"-",
            b"+1",
            b" 1",
            b"1 ",
            b"01",
            b"-0",
            b"1.5",
            b"1e3",
            b"9223372036854775808",
            b"-9223372036854775809",
            b"99999999999999999999",
            b"abc",
            b"\x00",
        ] {
            assert_eq!(parse_i64(bad), None, "{:?}", bad);
        }
    }

    #[test]
    fn formats_at_every_digit_boundary() {
        let mut buf = [0u8; MAX_DIGITS];
        for v in [
            0,
            9,
            10,
            99,
            100,
            101,
            999,
            1000,
            99_999_999,
            100_000_000,
            100_000_001,
            1_000_000_000_000_000,
            i64::MAX,
            i64::MIN,
        ] {
            for v in [v, v.saturating_neg()] {
                assert_eq!(format_i64(v, &mut buf), v.to_string().as_bytes());
            }
        }
    }

    #[test]
    fn eight_digits_at_a_time_agree_with_one_at_a_time() {
        let good = [
            "12345678",
            "99999999",
            "1234567890123456789",
            "1234",
            "98765",
            "123456789012",
        ];
        for text in good {
            let slow = text.bytes().fold(0u64, |v, b| v * 10 + u64::from(b - b'0'));
            assert_eq!(parse_i64(text.as_bytes()), Some(slow as i64), "{text}");
        }
        let bad: [&[u8]; 9] = [
            b"1234567/",
            b"1234567:",
            b"123 4567",
            b"\xff2345678",
            b"12345678\x00",
            b"12/4",
            b"1:34",
            b"123456789:12",
            b"00000000",
        ];
        for bad in bad {
            assert_eq!(parse_i64(bad), None, "{bad:?}");
        }
    }

    proptest! {
        #[test]
        fn digit_strings_parse_as_the_standard_library_does(
            text in "-?[0-9]{1,20}",
        ) {
            let want = text.parse::<i64>().ok().filter(|_| {
                let digits = text.trim_start_matches('-');
                !(digits.starts_with('0') && (digits.len() > 1 || text.starts_with('-')))
            });
            prop_assert_eq!(parse_i64(text.as_bytes()), want);
        }

        #[test]
        fn round_trips(v in any::<i64>()) {
            let mut buf = [0u8; MAX_DIGITS];
            let text = format_i64(v, &mut buf);
            let expected = v.to_string();
            prop_assert_eq!(text, expected.as_bytes());
            prop_assert_eq!(parse_i64(text), Some(v));
        }

        #[test]
        fn never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..30)) {
            let parsed = parse_i64(&bytes);
            if let Some(v) = parsed {
                let text = v.to_string();
                prop_assert_eq!(text.as_bytes(), &bytes[..]);
            }
        }
    }
}
