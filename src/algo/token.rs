//! Token bucket: `burst` tokens at most, refilled continuously at `limit`
//! per window; a request spends `cost` tokens. The level is kept as credit
//! in ns (tokens times the emission interval), so refill is exact integer
//! arithmetic and the decisions equal GCRA's on any timeline. The clock is
//! read in µs, so a high rate refills every µs, not in 1 ms steps.

use super::gcra::{cancel_credit, charge, within, Meter};
use super::state::{clamp, Layout};
use super::{ceil_ms, div, ns_of_us, Algo, Charge, Now, Outcome, Policy, State, Write, NS_PER_MS};

/// The stored state, `token:<credit_ns>:<last_refill_ms>:<ns_into_that_ms>`:
/// the last refill is a ms and the ns into it (0 to 999,999; the clock
/// gives µs). Builds that read the clock in ms wrote the ms alone,
/// `token:<credit_ns>:<last_refill_ms>`: that form still reads, as the
/// start of that ms, and is written back in the new one. Credit below 0
/// (a leading `-`, which no earlier build wrote) is debt booked ahead
/// (RESERVE, FORCE), at most the horizon.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bucket {
    /// Negative: booked ahead (see above).
    pub credit_ns: i128,
    /// The last refill, absolute ns.
    pub last_ns: i128,
}

impl Layout for Bucket {
    const ALGO: Algo = Algo::Token;
    const FIELDS: usize = 3;

    #[inline]
    fn read(fields: &[i64]) -> Option<Bucket> {
        let (credit, last_ms, into_ms) = match *fields {
            [credit, last_ms, into_ms] => (credit, last_ms, into_ms),
            [credit, last_ms] => (credit, last_ms, 0),
            _ => return None,
        };
        if !(0..1_000_000).contains(&into_ms) {
            return None;
        }
        Some(Bucket {
            credit_ns: i128::from(credit),
            last_ns: i128::from(last_ms) * NS_PER_MS + i128::from(into_ms),
        })
    }

    #[inline]
    fn stored(self) -> State {
        // `div` for a time the module wrote (never negative): i128
        // division is a library call.
        let ms = match self.last_ns {
            0.. => div(self.last_ns, NS_PER_MS),
            _ => self.last_ns.div_euclid(NS_PER_MS),
        };
        let into_ms = self.last_ns - ms * NS_PER_MS;
        State::new(
            Algo::Token,
            [clamp(self.credit_ns), clamp(ms), clamp(into_ms)],
        )
    }
}

/// Credit (ns) at `now_ns`: the stored level plus the refill since, capped
/// at a full bucket, and whether it is odd: below minus the horizon, where
/// it reads as an empty bucket (see `gcra::within`). A clock that went
/// backwards refills nothing.
fn credit(
    state: Option<Bucket>,
    now_ns: i128,
    policy: &Policy,
    capacity: i128,
) -> Option<(i128, bool)> {
    let Bucket { credit_ns, last_ns } = state?;
    let elapsed = (now_ns - last_ns).max(0);
    let level = credit_ns.saturating_add(elapsed).min(capacity);
    let (debt, odd) = within(Some(capacity - level), capacity, policy.horizon_ns);
    Some((capacity - debt, odd))
}

/// When a bucket holding `credit_ns` at `now_ns` is full again (absolute
/// ms, rounded up): its key's expiry.
fn full_at(credit_ns: i128, now_ns: i128, capacity: i128) -> i64 {
    ceil_ms(now_ns + capacity - credit_ns)
}

fn stored(credit_ns: i128, now_ns: i128, capacity: i128) -> Write {
    Write::State {
        state: Bucket {
            credit_ns,
            last_ns: now_ns,
        }
        .stored(),
        expires_at: full_at(credit_ns, now_ns, capacity),
    }
}

/// A last refill in the future (a clock that went back, a hand-written
/// value) would refill nothing until then: a real call restamps it to now.
fn from_the_future(state: Option<Bucket>, now_ns: i128) -> bool {
    matches!(state, Some(Bucket { last_ns, .. }) if last_ns > now_ns)
}

pub fn admit(state: Option<State>, policy: &Policy, cost: i64, now_us: i64) -> Outcome {
    judge(state.and_then(Bucket::of), policy, cost, now_us)
}

