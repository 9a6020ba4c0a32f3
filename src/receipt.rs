//! Receipts: pure. What a call reports besides its reply and its writes:
//! the keyspace event it fires (`rl.hit` for a refusal, `rl.shadow` for a
//! shadow mode's would-be refusal, `rl.refund`, `rl.reset`) and the INFO
//! counters it bumps.

use std::ffi::CStr;

use crate::algo::Algo;

/// The module's keyspace events (class `d`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// A refusal.
    Hit,
    /// A refusal in shadow mode: admitted all the same.
    Shadow,
    Refund,
    Reset,
}

impl Event {
    pub fn name(self) -> &'static CStr {
        match self {
            Event::Hit => c"rl.hit",
            Event::Shadow => c"rl.shadow",
            Event::Refund => c"rl.refund",
            Event::Reset => c"rl.reset",
        }
    }
}

/// Which INFO counters a call bumps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Algo(Algo),
    Throttle,
    AdmitAll,
    /// RL.ADMIT or RL.REFUND on a limiter with no limit.
    Unlimited,
}

/// The INFO counters a decision bumps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tally {
    Admitted(Source),
    /// Refused, with the back-off told (-1: never).
    Refused(Source, i64),
    /// Would have been refused, but admitted in shadow mode: counted
    /// apart from both.
    ShadowRefused(Source),
}

/// The receipt of a decision: its counters, and `rl.hit` for a refusal
/// when hit events are on (`rl.shadow` for one in shadow mode, which the
/// caller answers as admitted). A peek (`cost` 0) refuses nobody: no event.
pub fn of_decision(
    source: Source,
    (admitted, shadow): (bool, bool),
    retry_after_ms: i64,
    cost: i64,
    hit_events: bool,
) -> (Tally, Option<Event>) {
    let event = (hit_events && cost > 0).then_some(Event::Hit);
    match admitted {
        true => (Tally::Admitted(source), None),
        false if shadow => shadow_refused(source, event),
        false => (Tally::Refused(source, retry_after_ms), event),
    }
}

/// A shadow refusal's receipt: its own counter, `rl.shadow` for `rl.hit`.
#[cold]
fn shadow_refused(source: Source, hit: Option<Event>) -> (Tally, Option<Event>) {
    (Tally::ShadowRefused(source), hit.map(|_| Event::Shadow))
}

/// What a lease call did, for its receipt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseOutcome {
    /// A new lease, or a live one renewed.
    Acquired,
    Refused,
    /// Would have been refused, but answered as acquired in shadow mode
    /// (no lease taken): counted apart.
    ShadowRefused,
    Released,
    Extended,
    /// A release or extend of a lease that was not live.
    Nothing,
}

/// The INFO counters a lease call bumps: its outcome, and the expired
/// leases it reclaimed on the way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTally {
    pub outcome: LeaseOutcome,
    pub reclaimed: u64,
}

/// The receipt of a lease call: its counters, and `rl.hit` for a refusal
/// when hit events are on (`rl.shadow` for a shadow refusal), as for the
/// limiters' refusals.
pub fn of_lease(
    outcome: LeaseOutcome,
    reclaimed: usize,
    hit_events: bool,
) -> (LeaseTally, Option<Event>) {
    let tally = LeaseTally {
        outcome,
        reclaimed: reclaimed as u64,
    };
    let event = match outcome {
        LeaseOutcome::Refused => Some(Event::Hit),
        LeaseOutcome::ShadowRefused => Some(Event::Shadow),
        _ => None,
    };
    (tally, event.filter(|_| hit_events))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_lease_refusal_fires_a_hit() {
        let (tally, event) = of_lease(LeaseOutcome::Refused, 2, true);
        assert_eq!((tally.reclaimed, event), (2, Some(Event::Hit)));
        assert_eq!(of_lease(LeaseOutcome::Refused, 0, false).1, None);
        let (tally, event) = of_lease(LeaseOutcome::ShadowRefused, 1, true);
        assert_eq!((tally.reclaimed, event), (1, Some(Event::Shadow)));
        assert_eq!(of_lease(LeaseOutcome::ShadowRefused, 0, false).1, None);
        for outcome in [
            LeaseOutcome::Acquired,
            LeaseOutcome::Released,
            LeaseOutcome::Nothing,
        ] {
            assert_eq!(of_lease(outcome, 1, true).1, None, "{outcome:?}");
        }
    }

    #[test]
    fn only_a_real_refusal_fires_a_hit() {
        let s = Source::Algo(Algo::Token);
        let (admitted, refused) = ((true, false), (false, false));
        assert_eq!(
            of_decision(s, admitted, 0, 1, true),
            (Tally::Admitted(s), None)
        );
        assert_eq!(
            of_decision(s, refused, 40, 2, true),
            (Tally::Refused(s, 40), Some(Event::Hit))
        );
        assert_eq!(
            of_decision(s, refused, 40, 0, true),
            (Tally::Refused(s, 40), None)
        );
        assert_eq!(
            of_decision(s, refused, -1, 1, false),
            (Tally::Refused(s, -1), None)
        );
    }

    #[test]
    fn a_shadow_refusal_is_counted_apart_and_fires_rl_shadow() {
        let s = Source::Algo(Algo::Fixed);
        assert_eq!(
            of_decision(s, (false, true), 40, 1, true),
            (Tally::ShadowRefused(s), Some(Event::Shadow))
        );
        assert_eq!(
            of_decision(s, (false, true), 40, 0, true),
            (Tally::ShadowRefused(s), None)
        );
        assert_eq!(
            of_decision(s, (false, true), 40, 1, false),
            (Tally::ShadowRefused(s), None)
        );
        assert_eq!(
            of_decision(s, (true, true), 0, 1, true),
            (Tally::Admitted(s), None)
        );
    }
}
