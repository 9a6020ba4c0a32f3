//! The option table and the vocabularies: every option's keyword, how
//! COMMAND DOCS names its value, its META field and range (`OPTIONS`), and
//! which commands take which (`POLICY`, `LIMITER`, `ADMIT`, `LEASE`). The
//! bottom of the grammar: the readers (`args.rs`, `admitall.rs`,
//! `lease.rs`), the registration table and the docs read it; it reads none
//! of them.

use std::ffi::CStr;

use crate::algo::calendar::PERIOD_NAMES;
use crate::algo::Algo;
use crate::error::{BURST_RANGE, MAX_RESERVE_FORM, NON_EMPTY, NON_NEGATIVE, POSITIVE, ZERO_OR_ONE};
use crate::keyword::{fold, text, Keyword};
use crate::time::tz::OFFSET_FORM;

/// Options a command may take after its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opt {
    Algo,
    Limit,
    Window,
    Burst,
    Meta,
    Cost,
    /// A lease's time to live (RL.ACQUIRE).
    Ttl,
    /// A lease's id (RL.ACQUIRE).
    Id,
    /// Wait up to this many ms to be admitted (RL.ADMIT, RL.ACQUIRE; module
    /// only, see `block`).
    Block,
    /// Shadow mode: decide and keep state as enforced, but never refuse
    /// (a flag: no value).
    Shadow,
    /// The penalty box: a refusal refuses everything for this many ms.
    Penalty,
    /// Windows start at multiples of WINDOW since the epoch (a flag).
    Align,
    /// Calendar periods: day, week, month or year.
    Calendar,
    /// The zone of CALENDAR's boundaries: a fixed offset from UTC or an
    /// IANA zone name.
    Tz,
    /// The penalty's escalation ladder: its cap in ms (with PENALTY).
    Escalate,
    /// Consume COST even over the limit (RL.ADMIT; a flag).
    Force,
    /// Book the earliest slot within this many ms (RL.ADMIT).
    Reserve,
    /// Cancel the booking whose slot is at this absolute ms (RL.REFUND).
    At,
    /// The booking horizon: no keyword any command takes, only its META
    /// field `max_reserve_ms` (the module's config otherwise).
    Horizon,
}

/// What an option's value is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Value {
    /// An algorithm's name (see `algo::ALGORITHMS`).
    Algorithm,
    Integer,
    /// A key: the META hash.
    Key,
    /// Any non-empty string: a lease id.
    Text,
    /// None: the keyword alone (a flag), `1` or `0` in its META field.
    Flag,
    /// A calendar period's name (see `calendar::PERIODS`).
    Period,
    /// A zone: a fixed offset from UTC, `+HH:MM` or `-HH:MM`, or an IANA
    /// zone name.
    Zone,
}

/// One option: its keyword, how COMMAND DOCS names its value, and the META
/// hash field that stands in for it. Keyword matching, COMMAND DOCS,
/// getkeys scanning and the META lookup all read this table.
pub struct OptSpec {
    pub opt: Opt,
    pub token: &'static CStr,
    /// `token` as text, for errors.
    pub(super) name: &'static str,
    pub(super) keyword: Keyword,
    pub value_name: &'static CStr,
    pub value: Value,
    pub meta_field: Option<&'static CStr>,
    /// `meta_field` as text, for errors ("" without one).
    pub(super) meta_field_name: &'static str,
    /// The least integer value (for an integer option).
    pub(super) min: i64,
    /// What the value must be, for errors.
    pub(super) range: &'static str,
}

const fn row(
    opt: Opt,
    token: &'static CStr,
    (value_name, value, min, range): (&'static CStr, Value, i64, &'static str),
    meta_field: Option<&'static CStr>,
) -> OptSpec {
    OptSpec {
        opt,
        token,
        name: text(token),
        keyword: Keyword::new(text(token)),
        value_name,
        value,
        meta_field,
        meta_field_name: match meta_field {
            Some(field) => text(field),
            None => "",
        },
        min,
        range,
    }
}

