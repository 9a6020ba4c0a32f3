//! Fixed window counter: one integer per window, and the key's expiry is
//! the reset.

use super::state::Layout;
use super::{Algo, Charge, Decision, Now, Outcome, Policy, Slot, State, Write};

/// The stored state: the count alone, a bare integer that INCR and GET
/// clients share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Count(pub i64);

impl Layout for Count {
    const ALGO: Algo = Algo::Fixed;
    const BARE: bool = true;
    const FIELDS: usize = 1;

    #[inline]
    fn read(fields: &[i64]) -> Option<Count> {
        match fields {
            &[count] => Some(Count(count)),
            _ => None,
        }
    }

    #[inline]
    fn stored(self) -> State {
        State::new(Algo::Fixed, [self.0])
    }
}

/// The counter as found in the keyspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counter {
    pub count: i64,
    /// Absolute expiry in ms; `None` when the key has no TTL (left by some
    /// other client).
    pub expires_at: Option<i64>,
}

/// Decide one call. `window_ms` > 0, `limit` > 0, `cost` >= 0, and
/// `now_ms + window_ms` must not overflow (the caller checks).
pub fn admit(
    found: Option<Counter>,
    limit: i64,
    window_ms: i64,
    cost: i64,
    now_ms: i64,
) -> (Decision, Write) {
    let fresh_expiry = now_ms.saturating_add(window_ms);
    // As in `counter_of`: an expired counter is gone.
    let found = found.filter(|c| c.expires_at.is_none_or(|at| at > now_ms));
    let (count, expires_at, adopted) = match found {
        None => (0, None, false),
        Some(Counter { count, expires_at }) => {
            let at = window_expiry(expires_at, window_ms, now_ms);
            (count, Some(at), expires_at != Some(at))
        }
    };
    let left_ms = |at: Option<i64>| at.map_or(0, |at| at.saturating_sub(now_ms).max(0));
    let remaining_after = |c: i64| limit.saturating_sub(c).max(0);

    if cost > limit {
        let decision = Decision {
            admitted: false,
            limit,
            remaining: remaining_after(count),
            retry_after_ms: -1,
            reset_after_ms: left_ms(expires_at),
            slot: Slot::NONE,
        };
        return (decision, adoption(adopted, cost, expires_at));
    }

    match count.checked_add(cost).filter(|&next| next <= limit) {
        Some(next) => {
            let expires_at = expires_at.unwrap_or(fresh_expiry);
            let decision = Decision {
                admitted: true,
                limit,
                remaining: remaining_after(next),
                retry_after_ms: 0,
                // A peek at no state opens no window.
                reset_after_ms: match (cost, found) {
                    (0, None) => 0,
                    _ => left_ms(Some(expires_at)),
                },
                slot: Slot::NONE,
            };
            let write = if cost == 0 {
                Write::Nothing
            } else {
                Write::State {
                    state: Count(next).stored(),
                    expires_at,
                }
            };
            (decision, write)
        }
        None => {
            let left = left_ms(expires_at);
            let decision = Decision {
                admitted: false,
                limit,
                remaining: remaining_after(count),
                retry_after_ms: left,
                reset_after_ms: left,
                slot: Slot::NONE,
            };
            (decision, adoption(adopted, cost, expires_at))
        }
    }
}

/// The expiry a counter is read with: its own, unless it has none (it
/// would live forever) or outlives this window (a shortened window, a
/// clock that went back; it would block past it): then the window's, which
/// must be written.
fn window_expiry(expires_at: Option<i64>, window_ms: i64, now_ms: i64) -> i64 {
    let fresh = now_ms.saturating_add(window_ms);
    expires_at.filter(|&at| at <= fresh).unwrap_or(fresh)
}

/// A refusal writes nothing, except the expiry a TTL-less counter lacked
/// (and a peek writes nothing at all).
fn adoption(adopted: bool, cost: i64, expires_at: Option<i64>) -> Write {
    match (adopted, cost, expires_at) {
        (true, c, Some(at)) if c > 0 => Write::Expiry { expires_at: at },
        _ => Write::Nothing,
    }
}

