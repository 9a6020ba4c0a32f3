//! The effect plan: pure. From an algorithm's `Write` and the state as it
//! was read, what the store must do to the key and how replicas and the AOF
//! are told (INCRBY, `SET ... KEEPTTL`, `SET ... PXAT`, PEXPIREAT or DEL).
//! What a call reports besides (its event, its INFO counters) is
//! `receipt`'s.

use crate::algo::penalty::{self, Plan, Read};
use crate::algo::{state, Found, Write};

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

/// Plans a penalty's `plan` on a key read as `read` (`algo::penalty`):
/// the penalty form, or the state written plainly over it, always with its
/// absolute expiry (`SET ... PXAT`: the key's value is not the state's).
pub fn penalised<'a>(plan: Plan, read: &Read, buf: &'a mut [u8; penalty::MAX_LEN]) -> Change<'a> {
    let new_key = !read.wrapped() && read.found.is_none();
    match plan {
        Plan::Plain(Write::State { state, expires_at }) if read.wrapped() => {
            let mut state_buf = [0u8; state::MAX_LEN];
            let bytes = state.encode(&mut state_buf);
            let len = bytes.len();
            buf[..len].copy_from_slice(bytes);
            Change::Value {
                bytes: &buf[..len],
                new_key,
                expires_at: Some(expires_at),
                replicate: Replicate::SetPxat(expires_at),
            }
        }
        Plan::Plain(write) => {
            let mut state_buf = [0u8; state::MAX_LEN];
            match change(write, read.found, &mut state_buf) {
                Change::Value {
                    bytes,
                    new_key,
                    expires_at,
                    replicate,
                } => {
                    let len = bytes.len();
                    buf[..len].copy_from_slice(bytes);
                    Change::Value {
                        bytes: &buf[..len],
                        new_key,
                        expires_at,
                        replicate,
                    }
                }
                Change::Nothing => Change::Nothing,
                Change::Expiry(at) => Change::Expiry(at),
                Change::Delete => Change::Delete,
            }
        }
        Plan::Wrap {
            until,
            len,
            state,
            hold,
        } => {
            let at = penalty::expires_at(until, hold, state);
            Change::Value {
                bytes: penalty::wrap(until, len, state, buf),
                new_key,
                expires_at: Some(at),
                replicate: Replicate::SetPxat(at),
            }
        }
    }
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
    fn a_penalty_is_stored_and_left_with_absolute_expiries() {
        let penalised = |plan: Plan, read: Read| -> String {
            let mut buf = [0u8; penalty::MAX_LEN];
            match penalised(plan, &read, &mut buf) {
                Change::Value {
                    bytes,
                    new_key,
                    expires_at,
                    replicate,
                } => format!(
                    "{} new={new_key} at={expires_at:?} {replicate:?}",
                    String::from_utf8_lossy(bytes)
                ),
                other => format!("{other:?}"),
            }
        };
        let found = Some((Count(1).stored(), Some(900)));
        // A penalty starts on a plain key: its form, until the later end.
        let start = Plan::Wrap {
            until: 5_000,
            len: None,
            state: found,
            hold: 0,
        };
        assert_eq!(
            penalised(start, Read::plain(found)),
            "penalty:5000:900:1 new=false at=Some(5000) SetPxat(5000)"
        );
        assert_eq!(
            penalised(start, Read::plain(None)),
            "penalty:5000:900:1 new=true at=Some(5000) SetPxat(5000)"
        );
        // An ended penalty: the state written plainly, by SET ... PXAT,
        // never INCRBY (the key's value is the form, not the counter).
        let boxed = Read {
            found,
            until: Some(100),
            len: None,
        };
        let next = Plan::Plain(counter(2, 900));
        assert_eq!(
            penalised(next, boxed),
            "2 new=false at=Some(900) SetPxat(900)"
        );
        assert_eq!(
            penalised(next, Read::plain(found)),
            "2 new=false at=None IncrBy(1)"
        );
        assert_eq!(penalised(Plan::Plain(Write::Delete), boxed), "Delete");
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
}
