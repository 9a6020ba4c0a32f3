//! What RL.ACQUIRE's two paths share (`lease.rs`, and `tickets.rs` for
//! QUEUE): generated ids' nonces and a lease call's receipt.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::Call;
use crate::config;
use crate::ffi::Str;
use crate::receipt::{self, LeaseOutcome};
use crate::{stats, store};

/// The nonce of the next generated id: counted up in this process from a
/// seed taken at load, so one process never repeats one, and the probe in
/// `fresh_nonce` keeps ids unique against what a key holds.
static NEXT_NONCE: AtomicU64 = AtomicU64::new(0);

/// At load: seeds the nonces from the clock's µs, so that a restarted or
/// promoted server does not count from where another began.
pub fn seed_nonces(micros: u64) {
    NEXT_NONCE.store(micros, Relaxed);
}

pub(super) fn next_nonce() -> u64 {
    NEXT_NONCE.fetch_add(1, Relaxed)
}

/// The receipt of a lease call: INFO counters and, for a refusal, `rl.hit`
/// (`rl.shadow` for a shadow refusal).
pub(super) fn record(call: &Call, name: Str, outcome: LeaseOutcome, reclaimed: usize) {
    let (tally, event) = receipt::of_lease(outcome, reclaimed, config::hit_events());
    stats::lease(tally);
    if let Some(event) = event {
        store::notify(call.ctx, event, name);
    }
}
