//! Pure rate-limiting algorithms: state, policy, cost and the current time
//! in; a decision and the new state out. No FFI here, so unit tests,
//! property tests and fuzzing reach every line directly.
//!
//! Times in state are absolute server time (ms, or ns where a rate needs
//! sub-millisecond precision), so replicas, AOF and RDB agree. The clock is
//! read in µs (`Now`): the windows see its ms, the buckets its µs.

pub mod calendar;
pub mod fixed;
pub mod gcra;
pub mod leaky;
pub mod lease;
pub mod penalty;
pub mod policy;
pub mod sliding;
pub mod state;
pub mod throttle;
pub mod token;

pub use policy::{Algo, AlgoSpec, Charge, Policy, ALGORITHMS};
pub use state::State;

/// What a call answers: the five integers of the RL.ADMIT reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    pub admitted: bool,
    pub limit: i64,
    /// Budget left after this call, never below 0.
    pub remaining: i64,
    /// Refused: ms until a retry can succeed, or -1 when it never can (the
    /// cost exceeds the capacity). Admitted: 0, except for `leaky`, where it
    /// is the delay before the request may proceed.
    pub retry_after_ms: i64,
    /// ms until the limiter is back to its full budget; 0 with no state.
    pub reset_after_ms: i64,
    /// RESERVE's slot (`Slot::NONE` for any other call, and a refusal).
    pub slot: Slot,
}

impl Decision {
    /// The answer for a limiter with no limit configured.
    pub const UNLIMITED: Decision = Decision {
        admitted: true,
        limit: 0,
        remaining: 0,
        retry_after_ms: 0,
        reset_after_ms: 0,
        slot: Slot::NONE,
    };
}

/// A booked slot (RESERVE): how long to wait from the call's ms, and the
/// slot's absolute ms (`at_ms` = now's ms + `delay_ms`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    pub delay_ms: i64,
    pub at_ms: i64,
}

impl Slot {
    /// No slot: a refusal (or a call without RESERVE).
    pub const NONE: Slot = Slot {
        delay_ms: -1,
        at_ms: -1,
    };

    /// The slot `wait_ns` after now (the ns clock `now_ns`, its ms
    /// `now_ms`): now for no wait, else its time rounded up to the ms, so
    /// that a caller going ahead then is never early.
    pub fn after(wait_ns: i128, now_ns: i128, now_ms: i64) -> Slot {
        if wait_ns <= 0 {
            return Slot {
                delay_ms: 0,
                at_ms: now_ms,
            };
        }
        let at_ms = ceil_ms(now_ns + wait_ns);
        Slot {
            delay_ms: at_ms.saturating_sub(now_ms),
            at_ms,
        }
    }
}

/// What the store must do after a decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Write {
    Nothing,
    /// Store the state with this absolute expiry (ms).
    State {
        state: State,
        expires_at: i64,
    },
    /// Keep the value; only give the key an expiry: one it lacked, or a
    /// later one its state needs (see `outcome_outlives_its_reset`).
    Expiry {
        expires_at: i64,
    },
    /// The state is back to empty: remove the key.
    Delete,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    pub decision: Decision,
    pub write: Write,
    /// When the limiter is back to its full budget, in absolute ms rounded
    /// up: how long a refusal's state must live. The reset above is the
    /// same span rounded on its own, which can end a ms earlier than this
    /// when the clock is between two ms.
    pub reset_at: i64,
}

pub const NS_PER_MS: i128 = 1_000_000;
pub const NS_PER_US: i128 = 1_000;

/// The server's time for one call, read once: the windows and every key
/// expiry count in its ms, the buckets in its µs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Now {
    pub ms: i64,
    pub us: i64,
}

impl Now {
    pub fn from_us(us: i64) -> Now {
        Now {
            ms: us.div_euclid(1_000),
            us,
        }
    }

    /// The start of the ms `ms` (tests, and callers with only a ms clock).
    pub fn from_ms(ms: i64) -> Now {
        Now {
            ms,
            us: ms.saturating_mul(1_000),
        }
    }
}

/// `now_us` in ns.
pub fn ns_of_us(now_us: i64) -> i128 {
    i128::from(now_us) * NS_PER_US
}

