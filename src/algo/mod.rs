//! Pure rate-limiting algorithms: state, policy, cost and the current time
//! in; a decision and the new state out. No FFI here, so unit tests,
//! property tests and fuzzing reach every line directly.
//!
//! Times in state are absolute server time (ms, or ns where a rate needs
//! sub-millisecond precision), so replicas, AOF and RDB agree.

pub mod fixed;
pub mod gcra;
pub mod leaky;
pub mod policy;
pub mod sliding;
pub mod state;
pub mod throttle;
pub mod token;

pub use policy::{Algo, Policy};
pub use state::State;

/// What a call answers: the five integers of the RL.ADMIT reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    pub admitted: bool,
    pub limit: i64,
    /// Budget left after this call, never below 0.
    pub remaining: i64,
    /// Refused: ms until a retry can succeed, or -1 when it never can (the
    /// cost exceeds the capacity). Admitted: 0, except for `leaky`, where it
    /// is the delay before the request may proceed.
    pub retry_after_ms: i64,
    /// ms until the limiter is back to its full budget; 0 with no state.
    pub reset_after_ms: i64,
}

impl Decision {
    /// The answer for a limiter with no limit configured.
    pub const UNLIMITED: Decision = Decision {
        admitted: true,
        limit: 0,
        remaining: 0,
        retry_after_ms: 0,
        reset_after_ms: 0,
    };
}

/// What the store must do after a decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Write {
    Nothing,
    /// Store the state with this absolute expiry (ms).
    State {
        state: State,
        expires_at: i64,
    },
    /// Keep the value; only give the key its missing expiry (fixed window).
    Expiry {
        expires_at: i64,
    },
    /// The state is back to empty: remove the key.
    Delete,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    pub decision: Decision,
    pub write: Write,
}

pub const NS_PER_MS: i128 = 1_000_000;

/// A non-negative span in ns, rounded up to whole ms, so that a caller who
/// waits that long is never early.
pub fn ceil_ms(ns: i128) -> i64 {
    let ms = (ns.max(0) + NS_PER_MS - 1) / NS_PER_MS;
    i64::try_from(ms).unwrap_or(i64::MAX)
}

/// Decides one call for any algorithm. `found` is the decoded state and the
/// key's absolute expiry (`None`: no TTL). `policy` is validated for `now`.
pub fn admit(
    found: Option<(State, Option<i64>)>,
    policy: &Policy,
    cost: i64,
    now_ms: i64,
) -> Outcome {
    match policy.algo {
        Algo::Fixed => fixed::decide(found, policy, cost, now_ms),
        Algo::Sliding => sliding::admit(found.map(|f| f.0), policy, cost, now_ms),
        Algo::Token => token::admit(found.map(|f| f.0), policy, cost, now_ms),
        Algo::Gcra => gcra::admit(found.map(|f| f.0), policy, cost, now_ms),
        Algo::Leaky => leaky::admit(found.map(|f| f.0), policy, cost, now_ms),
    }
}

/// Gives back `amount` of consumption; never below empty. The decision is
/// the state after the refund, as a peek sees it.
pub fn refund(
    found: Option<(State, Option<i64>)>,
    policy: &Policy,
    amount: i64,
    now_ms: i64,
) -> Outcome {
    match policy.algo {
        Algo::Fixed => fixed::refund(found, policy, amount, now_ms),
        Algo::Sliding => sliding::refund(found.map(|f| f.0), policy, amount, now_ms),
        Algo::Token => token::refund(found.map(|f| f.0), policy, amount, now_ms),
        Algo::Gcra => gcra::refund(found.map(|f| f.0), policy, amount, now_ms),
        Algo::Leaky => leaky::refund(found.map(|f| f.0), policy, amount, now_ms),
    }
}
