//! RL.THROTTLE: redis-cell's CL.THROTTLE semantics (GCRA with
//! `max_burst + 1` cells of tolerance), with its failure modes removed:
//! checked arithmetic, ns precision whatever the rate, absolute expiry, and
//! `quantity 0` as a pure peek. State is the same `gcra:<tat_ns>` string.

use super::gcra::Tat;
use super::state::Layout;
use super::{div, Now, State, Write};
use crate::error::RlError;

const NS_PER_S: i64 = 1_000_000_000;

/// Bucket times are absolute ns, which must fit an i64.
const PAST_THE_CLOCK: &str = "its times would pass the ns clock (the year 2262)";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Params {
    pub max_burst: i64,
    pub count: i64,
    pub period_s: i64,
}

/// The CL.THROTTLE reply: times in whole seconds, rounded up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reply {
    pub limited: bool,
    pub limit: i64,
    pub remaining: i64,
    /// -1 when allowed, or when the quantity can never be allowed.
    pub retry_after_s: i64,
    pub reset_after_s: i64,
    /// The same back-off in ms (rounded up; -1 as above), for INFO.
    pub retry_after_ms: i64,
}

/// The validated meter: emission interval and delay variation tolerance,
/// in ns. Both fit an i64, and so does the tolerance added to the time the
/// meter was made for (`Params::meter` checks it), so a call at that time
/// is worked out in i64, without i128 arithmetic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meter {
    interval: i64,
    tolerance: i64,
    limit: i64,
}

impl Params {
    pub fn meter(&self, now_ms: i64) -> Result<Meter, RlError> {
        if self.max_burst < 0 {
            return Err(RlError::BadValue("max_burst", crate::error::NON_NEGATIVE));
        }
        if self.count < 1 {
            return Err(RlError::BadValue(
                "count_per_period",
                crate::error::POSITIVE,
            ));
        }
        if self.period_s < 1 {
            return Err(RlError::BadValue("period", crate::error::POSITIVE));
        }
        // Integer division like redis-cell's; sub-ns intervals are refused.
        let interval = div(
            i128::from(self.period_s) * i128::from(NS_PER_S),
            i128::from(self.count),
        );
        if interval == 0 {
            return Err(RlError::TooLarge(
                "count_per_period",
                "more than one request per ns",
            ));
        }
        if !super::policy::fits_ns(now_ms, interval) {
            return Err(RlError::TooLarge("period", PAST_THE_CLOCK));
        }
        // The bucket, (max_burst + 1) intervals, must fit too.
        let too_big = || RlError::TooLarge("max_burst", PAST_THE_CLOCK);
        let limit = self.max_burst.checked_add(1).ok_or_else(too_big)?;
        let tolerance = interval
            .checked_mul(i128::from(limit))
            .ok_or_else(too_big)?;
        if !super::policy::fits_ns(now_ms, tolerance) {
            return Err(too_big());
        }
        // Both fit once they fit after the clock (never fails for a clock
        // after 1970).
        let (Ok(interval), Ok(tolerance)) = (i64::try_from(interval), i64::try_from(tolerance))
        else {
            return Err(too_big());
        };
        Ok(Meter {
            interval,
            tolerance,
            limit,
        })
    }
}

/// A non-negative span of ns in whole `unit`s, rounded up (a negative one
/// is 0).
fn ceil_in(ns: i64, unit: i64) -> i64 {
    let ns = ns.max(0);
    ns / unit + i64::from(ns % unit != 0)
}

