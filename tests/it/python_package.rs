//! The Python package (`clients/python`), tested like a library: its
//! pytest suites (`clients/python/tests/`) run here, each against the
//! servers this file starts and hands over in the environment
//! (`VALKEY_PORT`, `RL_EXPECT_BACKEND`, `VALKEY_REPLICA_PORT`; for the
//! outage tests, which stop and restart servers of their own, the binary
//! and the module: `RL_VALKEY_SERVER`, `RL_MODULE`). A run passes only if
//! pytest exits 0 and reports nothing but passed tests, at least as many
//! as expected: no tests collected (pytest's exit code 5), a skip or an
//! xfail fails it. Also here: the wheel and the sdist ship
//! `functions/ratelimit.lua` byte for byte, and the installed wheel loads
//! it onto a bare server by itself.
//!
//! The Python libraries come from `dev/client-deps.sh`
//! (`clients/python/requirements-test.txt` into `.deps/clients-venv`).
//! Without them these tests fail when `$CI` is set and are skipped, with a
//! note on stderr, otherwise.

use crate::common;
use crate::common::backend::{self, Backend, NO_MODULES};
use crate::common::cluster;
use crate::common::{Scratch, Server};

use serial_test::serial;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

const REPO: &str = env!("CARGO_MANIFEST_DIR");
/// A pytest run that takes longer than this is hung.
const RUN_TIMEOUT: Duration = Duration::from_secs(600);

