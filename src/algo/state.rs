//! Limiter state as stored in one plain string key, readable with GET: the
//! codec every algorithm shares. A state is one to `MAX_FIELDS` integers.
//! An algorithm whose state is one bare integer (`fixed`, shared with INCR
//! clients) stores just that; every other one stores
//! `<name>:<int>(:<int>)*`, its name from its row in `ALGORITHMS`. What
//! the integers mean, and which are valid, is the algorithm's own
//! `Layout`, in its file.

use crate::error::RlError;
use crate::num::{format_i64, parse_i64, MAX_DIGITS};

use super::Algo;

/// The most integers a state holds.
pub const MAX_FIELDS: usize = 3;

/// A state as stored: whose it is and its integers. Built by an
/// algorithm's `Layout::stored`, or decoded and checked by its `read`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct State {
    algo: Algo,
    len: u8,
    /// Those past `len` are 0.
    fields: [i64; MAX_FIELDS],
}

/// An algorithm's state in its own types, and how it is stored.
pub trait Layout: Sized {
    /// Whose state this is.
    const ALGO: Algo;
    /// Stored as one bare integer, without the name: INCR's format, so
    /// anything else is refused as INCR refuses it.
    const BARE: bool = false;
    /// How many integers it stores, and so the most it reads (it may read
    /// fewer: an older form).
    const FIELDS: usize;

    /// The state in the stored integers (as many as were stored), or
    /// `None` when they are not one of this algorithm's: the value is
    /// refused.
    fn read(fields: &[i64]) -> Option<Self>;

    /// The state to store.
    fn stored(self) -> State;

    /// `state` as this algorithm's; `None` for another algorithm's.
    #[inline]
    fn of(state: State) -> Option<Self> {
        match state.algo == Self::ALGO {
            true => Self::read(state.fields()),
            false => None,
        }
    }
}

/// `v` as a stored integer: values beyond an i64 are clamped (policies are
/// validated so that they never are).
pub fn clamp(v: i128) -> i64 {
    i64::try_from(v).unwrap_or(if v < 0 { i64::MIN } else { i64::MAX })
}

/// Splits the bytes before the first ':' from those after it, if any.
/// Eight bytes at a time: a state's fields are 1 to 20 bytes long.
#[inline(always)]
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

/// Room for the longest prefix, `<name>:`.
pub const PREFIX: usize = 16;

/// What a stored value starts with: `<name>:`, or nothing for a bare
/// integer.
pub struct Prefix {
    /// At the start, for reading.
    bytes: [u8; PREFIX],
    /// At the end, for writing right to left.
    right: [u8; PREFIX],
    len: u8,
}

impl Prefix {
    pub const fn of(name: &str, bare: bool) -> Prefix {
        let mut bytes = [0u8; PREFIX];
        let mut right = [0u8; PREFIX];
        if bare {
            return Prefix {
                bytes,
                right,
                len: 0,
            };
        }
        let name = name.as_bytes();
        assert!(name.len() < PREFIX, "an algorithm's name fits a prefix");
        let len = name.len() + 1;
        let mut i = 0;
        while i < len {
            let byte = if i < name.len() { name[i] } else { b':' };
            bytes[i] = byte;
            right[PREFIX - len + i] = byte;
            i += 1;
        }
        Prefix {
            bytes,
            right,
            len: len as u8,
        }
    }

    fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len).min(PREFIX)]
    }

    /// `bytes` after this prefix, `None` when they do not start with it.
    /// A stored state is usually longer than `PREFIX`: then one compare.
    #[inline]
    fn strip<'a>(&self, bytes: &'a [u8]) -> Option<&'a [u8]> {
        let len = usize::from(self.len).min(PREFIX);
        match bytes.first_chunk::<PREFIX>() {
            Some(head) => {
                let mask = u128::MAX
                    .checked_shr(8 * (PREFIX - len) as u32)
                    .unwrap_or(0);
                let same =
                    (u128::from_le_bytes(*head) ^ u128::from_le_bytes(self.bytes)) & mask == 0;
                same.then(|| &bytes[len..])
            }
            None => bytes.strip_prefix(self.as_bytes()),
        }
    }
}

/// Room for the longest encoding, written right to left: `MAX_FIELDS`
/// integers, each given `MAX_DIGITS` to be formatted in and a separator,
/// and a whole prefix before them.
pub const MAX_LEN: usize = PREFIX + MAX_FIELDS * (MAX_DIGITS + 1);

/// Parses a stored value as `L`'s state: the codec, made for each row
/// (see `AlgoSpec::decode`) so that its name, its number of fields and its
/// checks are constants there.
pub fn decode<L: Layout>(bytes: &[u8]) -> Option<State> {
    if L::BARE {
        return parse_i64(bytes).map(|v| State::new(L::ALGO, [v]));
    }
    let mut rest = L::ALGO.spec().prefix.strip(bytes)?;
    // Each field but the last ends at a ':'; the last one the algorithm
    // reads is the rest, which `parse_i64` refuses if it holds another.
    let mut fields = [0; MAX_FIELDS];
    let mut len = 0;
    loop {
        if len + 1 >= L::FIELDS {
            *fields.get_mut(len)? = parse_i64(rest)?;
            len += 1;
            break;
        }
        let (field, after) = split_at_colon(rest);
        *fields.get_mut(len)? = parse_i64(field)?;
        len += 1;
        match after {
            Some(after) => rest = after,
            None => break,
        }
    }
    let state = State {
        algo: L::ALGO,
        len: len as u8,
        fields,
    };
    L::read(state.fields())?;
    Some(state)
}

