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
//!
//! The escalation ladder (ESCALATE cap_ms, with PENALTY ms) records the
//! length of the current or last penalty in the first field:
//!
//! ```text
//! penalty:<until_ms>/<length_ms>:<state_expires_at_ms>:<state>
//! ```
//!
//! (a bare `<until_ms>` never holds '/', and the state comes only after
//! the second ':'). A refusal that starts a penalty less than `cap_ms`
//! after the previous one ended gets twice that one's length, within
//! `[ms, cap_ms]`; otherwise `ms`. A form without a length (written
//! without ESCALATE) counts as a penalty of `ms`. While the ladder is
//! remembered (`cap_ms` after the penalty's end) the form is kept, and the
//! key lives until the later of its state's expiry and `until + cap_ms`;
//! a policy without ESCALATE writes and keeps the form without a length,
//! exactly as before.

use super::{Decision, Found, Now, Outcome, Policy, State, Write};
use crate::error::RlError;
use crate::num::{format_i64, parse_i64, MAX_DIGITS};

/// What a penalised value starts with.
pub const PREFIX: &[u8] = b"penalty:";

/// Room for a wrapped state: the prefix, two times, a length and the state.
pub const MAX_LEN: usize = PREFIX.len() + 3 * (MAX_DIGITS + 1) + super::state::MAX_LEN;

/// A policy's penalty: PENALTY's ms (0: none) and ESCALATE's cap (0: no
/// ladder).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Penalty {
    pub ms: i64,
    pub cap: i64,
}

/// A limiter key as read: its state (with the expiry it has), and the
/// penalty around it, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Read {
    /// The algorithm's state; `None` when there is none (or it expired
    /// inside a penalty's key).
    pub found: Found,
    /// When the key's penalty ends (`None`: a plain state or no key).
    pub until: Option<i64>,
    /// The penalty's length, as the ladder's form records it (`None`:
    /// not recorded).
    pub len: Option<i64>,
}

impl Read {
    pub const fn plain(found: Found) -> Read {
        Read {
            found,
            until: None,
            len: None,
        }
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

/// The penalty's end and length (`None`: not recorded), its state's
/// expiry (`None`: none) and its state's bytes (empty: none), or the error
/// for a corrupt value.
#[allow(clippy::type_complexity)]
pub fn unwrap(bytes: &[u8]) -> Result<(i64, Option<i64>, Option<i64>, &[u8]), RlError> {
    let rest = &bytes[PREFIX.len()..];
    let mut parts = rest.splitn(3, |&b| b == b':');
    let first = parts.next().unwrap_or_default();
    let (until, len) = match first.iter().position(|&b| b == b'/') {
        None => (parse_i64(first), Some(None)),
        Some(at) => (
            parse_i64(&first[..at]),
            parse_i64(&first[at + 1..]).filter(|&v| v >= 1).map(Some),
        ),
    };
    let until = until.filter(|&v| v >= 0);
    let expiry = parts.next().and_then(parse_i64).filter(|&v| v >= 0);
    match (until, len, expiry, parts.next()) {
        (Some(until), Some(len), Some(expiry), Some(state)) => {
            let expiry = (!state.is_empty()).then_some(expiry);
            Ok((until, len, expiry, state))
        }
        _ => Err(RlError::BadPenalty),
    }
}

/// Encodes the penalty form into `buf`: the key's value (with the length
/// `len`, the ladder's form).
pub fn wrap(until: i64, len: Option<i64>, state: Found, buf: &mut [u8; MAX_LEN]) -> &[u8] {
    let mut state_buf = [0u8; super::state::MAX_LEN];
    let (bytes, expiry): (&[u8], i64) = match state {
        Some((s, at)) => (s.encode(&mut state_buf), at.unwrap_or(until)),
        None => (&[], 0),
    };
    let mut at = 0;
    let mut put = |part: &[u8]| {
        buf[at..at + part.len()].copy_from_slice(part);
        at += part.len();
    };
    let mut digits = [0u8; MAX_DIGITS];
    put(PREFIX);
    put(format_i64(until, &mut digits));
    if let Some(len) = len {
        put(b"/");
        put(format_i64(len, &mut digits));
    }
    put(b":");
    put(format_i64(expiry, &mut digits));
    put(b":");
    put(bytes);
    &buf[..at]
}

/// The expiry of a penalty form: the latest of the penalty's end, its
/// state's and the ladder's memory (`hold`, 0: none).
pub fn expires_at(until: i64, hold: i64, state: Found) -> i64 {
    let at = match state {
        Some((_, Some(at))) => at.max(until),
        _ => until,
    };
    at.max(hold)
}

/// What a call does to a key that holds, or is to hold, a penalty.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    /// The algorithm's own write, on a plain key (or none).
    Plain(Write),
    /// The penalty form with this end, length (the ladder's form) and
    /// state, the key kept until `hold` at least (0: no ladder).
    Wrap {
        until: i64,
        len: Option<i64>,
        state: Found,
        hold: i64,
    },
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
        slot: super::Slot::NONE,
        ..d
    }
}

