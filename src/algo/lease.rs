//! Concurrency leases, pure: a ceiling on work in flight rather than on how
//! often work starts. A key holds leases (id, deadline in ms of server
//! time); a lease is live while `now < deadline`. Every call first reclaims
//! the leases whose deadline has passed, so a holder that crashed frees its
//! slot at its deadline without anyone releasing it.
//!
//! The command layer reads the key's leases, calls one function here with
//! the time it read once, and carries out the plan it gets back: the
//! members to remove, the member to add or move, and the key's new expiry
//! (its latest deadline). Nothing here reads a clock or touches a key.

/// A lease as stored: member and score of the key's sorted set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease<'a> {
    pub id: &'a [u8],
    pub deadline_ms: i64,
}

/// Which id an acquire asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WantedId<'a> {
    /// The caller's own id (a job id, say): a live lease under it is renewed.
    Given(&'a [u8]),
    /// A fresh id, made of the time and this nonce; the caller retries with
    /// another nonce in the unlikely case the id is taken.
    Generated(u64),
}

/// The latest deadline a lease may have: 2^53 ms, the largest integer a
/// sorted-set score (a double) holds exactly.
pub const MAX_DEADLINE_MS: i64 = 1 << 53;

/// A stored score as a deadline: an integer in 0..=2^53, else `None` (the
/// key is not a lease set this module wrote, and is left alone).
pub fn deadline_of(score: f64) -> Option<i64> {
    let valid = score.fract() == 0.0 && (0.0..=MAX_DEADLINE_MS as f64).contains(&score);
    valid.then_some(score as i64)
}

/// `now_ms + ttl_ms` when it is a valid deadline.
pub fn deadline_after(now_ms: i64, ttl_ms: i64) -> Option<i64> {
    now_ms
        .checked_add(ttl_ms)
        .filter(|at| (0..=MAX_DEADLINE_MS).contains(at))
}

/// A nonce from `next` whose generated id no held lease has: an id is
/// never handed out twice for one key.
pub fn fresh_nonce(held: &[Lease], now_ms: i64, mut next: impl FnMut() -> u64) -> u64 {
    loop {
        let nonce = next();
        let id = generated_id(now_ms, nonce);
        if !held.iter().any(|lease| lease.id == id.as_slice()) {
            return nonce;
        }
    }
}

/// The id a generated lease gets: the acquiring ms and a nonce, in hex, so
/// that ids of one key never repeat (a stale holder's release of a reused
/// id would free someone else's slot).
pub fn generated_id(now_ms: i64, nonce: u64) -> Vec<u8> {
    format!("{now_ms:x}-{nonce:016x}").into_bytes()
}

/// What a call does to the key, in the order the store applies it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Plan<'a> {
    /// Expired leases to remove (ZREM), and any lease the call ends.
    pub remove: Vec<&'a [u8]>,
    /// A lease to add or move (ZADD deadline id).
    pub put: Option<(Vec<u8>, i64)>,
    /// The key's expiry after the call: its latest live deadline, or None
    /// when no lease is left (the key is gone).
    pub expires_at: Option<i64>,
    /// Whether anything changes: a refusal with nothing to reclaim writes
    /// and propagates nothing.
    pub writes: bool,
}

/// RL.ACQUIRE's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acquired {
    pub acquired: bool,
    pub limit: i64,
    /// Live leases after the call.
    pub in_flight: i64,
    /// 0 when acquired; else ms until the earliest live lease ends.
    pub retry_after_ms: i64,
    /// The lease's id when acquired.
    pub lease_id: Option<Vec<u8>>,
}

impl Acquired {
    /// No limit: admitted, and nothing is read or written.
    pub fn unlimited(id: Vec<u8>) -> Acquired {
        Acquired {
            acquired: true,
            limit: 0,
            in_flight: 0,
            retry_after_ms: 0,
            lease_id: Some(id),
        }
    }
}

