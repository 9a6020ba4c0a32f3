#!/usr/bin/env bash
# Install what the framework packages' tests (tests/frameworks.rs) and their
# examples' tests (tests/clients.rs) need, at pinned versions:
#   - Python: clients/python/requirements-test.txt (valkey, starlette,
#     uvicorn, httpx, build, hatchling and what they pull in) into the venv
#     .deps/clients-venv (the tests use its python; override with $RL_CLIENTS_PYTHON);
#   - Node.js: `npm ci` in clients/node (package-lock.json: express,
#     express-rate-limit, iovalkey), into its node_modules.
# Needs python3 with venv/ensurepip (Debian: python3-venv), node and npm.
# Idempotent: safe to run again; scripts/setup.sh (make test) calls it when
# the pin files changed since the last install.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$REPO/.deps/clients-venv"

if [[ -x "$VENV/bin/python" ]] && ! "$VENV/bin/python" -c '' 2>/dev/null; then
    echo "+ rm -rf $VENV   # broken (its python3 is gone)"
    rm -rf "$VENV"
fi
if [[ ! -x "$VENV/bin/python" ]]; then
    echo "+ python3 -m venv $VENV"
    python3 -m venv "$VENV"
fi
echo "+ $VENV/bin/python -m pip install -r clients/python/requirements-test.txt"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
    -r "$REPO/clients/python/requirements-test.txt"
cp "$REPO/clients/python/requirements-test.txt" "$VENV/installed-requirements.txt"
"$VENV/bin/python" -c 'import valkey, starlette, uvicorn, httpx; print("python valkey", valkey.__version__, "starlette", starlette.__version__, "uvicorn", uvicorn.__version__, "httpx", httpx.__version__)'

echo "+ (cd clients/node && npm ci)"
(cd "$REPO/clients/node" && npm ci --no-audit --no-fund --loglevel=error)
# What scripts/setup.sh compares to tell that the install is current.
cp "$REPO/clients/node/package-lock.json" "$REPO/clients/node/node_modules/.installed-package-lock.json"
(cd "$REPO/clients/node" &&
    node -e 'const fs = require("node:fs");
const v = (p) => JSON.parse(fs.readFileSync("node_modules/" + p + "/package.json", "utf8")).version;
console.log("node", process.version, "express", v("express"), "express-rate-limit", v("express-rate-limit"), "iovalkey", v("iovalkey"))')