/// The length of a penalty starting at `now_ms` on a key read as `read`:
/// `ms`, or on the ladder twice the last one's, within `[ms, cap]`.
fn length(read: &Read, penalty: Penalty, now_ms: i64) -> i64 {
    match read.until {
        Some(until) if penalty.cap > 0 && now_ms - until < penalty.cap => {
            let last = read.len.unwrap_or(penalty.ms);
            last.saturating_mul(2).min(penalty.cap).max(penalty.ms)
        }
        _ => penalty.ms,
    }
}

/// One call on a limiter that may hold or start a penalty. `decide` is the
/// algorithm's admit (or refund, `refund`), `penalty` the policy's
/// (`ms` 0: none).
pub fn decide(
    decide: super::Decide,
    read: Read,
    policy: &Policy,
    penalty: Penalty,
    cost: i64,
    now: Now,
    refund: bool,
) -> (Decision, Plan) {
    let out: Outcome = decide(read.found, policy, cost, now);
    let left = read.left(now.ms);
    // The ladder's form is kept under ESCALATE (and dropped without it).
    let cap = penalty.cap;
    let len = read.len.filter(|_| cap > 0);
    // A forced charge is usage that happened: it lands in the state even
    // in a penalty, as a refund does, and it starts none.
    let forced = policy.charge == super::Charge::Force;
    if left > 0 {
        // In the penalty: refused, consuming nothing; a refund gives back
        // to the state, but does not lift the penalty.
        let until = read.until.unwrap_or(now.ms);
        let plan = match (refund || forced, out.write) {
            (true, Write::Nothing) | (false, _) => Plan::Plain(Write::Nothing),
            (true, write) => Plan::Wrap {
                until,
                len,
                state: after(write, read.found),
                hold: if cap > 0 {
                    until.saturating_add(cap)
                } else {
                    0
                },
            },
        };
        return (boxed(out.decision, left), plan);
    }
    let d = out.decision;
    if !refund && !forced && !d.admitted && cost > 0 && penalty.ms > 0 {
        // A refusal starts the penalty (on the ladder, twice the last);
        // the state as the refusal leaves it.
        let ms = length(&read, penalty, now.ms);
        let until = now.ms.saturating_add(ms);
        let state = after(out.write, read.found);
        let (len, hold) = match cap > 0 {
            true => (Some(ms), until.saturating_add(cap)),
            false => (None, 0),
        };
        let plan = Plan::Wrap {
            until,
            len,
            state,
            hold,
        };
        return (boxed(d, ms), plan);
    }
    match (read.until, out.write) {
        // An ended penalty the ladder still remembers: its form is kept.
        (Some(until), write) if cap > 0 && now.ms - until < cap && write != Write::Nothing => {
            let plan = Plan::Wrap {
                until,
                len,
                state: after(write, read.found),
                hold: until + cap,
            };
            (d, plan)
        }
        (Some(_), write) => (d, Plan::Plain(unwrapped(write, read.found))),
        (None, write) => (d, Plan::Plain(write)),
    }
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
    let (until, len, state_expiry, state) = unwrap(bytes)?;
    let found = match state_expiry {
        Some(at) if at > now_ms => Some((State::decode(algo, state)?, Some(at))),
        _ => None,
    };
    Ok(Read {
        found,
        until: Some(until),
        len,
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
        let bytes = wrap(9_000, None, state, &mut buf).to_vec();
        assert_eq!(bytes, b"penalty:9000:5000:3");
        let read = read(Algo::Fixed, &bytes, Some(9_000), 1_000).unwrap();
        assert_eq!(read.found, state);
        assert_eq!(read.until, Some(9_000));
        // Its state expired: none, the penalty still on.
        let later = super::read(Algo::Fixed, &bytes, Some(9_000), 5_000).unwrap();
        assert_eq!((later.found, later.left(5_000)), (None, 4_000));
        let empty = wrap(9_000, None, None, &mut buf).to_vec();
        assert_eq!(empty, b"penalty:9000:0:");
        assert_eq!(
            super::read(Algo::Fixed, &empty, None, 1).unwrap(),
            Read {
                found: None,
                until: Some(9_000),
                len: None,
            }
        );
        for bad in [
            &b"penalty:"[..],
            b"penalty:1",
            b"penalty:x:0:",
            b"penalty:1:-1:3",
            b"penalty:1/:0:",
            b"penalty:1/0:0:",
            b"penalty:1/2/3:0:",
            b"penalty:/2:0:",
        ] {
            assert_eq!(
                super::read(Algo::Fixed, bad, None, 1),
                Err(RlError::BadPenalty)
            );
        }
    }

    const PLAIN: Penalty = Penalty { ms: 5_000, cap: 0 };

    #[test]
    fn the_ladders_form_reads_back_what_was_written() {
        let mut buf = [0u8; MAX_LEN];
        let state = Some((Count(3).stored(), Some(5_000)));
        let bytes = wrap(9_000, Some(400), state, &mut buf).to_vec();
        assert_eq!(bytes, b"penalty:9000/400:5000:3");
        let read = read(Algo::Fixed, &bytes, Some(9_000), 1_000).unwrap();
        assert_eq!(
            (read.found, read.until, read.len),
            (state, Some(9_000), Some(400))
        );
        assert_eq!(expires_at(9_000, 9_700, state), 9_700);
        assert_eq!(expires_at(9_000, 0, state), 9_000);
    }

    #[test]
    fn the_ladder_doubles_up_to_its_cap_and_forgets_after_it() {
        let policy = Policy::new(Algo::Fixed, 1, 50, None, 0).unwrap();
        let ladder = Penalty { ms: 200, cap: 700 };
        let full = |until: Option<i64>, len: Option<i64>, at: i64| Read {
            found: Some((Count(1).stored(), Some(at + 50))),
            until,
            len,
        };
        let start = |read: Read, at: i64| {
            let (d, plan) = decide(
                algo::admit,
                read,
                &policy,
                ladder,
                1,
                Now::from_ms(at),
                false,
            );
            assert!(!d.admitted);
            match plan {
                Plan::Wrap {
                    until, len, hold, ..
                } => {
                    assert_eq!(hold, until + 700);
                    assert_eq!(d.retry_after_ms, until - at);
                    len
                }
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(start(full(None, None, 1_000), 1_000), Some(200));
        assert_eq!(start(full(Some(1_200), Some(200), 1_300), 1_300), Some(400));
        assert_eq!(start(full(Some(1_700), Some(400), 1_800), 1_800), Some(700));
        assert_eq!(start(full(Some(2_500), Some(700), 2_600), 2_600), Some(700));
        // A form without a length counts as `ms`.
        assert_eq!(start(full(Some(1_200), None, 1_300), 1_300), Some(400));
        // cap_ms after the end: forgotten.
        assert_eq!(start(full(Some(2_500), Some(700), 3_200), 3_200), Some(200));
        // An admission within the memory keeps the form; after it, the
        // state is plain again.
        let ended = Read {
            found: None,
            until: Some(1_000),
            len: Some(400),
        };
        let (d, plan) = decide(
            algo::admit,
            ended,
            &policy,
            ladder,
            1,
            Now::from_ms(1_100),
            false,
        );
        assert!(d.admitted);
        assert_eq!(
            plan,
            Plan::Wrap {
                until: 1_000,
                len: Some(400),
                state: Some((Count(1).stored(), Some(1_150))),
                hold: 1_700
            }
        );
        let (_, plan) = decide(
            algo::admit,
            ended,
            &policy,
            ladder,
            1,
            Now::from_ms(1_700),
            false,
        );
        assert!(matches!(plan, Plan::Plain(Write::State { .. })));
        // Without ESCALATE the ladder's form is written plainly.
        let plain = Penalty { ms: 200, cap: 0 };
        let (_, plan) = decide(
            algo::admit,
            ended,
            &policy,
            plain,
            1,
            Now::from_ms(1_100),
            false,
        );
        assert!(matches!(plan, Plan::Plain(Write::State { .. })));
    }

    #[test]
    fn a_refusal_starts_and_it_outlasts_the_window() {
        let policy = Policy::new(Algo::Fixed, 1, 1_000, None, 0).unwrap();
        let now = Now::from_ms(100);
        let full = Read::plain(Some((Count(1).stored(), Some(1_000))));
        let (d, plan) = decide(algo::admit, full, &policy, PLAIN, 1, now, false);
        assert_eq!((d.admitted, d.retry_after_ms), (false, 5_000));
        assert_eq!(
            plan,
            Plan::Wrap {
                until: 5_100,
                len: None,
                state: Some((Count(1).stored(), Some(1_000))),
                hold: 0,
            }
        );
        // After the window turned, still refused, not extended.
        let boxed = Read {
            found: None,
            until: Some(5_100),
            len: None,
        };
        let (d, plan) = decide(
            algo::admit,
            boxed,
            &policy,
            PLAIN,
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
            PLAIN,
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
