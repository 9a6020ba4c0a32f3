//! The lease commands' grammar: RL.ACQUIRE's options, RL.RELEASE's and
//! RL.EXTEND's lease id and TTL, and RL.ACQUIRE's keys. The words
//! themselves are rows of the shared OPTIONS table.

use super::table::{Opt, OptSet, LEASE_SET};
use super::{unknown, Options};
use crate::error::{
    RlError, NON_EMPTY, POSITIVE, WAIT_AND_BLOCK, WAIT_AND_SHADOW, WAIT_NEEDS_ID, WAIT_NEEDS_QUEUE,
};

/// RL.ACQUIRE key [LIMIT n] [TTL ms] [META metakey] [ID lease-id] [SHADOW]
/// [BLOCK timeout_ms] [QUEUE ticketkey] [WAIT ms] (SHADOW a flag: no value). A lease
/// LIMIT of 0 admits nobody, so it is refused: unlimited is said by
/// leaving LIMIT out (or META 'max' 0).
pub fn acquire(args: &[&[u8]]) -> Result<Options, RlError> {
    let mut opts = Options::default();
    let mut at = 2;
    while at < args.len() {
        let Some(opt) = Opt::parse(args[at], LEASE_SET) else {
            return Err(unknown(args[at]));
        };
        let words = opts.set(opt, args, at + 1).map_err(|err| match err {
            RlError::BadValue(..) if opt == Opt::Limit => RlError::BadValue(opt.name(), POSITIVE),
            err => err,
        })?;
        if opt == Opt::Limit && opts.limit == Some(0) {
            return Err(RlError::BadValue(opt.name(), POSITIVE));
        }
        at += words;
    }
    if opts.wait.is_some() {
        check_wait(&opts)?;
    }
    Ok(opts)
}

/// WAIT's companions (docs/reference.md "tickets"): QUEUE and ID, and
/// neither SHADOW nor BLOCK.
#[cold]
fn check_wait(opts: &Options) -> Result<(), RlError> {
    let problem = match () {
        _ if opts.queue.is_none() => WAIT_NEEDS_QUEUE,
        _ if opts.id.is_none() => WAIT_NEEDS_ID,
        _ if opts.shadow => WAIT_AND_SHADOW,
        _ if opts.block.is_some() => WAIT_AND_BLOCK,
        _ => return Ok(()),
    };
    Err(RlError::Ticket(problem))
}

/// RL.RELEASE key lease-id [QUEUE ticketkey]: the id, and where the
/// ticket key is.
pub fn release<'a>(args: &[&'a [u8]]) -> Result<(&'a [u8], Option<usize>), RlError> {
    match args {
        [_, _, id] => Ok((lease_id(id)?, None)),
        [_, _, id, keyword, _] => {
            let id = lease_id(id)?;
            match Opt::parse(keyword, OptSet::of(&[Opt::Queue])) {
                Some(_) => Ok((id, Some(4))),
                None => Err(unknown(keyword)),
            }
        }
        _ => Err(RlError::WrongArity("rl.release")),
    }
}

/// getkeys for RL.RELEASE: the lease key and, after `QUEUE`, the ticket key.
pub fn release_keys(args: &[&[u8]], mut key: impl FnMut(usize, bool)) {
    if args.len() > 1 {
        key(1, false);
    }
    if args.len() == 5 && Opt::parse(args[3], OptSet::of(&[Opt::Queue])).is_some() {
        key(4, false);
    }
}

/// RL.EXTEND key lease-id TTL ms: the id and the TTL.
pub fn extend<'a>(args: &[&'a [u8]]) -> Result<(&'a [u8], i64), RlError> {
    let [_, _, id, keyword, _] = args else {
        return Err(RlError::WrongArity("rl.extend"));
    };
    let id = lease_id(id)?;
    if Opt::parse(keyword, OptSet::of(&[Opt::Ttl])).is_none() {
        return Err(unknown(keyword));
    }
    let mut opts = Options::default();
    opts.set(Opt::Ttl, args, 4)?;
    Ok((id, opts.ttl.unwrap_or(1)))
}

fn lease_id(id: &[u8]) -> Result<&[u8], RlError> {
    match id.is_empty() {
        true => Err(RlError::BadValue("lease-id", NON_EMPTY)),
        false => Ok(id),
    }
}

