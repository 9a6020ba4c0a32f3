//! Policy resolution: the options as given, completed from the META hash
//! (inline options win), into a validated policy, or `None`: unlimited.

use std::ffi::CStr;

use crate::algo::calendar::{self, Period, PERIOD_NAMES};
use crate::algo::penalty::Penalty;
use crate::algo::{Algo, Policy, NS_PER_MS};
use crate::args::{Opt, Options, LEASE_META_FIELDS, META_FIELDS, OPTIONS};
use crate::config;
use crate::error::{RlError, BURST_RANGE, MAX_RESERVE_FORM, NON_NEGATIVE, POSITIVE, ZERO_OR_ONE};
use crate::ffi::{Ctx, Str};
use crate::num::parse_i64;
use crate::store::{Key, KeyKind};
use crate::time::tz::{self, OFFSET_FORM};
use crate::time::zone::Zone;

/// A policy's parts as given inline or found in META.
pub struct Resolved {
    pub algo: Algo,
    pub limit: i64,
    /// The window, and what gave it (for the overflow error).
    pub window: Option<(i64, &'static str)>,
    /// The burst, and whether it came from the META hash.
    burst: Option<(i64, bool)>,
    /// Shadow mode: SHADOW, or META field `shadow` 1.
    pub shadow: bool,
    /// The penalty (ms, 0: none), and whether META gave it (for the
    /// overflow error).
    penalty: (i64, bool),
    /// ESCALATE's cap (ms, 0: none), and whether META gave it.
    escalate: (i64, bool),
    /// ALIGN, or META field `align` 1: windows start at multiples of the
    /// window since the epoch.
    align: bool,
    /// CALENDAR's period and TZ's zone (UTC without TZ).
    calendar: Option<(Period, Zone)>,
    /// The booking horizon from META field `max_reserve_ms` (ms; `None`:
    /// the config's).
    horizon_ms: Option<i64>,
}

impl Resolved {
    #[inline(always)]
    pub fn policy(&self, now: i64) -> Result<Policy, RlError> {
        let window = match self.calendar {
            // The period's end, from now: this call's window.
            Some((period, zone)) => Some((period_window(period, zone, now), Opt::Calendar.name())),
            None => self.window,
        };
        let (window, source) = window.ok_or(RlError::NoWindow)?;
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
        let mut policy = Policy::new(self.algo, self.limit, window, burst, now)?;
        let horizon_ms = self.horizon_ms.unwrap_or_else(config::max_reserve_ms);
        policy.horizon_ns = i128::from(horizon_ms) * NS_PER_MS;
        Ok(match (self.align, self.algo, self.calendar) {
            // An aligned fixed window is, for this call, the window from
            // now to its next multiple (the sliding window's always are).
            (true, Algo::Fixed, _) => Policy {
                window_ms: window - now.rem_euclid(window),
                ..policy
            },
            // A sliding window over calendar periods: the current one's
            // length, and the periods themselves for its neighbours.
            (_, Algo::Sliding, Some(calendar)) => calendar_sliding(policy, calendar, now),
            _ => policy,
        })
    }

