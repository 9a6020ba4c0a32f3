//! Token bucket: `burst` tokens at most, refilled continuously at `limit`
//! per window; a request spends `cost` tokens. The level is kept as credit
//! in ns (tokens times the emission interval), so refill is exact integer
//! arithmetic and the decisions equal GCRA's on any timeline.

use super::gcra::{Meter, Verdict};
use super::{ceil_ms, Decision, Outcome, Policy, State, Write, NS_PER_MS};

/// Credit (ns) at `now_ms`: the stored level plus the refill since, capped
/// at a full bucket. A clock that went backwards refills nothing.
fn credit(state: Option<State>, now_ms: i64, capacity: i128) -> Option<i128> {
    match state {
        Some(State::Token { credit_ns, last_ms }) => {
            let elapsed = i128::from(now_ms.saturating_sub(last_ms).max(0)) * NS_PER_MS;
            Some(credit_ns.saturating_add(elapsed).clamp(0, capacity))
        }
        _ => None,
    }
}

fn stored(credit_ns: i128, now_ms: i64, capacity: i128) -> Write {
    Write::State {
        state: State::Token {
            credit_ns,
            last_ms: now_ms,
        },
        expires_at: now_ms + ceil_ms(capacity - credit_ns),
    }
}

/// A last refill in the future (a clock that went back, a hand-written
/// value) would refill nothing until then: a real call restamps it to now.
fn from_the_future(state: Option<State>, now_ms: i64) -> bool {
    matches!(state, Some(State::Token { last_ms, .. }) if last_ms > now_ms)
}

pub fn admit(state: Option<State>, policy: &Policy, cost: i64, now_ms: i64) -> Outcome {
    let meter = Meter::of(policy);
    let level = credit(state, now_ms, meter.capacity).unwrap_or(meter.capacity);
    // A missing token is a unit of debt: the meter reasons in debt.
    let debt = meter.capacity - level;
    match meter.judge(debt, cost) {
        Verdict::Admit { debt: after } => Outcome {
            decision: Decision {
                admitted: true,
                limit: policy.burst,
                remaining: meter.room(after),
                retry_after_ms: 0,
                reset_after_ms: ceil_ms(after),
            },
            write: match cost {
                0 => Write::Nothing,
                _ => stored(meter.capacity - after, now_ms, meter.capacity),
            },
        },
        Verdict::Refuse { wait } => Outcome {
            decision: Decision {
                admitted: false,
                limit: policy.burst,
                remaining: meter.room(debt),
                retry_after_ms: wait.map_or(-1, ceil_ms),
                reset_after_ms: ceil_ms(debt),
            },
            write: match (
                cost > 0 && from_the_future(state, now_ms),
                level == meter.capacity,
            ) {
                (false, _) => Write::Nothing,
                // A full bucket is no state at all.
                (true, true) => Write::Delete,
                (true, false) => stored(level, now_ms, meter.capacity),
            },
        },
    }
}

