//! RL.ADMITALL's grammar: numkeys, its keys, one POLICY group of options
//! per key and a COST anywhere; and its keys for getkeys. The option words
//! are rows of the shared OPTIONS table.

use super::table::{Opt, OptSet, KEY_OPTION, LIMITER};
use super::{int_arg, unknown, Options};
use crate::error::RlError;
use crate::keyword::Keyword;
use crate::num::parse_i64;

/// RL.ADMITALL numkeys key [key ...] [COST n] [RESERVE max_ms] POLICY [option value ...] [POLICY ...]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdmitAll {
    /// Where the keys are: `args[2..2 + keys]`.
    pub keys: usize,
    pub cost: i64,
    /// RESERVE's max_ms: book every limiter at one common start.
    pub reserve: Option<i64>,
    /// One per key, in order.
    pub policies: Vec<Options>,
}

impl AdmitAll {
    pub fn parse(args: &[&[u8]]) -> Result<AdmitAll, RlError> {
        let numkeys = args
            .get(1)
            .ok_or(RlError::WrongArity("rl.admitall"))
            .and_then(|n| int_arg(n, "numkeys", 1))?;
        let first_option = usize::try_from(numkeys)
            .ok()
            .and_then(|n| n.checked_add(2))
            .filter(|&end| end <= args.len())
            .ok_or(RlError::BadValue(
                "numkeys",
                "at most the number of keys given",
            ))?;
        let keys = &args[2..first_option];
        if keys.iter().enumerate().any(|(i, k)| keys[..i].contains(k)) {
            return Err(RlError::DuplicateKeys);
        }
        let mut cost = Options::default();
        let mut policies: Vec<Options> = Vec::new();
        let mut at = first_option;
        while at < args.len() {
            let word = args[at];
            if POLICY_KEYWORD.matches(word) {
                policies.push(Options::default());
                at += 1;
                continue;
            }
            // COST anywhere, once; policy options in the latest POLICY.
            let Some(opt) = Opt::parse(word, ADMITALL_SET) else {
                return Err(match unknown(word) {
                    RlError::UnknownOption(shown) if policies.is_empty() => {
                        RlError::NoPolicyAfterKeys(keys.len(), shown)
                    }
                    err => err,
                });
            };
            let group = match opt {
                Opt::Cost | Opt::Reserve => &mut cost,
                _ => policies.last_mut().ok_or(RlError::PolicyFirst)?,
            };
            at += group.set(opt, args, at + 1)?;
        }
        if policies.len() != keys.len() {
            return Err(RlError::PolicyCount(keys.len(), policies.len()));
        }
        Ok(AdmitAll {
            keys: keys.len(),
            cost: cost.cost.unwrap_or(1),
            reserve: cost.reserve,
            policies,
        })
    }
}

const POLICY_KEYWORD: Keyword = Keyword::new("POLICY");

/// The words after the keys: the limiters' options, and RESERVE (top
/// level, as COST is: anywhere, once).
const ADMITALL_SET: OptSet = OptSet::of(&super::table::then::<{ LIMITER.len() + 1 }>(
    LIMITER,
    &[Opt::Reserve],
));

/// getkeys for RL.ADMITALL: the counters (read-write) and every META hash
/// (read-only).
pub fn admit_all_keys(args: &[&[u8]], mut key: impl FnMut(usize, bool)) {
    let numkeys = args.get(1).and_then(|n| parse_i64(n)).unwrap_or(0).max(0) as usize;
    let end = numkeys.saturating_add(2).min(args.len());
    for pos in 2..end {
        key(pos, false);
    }
    let mut at = end;
    while at < args.len() {
        if KEY_OPTION.keyword.matches(args[at]) && at + 1 < args.len() {
            key(at + 1, true);
            at += 2;
        } else {
            at += 1;
        }
    }
}