/// The live leases at `now_ms` and the plan that reclaims the rest.
fn reclaim<'a>(held: &[Lease<'a>], now_ms: i64) -> (Vec<Lease<'a>>, Plan<'a>) {
    let (live, expired): (Vec<Lease>, Vec<Lease>) =
        held.iter().partition(|lease| lease.deadline_ms > now_ms);
    let plan = Plan {
        writes: !expired.is_empty(),
        remove: expired.iter().map(|lease| lease.id).collect(),
        put: None,
        expires_at: latest(&live),
    };
    (live, plan)
}

fn latest(leases: &[Lease]) -> Option<i64> {
    leases.iter().map(|lease| lease.deadline_ms).max()
}

/// Takes a slot if one of `limit` is free, or renews the caller's own live
/// lease. `ttl_ms` > 0 and `now_ms + ttl_ms` must not overflow (the parser
/// checks both).
pub fn acquire<'a>(
    held: &[Lease<'a>],
    now_ms: i64,
    limit: i64,
    ttl_ms: i64,
    wanted: WantedId<'a>,
) -> (Acquired, Plan<'a>) {
    let (live, mut plan) = reclaim(held, now_ms);
    let deadline = now_ms + ttl_ms;
    let renews = match wanted {
        WantedId::Given(id) => live.iter().any(|lease| lease.id == id),
        WantedId::Generated(_) => false,
    };
    let in_flight = live.len() as i64;
    if !renews && in_flight >= limit {
        let earliest = live.iter().map(|lease| lease.deadline_ms).min();
        let answer = Acquired {
            acquired: false,
            limit,
            in_flight,
            retry_after_ms: earliest.map_or(0, |at| at - now_ms),
            lease_id: None,
        };
        return (answer, plan);
    }
    let id = match wanted {
        WantedId::Given(id) => id.to_vec(),
        WantedId::Generated(nonce) => generated_id(now_ms, nonce),
    };
    plan.put = Some((id.clone(), deadline));
    plan.expires_at = Some(plan.expires_at.map_or(deadline, |at| at.max(deadline)));
    plan.writes = true;
    let answer = Acquired {
        acquired: true,
        limit,
        in_flight: in_flight + i64::from(!renews),
        retry_after_ms: 0,
        lease_id: Some(id),
    };
    (answer, plan)
}

/// Ends the lease `id` if it is live: true then. An expired, unknown or
/// already released id frees nothing (it may be someone else's slot now).
pub fn release<'a>(held: &[Lease<'a>], now_ms: i64, id: &'a [u8]) -> (bool, Plan<'a>) {
    let (live, mut plan) = reclaim(held, now_ms);
    let Some(mine) = live.iter().position(|lease| lease.id == id) else {
        return (false, plan);
    };
    plan.remove.push(live[mine].id);
    let mut rest = live;
    rest.remove(mine);
    plan.expires_at = latest(&rest);
    plan.writes = true;
    (true, plan)
}

/// Moves the live lease `id`'s deadline to `now_ms + ttl_ms`: true then.
/// false when it is no longer live, and its holder must stop.
pub fn extend<'a>(held: &[Lease<'a>], now_ms: i64, id: &'a [u8], ttl_ms: i64) -> (bool, Plan<'a>) {
    let (live, mut plan) = reclaim(held, now_ms);
    let Some(mine) = live.iter().position(|lease| lease.id == id) else {
        return (false, plan);
    };
    let deadline = now_ms + ttl_ms;
    plan.put = Some((id.to_vec(), deadline));
    let others = live
        .iter()
        .enumerate()
        .filter(|&(i, _)| i != mine)
        .map(|(_, lease)| lease.deadline_ms);
    plan.expires_at = Some(others.fold(deadline, i64::max));
    plan.writes = true;
    (true, plan)
}

