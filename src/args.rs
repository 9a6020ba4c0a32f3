//! The grammar: every command's arguments into a typed request, and where
//! their keys are (getkeys). Pure: works on byte slices so the fuzzer and
//! the unit tests drive it without a server. The words come from the
//! option table (`args/table.rs`); this file reads them: the options into
//! `Options`, RL.THROTTLE's positional arguments, a limiter's keys.

pub mod admitall;
pub mod lease;
pub mod table;

pub use admitall::{admit_all_keys, AdmitAll};
pub use table::{
    Opt, OptSet, OptSpec, Value, ADMIT, ADMIT_SET, LEASE, LEASE_META_FIELDS, LEASE_SET, LIMITER,
    LIMITER_SET, META_FIELDS, OPTIONS, POLICY, POLICY_SET, REFUND, REFUND_SET,
};

use crate::algo::calendar::Period;
use crate::algo::{throttle, Algo};
use crate::error::{RlError, NON_NEGATIVE, POSITIVE};
use crate::num::parse_i64;
use crate::time::tz;
use crate::time::zone::Zone;
use table::KEY_OPTION;

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
    pub ttl: Option<i64>,
    /// Where the lease id is in the argument slice.
    pub id: Option<usize>,
    /// BLOCK's timeout in ms (0: no limit).
    pub block: Option<i64>,
    /// SHADOW was given.
    pub shadow: bool,
    /// ALIGN was given.
    pub align: bool,
    pub calendar: Option<Period>,
    /// TZ's zone.
    pub tz: Option<Zone>,
    /// Any of issue 27's options (SHADOW, PENALTY, ALIGN, CALENDAR, TZ,
    /// ESCALATE) was
    /// given: the plain call's resolution skips them all without it.
    pub extended: bool,
    pub penalty: Option<i64>,
    /// ESCALATE's cap (ms).
    pub escalate: Option<i64>,
    /// FORCE was given (RL.ADMIT).
    pub force: bool,
    /// RESERVE's max_ms (RL.ADMIT).
    pub reserve: Option<i64>,
    /// AT's at_ms (RL.REFUND: the cancel of a booking).
    pub at: Option<i64>,
}

/// More arguments than any valid call has; refused before any parsing.
pub const MAX_ARGS: usize = 256;

/// Parses `args[first..]` as option/value pairs, accepting only `allowed`,
/// into the caller's `opts` (given empty): not returned through a
/// `Result`, which would copy them out.
#[inline]
pub fn read_options(
    args: &[&[u8]],
    first: usize,
    allowed: OptSet,
    opts: &mut Options,
) -> Result<(), RlError> {
    let mut at = first;
    while at < args.len() {
        let Some(opt) = Opt::parse(args[at], allowed) else {
            return Err(unknown(args[at]));
        };
        match opts.try_set(opt, args, at + 1) {
            Ok(words) => at += words,
            Err(problem) => return Err(problem.about(opt)),
        }
    }
    Ok(())
}

/// What is wrong with an option's value; the error is made only when one
/// is (the call path passes this small value, not the error).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Problem {
    Missing,
    OutOfRange,
    Repeated,
}

impl Problem {
    #[cold]
    fn about(self, opt: Opt) -> RlError {
        match self {
            Problem::Missing => RlError::MissingValue(opt.name()),
            Problem::OutOfRange => RlError::BadValue(opt.name(), opt.spec().range),
            Problem::Repeated => RlError::Repeated(opt.name()),
        }
    }
}

impl Options {
    /// Sets `opt` from the value at `args[at]` (a flag takes none); the
    /// words the option took, its keyword included.
    pub fn set(&mut self, opt: Opt, args: &[&[u8]], at: usize) -> Result<usize, RlError> {
        self.try_set(opt, args, at).map_err(|p| p.about(opt))
    }

