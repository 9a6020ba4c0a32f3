//! Concurrency leases, pure: a ceiling on work in flight rather than on how
//! often work starts. A key holds leases (id, deadline in ms of server
//! time); a lease is live while `now < deadline`. Every write also
//! reclaims expired leases, at most `RECLAIM_MAX` of them, earliest first,
//! so a holder that crashed frees its slot at its deadline without anyone
//! releasing it, and no call's work grows with how many leases expired.
//!
//! The store reads only what a decision needs from the key (a `Held`: the
//! member count, how many leases expired, the earliest of them, the last
//! two leases, the named lease's deadline, and for a refusal the earliest
//! live deadline), so a call costs O(log n + RECLAIM_MAX), not O(n). Live
//! leases are counted exactly (the expired ones by score), so a decision
//! never depends on how many a call reclaims. One function here decides
//! with the time read once, and the store carries out the plan it gets
//! back: the members to remove, the member to add or move, and the key's
//! new expiry (its latest live deadline). Nothing here reads a clock or
//! touches a key.

/// The most expired leases one write reclaims; later writes take the rest.
/// Bounds a call's work, and what it replicates (one ZREM of at most this
/// many ids), whatever piled up on the key.
pub const RECLAIM_MAX: usize = 128;

/// What a call reads of a lease key (a sorted set ordered by deadline, then
/// id), all of it at the time `now` the call read once. Empty for no key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Held {
    /// Members of the set, expired ones included.
    pub members: i64,
    /// How many leases expired (deadline <= now), counted exactly.
    pub expired: i64,
    /// The earliest expired leases' ids, at most `RECLAIM_MAX`: the ones a
    /// write reclaims.
    pub reclaimable: Vec<Vec<u8>>,
    /// The earliest live deadline (the first one > now): read only for an
    /// acquire that `refuses`, whose wait it is.
    pub earliest_live: Option<i64>,
    /// The set's last lease (its latest deadline), id and deadline.
    pub last: Option<(Vec<u8>, i64)>,
    /// The deadline of the lease before the last: the latest one left when
    /// the call removes or moves the last.
    pub before_last: Option<i64>,
    /// The deadline of the lease the call names (its ID), if the key holds it.
    pub named: Option<i64>,
}

impl Held {
    /// Live leases at the time the summary was read.
    pub fn live(&self) -> i64 {
        self.members - self.expired
    }

    /// Whether the named lease is live at `now_ms`.
    fn named_live(&self, now_ms: i64) -> bool {
        self.named.is_some_and(|at| at > now_ms)
    }

