//! Sliding window counter: the count of the current fixed window plus the
//! previous window's count weighted by the fraction of it still in view.
//! Windows are aligned to multiples of the window length (from the epoch),
//! so every node agrees on where they start. The estimate assumes the
//! previous window's requests were spread evenly; docs/algorithms.md gives its measured
//! accuracy against an exact sliding log.
//!
//! All comparisons are exact: `estimate + cost <= limit` is evaluated as
//! `previous * (window - elapsed) + (current + cost) * window <= limit * window`.

use super::calendar::{self, Period};
use super::state::Layout;
use super::{div, Algo, Charge, Decision, Outcome, Policy, Slot, State, Write};
use crate::time::zone::Zone;

/// The stored state, `sliding:<window_start_ms>:<current_count>:<previous_count>`,
/// none of them negative.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Windows {
    pub window_start: i64,
    pub current: i64,
    pub previous: i64,
}

impl Layout for Windows {
    const ALGO: Algo = Algo::Sliding;
    const FIELDS: usize = 3;

    #[inline]
    fn read(fields: &[i64]) -> Option<Windows> {
        match *fields {
            [window_start, current, previous]
                if window_start >= 0 && current >= 0 && previous >= 0 =>
            {
                Some(Windows {
                    window_start,
                    current,
                    previous,
                })
            }
            _ => None,
        }
    }

    #[inline]
    fn stored(self) -> State {
        State::new(
            Algo::Sliding,
            [self.window_start, self.current, self.previous],
        )
    }
}

/// Where the windows lie at `now_ms`: the current one's start and length,
/// the previous one's start and the next one's length. Plain windows are
/// multiples of the window since the epoch; calendar periods (CALENDAR)
/// each have their own length.
#[derive(Debug, Clone, Copy)]
struct Frame {
    start: i64,
    window: i64,
    previous_start: i64,
    next: i64,
}

#[inline(always)]
fn frame(policy: &Policy, now_ms: i64) -> Frame {
    match policy.calendar {
        None => {
            let window = policy.window_ms;
            let start = now_ms - now_ms.rem_euclid(window);
            Frame {
                start,
                window,
                previous_start: start - window,
                next: window,
            }
        }
        Some((period, zone)) => calendar_frame(period, zone, now_ms),
    }
}

#[cold]
fn calendar_frame(period: Period, zone: Zone, now_ms: i64) -> Frame {
    let p = calendar::periods(period, zone, now_ms);
    Frame {
        start: p.start,
        window: p.end - p.start,
        previous_start: p.previous_start,
        next: p.next_end - p.end,
    }
}

/// The counts in view at `now_ms`: (current, previous).
fn in_view(state: Option<Windows>, f: &Frame, now_ms: i64) -> (i64, i64) {
    match state {
        // A window stamped after now (a clock that went back) is read as
        // the current one: forgetting it would admit a whole fresh budget
        // on top of what it counted.
        Some(Windows {
            window_start,
            current,
            previous,
        }) if window_start == f.start || window_start > now_ms => (current, previous),
        Some(Windows {
            window_start,
            current,
            ..
        }) if window_start == f.previous_start => (0, current),
        _ => (0, 0),
    }
}

/// Whether the stored window starts after `now_ms`.
fn from_the_future(state: Option<Windows>, now_ms: i64) -> bool {
    matches!(state, Some(Windows { window_start, .. }) if window_start > now_ms)
}

/// The state for these counts, expiring once nothing of it is in view:
/// at the end of the current window, or of the next one while the current
/// one counts anything.
fn stored(f: &Frame, current: i64, previous: i64) -> Write {
    let state = Windows {
        window_start: f.start,
        current,
        previous,
    }
    .stored();
    match (current, previous) {
        (0, 0) => Write::Delete,
        (0, _) => Write::State {
            state,
            expires_at: f.start + f.window,
        },
        _ => Write::State {
            state,
            expires_at: f.start + f.window + f.next,
        },
    }
}

struct View {
    window: i128,
    limit: i128,
    /// The previous window's weight: ms of the current one still to come
    /// (its fraction of the current window).
    weight: i128,
    /// ms left in the current window.
    left: i64,
    /// The next window's length.
    next: i64,
}