/// `a / b` exactly as i128 division gives it, in one machine division when
/// both fit a u64 (the usual case): i128 division is a library call.
#[inline]
pub fn div(a: i128, b: i128) -> i128 {
    match (u64::try_from(a), u64::try_from(b)) {
        (Ok(a), Ok(b)) if b != 0 => i128::from(a / b),
        _ => a / b,
    }
}

/// A non-negative span in ns, rounded up to whole ms, so that a caller who
/// waits that long is never early; an absolute ns time, rounded up to the
/// ms, so that a key expiring then outlives it.
pub fn ceil_ms(ns: i128) -> i64 {
    let ms = div(ns.max(0) + NS_PER_MS - 1, NS_PER_MS);
    i64::try_from(ms).unwrap_or(i64::MAX)
}

/// A limiter's state as read, with the key's absolute expiry (`None`: no TTL).
pub type Found = Option<(State, Option<i64>)>;

/// An admit or a refund: the state found, the policy, the cost (or amount)
/// and the time in; the decision and the write out.
pub type Decide = fn(Found, &Policy, i64, Now) -> Outcome;

/// Decides one call for any algorithm. `found` is the decoded state and the
/// key's absolute expiry (`None`: no TTL). `policy` is validated for `now`.
/// The windows read the clock's ms, the buckets its µs.
// Always inlined: each caller then calls its algorithm directly. Called out
// of line, the match cost the fixed window 17 instructions a call (make
// budget: fixd 5,735 -> 5,752); inlined, every row is at or below the old
// table's (fixd 5,731, asld 6,881, atok 8,631, agcr 8,067, alky 8,222).
#[inline(always)]
pub fn admit(found: Found, policy: &Policy, cost: i64, now: Now) -> Outcome {
    let outcome = match policy.algo {
        // The fixed window's reset is the key's expiry: it reads it itself.
        Algo::Fixed => return fixed::decide(found, policy, cost, now),
        Algo::Sliding => sliding::admit(found.map(|f| f.0), policy, cost, now.ms),
        Algo::Token => token::admit(found.map(|f| f.0), policy, cost, now.us),
        Algo::Gcra => gcra::admit(found.map(|f| f.0), policy, cost, now.us),
        Algo::Leaky => leaky::admit(found.map(|f| f.0), policy, cost, now.us),
    };
    // The others keep their own times in their state.
    outcome_outlives_its_reset(outcome, found.map(|f| f.1), cost)
}

/// A refusal tells the caller when the limiter is full again; the state
/// must live that long. A key written under another policy (a narrower
/// window, a faster rate, a smaller bucket) or without a TTL may not: a
/// real refusal gives it that expiry, the one write a refusal can make.
/// A key without a TTL whose state is already spent (reset 0: refused only
/// because the cost can never fit) is deleted instead, as its expiry would
/// have, so that no limiter key is left without one. `expiry` is the key's:
/// `None` without a key, `Some(None)` for a key without a TTL.
fn outcome_outlives_its_reset(outcome: Outcome, expiry: Option<Option<i64>>, cost: i64) -> Outcome {
    let d = outcome.decision;
    if d.admitted || cost == 0 || outcome.write != Write::Nothing {
        return outcome;
    }
    Outcome {
        write: refusal_repair(d.reset_after_ms, outcome.reset_at, expiry),
        ..outcome
    }
}

/// The one write a real refusal that wrote nothing else can make, given the
/// reset it reports (ms), when that reset ends (absolute ms, rounded up)
/// and the key's expiry (see above).
pub(crate) fn refusal_repair(reset_ms: i64, reset_at: i64, expiry: Option<Option<i64>>) -> Write {
    match (reset_ms, expiry) {
        (0, Some(None)) => Write::Delete,
        (0, _) => Write::Nothing,
        (_, Some(Some(at))) if at >= reset_at => Write::Nothing,
        _ => Write::Expiry {
            expires_at: reset_at,
        },
    }
}

