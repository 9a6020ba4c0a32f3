//! Leaky bucket as a queue (shaping): requests leave at a constant rate of
//! `limit` per window however they arrive. An arrival joins the queue and
//! is told how long to wait before it proceeds (`retry_after_ms` on an
//! admitted reply, like nginx's `limit_req ... delay`); it is refused when
//! more than `burst` requests would be waiting. The state is the time the
//! queue drains, stored in ns.

use super::gcra::Schedule;
use super::state::{clamp, Layout};
use super::{Algo, Now, Outcome, Policy, State};

/// The stored state, `leaky:<queue_drained_at_ns>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Queue {
    pub drained_ns: i128,
}

impl Layout for Queue {
    const ALGO: Algo = Algo::Leaky;
    const FIELDS: usize = 1;

    #[inline]
    fn read(fields: &[i64]) -> Option<Queue> {
        match *fields {
            [drained] => Some(Queue {
                drained_ns: i128::from(drained),
            }),
            _ => None,
        }
    }

    #[inline]
    fn stored(self) -> State {
        State::new(Algo::Leaky, [clamp(self.drained_ns)])
    }
}

/// The queue is GCRA's schedule read as delays: the state is the time the
/// queue drains, and the capacity holds `burst` waiting requests plus the
/// one being served (see `Policy::capacity_ns`).
const LEAKY: Schedule = Schedule {
    read: |state| Some(Queue::of(state?)?.drained_ns),
    make: |drained_ns| Queue { drained_ns }.stored(),
    tells_delay: true,
};

pub fn admit(state: Option<State>, policy: &Policy, cost: i64, now_us: i64) -> Outcome {
    LEAKY.admit(state, policy, cost, now_us)
}

pub fn refund(state: Option<State>, policy: &Policy, amount: i64, now_us: i64) -> Outcome {
    LEAKY.refund(state, policy, amount, now_us)
}

pub fn first_slot(state: Option<State>, policy: &Policy, cost: i64, now: Now) -> Option<i64> {
    LEAKY.earliest(state, policy, cost, now)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algo::{Write, NS_PER_US};
    use proptest::prelude::*;

    fn policy(limit: i64, window_ms: i64, queue: i64) -> Policy {
        Policy::new(Algo::Leaky, limit, window_ms, Some(queue), 0).unwrap()
    }

    #[test]
    fn a_clump_is_spread_out_and_the_excess_refused() {
        // 10 per second (100 ms apart), 2 may wait.
        let p = policy(10, 1_000, 2);
        let mut state = None;
        let mut replies = vec![];
        for _ in 0..4 {
            let out = admit(state, &p, 1, 0);
            if let Write::State { state: s, .. } = out.write {
                state = Some(s);
            }
            replies.push((
                out.decision.admitted,
                out.decision.retry_after_ms,
                out.decision.remaining,
            ));
        }
        assert_eq!(
            replies,
            [
                (true, 0, 2),
                (true, 100, 1),
                (true, 200, 0),
                (false, 100, 0)
            ]
        );
    }

    /// The queue tells the delay from the µs, as GCRA does: 500 µs
    /// ahead, 100 µs later, is 400 µs, rounded up to 1 ms.
    #[test]
    fn the_delay_is_kept_to_the_microsecond() {
        let p = policy(4_000, 1_000, 2);
        let start = 1_764_000_000_000 * 1_000 + 600;
        let start_ns = i128::from(start) * 1_000;
        let queued = admit(
            Some(
                Queue {
                    drained_ns: start_ns + 500_000,
                }
                .stored(),
            ),
            &p,
            1,
            start + 100,
        );
        assert_eq!(
            (queued.decision.admitted, queued.decision.retry_after_ms),
            (true, 1),
            "400 µs, rounded up"
        );
    }

    #[test]
    fn no_queue_means_no_waiting() {
        let p = policy(10, 1_000, 0);
        let first = admit(None, &p, 1, 0);
        assert_eq!(
            (first.decision.admitted, first.decision.retry_after_ms),
            (true, 0)
        );
        let Write::State { state, .. } = first.write else {
            panic!()
        };
        let second = admit(Some(state), &p, 1, 30_000);
        assert_eq!(
            (second.decision.admitted, second.decision.retry_after_ms),
            (false, 70)
        );
    }

    proptest! {
        /// Whatever the clumping, consecutive start times are at least one
        /// interval apart: the output never beats the rate.
        #[test]
        fn never_releases_faster_than_the_rate(
            limit in 1i64..50,
            window_ms in 1i64..3_000,
            queue in 0i64..10,
            steps in proptest::collection::vec(0i64..40_000, 1..150),
        ) {
            let p = policy(limit, window_ms, queue);
            let interval = p.interval_ns();
            // µs, from 5 ms on.
            let (mut now, mut state, mut last_start): (i64, Option<State>, Option<i128>) = (5_000_000, None, None);
            for step in steps {
                now += step;
                let out = admit(state, &p, 1, now);
                if let Write::State { state: s, .. } = out.write {
                    let start = Queue::of(s).unwrap().drained_ns - interval; // this request's start
                    if let Some(prev) = last_start {
                        prop_assert!(start - prev >= interval, "{} then {}", prev, start);
                    }
                    prop_assert!(start >= i128::from(now) * NS_PER_US);
                    last_start = Some(start);
                    state = Some(s);
                }
            }
        }
    }
}