/// Decides one call at `now` (its µs), the time `meter` was made for.
/// `found` is the stored state and the key's absolute expiry (`None`: no
/// TTL), as for `algo::admit`.
pub fn throttle(
    found: Option<(State, Option<i64>)>,
    meter: &Meter,
    quantity: i64,
    now: Now,
) -> (Reply, Write) {
    const NS_PER_MS: i64 = 1_000_000;
    let now = now.us.saturating_mul(1_000).max(0);
    let tolerance = meter.tolerance;
    let stored = found
        .and_then(|(state, _)| Tat::of(state))
        .map(|t| super::state::clamp(t.tat_ns));
    // In [now, now + tolerance], which fits (see `Meter`).
    let tat = stored.map_or(now, |t| t.clamp(now, now.saturating_add(tolerance)));
    // A quantity beyond the tolerance can never pass: no need to multiply it.
    let increment = quantity
        .checked_mul(meter.interval)
        .filter(|&i| (0..=tolerance).contains(&i));
    // The new TAT less the tolerance: the earliest time it allows, within
    // `now` and the tolerance either side, so it fits where the new TAT
    // itself may not.
    let due = increment.map(|i| tat - tolerance + i);
    let allowed = due.filter(|&due| due <= now);
    let (ttl, write) = match allowed {
        Some(due) => {
            // Fits for the meter's own time; saturates (as a stored TAT is
            // clamped) for any later one.
            let new_tat = due.saturating_add(tolerance);
            let write = match quantity {
                0 => Write::Nothing,
                _ => Write::State {
                    state: Tat {
                        tat_ns: i128::from(new_tat),
                    }
                    .stored(),
                    expires_at: ceil_in(new_tat, NS_PER_MS),
                },
            };
            (new_tat - now, write)
        }
        // A stored time beyond the tolerance is written back clamped, so it
        // drains instead of blocking for ever (see gcra::beyond).
        None if quantity > 0
            && super::gcra::beyond(
                stored.map(i128::from),
                i128::from(now),
                i128::from(tolerance),
            ) =>
        {
            let write = Write::State {
                state: Tat {
                    tat_ns: i128::from(tat),
                }
                .stored(),
                expires_at: ceil_in(tat, NS_PER_MS),
            };
            (tat - now, write)
        }
        None => (tat - now, Write::Nothing),
    };
    // As for RL.ADMIT (`algo::outcome_outlives_its_reset`): a real refusal's
    // state must live until the reset it reports. A foreign key (redis-cell's,
    // a hand-written one) without a TTL, or expiring before its TAT, is given
    // that expiry (or deleted, if already spent): the one write a refusal can
    // make. State this module wrote always expires at its TAT already, so its
    // refusals still write nothing.
    let write = match write {
        Write::Nothing if allowed.is_none() && quantity > 0 => super::refusal_repair(
            ceil_in(ttl, NS_PER_MS),
            ceil_in(now + ttl, NS_PER_MS),
            found.map(|f| f.1),
        ),
        write => write,
    };
    // `ttl` is within [0, tolerance], so this is never negative.
    let remaining = (tolerance - ttl).max(0) / meter.interval.max(1);
    let wait = match (allowed, due) {
        (Some(_), _) | (None, None) => None,
        (None, Some(due)) => Some(due - now),
    };
    let reply = Reply {
        limited: allowed.is_none(),
        limit: meter.limit,
        remaining,
        retry_after_s: wait.map_or(-1, |ns| ceil_in(ns, NS_PER_S)),
        reset_after_s: ceil_in(ttl, NS_PER_S),
        retry_after_ms: wait.map_or(-1, |ns| ceil_in(ns, NS_PER_MS)),
    };
    (reply, write)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algo::NS_PER_MS;

    /// redis-cell's own table: limit 5 (max_burst 4), 1 per second.
    #[test]
    fn matches_the_cl_throttle_reference_sequence() {
        let params = Params {
            max_burst: 4,
            count: 1,
            period_s: 1,
        };
        let start = 1_764_000_000_000i64;
        let meter = params.meter(start).unwrap();
        // (ms after start, quantity, limited, remaining, reset_after_s, retry_after_s)
        let cases: &[(i64, i64, bool, i64, i64, i64)] = &[
            (0, 6, true, 5, 0, -1),
            (0, 1, false, 4, 1, -1),
            (0, 1, false, 3, 2, -1),
            (0, 1, false, 2, 3, -1),
            (0, 1, false, 1, 4, -1),
            (0, 1, false, 0, 5, -1),
            (0, 1, true, 0, 5, 1),
            (3_000, 1, false, 2, 3, -1),
            (3_100, 1, false, 1, 4, -1),
            (4_000, 1, false, 1, 4, -1),
            (8_000, 1, false, 4, 1, -1),
            (9_500, 1, false, 4, 1, -1),
            (9_500, 0, false, 4, 1, -1),
            (9_500, 2, false, 2, 3, -1),
            (9_500, 5, true, 2, 3, 3),
        ];
        let mut state = None;
        for (i, &(at, quantity, limited, remaining, reset, retry)) in cases.iter().enumerate() {
            let now = start + at;
            // The server expires the key at its TTL.
            if let Some((_, Some(at))) = state {
                if at <= now {
                    state = None;
                }
            }
            let (reply, write) = throttle(state, &meter, quantity, Now::from_ms(now));
            assert_eq!(
                (
                    reply.limited,
                    reply.limit,
                    reply.remaining,
                    reply.reset_after_s,
                    reply.retry_after_s
                ),
                (limited, 5, remaining, reset, retry),
                "case {i}"
            );
            match write {
                Write::State {
                    state: s,
                    expires_at,
                } => state = Some((s, Some(expires_at))),
                // State written here expires at its TAT: a refusal has
                // nothing to repair.
                other => assert_eq!(other, Write::Nothing, "case {i}"),
            }
        }
    }

    #[test]
    fn very_high_rates_still_limit() {
        // 6000 per second with burst 6000: redis-cell never limits this.
        let params = Params {
            max_burst: 6000,
            count: 6000,
            period_s: 1,
        };
        let meter = params.meter(0).unwrap();
        let mut state = None;
        let mut limited = 0;
        for _ in 0..7_000 {
            let (reply, write) = throttle(state, &meter, 1, Now::from_ms(1_000));
            limited += i32::from(reply.limited);
            if let Write::State {
                state: s,
                expires_at,
            } = write
            {
                assert!(expires_at > 1_000, "the state outlives the call");
                state = Some((s, Some(expires_at)));
            }
        }
        assert_eq!(limited, 7_000 - 6_001);
    }

    #[test]
    fn a_refusal_gives_foreign_state_the_expiry_of_its_reset() {
        // 1 per 10 s, no burst; a TAT 8.0000005 s ahead: limited.
        let meter = Params {
            max_burst: 0,
            count: 1,
            period_s: 10,
        }
        .meter(1_000)
        .unwrap();
        let tat = 9_000 * NS_PER_MS + 500;
        let gcra = Tat { tat_ns: tat }.stored();
        let needed = Write::Expiry { expires_at: 9_001 };
        for (expires_at, quantity, want) in [
            (None, 1, needed),
            (Some(2_000), 1, needed),
            (Some(9_000), 1, needed),
            (Some(9_001), 1, Write::Nothing),
            (Some(60_000), 1, Write::Nothing),
            (None, 0, Write::Nothing),
            // Never allowed: still a refusal the state must outlive.
            (None, 5, needed),
        ] {
            let (reply, write) = throttle(
                Some((gcra, expires_at)),
                &meter,
                quantity,
                Now::from_ms(1_000),
            );
            assert_eq!(reply.limited, quantity > 0, "a peek passes");
            assert_eq!(write, want, "{expires_at:?} quantity {quantity}");
        }
        // A TAT already past is no debt: nothing to keep. Without a TTL the
        // key is deleted, as its expiry would have; with one, left to it.
        let past = Tat { tat_ns: 0 }.stored();
        let (reply, write) = throttle(Some((past, None)), &meter, 5, Now::from_ms(1_000));
        assert_eq!((reply.limited, write), (true, Write::Delete));
        let (_, write) = throttle(Some((past, Some(1_005))), &meter, 5, Now::from_ms(1_000));
        assert_eq!(write, Write::Nothing);
    }

    #[test]
    fn bad_and_huge_parameters_are_errors() {
        let p = |max_burst, count, period_s| {
            Params {
                max_burst,
                count,
                period_s,
            }
            .meter(1_764_000_000_000)
        };
        assert!(p(-1, 1, 1).is_err());
        assert!(p(1, 0, 1).is_err());
        assert!(p(1, 1, 0).is_err());
        assert!(p(i64::MAX, 1, 1).is_err());
        assert!(p(i64::MAX - 1, 1, i64::MAX).is_err());
        assert!(p(1, i64::MAX, 1).is_err(), "an interval under 1 ns");
        assert!(
            p(1, 1, 315_360_000_000).is_err(),
            "a state beyond the ns clock"
        );
        let m = p(10, 1, 1).unwrap();
        let (reply, write) = throttle(None, &m, i64::MAX, Now::from_ms(0));
        assert_eq!(
            (reply.limited, reply.retry_after_s, write),
            (true, -1, Write::Nothing)
        );
    }

    /// 4,000 per second, no burst: a request every 250 µs, told from the
    /// µs of the call. A foreign TAT between two ms is repaired with an
    /// expiry at the end of its ms, never earlier.
    #[test]
    fn times_are_kept_to_the_microsecond() {
        let meter = Params {
            max_burst: 0,
            count: 4_000,
            period_s: 1,
        }
        .meter(1_764_000_000_000)
        .unwrap();
        let start = Now::from_us(1_764_000_000_000_600);
        let (first, write) = throttle(None, &meter, 1, start);
        assert!(!first.limited);
        let tat = i128::from(start.us) * 1_000 + 250_000;
        assert_eq!(
            write,
            Write::State {
                state: Tat { tat_ns: tat }.stored(),
                expires_at: 1_764_000_000_001,
            }
        );
        let found = Some((Tat { tat_ns: tat }.stored(), Some(1_764_000_000_001)));
        let at = |us: i64| throttle(found, &meter, 1, Now::from_us(start.us + us));
        assert!(at(249).0.limited, "1 µs early");
        assert_eq!(at(249).0.retry_after_ms, 1);
        assert!(!at(250).0.limited);
        // Without a TTL, the refusal gives the key the end of the TAT's ms.
        let (_, repair) = throttle(
            Some((Tat { tat_ns: tat }.stored(), None)),
            &meter,
            1,
            Now::from_us(start.us + 100),
        );
        assert_eq!(
            repair,
            Write::Expiry {
                expires_at: 1_764_000_000_001
            }
        );
    }
}
