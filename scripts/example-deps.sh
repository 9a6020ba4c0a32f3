#!/usr/bin/env bash
# Install the client libraries the examples (and tests/clients.rs) need, at the
# pinned versions:
#   - Python: examples/python/requirements.txt into the venv .deps/examples-venv
#     (the tests use its python; override with $RL_PYTHON);
#   - Node.js: `npm ci` in examples/node (package-lock.json), into its node_modules.
# Needs python3 with venv/ensurepip (Debian: python3-venv), node and npm.
# Idempotent: safe to run again; `make example-deps` and .ci/run call it.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$REPO/.deps/examples-venv"

if [[ -x "$VENV/bin/python" ]] && ! "$VENV/bin/python" -c '' 2>/dev/null; then
    echo "+ rm -rf $VENV   # broken (its python3 is gone)"
    rm -rf "$VENV"
fi
if [[ ! -x "$VENV/bin/python" ]]; then
    echo "+ python3 -m venv $VENV"
    python3 -m venv "$VENV"
fi
echo "+ $VENV/bin/python -m pip install -r examples/python/requirements.txt"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
    -r "$REPO/examples/python/requirements.txt"
"$VENV/bin/python" -c 'import valkey; print("python valkey", valkey.__version__)'

echo "+ (cd examples/node && npm ci)"
(cd "$REPO/examples/node" && npm ci --no-audit --no-fund --loglevel=error)
(cd "$REPO/examples/node" &&
    node -e 'console.log("node", process.version, "iovalkey", require("iovalkey/package.json").version)')
