//! Limiter state as stored in one plain string key, readable with GET:
//!
//! | algorithm | value |
//! |---|---|
//! | fixed   | `<count>` (a plain integer, shared with INCR clients) |
//! | sliding | `sliding:<window_start_ms>:<current_count>:<previous_count>` |
//! | token   | `token:<credit_ns>:<last_refill_ms>:<last_refill_ns_into_that_ms>` |
//! | gcra    | `gcra:<theoretical_arrival_time_ns>` |
//! | leaky   | `leaky:<queue_drained_at_ns>` |
//!
//! The token bucket's last refill is a ms and the ns into it (0 to 999,999;
//! the clock gives µs). Builds that read the clock in ms wrote the ms
//! alone, `token:<credit_ns>:<last_refill_ms>`: that form still reads, as
//! the start of that ms, and is written back in the new one.

use crate::error::RlError;
use crate::num::{format_i64, parse_i64, MAX_DIGITS};

use super::{div, Algo, NS_PER_MS};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Fixed {
        count: i64,
    },
    Sliding {
        window_start: i64,
        current: i64,
        previous: i64,
    },
    Token {
        credit_ns: i128,
        /// The last refill, absolute ns.
        last_ns: i128,
    },
    Gcra {
        tat_ns: i128,
    },
    Leaky {
        tat_ns: i128,
    },
}

/// Parses the field up to the next ':' and moves past both; `None` when
/// there is no ':' (the field is not the last) or no integer before it.
#[inline]
fn field(rest: &mut &[u8]) -> Option<i64> {
    let (field, after) = split_at_colon(rest);
    *rest = after?;
    parse_i64(field)
}

/// The bytes before the first ':' and, when there is one, those after it.
/// Eight bytes at a time: a state's fields are 1 to 20 bytes long.
#[inline]
fn split_at_colon(bytes: &[u8]) -> (&[u8], Option<&[u8]>) {
    const EACH: u64 = 0x0101_0101_0101_0101;
    let mut at = 0;
    while let Some(chunk) = bytes.get(at..at + 8) {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        // A zero byte where a ':' was; the lowest flagged byte is exact.
        let x = u64::from_le_bytes(word) ^ (u64::from(b':') * EACH);
        let zero = x.wrapping_sub(EACH) & !x & (0x80 * EACH);
        if zero != 0 {
            at += (zero.trailing_zeros() / 8) as usize;
            return (&bytes[..at], Some(&bytes[at + 1..]));
        }
        at += 8;
    }
    match bytes[at..].iter().position(|&b| b == b':') {
        Some(i) => (&bytes[..at + i], Some(&bytes[at + i + 1..])),
        None => (bytes, None),
    }
}

/// Longest encoding: "sliding:" and three i64 with separators ("token:",
/// two i64 and six digits are shorter).
pub const MAX_LEN: usize = 8 + 3 * 20 + 2;

impl State {
    /// Parses a stored value as `algo`'s state. Anything else, including
    /// another algorithm's state, is an error naming the algorithm.
    pub fn decode(algo: Algo, bytes: &[u8]) -> Result<State, RlError> {
        match Self::parse(algo, bytes) {
            Some(state) => Ok(state),
            None => Err(Self::not_its_state(algo)),
        }
    }

    #[cold]
    fn not_its_state(algo: Algo) -> RlError {
        match algo {
            Algo::Fixed => RlError::NotACounter,
            _ => RlError::BadState(algo.name()),
        }
    }

    fn parse(algo: Algo, bytes: &[u8]) -> Option<State> {
        if algo == Algo::Fixed {
            return parse_i64(bytes).map(|count| State::Fixed { count });
        }
        let rest = bytes
            .strip_prefix(algo.name().as_bytes())?
            .strip_prefix(b":")?;
        // Each field but the last ends at a ':'; the last is the rest, which
        // `parse_i64` refuses if it holds another ':'.
        let mut rest = rest;
        let state = match algo {
            Algo::Sliding => {
                let (window_start, current) = (field(&mut rest)?, field(&mut rest)?);
                let previous = parse_i64(rest)?;
                if window_start < 0 || current < 0 || previous < 0 {
                    return None;
                }
                State::Sliding {
                    window_start,
                    current,
                    previous,
                }
            }
            Algo::Token => {
                let credit = field(&mut rest)?;
                let (last_ms, into_ms) = split_at_colon(rest);
                // Absent in the old form: the start of that ms.
                let into_ms = match into_ms {
                    None => 0,
                    Some(into_ms) => parse_i64(into_ms)?,
                };
                if credit < 0 || !(0..1_000_000).contains(&into_ms) {
                    return None;
                }
                State::Token {
                    credit_ns: i128::from(credit),
                    last_ns: i128::from(parse_i64(last_ms)?) * NS_PER_MS + i128::from(into_ms),
                }
            }
            Algo::Gcra => State::Gcra {
                tat_ns: i128::from(parse_i64(rest)?),
            },
            Algo::Leaky => State::Leaky {
                tat_ns: i128::from(parse_i64(rest)?),
            },
            Algo::Fixed => return None,
        };
        Some(state)
    }