fn judge(state: Option<Bucket>, policy: &Policy, cost: i64, now_us: i64) -> Outcome {
    let now_ns = ns_of_us(now_us);
    let meter = Meter::of(policy);
    let (level, odd) =
        credit(state, now_ns, policy, meter.capacity).unwrap_or((meter.capacity, false));
    // A missing token is a unit of debt: the meter reasons in debt.
    let debt = meter.capacity - level;
    let charged = charge(&meter, policy, debt, cost, now_us, false);
    let write = match (
        charged.write,
        cost > 0 && (odd || from_the_future(state, now_ns)),
    ) {
        (true, _) => stored(meter.capacity - charged.after, now_ns, meter.capacity),
        (false, false) => Write::Nothing,
        // A full bucket is no state at all.
        (false, true) if level == meter.capacity => Write::Delete,
        (false, true) => stored(level, now_ns, meter.capacity),
    };
    Outcome {
        decision: charged.decision,
        write,
        reset_at: ceil_ms(now_ns + charged.after),
    }
}

pub fn refund(state: Option<State>, policy: &Policy, amount: i64, now_us: i64) -> Outcome {
    let now_ns = ns_of_us(now_us);
    let meter = Meter::of(policy);
    let peek = Policy {
        charge: Charge::Plain,
        ..*policy
    };
    let Some((level, _)) = credit(state.and_then(Bucket::of), now_ns, policy, meter.capacity)
    else {
        return Outcome {
            write: Write::Nothing,
            ..judge(None, &peek, 0, now_us)
        };
    };
    let debt = meter.capacity - level;
    let left = match policy.charge {
        Charge::Cancel { at_ms } => {
            let now = Now::from_us(now_us);
            debt - cancel_credit(&meter, debt, amount, at_ms, now, false)
        }
        _ => meter.forgive(debt, amount),
    };
    let after = meter.capacity - left;
    let write = match (
        level == meter.capacity || after == level,
        after == meter.capacity,
    ) {
        // A full bucket has nothing to take back (nor a cancel that gives
        // back nothing): no write.
        (true, _) => Write::Nothing,
        (false, true) => Write::Delete,
        (false, false) => stored(after, now_ns, meter.capacity),
    };
    let peek_state = Bucket {
        credit_ns: after,
        last_ns: now_ns,
    };
    Outcome {
        write,
        ..judge(Some(peek_state), &peek, 0, now_us)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algo::gcra;
    use crate::algo::state::MAX_LEN;
    use proptest::prelude::*;

    fn policy(algo: Algo, limit: i64, window_ms: i64, burst: i64) -> Policy {
        Policy::new(algo, limit, window_ms, Some(burst), 0).unwrap()
    }

    /// The clock (µs) at `t` ms.
    fn ms(t: i64) -> i64 {
        t * 1_000
    }

    #[test]
    fn a_refund_with_no_debt_writes_nothing() {
        for algo in [Algo::Token, Algo::Gcra] {
            let p = policy(algo, 4, 1_000, 2);
            // One taken at 0; by 1000 the bucket is full again.
            let taken = match admit_any(None, &p, 1, ms(0)).write {
                Write::State { state, .. } => Some(state),
                other => panic!("{other:?}"),
            };
            let out = refund_any(taken, &p, 1, ms(1_000));
            assert_eq!(out.write, Write::Nothing, "{algo:?}");
            assert_eq!(out.decision.remaining, 2, "{algo:?}");
            // With some debt left, it is written.
            assert_ne!(refund_any(taken, &p, 1, ms(100)).write, Write::Nothing);
        }
    }

    fn admit_any(s: Option<State>, p: &Policy, cost: i64, now: i64) -> Outcome {
        match p.algo {
            Algo::Token => admit(s, p, cost, now),
            _ => gcra::admit(s, p, cost, now),
        }
    }

    fn refund_any(s: Option<State>, p: &Policy, amount: i64, now: i64) -> Outcome {
        match p.algo {
            Algo::Token => refund(s, p, amount, now),
            _ => gcra::refund(s, p, amount, now),
        }
    }

    #[test]
    fn refills_continuously_up_to_the_burst() {
        let p = policy(Algo::Token, 4, 1_000, 2);
        let first = admit(None, &p, 2, ms(0));
        assert_eq!(
            (first.decision.admitted, first.decision.remaining),
            (true, 0)
        );
        let Write::State { state, expires_at } = first.write else {
            panic!()
        };
        assert_eq!(expires_at, 500, "full again after two intervals of 250 ms");
        let early = admit(Some(state), &p, 1, ms(100));
        assert_eq!(
            (early.decision.admitted, early.decision.retry_after_ms),
            (false, 150)
        );
        let later = admit(Some(state), &p, 1, ms(250));
        assert!(later.decision.admitted);
        let much_later = admit(Some(state), &p, 0, ms(10_000));
        assert_eq!(
            much_later.decision.remaining, 2,
            "never more than the burst"
        );
    }

    #[test]
    fn a_refill_time_in_the_future_is_restamped() {
        let p = policy(Algo::Token, 4, 1_000, 2);
        let stuck = Some(
            Bucket {
                credit_ns: 0,
                last_ns: i128::from(i64::MAX) * NS_PER_MS,
            }
            .stored(),
        );
        let out = admit(stuck, &p, 1, ms(1_000));
        assert!(!out.decision.admitted);
        let Write::State { state, .. } = out.write else {
            panic!("{:?}", out.write)
        };
        assert_eq!(
            state,
            Bucket {
                credit_ns: 0,
                last_ns: 1_000 * NS_PER_MS
            }
            .stored()
        );
        assert!(
            admit(Some(state), &p, 1, ms(1_250)).decision.admitted,
            "refills from now on"
        );
    }

    /// 4 per ms, one at most: a token every 250 µs. The clock's µs count,
    /// so the bucket refills within a ms, which a ms clock never showed.
    #[test]
    fn refills_after_250_microseconds() {
        let p = policy(Algo::Token, 4_000, 1_000, 1);
        let start = ms(1_764_000_000_000) + 600;
        let first = admit(None, &p, 1, start);
        assert!(first.decision.admitted);
        let Write::State { state, expires_at } = first.write else {
            panic!("{:?}", first.write)
        };
        assert_eq!(
            state,
            Bucket {
                credit_ns: 0,
                last_ns: i128::from(start) * 1_000,
            }
            .stored()
        );
        // Full at .850 of the ms: the key lives to the end of that ms.
        assert_eq!(expires_at, 1_764_000_000_001);
        assert_eq!(first.decision.reset_after_ms, 1);
        let early = admit(Some(state), &p, 1, start + 249);
        assert_eq!(
            (early.decision.admitted, early.decision.retry_after_ms),
            (false, 1),
            "1 µs short, rounded up to a ms"
        );
        assert_eq!(early.write, Write::Nothing);
        let on_time = admit(Some(state), &p, 1, start + 250);
        assert!(on_time.decision.admitted, "refilled after 250 µs");
        let Write::State { state, expires_at } = on_time.write else {
            panic!("{:?}", on_time.write)
        };
        // Taken at .850 of the ms, full again at .100 of the next.
        assert_eq!(expires_at, 1_764_000_000_002);
        // Probed every 50 µs for 1.5 ms more: one token every 250 µs.
        let mut state = Some(state);
        let mut admitted = 0;
        for step in 1..=30 {
            let out = admit(state, &p, 1, start + 250 + step * 50);
            if out.decision.admitted {
                admitted += 1;
            }
            if let Write::State { state: s, .. } = out.write {
                state = Some(s);
            }
        }
        assert_eq!(admitted, 6, "six intervals of 250 µs in 1,500 µs");
    }

    /// A state written by a build with a ms clock (no ns into the ms) reads
    /// as the start of that ms.
    #[test]
    fn the_old_form_refills_from_the_start_of_its_ms() {
        let p = policy(Algo::Token, 4_000, 1_000, 1);
        let old = State::decode(Algo::Token, b"token:0:1764000000000").unwrap();
        let at = |us| admit(Some(old), &p, 1, ms(1_764_000_000_000) + us);
        assert!(!at(249).decision.admitted);
        assert!(at(250).decision.admitted);
    }

    #[test]
    fn reads_the_form_without_the_ns_into_the_ms_as_that_ms() {
        let read = |text: &[u8]| State::decode(Algo::Token, text).map(|s| Bucket::of(s).unwrap());
        let want = Bucket {
            credit_ns: 7,
            last_ns: 1_764_000_000_123 * NS_PER_MS,
        };
        let old = read(b"token:7:1764000000123");
        let new = read(b"token:7:1764000000123:0");
        assert_eq!((old, new), (Ok(want), Ok(want)));
        let extremes = read(b"token:9223372036854775807:-9223372036854775808");
        assert_eq!(
            extremes,
            Ok(Bucket {
                credit_ns: i128::from(i64::MAX),
                last_ns: i128::from(i64::MIN) * NS_PER_MS,
            })
        );
        let mut buf = [0u8; MAX_LEN];
        let written = want.stored().encode(&mut buf);
        assert_eq!(
            written, b"token:7:1764000000123:0",
            "written in the new form"
        );
        let within = Bucket {
            credit_ns: 7,
            last_ns: 1_764_000_000_123 * NS_PER_MS + 456_000,
        };
        assert_eq!(
            within.stored().encode(&mut buf),
            b"token:7:1764000000123:456000"
        );
    }

    proptest! {
        /// With the same parameters, token and gcra agree on any timeline
        /// (steps in µs).
        #[test]
        fn agrees_with_gcra(
            limit in 1i64..50,
            window_ms in 1i64..5_000,
            burst in 1i64..20,
            calls in proptest::collection::vec((0i64..400_000, 0i64..25), 1..60),
        ) {
            let token_policy = policy(Algo::Token, limit, window_ms, burst);
            let gcra_policy = policy(Algo::Gcra, limit, window_ms, burst);
            let (mut now, mut token_state, mut gcra_state) = (ms(1_764_000_000_000), None, None);
            let mut expires_at = i64::MAX;
            for (step, cost) in calls {
                now += step;
                // The server expires both keys at the same moment.
                if expires_at <= now.div_euclid(1_000) {
                    token_state = None;
                    gcra_state = None;
                }
                let t = admit(token_state, &token_policy, cost, now);
                let g = gcra::admit(gcra_state, &gcra_policy, cost, now);
                prop_assert_eq!(t.decision, g.decision);
                prop_assert_eq!(t.reset_at, g.reset_at);
                match (t.write, g.write) {
                    (Write::State { state: ts, expires_at: te }, Write::State { state: gs, expires_at: ge }) => {
                        prop_assert_eq!(te, ge, "same expiry");
                        token_state = Some(ts);
                        gcra_state = Some(gs);
                        expires_at = te;
                    }
                    (Write::Nothing, Write::Nothing) => {}
                    other => prop_assert!(false, "writes differ: {:?}", other),
                }
            }
        }

        /// Admitted <= burst + rate x elapsed, for any arrivals (in µs).
        #[test]
        fn never_beyond_burst_plus_rate(
            limit in 1i64..20,
            window_ms in 1i64..2_000,
            burst in 1i64..10,
            steps in proptest::collection::vec(0i64..50_000, 1..200),
        ) {
            let p = policy(Algo::Token, limit, window_ms, burst);
            let start = ms(1_000_000);
            let (mut now, mut state, mut admitted) = (start, None, 0i128);
            for step in steps {
                now += step;
                let out = admit(state, &p, 1, now);
                if out.decision.admitted {
                    admitted += 1;
                }
                if let Write::State { state: s, .. } = out.write {
                    state = Some(s);
                }
                let elapsed_us = i128::from(now - start);
                let bound = i128::from(burst) + elapsed_us * i128::from(limit) / (i128::from(window_ms) * 1_000);
                prop_assert!(admitted <= bound, "{admitted} > {bound}");
            }
        }

        /// A key expires no earlier than its state is full again, and no
        /// later than the end of that ms.
        #[test]
        fn expires_in_the_ms_the_bucket_is_full(
            limit in 1i64..5_000,
            window_ms in 1i64..2_000,
            burst in 1i64..10,
            cost in 1i64..10,
            at_us in 0i64..1_000_000,
        ) {
            let p = policy(Algo::Token, limit, window_ms, burst);
            let now = ms(1_764_000_000_000) + at_us;
            if let Write::State { state, expires_at } = admit(None, &p, cost, now).write {
                let Bucket { credit_ns, last_ns } = Bucket::of(state).unwrap();
                let full_ns = last_ns + p.capacity_ns().unwrap() - credit_ns;
                prop_assert!(i128::from(expires_at) * NS_PER_MS >= full_ns);
                prop_assert!(i128::from(expires_at - 1) * NS_PER_MS < full_ns);
            }
        }
    }
}
