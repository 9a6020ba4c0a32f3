//! Pure rate-limiting algorithms: state, policy, cost and the current time
//! in; a decision and the new state out. No FFI here, so unit tests,
//! property tests and fuzzing reach every line directly.

pub mod fixed;

/// What a call answers: the five integers of the RL.ADMIT reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    pub admitted: bool,
    pub limit: i64,
    /// Budget left after this call, never below 0.
    pub remaining: i64,
    /// 0 when admitted; otherwise ms until a retry can succeed, or -1 when
    /// it never can (the cost exceeds the limit).
    pub retry_after_ms: i64,
    /// ms until the current window (or the state) resets; 0 with no state.
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
