//! Command arguments into typed requests. Pure: works on byte slices so the
//! fuzzer and the unit tests drive it without a server.

use crate::algo::Algo;
use crate::error::{RlError, BURST_RANGE, NON_NEGATIVE, POSITIVE};
use crate::keyword::Keyword;
use crate::num::parse_i64;

/// Options a command may take after its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opt {
    Algo,
    Limit,
    Window,
    Burst,
    Meta,
    Cost,
}

impl Opt {
    pub const ALL: [Opt; 6] = [
        Opt::Algo,
        Opt::Limit,
        Opt::Window,
        Opt::Burst,
        Opt::Meta,
        Opt::Cost,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Opt::Algo => "ALGO",
            Opt::Limit => "LIMIT",
            Opt::Window => "WINDOW",
            Opt::Burst => "BURST",
            Opt::Meta => "META",
            Opt::Cost => "COST",
        }
    }

    pub fn parse(word: &[u8], allowed: &[Opt]) -> Option<Opt> {
        const NAMES: [(Keyword, Opt); 6] = [
            (Keyword::new("ALGO"), Opt::Algo),
            (Keyword::new("LIMIT"), Opt::Limit),
            (Keyword::new("WINDOW"), Opt::Window),
            (Keyword::new("BURST"), Opt::Burst),
            (Keyword::new("META"), Opt::Meta),
            (Keyword::new("COST"), Opt::Cost),
        ];
        let opt = NAMES.iter().find(|(k, _)| k.matches(word))?.1;
        allowed.contains(&opt).then_some(opt)
    }
}

/// The policy options of every limiter command.
pub const POLICY: &[Opt] = &[Opt::Algo, Opt::Limit, Opt::Window, Opt::Burst, Opt::Meta];

/// The options as given; `meta` is the index of the META key in the
/// argument slice, so the caller can open it without copying.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Options {
    pub algo: Option<Algo>,
    pub limit: Option<i64>,
    pub burst: Option<i64>,
    pub window: Option<i64>,
    pub meta: Option<usize>,
    pub cost: Option<i64>,
}

/// More arguments than any valid call has; refused before any parsing.
pub const MAX_ARGS: usize = 256;

/// Parses `args[first..]` as option/value pairs, accepting only `allowed`.
pub fn parse_options(args: &[&[u8]], first: usize, allowed: &[Opt]) -> Result<Options, RlError> {
    let mut opts = Options::default();
    let mut at = first;
    while at < args.len() {
        let opt = Opt::parse(args[at], allowed).ok_or_else(|| unknown(args[at]))?;
        opts.set(opt, args, at + 1)?;
        at += 2;
    }
    Ok(opts)
}

impl Options {
    /// Sets `opt` from the value at `args[at]`.
    pub fn set(&mut self, opt: Opt, args: &[&[u8]], at: usize) -> Result<(), RlError> {
        let value = *args
            .get(at)
            .ok_or_else(|| RlError::MissingValue(opt.name()))?;
        let repeated = match opt {
            Opt::Algo => {
                let algo = Algo::parse(value).ok_or(RlError::BadValue("ALGO", Algo::NAMES))?;
                self.algo.replace(algo).is_some()
            }
            Opt::Limit => self.limit.replace(int_in(value, opt, 0)?).is_some(),
            Opt::Window => self.window.replace(int_in(value, opt, 1)?).is_some(),
            Opt::Burst => {
                let burst = int_must(value, opt.name(), 0, BURST_RANGE)?;
                self.burst.replace(burst).is_some()
            }
            Opt::Cost => self.cost.replace(int_in(value, opt, 0)?).is_some(),
            Opt::Meta => self.meta.replace(at).is_some(),
        };
        match repeated {
            true => Err(RlError::Repeated(opt.name())),
            false => Ok(()),
        }
    }
}

/// An unknown option, quoted safely: printable ASCII only, and short.
pub fn unknown(word: &[u8]) -> RlError {
    let shown: String = word
        .iter()
        .take(32)
        .map(|&b| if b.is_ascii_graphic() { b as char } else { '?' })
        .collect();
    RlError::UnknownOption(shown)
}

/// A positional integer argument, named in the error.
pub fn int_arg(value: &[u8], name: &'static str, min: i64) -> Result<i64, RlError> {
    let must = if min == 0 { NON_NEGATIVE } else { POSITIVE };
    int_must(value, name, min, must)
}

