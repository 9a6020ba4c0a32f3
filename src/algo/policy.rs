//! A limiter's policy: which algorithm, how many per window, how much burst.

use std::ffi::CStr;

use crate::error::RlError;
use crate::keyword::Keyword;

use super::calendar::Period;
use super::state::{self, Layout, Prefix, MAX_FIELDS};
use super::{fixed, gcra, leaky, sliding, token, State, NS_PER_MS};
use crate::time::zone::Zone;

/// What BURST means to an algorithm, and so how far ahead of now its state
/// reaches (which must fit the clock).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// Nothing: its state spans this many windows (ms).
    Windows(i64),
    /// A bucket of BURST requests, at least one (ns).
    Bucket,
    /// A queue of BURST waiting requests, maybe none, and the one being
    /// served (ns).
    Queue,
}

/// What the rest of the module knows of an algorithm besides its code:
/// ALGO's keyword, COMMAND DOCS, the config's enum, the META field, the
/// INFO field names and the stored state's prefix all come from this row.
pub struct AlgoSpec {
    pub algo: Algo,
    pub name: &'static CStr,
    /// `name` as text.
    text: &'static str,
    keyword: Keyword,
    pub reach: Reach,
    /// Its state is a bare integer (see `Layout::BARE`).
    pub bare: bool,
    /// What its stored state starts with.
    pub prefix: Prefix,
    /// Its stored state parsed and checked (by its `Layout::read`).
    pub decode: fn(&[u8]) -> Option<State>,
}

/// The row of the algorithm whose state is `L`.
const fn row<L: Layout>(name: &'static CStr, reach: Reach) -> AlgoSpec {
    assert!(
        L::FIELDS >= 1 && L::FIELDS <= MAX_FIELDS,
        "a state is 1 to MAX_FIELDS integers"
    );
    assert!(!L::BARE || L::FIELDS == 1, "a bare state is one integer");
    AlgoSpec {
        algo: L::ALGO,
        name,
        text: crate::keyword::text(name),
        keyword: Keyword::new(crate::keyword::text(name)),
        reach,
        bare: L::BARE,
        prefix: Prefix::of(crate::keyword::text(name), L::BARE),
        decode: state::decode::<L>,
    }
}

/// Declares `Algo`, the table's key, with one variant per row of
/// `ALGORITHMS`, each written beside its row.
macro_rules! algorithms {
    ($($algo:ident => $row:expr,)+) => {
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum Algo {
            $($algo,)+
        }

        pub const ALGORITHMS: [AlgoSpec; [$(Algo::$algo),+].len()] = [$($row),+];
    };
}

// Every algorithm: adding one is its file (its state's `Layout` and its
// decisions), its `pub mod` and its arms in `algo::admit` and `algo::refund`
// in algo/mod.rs, and a row here.
algorithms! {
    Fixed => row::<fixed::Count>(c"fixed", Reach::Windows(1)),
    Sliding => row::<sliding::Windows>(c"sliding", Reach::Windows(2)),
    Token => row::<token::Bucket>(c"token", Reach::Bucket),
    Gcra => row::<gcra::Tat>(c"gcra", Reach::Bucket),
    Leaky => row::<leaky::Queue>(c"leaky", Reach::Queue),
}

impl Algo {
    pub const ALL: [Algo; ALGORITHMS.len()] = {
        let mut all = [Algo::Fixed; ALGORITHMS.len()];
        let mut i = 0;
        while i < all.len() {
            all[i] = ALGORITHMS[i].algo;
            assert!(
                all[i] as usize == i,
                "each row's Layout is its own algorithm's"
            );
            i += 1;
        }
        all
    };

    /// Every name, for errors (the table's test checks it names each row).
    pub const NAMES: &'static str = "one of fixed, sliding, token, gcra, leaky";

    pub const fn spec(self) -> &'static AlgoSpec {
        &ALGORITHMS[self as usize]
    }

    pub fn name(self) -> &'static str {
        self.spec().text
    }

    pub fn parse(s: &[u8]) -> Option<Algo> {
        Some(ALGORITHMS.iter().find(|a| a.keyword.matches(s))?.algo)
    }

    /// Whether BURST means anything to this algorithm.
    pub fn uses_burst(self) -> bool {
        !matches!(self.spec().reach, Reach::Windows(_))
    }

    /// Whether it counts in windows (`fixed`, `sliding`): ALIGN applies.
    pub fn is_window(self) -> bool {
        !self.uses_burst()
    }

    /// The least BURST: a queue may be empty, a bucket holds one.
    pub fn min_burst(self) -> i64 {
        match self.spec().reach {
            Reach::Queue => 0,
            _ => 1,
        }
    }
}

/// What an RL.ADMIT asks beyond the plain decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Charge {
    #[default]
    Plain,
    /// FORCE: consume the cost even over the limit (within the horizon).
    Force,
    /// RESERVE max_ms: book the earliest slot within `max_ms`.
    Reserve { max_ms: i64 },
    /// RL.REFUND AT at_ms: cancel the booking whose slot is at `at_ms`.
    Cancel { at_ms: i64 },
}

