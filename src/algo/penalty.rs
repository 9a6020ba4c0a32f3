//! The penalty box (PENALTY ms): pure. A refusal starts a penalty of `ms`
//! from that refusal; until it ends every call is refused, with
//! `retry_after_ms` what is left of it (never less than the algorithm's own
//! wait), and refusals during it do not extend it.
//!
//! The penalty lives in the limiter's own key, around the algorithm's
//! state, as
//!
//! ```text
//! penalty:<until_ms>:<state_expires_at_ms>:<state>
//! ```
//!
//! `until_ms` is when the penalty ends (absolute server time, ms);
//! `<state>` is the algorithm's state exactly as it is stored without a
//! penalty (a `fixed` counter's bare integer, `gcra:<ns>`, ...), or empty
//! when there is none; `state_expires_at_ms` is the absolute expiry that
//! state has (0 with no state). The key expires at the later of the two.
//! A value without the `penalty:` prefix is a plain state, read as ever. A
//! penalty that has ended reads as its state alone (or none, once that has
//! expired too), and the next write stores the state plainly again.

use super::{Decision, Found, Now, Outcome, Policy, State, Write};
use crate::error::RlError;
use crate::num::{format_i64, parse_i64, MAX_DIGITS};

/// What a penalised value starts with.
pub const PREFIX: &[u8] = b"penalty:";

/// Room for a wrapped state: the prefix, two times and the state.
pub const MAX_LEN: usize = PREFIX.len() + 2 * (MAX_DIGITS + 1) + super::state::MAX_LEN;

/// A limiter key as read: its state (with the expiry it has), and the
/// penalty around it, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Read {
    /// The algorithm's state; `None` when there is none (or it expired
    /// inside a penalty's key).
    pub found: Found,
    /// When the key's penalty ends (`None`: a plain state or no key).
    pub until: Option<i64>,
}

impl Read {
    pub const fn plain(found: Found) -> Read {
        Read { found, until: None }
    }

    /// Whether the key holds the penalty form (ended or not).
    pub fn wrapped(&self) -> bool {
        self.until.is_some()
    }

    /// The penalty left at `now` (ms), 0 when there is none.
    pub fn left(&self, now_ms: i64) -> i64 {
        self.until
            .map_or(0, |until| until.saturating_sub(now_ms).max(0))
    }
}

/// Whether `bytes` is a penalty's form.
#[inline(always)]
pub fn is_wrapped(bytes: &[u8]) -> bool {
    bytes.first() == Some(&b'p') && bytes.starts_with(PREFIX)
}

/// The penalty's end, its state's expiry (`None`: none) and its state's
/// bytes (empty: none), or the error for a corrupt value.
pub fn unwrap(bytes: &[u8]) -> Result<(i64, Option<i64>, &[u8]), RlError> {
    let rest = &bytes[PREFIX.len()..];
    let mut parts = rest.splitn(3, |&b| b == b':');
    let until = parts.next().and_then(parse_i64).filter(|&v| v >= 0);
    let expiry = parts.next().and_then(parse_i64).filter(|&v| v >= 0);
    match (until, expiry, parts.next()) {
        (Some(until), Some(expiry), Some(state)) => {
            let expiry = (!state.is_empty()).then_some(expiry);
            Ok((until, expiry, state))
        }
        _ => Err(RlError::BadPenalty),
    }
}

/// Encodes the penalty form into `buf`: the key's value.
pub fn wrap(until: i64, state: Found, buf: &mut [u8; MAX_LEN]) -> &[u8] {
    let mut state_buf = [0u8; super::state::MAX_LEN];
    let (bytes, expiry): (&[u8], i64) = match state {
        Some((s, at)) => (s.encode(&mut state_buf), at.unwrap_or(until)),
        None => (&[], 0),
    };
    let mut len = 0;
    let mut put = |part: &[u8]| {
        buf[len..len + part.len()].copy_from_slice(part);
        len += part.len();
    };
    let mut digits = [0u8; MAX_DIGITS];
    put(PREFIX);
    put(format_i64(until, &mut digits));
    put(b":");
    put(format_i64(expiry, &mut digits));
    put(b":");
    put(bytes);
    &buf[..len]
}

/// The expiry of a penalty form: the later of the penalty's end and its
/// state's.
pub fn expires_at(until: i64, state: Found) -> i64 {
    match state {
        Some((_, Some(at))) => at.max(until),
        _ => until,
    }
}

/// What a call does to a key that holds, or is to hold, a penalty.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    /// The algorithm's own write, on a plain key (or none).
    Plain(Write),
    /// The penalty form with this end and state.
    Wrap { until: i64, state: Found },
}

/// The state after `write` on `found`.
fn after(write: Write, found: Found) -> Found {
    match write {
        Write::Nothing => found,
        Write::State { state, expires_at } => Some((state, Some(expires_at))),
        Write::Expiry { expires_at } => found.map(|(s, _)| (s, Some(expires_at))),
        Write::Delete => None,
    }
}

/// The algorithm's write on a key that holds an ended penalty: the state
/// is written plainly again (with its absolute expiry).
fn unwrapped(write: Write, found: Found) -> Write {
    match (write, found) {
        (Write::Nothing, _) => Write::Nothing,
        (Write::Expiry { expires_at }, Some((state, _))) => Write::State { state, expires_at },
        (Write::Expiry { .. }, None) | (Write::Delete, _) => Write::Delete,
        (state @ Write::State { .. }, _) => state,
    }
}

