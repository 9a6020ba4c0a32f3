//! Every way a call can fail, each with the exact reply text.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RlError {
    WrongArity(&'static str),
    /// An option's value is out of range: (option, what it must be).
    BadValue(&'static str, &'static str),
    MissingValue(&'static str),
    Repeated(&'static str),
    UnknownOption(String),
    TooManyArguments,
    /// `now + window` does not fit the clock.
    WindowOverflow(&'static str),
    /// `now + penalty` does not fit the clock: what gave the penalty.
    PenaltyOverflow(&'static str),
    /// A `penalty:` value that is not the penalty's form.
    BadPenalty,
    NoWindow,
    /// A field of the META hash is not usable: (field, what it must be).
    BadMetaField(&'static str, &'static str),
    MetaWrongType,
    /// The stored value is not this algorithm's state.
    BadState(&'static str),
    /// Times this policy implies do not fit the clock.
    PolicyTooLarge,
    /// One argument makes the policy impossible: (argument, why).
    TooLarge(&'static str, &'static str),
    /// An option the chosen algorithm does not use: (option, algorithm).
    NotForAlgo(&'static str, &'static str),
    /// ALIGN (as given: the option or its META field) with a bucket.
    OnlyWindows(&'static str, &'static str),
    /// Two options that exclude each other, and why.
    Conflict(&'static str, &'static str, &'static str),
    /// TZ (as given) without CALENDAR.
    TzWithoutCalendar(&'static str),
    /// ESCALATE (as given) without PENALTY.
    EscalateWithoutPenalty(&'static str),
    /// ESCALATE (as given) below PENALTY's ms.
    EscalateBelowPenalty(&'static str),
    DuplicateKeys,
    /// An option before the first POLICY of RL.ADMITALL.
    PolicyFirst,
    /// RL.ADMITALL: not an option where the first POLICY belongs, after
    /// `numkeys` keys (numkeys, the word shown): numkeys is likely wrong.
    NoPolicyAfterKeys(usize, String),
    /// RL.ADMITALL: (keys, policies).
    PolicyCount(usize, usize),
    WrongType,
    NotACounter,
    /// RL.ACQUIRE with a limit and no TTL.
    NoTtl,
    /// A lease key's score is not an integer ms in 0..=2^53.
    NotADeadline,
    /// BLOCK: the key already has `ratelimit.max-waiters` callers waiting.
    QueueFull(i64),
    /// RESERVE or AT (as given) under a window algorithm.
    NeedsBooking(&'static str),
    /// FORCE with COST 0.
    ForceNothing,
}

pub const NON_NEGATIVE: &str = "an integer from 0 to 9223372036854775807";
pub const POSITIVE: &str = "an integer from 1 to 9223372036854775807";
pub const NON_EMPTY: &str = "a non-empty string";
/// A flag's META field.
pub const ZERO_OR_ONE: &str = "0 or 1";
/// A leaky queue may be empty; a bucket must hold at least one request.
pub const BURST_RANGE: &str = "an integer from 1 (0 for ALGO leaky) to 9223372036854775807";
/// The booking horizon (META field `max_reserve_ms`), up to one day.
pub const MAX_RESERVE_FORM: &str = "an integer from 0 to 86400000";

impl fmt::Display for RlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use RlError::*;
        match self {
            WrongArity(cmd) => write!(f, "ERR wrong number of arguments for '{cmd}' command"),
            BadValue(opt, must) => write!(f, "ERR {opt} must be {must}"),
            MissingValue(opt) => write!(f, "ERR {opt} needs a value"),
            Repeated(opt) => write!(f, "ERR {opt} is given more than once"),
            UnknownOption(opt) => write!(f, "ERR unknown option '{opt}'"),
            TooManyArguments => write!(f, "ERR too many arguments"),
            WindowOverflow(what) => write!(f, "ERR {what} is too large: the window end overflows"),
            PenaltyOverflow(what) => {
                write!(f, "ERR {what} is too large: the penalty end overflows")
            }
            BadPenalty => write!(f, "ERR limiter key holds a corrupt penalty"),
            NoWindow => write!(
                f,
                "ERR a limit is set but no window: give WINDOW or set field 'duration' in the META hash"
            ),
            BadMetaField(field, must) => {
                write!(f, "ERR META hash field '{field}' must be {must}")
            }
            MetaWrongType => write!(f, "WRONGTYPE META key does not hold a hash"),
            WrongType => write!(f, "WRONGTYPE Operation against a key holding the wrong kind of value"),
            BadState(algo) => write!(f, "ERR limiter key does not hold {algo} state"),
            PolicyTooLarge => write!(f, "ERR the policy is too large: its times overflow the clock"),
            TooLarge(arg, why) => write!(f, "ERR {arg} is too large: {why}"),
            NotForAlgo(opt, algo) => write!(f, "ERR {opt} does not apply to ALGO {algo}"),
            Conflict(a, b, why) => write!(f, "ERR {a} and {b} exclude each other: {why}"),
            TzWithoutCalendar(what) => write!(f, "ERR {what} applies only with CALENDAR"),
            EscalateWithoutPenalty(what) => write!(f, "ERR {what} applies only with PENALTY"),
            EscalateBelowPenalty(what) => {
                write!(f, "ERR {what} must be at least the penalty's ms")
            }
            OnlyWindows(what, algo) => write!(
                f,
                "ERR {what} applies only to the windows (ALGO fixed or sliding), not to ALGO {algo}"
            ),
            DuplicateKeys => write!(f, "ERR every key must be distinct"),
            PolicyFirst => write!(f, "ERR policy options must follow a POLICY keyword"),
            NoPolicyAfterKeys(numkeys, word) => write!(
                f,
                "ERR expected POLICY after the {numkeys} keys numkeys counts, got '{word}'"
            ),
            PolicyCount(keys, policies) => {
                write!(f, "ERR one POLICY per key is needed: {keys} keys, {policies} policies")
            }
            NotACounter => write!(f, "ERR limiter key does not hold an integer counter"),
            NoTtl => write!(
                f,
                "ERR a limit is set but no TTL: give TTL or set field 'ttl' in the META hash"
            ),
            NotADeadline => write!(f, "ERR lease key holds a score that is not a deadline in ms"),
            QueueFull(max) => write!(
                f,
                "ERR too many callers wait on this key: ratelimit.max-waiters is {max}"
            ),
            NeedsBooking(what) => write!(
                f,
                "ERR {what} needs ALGO gcra, token or leaky: a window's count cannot book a slot in a later window"
            ),
            ForceNothing => write!(f, "ERR FORCE needs a COST of at least 1"),
        }
    }
}