impl View {
    fn used(&self, current: i64, previous: i64) -> i128 {
        i128::from(previous) * self.weight + i128::from(current) * self.window
    }

    /// What is left under the limit, in requests times ms: negative when
    /// the estimate is over it.
    fn spare(&self, current: i64, previous: i64) -> i128 {
        self.limit * self.window - self.used(current, previous)
    }

    /// Whole requests that fit in `spare` (see `spare`).
    fn room(&self, spare: i128) -> i64 {
        let free = div(spare.max(0), self.window);
        i64::try_from(free).unwrap_or(i64::MAX)
    }

    /// ms until `cost` fits, given it does not fit now and cost <= limit.
    fn wait(&self, current: i64, previous: i64, cost: i64) -> i64 {
        let (c, p, cost) = (i128::from(current), i128::from(previous), i128::from(cost));
        // Within this window, as the previous window slides out of view.
        if p > 0 && c + cost <= self.limit {
            let excess =
                self.used(current, previous) + cost * self.window - self.limit * self.window;
            let t = div(excess + p - 1, p);
            if t < self.weight {
                return t as i64;
            }
        }
        // Early in the next window, where this window becomes the previous.
        let next = i128::from(self.next);
        let into_next = match c {
            0 => 0,
            _ => div((next * (c - self.limit + cost)).max(0) + c - 1, c),
        };
        self.left + into_next.min(next) as i64
    }

    /// ms until the estimate is back to 0.
    fn reset(&self, current: i64, previous: i64) -> i64 {
        match (current, previous) {
            (0, 0) => 0,
            (0, _) => self.left,
            _ => self.left + self.next,
        }
    }
}

fn view(policy: &Policy, f: &Frame, now_ms: i64) -> View {
    let left = f.start + f.window - now_ms;
    View {
        window: i128::from(f.window),
        limit: i128::from(policy.limit),
        weight: i128::from(left),
        left,
        next: f.next,
    }
}

pub fn admit(state: Option<State>, policy: &Policy, cost: i64, now_ms: i64) -> Outcome {
    judge(state.and_then(Windows::of), policy, cost, now_ms)
}

fn judge(state: Option<Windows>, policy: &Policy, cost: i64, now_ms: i64) -> Outcome {
    let f = frame(policy, now_ms);
    let (current, previous) = in_view(state, &f, now_ms);
    let v = view(policy, &f, now_ms);
    let spare = v.spare(current, previous);
    // What the cost takes, once it is known to be at most the limit.
    let taken = i128::from(cost) * v.window;
    let fits = cost <= policy.limit && taken <= spare;
    if !fits && policy.charge == Charge::Force {
        if let Some(after) = current.checked_add(cost) {
            return forced(&f, &v, policy, after, previous, now_ms);
        }
    }
    if !fits {
        let retry = if cost > policy.limit {
            -1
        } else {
            v.wait(current, previous, cost)
        };
        let reset = v.reset(current, previous);
        return Outcome {
            decision: Decision {
                admitted: false,
                limit: policy.limit,
                remaining: v.room(spare),
                retry_after_ms: retry,
                reset_after_ms: reset,
                slot: Slot::NONE,
            },
            // Read as now's window, a future one is written back as such
            // by a real call, or it would be read so again next window.
            write: match cost > 0 && from_the_future(state, now_ms) {
                true => stored(&f, current, previous),
                false => Write::Nothing,
            },
            reset_at: now_ms + reset,
        };
    }
    let after = current + cost;
    let reset = v.reset(after, previous);
    Outcome {
        decision: Decision {
            admitted: true,
            limit: policy.limit,
            remaining: v.room(spare - taken),
            retry_after_ms: 0,
            reset_after_ms: reset,
            slot: Slot::NONE,
        },
        reset_at: now_ms + reset,
        write: match cost {
            0 => Write::Nothing,
            _ => Write::State {
                state: Windows {
                    window_start: f.start,
                    current: after,
                    previous,
                }
                .stored(),
                expires_at: f.start + f.window + f.next,
            },
        },
    }
}