    /// The penalty (ms 0: none) and its ladder's cap (0: none), checked
    /// against the clock `now`: `now + ms` and `now + 2 * cap` (the ladder's
    /// memory past its longest penalty) fit.
    #[inline(always)]
    pub fn penalty(&self, now: i64) -> Result<Penalty, RlError> {
        let (ms, from_meta) = self.penalty;
        if now.checked_add(ms).is_none() {
            return Err(RlError::PenaltyOverflow(match from_meta {
                true => "META field 'penalty'",
                false => Opt::Penalty.name(),
            }));
        }
        let (cap, from_meta) = self.escalate;
        if cap > 0
            && now
                .checked_add(cap)
                .and_then(|v| v.checked_add(cap))
                .is_none()
        {
            return Err(RlError::PenaltyOverflow(match from_meta {
                true => "META field 'escalate'",
                false => Opt::Escalate.name(),
            }));
        }
        Ok(Penalty { ms, cap })
    }
}

/// The window a calendar period leaves from `now`: to its end.
#[cold]
fn period_window(period: Period, zone: Zone, now: i64) -> i64 {
    calendar::period_end(period, zone, now).saturating_sub(now)
}

/// The sliding window's policy over the calendar period holding `now`.
#[cold]
fn calendar_sliding(policy: Policy, (period, zone): (Period, Zone), now: i64) -> Policy {
    let start = calendar::period_start(period, zone, now);
    let end = calendar::period_end(period, zone, now);
    Policy {
        window_ms: end - start,
        calendar: Some((period, zone)),
        ..policy
    }
}

/// Inline options win over the META hash; a limit of 0 (or none) means no
/// limit at all. Fields the policy does not use are never read or judged.
/// `argv` holds the META key at `opts.meta`.
// Always inlined: its large result is then built in place, not copied out
// (make budget, issue 27: fixd 5,956 -> 5,917 instructions a call).
#[inline(always)]
pub fn resolve(ctx: Ctx, argv: &[Str], opts: &Options) -> Result<Option<Resolved>, RlError> {
    // No META key: nothing to read, and no empty hash to build per call.
    let meta = match opts.meta {
        Some(at) => Some(Meta::read(ctx, argv[at], &META_FIELDS)?),
        None => None,
    };
    let meta = meta.as_ref();
    let algo = match (opts.algo, meta) {
        (Some(algo), _) => algo,
        (None, Some(meta)) => meta.algorithm()?.unwrap_or_else(config::default_algo),
        (None, None) => config::default_algo(),
    };
    if opts.burst.is_some() && !algo.uses_burst() {
        return Err(RlError::NotForAlgo(Opt::Burst.name(), algo.name()));
    }
    let limit = match opts.limit {
        Some(limit) => limit,
        None => Meta::int_of(meta, Opt::Limit, 0, NON_NEGATIVE)?.unwrap_or(0),
    };
    if limit == 0 {
        return Ok(None);
    }
    // The plain call (no META hash, none of issue 27's options): only
    // what was given inline.
    if meta.is_none() && !opts.extended {
        return Ok(Some(Resolved {
            algo,
            limit,
            window: opts.window.map(|w| (w, Opt::Window.name())),
            burst: opts.burst.map(|b| (b, false)),
            shadow: false,
            penalty: (0, false),
            escalate: (0, false),
            align: false,
            calendar: None,
            horizon_ms: None,
        }));
    }
    resolve_rest(opts, meta, algo, limit).map(Some)
}

/// `resolve` past the limit, for a call with a META hash or issue 27's
/// options: CALENDAR (before the window it replaces), the window, the
/// burst, then SHADOW, PENALTY and ALIGN.
#[inline(never)]
fn resolve_rest(
    opts: &Options,
    meta: Option<&Meta>,
    algo: Algo,
    limit: i64,
) -> Result<Resolved, RlError> {
    let calendar = calendar_of(opts, meta, algo)?;
    let window = match (opts.window, calendar) {
        (Some(w), _) => Some((w, Opt::Window.name())),
        // A calendar period is the window: field `duration` is not read.
        (None, Some(_)) => None,
        (None, None) => {
            Meta::int_of(meta, Opt::Window, 1, POSITIVE)?.map(|d| (d, "META field 'duration'"))
        }
    };
    let burst = match (opts.burst, algo.uses_burst()) {
        (Some(b), _) => Some((b, false)),
        (None, true) => Meta::int_of(meta, Opt::Burst, 0, BURST_RANGE)?.map(|b| (b, true)),
        (None, false) => None,
    };
    let mut resolved = Resolved {
        algo,
        limit,
        window,
        burst,
        shadow: false,
        penalty: (0, false),
        escalate: (0, false),
        align: false,
        calendar,
        horizon_ms: None,
    };
    policies(&mut resolved, opts, meta)?;
    let (_, most) = config::MAX_RESERVE_RANGE;
    resolved.horizon_ms = match Meta::int_of(meta, Opt::Horizon, 0, MAX_RESERVE_FORM)? {
        Some(ms) if ms > most => {
            return Err(RlError::BadMetaField(
                Opt::Horizon.meta_field(),
                MAX_RESERVE_FORM,
            ))
        }
        ms => ms,
    };
    Ok(resolved)
}

/// SHADOW, PENALTY, ESCALATE and ALIGN, inline or from META, into `r`.
fn policies(r: &mut Resolved, opts: &Options, meta: Option<&Meta>) -> Result<(), RlError> {
    r.shadow = opts.shadow || Meta::flag_of(meta, Opt::Shadow)?;
    r.penalty = match opts.penalty {
        Some(p) => (p, false),
        None => Meta::int_of(meta, Opt::Penalty, 1, POSITIVE)?.map_or((0, false), |p| (p, true)),
    };
    let escalate = match opts.escalate {
        Some(cap) => Some((cap, false)),
        None => Meta::int_of(meta, Opt::Escalate, 1, POSITIVE)?.map(|cap| (cap, true)),
    };
    if let Some((cap, from_meta)) = escalate {
        let what = match from_meta {
            true => "META field 'escalate'",
            false => Opt::Escalate.name(),
        };
        if r.penalty.0 == 0 {
            return Err(RlError::EscalateWithoutPenalty(what));
        }
        if cap < r.penalty.0 {
            return Err(RlError::EscalateBelowPenalty(what));
        }
        r.escalate = (cap, from_meta);
    }
    let align = if opts.align {
        Some(Opt::Align.name())
    } else if Meta::flag_of(meta, Opt::Align)? {
        Some("META field 'align'")
    } else {
        None
    };
    if let Some(what) = align.filter(|_| !r.algo.is_window()) {
        return Err(RlError::OnlyWindows(what, r.algo.name()));
    }
    if let (Some(what), Some(_)) = (align, r.calendar) {
        let why = "calendar periods are aligned";
        return Err(RlError::Conflict(what, Opt::Calendar.name(), why));
    }
    r.align = align.is_some();
    Ok(())
}

/// CALENDAR and TZ, inline or from the META hash (inline wins), checked
/// against the algorithm and WINDOW. TZ's field is read only with a period.
fn calendar_of(
    opts: &Options,
    meta: Option<&Meta>,
    algo: Algo,
) -> Result<Option<(Period, Zone)>, RlError> {
    let period = match opts.calendar {
        Some(p) => Some((p, Opt::Calendar.name())),
        None => Meta::word_of(meta, Opt::Calendar)?.map(|p| (p, "META field 'calendar'")),
    };
    let Some((period, what)) = period else {
        return match opts.tz {
            Some(_) => Err(RlError::TzWithoutCalendar(Opt::Tz.name())),
            None => Ok(None),
        };
    };
    if !algo.is_window() {
        return Err(RlError::OnlyWindows(what, algo.name()));
    }
    if opts.window.is_some() {
        let why = "a calendar period is the window";
        return Err(RlError::Conflict(
            Opt::Window.name(),
            Opt::Calendar.name(),
            why,
        ));
    }
    let zone = match opts.tz {
        Some(zone) => zone,
        None => Meta::zone_of(meta)?.unwrap_or(Zone::UTC),
    };
    Ok(Some((period, zone)))
}

/// A lease policy: at most `limit` leases, each for `ttl_ms`; in shadow
/// mode (`shadow`) a would-be refusal is answered as acquired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeasePolicy {
    pub limit: i64,
    pub ttl_ms: i64,
    pub shadow: bool,
}

