//! Policy resolution: the options as given, completed from the META hash
//! (inline options win), into a validated policy, or `None`: unlimited.

use crate::algo::{Algo, Policy};
use crate::args::{Opt, Options, META_FIELDS};
use crate::config;
use crate::error::{RlError, BURST_RANGE, NON_NEGATIVE, POSITIVE};
use crate::ffi::{Ctx, Str};
use crate::num::parse_i64;
use crate::store::{Key, KeyKind};

/// A policy's parts as given inline or found in META.
pub struct Resolved {
    pub algo: Algo,
    pub limit: i64,
    /// The window, and what gave it (for the overflow error).
    pub window: Option<(i64, &'static str)>,
    /// The burst, and whether it came from the META hash.
    burst: Option<(i64, bool)>,
}

impl Resolved {
    pub fn policy(&self, now: i64) -> Result<Policy, RlError> {
        let (window, source) = self.window.ok_or(RlError::NoWindow)?;
        if now.checked_add(window).is_none() {
            return Err(RlError::WindowOverflow(source));
        }
        // Named as given: the BURST option or the META field.
        if let Some((_, from_meta)) = self.burst.filter(|&(b, _)| b < self.algo.min_burst()) {
            return Err(match from_meta {
                true => RlError::BadMetaField(Opt::Burst.meta_field(), BURST_RANGE),
                false => RlError::BadValue(Opt::Burst.name(), BURST_RANGE),
            });
        }
        let burst = self.burst.map(|(b, _)| b);
        Policy::new(self.algo, self.limit, window, burst, now)
    }
}

/// Inline options win over the META hash; a limit of 0 (or none) means no
/// limit at all. Fields the policy does not use are never read or judged.
/// `argv` holds the META key at `opts.meta`.
pub fn resolve(ctx: Ctx, argv: &[Str], opts: &Options) -> Result<Option<Resolved>, RlError> {
    let meta = match opts.meta {
        Some(at) => Meta::read(ctx, argv[at])?,
        None => Meta::default(),
    };
    let algo = match opts.algo {
        Some(algo) => algo,
        None => meta.algorithm()?.unwrap_or_else(config::default_algo),
    };
    if opts.burst.is_some() && !algo.uses_burst() {
        return Err(RlError::NotForAlgo(Opt::Burst.name(), algo.name()));
    }
    let limit = match opts.limit {
        Some(limit) => limit,
        None => meta.int(Opt::Limit, 0, NON_NEGATIVE)?.unwrap_or(0),
    };
    if limit == 0 {
        return Ok(None);
    }
    let window = match opts.window {
        Some(w) => Some((w, Opt::Window.name())),
        None => meta
            .int(Opt::Window, 1, POSITIVE)?
            .map(|d| (d, "META field 'duration'")),
    };
    let burst = match (opts.burst, algo.uses_burst()) {
        (Some(b), _) => Some((b, false)),
        (None, true) => meta.int(Opt::Burst, 0, BURST_RANGE)?.map(|b| (b, true)),
        (None, false) => None,
    };
    Ok(Some(Resolved {
        algo,
        limit,
        window,
        burst,
    }))
}

/// RL.LIMIT: the META hash's limit, 0 when it has none.
pub fn meta_limit(ctx: Ctx, name: Str) -> Result<i64, RlError> {
    let meta = Meta::read(ctx, name)?;
    Ok(meta.int(Opt::Limit, 0, NON_NEGATIVE)?.unwrap_or(0))
}

/// The META hash fields, as found (by `Opt`); each is judged only when used.
#[derive(Default)]
struct Meta {
    ints: [Option<Option<i64>>; 6],
    algorithm: Option<Option<Algo>>,
}

impl Meta {
    fn read(ctx: Ctx, name: Str) -> Result<Meta, RlError> {
        let key = Key::read(ctx, name);
        let mut meta = Meta::default();
        match key.kind() {
            KeyKind::Empty => return Ok(meta),
            KeyKind::Hash => {}
            _ => return Err(RlError::MetaWrongType),
        }
        let fields = META_FIELDS.map(|(_, field)| field);
        key.hash_fields(ctx, fields, |i, bytes| match META_FIELDS[i].0 {
            Opt::Algo => meta.algorithm = Some(Algo::parse(bytes)),
            opt => meta.ints[opt as usize] = Some(parse_i64(bytes)),
        });
        Ok(meta)
    }

    /// The field standing in for `opt`: absent, or an integer of at least
    /// `min` (`must` says the range in the error).
    fn int(&self, opt: Opt, min: i64, must: &'static str) -> Result<Option<i64>, RlError> {
        match self.ints[opt as usize] {
            None => Ok(None),
            Some(Some(v)) if v >= min => Ok(Some(v)),
            _ => Err(RlError::BadMetaField(opt.meta_field(), must)),
        }
    }

    fn algorithm(&self) -> Result<Option<Algo>, RlError> {
        match self.algorithm {
            None => Ok(None),
            Some(Some(algo)) => Ok(Some(algo)),
            Some(None) => Err(RlError::BadMetaField(Opt::Algo.meta_field(), Algo::NAMES)),
        }
    }
}