/// A validated policy. `limit` >= 1 and `window_ms` >= 1 always.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    pub algo: Algo,
    /// Requests per window (the rate, for the buckets).
    pub limit: i64,
    pub window_ms: i64,
    /// Bucket capacity (`token`, `gcra`) or queue size (`leaky`).
    pub burst: i64,
    /// The sliding window over calendar periods: CALENDAR's period and
    /// TZ's zone; `window_ms` is then the current period's length.
    pub calendar: Option<(Period, Zone)>,
    /// The booking horizon (ns): how far past a full bucket the buckets'
    /// state may run ahead of now (0 from `new`; the call's resolution
    /// sets it from META or the config).
    pub horizon_ns: i128,
    /// What the call asks (RL.ADMIT's FORCE or RESERVE); `Plain` else.
    pub charge: Charge,
}

impl Policy {
    /// Checks that every time this policy can produce fits the clock at
    /// `now_ms`. `burst` defaults to `limit`.
    pub fn new(
        algo: Algo,
        limit: i64,
        window_ms: i64,
        burst: Option<i64>,
        now_ms: i64,
    ) -> Result<Policy, RlError> {
        let burst = burst.unwrap_or(limit);
        let policy = Policy {
            algo,
            limit,
            window_ms,
            burst,
            calendar: None,
            horizon_ns: 0,
            charge: Charge::Plain,
        };
        if burst < algo.min_burst() {
            return Err(RlError::BadValue("BURST", crate::error::BURST_RANGE));
        }
        // The longest span of state: two windows (sliding) or a full bucket.
        // The buckets store absolute times in ns, which must fit an i64
        // (until the year 2262); the windows store ms.
        let fits = match algo.spec().reach {
            Reach::Windows(n) => fits_ms(now_ms, i128::from(n) * i128::from(window_ms)),
            _ => policy.capacity_ns().is_some_and(|cap| fits_ns(now_ms, cap)),
        };
        if !fits {
            return Err(RlError::PolicyTooLarge);
        }
        Ok(policy)
    }

    /// The emission interval: ns between two requests at the sustained rate,
    /// rounded up so the rate is never exceeded.
    pub fn interval_ns(&self) -> i128 {
        let window_ns = i128::from(self.window_ms) * NS_PER_MS;
        let limit = i128::from(self.limit.max(1));
        super::div(window_ns + limit - 1, limit)
    }

    /// How much debt (ns) the bucket holds when full: `burst` intervals, plus
    /// the request being served for a queue.
    pub fn capacity_ns(&self) -> Option<i128> {
        let slots = match self.algo.spec().reach {
            Reach::Queue => i128::from(self.burst) + 1,
            _ => i128::from(self.burst),
        };
        slots.checked_mul(self.interval_ns())
    }
}

/// `now + span_ms` (rounded up by a ms) fits the ms clock.
fn fits_ms(now_ms: i64, span_ms: i128) -> bool {
    i128::from(now_ms) + span_ms < i128::from(i64::MAX)
}

/// `now + span_ns`, and every absolute ns time in between, fits an i64,
/// wherever in the ms `now_ms` the clock's µs are.
pub fn fits_ns(now_ms: i64, span_ns: i128) -> bool {
    (i128::from(now_ms) + 1) * NS_PER_MS - 1 + span_ns <= i128::from(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_spells_every_name() {
        let names: Vec<&str> = Algo::ALL.iter().map(|a| a.name()).collect();
        assert_eq!(Algo::NAMES, format!("one of {}", names.join(", ")));
        for algo in Algo::ALL {
            assert_eq!(Algo::parse(algo.name().as_bytes()), Some(algo));
            assert_eq!(
                Algo::parse(algo.name().to_uppercase().as_bytes()),
                Some(algo)
            );
        }
    }

    #[test]
    fn interval_rounds_up() {
        let p = Policy::new(Algo::Token, 3, 1_000, None, 0).unwrap();
        assert_eq!(p.interval_ns(), 333_333_334);
        assert_eq!(p.capacity_ns(), Some(3 * 333_333_334));
        let fast = Policy::new(Algo::Gcra, i64::MAX, 1, Some(1), 0).unwrap();
        assert_eq!(fast.interval_ns(), 1, "faster than 1/ns is capped at 1/ns");
    }

    #[test]
    fn refuses_policies_beyond_the_clock() {
        let now = 1_764_000_000_000;
        assert_eq!(
            Policy::new(Algo::Token, 1, i64::MAX / 2, Some(i64::MAX), now),
            Err(RlError::PolicyTooLarge)
        );
        assert_eq!(
            Policy::new(Algo::Sliding, 1, i64::MAX - now, None, now),
            Err(RlError::PolicyTooLarge)
        );
        assert!(Policy::new(Algo::Fixed, 1, 1_000_000_000, None, now).is_ok());
        assert!(Policy::new(Algo::Leaky, 1, 1_000, Some(0), now).is_ok());
        // Bucket state is absolute ns: a bucket reaching past 2262 is refused.
        let year_ms = 31_536_000_000i64;
        assert!(Policy::new(Algo::Gcra, 1, 200 * year_ms, Some(1), now).is_ok());
        assert_eq!(
            Policy::new(Algo::Gcra, 1, 1_000 * year_ms, Some(2), now),
            Err(RlError::PolicyTooLarge)
        );
        assert!(Policy::new(Algo::Token, 1, 1_000, Some(0), now).is_err());
    }
}
