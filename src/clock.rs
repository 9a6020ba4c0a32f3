//! The server's clock, read once per call: in µs, and so in ms. It is
//! frozen for the whole of a command, a MULTI/EXEC or a script, and its ms
//! are the clock key expiry uses, so replicas and the AOF agree.

use crate::algo::Now;
use crate::ffi::api;

/// The server's time for this call. Leases need only its ms; the limiters'
/// buckets read its µs.
pub fn now() -> Now {
    // SAFETY: takes no arguments; valid whenever a command runs.
    Now::from_us(unsafe { api!(RedisModule_CachedMicroseconds)() })
}