/// Live leases at `now_ms` (RL.INFLIGHT: a read, it reclaims nothing).
pub fn in_flight(held: &[Lease], now_ms: i64) -> i64 {
    held.iter()
        .filter(|lease| lease.deadline_ms > now_ms)
        .count() as i64
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    /// A sorted set as the store would hold it, with the plan applied.
    #[derive(Default, Clone)]
    struct Set(BTreeMap<Vec<u8>, i64>);

    impl Set {
        fn leases(&self) -> Vec<Lease<'_>> {
            self.0
                .iter()
                .map(|(id, &deadline_ms)| Lease { id, deadline_ms })
                .collect()
        }
        fn apply(&mut self, removed: Vec<Vec<u8>>, put: Option<(Vec<u8>, i64)>) {
            for id in removed {
                self.0.remove(&id);
            }
            if let Some((id, deadline)) = put {
                self.0.insert(id, deadline);
            }
        }
    }

    fn owned(plan: &Plan) -> Vec<Vec<u8>> {
        plan.remove.iter().map(|id| id.to_vec()).collect()
    }

    #[test]
    fn acquires_up_to_the_limit_then_refuses_until_the_earliest_deadline() {
        let mut set = Set::default();
        for (i, now) in [(0u64, 100), (1, 150)] {
            let (answer, plan) = acquire(&set.leases(), now, 2, 1000, WantedId::Generated(i));
            assert!(answer.acquired);
            let (removed, put) = (owned(&plan), plan.put.clone());
            set.apply(removed, put);
        }
        let (answer, plan) = acquire(&set.leases(), 400, 2, 1000, WantedId::Generated(9));
        assert_eq!(
            answer,
            Acquired {
                acquired: false,
                limit: 2,
                in_flight: 2,
                retry_after_ms: 700,
                lease_id: None
            }
        );
        assert!(
            !plan.writes,
            "a refusal with nothing to reclaim writes nothing"
        );
        // At the first deadline exactly, that slot is free again.
        let (answer, plan) = acquire(&set.leases(), 1100, 2, 1000, WantedId::Given(b"job"));
        assert!(answer.acquired);
        assert_eq!(answer.in_flight, 2);
        assert_eq!(plan.remove.len(), 1);
        assert_eq!(plan.expires_at, Some(2100));
    }

    #[test]
    fn renewing_a_live_id_takes_no_second_slot() {
        let held = [Lease {
            id: b"job",
            deadline_ms: 500,
        }];
        let (answer, plan) = acquire(&held, 100, 1, 1000, WantedId::Given(b"job"));
        assert!(answer.acquired);
        assert_eq!(answer.in_flight, 1);
        assert_eq!(plan.put, Some((b"job".to_vec(), 1100)));
    }

    #[test]
    fn release_and_extend_only_touch_a_live_lease_of_their_own() {
        let held = [
            Lease {
                id: b"a",
                deadline_ms: 50,
            },
            Lease {
                id: b"b",
                deadline_ms: 500,
            },
        ];
        let (released, plan) = release(&held, 100, b"a");
        assert!(!released, "a's lease expired at 50");
        assert_eq!(plan.remove, vec![&b"a"[..]], "but it is reclaimed");
        assert_eq!(plan.expires_at, Some(500));
        let (extended, plan) = extend(&held, 100, b"a", 1000);
        assert!(!extended);
        assert_eq!(plan.put, None);
        let (extended, plan) = extend(&held, 100, b"b", 1000);
        assert!(extended);
        assert_eq!(plan.put, Some((b"b".to_vec(), 1100)));
        let (released, plan) = release(&held, 100, b"b");
        assert!(released);
        assert_eq!(plan.expires_at, None, "no lease left: the key goes");
    }

    #[test]
    fn only_integer_scores_up_to_2_pow_53_are_deadlines() {
        assert_eq!(deadline_of(0.0), Some(0));
        assert_eq!(deadline_of(1_700_000_000_123.0), Some(1_700_000_000_123));
        assert_eq!(deadline_of(9_007_199_254_740_992.0), Some(MAX_DEADLINE_MS));
        for bad in [0.5, -1.0, 9_007_199_254_740_994.0, f64::INFINITY, f64::NAN] {
            assert_eq!(deadline_of(bad), None, "{bad}");
        }
        assert_eq!(deadline_after(10, 5), Some(15));
        assert_eq!(deadline_after(10, MAX_DEADLINE_MS), None);
        assert_eq!(deadline_after(10, i64::MAX), None);
    }

    #[test]
    fn a_fresh_nonce_skips_ids_the_key_holds() {
        let taken = generated_id(7, 1);
        let held = [Lease {
            id: &taken,
            deadline_ms: 9,
        }];
        let mut nonces = 0..;
        assert_eq!(fresh_nonce(&held, 7, || nonces.next().unwrap_or(0) + 1), 2);
    }

    #[test]
    fn generated_ids_differ_by_time_and_nonce() {
        assert_eq!(generated_id(255, 1), b"ff-0000000000000001".to_vec());
        assert_ne!(generated_id(255, 1), generated_id(255, 2));
        assert_ne!(generated_id(255, 1), generated_id(256, 1));
    }

    #[derive(Debug, Clone)]
    enum Step {
        Acquire(u8),
        Release(u8),
        Extend(u8, i64),
    }

    fn step() -> impl Strategy<Value = (i64, Step)> {
        let op = prop_oneof![
            (0u8..6).prop_map(Step::Acquire),
            (0u8..6).prop_map(Step::Release),
            ((0u8..6), (1i64..300)).prop_map(|(id, ttl)| Step::Extend(id, ttl)),
        ];
        ((0i64..60), op)
    }

    proptest! {
        /// Driven by random steps with an injected clock: never more than
        /// `limit` live leases; each lease live exactly until its deadline;
        /// release and extend act on their own lease only.
        #[test]
        fn the_ceiling_holds_and_leases_end_exactly_at_their_deadlines(
            limit in 1i64..4,
            ttl in 1i64..200,
            steps in proptest::collection::vec(step(), 1..200),
        ) {
            let mut set = Set::default();
            let mut now = 1_000;
            for (elapsed, step) in steps {
                now += elapsed;
                let before = set.0.clone();
                let live_before = in_flight(&set.leases(), now);
                let (removed, put) = match step {
                    Step::Acquire(n) => {
                        let id = [b'j', n];
                        let held = set.leases();
                        let (answer, plan) = acquire(&held, now, limit, ttl, WantedId::Given(&id));
                        let mine_live = before.get(&id[..]).is_some_and(|&d| d > now);
                        prop_assert_eq!(answer.acquired, mine_live || live_before < limit);
                        prop_assert!(answer.in_flight <= limit);
                        if !answer.acquired {
                            let earliest = before.values().filter(|&&d| d > now).min().unwrap();
                            prop_assert_eq!(answer.retry_after_ms, earliest - now);
                        }
                        (owned(&plan), plan.put.clone())
                    }
                    Step::Release(n) => {
                        let id = [b'j', n];
                        let held = set.leases();
                        let (released, plan) = release(&held, now, &id);
                        prop_assert_eq!(released, before.get(&id[..]).is_some_and(|&d| d > now));
                        (owned(&plan), plan.put.clone())
                    }
                    Step::Extend(n, ext) => {
                        let id = [b'j', n];
                        let held = set.leases();
                        let (extended, plan) = extend(&held, now, &id, ext);
                        prop_assert_eq!(extended, before.get(&id[..]).is_some_and(|&d| d > now));
                        (owned(&plan), plan.put.clone())
                    }
                };
                let touched = put.as_ref().map(|(id, _)| id.clone());
                set.apply(removed, put);
                prop_assert!(set.0.values().all(|&d| d > now), "expired leases are reclaimed");
                prop_assert!(in_flight(&set.leases(), now) <= limit);
                // Every other live lease is untouched.
                for (id, deadline) in before.iter().filter(|(_, &d)| d > now) {
                    let released_mine = matches!(step, Step::Release(n) if id[..] == [b'j', n]);
                    if touched.as_deref() != Some(&id[..]) && !released_mine {
                        prop_assert_eq!(set.0.get(id), Some(deadline));
                    }
                }
            }
        }
    }
}
