//! The hot path's instruction budget: `bench/budget.py` counts each limiter
//! row's instructions per call under callgrind and holds it to its ratio to
//! the FLOOR.ADMIT control in `bench/instruction-budget.tsv`, and each of the
//! FUNCTION library's FCALL rows to its ratio to the hand-written script of
//! the same shape (`bench/lua/hand_*.lua`), measured in the same run. Counts,
//! not timings: they do not move with the machine's load, so this can gate CI.
//!
//! Needs valgrind, redis-benchmark and python3 (`.ci/run` installs them) and
//! the control module (`cargo test` builds the `api_floor` example). The
//! budget holds for the server it was calibrated on; against another
//! (`make test-valkey8`) this test says so and checks nothing.

use crate::common;

use std::path::Path;
use std::process::Command;

#[test]
fn hot_path_stays_within_its_instruction_budget() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("python3")
        .arg(repo.join("bench/budget.py"))
        .current_dir(repo)
        .env("VALKEY_SERVER", common::server_binary())
        .env("RL_MODULE", common::module_path())
        .output()
        .expect("run python3 bench/budget.py");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{text}");
    match out.status.code() {
        Some(0) => assert!(text.contains("within budget"), "{text}"),
        Some(3) if std::env::var_os("RL_EXPECT_VALKEY_VERSION").is_some() => {
            eprintln!("not the calibrated server: the budget is not checked on this run")
        }
        _ => panic!("instruction budget: {text}"),
    }
}