/// An integer of at least `min`; `must` says the range when it is not.
fn int_must(
    value: &[u8],
    name: &'static str,
    min: i64,
    must: &'static str,
) -> Result<i64, RlError> {
    match parse_i64(value) {
        Some(v) if v >= min => Ok(v),
        _ => Err(RlError::BadValue(name, must)),
    }
}

fn int_in(value: &[u8], opt: Opt, min: i64) -> Result<i64, RlError> {
    int_arg(value, opt.name(), min)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn parse(words: &[&str]) -> Result<Options, RlError> {
        let args: Vec<&[u8]> = words.iter().map(|w| w.as_bytes()).collect();
        parse_options(&args, 2, &Opt::ALL)
    }

    #[test]
    fn reads_every_option_in_any_case_and_order() {
        let o = parse(&[
            "rl.admit", "k", "cost", "2", "Meta", "m", "WINDOW", "500", "limit", "3",
        ]);
        assert_eq!(
            o,
            Ok(Options {
                algo: None,
                limit: Some(3),
                burst: None,
                window: Some(500),
                meta: Some(5),
                cost: Some(2)
            })
        );
        assert_eq!(parse(&["rl.admit", "k"]), Ok(Options::default()));
    }

    #[test]
    fn refuses_bad_values_naming_the_option() {
        let cases: &[(&[&str], RlError)] = &[
            (&["LIMIT", "-1"], RlError::BadValue("LIMIT", NON_NEGATIVE)),
            (&["LIMIT", "x"], RlError::BadValue("LIMIT", NON_NEGATIVE)),
            (
                &["LIMIT", "9223372036854775808"],
                RlError::BadValue("LIMIT", NON_NEGATIVE),
            ),
            (&["WINDOW", "0"], RlError::BadValue("WINDOW", POSITIVE)),
            (&["WINDOW", "1.5"], RlError::BadValue("WINDOW", POSITIVE)),
            (&["COST", "-3"], RlError::BadValue("COST", NON_NEGATIVE)),
            (&["LIMIT"], RlError::MissingValue("LIMIT")),
            (&["LIMIT", "1", "LIMIT", "2"], RlError::Repeated("LIMIT")),
            (&["META", "a", "meta", "b"], RlError::Repeated("META")),
            (&["BOGUS", "1"], RlError::UnknownOption("BOGUS".into())),
            (&["ALGO", "magic"], RlError::BadValue("ALGO", Algo::NAMES)),
            (
                &["ALGO", "token", "algo", "gcra"],
                RlError::Repeated("ALGO"),
            ),
            (&["BURST", "-1"], RlError::BadValue("BURST", BURST_RANGE)),
        ];
        for (tail, want) in cases {
            let mut words = vec!["rl.admit", "k"];
            words.extend_from_slice(tail);
            assert_eq!(parse(&words).as_ref(), Err(want), "{tail:?}");
        }
    }

    #[test]
    fn every_name_parses_to_itself() {
        for opt in Opt::ALL {
            assert_eq!(Opt::parse(opt.name().as_bytes(), &Opt::ALL), Some(opt));
            let lower = opt.name().to_ascii_lowercase();
            assert_eq!(Opt::parse(lower.as_bytes(), &Opt::ALL), Some(opt));
        }
        assert_eq!(Opt::parse(b"LIMITS", &Opt::ALL), None);
    }

    #[test]
    fn honours_the_allowed_set() {
        let args: Vec<&[u8]> = vec![b"rl.ttl", b"k", b"COST", b"1"];
        assert_eq!(
            parse_options(&args, 2, &[Opt::Limit, Opt::Meta]),
            Err(RlError::UnknownOption("COST".into()))
        );
    }

    proptest! {
        #[test]
        fn never_panics(words in proptest::collection::vec(
            prop_oneof![
                Just(b"LIMIT".to_vec()), Just(b"window".to_vec()), Just(b"META".to_vec()),
                Just(b"cost".to_vec()), Just(b"-1".to_vec()), Just(b"0".to_vec()),
                proptest::collection::vec(any::<u8>(), 0..12),
            ], 0..12)) {
            let args: Vec<&[u8]> = words.iter().map(|w| w.as_slice()).collect();
            if let Ok(o) = parse_options(&args, 0, &Opt::ALL) {
                prop_assert!(o.limit.is_none_or(|v| v >= 0));
                prop_assert!(o.window.is_none_or(|v| v >= 1));
                prop_assert!(o.cost.is_none_or(|v| v >= 0));
                prop_assert!(o.meta.is_none_or(|i| i < args.len()));
            }
        }
    }
}