    /// The latest live deadline once the lease `moved` (if any) is taken
    /// out: the key's expiry, None when no live lease is left.
    fn latest_live_but(&self, now_ms: i64, moved: Option<&[u8]>) -> Option<i64> {
        let (id, deadline) = self.last.as_ref()?;
        let latest = match moved == Some(id.as_slice()) {
            true => self.before_last?,
            false => *deadline,
        };
        (latest > now_ms).then_some(latest)
    }
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

/// A nonce from `next` whose generated id the key does not hold (`taken`
/// asks it): an id is never handed out twice for one key.
pub fn fresh_nonce(
    now_ms: i64,
    mut taken: impl FnMut(&[u8]) -> bool,
    mut next: impl FnMut() -> u64,
) -> u64 {
    loop {
        let nonce = next();
        if !taken(&generated_id(now_ms, nonce)) {
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
    /// Expired leases to remove (ZREM), and any lease the call ends: at
    /// most `RECLAIM_MAX` + 1 ids.
    pub remove: Vec<&'a [u8]>,
    /// A lease to add or move (ZADD deadline id).
    pub put: Option<(Vec<u8>, i64)>,
    /// The key's expiry after the call: its latest live deadline, or None
    /// when no live lease is left (the key is gone: emptied by `remove`,
    /// or else deleted whole).
    pub expires_at: Option<i64>,
    /// Whether anything changes: a refusal with nothing to reclaim writes
    /// and propagates nothing.
    pub writes: bool,
    /// Expired leases the call takes out of the key (INFO's count).
    pub reclaimed: usize,
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

/// The plan that reclaims the earliest expired leases and nothing else.
fn reclaim(held: &Held, now_ms: i64) -> Plan<'_> {
    Plan {
        remove: held.reclaimable.iter().map(Vec::as_slice).collect(),
        put: None,
        expires_at: held.latest_live_but(now_ms, None),
        writes: held.expired > 0,
        reclaimed: held.reclaimable.len(),
    }
}

/// `plan` as carried out: one that leaves no live lease while expired
/// leases remain beyond what it reclaims deletes the key whole (one DEL,
/// which the server frees lazily) instead of removing some of its dead
/// members first.
fn settled<'a>(held: &Held, mut plan: Plan<'a>) -> Plan<'a> {
    let leaves_dead = held.expired > held.reclaimable.len() as i64;
    if plan.writes && plan.expires_at.is_none() && leaves_dead {
        plan.remove.clear();
        plan.reclaimed = held.expired.max(0) as usize;
    }
    plan
}

/// Whether an acquire is refused: no free slot of `limit`, and no live
/// lease of its own to renew. Only then does it need `held.earliest_live`.
pub fn refuses(held: &Held, now_ms: i64, limit: i64, wanted: WantedId) -> bool {
    let renews = matches!(wanted, WantedId::Given(_)) && held.named_live(now_ms);
    !renews && held.live() >= limit
}

/// Whether an acquire is granted whatever the key holds under its id: a
/// slot of `limit` is free, so a new id is added and a live one renewed.
/// Then the store may add a new id before it knows whether the id was held.
pub fn grants_any_id(held: &Held, limit: i64) -> bool {
    held.live() < limit
}

/// Takes a slot if one of `limit` is free, or renews the caller's own live
/// lease (`held.named` is the given id's deadline). `ttl_ms` > 0 and
/// `now_ms + ttl_ms` must not overflow (the parser checks both).
pub fn acquire<'a>(
    held: &'a Held,
    now_ms: i64,
    limit: i64,
    ttl_ms: i64,
    wanted: WantedId,
) -> (Acquired, Plan<'a>) {
    let mut plan = reclaim(held, now_ms);
    let deadline = now_ms + ttl_ms;
    let renewed = match wanted {
        WantedId::Given(id) if held.named_live(now_ms) => Some(id),
        _ => None,
    };
    let in_flight = held.live();
    if refuses(held, now_ms, limit, wanted) {
        let answer = Acquired {
            acquired: false,
            limit,
            in_flight,
            retry_after_ms: held.earliest_live.map_or(0, |at| at - now_ms),
            lease_id: None,
        };
        return (answer, settled(held, plan));
    }
    let id = match wanted {
        WantedId::Given(id) => id.to_vec(),
        WantedId::Generated(nonce) => generated_id(now_ms, nonce),
    };
    let others = held.latest_live_but(now_ms, renewed);
    plan.expires_at = Some(others.map_or(deadline, |at| at.max(deadline)));
    plan.put = Some((id.clone(), deadline));
    plan.writes = true;
    let answer = Acquired {
        acquired: true,
        limit,
        in_flight: in_flight + i64::from(renewed.is_none()),
        retry_after_ms: 0,
        lease_id: Some(id),
    };
    (answer, plan)
}

/// Ends the lease `id` (`held.named` is its deadline) if it is live: true
/// then. An expired, unknown or already released id frees nothing (it may
/// be someone else's slot now).
pub fn release<'a>(held: &'a Held, now_ms: i64, id: &'a [u8]) -> (bool, Plan<'a>) {
    let mut plan = reclaim(held, now_ms);
    if !held.named_live(now_ms) {
        return (false, settled(held, plan));
    }
    plan.remove.push(id);
    plan.expires_at = held.latest_live_but(now_ms, Some(id));
    plan.writes = true;
    (true, settled(held, plan))
}