impl State {
    /// `algo`'s state holding `fields`.
    #[inline]
    pub fn new<const N: usize>(algo: Algo, fields: [i64; N]) -> State {
        const {
            assert!(
                N >= 1 && N <= MAX_FIELDS,
                "a state is 1 to MAX_FIELDS integers"
            )
        };
        let mut all = [0; MAX_FIELDS];
        all[..N].copy_from_slice(&fields);
        State {
            algo,
            len: N as u8,
            fields: all,
        }
    }

    pub fn algo(self) -> Algo {
        self.algo
    }

    /// The integers as stored.
    #[inline]
    pub fn fields(&self) -> &[i64] {
        &self.fields[..usize::from(self.len).min(MAX_FIELDS)]
    }

    /// The value when it is a bare integer (see `Layout::BARE`).
    #[inline]
    pub fn integer(self) -> Option<i64> {
        self.algo.spec().bare.then_some(self.fields[0])
    }

    /// Parses a stored value as `algo`'s state. Anything else, including
    /// another algorithm's state, is an error: INCR's for a bare integer,
    /// else one naming the algorithm.
    pub fn decode(algo: Algo, bytes: &[u8]) -> Result<State, RlError> {
        match (algo.spec().decode)(bytes) {
            Some(state) => Ok(state),
            None => Err(Self::not_its_state(algo)),
        }
    }

    #[cold]
    fn not_its_state(algo: Algo) -> RlError {
        match algo.spec().bare {
            true => RlError::NotACounter,
            false => RlError::BadState(algo.name()),
        }
    }

    /// Writes the value into `buf` and returns it. Right to left: each
    /// integer is formatted where it belongs, ending where the next one's
    /// ':' is, so nothing is copied but the prefix, whole.
    pub fn encode(self, buf: &mut [u8; MAX_LEN]) -> &[u8] {
        let mut start = MAX_LEN;
        for (i, &field) in self.fields().iter().rev().enumerate() {
            if i > 0 {
                start -= 1;
                buf[start] = b':';
            }
            let Some(room) = buf[..start].last_chunk_mut::<MAX_DIGITS>() else {
                break; // never: MAX_LEN has room for every field
            };
            start -= format_i64(field, room).len();
        }
        let prefix = &self.algo.spec().prefix;
        if let Some(room) = buf[..start].last_chunk_mut::<PREFIX>() {
            *room = prefix.right;
        }
        &buf[start.saturating_sub(usize::from(prefix.len))..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn text(state: State) -> String {
        let mut buf = [0u8; MAX_LEN];
        String::from_utf8_lossy(state.encode(&mut buf)).into_owned()
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

        /// The prefix is stripped as the standard library strips it, on
        /// values shorter and longer than `PREFIX`, near misses included.
        #[test]
        fn strips_the_prefix_as_the_standard_library_does(
            algo in proptest::sample::select(Algo::ALL.to_vec()),
            keep in 0usize..=PREFIX,
            change in proptest::option::of((0usize..PREFIX, any::<u8>())),
            tail in proptest::collection::vec(any::<u8>(), 0..24),
        ) {
            let prefix = &algo.spec().prefix;
            let mut bytes = prefix.as_bytes()[..keep.min(prefix.as_bytes().len())].to_vec();
            if let Some((at, byte)) = change {
                if let Some(b) = bytes.get_mut(at) {
                    *b = byte;
                }
            }
            bytes.extend_from_slice(&tail);
            prop_assert_eq!(prefix.strip(&bytes), bytes.strip_prefix(prefix.as_bytes()));
        }

        /// Right to left, any integers are written as `format!` writes them.
        #[test]
        fn encodes_as_format_does(
            algo in proptest::sample::select(Algo::ALL.to_vec()),
            fields in prop_oneof![
                any::<i64>().prop_map(|a| vec![a]),
                any::<[i64; 2]>().prop_map(|f| f.to_vec()),
                any::<[i64; 3]>().prop_map(|f| f.to_vec()),
            ],
        ) {
            let state = match *fields {
                [a] => State::new(algo, [a]),
                [a, b] => State::new(algo, [a, b]),
                [a, b, c] => State::new(algo, [a, b, c]),
                _ => unreachable!(),
            };
            let joined = fields.iter().map(i64::to_string).collect::<Vec<_>>().join(":");
            let want = match algo.spec().bare {
                true => joined,
                false => format!("{}:{joined}", algo.name()),
            };
            prop_assert_eq!(text(state), want);
        }
    }
}