/// Every option, in `Opt` order.
pub const OPTIONS: [OptSpec; 19] = [
    row(
        Opt::Algo,
        c"ALGO",
        (c"algorithm", Value::Algorithm, 0, Algo::NAMES),
        Some(c"algorithm"),
    ),
    row(
        Opt::Limit,
        c"LIMIT",
        (c"max", Value::Integer, 0, NON_NEGATIVE),
        Some(c"max"),
    ),
    row(
        Opt::Window,
        c"WINDOW",
        (c"ms", Value::Integer, 1, POSITIVE),
        Some(c"duration"),
    ),
    row(
        Opt::Burst,
        c"BURST",
        (c"n", Value::Integer, 0, BURST_RANGE),
        Some(c"burst"),
    ),
    row(Opt::Meta, c"META", (c"metakey", Value::Key, 0, ""), None),
    row(
        Opt::Cost,
        c"COST",
        (c"n", Value::Integer, 0, NON_NEGATIVE),
        None,
    ),
    row(
        Opt::Ttl,
        c"TTL",
        (c"ms", Value::Integer, 1, POSITIVE),
        Some(c"ttl"),
    ),
    row(
        Opt::Id,
        c"ID",
        (c"lease-id", Value::Text, 0, NON_EMPTY),
        None,
    ),
    row(
        Opt::Block,
        c"BLOCK",
        (c"timeout_ms", Value::Integer, 0, NON_NEGATIVE),
        None,
    ),
    row(
        Opt::Shadow,
        c"SHADOW",
        (c"shadow", Value::Flag, 0, ZERO_OR_ONE),
        Some(c"shadow"),
    ),
    row(
        Opt::Penalty,
        c"PENALTY",
        (c"ms", Value::Integer, 1, POSITIVE),
        Some(c"penalty"),
    ),
    row(
        Opt::Align,
        c"ALIGN",
        (c"align", Value::Flag, 0, ZERO_OR_ONE),
        Some(c"align"),
    ),
    row(
        Opt::Calendar,
        c"CALENDAR",
        (c"period", Value::Period, 0, PERIOD_NAMES),
        Some(c"calendar"),
    ),
    row(
        Opt::Tz,
        c"TZ",
        (c"zone", Value::Zone, 0, OFFSET_FORM),
        Some(c"tz"),
    ),
    row(
        Opt::Escalate,
        c"ESCALATE",
        (c"cap_ms", Value::Integer, 1, POSITIVE),
        Some(c"escalate"),
    ),
    row(
        Opt::Force,
        c"FORCE",
        (c"force", Value::Flag, 0, ZERO_OR_ONE),
        None,
    ),
    row(
        Opt::Reserve,
        c"RESERVE",
        (c"max_ms", Value::Integer, 0, NON_NEGATIVE),
        None,
    ),
    row(
        Opt::At,
        c"AT",
        (c"at_ms", Value::Integer, 0, NON_NEGATIVE),
        None,
    ),
    row(
        Opt::Horizon,
        c"HORIZON",
        (c"ms", Value::Integer, 0, MAX_RESERVE_FORM),
        Some(c"max_reserve_ms"),
    ),
];

impl Opt {
    pub const ALL: [Opt; OPTIONS.len()] = {
        let mut all = [Opt::Algo; OPTIONS.len()];
        let mut i = 0;
        while i < all.len() {
            all[i] = OPTIONS[i].opt;
            assert!(all[i] as usize == i, "OPTIONS is in Opt order");
            i += 1;
        }
        all
    };

    pub const fn spec(self) -> &'static OptSpec {
        &OPTIONS[self as usize]
    }

    pub fn name(self) -> &'static str {
        self.spec().name
    }

    /// Whether the option is a flag: its keyword alone, no value.
    pub const fn is_flag(self) -> bool {
        matches!(self.spec().value, Value::Flag)
    }

    /// The META hash field that stands in for this option.
    pub fn meta_field(self) -> &'static str {
        self.spec().meta_field_name
    }

    /// The option `word` names, if `allowed` has it: one match on the
    /// folded word, whose arms are OPTIONS' keywords (a unit test checks
    /// every row is one).
    #[inline]
    pub fn parse(word: &[u8], allowed: OptSet) -> Option<Opt> {
        const fn key(opt: Opt) -> (usize, u64) {
            opt.spec().keyword.key()
        }
        const ALGO: (usize, u64) = key(Opt::Algo);
        const LIMIT: (usize, u64) = key(Opt::Limit);
        const WINDOW: (usize, u64) = key(Opt::Window);
        const BURST: (usize, u64) = key(Opt::Burst);
        const META: (usize, u64) = key(Opt::Meta);
        const COST: (usize, u64) = key(Opt::Cost);
        const TTL: (usize, u64) = key(Opt::Ttl);
        const ID: (usize, u64) = key(Opt::Id);
        const BLOCK: (usize, u64) = key(Opt::Block);
        const SHADOW: (usize, u64) = key(Opt::Shadow);
        const PENALTY: (usize, u64) = key(Opt::Penalty);
        const ALIGN: (usize, u64) = key(Opt::Align);
        const CALENDAR: (usize, u64) = key(Opt::Calendar);
        const TZ: (usize, u64) = key(Opt::Tz);
        const ESCALATE: (usize, u64) = key(Opt::Escalate);
        const FORCE: (usize, u64) = key(Opt::Force);
        const RESERVE: (usize, u64) = key(Opt::Reserve);
        const AT: (usize, u64) = key(Opt::At);
        const HORIZON: (usize, u64) = key(Opt::Horizon);
        let opt = match (word.len(), fold(word)?) {
            ALGO => Opt::Algo,
            LIMIT => Opt::Limit,
            WINDOW => Opt::Window,
            BURST => Opt::Burst,
            META => Opt::Meta,
            COST => Opt::Cost,
            TTL => Opt::Ttl,
            ID => Opt::Id,
            BLOCK => Opt::Block,
            SHADOW => Opt::Shadow,
            PENALTY => Opt::Penalty,
            ALIGN => Opt::Align,
            CALENDAR => Opt::Calendar,
            TZ => Opt::Tz,
            ESCALATE => Opt::Escalate,
            FORCE => Opt::Force,
            RESERVE => Opt::Reserve,
            AT => Opt::At,
            HORIZON => Opt::Horizon,
            _ => return None,
        };
        allowed.has(opt).then_some(opt)
    }
}

