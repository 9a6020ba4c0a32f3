//! Malformed calls get a clear error, change nothing, and never take the
//! server down.

use crate::common;

use crate::common::{assert_refused_naming, raw_state, split, Server};
use redis::Commands;

#[test]
fn every_malformed_call_is_an_error_that_changes_nothing() {
    let server = Server::start();
    let mut con = server.client();
    let _: () = redis::cmd("SET")
        .arg(&["c", "2", "PX", "60000"])
        .query(&mut con)
        .unwrap();
    // META hashes, good and bad: (key, fields).
    let metas: &[(&str, &[(&str, &str)])] = &[
        ("m", &[("max", "3"), ("duration", "60000")]),
        ("badmax", &[("max", "many"), ("duration", "1000")]),
        ("negmax", &[("max", "-1"), ("duration", "1000")]),
        ("baddur", &[("max", "3"), ("duration", "1.5")]),
        ("zerodur", &[("max", "3"), ("duration", "0")]),
        (
            "hugedur",
            &[("max", "3"), ("duration", "9223372036854775807")],
        ),
        (
            "badalgo",
            &[("max", "3"), ("duration", "1000"), ("algorithm", "magic")],
        ),
        (
            "badburst",
            &[
                ("max", "3"),
                ("duration", "1000"),
                ("algorithm", "token"),
                ("burst", "lots"),
            ],
        ),
        (
            "zeroburst",
            &[
                ("max", "3"),
                ("duration", "1000"),
                ("algorithm", "gcra"),
                ("burst", "0"),
            ],
        ),
    ];
    for (key, fields) in metas {
        let _: () = con.hset_multiple(*key, fields).unwrap();
    }
    let _: () = con.set("text", "hello").unwrap();
    let _: () = con.rpush("list", "x").unwrap();
    let keys = [
        "c", "m", "badmax", "negmax", "baddur", "zerodur", "hugedur", "text", "list", "new",
    ];
    let before = raw_state(&mut con, &keys);

    // (call, what the error must mention); a call is its words, split at spaces.
    let table: &[(&str, &str)] = &[
        ("RL.ADMIT", "wrong number of arguments"),
        ("RL.TTL", "wrong number of arguments"),
        ("RL.LIMIT", "wrong number of arguments"),
        ("RL.LIMIT m extra", "wrong number of arguments"),
        ("RL.ADMIT c LIMIT", "LIMIT"),
        ("RL.ADMIT c LIMIT abc WINDOW 10", "LIMIT"),
        ("RL.ADMIT c LIMIT -1 WINDOW 10", "LIMIT"),
        ("RL.ADMIT c LIMIT 1.5 WINDOW 10", "LIMIT"),
        ("RL.ADMIT c LIMIT 99999999999999999999 WINDOW 10", "LIMIT"),
        ("RL.ADMIT c LIMIT 5 WINDOW 0", "WINDOW"),
        ("RL.ADMIT c LIMIT 5 WINDOW -10", "WINDOW"),
        ("RL.ADMIT c LIMIT 5 WINDOW ten", "WINDOW"),
        ("RL.ADMIT c LIMIT 5 WINDOW 9223372036854775807", "WINDOW"),
        ("RL.ADMIT c LIMIT 5 WINDOW 10 COST -1", "COST"),
        ("RL.ADMIT c LIMIT 5 WINDOW 10 COST x", "COST"),
        ("RL.ADMIT c LIMIT 5 WINDOW 10 COST", "COST"),
        ("RL.ADMIT c LIMIT 5 LIMIT 6 WINDOW 10", "LIMIT"),
        ("RL.ADMIT c LIMIT 5 WINDOW 10 window 20", "WINDOW"),
        ("RL.ADMIT c META m META m", "META"),
        ("RL.ADMIT c LIMIT 5 WINDOW 10 BOGUS 1", "unknown option"),
        ("RL.ADMIT c LIMIT 5 WINDOW 10 extra", "unknown option"),
        ("RL.ADMIT new LIMIT 5", "window"),
        ("RL.ADMIT c META badmax", "'max'"),
        ("RL.ADMIT c META negmax", "'max'"),
        ("RL.ADMIT c META baddur", "'duration'"),
        ("RL.ADMIT c META zerodur", "'duration'"),
        ("RL.ADMIT c META hugedur", "duration"),
        ("RL.ADMIT c META text", "WRONGTYPE"),
        ("RL.ADMIT text LIMIT 5 WINDOW 10", "integer"),
        ("RL.ADMIT list LIMIT 5 WINDOW 10", "WRONGTYPE"),
        ("RL.TTL c COST 1", "unknown option"),
        ("RL.ADMIT c ALGO magic LIMIT 5 WINDOW 10", "ALGO"),
        ("RL.ADMIT c ALGO token ALGO gcra LIMIT 5 WINDOW 10", "ALGO"),
        ("RL.ADMIT c LIMIT 5 WINDOW 10 BURST 3", "BURST"),
        ("RL.ADMIT c ALGO sliding LIMIT 5 WINDOW 10 BURST 3", "BURST"),
        (
            "RL.ADMIT new ALGO token LIMIT 5 WINDOW 10 BURST -1",
            "BURST",
        ),
        ("RL.ADMIT new ALGO gcra LIMIT 5 WINDOW 10 BURST 0", "BURST"),
        (
            "RL.ADMIT new ALGO token LIMIT 1 WINDOW 4611686018427387903 BURST 9223372036854775807",
            "too large",
        ),
        ("RL.ADMIT c ALGO gcra LIMIT 5 WINDOW 10", "gcra state"),
        ("RL.ADMIT c META badalgo", "'algorithm'"),
        ("RL.ADMIT new META badburst", "'burst'"),
        // A bucket holds at least one request: a 0 from META names the field.
        (
            "RL.ADMIT new META zeroburst",
            "META hash field 'burst' must be an integer from 1 (0 for ALGO leaky)",
        ),
        (
            "RL.ADMIT new ALGO token LIMIT 3 WINDOW 9 BURST 0",
            "BURST must be an integer from 1 (0 for ALGO leaky)",
        ),
        (
            "RL.ADMIT new ALGO leaky LIMIT 3 WINDOW 9 BURST -1",
            "BURST must be an integer from 1 (0 for ALGO leaky)",
        ),
        ("RL.REFUND c LIMIT 5 WINDOW 10 COST -2", "COST"),
        ("RL.REFUND list LIMIT 5 WINDOW 10", "WRONGTYPE"),
        ("RL.RESET", "wrong number of arguments"),
        ("RL.RESET list", "WRONGTYPE"),
        ("RL.THROTTLE t 1 1", "wrong number of arguments"),
        ("RL.THROTTLE t -1 1 1", "max_burst"),
        ("RL.THROTTLE t 1 0 1", "count_per_period"),
        ("RL.THROTTLE t 1 1 0", "period"),
        ("RL.THROTTLE t 1 1 1 -1", "quantity"),
        ("RL.THROTTLE t x 1 1", "max_burst"),
        ("RL.THROTTLE t 9223372036854775807 1 1", "too large"),
        ("RL.THROTTLE text 1 1 1", "gcra state"),
        ("RL.THROTTLE list 1 1 1", "WRONGTYPE"),
        ("RL.ADMITALL 0 a POLICY", "numkeys"),
        ("RL.ADMITALL 5 a b POLICY", "numkeys"),
        ("RL.ADMITALL x a POLICY", "numkeys"),
        // numkeys too large for the keys, but not for the arguments: the
        // options are taken for keys, and the error still says numkeys.
        ("RL.ADMITALL 5 a POLICY LIMIT 1 WINDOW 1", "numkeys"),
        ("RL.ADMITALL 2 a a POLICY POLICY", "distinct"),
        ("RL.ADMITALL 2 a b POLICY", "one POLICY per key"),
        ("RL.ADMITALL 1 a LIMIT 3 POLICY", "POLICY"),
        ("RL.ADMITALL 1 a POLICY LIMIT x", "LIMIT"),
        ("RL.ADMITALL 1 a POLICY LIMIT 3", "window"),
        ("RL.ADMITALL 1 list POLICY LIMIT 3 WINDOW 10", "WRONGTYPE"),
        ("RL.TTL c LIMIT -3", "LIMIT"),
        ("RL.TTL c META badmax", "'max'"),
        ("RL.TTL list LIMIT 3", "WRONGTYPE"),
        ("RL.LIMIT badmax", "'max'"),
        ("RL.LIMIT list", "WRONGTYPE"),
    ];
    let mut cases: Vec<(Vec<&str>, &str)> = table
        .iter()
        .map(|(call, mention)| (split(call), *mention))
        .collect();
    // A number with a leading space is not a number (its words hold a space).
    cases.push((
        vec!["RL.ADMIT", "c", "LIMIT", " 5", "WINDOW", "10"],
        "LIMIT",
    ));
    for (call, mention) in &cases {
        assert_refused_naming(&mut con, call, mention);
    }
    let after = raw_state(&mut con, &keys);
    assert_eq!(before, after, "no malformed call touched a key");
    let errors = common::info_field(&mut con, "ratelimit", "ratelimit_errors").unwrap();
    // Arity errors are the server's own; every other one is the module's.
    let module_errors = cases
        .iter()
        .filter(|(_, m)| !m.contains("wrong number"))
        .count();
    assert_eq!(
        errors.parse::<usize>().unwrap(),
        module_errors,
        "errors counted"
    );
}