/// `admit` over the common state type, at the clock's ms.
pub fn decide(
    found: Option<(State, Option<i64>)>,
    policy: &Policy,
    cost: i64,
    now: Now,
) -> Outcome {
    decide_counter(counter_of(found, now.ms), policy, cost, now.ms)
}

fn decide_counter(found: Option<Counter>, policy: &Policy, cost: i64, now_ms: i64) -> Outcome {
    let (mut decision, mut write) = admit(found, policy.limit, policy.window_ms, cost, now_ms);
    if policy.charge == Charge::Force && !decision.admitted {
        (decision, write) = forced(found, policy, cost, now_ms).unwrap_or((decision, write));
    }
    Outcome {
        decision,
        write,
        reset_at: now_ms.saturating_add(decision.reset_after_ms),
    }
}

/// FORCE over the limit: the counter grows past it, in its window; the
/// reply is the refusal a request of cost 1 would get. `None` when the
/// count would pass an i64 (then the plain refusal stands).
fn forced(
    found: Option<Counter>,
    policy: &Policy,
    cost: i64,
    now_ms: i64,
) -> Option<(Decision, Write)> {
    let found = found.filter(|c| c.expires_at.is_none_or(|at| at > now_ms));
    let (count, expires_at) = match found {
        None => (0, now_ms.saturating_add(policy.window_ms)),
        Some(c) => (
            c.count,
            window_expiry(c.expires_at, policy.window_ms, now_ms),
        ),
    };
    let next = count.checked_add(cost)?;
    let left = expires_at.saturating_sub(now_ms).max(0);
    let decision = Decision {
        admitted: false,
        limit: policy.limit,
        remaining: 0,
        retry_after_ms: left,
        reset_after_ms: left,
        slot: Slot::NONE,
    };
    let write = Write::State {
        state: Count(next).stored(),
        expires_at,
    };
    Some((decision, write))
}

/// Takes `amount` off the counter (never below 0), keeping its window.
pub fn refund(
    found: Option<(State, Option<i64>)>,
    policy: &Policy,
    amount: i64,
    now: Now,
) -> Outcome {
    let now_ms = now.ms;
    // The decision is the counter after the refund, as a peek sees it.
    let peek = |counter, write| Outcome {
        write,
        ..decide_counter(counter, policy, 0, now_ms)
    };
    let Some(counter) = counter_of(found, now_ms) else {
        return peek(None, Write::Nothing);
    };
    let count = match counter.count {
        c if c <= 0 => c,
        c => c.saturating_sub(amount).max(0),
    };
    if count == 0 && counter.count > 0 {
        // Refunded to empty: the limiter is gone, as for the other algorithms.
        return peek(None, Write::Delete);
    }
    // As `admit` reads it: the reset the reply reports.
    let expires_at = window_expiry(counter.expires_at, policy.window_ms, now_ms);
    let after = Counter {
        count,
        expires_at: Some(expires_at),
    };
    // Nothing given back and the expiry already right: nothing to write.
    let write = if count == counter.count && counter.expires_at == Some(expires_at) {
        Write::Nothing
    } else {
        Write::State {
            state: Count(count).stored(),
            expires_at,
        }
    };
    peek(Some(after), write)
}

/// The live counter in a stored state: the server never hands out an
/// expired key, but one is treated as gone anyway.
pub fn counter_of(found: Option<(State, Option<i64>)>, now_ms: i64) -> Option<Counter> {
    let (state, expires_at) = found?;
    let Count(count) = Count::of(state)?;
    Some(Counter { count, expires_at }).filter(|c| c.expires_at.is_none_or(|at| at > now_ms))
}

