#!/usr/bin/env bash
# The end-to-end sweep of PERFORMANCE.md: for each dictionary size m, a server on loopback with
# max_dictionary_size m (hyper-parameter fits off, so that runs are comparable), warmed up with
# rewarded decisions until its dictionary is full, then graphbandit-loadgen in closed loop for
# every (candidates, concurrency) pair, decisions only, each run with its own health baseline.
# One CSV row per run (the loadgen's JSON report flattened).
#
#   tools/perf_sweep.sh SERVER_BINARY LOADGEN_BINARY OUT.csv [LABEL]
#
# Environment: SWEEP_M ("64 256 1024"), SWEEP_C ("5 50 500"), SWEEP_CONCURRENCY ("1 4 16"),
# SWEEP_SECONDS (5), SWEEP_PORT (50071). Everything it starts it stops, by PID; the state lives
# in a temporary directory that is removed at the end.
set -euo pipefail
server=${1:?server binary}
loadgen=${2:?loadgen binary}
out=${3:?output CSV}
label=${4:-$(basename "$(dirname "$(dirname "$server")")")}
ms=${SWEEP_M:-64 256 1024}
cs=${SWEEP_C:-5 50 500}
concurrencies=${SWEEP_CONCURRENCY:-1 4 16}
seconds=${SWEEP_SECONDS:-5}
port=${SWEEP_PORT:-50071}
metrics_port=$((port + 1))
work=$(mktemp -d /tmp/graphbandit-sweep.XXXXXX)
# shellcheck source=tools/bench_server.sh
source "$(dirname "$0")/bench_server.sh"
cleanup() {
  bench_stop_server
  rm -rf "$work"
}
trap cleanup EXIT

echo "build,m,candidates,concurrency,dictionary,health_per_s,select_per_s,p50_ms,p99_ms,p999_ms,errors,select_over_health,flops_per_request,product_gflops,roofline_per_s,select_over_roofline" >"$out"
for m in $ms; do
  cat >"$work/config.textproto" <<EOF
default_model: "default"
models {
  name: "default"
  policy: EK_UCB
  nystrom { max_dictionary_size: $m }
  hyperparameters { fit: false }
  limits { max_candidates: 1000 }
}
EOF
  bench_start_warm_server "$server" "$work/config.textproto" "$work" "$port" "$metrics_port" \
    "$loadgen" "$m"
  for c in $cs; do
    for n in $concurrencies; do
      "$loadgen" --target="127.0.0.1:$port" --metrics_url="" --mode=closed --concurrency="$n" \
        --candidates="$c" --dim=16 --warmup_seconds=1 --baseline_seconds=2 \
        --duration_seconds="$seconds" --reward_ratio=0 --progress=false \
        --report_json="$work/run.json" >/dev/null 2>&1 || true
      python3 - "$work/run.json" "$label" "$m" "$c" "$n" >>"$out" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
s, b = r["select"], r["baseline"] or {}
lat = s["latency_seconds"]
def ms(x): return "" if x is None else "%.3f" % (1e3 * x)
def num(x, f="%.4f"): return "" if x is None else f % x
print(",".join([sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], str(r["dictionary_size"]),
                num(b.get("throughput_per_second"), "%.0f"), num(s["throughput_per_second"], "%.0f"),
                ms(lat["p50"]), ms(lat["p99"]), ms(lat["p99_9"]), str(s["errors"]),
                num(r["select_over_health"]), num(r["flops_per_request"], "%.4g"),
                num(None if r["product_flops_per_second"] is None else r["product_flops_per_second"] / 1e9, "%.1f"),
                num(r["roofline_rpc_per_second"], "%.0f"), num(r["select_over_roofline"])]))
PY
      tail -1 "$out" >&2
    done
  done
  bench_stop_server
done
