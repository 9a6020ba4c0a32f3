//! GCRA, the generic cell rate algorithm: the leaky bucket as a meter. Its
//! whole state is one theoretical arrival time (TAT); the debt `TAT - now`
//! is how far ahead of the sustained rate the limiter has been used, and a
//! request is admitted while the debt it leaves fits the bucket.

use super::state::{clamp, Layout};
use super::{ceil_ms, div, ns_of_us, Algo, Decision, Outcome, Policy, State, Write};

/// The stored state, `gcra:<theoretical_arrival_time_ns>`; RL.THROTTLE
/// keeps the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tat {
    pub tat_ns: i128,
}

impl Layout for Tat {
    const ALGO: Algo = Algo::Gcra;
    const FIELDS: usize = 1;

    #[inline]
    fn read(fields: &[i64]) -> Option<Tat> {
        match *fields {
            [tat] => Some(Tat {
                tat_ns: i128::from(tat),
            }),
            _ => None,
        }
    }

    #[inline]
    fn stored(self) -> State {
        State::new(Algo::Gcra, [clamp(self.tat_ns)])
    }
}

/// The debt (ns) a stored TAT leaves at `now_ns`, never below 0 and never
/// beyond `capacity`: a policy change applies to existing state at once.
pub fn debt(tat_ns: Option<i128>, now_ns: i128, capacity: i128) -> i128 {
    tat_ns.map_or(0, |tat| (tat - now_ns).clamp(0, capacity))
}

/// A stored time more than a full bucket ahead (a clock that went back, a
/// shrunken policy, a hand-written value) is read as a full bucket; since a
/// refusal otherwise writes nothing, a real call writes that back, so the
/// limiter drains from there instead of staying full for ever.
pub fn beyond(tat_ns: Option<i128>, now_ns: i128, capacity: i128) -> bool {
    tat_ns.is_some_and(|tat| tat - now_ns > capacity)
}

/// The shared meter: `slots` requests of debt fit (the burst; one more for
/// `leaky`, whose head request is being served).
pub struct Meter {
    pub interval: i128,
    pub capacity: i128,
}

pub enum Verdict {
    /// New debt after the request.
    Admit { debt: i128 },
    /// ns until the request would fit; `None` when it never can.
    Refuse { wait: Option<i128> },
}

impl Meter {
    pub fn of(policy: &Policy) -> Meter {
        Meter {
            interval: policy.interval_ns(),
            capacity: policy.capacity_ns().unwrap_or(i128::MAX),
        }
    }

    pub fn judge(&self, debt: i128, cost: i64) -> Verdict {
        let Some(increment) = i128::from(cost)
            .checked_mul(self.interval)
            .filter(|&i| i <= self.capacity)
        else {
            return Verdict::Refuse { wait: None };
        };
        if debt + increment <= self.capacity {
            Verdict::Admit {
                debt: debt + increment,
            }
        } else {
            Verdict::Refuse {
                wait: Some(debt + increment - self.capacity),
            }
        }
    }

    /// Whole requests of cost 1 that fit on top of `debt`.
    pub fn room(&self, debt: i128) -> i64 {
        i64::try_from(div((self.capacity - debt).max(0), self.interval)).unwrap_or(i64::MAX)
    }

    /// Debt after giving back `amount` requests.
    pub fn forgive(&self, debt: i128, amount: i64) -> i128 {
        let credit = i128::from(amount).saturating_mul(self.interval);
        (debt - credit).max(0)
    }
}

/// How a limiter built on a theoretical arrival time stores and reads it:
/// GCRA meters (admit or refuse); the leaky queue also tells each admitted
/// request how long to wait for the queue ahead of it.
pub struct Schedule {
    pub read: fn(Option<State>) -> Option<i128>,
    pub make: fn(i128) -> State,
    pub tells_delay: bool,
}

const GCRA: Schedule = Schedule {
    read: |state| Some(Tat::of(state?)?.tat_ns),
    make: |tat_ns| Tat { tat_ns }.stored(),
    tells_delay: false,
};