#[test]
fn binary_and_oversized_arguments_are_survived() {
    let server = Server::start();
    let mut con = server.client();
    let nasty: Vec<Vec<u8>> = vec![
        b"\x00\xff\r\n".to_vec(),
        vec![b'9'; 10_000],
        "LIMITé".as_bytes().to_vec(),
        b"-0".to_vec(),
        b"+5".to_vec(),
    ];
    for arg in &nasty {
        for position in 0..4 {
            let mut cmd = redis::cmd("RL.ADMIT");
            cmd.arg(b"k".as_slice());
            let mut words: Vec<&[u8]> = vec![b"LIMIT", b"5", b"WINDOW", b"100"];
            words[position] = arg;
            for w in words {
                cmd.arg(w);
            }
            let reply = cmd.query::<redis::Value>(&mut con);
            assert!(reply.is_err(), "{arg:?} at {position} was accepted");
        }
    }
    let many: Vec<String> = (0..200).map(|i| i.to_string()).collect();
    let err = redis::cmd("RL.ADMIT")
        .arg("k")
        .arg(&many)
        .query::<redis::Value>(&mut con);
    assert!(err.is_err());
    let pong: String = redis::cmd("PING").query(&mut con).unwrap();
    assert_eq!(pong, "PONG");
    assert!(!con.exists::<_, bool>("k").unwrap());
}
