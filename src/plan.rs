//! The effect plan: pure. From an algorithm's `Write` and the state as it
//! was read, what the store must do to the key and how replicas and the AOF
//! are told (INCRBY, `SET ... KEEPTTL`, `SET ... PXAT`, PEXPIREAT or DEL);
//! from a decision, the event to fire and the INFO counter to bump.

use std::ffi::CStr;

use crate::algo::{state, Algo, Write};

pub use crate::algo::Found;

/// What happens to the key, and what replicas are told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change<'a> {
    Nothing,
    /// The value becomes `bytes`; `expires_at` is set when it moved.
    Value {
        bytes: &'a [u8],
        /// The key was empty when read (the state read was none), so the
        /// store creates it without asking the key's type again.
        new_key: bool,
        expires_at: Option<i64>,
        replicate: Replicate,
    },
    /// Only the expiry: `PEXPIREAT key at`.
    Expiry(i64),
    /// `DEL key`.
    Delete,
}

/// How a new value reaches replicas, always with absolute time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replicate {
    /// `INCRBY key delta`: a counter moved under an unchanged expiry (a
    /// decoded counter's bytes are canonical, so INCRBY gives these bytes).
    IncrBy(i64),
    /// `SET key value KEEPTTL`: a new value under an unchanged expiry.
    SetKeepTtl,
    /// `SET key value PXAT at`.
    SetPxat(i64),
}

/// Plans `write` on a key read as `before`; `buf` holds the encoded value.
pub fn change(write: Write, before: Found, buf: &mut [u8; state::MAX_LEN]) -> Change<'_> {
    match write {
        Write::Nothing => Change::Nothing,
        Write::Expiry { expires_at } => Change::Expiry(expires_at),
        Write::Delete => Change::Delete,
        Write::State { state, expires_at } => {
            let new_key = before.is_none();
            let (before, expiry_before) = before.unzip();
            let same_expiry = expiry_before == Some(Some(expires_at));
            // Only a bare integer moves by INCRBY.
            let delta = state
                .integer()
                .and_then(|count| count.checked_sub(before?.integer()?));
            let replicate = match (same_expiry, delta) {
                (true, Some(delta)) => Replicate::IncrBy(delta),
                (true, None) => Replicate::SetKeepTtl,
                (false, _) => Replicate::SetPxat(expires_at),
            };
            Change::Value {
                bytes: state.encode(buf),
                new_key,
                expires_at: (!same_expiry).then_some(expires_at),
                replicate,
            }
        }
    }
}

/// The module's keyspace events (class `d`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// A refusal.
    Hit,
    Refund,
    Reset,
}

impl Event {
    pub fn name(self) -> &'static CStr {
        match self {
            Event::Hit => c"rl.hit",
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
}

/// The receipt of a decision: its counters, and `rl.hit` for a refusal
/// when hit events are on. A peek (`cost` 0) refuses nobody: no event.
pub fn receipt(
    source: Source,
    admitted: bool,
    retry_after_ms: i64,
    cost: i64,
    hit_events: bool,
) -> (Tally, Option<Event>) {
    match admitted {
        true => (Tally::Admitted(source), None),
        false => (
            Tally::Refused(source, retry_after_ms),
            (hit_events && cost > 0).then_some(Event::Hit),
        ),
    }
}

/// What a lease call did, for its receipt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseOutcome {
    /// A new lease, or a live one renewed.
    Acquired,
    Refused,
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
/// when hit events are on, as for the limiters' refusals.
pub fn lease_receipt(
    outcome: LeaseOutcome,
    reclaimed: usize,
    hit_events: bool,
) -> (LeaseTally, Option<Event>) {
    let tally = LeaseTally {
        outcome,
        reclaimed: reclaimed as u64,
    };
    let hit = hit_events && outcome == LeaseOutcome::Refused;
    (tally, hit.then_some(Event::Hit))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algo::fixed::Count;
    use crate::algo::gcra::Tat;
    use crate::algo::state::Layout;

    fn plan(write: Write, before: Found) -> String {
        let mut buf = [0u8; state::MAX_LEN];
        format!("{:?}", change(write, before, &mut buf))
            .replace(" ", "")
            .to_string()
    }

    fn counter(count: i64, expires_at: i64) -> Write {
        Write::State {
            state: Count(count).stored(),
            expires_at,
        }
    }

    #[test]
    fn each_write_is_replicated_with_the_cheapest_absolute_form() {
        let fixed = |c, at| Some((Count(c).stored(), at));
        let gcra = Write::State {
            state: Tat { tat_ns: 7 }.stored(),
            expires_at: 900,
        };
        let cases: &[(Write, Found, &str)] = &[
            (Write::Nothing, fixed(1, Some(5)), "Nothing"),
            (Write::Delete, None, "Delete"),
            (Write::Expiry { expires_at: 9 }, None, "Expiry(9)"),
            // A counter moved under its own expiry: INCRBY, expiry untouched.
            (
                counter(3, 500),
                fixed(2, Some(500)),
                "Value{bytes:[51],new_key:false,expires_at:None,replicate:IncrBy(1)}",
            ),
            (
                counter(1, 500),
                fixed(4, Some(500)),
                "Value{bytes:[49],new_key:false,expires_at:None,replicate:IncrBy(-3)}",
            ),
            // A new key, or a moved expiry: SET ... PXAT.
            (
                counter(1, 500),
                None,
                "Value{bytes:[49],new_key:true,expires_at:Some(500),replicate:SetPxat(500)}",
            ),
            (
                counter(3, 600),
                fixed(2, Some(500)),
                "Value{bytes:[51],new_key:false,expires_at:Some(600),replicate:SetPxat(600)}",
            ),
            (
                counter(3, 600),
                fixed(2, None),
                "Value{bytes:[51],new_key:false,expires_at:Some(600),replicate:SetPxat(600)}",
            ),
            // Bucket state under an unchanged expiry: SET ... KEEPTTL.
            (
                gcra,
                Some((Tat { tat_ns: 3 }.stored(), Some(900))),
                "Value{bytes:[103,99,114,97,58,55],new_key:false,expires_at:None,replicate:SetKeepTtl}",
            ),
        ];
        for (write, before, want) in cases {
            assert_eq!(plan(*write, *before), *want, "{write:?} on {before:?}");
        }
    }

    #[test]
    fn only_a_lease_refusal_fires_a_hit() {
        let (tally, event) = lease_receipt(LeaseOutcome::Refused, 2, true);
        assert_eq!((tally.reclaimed, event), (2, Some(Event::Hit)));
        assert_eq!(lease_receipt(LeaseOutcome::Refused, 0, false).1, None);
        for outcome in [
            LeaseOutcome::Acquired,
            LeaseOutcome::Released,
            LeaseOutcome::Nothing,
        ] {
            assert_eq!(lease_receipt(outcome, 1, true).1, None, "{outcome:?}");
        }
    }

    #[test]
    fn only_a_real_refusal_fires_a_hit() {
        let s = Source::Algo(Algo::Token);
        assert_eq!(receipt(s, true, 0, 1, true), (Tally::Admitted(s), None));
        assert_eq!(
            receipt(s, false, 40, 2, true),
            (Tally::Refused(s, 40), Some(Event::Hit))
        );
        assert_eq!(
            receipt(s, false, 40, 0, true),
            (Tally::Refused(s, 40), None)
        );
        assert_eq!(
            receipt(s, false, -1, 1, false),
            (Tally::Refused(s, -1), None)
        );
    }
}