/// A set of options, one bit each, for the options a command takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptSet(u32);

impl OptSet {
    pub const ALL: OptSet = OptSet::of(&Opt::ALL);

    pub const fn of(opts: &[Opt]) -> OptSet {
        let mut bits = 0u32;
        let mut i = 0;
        while i < opts.len() {
            bits |= 1 << opts[i] as u32;
            i += 1;
        }
        OptSet(bits)
    }

    #[inline]
    pub fn has(self, opt: Opt) -> bool {
        self.0 & (1 << opt as u32) != 0
    }
}

/// `first`, then `more`: a vocabulary built on another, each word written
/// once.
const fn then<const N: usize>(first: &[Opt], more: &[Opt]) -> [Opt; N] {
    assert!(first.len() + more.len() == N);
    let mut out = [Opt::Algo; N];
    let mut i = 0;
    while i < N {
        out[i] = match i < first.len() {
            true => first[i],
            false => more[i - first.len()],
        };
        i += 1;
    }
    out
}

/// The META fields standing in for `opts`, in their order.
const fn meta_fields<const N: usize>(opts: &[Opt]) -> [(Opt, &'static CStr); N] {
    let mut out = [(Opt::Algo, c""); N];
    let (mut i, mut n) = (0, 0);
    while i < opts.len() {
        if let Some(field) = opts[i].spec().meta_field {
            out[n] = (opts[i], field);
            n += 1;
        }
        i += 1;
    }
    assert!(n == N, "as many META fields as declared");
    out
}

/// The META fields a limiter reads: its policy options', and the horizon.
pub const META_FIELDS: [(Opt, &CStr); 11] =
    meta_fields(&then::<{ POLICY.len() + 1 }>(POLICY, &[Opt::Horizon]));
/// The META fields RL.ACQUIRE reads.
pub const LEASE_META_FIELDS: [(Opt, &CStr); 3] = meta_fields(LEASE);

/// The option whose value is a key (META), for getkeys scanning.
pub(super) const KEY_OPTION: &OptSpec = {
    let mut i = 0;
    while !matches!(OPTIONS[i].value, Value::Key) {
        i += 1;
    }
    &OPTIONS[i]
};

/// The policy options of every limiter command.
pub const POLICY: &[Opt] = &[
    Opt::Algo,
    Opt::Limit,
    Opt::Window,
    Opt::Burst,
    Opt::Meta,
    Opt::Shadow,
    Opt::Penalty,
    Opt::Align,
    Opt::Calendar,
    Opt::Tz,
    Opt::Escalate,
];
/// RL.ADMIT's and RL.REFUND's: the policy and COST.
pub const LIMITER: &[Opt] = &then::<{ POLICY.len() + 1 }>(POLICY, &[Opt::Cost]);
/// RL.ADMIT's: the policy, COST, BLOCK, FORCE and RESERVE.
pub const ADMIT: &[Opt] =
    &then::<{ LIMITER.len() + 3 }>(LIMITER, &[Opt::Block, Opt::Force, Opt::Reserve]);
/// RL.REFUND's: the policy, COST and AT (the cancel of a booking).
pub const REFUND: &[Opt] = &then::<{ LIMITER.len() + 1 }>(LIMITER, &[Opt::At]);
/// RL.ACQUIRE's options.
pub const LEASE: &[Opt] = &[
    Opt::Limit,
    Opt::Ttl,
    Opt::Meta,
    Opt::Id,
    Opt::Shadow,
    Opt::Block,
];
/// `POLICY`, `LIMITER` and `LEASE` as sets, for parsing.
pub const POLICY_SET: OptSet = OptSet::of(POLICY);
pub const LIMITER_SET: OptSet = OptSet::of(LIMITER);
pub const ADMIT_SET: OptSet = OptSet::of(ADMIT);
pub const REFUND_SET: OptSet = OptSet::of(REFUND);
pub const LEASE_SET: OptSet = OptSet::of(LEASE);