/// Moves the live lease `id`'s deadline (`held.named`) to `now_ms +
/// ttl_ms`: true then. false when it is no longer live, and its holder
/// must stop.
pub fn extend<'a>(held: &'a Held, now_ms: i64, id: &[u8], ttl_ms: i64) -> (bool, Plan<'a>) {
    let mut plan = reclaim(held, now_ms);
    if !held.named_live(now_ms) {
        return (false, settled(held, plan));
    }
    let deadline = now_ms + ttl_ms;
    plan.put = Some((id.to_vec(), deadline));
    let others = held.latest_live_but(now_ms, Some(id));
    plan.expires_at = Some(others.map_or(deadline, |at| at.max(deadline)));
    plan.writes = true;
    (true, plan)
}

/// Live leases (RL.INFLIGHT: a read, it reclaims nothing; `held` needs
/// only its member and expired counts).
pub fn in_flight(held: &Held) -> i64 {
    held.live()
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
        /// What the store reads at `now`, naming `named`: built from the
        /// whole model set, in the sorted set's order (deadline, then id).
        fn held(&self, now: i64, named: Option<&[u8]>) -> Held {
            self.held_reclaiming(now, named, RECLAIM_MAX)
        }

        /// `held`, with at most `bound` expired leases to reclaim.
        fn held_reclaiming(&self, now: i64, named: Option<&[u8]>, bound: usize) -> Held {
            let mut order: Vec<(i64, &Vec<u8>)> = self.0.iter().map(|(id, &d)| (d, id)).collect();
            order.sort();
            let last = order.last().map(|&(d, id)| (id.clone(), d));
            let expired = order.iter().filter(|&&(d, _)| d <= now);
            Held {
                members: order.len() as i64,
                expired: expired.clone().count() as i64,
                reclaimable: expired.take(bound).map(|&(_, id)| id.clone()).collect(),
                earliest_live: order.iter().map(|&(d, _)| d).find(|&d| d > now),
                last,
                before_last: order.len().checked_sub(2).map(|i| order[i].0),
                named: named.and_then(|id| self.0.get(id).copied()),
            }
        }
        fn live(&self, now: i64) -> i64 {
            self.0.values().filter(|&&d| d > now).count() as i64
        }
        fn expired(&self, now: i64) -> usize {
            self.0.values().filter(|&&d| d <= now).count()
        }
        /// The expired leases' ids, in the set's order.
        fn expired_ids(&self, now: i64) -> Vec<Vec<u8>> {
            let mut order: Vec<(i64, &Vec<u8>)> = self.0.iter().map(|(id, &d)| (d, id)).collect();
            order.sort();
            order
                .into_iter()
                .filter(|&(d, _)| d <= now)
                .map(|(_, id)| id.clone())
                .collect()
        }
        /// As the store carries it out: a plan that leaves no live lease
        /// deletes the key.
        fn apply(&mut self, plan: &Plan) {
            for id in &plan.remove {
                self.0.remove(*id);
            }
            if let Some((id, deadline)) = &plan.put {
                self.0.insert(id.clone(), *deadline);
            }
            if plan.writes && plan.expires_at.is_none() {
                self.0.clear();
            }
        }
    }

    fn set_of(leases: &[(&[u8], i64)]) -> Set {
        Set(leases.iter().map(|&(id, d)| (id.to_vec(), d)).collect())
    }

    #[test]
    fn acquires_up_to_the_limit_then_refuses_until_the_earliest_deadline() {
        let mut set = Set::default();
        for (i, now) in [(0u64, 100), (1, 150)] {
            let held = set.held(now, None);
            let (answer, plan) = acquire(&held, now, 2, 1000, WantedId::Generated(i));
            assert!(answer.acquired);
            set.apply(&plan);
        }
        let held = set.held(400, None);
        let (answer, plan) = acquire(&held, 400, 2, 1000, WantedId::Generated(9));
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
        let held = set.held(1100, Some(b"job"));
        let (answer, plan) = acquire(&held, 1100, 2, 1000, WantedId::Given(b"job"));
        assert!(answer.acquired);
        assert_eq!(answer.in_flight, 2);
        assert_eq!(plan.remove.len(), 1);
        assert_eq!(plan.expires_at, Some(2100));
    }

    #[test]
    fn renewing_a_live_id_takes_no_second_slot() {
        let set = set_of(&[(b"job", 500)]);
        let held = set.held(100, Some(b"job"));
        let (answer, plan) = acquire(&held, 100, 1, 1000, WantedId::Given(b"job"));
        assert!(answer.acquired);
        assert_eq!(answer.in_flight, 1);
        assert_eq!(plan.put, Some((b"job".to_vec(), 1100)));
    }

    #[test]
    fn renewing_the_last_lease_shorter_falls_back_to_the_one_before() {
        let set = set_of(&[(b"a", 300), (b"b", 900)]);
        let held = set.held(100, Some(b"b"));
        let (answer, plan) = acquire(&held, 100, 2, 50, WantedId::Given(b"b"));
        assert!(answer.acquired);
        assert_eq!(plan.expires_at, Some(300), "b now ends at 150, a at 300");
    }

    #[test]
    fn release_and_extend_only_touch_a_live_lease_of_their_own() {
        let set = set_of(&[(b"a", 50), (b"b", 500)]);
        let held = set.held(100, Some(b"a"));
        let (released, plan) = release(&held, 100, b"a");
        assert!(!released, "a's lease expired at 50");
        assert_eq!(plan.remove, vec![&b"a"[..]], "but it is reclaimed");
        assert_eq!(plan.expires_at, Some(500));
        let (extended, plan) = extend(&held, 100, b"a", 1000);
        assert!(!extended);
        assert_eq!(plan.put, None);
        let held = set.held(100, Some(b"b"));
        let (extended, plan) = extend(&held, 100, b"b", 1000);
        assert!(extended);
        assert_eq!(plan.put, Some((b"b".to_vec(), 1100)));
        let (extended, plan) = extend(&held, 100, b"b", 10);
        assert!(extended);
        assert_eq!(plan.expires_at, Some(110), "a is gone: b's new deadline");
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
        let set = set_of(&[(&generated_id(7, 1), 9)]);
        let mut nonces = 0..;
        let taken = |id: &[u8]| set.0.contains_key(id);
        assert_eq!(fresh_nonce(7, taken, || nonces.next().unwrap_or(0) + 1), 2);
    }

    #[test]
    fn a_write_reclaims_at_most_its_bound_and_still_counts_every_live_lease() {
        // 300 expired leases (deadlines 1..=300) and two live ones.
        let mut set = Set((1..=300)
            .map(|d| (format!("x{d:03}").into_bytes(), d))
            .collect());
        set.0.insert(b"a".to_vec(), 5000);
        set.0.insert(b"b".to_vec(), 6000);
        let held = set.held(1000, None);
        assert_eq!((held.members, held.expired, held.live()), (302, 300, 2));
        assert_eq!(held.reclaimable.len(), RECLAIM_MAX);
        let (answer, plan) = acquire(&held, 1000, 3, 100, WantedId::Generated(1));
        assert!(answer.acquired);
        assert_eq!(
            answer.in_flight, 3,
            "the expired leases left are not counted"
        );
        assert_eq!(plan.remove.first(), Some(&&b"x001"[..]), "earliest first");
        assert_eq!(plan.remove.len(), RECLAIM_MAX);
        assert_eq!(plan.reclaimed, RECLAIM_MAX);
        assert_eq!(plan.expires_at, Some(6000));
        set.apply(&plan);
        assert_eq!(set.expired(1000), 300 - RECLAIM_MAX);
        // The same limit refuses now, and still reclaims the next ones.
        let held = set.held(1000, None);
        let (answer, plan) = acquire(&held, 1000, 3, 100, WantedId::Generated(2));
        assert!(!answer.acquired);
        assert_eq!(answer.in_flight, 3);
        assert_eq!(plan.remove.len(), RECLAIM_MAX);
        set.apply(&plan);
        let held = set.held(1000, None);
        assert_eq!(held.expired, 300 - 2 * RECLAIM_MAX as i64);
        assert_eq!(in_flight(&held), 3);
    }

    #[test]
    fn a_write_that_leaves_only_dead_leases_deletes_the_key_whole() {
        let mut set = Set((1..=300)
            .map(|d| (format!("x{d:03}").into_bytes(), d))
            .collect());
        set.0.insert(b"a".to_vec(), 5000);
        let held = set.held(1000, Some(b"a"));
        let (released, plan) = release(&held, 1000, b"a");
        assert!(released);
        assert_eq!(plan.remove, Vec::<&[u8]>::new(), "no piecemeal ZREM");
        assert_eq!((plan.expires_at, plan.writes), (None, true));
        assert_eq!(plan.reclaimed, 300);
        // With no more dead leases than the bound, the removals empty it.
        let set = set_of(&[(b"x", 1), (b"a", 5000)]);
        let held = set.held(1000, Some(b"a"));
        let (_, plan) = release(&held, 1000, b"a");
        assert_eq!(plan.remove, vec![&b"x"[..], &b"a"[..]]);
        assert_eq!(plan.reclaimed, 1);
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
        AcquireFresh,
        Release(u8),
        Extend(u8, i64),
    }

    fn step() -> impl Strategy<Value = (i64, Step)> {
        let op = prop_oneof![
            (0u8..6).prop_map(Step::Acquire),
            Just(Step::AcquireFresh),
            (0u8..6).prop_map(Step::Release),
            ((0u8..6), (1i64..300)).prop_map(|(id, ttl)| Step::Extend(id, ttl)),
        ];
        ((0i64..60), op)
    }

    proptest! {
        /// Driven by random steps with an injected clock, each deciding
        /// from the summary the store would read of a model set: never more
        /// than `limit` live leases; each lease live exactly until its
        /// deadline; release and extend act on their own lease only; the
        /// key's expiry is its latest live deadline; generated ids are new.
        #[test]
        fn the_ceiling_holds_and_leases_end_exactly_at_their_deadlines(
            limit in 1i64..4,
            ttl in 1i64..200,
            bound in 1usize..4,
            steps in proptest::collection::vec(step(), 1..200),
        ) {
            let mut set = Set::default();
            let mut now = 1_000;
            let mut nonce = 0u64;
            for (elapsed, step) in steps {
                now += elapsed;
                let before = set.clone();
                let live_before = set.live(now);
                let mine_live = |id: &[u8]| before.0.get(id).is_some_and(|&d| d > now);
                let (plan, touched) = match step {
                    Step::Acquire(n) | Step::Release(n) | Step::Extend(n, _) => {
                        let id = [b'j', n];
                        let held = before.held_reclaiming(now, Some(&id), bound);
                        prop_assert_eq!(held.live(), live_before);
                        let plan = match step {
                            Step::Acquire(_) => {
                                let wanted = WantedId::Given(&id);
                                let unread = Held { earliest_live: None, ..held.clone() };
                                let refused = refuses(&held, now, limit, wanted);
                                // The earliest live deadline is read only for a refusal.
                                let held = if refused { &held } else { &unread };
                                let (answer, plan) = acquire(held, now, limit, ttl, wanted);
                                prop_assert_eq!(answer.acquired, !refused);
                                prop_assert_eq!(answer.acquired, mine_live(&id) || live_before < limit);
                                prop_assert!(answer.in_flight <= limit);
                                if grants_any_id(held, limit) {
                                    // The store may add the id before it reads if it was held.
                                    prop_assert!(answer.acquired);
                                    prop_assert_eq!(plan.put.clone(), Some((id.to_vec(), now + ttl)));
                                }
                                if !answer.acquired {
                                    let earliest = before.0.values().filter(|&&d| d > now).min().unwrap();
                                    prop_assert_eq!(answer.retry_after_ms, earliest - now);
                                }
                                plan.clone_owned()
                            }
                            Step::Release(_) => {
                                let (released, plan) = release(&held, now, &id);
                                prop_assert_eq!(released, mine_live(&id));
                                plan.clone_owned()
                            }
                            _ => {
                                let Step::Extend(_, ext) = step else { unreachable!() };
                                let (extended, plan) = extend(&held, now, &id, ext);
                                prop_assert_eq!(extended, mine_live(&id));
                                plan.clone_owned()
                            }
                        };
                        (plan, Some(id.to_vec()))
                    }
                    Step::AcquireFresh => {
                        let mut held = before.held_reclaiming(now, None, bound);
                        if !refuses(&held, now, limit, WantedId::Generated(0)) {
                            held.earliest_live = None; // not read then
                        }
                        nonce = fresh_nonce(now, |id| before.0.contains_key(id), || {
                            nonce += 1;
                            nonce
                        });
                        let (answer, plan) =
                            acquire(&held, now, limit, ttl, WantedId::Generated(nonce));
                        prop_assert_eq!(answer.acquired, live_before < limit);
                        if let Some(id) = &answer.lease_id {
                            prop_assert!(!before.0.contains_key(id), "a generated id is new");
                        }
                        (plan.clone_owned(), None)
                    }
                };
                let expired_before = before.expired_ids(now);
                set.apply(&plan.borrowed());
                // Only a write reclaims: the earliest expired leases, at
                // most `bound` of them, or all of them with the key.
                let reclaimed: Vec<&[u8]> = plan
                    .remove
                    .iter()
                    .map(Vec::as_slice)
                    .filter(|id| expired_before.iter().any(|e| e == id))
                    .collect();
                let n = expired_before.len();
                match plan.writes {
                    true if set.0.is_empty() => prop_assert_eq!(plan.reclaimed, n),
                    true => {
                        let earliest: Vec<&[u8]> =
                            expired_before.iter().take(bound).map(Vec::as_slice).collect();
                        prop_assert_eq!(&reclaimed, &earliest);
                        prop_assert_eq!(plan.reclaimed, n.min(bound));
                    }
                    false => prop_assert_eq!(n, 0, "expired leases always make a write"),
                }
                prop_assert!(set.live(now) <= limit);
                if plan.writes {
                    prop_assert_eq!(plan.expires_at, set.0.values().max().copied(),
                        "the key expires at its latest live deadline");
                    prop_assert!(plan.remove.len() <= bound + 1);
                } else {
                    prop_assert_eq!(&set.0, &before.0, "no write, no change");
                }
                // Every other live lease is untouched.
                for (id, deadline) in before.0.iter().filter(|(_, &d)| d > now) {
                    if touched.as_deref() != Some(&id[..]) {
                        prop_assert_eq!(set.0.get(id), Some(deadline));
                    }
                }
            }
        }
    }

    /// A plan that owns its ids, to outlive the summary it was made from.
    struct OwnedPlan {
        remove: Vec<Vec<u8>>,
        put: Option<(Vec<u8>, i64)>,
        expires_at: Option<i64>,
        writes: bool,
        reclaimed: usize,
    }

    impl Plan<'_> {
        fn clone_owned(&self) -> OwnedPlan {
            OwnedPlan {
                remove: self.remove.iter().map(|id| id.to_vec()).collect(),
                put: self.put.clone(),
                expires_at: self.expires_at,
                writes: self.writes,
                reclaimed: self.reclaimed,
            }
        }
    }

    impl OwnedPlan {
        fn borrowed(&self) -> Plan<'_> {
            Plan {
                remove: self.remove.iter().map(Vec::as_slice).collect(),
                put: self.put.clone(),
                expires_at: self.expires_at,
                writes: self.writes,
                reclaimed: self.reclaimed,
            }
        }
    }
}
