//! GCRA, the generic cell rate algorithm: the leaky bucket as a meter. Its
//! whole state is one theoretical arrival time (TAT); the debt `TAT - now`
//! is how far ahead of the sustained rate the limiter has been used, and a
//! request is admitted while the debt it leaves fits the bucket.

use super::state::{clamp, Layout};
use super::{
    ceil_ms, div, ns_of_us, Algo, Charge, Decision, Now, Outcome, Policy, Slot, State, Write,
    NS_PER_MS,
};

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
/// beyond `capacity`: RL.THROTTLE's reading (it has no horizon).
pub fn debt(tat_ns: Option<i128>, now_ns: i128, capacity: i128) -> i128 {
    tat_ns.map_or(0, |tat| (tat - now_ns).clamp(0, capacity))
}

/// A stored time more than a full bucket ahead (a clock that went back, a
/// shrunken policy, a hand-written value) is read as a full bucket
/// (RL.THROTTLE's rule; the limiters' is `within`).
pub fn beyond(tat_ns: Option<i128>, now_ns: i128, capacity: i128) -> bool {
    tat_ns.is_some_and(|tat| tat - now_ns > capacity)
}

/// The debt (ns) state `ahead_ns` past now leaves (`None`: no state), and
/// whether the state is odd. The state may run ahead by the capacity plus
/// the horizon (bookings, forced charges): that debt is kept, so a plain
/// call is told the wait the bookings imply and never erases them. Beyond
/// it (a clock that went back, a shrunken policy, a hand-written value) it
/// is odd: read as a full bucket, which a real call writes back so the
/// limiter drains from there instead of staying full for ever.
pub fn within(ahead_ns: Option<i128>, capacity: i128, horizon_ns: i128) -> (i128, bool) {
    match ahead_ns {
        Some(ahead) if ahead > capacity.saturating_add(horizon_ns) => (capacity, true),
        Some(ahead) => (ahead.max(0), false),
        None => (0, false),
    }
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

/// A decision on a debt: what the reply says, the debt after the call (for
/// the reset), and whether that debt is to be stored.
pub struct Charged {
    pub decision: Decision,
    pub after: i128,
    pub write: bool,
}

/// The buckets' one decision on a debt (ns; at most capacity + horizon):
/// the plain admission, FORCE, or RESERVE (`policy.charge`). `tells_delay`:
/// the leaky queue, whose admitted replies carry the wait for the queue
/// ahead, and whose slot is when that queue has drained.
pub fn charge(
    meter: &Meter,
    policy: &Policy,
    debt: i128,
    cost: i64,
    now_us: i64,
    tells_delay: bool,
) -> Charged {
    let bound = meter.capacity.saturating_add(policy.horizon_ns);
    // Never more than the burst (the leaky queue's head is not waiting).
    let room = |debt: i128| meter.room(debt).min(policy.burst);
    let admit = |after: i128, slot: Slot| Charged {
        decision: Decision {
            admitted: true,
            limit: policy.burst,
            remaining: room(after),
            retry_after_ms: if tells_delay { ceil_ms(debt) } else { 0 },
            reset_after_ms: ceil_ms(after),
            slot,
        },
        after,
        write: cost > 0,
    };
    let refuse = |wait: Option<i128>| Charged {
        decision: Decision {
            admitted: false,
            limit: policy.burst,
            remaining: room(debt),
            retry_after_ms: wait.map_or(-1, ceil_ms),
            reset_after_ms: ceil_ms(debt),
            slot: Slot::NONE,
        },
        after: debt,
        write: false,
    };
    let verdict = meter.judge(debt, cost);
    match (policy.charge, verdict) {
        (Charge::Plain | Charge::Cancel { .. }, Verdict::Admit { debt: after }) => {
            admit(after, Slot::NONE)
        }
        (Charge::Plain | Charge::Cancel { .. }, Verdict::Refuse { wait }) => refuse(wait),
        (Charge::Force, Verdict::Admit { debt: after }) => admit(after, Slot::NONE),
        (Charge::Force, Verdict::Refuse { .. }) => {
            // Capped at the horizon: the part past it is dropped.
            let increment = i128::from(cost).saturating_mul(meter.interval);
            let after = debt.saturating_add(increment).min(bound);
            Charged {
                decision: Decision {
                    admitted: false,
                    limit: policy.burst,
                    remaining: 0,
                    retry_after_ms: ceil_ms(after + meter.interval - meter.capacity),
                    reset_after_ms: ceil_ms(after),
                    slot: Slot::NONE,
                },
                after,
                write: true,
            }
        }
        (Charge::Reserve { .. }, Verdict::Admit { debt: after }) => {
            let now = Now::from_us(now_us);
            let wait = if tells_delay { debt } else { 0 };
            admit(after, Slot::after(wait, ns_of_us(now_us), now.ms))
        }
        (Charge::Reserve { .. }, Verdict::Refuse { wait: None }) => refuse(None),
        (Charge::Reserve { max_ms }, Verdict::Refuse { wait: Some(wait) }) => {
            // The slot: when the queue ahead has drained (leaky), or when
            // the debt left fits the bucket again (gcra, token).
            let now = Now::from_us(now_us);
            let slot_wait = if tells_delay { debt } else { wait };
            let slot = Slot::after(slot_wait, ns_of_us(now_us), now.ms);
            let after = wait + meter.capacity; // the debt with the cost's increment
            match after <= bound && slot.delay_ms <= max_ms {
                true => admit(after, slot),
                false => refuse(Some(wait)),
            }
        }
    }
}

/// What cancelling a booking of `amount` requests whose slot is at `at_ms`
/// gives back (ns), on a debt `debt` at `now`: what later bookings have not
/// overtaken (x/time/rate's CancelAt). A slot reached gives back nothing.
/// The booking ended (in the state's time) its requests after its slot
/// (leaky) or a full bucket after it (gcra, token); `at_ms` is its slot
/// rounded up, so the slot is taken at the earliest ns that rounds there,
/// which gives back less, never more. Never more than `debt`.
pub fn cancel_credit(
    meter: &Meter,
    debt: i128,
    amount: i64,
    at_ms: i64,
    now: Now,
    tells_delay: bool,
) -> i128 {
    if at_ms <= now.ms {
        return 0;
    }
    let increment = i128::from(amount).saturating_mul(meter.interval);
    let slot = (i128::from(at_ms) - 1) * NS_PER_MS + 1;
    let end = slot.saturating_add(if tells_delay {
        increment
    } else {
        meter.capacity
    });
    let overtaken = (ns_of_us(now.us) + debt - end).max(0);
    increment.saturating_sub(overtaken).clamp(0, debt)
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
        let ahead = (self.read)(state).map(|tat| tat - now_ns);
        let (debt, odd) = within(ahead, meter.capacity, policy.horizon_ns);
        let charged = charge(&meter, policy, debt, cost, now_us, self.tells_delay);
        let write = match charged.write {
            true => charged.after,
            // Odd state is written back by a real call, so it drains.
            false if cost > 0 && odd => debt,
            false => -1,
        };
        Outcome {
            decision: charged.decision,
            write: match write >= 0 {
                true => Write::State {
                    state: (self.make)(now_ns + write),
                    expires_at: ceil_ms(now_ns + write),
                },
                false => Write::Nothing,
            },
            reset_at: ceil_ms(now_ns + charged.after),
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
        let (before, _) = within(tat.map(|t| t - now_ns), meter.capacity, policy.horizon_ns);
        let after = match policy.charge {
            Charge::Cancel { at_ms } => {
                let now = Now::from_us(now_us);
                before - cancel_credit(&meter, before, amount, at_ms, now, self.tells_delay)
            }
            _ => meter.forgive(before, amount),
        };
        let write = match (tat, after) {
            // No debt to forgive (or nothing a cancel may give back): no write.
            (None, _) => Write::Nothing,
            (Some(_), _) if before == 0 || after == before => Write::Nothing,
            (Some(_), 0) => Write::Delete,
            (Some(_), _) => Write::State {
                state: (self.make)(now_ns + after),
                expires_at: ceil_ms(now_ns + after),
            },
        };
        let peek_state = (after > 0).then(|| (self.make)(now_ns + after));
        let peek = Policy {
            charge: Charge::Plain,
            ..*policy
        };
        Outcome {
            write,
            ..self.admit(peek_state, &peek, 0, now_us)
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

    /// `policy` with a horizon (ms) and a charge.
    fn with(p: Policy, horizon_ms: i64, charge: Charge) -> Policy {
        Policy {
            horizon_ns: i128::from(horizon_ms) * NS_PER_MS,
            charge,
            ..p
        }
    }

    #[test]
    fn bookings_follow_each_other_one_interval_apart() {
        for algo in [Algo::Gcra, Algo::Token, Algo::Leaky] {
            let p = Policy::new(algo, 10, 1_000, Some(algo.min_burst()), 0).unwrap();
            let reserve = with(p, 60_000, Charge::Reserve { max_ms: 5_000 });
            let plain = with(p, 60_000, Charge::Plain);
            let mut state = None;
            let mut slots = vec![];
            let now = 1_000_000 + 300; // µs, 0.3 ms into a ms
            for call in 0..12 {
                let out = crate::algo::admit(state, &reserve, 1, Now::from_us(now));
                assert!(out.decision.admitted, "{algo:?} call {call}");
                let Write::State {
                    state: s,
                    expires_at,
                } = out.write
                else {
                    panic!("{algo:?}: {:?}", out.write)
                };
                state = Some((s, Some(expires_at)));
                slots.push(out.decision.slot);
                // A plain call between bookings is refused and erases none.
                let between = crate::algo::admit(state, &plain, 1, Now::from_us(now));
                assert!(!between.decision.admitted, "{algo:?}");
                assert_eq!(between.write, Write::Nothing, "{algo:?}");
                assert!(between.decision.retry_after_ms >= slots.last().unwrap().delay_ms);
            }
            // The first goes now (leaky: the queue is empty); the booked
            // ones at their slots, rounded up to the ms.
            assert_eq!(
                slots[0],
                Slot {
                    delay_ms: 0,
                    at_ms: 1_000
                }
            );
            assert_eq!(slots[1].at_ms, 1_101, "{algo:?}");
            for pair in slots[1..].windows(2) {
                assert_eq!(pair[1].at_ms - pair[0].at_ms, 100, "{algo:?} {slots:?}");
                assert_eq!(pair[1].delay_ms - pair[0].delay_ms, 100, "{algo:?}");
            }
            assert_eq!(slots[0].at_ms - 1_000, slots[0].delay_ms);
        }
    }

    #[test]
    fn beyond_max_ms_or_the_horizon_books_nothing() {
        let p = policy(10, 1_000, 1);
        let mut state = None;
        let horizon = with(p, 250, Charge::Reserve { max_ms: 10_000 });
        let mut booked = 0;
        for _ in 0..10 {
            let out = admit(state, &horizon, 1, ms(0));
            match out.write {
                Write::State { state: s, .. } => {
                    booked += 1;
                    state = Some(s)
                }
                other => {
                    assert_eq!(other, Write::Nothing);
                    assert_eq!(out.decision.slot, Slot::NONE);
                }
            }
        }
        // One now, then 100, 200 ms ahead: the debt is 300 ms, 100 + 250 at most.
        assert_eq!(booked, 3);
        let short = with(p, 60_000, Charge::Reserve { max_ms: 150 });
        let out = admit(state, &short, 1, ms(0));
        assert_eq!((out.decision.admitted, out.write), (false, Write::Nothing));
    }

    #[test]
    fn force_consumes_and_stops_at_the_horizon() {
        let p = policy(10, 1_000, 2);
        let force = with(p, 1_000, Charge::Force);
        let first = admit(None, &force, 5, ms(0));
        // 500 ms of debt against a bucket of 200: refused, charged anyway.
        assert_eq!(
            (first.decision.admitted, first.decision.retry_after_ms),
            (false, 400)
        );
        let Write::State { state, .. } = first.write else {
            panic!()
        };
        assert_eq!(
            state,
            Tat {
                tat_ns: 500 * NS_PER_MS
            }
            .stored()
        );
        let capped = admit(Some(state), &force, 100, ms(0));
        let Write::State { state, .. } = capped.write else {
            panic!()
        };
        assert_eq!(
            state,
            Tat {
                tat_ns: 1_200 * NS_PER_MS
            }
            .stored(),
            "200 + 1000"
        );
        assert_eq!(capped.decision.retry_after_ms, 1_100);
        let within = admit(None, &force, 1, ms(0));
        assert!(within.decision.admitted);
    }

    #[test]
    fn a_cancel_gives_back_the_tail_only() {
        let p = policy(10, 1_000, 1);
        let meter = Meter::of(&p);
        let now = Now::from_ms(1_000);
        let interval = 100 * NS_PER_MS;
        // Booked: slots at 1100 (TAT 1200) and 1200 (TAT 1300): debt 300.
        let debt = 300 * NS_PER_MS;
        let last = cancel_credit(&meter, debt, 1, 1_200, now, false);
        assert!(last <= interval && last > interval - NS_PER_MS, "{last}");
        assert_eq!(
            cancel_credit(&meter, debt, 1, 1_100, now, false),
            0,
            "overtaken"
        );
        assert_eq!(
            cancel_credit(&meter, debt, 1, 1_000, now, false),
            0,
            "reached"
        );
        assert_eq!(
            cancel_credit(&meter, 10, 5, 1_200, now, false),
            10,
            "never below 0"
        );
    }

    proptest::proptest! {
        /// Any mix of plain calls, bookings and forced charges: the state
        /// never runs past capacity + horizon, and bookings' slots never go
        /// back in time.
        #[test]
        fn state_stays_within_the_horizon(
            horizon_ms in 0i64..3_000,
            calls in proptest::collection::vec((0i64..200_000, 0u8..3, 1i64..4), 1..80),
        ) {
            let p = policy(10, 1_000, 2);
            let cap = p.capacity_ns().unwrap() + i128::from(horizon_ms) * NS_PER_MS;
            let (mut now, mut state, mut last_at) = (ms(1_000), None, i64::MIN);
            for (step, kind, cost) in calls {
                now += step;
                let charge = match kind {
                    0 => Charge::Plain,
                    1 => Charge::Force,
                    _ => Charge::Reserve { max_ms: 10_000 },
                };
                let out = admit(state, &with(p, horizon_ms, charge), cost, now);
                if let Write::State { state: s, .. } = out.write {
                    let tat = Tat::of(s).unwrap().tat_ns;
                    proptest::prop_assert!(tat - i128::from(now) * 1_000 <= cap);
                    state = Some(s);
                }
                if kind == 2 && out.decision.admitted {
                    proptest::prop_assert!(out.decision.slot.at_ms >= last_at);
                    last_at = out.decision.slot.at_ms;
                }
            }
        }
    }
}