/// getkeys for RL.ACQUIRE: the lease key (read-write), the META hash
/// (read-only) and the ticket key (QUEUE, read-write), scanning option by
/// option so that an ID or QUEUE value that is a keyword is not taken
/// for one.
pub fn acquire_keys(args: &[&[u8]], mut key: impl FnMut(usize, bool)) {
    if args.len() > 1 {
        key(1, false);
    }
    let mut at = 2;
    while at + 1 < args.len() {
        let opt = Opt::parse(args[at], OptSet::ALL);
        match opt {
            Some(Opt::Meta) => key(at + 1, true),
            Some(Opt::Queue) => key(at + 1, false),
            _ => {}
        }
        at += match opt {
            Some(opt) if opt.is_flag() => 1,
            _ => 2,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn words(line: &str) -> Vec<&[u8]> {
        line.split(' ').map(str::as_bytes).collect()
    }

    #[test]
    fn acquire_reads_its_options_and_refuses_bad_ones() {
        let ok = acquire(&words("RL.ACQUIRE k ttl 100 LIMIT 5 id job-1 Meta m")).unwrap();
        assert_eq!(
            (ok.limit, ok.ttl, ok.id, ok.meta),
            (Some(5), Some(100), Some(7), Some(9))
        );
        let positive = |opt| RlError::BadValue(opt, POSITIVE);
        let cases: &[(&str, RlError)] = &[
            ("LIMIT 0", positive("LIMIT")),
            ("LIMIT -1", positive("LIMIT")),
            ("LIMIT x", positive("LIMIT")),
            ("TTL 0", positive("TTL")),
            ("TTL 9223372036854775808", positive("TTL")),
            ("TTL", RlError::MissingValue("TTL")),
            ("ID", RlError::MissingValue("ID")),
            ("TTL 1 ttl 2", RlError::Repeated("TTL")),
            ("COST 1", RlError::UnknownOption("COST".into())),
            ("WINDOW 1", RlError::UnknownOption("WINDOW".into())),
            ("SHADOW 1", RlError::UnknownOption("1".into())),
            ("SHADOW shadow", RlError::Repeated("SHADOW")),
        ];
        for (tail, want) in cases {
            let line = format!("RL.ACQUIRE k {tail}");
            assert_eq!(acquire(&words(&line)).as_ref(), Err(want), "{tail}");
        }
        // SHADOW is a flag: the next word is the next option.
        let shadow = acquire(&words("RL.ACQUIRE k shadow LIMIT 2 TTL 5")).unwrap();
        assert_eq!(
            (shadow.shadow, shadow.limit, shadow.ttl),
            (true, Some(2), Some(5))
        );
        assert!(!ok.shadow);
        let empty_id: Vec<&[u8]> = vec![b"RL.ACQUIRE", b"k", b"ID", b""];
        assert_eq!(acquire(&empty_id), Err(RlError::BadValue("ID", NON_EMPTY)));
    }

    #[test]
    fn extend_and_release_need_a_lease_id_and_extend_a_ttl() {
        assert_eq!(
            extend(&words("RL.EXTEND k job ttl 50")),
            Ok((&b"job"[..], 50))
        );
        assert_eq!(
            extend(&words("RL.EXTEND k job TIME 50")),
            Err(RlError::UnknownOption("TIME".into()))
        );
        assert_eq!(
            extend(&words("RL.EXTEND k job TTL 0")),
            Err(RlError::BadValue("TTL", POSITIVE))
        );
        let empty: Vec<&[u8]> = vec![b"RL.RELEASE", b"k", b""];
        assert_eq!(
            release(&empty),
            Err(RlError::BadValue("lease-id", NON_EMPTY))
        );
        assert_eq!(release(&words("RL.RELEASE k job")), Ok((&b"job"[..], None)));
        assert_eq!(
            release(&words("RL.RELEASE k job queue q")),
            Ok((&b"job"[..], Some(4)))
        );
        assert_eq!(
            release(&words("RL.RELEASE k job TTL q")),
            Err(RlError::UnknownOption("TTL".into()))
        );
    }

    proptest! {
        #[test]
        fn never_panics_and_keeps_values_in_range(words in proptest::collection::vec(
            prop_oneof![
                Just(b"LIMIT".to_vec()), Just(b"ttl".to_vec()), Just(b"META".to_vec()),
                Just(b"id".to_vec()), Just(b"0".to_vec()), Just(b"-1".to_vec()),
                Just(Vec::new()),
                proptest::collection::vec(any::<u8>(), 0..10),
            ], 0..10)) {
            let args: Vec<&[u8]> = words.iter().map(|w| w.as_slice()).collect();
            if let Ok(o) = acquire(&args) {
                prop_assert!(o.limit.is_none_or(|v| v >= 1));
                prop_assert!(o.ttl.is_none_or(|v| v >= 1));
                prop_assert!(o.id.is_none_or(|i| i < args.len() && !args[i].is_empty()));
                prop_assert!(o.meta.is_none_or(|i| i < args.len()));
            }
            if let Ok((id, ttl)) = extend(&args) {
                prop_assert!(!id.is_empty() && ttl >= 1);
            }
            let _ = release(&args);
            let mut keys = Vec::new();
            acquire_keys(&args, |pos, _| keys.push(pos));
            prop_assert!(keys.iter().all(|&pos| pos < args.len()));
        }
    }
}