pub fn refund(state: Option<State>, policy: &Policy, amount: i64, now_ms: i64) -> Outcome {
    let meter = Meter::of(policy);
    let Some(level) = credit(state, now_ms, meter.capacity) else {
        return Outcome {
            decision: admit(None, policy, 0, now_ms).decision,
            write: Write::Nothing,
        };
    };
    let after = meter.capacity - meter.forgive(meter.capacity - level, amount);
    let write = match (level == meter.capacity, after == meter.capacity) {
        // A full bucket has nothing to take back: no write.
        (true, _) => Write::Nothing,
        (false, true) => Write::Delete,
        (false, false) => stored(after, now_ms, meter.capacity),
    };
    let peek_state = State::Token {
        credit_ns: after,
        last_ms: now_ms,
    };
    Outcome {
        decision: admit(Some(peek_state), policy, 0, now_ms).decision,
        write,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algo::{gcra, Algo};
    use proptest::prelude::*;

    fn policy(algo: Algo, limit: i64, window_ms: i64, burst: i64) -> Policy {
        Policy::new(algo, limit, window_ms, Some(burst), 0).unwrap()
    }

    #[test]
    fn a_refund_with_no_debt_writes_nothing() {
        for algo in [Algo::Token, Algo::Gcra] {
            let p = policy(algo, 4, 1_000, 2);
            // One taken at 0; by 1000 the bucket is full again.
            let taken = match admit_any(None, &p, 1, 0).write {
                Write::State { state, .. } => Some(state),
                other => panic!("{other:?}"),
            };
            let out = refund_any(taken, &p, 1, 1_000);
            assert_eq!(out.write, Write::Nothing, "{algo:?}");
            assert_eq!(out.decision.remaining, 2, "{algo:?}");
            // With some debt left, it is written.
            assert_ne!(refund_any(taken, &p, 1, 100).write, Write::Nothing);
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
        let first = admit(None, &p, 2, 0);
        assert_eq!(
            (first.decision.admitted, first.decision.remaining),
            (true, 0)
        );
        let Write::State { state, expires_at } = first.write else {
            panic!()
        };
        assert_eq!(expires_at, 500, "full again after two intervals of 250 ms");
        let early = admit(Some(state), &p, 1, 100);
        assert_eq!(
            (early.decision.admitted, early.decision.retry_after_ms),
            (false, 150)
        );
        let later = admit(Some(state), &p, 1, 250);
        assert!(later.decision.admitted);
        let much_later = admit(Some(state), &p, 0, 10_000);
        assert_eq!(
            much_later.decision.remaining, 2,
            "never more than the burst"
        );
    }

    #[test]
    fn a_refill_time_in_the_future_is_restamped() {
        let p = policy(Algo::Token, 4, 1_000, 2);
        let stuck = Some(State::Token {
            credit_ns: 0,
            last_ms: i64::MAX,
        });
        let out = admit(stuck, &p, 1, 1_000);
        assert!(!out.decision.admitted);
        let Write::State { state, .. } = out.write else {
            panic!("{:?}", out.write)
        };
        assert_eq!(
            state,
            State::Token {
                credit_ns: 0,
                last_ms: 1_000
            }
        );
        assert!(
            admit(Some(state), &p, 1, 1_250).decision.admitted,
            "refills from now on"
        );
    }

    proptest! {
        /// With the same parameters, token and gcra agree on any timeline.
        #[test]
        fn agrees_with_gcra(
            limit in 1i64..50,
            window_ms in 1i64..5_000,
            burst in 1i64..20,
            calls in proptest::collection::vec((0i64..400, 0i64..25), 1..60),
        ) {
            let token_policy = policy(Algo::Token, limit, window_ms, burst);
            let gcra_policy = policy(Algo::Gcra, limit, window_ms, burst);
            let (mut now, mut token_state, mut gcra_state) = (1_764_000_000_000i64, None, None);
            for (step, cost) in calls {
                now += step;
                let t = admit(token_state, &token_policy, cost, now);
                let g = gcra::admit(gcra_state, &gcra_policy, cost, now);
                prop_assert_eq!(t.decision, g.decision);
                match (t.write, g.write) {
                    (Write::State { state: ts, expires_at: te }, Write::State { state: gs, expires_at: ge }) => {
                        prop_assert_eq!(te, ge, "same expiry");
                        token_state = Some(ts);
                        gcra_state = Some(gs);
                    }
                    (Write::Nothing, Write::Nothing) => {}
                    other => prop_assert!(false, "writes differ: {:?}", other),
                }
                // The server expires both keys at the same moment.
                if let (Some(State::Token { credit_ns, last_ms }), true) = (token_state, true) {
                    let full_at = last_ms + ceil_ms(token_policy.capacity_ns().unwrap() - credit_ns);
                    if full_at <= now {
                        token_state = None;
                        gcra_state = None;
                    }
                }
            }
        }

        /// Admitted <= burst + rate x elapsed, for any arrivals.
        #[test]
        fn never_beyond_burst_plus_rate(
            limit in 1i64..20,
            window_ms in 1i64..2_000,
            burst in 1i64..10,
            steps in proptest::collection::vec(0i64..50, 1..200),
        ) {
            let p = policy(Algo::Token, limit, window_ms, burst);
            let start = 1_000_000i64;
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
                let elapsed = i128::from(now - start);
                let bound = i128::from(burst) + elapsed * i128::from(limit) / i128::from(window_ms);
                prop_assert!(admitted <= bound, "{admitted} > {bound}");
            }
        }
    }
}