/// RL.ACQUIRE's limit, TTL and shadow mode (SHADOW, or META field `shadow`
/// 1), inline or from the META hash (inline wins);
/// `None` when there is no limit (then the TTL is neither needed nor read).
pub fn lease_policy(
    ctx: Ctx,
    argv: &[Str],
    opts: &Options,
) -> Result<Option<LeasePolicy>, RlError> {
    let meta = match opts.meta {
        Some(at) => Meta::read(ctx, argv[at], &LEASE_META_FIELDS)?,
        None => Meta::default(),
    };
    let limit = match opts.limit {
        Some(limit) => limit,
        None => meta.int(Opt::Limit, 0, NON_NEGATIVE)?.unwrap_or(0),
    };
    if limit == 0 {
        return Ok(None);
    }
    let ttl_ms = match opts.ttl {
        Some(ttl) => ttl,
        None => meta.int(Opt::Ttl, 1, POSITIVE)?.ok_or(RlError::NoTtl)?,
    };
    // The plain call (no META hash, no SHADOW) skips the field.
    let shadow = match (opts.shadow, opts.meta) {
        (true, _) => true,
        (false, None) => false,
        (false, Some(_)) => Meta::flag_of(Some(&meta), Opt::Shadow)?,
    };
    Ok(Some(LeasePolicy {
        limit,
        ttl_ms,
        shadow,
    }))
}

