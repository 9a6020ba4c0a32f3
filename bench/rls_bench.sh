#!/usr/bin/env bash
# make bench-rls: valkey-rls under load (rls/src/bin/rls-load.rs), against
# the same decisions made by a client calling RL.ADMIT / RL.ADMITALL
# directly, for 1 and 3 descriptors a request, on one throwaway server with
# the module. Writes bench/results/rls-<date>-valkey-<version>.md.
#   RLS_BENCH_SECONDS (default 10), RLS_BENCH_CONCURRENCY (default 16).
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
server="${VALKEY_SERVER:-$(scripts/valkey-server.sh)}"
seconds="${RLS_BENCH_SECONDS:-10}"
conc="${RLS_BENCH_CONCURRENCY:-16}"
load="target/rls/rls-load"
[[ -x $load && -x target/release/valkey-rls ]] || make --no-print-directory rls
dir="$(mktemp -d)"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$dir"; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
vport=$(free_port); gport=$(free_port); hport=$(free_port)
"$server" --port "$vport" --save "" --appendonly no --dir "$dir" \
    --loadmodule "$REPO/target/release/libvalkey_ratelimit.so" >"$dir/valkey.log" 2>&1 &
pids+=($!)
cat >"$dir/bench.yaml" <<'YAML'
domain: bench
descriptors:
  - {key: d1, rate_limit: {unit: minute, requests_per_unit: 1000000000}}
  - {key: d2, rate_limit: {unit: minute, requests_per_unit: 1000000000}}
  - {key: d3, rate_limit: {unit: minute, requests_per_unit: 1000000000}}
YAML
target/release/valkey-rls --config "$dir/bench.yaml" --valkey "127.0.0.1:$vport" \
    --grpc-addr "127.0.0.1:$gport" --http-addr "127.0.0.1:$hport" --log-level warn >"$dir/rls.log" 2>&1 &
rls=$!
pids+=($rls)
for _ in $(seq 100); do
    curl -fs -o /dev/null "http://127.0.0.1:$hport/healthcheck" && break
    sleep 0.1
done
version=$("$server" --version | sed -n 's/.*v=\([0-9.]*\).*/\1/p')
out="bench/results/rls-$(date -u +%F)-valkey-$version-c$conc.md"
rows=()
for n in 1 3; do
    for mode in grpc direct; do
        # A short warm-up, then the measured run.
        "$load" --mode "$mode" --descriptors "$n" --concurrency "$conc" --seconds 1 \
            --grpc "http://127.0.0.1:$gport" --valkey "redis://127.0.0.1:$vport" >/dev/null
        line=$("$load" --mode "$mode" --descriptors "$n" --concurrency "$conc" --seconds "$seconds" \
            --grpc "http://127.0.0.1:$gport" --valkey "redis://127.0.0.1:$vport" --rls-pid "$rls")
        echo "$line"
        rows+=("$line")
    done
done
{
    echo "# valkey-rls: ShouldRateLimit against direct RL.ADMIT/RL.ADMITALL"
    echo
    echo "$(date -u +%F), Valkey $version with the module, $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')),"
    echo "$conc concurrent callers, ${seconds} s a row, fixed window, limits never reached, 1000 tenants."
    echo "Load generator, service and Valkey share the machine. \`make bench-rls\` (bench/rls_bench.sh)."
    echo
    echo "| descriptors | caller | requests/s | p50 µs | p99 µs | Valkey calls / decision | Valkey µs / decision | service CPU s | requests/s per service core |"
    echo "|---|---|---|---|---|---|---|---|---|"
    printf '%s\n' "${rows[@]}" | python3 bench/rls_table.py
    echo
    echo "Raw rows:"
    echo
    for r in "${rows[@]}"; do echo "    $r"; done
} >"$out"
echo "wrote $out"