    /// Writes the value into `buf` and returns it. Values that do not fit an
    /// i64 are clamped (policies are validated so that they never do).
    pub fn encode(self, buf: &mut [u8; MAX_LEN]) -> &[u8] {
        let mut len = 0;
        let mut put = |bytes: &[u8]| {
            buf[len..len + bytes.len()].copy_from_slice(bytes);
            len += bytes.len();
        };
        let mut digits = [0u8; MAX_DIGITS];
        let clamp = |v: i128| i64::try_from(v).unwrap_or(if v < 0 { i64::MIN } else { i64::MAX });
        match self {
            State::Fixed { count } => put(format_i64(count, &mut digits)),
            State::Sliding {
                window_start,
                current,
                previous,
            } => {
                put(b"sliding:");
                put(format_i64(window_start, &mut digits));
                put(b":");
                put(format_i64(current, &mut digits));
                put(b":");
                put(format_i64(previous, &mut digits));
            }
            State::Token { credit_ns, last_ns } => {
                // `div` for a time the module wrote (never negative): i128
                // division is a library call.
                let ms = match last_ns {
                    0.. => div(last_ns, NS_PER_MS),
                    _ => last_ns.div_euclid(NS_PER_MS),
                };
                put(b"token:");
                put(format_i64(clamp(credit_ns), &mut digits));
                put(b":");
                put(format_i64(clamp(ms), &mut digits));
                put(b":");
                put(format_i64(clamp(last_ns - ms * NS_PER_MS), &mut digits));
            }
            State::Gcra { tat_ns } => {
                put(b"gcra:");
                put(format_i64(clamp(tat_ns), &mut digits));
            }
            State::Leaky { tat_ns } => {
                put(b"leaky:");
                put(format_i64(clamp(tat_ns), &mut digits));
            }
        }
        &buf[..len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn round_trips_every_algorithm() {
        let states = [
            (Algo::Fixed, State::Fixed { count: -3 }),
            (
                Algo::Sliding,
                State::Sliding {
                    window_start: 1_764_000_000_000,
                    current: 4,
                    previous: 9,
                },
            ),
            (
                Algo::Token,
                State::Token {
                    credit_ns: 5_000_000,
                    last_ns: 1_764_000_000_123_456_000,
                },
            ),
            (
                Algo::Token,
                State::Token {
                    credit_ns: 0,
                    last_ns: -1_000_001,
                },
            ),
            (
                Algo::Gcra,
                State::Gcra {
                    tat_ns: 1_764_000_000_123_456_789,
                },
            ),
            (Algo::Leaky, State::Leaky { tat_ns: 1 }),
        ];
        for (algo, state) in states {
            let mut buf = [0u8; MAX_LEN];
            let bytes = state.encode(&mut buf).to_vec();
            assert_eq!(
                State::decode(algo, &bytes),
                Ok(state),
                "{}",
                String::from_utf8_lossy(&bytes)
            );
        }
    }

    #[test]
    fn refuses_other_algorithms_and_corruption() {
        assert_eq!(
            State::decode(Algo::Gcra, b"5"),
            Err(RlError::BadState("gcra"))
        );
        assert_eq!(
            State::decode(Algo::Fixed, b"gcra:5"),
            Err(RlError::NotACounter)
        );
        assert_eq!(
            State::decode(Algo::Leaky, b"gcra:5"),
            Err(RlError::BadState("leaky"))
        );
        for bad in [
            &b"sliding:1:2"[..],
            b"sliding:1:2:3:4",
            b"sliding:-1:2:3",
            b"token:-5:1",
            b"token:5:1:1000000",
            b"token:5:1:-1",
            b"token:5:1:01",
            b"token:5:1:2:3",
            b"token:5:1:",
            b"gcra:",
            b"gcra:x",
        ] {
            for algo in Algo::ALL {
                assert!(
                    State::decode(algo, bad).is_err(),
                    "{algo:?} {:?}",
                    String::from_utf8_lossy(bad)
                );
            }
        }
    }

    #[test]
    fn reads_the_token_form_without_the_ns_into_the_ms_as_that_ms() {
        let old = State::decode(Algo::Token, b"token:7:1764000000123");
        let new = State::decode(Algo::Token, b"token:7:1764000000123:0");
        let want = State::Token {
            credit_ns: 7,
            last_ns: 1_764_000_000_123 * NS_PER_MS,
        };
        assert_eq!((old, new), (Ok(want), Ok(want)));
        let extremes = State::decode(
            Algo::Token,
            b"token:9223372036854775807:-9223372036854775808",
        );
        assert_eq!(
            extremes,
            Ok(State::Token {
                credit_ns: i128::from(i64::MAX),
                last_ns: i128::from(i64::MIN) * NS_PER_MS,
            })
        );
        let mut buf = [0u8; MAX_LEN];
        let written = want.encode(&mut buf);
        assert_eq!(
            written, b"token:7:1764000000123:0",
            "written in the new form"
        );
        let within = State::Token {
            credit_ns: 7,
            last_ns: 1_764_000_000_123 * NS_PER_MS + 456_000,
        };
        assert_eq!(within.encode(&mut buf), b"token:7:1764000000123:456000");
    }

    #[test]
    fn splits_at_the_first_colon_at_every_offset() {
        for len in 0..20 {
            let field = vec![b'7'; len];
            let mut with_rest = field.clone();
            with_rest.extend_from_slice(b":12:3");
            assert_eq!(split_at_colon(&field), (&field[..], None));
            assert_eq!(split_at_colon(&with_rest), (&field[..], Some(&b"12:3"[..])));
        }
        assert_eq!(split_at_colon(b":"), (&b""[..], Some(&b""[..])));
    }

    proptest! {
        #[test]
        fn splitting_agrees_with_the_standard_library(
            bytes in proptest::collection::vec(prop_oneof![Just(b':'), any::<u8>()], 0..40),
        ) {
            let mut std_split = bytes.splitn(2, |&b| b == b':');
            let want = (std_split.next().unwrap_or(&[]), std_split.next());
            prop_assert_eq!(split_at_colon(&bytes), want);
        }

        #[test]
        fn decoding_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..80)) {
            for algo in Algo::ALL {
                let _ = State::decode(algo, &bytes);
            }
        }
    }
}