/// The read side (RL.TTL): the back-off when the counter is at or over the
/// limit and the window still has time, else 0.
pub fn backoff(found: Option<Counter>, limit: i64, now_ms: i64) -> i64 {
    match found {
        Some(Counter {
            count,
            expires_at: Some(at),
        }) if limit > 0 && count >= limit => at.saturating_sub(now_ms).max(0),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const W: i64 = 1_000;

    fn counter(count: i64, expires_at: i64) -> Option<Counter> {
        Some(Counter {
            count,
            expires_at: Some(expires_at),
        })
    }

    #[test]
    fn first_hit_opens_a_window() {
        let (d, w) = admit(None, 3, W, 1, 10_000);
        assert!(d.admitted);
        assert_eq!(
            (d.limit, d.remaining, d.retry_after_ms, d.reset_after_ms),
            (3, 2, 0, W)
        );
        assert_eq!(
            w,
            Write::State {
                state: Count(1).stored(),
                expires_at: 11_000
            }
        );
    }

    #[test]
    fn counts_up_then_refuses_with_the_time_left() {
        let (d, w) = admit(counter(2, 11_000), 3, W, 1, 10_400);
        assert!(d.admitted);
        assert_eq!(d.remaining, 0);
        assert_eq!(d.reset_after_ms, 600);
        assert_eq!(
            w,
            Write::State {
                state: Count(3).stored(),
                expires_at: 11_000
            }
        );

        let (d, w) = admit(counter(3, 11_000), 3, W, 1, 10_700);
        assert!(!d.admitted);
        assert_eq!(
            (d.remaining, d.retry_after_ms, d.reset_after_ms),
            (0, 300, 300)
        );
        assert_eq!(w, Write::Nothing);
    }

    #[test]
    fn a_cost_above_the_limit_is_never_admitted() {
        let (d, w) = admit(None, 3, W, 4, 0);
        assert!(!d.admitted);
        assert_eq!(
            (d.retry_after_ms, d.reset_after_ms, d.remaining),
            (-1, 0, 3)
        );
        assert_eq!(w, Write::Nothing);
    }

    #[test]
    fn a_refund_to_empty_deletes_the_counter() {
        let p = Policy::new(crate::algo::Algo::Fixed, 3, W, None, 10_000).unwrap();
        let found = Some((Count(2).stored(), Some(10_500)));
        let out = refund(found, &p, 5, Now::from_ms(10_000));
        assert_eq!(out.write, Write::Delete);
        assert_eq!(
            (out.decision.remaining, out.decision.reset_after_ms),
            (3, 0)
        );
        let out = refund(found, &p, 1, Now::from_ms(10_000));
        assert_eq!(
            out.write,
            Write::State {
                state: Count(1).stored(),
                expires_at: 10_500
            }
        );
        assert_eq!(out.decision.reset_after_ms, 500);
    }

    #[test]
    fn a_refund_of_nothing_still_cuts_a_window_longer_than_the_policy() {
        // An empty counter (count 0) written under a longer window: nothing
        // to give back, but the expiry is repaired as a refusal repairs it.
        let p = Policy::new(crate::algo::Algo::Fixed, 3, W, None, 10_000).unwrap();
        let found = Some((Count(0).stored(), Some(10_000 + 100 * W)));
        let out = refund(found, &p, 1, Now::from_ms(10_000));
        assert_eq!(
            out.write,
            Write::State {
                state: Count(0).stored(),
                expires_at: 11_000
            }
        );
        // Within one window: nothing to write.
        let found = Some((Count(0).stored(), Some(10_500)));
        assert_eq!(
            refund(found, &p, 1, Now::from_ms(10_000)).write,
            Write::Nothing
        );
    }

    #[test]
    fn a_refund_cuts_a_window_longer_than_the_policy() {
        // Written under a longer window, or before the clock went back.
        let p = Policy::new(crate::algo::Algo::Fixed, 3, W, None, 10_000).unwrap();
        let found = Some((Count(5).stored(), Some(10_000 + 100 * W)));
        let out = refund(found, &p, 1, Now::from_ms(10_000));
        assert_eq!(out.decision.reset_after_ms, W);
        assert_eq!(
            out.write,
            Write::State {
                state: Count(4).stored(),
                expires_at: 11_000
            },
            "the key expires when the reply says it resets"
        );
    }

    #[test]
    fn peek_changes_nothing() {
        let (d, w) = admit(counter(2, 11_000), 3, W, 0, 10_000);
        assert!(d.admitted);
        assert_eq!((d.remaining, d.reset_after_ms), (1, 1_000));
        assert_eq!(w, Write::Nothing);

        // No state: nothing to reset, as for every other algorithm.
        let (d, w) = admit(None, 3, W, 0, 10_000);
        assert!(d.admitted);
        assert_eq!((d.remaining, d.reset_after_ms), (3, 0));
        assert_eq!(w, Write::Nothing);
    }

    #[test]
    fn a_counter_without_ttl_is_adopted() {
        let found = Some(Counter {
            count: 1,
            expires_at: None,
        });
        let (d, w) = admit(found, 3, W, 1, 5_000);
        assert!(d.admitted);
        assert_eq!(
            w,
            Write::State {
                state: Count(2).stored(),
                expires_at: 6_000
            }
        );

        let found = Some(Counter {
            count: 9,
            expires_at: None,
        });
        let (d, w) = admit(found, 3, W, 1, 5_000);
        assert!(!d.admitted);
        assert_eq!(d.retry_after_ms, W);
        assert_eq!(w, Write::Expiry { expires_at: 6_000 });

        let (_, w) = admit(found, 3, W, 0, 5_000);
        assert_eq!(w, Write::Nothing, "a peek never writes");
    }

    #[test]
    fn a_window_longer_than_the_policy_is_cut_to_one_window() {
        let far = counter(9, i64::MAX);
        let (d, w) = admit(far, 3, W, 1, 5_000);
        assert!(!d.admitted);
        assert_eq!(d.retry_after_ms, W);
        assert_eq!(w, Write::Expiry { expires_at: 6_000 });
        let (d, w) = admit(counter(1, i64::MAX), 3, W, 1, 5_000);
        assert!(d.admitted);
        assert_eq!(
            w,
            Write::State {
                state: Count(2).stored(),
                expires_at: 6_000
            }
        );
    }

    #[test]
    fn a_lowered_limit_applies_at_once() {
        let (d, _) = admit(counter(8, 11_000), 5, W, 1, 10_000);
        assert!(!d.admitted);
        assert_eq!((d.remaining, d.retry_after_ms), (0, 1_000));
    }

    #[test]
    fn huge_counts_and_costs_do_not_overflow() {
        let (d, w) = admit(counter(i64::MAX, 11_000), i64::MAX, W, i64::MAX, 10_000);
        assert!(!d.admitted);
        assert_eq!(w, Write::Nothing);
        let (d, _) = admit(counter(i64::MIN, 11_000), i64::MAX, W, 1, 10_000);
        assert!(d.admitted);
        assert_eq!(d.remaining, i64::MAX);
    }

    #[test]
    fn backoff_only_at_or_over_the_limit() {
        assert_eq!(backoff(counter(2, 11_000), 3, 10_000), 0);
        assert_eq!(backoff(counter(3, 11_000), 3, 10_000), 1_000);
        assert_eq!(backoff(counter(4, 11_000), 3, 10_000), 1_000);
        assert_eq!(backoff(None, 3, 10_000), 0);
        assert_eq!(backoff(counter(4, 11_000), 0, 10_000), 0);
        let no_ttl = Some(Counter {
            count: 9,
            expires_at: None,
        });
        assert_eq!(backoff(no_ttl, 3, 10_000), 0);
    }

    /// Drive a clock forward over many windows: never more than `limit`
    /// admitted in one window.
    #[test]
    fn never_more_than_the_limit_per_window() {
        let (limit, window) = (7, 100);
        let mut state: Option<Counter> = None;
        let mut admitted_in_window = 0;
        let mut window_end = 0;
        for now in (0..10_000).step_by(3) {
            if let Some(c) = state {
                if c.expires_at.is_some_and(|at| at <= now) {
                    state = None; // the server expired the key
                }
            }
            if state.is_none() {
                admitted_in_window = 0;
                window_end = now + window;
            }
            let (d, w) = admit(state, limit, window, 1, now);
            if d.admitted {
                admitted_in_window += 1;
            }
            assert!(admitted_in_window <= limit);
            if let Write::State {
                state: written,
                expires_at,
            } = w
            {
                let Count(count) = Count::of(written).unwrap();
                assert_eq!(expires_at, window_end);
                state = Some(Counter {
                    count,
                    expires_at: Some(expires_at),
                });
            }
        }
    }
}