/// RL.LIMIT: the META hash's limit, 0 when it has none.
pub fn meta_limit(ctx: Ctx, name: Str) -> Result<i64, RlError> {
    let meta = Meta::read(ctx, name, &META_FIELDS)?;
    Ok(meta.int(Opt::Limit, 0, NON_NEGATIVE)?.unwrap_or(0))
}

/// The META hash fields, as found (by `Opt`); each is judged only when used.
#[derive(Default)]
struct Meta {
    ints: [Option<Option<i64>>; OPTIONS.len()],
    algorithm: Option<Option<Algo>>,
    calendar: Option<Option<Period>>,
    tz: Option<Option<Zone>>,
}

impl Meta {
    /// Reads `fields` (at most twelve, see `Key::hash_fields`).
    fn read<const N: usize>(
        ctx: Ctx,
        name: Str,
        fields: &[(Opt, &CStr); N],
    ) -> Result<Meta, RlError> {
        let key = Key::read(ctx, name);
        let mut meta = Meta::default();
        match key.kind() {
            KeyKind::Empty => return Ok(meta),
            KeyKind::Hash => {}
            _ => return Err(RlError::MetaWrongType),
        }
        let names = fields.map(|(_, field)| field);
        key.hash_fields(ctx, &names, |i, bytes| match fields[i].0 {
            Opt::Algo => meta.algorithm = Some(Algo::parse(bytes)),
            Opt::Calendar => meta.calendar = Some(Period::parse(bytes)),
            Opt::Tz => meta.tz = Some(tz::parse_zone(bytes)),
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

    /// `int` of a META hash that may not have been given.
    fn int_of(
        meta: Option<&Meta>,
        opt: Opt,
        min: i64,
        must: &'static str,
    ) -> Result<Option<i64>, RlError> {
        meta.map_or(Ok(None), |meta| meta.int(opt, min, must))
    }

    /// A flag's field (see `Value::Flag`): absent or `0` is off, `1` on.
    fn flag_of(meta: Option<&Meta>, opt: Opt) -> Result<bool, RlError> {
        match Meta::int_of(meta, opt, 0, ZERO_OR_ONE)? {
            None | Some(0) => Ok(false),
            Some(1) => Ok(true),
            Some(_) => Err(RlError::BadMetaField(opt.meta_field(), ZERO_OR_ONE)),
        }
    }

    /// Field `calendar`: absent, or a period.
    fn word_of(meta: Option<&Meta>, opt: Opt) -> Result<Option<Period>, RlError> {
        match meta.and_then(|m| m.calendar) {
            None => Ok(None),
            Some(Some(p)) => Ok(Some(p)),
            Some(None) => Err(RlError::BadMetaField(opt.meta_field(), PERIOD_NAMES)),
        }
    }

    /// Field `tz`: absent, or a zone (a fixed offset or an IANA name).
    fn zone_of(meta: Option<&Meta>) -> Result<Option<Zone>, RlError> {
        match meta.and_then(|m| m.tz) {
            None => Ok(None),
            Some(Some(zone)) => Ok(Some(zone)),
            Some(None) => Err(RlError::BadMetaField(Opt::Tz.meta_field(), OFFSET_FORM)),
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
