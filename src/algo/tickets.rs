//! Lease tickets, the pure rules of fair waiting (docs/reference.md
//! "tickets"): a ticket key holds, per ticket, its place (`q:<id>`, scored
//! 1, 2, ...) and its deadline (`d:<id>`, scored minus the deadline). Only
//! the earliest live tickets may take a lease key's free slots.

/// The most lapsed tickets one call drops: its work and its ZREM stay
/// bounded however many waiters died.
pub const DROP_MAX: usize = 128;
/// Places and deadlines are integers up to 2^53, exact in a double.
const LAST: i64 = 1 << 53;

/// The member of ticket `id`'s place.
pub fn place_member(id: &[u8]) -> Vec<u8> {
    [b"q:", id].concat()
}

/// The member of ticket `id`'s deadline.
pub fn deadline_member(id: &[u8]) -> Vec<u8> {
    [b"d:", id].concat()
}

/// A place score as a place, 1 to 2^53; None for anything else.
pub fn place_of(score: f64) -> Option<i64> {
    (score.fract() == 0.0 && (1.0..=LAST as f64).contains(&score)).then_some(score as i64)
}

/// A deadline score (minus the deadline) as the deadline, 0 to 2^53.
pub fn deadline_of(score: f64) -> Option<i64> {
    (score.fract() == 0.0 && (-(LAST as f64)..=0.0).contains(&score)).then_some(-score as i64)
}

/// A ticket's deadline `wait_ms` after now; None past 2^53.
pub fn deadline_after(now_ms: i64, wait_ms: i64) -> Option<i64> {
    now_ms.checked_add(wait_ms).filter(|&at| at <= LAST)
}

/// The place of a new ticket after the last one (None: the queue is
/// empty); None past 2^53.
pub fn next_place(last: Option<i64>) -> Option<i64> {
    Some(last.map_or(1, |p| p + 1)).filter(|&p| p <= LAST)
}

/// Whether a call with `ahead` live tickets before it may take a free slot
/// of `limit` with `live` leases live: the first `free` tickets only.
pub fn entitled(limit: i64, live: i64, ahead: i64) -> bool {
    live < limit && ahead < limit - live
}

/// A refusal's wait: the soonest the answer may change by itself, when the
/// earliest live lease ends or one of the tickets owed the free slots
/// lapses; at least 1 ms.
pub fn retry_after(now_ms: i64, earliest_lease: Option<i64>, owed: Option<i64>) -> i64 {
    let soonest = match (earliest_lease, owed) {
        (Some(a), Some(b)) => a.min(b),
        (Some(a), None) | (None, Some(a)) => a,
        (None, None) => now_ms + 1,
    };
    (soonest - now_ms).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_read_as_places_and_deadlines_only_in_range() {
        assert_eq!(place_of(1.0), Some(1));
        assert_eq!(place_of(0.0), None);
        assert_eq!(place_of(1.5), None);
        assert_eq!(place_of(f64::INFINITY), None);
        assert_eq!(place_of(f64::NAN), None);
        assert_eq!(deadline_of(-1712.0), Some(1712));
        assert_eq!(deadline_of(0.0), Some(0));
        assert_eq!(deadline_of(1.0), None);
        assert_eq!(deadline_of(f64::NEG_INFINITY), None);
        assert_eq!(place_member(b"a"), b"q:a");
        assert_eq!(deadline_member(b"a"), b"d:a");
    }

    #[test]
    fn only_the_first_free_tickets_are_entitled() {
        assert!(entitled(2, 0, 1));
        assert!(!entitled(2, 0, 2));
        assert!(!entitled(2, 2, 0));
        assert!(entitled(2, 1, 0));
        assert!(!entitled(2, 1, 1));
        assert_eq!(next_place(None), Some(1));
        assert_eq!(next_place(Some(LAST)), None);
        assert_eq!(deadline_after(LAST - 1, 2), None);
        assert_eq!(deadline_after(i64::MAX, 1), None);
        assert_eq!(retry_after(100, Some(150), Some(120)), 20);
        assert_eq!(retry_after(100, None, None), 1);
        assert_eq!(retry_after(100, Some(90), None), 1);
    }
}