/// The venv's python (`$RL_CLIENTS_PYTHON`, else `.deps/clients-venv`), if
/// it has what the suites import; else a skip (a failure under CI).
pub(crate) fn python_path() -> Option<PathBuf> {
    let python = match std::env::var_os("RL_CLIENTS_PYTHON") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => Path::new(REPO).join(".deps/clients-venv/bin/python"),
    };
    let check = Command::new(&python)
        .args([
            "-c",
            "import valkey, redis, glide, glide_sync, starlette, fastapi, uvicorn, httpx, pytest, limits, build",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if check.is_ok_and(|s| s.success()) {
        return Some(python);
    }
    let msg = format!(
        "{} cannot import the Python package's test requirements; install them with \
         `scripts/setup.sh test` (make test runs it)",
        python.display()
    );
    if common::missing_tool_fails() {
        panic!("{msg} (RL_ALLOW_SKIP=1 skips instead)");
    }
    eprintln!("SKIPPED: {msg}");
    None
}

/// pytest on `files` (relative to clients/python) with `env`: panics
/// unless it exits 0 with at least `min_passed` tests passed and nothing
/// else (no skip, xfail, error or deselection).
fn pytest(files: &[&str], env: &[(&str, String)], min_passed: usize) {
    let Some(python) = python_path() else {
        return;
    };
    let mut cmd = Command::new(python);
    cmd.current_dir(Path::new(REPO).join("clients/python"))
        .env("PYTHONPATH", Path::new(REPO).join("clients/python/src"))
        .env_remove("VALKEY_PORT")
        .env_remove("VALKEY_REPLICA_PORT")
        .env_remove("RL_EXPECT_BACKEND")
        .args([
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-o",
            "console_output_style=classic",
        ])
        .args(files);
    for (name, value) in env {
        cmd.env(name, value);
    }
    let out = common::run_to_completion(cmd, RUN_TIMEOUT);
    let summary = out
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or_default()
        .trim_matches(|c| c == '=' || c == ' ');
    // "23 passed in 7.31s", or "23 passed, 2 warnings in 7.31s".
    let counts = summary.rsplit_once(" in ").map_or(summary, |(c, _)| c);
    let mut passed = 0;
    for part in counts.split(", ") {
        match part.split_once(' ') {
            Some((n, "passed")) => passed = n.parse().unwrap_or(0),
            Some((_, "warning" | "warnings")) => {}
            _ => panic!("pytest reported more than passes ({summary}):\n{out}"),
        }
    }
    assert!(
        passed >= min_passed,
        "pytest passed {passed} tests, expected at least {min_passed}:\n{out}"
    );
}

fn backend_name(backend: Backend) -> String {
    match backend {
        Backend::Module => "module".into(),
        Backend::Functions => "functions".into(),
    }
}

fn on(server: &Server, backend: Backend) -> Vec<(&'static str, String)> {
    vec![
        ("VALKEY_PORT", server.port.to_string()),
        ("RL_EXPECT_BACKEND", backend_name(backend)),
    ]
}

#[test]
fn python_pure_core() {
    pytest(
        &["tests/test_core.py", "tests/test_reservation_core.py"],
        &[],
        70,
    );
}

/// The limiters on every client library, real HTTP (FastAPI and Starlette
/// under uvicorn), the leases, issue 27's options (shadow over HTTP, the
/// penalty, aligned and calendar windows, bad values), and issue 38's fair
/// waiting (one call per wait, no go-ahead before `at_ms`, a cancelled
/// waiter's slot given back).
fn package_on(backend: Backend) {
    let server = backend.start();
    pytest(
        &[
            "tests/test_limiter.py",
            "tests/test_http.py",
            "tests/test_leases.py",
            "tests/test_policies.py",
            "tests/test_reserve.py",
        ],
        &on(&server, backend),
        54,
    );
}

#[test]
fn python_package_on_the_module() {
    package_on(Backend::Module);
}

#[test]
fn python_package_on_the_function_library() {
    package_on(Backend::Functions);
}

/// No module, no library: the package loads the copy it ships, over an
/// older one but never a newer one, and again when it vanishes.
#[test]
fn python_library_loaded_on_a_bare_server() {
    let server = Server::start_without_module(NO_MODULES);
    pytest(
        &["tests/test_library.py"],
        &on(&server, Backend::Functions),
        9,
    );
}

/// Stopped, black-holed and frozen servers of the tests' own, on both
/// backends, sync and asyncio, each answered within the deadline. Serial
/// with the other timing tests (`#[serial]`), which it would slow down and
/// be slowed down by.
#[test]
#[serial]
fn python_outages_within_the_deadline() {
    let binary = common::server_binary();
    let module = common::module_path();
    pytest(
        &["tests/test_outage.py"],
        &[
            ("RL_VALKEY_SERVER", binary.display().to_string()),
            ("RL_MODULE", module.display().to_string()),
        ],
        4,
    );
}

/// A primary and its replica; the tests stop the replica, cut its link and
/// kill the primary (issue 30's durability option).
fn durability_on(backend: Backend) {
    let primary = backend.start_with(&[]);
    let replica = match backend {
        Backend::Module => Server::start(),
        Backend::Functions => Server::start_without_module(NO_MODULES),
    };
    replica.replica_of(&primary);
    let mut env = on(&primary, backend);
    env.push(("VALKEY_REPLICA_PORT", replica.port.to_string()));
    pytest(&["tests/test_durability.py"], &env, 2);
}

#[test]
fn python_wait_replicas_on_the_module() {
    durability_on(Backend::Module);
}

#[test]
fn python_wait_replicas_on_the_function_library() {
    durability_on(Backend::Functions);
}

/// Three primaries with the module, the library loaded into each.
#[test]
fn python_cluster_clients() {
    if python_path().is_none() {
        return;
    }
    let cluster = cluster::Cluster::start(3);
    for node in &cluster.nodes {
        backend::load_library(&mut node.client());
    }
    pytest(
        &["tests/test_cluster.py"],
        &[("VALKEY_PORT", cluster.nodes[0].port.to_string())],
        8,
    );
}

/// `python -m build` (sdist, then the wheel from the sdist): both carry the
/// repo's `functions/ratelimit.lua` byte for byte, and the installed wheel,
/// away from the checkout, loads it onto a bare server by itself.
#[test]
fn python_wheel_and_sdist_ship_the_library() {
    let Some(python) = python_path() else {
        return;
    };
    let scratch = Scratch::new("python-build");
    let dist = scratch.0.join("dist");
    let mut build = Command::new(&python);
    // --no-isolation: the pinned hatchling of the venv, no download.
    build
        .args(["-m", "build", "--no-isolation", "--outdir"])
        .arg(&dist)
        .arg(Path::new(REPO).join("clients/python"));
    common::run_to_completion(build, RUN_TIMEOUT);
    let wheel = dist.join("valkey_ratelimit-0.1.0-py3-none-any.whl");
    let sdist = dist.join("valkey_ratelimit-0.1.0.tar.gz");
    let shipped = scratch.0.join("shipped");
    let mut extract = Command::new(&python);
    extract
        .args([
            "-c",
            "import sys, tarfile, zipfile, pathlib\n\
             out = pathlib.Path(sys.argv[3])\n\
             out.mkdir()\n\
             (out / 'wheel.lua').write_bytes(zipfile.ZipFile(sys.argv[1]).read('valkey_ratelimit/ratelimit.lua'))\n\
             t = tarfile.open(sys.argv[2])\n\
             (out / 'sdist.lua').write_bytes(t.extractfile('valkey_ratelimit-0.1.0/src/valkey_ratelimit/ratelimit.lua').read())\n\
             names = zipfile.ZipFile(sys.argv[1]).namelist()\n\
             print(sorted(n for n in names if n.startswith('valkey_ratelimit/')))",
        ])
        .arg(&wheel)
        .arg(&sdist)
        .arg(&shipped);
    let listing = common::run_to_completion(extract, RUN_TIMEOUT);
    let repo_copy = fs::read(backend::library_path()).expect("read functions/ratelimit.lua");
    for name in ["wheel.lua", "sdist.lua"] {
        let copy = fs::read(shipped.join(name)).expect("read the shipped copy");
        assert!(
            copy == repo_copy,
            "{name} differs from functions/ratelimit.lua"
        );
    }
    for file in [
        "ratelimit.lua",
        "py.typed",
        "_sync.py",
        "_aio.py",
        "_limiters.py",
        "asgi.py",
    ] {
        assert!(
            listing.contains(&format!("'valkey_ratelimit/{file}'")),
            "{file} missing from the wheel: {listing}"
        );
    }

    let site = scratch.0.join("site");
    let mut install = Command::new(&python);
    install
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--disable-pip-version-check",
            "--target",
        ])
        .arg(&site)
        .arg(&wheel);
    common::run_to_completion(install, RUN_TIMEOUT);
    let server = Server::start_without_module(NO_MODULES);
    let mut load = Command::new(&python);
    load.current_dir(&scratch.0)
        .env("PYTHONPATH", &site)
        .env("VALKEY_PORT", server.port.to_string())
        .args([
            "-c",
            "import os, valkey, valkey_ratelimit as v\n\
             from valkey_ratelimit import RateLimitMiddleware\n\
             assert v.__file__.startswith(os.environ['PYTHONPATH']), v.__file__\n\
             c = valkey.Valkey(port=int(os.environ['VALKEY_PORT']))\n\
             d = v.Limiter(c, timeout=5).admit('k', limit=1, window_ms=1000)\n\
             print(v.__version__, d.admitted, d.backend, c.execute_command('FCALL_RO', 'rl_version', '0').decode())",
        ]);
    assert_eq!(
        common::run_to_completion(load, RUN_TIMEOUT).trim(),
        "0.1.0 True functions 0.1.0"
    );
}