/// FORCE over the limit: the current window counts `current` (past the
/// limit), and the reply is the refusal a request of cost 1 would get.
fn forced(
    f: &Frame,
    v: &View,
    policy: &Policy,
    current: i64,
    previous: i64,
    now_ms: i64,
) -> Outcome {
    let reset = v.reset(current, previous);
    Outcome {
        decision: Decision {
            admitted: false,
            limit: policy.limit,
            remaining: 0,
            retry_after_ms: v.wait(current, previous, 1),
            reset_after_ms: reset,
            slot: Slot::NONE,
        },
        write: Write::State {
            state: Windows {
                window_start: f.start,
                current,
                previous,
            }
            .stored(),
            expires_at: f.start + f.window + f.next,
        },
        reset_at: now_ms + reset,
    }
}

/// Gives back `amount` from the current window's count (never below 0).
pub fn refund(state: Option<State>, policy: &Policy, amount: i64, now_ms: i64) -> Outcome {
    let state = state.and_then(Windows::of);
    let f = frame(policy, now_ms);
    let (current, previous) = in_view(state, &f, now_ms);
    let after = current.saturating_sub(amount).max(0);
    let next = Windows {
        window_start: f.start,
        current: after,
        previous,
    };
    // Nothing to give back (no state, or an empty current window) writes
    // nothing, even where the state would be re-based onto a new window.
    let write = match state.is_some() && current > 0 {
        false => Write::Nothing,
        true => stored(&f, after, previous),
    };
    Outcome {
        write,
        ..judge(Some(next), policy, 0, now_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn policy(limit: i64, window_ms: i64) -> Policy {
        Policy::new(Algo::Sliding, limit, window_ms, None, 0).unwrap()
    }

    fn step(state: &mut Option<State>, p: &Policy, cost: i64, now: i64) -> Decision {
        let out = admit(*state, p, cost, now);
        if let Write::State { state: s, .. } = out.write {
            *state = Some(s);
        }
        out.decision
    }

    #[test]
    fn a_refund_with_nothing_in_the_current_window_writes_nothing() {
        let p = policy(5, 1_000);
        // Three in the previous window, none in this one.
        let s = Some(
            Windows {
                window_start: 0,
                current: 3,
                previous: 0,
            }
            .stored(),
        );
        let out = refund(s, &p, 2, 1_500);
        assert_eq!(out.write, Write::Nothing);
        assert_eq!(out.decision, admit(s, &p, 0, 1_500).decision);
    }

    #[test]
    fn the_previous_window_fades_out() {
        let p = policy(10, 1_000);
        let mut s = None;
        for _ in 0..10 {
            assert!(step(&mut s, &p, 1, 900).admitted);
        }
        assert!(!step(&mut s, &p, 1, 950).admitted);
        // At 1100, 90% of the previous window (10) is in view: 9 used, 1 free.
        let d = step(&mut s, &p, 1, 1_100);
        assert!(d.admitted);
        let d = step(&mut s, &p, 1, 1_100);
        assert!(!d.admitted);
        // 9 + 1 = 10 used; one more fits once the weight drops by 1/10: at 1200.
        assert_eq!(d.retry_after_ms, 100);
        assert!(step(&mut s, &p, 1, 1_200).admitted);
    }

    #[test]
    fn the_boundary_burst_is_smoothed() {
        // A fixed window admits 2x the limit across the seam; sliding does not.
        let p = policy(10, 1_000);
        let mut s = None;
        let admitted_before = (0..10)
            .filter(|_| step(&mut s, &p, 1, 999).admitted)
            .count();
        let admitted_after = (0..10)
            .filter(|_| step(&mut s, &p, 1, 1_000).admitted)
            .count();
        assert_eq!(admitted_before, 10);
        assert_eq!(
            admitted_after, 0,
            "the whole previous window is still in view"
        );
    }

    #[test]
    fn a_cost_above_the_limit_never_fits() {
        let d = admit(None, &policy(5, 1_000), 6, 0).decision;
        assert_eq!((d.admitted, d.retry_after_ms, d.remaining), (false, -1, 5));
    }

    #[test]
    fn a_clock_that_went_back_does_not_forget_the_window() {
        // The limit spent at 2500; the clock then goes back 1.2 windows.
        let p = policy(10, 1_000);
        let mut s = None;
        for _ in 0..10 {
            assert!(step(&mut s, &p, 1, 2_500).admitted);
        }
        let out = admit(s, &p, 1, 1_300);
        assert!(
            !out.decision.admitted,
            "a fresh budget on top of the spent one"
        );
        // Read as now's window (1000..2000); written back as such, so the
        // next windows see it fade out as usual.
        assert_eq!(
            (out.decision.retry_after_ms, out.decision.reset_after_ms),
            (800, 1_700)
        );
        let written = Windows {
            window_start: 1_000,
            current: 10,
            previous: 0,
        }
        .stored();
        assert_eq!(
            out.write,
            Write::State {
                state: written,
                expires_at: 3_000
            }
        );
        assert!(admit(Some(written), &p, 1, 2_100).decision.admitted);
        assert_eq!(
            admit(s, &p, 0, 1_300).write,
            Write::Nothing,
            "a peek never writes"
        );
        // A refund gives back from it, re-based the same way.
        let back = refund(s, &p, 4, 1_300);
        assert_eq!(
            back.write,
            Write::State {
                state: Windows {
                    window_start: 1_000,
                    current: 6,
                    previous: 0
                }
                .stored(),
                expires_at: 3_000
            }
        );
        assert_eq!(back.decision.remaining, 4);
    }

    proptest! {
        /// The retry-after is exact: waiting less is refused, waiting that
        /// long is admitted.
        #[test]
        fn retry_after_is_exact(
            limit in 1i64..20,
            window in 10i64..2_000,
            calls in proptest::collection::vec((0i64..300, 1i64..4), 1..80),
        ) {
            let p = policy(limit, window);
            let (mut now, mut s) = (7_000_000i64, None);
            for (step_ms, cost) in calls {
                now += step_ms;
                let out = admit(s, &p, cost, now);
                if let Write::State { state, .. } = out.write { s = Some(state); }
                let d = out.decision;
                if !d.admitted && d.retry_after_ms > 0 {
                    let at = now + d.retry_after_ms;
                    prop_assert!(admit(s, &p, cost, at).decision.admitted, "not admitted at retry time");
                    prop_assert!(!admit(s, &p, cost, at - 1).decision.admitted, "admitted before retry time");
                }
            }
        }

        /// Over calendar months (or days, 23 or 25 hours long across a
        /// daylight-saving change), each with its own length: the
        /// retry-after is exact across their boundaries too, and the state
        /// expires at the end of the next period while the current one
        /// counts anything.
        #[test]
        fn over_calendar_months_retry_after_is_exact(
            limit in 1i64..20,
            offset_min in -(23 * 60 + 59)..=(23i32 * 60 + 59),
            named in proptest::sample::select(vec![
                "", "Europe/Berlin", "America/Santiago", "Australia/Lord_Howe", "Asia/Beirut",
            ]),
            day in proptest::bool::ANY,
            calls in proptest::collection::vec((0i64..200_000_000, 1i64..4), 1..60),
        ) {
            let zone = Zone::named(named.as_bytes()).unwrap_or(Zone::fixed(offset_min * 60_000));
            let period = if day { Period::Day } else { Period::Month };
            let p = Policy {
                calendar: Some((period, zone)),
                ..policy(limit, 1)
            };
            // 2024-01-30: through a leap February.
            let (mut now, mut s) = (1_706_572_800_000i64, None);
            for (step_ms, cost) in calls {
                now += step_ms;
                let out = admit(s, &p, cost, now);
                if let Write::State { state, expires_at } = out.write {
                    let ps = calendar::periods(period, zone, now);
                    let at = match Windows::of(state) {
                        Some(Windows { current: 0, .. }) => ps.end,
                        _ => ps.next_end,
                    };
                    prop_assert_eq!(expires_at, at);
                    s = Some(state);
                }
                let d = out.decision;
                if !d.admitted && d.retry_after_ms > 0 {
                    let at = now + d.retry_after_ms;
                    prop_assert!(admit(s, &p, cost, at).decision.admitted, "not admitted at retry time");
                    prop_assert!(!admit(s, &p, cost, at - 1).decision.admitted, "admitted before retry time");
                }
            }
        }

        /// The estimate never lets through more than the limit within any
        /// aligned window, nor more than 2x the limit in any window-long span.
        #[test]
        fn keeps_to_its_bound(
            limit in 1i64..30,
            window in 10i64..1_000,
            steps in proptest::collection::vec(0i64..40, 1..300),
        ) {
            let p = policy(limit, window);
            let (mut now, mut s, mut log) = (1_000_000i64, None, Vec::new());
            for step_ms in steps {
                now += step_ms;
                let out = admit(s, &p, 1, now);
                if let Write::State { state, .. } = out.write { s = Some(state); }
                if out.decision.admitted { log.push(now); }
                let aligned = now - now.rem_euclid(window);
                let in_window = log.iter().filter(|&&t| t >= aligned).count() as i64;
                let in_span = log.iter().filter(|&&t| t > now - window).count() as i64;
                prop_assert!(in_window <= limit);
                prop_assert!(in_span <= 2 * limit);
            }
        }
    }
}

/// The sliding window counter against an exact sliding log, on a recorded
/// trace: run with `cargo test --release accuracy -- --nocapture` to see
/// the figures docs/algorithms.md quotes.
#[cfg(test)]
mod accuracy {
    use super::*;
    use crate::algo::Algo;
    use std::collections::VecDeque;

    /// A reproducible bursty trace (ms timestamps): quiet spells, steady
    /// traffic and bursts, from a fixed-seed xorshift generator.
    pub fn trace() -> Vec<i64> {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let (mut now, mut out) = (1_764_000_000_000i64, Vec::new());
        while out.len() < 200_000 {
            // Each phase: 0.2–2 s at 0, 50, 90, 130 or 300 requests per second.
            let length = 200 + (next() % 1_800) as i64;
            let rate = [0, 50, 90, 130, 300][(next() % 5) as usize];
            let end = now + length;
            while now < end {
                if rate > 0 && next() % 1_000 < rate {
                    out.push(now);
                }
                now += 1;
            }
        }
        out
    }

    #[test]
    fn accuracy_against_an_exact_sliding_log() {
        let (limit, window) = (100i64, 1_000i64);
        let p = Policy::new(Algo::Sliding, limit, window, None, 0).unwrap();
        let (mut state, mut exact_log) = (None, VecDeque::new());
        let mut admitted_log: VecDeque<i64> = VecDeque::new();
        let (mut total, mut exact_admitted, mut approx_admitted) = (0u64, 0u64, 0u64);
        let mut errors: Vec<f64> = Vec::new();
        let mut worst_overshoot = 0i64;
        for now in trace() {
            let expire = |log: &mut VecDeque<i64>| {
                while log.front().is_some_and(|&t| t <= now - window) {
                    log.pop_front();
                }
            };
            expire(&mut exact_log);
            expire(&mut admitted_log);
            // An exact limiter run on its own over the same arrivals.
            if (exact_log.len() as i64) < limit {
                exact_log.push_back(now);
                exact_admitted += 1;
            }
            // The estimate against the exact count of what it let through.
            let f = frame(&p, now);
            let (current, previous) = in_view(state.and_then(Windows::of), &f, now);
            let start = f.start;
            let weight = (start + window - now) as f64 / window as f64;
            let estimate = previous as f64 * weight + current as f64;
            errors.push((estimate - admitted_log.len() as f64).abs() / limit as f64);
            let out = admit(state, &p, 1, now);
            if let Write::State { state: s, .. } = out.write {
                state = Some(s);
            }
            total += 1;
            if out.decision.admitted {
                admitted_log.push_back(now);
                approx_admitted += 1;
            }
            worst_overshoot = worst_overshoot.max(admitted_log.len() as i64 - limit);
        }
        errors.sort_by(f64::total_cmp);
        let mean = errors.iter().sum::<f64>() / errors.len() as f64 * 100.0;
        let p99 = errors[errors.len() * 99 / 100] * 100.0;
        println!(
            "sliding vs exact log over {total} requests (limit {limit}/{window} ms): \
             estimate error mean {mean:.1}% / p99 {p99:.1}% of the limit; \
             admitted {approx_admitted} vs {exact_admitted} by an exact limiter ({:+.2}%); \
             worst window-long span held {}",
            (approx_admitted as f64 / exact_admitted as f64 - 1.0) * 100.0,
            limit + worst_overshoot,
        );
        assert!(mean < 10.0, "mean error {mean:.1}%");
        assert!(worst_overshoot < limit, "below 2x the limit, as documented");
    }
}