impl Schedule {
    pub fn admit(&self, state: Option<State>, policy: &Policy, cost: i64, now_us: i64) -> Outcome {
        let meter = Meter::of(policy);
        let now_ns = ns_of_us(now_us);
        let tat = (self.read)(state);
        let debt = debt(tat, now_ns, meter.capacity);
        let store = |debt: i128| Write::State {
            state: (self.make)(now_ns + debt),
            expires_at: ceil_ms(now_ns + debt),
        };
        // Never more than the burst (the leaky queue's head is not waiting).
        let room = |debt: i128| meter.room(debt).min(policy.burst);
        match meter.judge(debt, cost) {
            Verdict::Admit { debt: after } => Outcome {
                decision: Decision {
                    admitted: true,
                    limit: policy.burst,
                    remaining: room(after),
                    retry_after_ms: if self.tells_delay { ceil_ms(debt) } else { 0 },
                    reset_after_ms: ceil_ms(after),
                },
                write: if cost > 0 {
                    store(after)
                } else {
                    Write::Nothing
                },
                reset_at: ceil_ms(now_ns + after),
            },
            Verdict::Refuse { wait } => Outcome {
                decision: Decision {
                    admitted: false,
                    limit: policy.burst,
                    remaining: room(debt),
                    retry_after_ms: wait.map_or(-1, ceil_ms),
                    reset_after_ms: ceil_ms(debt),
                },
                write: match cost > 0 && beyond(tat, now_ns, meter.capacity) {
                    true => store(debt),
                    false => Write::Nothing,
                },
                reset_at: ceil_ms(now_ns + debt),
            },
        }
    }

    pub fn refund(
        &self,
        state: Option<State>,
        policy: &Policy,
        amount: i64,
        now_us: i64,
    ) -> Outcome {
        let meter = Meter::of(policy);
        let now_ns = ns_of_us(now_us);
        let tat = (self.read)(state);
        let before = debt(tat, now_ns, meter.capacity);
        let after = meter.forgive(before, amount);
        let write = match (tat, after) {
            // No debt to forgive: no write.
            (None, _) => Write::Nothing,
            (Some(_), _) if before == 0 => Write::Nothing,
            (Some(_), 0) => Write::Delete,
            (Some(_), _) => Write::State {
                state: (self.make)(now_ns + after),
                expires_at: ceil_ms(now_ns + after),
            },
        };
        let peek_state = (after > 0).then(|| (self.make)(now_ns + after));
        Outcome {
            write,
            ..self.admit(peek_state, policy, 0, now_us)
        }
    }
}

pub fn admit(state: Option<State>, policy: &Policy, cost: i64, now_us: i64) -> Outcome {
    GCRA.admit(state, policy, cost, now_us)
}

