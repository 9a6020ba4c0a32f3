"""bench/rls_bench.sh's table: rls-load's JSON lines on stdin, one
Markdown row each on stdout."""
import json
import sys

for line in sys.stdin:
    if not line.strip():
        continue
    d = json.loads(line)
    grpc = d["mode"] == "grpc"
    caller = "valkey-rls (gRPC)" if grpc else "direct RL.ADMIT/RL.ADMITALL"
    cpu = d["service_cpu_s"] if grpc else "-"
    per_core = d["rps_per_service_core"] if grpc else "-"
    print(
        f"| {d['descriptors']} | {caller} | {d['rps']} | {d['p50_us']} | {d['p99_us']} | "
        f"{d['valkey_calls_per_decision']} | {d['valkey_us_per_decision']} | {cpu} | {per_core} |"
    )