    // Always inlined: in `parse_options` the keyword's match and this one
    // then become one dispatch.
    #[inline(always)]
    fn try_set(&mut self, opt: Opt, args: &[&[u8]], at: usize) -> Result<usize, Problem> {
        // Issue 27's options (the last rows of OPTIONS) out of the plain
        // call's way: one compare here.
        if opt as usize >= Opt::Shadow as usize {
            return self.set_policy(opt, args, at);
        }
        let value = *args.get(at).ok_or(Problem::Missing)?;
        let int = || {
            parse_i64(value)
                .filter(|&v| v >= opt.spec().min)
                .ok_or(Problem::OutOfRange)
        };
        let repeated = match opt {
            Opt::Algo => {
                let algo = Algo::parse(value).ok_or(Problem::OutOfRange)?;
                self.algo.replace(algo).is_some()
            }
            Opt::Limit => self.limit.replace(int()?).is_some(),
            Opt::Window => self.window.replace(int()?).is_some(),
            Opt::Burst => self.burst.replace(int()?).is_some(),
            Opt::Cost => self.cost.replace(int()?).is_some(),
            Opt::Meta => self.meta.replace(at).is_some(),
            Opt::Ttl => self.ttl.replace(int()?).is_some(),
            Opt::Id if value.is_empty() => return Err(Problem::OutOfRange),
            Opt::Id => self.id.replace(at).is_some(),
            Opt::Block => self.block.replace(int()?).is_some(),
            // set_policy's
            Opt::Shadow
            | Opt::Penalty
            | Opt::Align
            | Opt::Calendar
            | Opt::Tz
            | Opt::Escalate
            | Opt::Force
            | Opt::Reserve
            | Opt::At
            | Opt::Horizon => false,
        };
        match repeated {
            true => Err(Problem::Repeated),
            false => Ok(2),
        }
    }

    /// SHADOW, PENALTY, ALIGN, CALENDAR, TZ and ESCALATE, and FORCE,
    /// RESERVE and AT (see `try_set`).
    #[cold]
    #[inline(never)]
    fn set_policy(&mut self, opt: Opt, args: &[&[u8]], at: usize) -> Result<usize, Problem> {
        self.extended = true;
        let flag = match opt {
            Opt::Shadow => Some(&mut self.shadow),
            Opt::Align => Some(&mut self.align),
            Opt::Force => Some(&mut self.force),
            _ => None,
        };
        if let Some(flag) = flag {
            return match std::mem::replace(flag, true) {
                true => Err(Problem::Repeated),
                false => Ok(1),
            };
        }
        let value = *args.get(at).ok_or(Problem::Missing)?;
        let int = || {
            parse_i64(value)
                .filter(|&v| v >= opt.spec().min)
                .ok_or(Problem::OutOfRange)
        };
        let repeated = match opt {
            Opt::Reserve => self.reserve.replace(int()?).is_some(),
            Opt::At => self.at.replace(int()?).is_some(),
            Opt::Penalty => {
                let ms = parse_i64(value)
                    .filter(|&v| v >= opt.spec().min)
                    .ok_or(Problem::OutOfRange)?;
                self.penalty.replace(ms).is_some()
            }
            Opt::Escalate => {
                let ms = parse_i64(value)
                    .filter(|&v| v >= opt.spec().min)
                    .ok_or(Problem::OutOfRange)?;
                self.escalate.replace(ms).is_some()
            }
            Opt::Calendar => {
                let period = Period::parse(value).ok_or(Problem::OutOfRange)?;
                self.calendar.replace(period).is_some()
            }
            Opt::Tz => {
                let zone = tz::parse_zone(value).ok_or(Problem::OutOfRange)?;
                self.tz.replace(zone).is_some()
            }
            _ => false,
        };
        match repeated {
            true => Err(Problem::Repeated),
            false => Ok(2),
        }
    }
}