pub fn refund(state: Option<State>, policy: &Policy, amount: i64, now_us: i64) -> Outcome {
    GCRA.refund(state, policy, amount, now_us)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algo::{Algo, NS_PER_MS};

    /// The clock (µs) at `t` ms.
    fn ms(t: i64) -> i64 {
        t * 1_000
    }

    fn policy(limit: i64, window_ms: i64, burst: i64) -> Policy {
        Policy::new(Algo::Gcra, limit, window_ms, Some(burst), 0).unwrap()
    }

    /// Runs calls at the given times (ms), threading the state; returns
    /// decisions.
    fn run(p: &Policy, calls: &[(i64, i64)]) -> Vec<Decision> {
        let mut state = None;
        calls
            .iter()
            .map(|&(now, cost)| {
                let out = admit(state, p, cost, ms(now));
                if let Write::State { state: s, .. } = out.write {
                    state = Some(s);
                }
                out.decision
            })
            .collect()
    }

    #[test]
    fn a_burst_then_the_sustained_rate() {
        // 10 per second, burst 3: three at once, then one every 100 ms.
        let p = policy(10, 1_000, 3);
        let d = run(
            &p,
            &[(0, 1), (0, 1), (0, 1), (0, 1), (50, 1), (100, 1), (100, 1)],
        );
        let admitted: Vec<bool> = d.iter().map(|d| d.admitted).collect();
        assert_eq!(admitted, [true, true, true, false, false, true, false]);
        assert_eq!(d[2].remaining, 0);
        assert_eq!(d[3].retry_after_ms, 100);
        assert_eq!(d[4].retry_after_ms, 50);
        assert_eq!(d[5].reset_after_ms, 300);
    }

    #[test]
    fn cost_beyond_the_burst_never_fits() {
        let d = run(&policy(10, 1_000, 3), &[(0, 4)]);
        assert_eq!(
            (d[0].admitted, d[0].retry_after_ms, d[0].remaining),
            (false, -1, 3)
        );
    }

    #[test]
    fn state_far_in_the_future_never_blocks_beyond_one_bucket() {
        let p = policy(10, 1_000, 3);
        let future = Tat {
            tat_ns: i128::from(i64::MAX),
        }
        .stored();
        let out = admit(Some(future), &p, 1, ms(1_000));
        assert!(!out.decision.admitted);
        assert_eq!(
            out.decision.retry_after_ms, 100,
            "debt is clamped to the bucket"
        );
    }

    #[test]
    fn state_beyond_the_bucket_is_written_back_so_it_drains() {
        let p = policy(10, 1_000, 3);
        let future = Some(
            Tat {
                tat_ns: i128::from(i64::MAX),
            }
            .stored(),
        );
        let out = admit(future, &p, 1, ms(1_000));
        assert!(!out.decision.admitted);
        let Write::State { state, expires_at } = out.write else {
            panic!("{:?}", out.write)
        };
        assert_eq!(
            state,
            Tat {
                tat_ns: (1_000 + 300) * NS_PER_MS
            }
            .stored()
        );
        assert_eq!(expires_at, 1_300);
        assert!(
            admit(Some(state), &p, 1, ms(1_100)).decision.admitted,
            "drains from there"
        );
        assert_eq!(
            admit(future, &p, 0, ms(1_000)).write,
            Write::Nothing,
            "a peek never writes"
        );
    }

    #[test]
    fn refund_gives_back_and_deletes_when_empty() {
        let p = policy(10, 1_000, 3);
        let out = admit(None, &p, 2, ms(0));
        let Write::State { state, .. } = out.write else {
            panic!()
        };
        let back = refund(Some(state), &p, 1, 0);
        assert_eq!(back.decision.remaining, 2);
        assert!(matches!(back.write, Write::State { .. }));
        assert_eq!(refund(Some(state), &p, 5, 0).write, Write::Delete);
        assert_eq!(refund(None, &p, 5, 0).write, Write::Nothing);
    }

    /// 4 per ms, burst 2: the TAT moves by 250 µs per request, from the
    /// µs the call came, and the key expires at the end of that TAT's ms.
    #[test]
    fn arrival_times_are_kept_to_the_microsecond() {
        let p = policy(4_000, 1_000, 2);
        let start = ms(1_764_000_000_000) + 600;
        let start_ns = i128::from(start) * 1_000;
        let first = admit(None, &p, 2, start);
        let Write::State { state, expires_at } = first.write else {
            panic!("{:?}", first.write)
        };
        assert_eq!(
            state,
            Tat {
                tat_ns: start_ns + 500_000
            }
            .stored()
        );
        assert_eq!(expires_at, 1_764_000_000_002, "full at .100 of the next ms");
        assert_eq!(first.reset_at, expires_at);
        // Debt 500 µs: a third fits once 250 µs are paid.
        let early = admit(Some(state), &p, 1, start + 249);
        assert_eq!(
            (early.decision.admitted, early.decision.retry_after_ms),
            (false, 1)
        );
        assert_eq!(early.reset_at, 1_764_000_000_002);
        assert!(admit(Some(state), &p, 1, start + 250).decision.admitted);
    }
}