/// A decision refused by a penalty `left` ms from its end.
fn boxed(d: Decision, left: i64) -> Decision {
    let wait = match (d.admitted, d.retry_after_ms) {
        (false, -1) => -1,
        (false, own) => own.max(left),
        (true, _) => left,
    };
    Decision {
        admitted: false,
        remaining: 0,
        retry_after_ms: wait,
        reset_after_ms: d.reset_after_ms.max(left),
        ..d
    }
}

/// One call on a limiter that may hold or start a penalty. `decide` is the
/// algorithm's admit (or refund, `refund`), `penalty_ms` the policy's
/// penalty (0: none).
pub fn decide(
    decide: super::Decide,
    read: Read,
    policy: &Policy,
    penalty_ms: i64,
    cost: i64,
    now: Now,
    refund: bool,
) -> (Decision, Plan) {
    let out: Outcome = decide(read.found, policy, cost, now);
    let left = read.left(now.ms);
    if left > 0 {
        // In the penalty: refused, consuming nothing; a refund gives back
        // to the state, but does not lift the penalty.
        let until = read.until.unwrap_or(now.ms);
        let plan = match (refund, out.write) {
            (true, Write::Nothing) | (false, _) => Plan::Plain(Write::Nothing),
            (true, write) => Plan::Wrap {
                until,
                state: after(write, read.found),
            },
        };
        return (boxed(out.decision, left), plan);
    }
    let d = out.decision;
    if !refund && !d.admitted && cost > 0 && penalty_ms > 0 {
        // A refusal starts the penalty; the state as the refusal leaves it.
        let until = now.ms.saturating_add(penalty_ms);
        let state = after(out.write, read.found);
        return (boxed(d, penalty_ms), Plan::Wrap { until, state });
    }
    let write = match read.wrapped() {
        true => unwrapped(out.write, read.found),
        false => out.write,
    };
    (d, Plan::Plain(write))
}

/// RL.TTL's wait on a key read as `read`: the algorithm's `own`, or what is
/// left of the penalty if longer.
pub fn backoff(read: &Read, own: i64, now_ms: i64) -> i64 {
    own.max(read.left(now_ms))
}

/// Decodes a key's value for `algo` at `now`: a plain state, or the
/// penalty form around one.
#[cold]
pub fn read(
    algo: super::Algo,
    bytes: &[u8],
    expiry: Option<i64>,
    now_ms: i64,
) -> Result<Read, RlError> {
    if !is_wrapped(bytes) {
        return Ok(Read::plain(Some((State::decode(algo, bytes)?, expiry))));
    }
    let (until, state_expiry, state) = unwrap(bytes)?;
    let found = match state_expiry {
        Some(at) if at > now_ms => Some((State::decode(algo, state)?, Some(at))),
        _ => None,
    };
    Ok(Read {
        found,
        until: Some(until),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algo::fixed::Count;
    use crate::algo::state::Layout;
    use crate::algo::{self, Algo};

    #[test]
    fn the_form_reads_back_what_was_written() {
        let mut buf = [0u8; MAX_LEN];
        let state = Some((Count(3).stored(), Some(5_000)));
        let bytes = wrap(9_000, state, &mut buf).to_vec();
        assert_eq!(bytes, b"penalty:9000:5000:3");
        let read = read(Algo::Fixed, &bytes, Some(9_000), 1_000).unwrap();
        assert_eq!(read.found, state);
        assert_eq!(read.until, Some(9_000));
        // Its state expired: none, the penalty still on.
        let later = super::read(Algo::Fixed, &bytes, Some(9_000), 5_000).unwrap();
        assert_eq!((later.found, later.left(5_000)), (None, 4_000));
        let empty = wrap(9_000, None, &mut buf).to_vec();
        assert_eq!(empty, b"penalty:9000:0:");
        assert_eq!(
            super::read(Algo::Fixed, &empty, None, 1).unwrap(),
            Read {
                found: None,
                until: Some(9_000)
            }
        );
        for bad in [
            &b"penalty:"[..],
            b"penalty:1",
            b"penalty:x:0:",
            b"penalty:1:-1:3",
        ] {
            assert_eq!(
                super::read(Algo::Fixed, bad, None, 1),
                Err(RlError::BadPenalty)
            );
        }
    }

    #[test]
    fn a_refusal_starts_it_and_it_outlasts_the_window() {
        let policy = Policy::new(Algo::Fixed, 1, 1_000, None, 0).unwrap();
        let now = Now::from_ms(100);
        let full = Read::plain(Some((Count(1).stored(), Some(1_000))));
        let (d, plan) = decide(algo::admit, full, &policy, 5_000, 1, now, false);
        assert_eq!((d.admitted, d.retry_after_ms), (false, 5_000));
        assert_eq!(
            plan,
            Plan::Wrap {
                until: 5_100,
                state: Some((Count(1).stored(), Some(1_000)))
            }
        );
        // After the window turned, still refused, not extended.
        let boxed = Read {
            found: None,
            until: Some(5_100),
        };
        let (d, plan) = decide(
            algo::admit,
            boxed,
            &policy,
            5_000,
            1,
            Now::from_ms(2_000),
            false,
        );
        assert_eq!((d.admitted, d.retry_after_ms), (false, 3_100));
        assert_eq!(plan, Plan::Plain(Write::Nothing));
        // At its end, admitted, and the state written plainly.
        let (d, plan) = decide(
            algo::admit,
            boxed,
            &policy,
            5_000,
            1,
            Now::from_ms(5_100),
            false,
        );
        assert!(d.admitted);
        assert_eq!(
            plan,
            Plan::Plain(Write::State {
                state: Count(1).stored(),
                expires_at: 6_100
            })
        );
    }
}