/// RL.ADMIT's FORCE and RESERVE as given, judged against the other
/// options (before the policy is resolved).
pub fn check_charge(opts: &Options) -> Result<(), RlError> {
    let Some(_) = opts.reserve else {
        return match (opts.force, opts.cost, opts.block) {
            (true, Some(0), _) => Err(RlError::ForceNothing),
            (true, _, Some(_)) => {
                let why = "a forced charge never waits";
                Err(RlError::Conflict(Opt::Force.name(), Opt::Block.name(), why))
            }
            _ => Ok(()),
        };
    };
    let reserve = Opt::Reserve.name();
    let conflict = if opts.force {
        Some((
            Opt::Force,
            "a forced charge is consumed now, a booking later",
        ))
    } else if opts.block.is_some() {
        Some((Opt::Block, "a booking answers at once with its slot"))
    } else if opts.shadow {
        Some((Opt::Shadow, "a trial must never make a caller wait"))
    } else {
        None
    };
    match conflict {
        Some((opt, why)) => Err(RlError::Conflict(reserve, opt.name(), why)),
        None => Ok(()),
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

/// RL.THROTTLE key max_burst count_per_period period [quantity]; the
/// registered arity (-5) guarantees the first four.
pub fn throttle(args: &[&[u8]]) -> Result<(throttle::Params, i64), RlError> {
    let [_, _, max_burst, count, period, rest @ ..] = args else {
        return Err(RlError::WrongArity("rl.throttle"));
    };
    if rest.len() > 1 {
        return Err(RlError::WrongArity("rl.throttle"));
    }
    let params = throttle::Params {
        max_burst: int_arg(max_burst, "max_burst", 0)?,
        count: int_arg(count, "count_per_period", 1)?,
        period_s: int_arg(period, "period", 1)?,
    };
    let quantity = match rest.first() {
        Some(quantity) => int_arg(quantity, "quantity", 0)?,
        None => 1,
    };
    Ok((params, quantity))
}

/// getkeys for `key [option value ...]`: the counter (`counter_read_only`
/// says how it is used), and the META hash, read-only. Reported through
/// `key(position, read_only)`, even for a malformed call.
pub fn limiter_keys(args: &[&[u8]], counter_read_only: bool, mut key: impl FnMut(usize, bool)) {
    if args.len() > 1 {
        key(1, counter_read_only);
    }
    let mut at = 2;
    while at + 1 < args.len() {
        if KEY_OPTION.keyword.matches(args[at]) {
            key(at + 1, true);
        }
        at += match Opt::parse(args[at], OptSet::ALL) {
            Some(opt) if opt.is_flag() => 1,
            _ => 2,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::BURST_RANGE;
    use proptest::prelude::*;

    fn parse_options(args: &[&[u8]], first: usize, allowed: OptSet) -> Result<Options, RlError> {
        let mut opts = Options::default();
        read_options(args, first, allowed, &mut opts)?;
        Ok(opts)
    }

    fn parse(words: &[&str]) -> Result<Options, RlError> {
        let args: Vec<&[u8]> = words.iter().map(|w| w.as_bytes()).collect();
        parse_options(&args, 2, LIMITER_SET)
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
                cost: Some(2),
                ..Options::default()
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
            assert_eq!(Opt::parse(opt.name().as_bytes(), OptSet::ALL), Some(opt));
            let lower = opt.name().to_ascii_lowercase();
            assert_eq!(Opt::parse(lower.as_bytes(), OptSet::ALL), Some(opt));
        }
        assert_eq!(Opt::parse(b"LIMITS", OptSet::ALL), None);
    }

    #[test]
    fn honours_the_allowed_set() {
        let args: Vec<&[u8]> = vec![b"rl.ttl", b"k", b"COST", b"1"];
        assert_eq!(
            parse_options(&args, 2, OptSet::of(&[Opt::Limit, Opt::Meta])),
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
            if let Ok(o) = parse_options(&args, 0, OptSet::ALL) {
                prop_assert!(o.limit.is_none_or(|v| v >= 0));
                prop_assert!(o.window.is_none_or(|v| v >= 1));
                prop_assert!(o.cost.is_none_or(|v| v >= 0));
                prop_assert!(o.meta.is_none_or(|i| i < args.len()));
            }
        }
    }
}