/// Gives back `amount` of consumption; never below empty. The decision is
/// the state after the refund, as a peek sees it.
pub fn refund(found: Found, policy: &Policy, amount: i64, now: Now) -> Outcome {
    if amount == 0 {
        // Refunding nothing is a peek: no write, nothing propagated, even
        // where a real call would normalise the state.
        return Outcome {
            write: Write::Nothing,
            ..admit(found, policy, 0, now)
        };
    }
    let state = found.map(|f| f.0);
    match policy.algo {
        Algo::Fixed => fixed::refund(found, policy, amount, now),
        Algo::Sliding => sliding::refund(state, policy, amount, now.ms),
        Algo::Token => token::refund(state, policy, amount, now.us),
        Algo::Gcra => gcra::refund(state, policy, amount, now.us),
        Algo::Leaky => leaky::refund(state, policy, amount, now.us),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use state::Layout;

    /// Every algorithm's state through the one codec (`state.rs`), here
    /// where every algorithm's layout is in reach.
    #[test]
    fn states_round_trip_every_algorithm() {
        let text = |state: State| {
            let mut buf = [0u8; state::MAX_LEN];
            String::from_utf8_lossy(state.encode(&mut buf)).into_owned()
        };
        let states = [
            (fixed::Count(-3).stored(), "-3"),
            (
                sliding::Windows {
                    window_start: 1_764_000_000_000,
                    current: 4,
                    previous: 9,
                }
                .stored(),
                "sliding:1764000000000:4:9",
            ),
            (
                token::Bucket {
                    credit_ns: 5_000_000,
                    last_ns: 1_764_000_000_123_456_000,
                }
                .stored(),
                "token:5000000:1764000000123:456000",
            ),
            (
                token::Bucket {
                    credit_ns: 0,
                    last_ns: -1_000_001,
                }
                .stored(),
                "token:0:-2:999999",
            ),
            (
                gcra::Tat {
                    tat_ns: 1_764_000_000_123_456_789,
                }
                .stored(),
                "gcra:1764000000123456789",
            ),
            (leaky::Queue { drained_ns: 1 }.stored(), "leaky:1"),
            (
                sliding::Windows {
                    window_start: i64::MAX,
                    current: i64::MAX,
                    previous: i64::MAX,
                }
                .stored(),
                "sliding:9223372036854775807:9223372036854775807:9223372036854775807",
            ),
        ];
        for (state, want) in states {
            let bytes = text(state);
            assert_eq!(bytes, want);
            assert_eq!(
                State::decode(state.algo(), bytes.as_bytes()),
                Ok(state),
                "{bytes}"
            );
        }
        // Beyond an i64 is clamped.
        let far = gcra::Tat {
            tat_ns: i128::from(i64::MAX) + 1,
        };
        assert_eq!(text(far.stored()), "gcra:9223372036854775807");
        assert_eq!(
            text(fixed::Count(i64::MIN).stored()),
            "-9223372036854775808"
        );
    }

    /// Any state `State::decode` accepts, of any algorithm: what the store
    /// can hand over. Fields near 0, non-negative or anything, read as the
    /// algorithm reads them.
    fn any_state() -> impl Strategy<Value = State> {
        let field = prop_oneof![0i64..1_000_000, 0i64.., any::<i64>()];
        let fields = proptest::collection::vec(field, 1..=state::MAX_FIELDS);
        (proptest::sample::select(Algo::ALL.to_vec()), fields).prop_filter_map(
            "not the algorithm's state",
            |(algo, fields)| {
                let mut text: Vec<String> = fields.iter().map(i64::to_string).collect();
                if !algo.spec().bare {
                    text.insert(0, algo.name().to_string());
                }
                State::decode(algo, text.join(":").as_bytes()).ok()
            },
        )
    }

    #[test]
    fn a_spent_state_without_a_ttl_is_deleted_by_a_refusal() {
        // Left by another writer without a TTL, and long spent: equal to no
        // state. A cost that can never fit is refused with reset 0, and
        // would otherwise leave the key without a TTL for good.
        let now = 1_000_000;
        let spent = [
            sliding::Windows {
                window_start: 0,
                current: 3,
                previous: 0,
            }
            .stored(),
            token::Bucket {
                credit_ns: 0,
                last_ns: 0,
            }
            .stored(),
            gcra::Tat { tat_ns: 0 }.stored(),
            leaky::Queue { drained_ns: 0 }.stored(),
        ];
        for state in spent {
            let algo = state.algo();
            let policy = Policy::new(algo, 5, 1_000, Some(5), now).unwrap();
            let never = 1_000;
            let out = admit(Some((state, None)), &policy, never, Now::from_ms(now));
            let d = out.decision;
            assert_eq!(
                (d.admitted, d.retry_after_ms, d.reset_after_ms),
                (false, -1, 0)
            );
            assert_eq!(out.write, Write::Delete, "{algo:?}");
            // With a TTL it vanishes by itself; without a key there is
            // nothing to delete; a peek never writes.
            let with_ttl = admit(
                Some((state, Some(now + 5))),
                &policy,
                never,
                Now::from_ms(now),
            );
            assert_eq!(with_ttl.write, Write::Nothing, "{algo:?}");
            let now = Now::from_ms(now);
            assert_eq!(admit(None, &policy, never, now).write, Write::Nothing);
            let peek = admit(Some((state, None)), &policy, 0, now);
            assert_eq!(peek.write, Write::Nothing, "{algo:?}");
        }
    }

    proptest! {
        /// Arbitrary integers and stored states through every algorithm: no
        /// panic, and replies stay within their documented ranges.
        #[test]
        fn every_algorithm_survives_arbitrary_input(
            algo in proptest::sample::select(Algo::ALL.to_vec()),
            limit in prop_oneof![1i64..1_000, 1i64..=i64::MAX],
            window in prop_oneof![1i64..100_000, 1i64..=i64::MAX],
            burst in proptest::option::of(prop_oneof![0i64..1_000, 0i64..=i64::MAX]),
            cost in prop_oneof![0i64..20, 0i64..=i64::MAX],
            now_us in 0i64..=4_000_000_000_000_000i64,
            state in proptest::option::of((any_state(), proptest::option::of(any::<i64>()))),
        ) {
            let now = Now::from_us(now_us);
            let Ok(policy) = Policy::new(algo, limit, window, burst, now.ms) else {
                return Ok(()); // refused with an error: nothing to decide
            };
            for out in [admit(state, &policy, cost, now), refund(state, &policy, cost, now)] {
                let d = out.decision;
                prop_assert!(d.remaining >= 0);
                prop_assert!(d.retry_after_ms >= -1);
                prop_assert!(d.reset_after_ms >= 0);
                if let Write::State { state: written, expires_at } = out.write {
                    prop_assert!(expires_at > now.ms, "{written:?} expires at {expires_at} <= {now:?}");
                    let mut buf = [0u8; state::MAX_LEN];
                    let bytes = written.encode(&mut buf).to_vec();
                    prop_assert_eq!(State::decode(algo, &bytes), Ok(written));
                }
            }
        }

        /// A refund of nothing is a peek, for any algorithm and stored state.
        #[test]
        fn refunding_nothing_writes_nothing(
            algo in proptest::sample::select(Algo::ALL.to_vec()),
            limit in 1i64..1_000,
            burst in proptest::option::of(0i64..1_000),
            now_us in 0i64..=4_000_000_000_000_000i64,
            state in proptest::option::of((any_state(), proptest::option::of(any::<i64>()))),
        ) {
            let now = Now::from_us(now_us);
            let Ok(policy) = Policy::new(algo, limit, 60_000, burst, now.ms) else {
                return Ok(());
            };
            let out = refund(state, &policy, 0, now);
            prop_assert_eq!(out.write, Write::Nothing);
            prop_assert_eq!(out.decision, admit(state, &policy, 0, now).decision);
        }

        /// The fixed window over random timelines and costs: never more than
        /// `limit` admitted per window, and never a refusal with room left.
        #[test]
        fn fixed_never_admits_more_than_the_limit(
            limit in 1i64..40,
            window in 1i64..500,
            calls in proptest::collection::vec((0i64..60, 0i64..6), 1..300),
        ) {
            let policy = Policy::new(Algo::Fixed, limit, window, None, 0).unwrap();
            let (mut now, mut state, mut used) = (1_000i64, None::<(State, Option<i64>)>, 0i64);
            for (step, cost) in calls {
                now += step;
                if let Some((_, Some(at))) = state {
                    if at <= now {
                        state = None; // the server expired the key
                    }
                }
                if state.is_none() {
                    used = 0;
                }
                let out = admit(state, &policy, cost, Now::from_ms(now));
                if out.decision.admitted {
                    used += cost;
                } else {
                    prop_assert!(used + cost > limit, "refused with room: {used} + {cost} <= {limit}");
                }
                prop_assert!(used <= limit);
                if let Write::State { state: s, expires_at } = out.write {
                    state = Some((s, Some(expires_at)));
                }
            }
        }
    }
}
