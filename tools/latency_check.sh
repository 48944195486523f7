#!/usr/bin/env bash
# The two end-to-end latency checks in one run, on one fresh server with the served defaults
# (EK-UCB, max_dictionary_size 256, hyper-parameter fits on, snapshots and fdatasync as
# configured by default):
#
#   1. closed-loop saturation, C = 50, d = 16, decisions only, with the health baseline and the
#      roofline R printed by graphbandit-loadgen;
#   2. open loop at a fraction (default 0.5) of that SelectArm rate, a reward for every decision:
#      SelectArm p50/p99/p99.9, errors, freshness and whether every acknowledged reward was
#      learned.
#
#   tools/latency_check.sh SERVER_BINARY LOADGEN_BINARY [OUT_DIR]
#
# Environment: CHECK_M (256), CHECK_CALLERS (16), CHECK_FRACTION (0.5), CHECK_SECONDS (30, the
# open-loop measured interval), CHECK_RUNS (1, open-loop runs, each on a fresh warmed server),
# CHECK_RATE (the open-loop rate, instead of the fraction of the measured saturation),
# CHECK_COSTS (1: also measure what a health call and a decision cost both processes' CPU, with
# one caller and, decisions only, in open loop at the check's rate, and what a health call costs
# the server in open loop at the same fraction of the health saturation; 0 skips it),
# CHECK_PORT (50081), CHECK_CONFIG_EXTRA (text appended to the model's configuration block),
# CHECK_PIN (1: the server on core 0 and the load generator on core 1, with taskset, so that
# they do not share cores; 0, the default, leaves both to the scheduler),
# CHECK_SATURATION_REWARDS (1: saturation is measured with a reward for every decision, the
# rewarded-decision saturation; 0, the default, with decisions only, as PERFORMANCE.md first measured it).
# The JSON reports and the load generator's output are kept in OUT_DIR (default: a temporary
# directory, removed); each open-loop run's log (open-N.log) has a line per second with that
# second's rates and slowest SelectArm, to place a stall in the run. Everything it starts it
# stops, by PID.
set -euo pipefail
server=${1:?server binary}
loadgen=${2:?loadgen binary}
out_dir=${3:-}
m=${CHECK_M:-256}
callers=${CHECK_CALLERS:-16}
fraction=${CHECK_FRACTION:-0.5}
seconds=${CHECK_SECONDS:-30}
runs=${CHECK_RUNS:-1}
port=${CHECK_PORT:-50081}
saturation_rewards=${CHECK_SATURATION_REWARDS:-0}
if [[ "${CHECK_PIN:-0}" == 1 ]]; then
  export BENCH_SERVER_CPUS=0 BENCH_LOADGEN_CPUS=1
fi
metrics_port=$((port + 1))
work=$(mktemp -d /tmp/graphbandit-latency.XXXXXX)
[[ -n "$out_dir" ]] || out_dir="$work/reports"
mkdir -p "$out_dir"
# shellcheck source=tools/bench_server.sh
source "$(dirname "$0")/bench_server.sh"
if [[ -n "${CHECK_RATE:-}" ]] && ! [[ "$CHECK_RATE" =~ ^[0-9]+([.][0-9]+)?$ ]]; then
  echo "CHECK_RATE must be a positive number of requests per second, not \"$CHECK_RATE\"" >&2
  exit 2
fi
cleanup() {
  bench_stop_server
  rm -rf "$work"
}
trap cleanup EXIT

cat >"$work/config.textproto" <<EOF
default_model: "default"
models {
  name: "default"
  policy: EK_UCB
  nystrom { max_dictionary_size: $m }
  ${CHECK_CONFIG_EXTRA:-}
}
EOF

# A fresh server, warmed up with rewarded decisions until its dictionary is full.
start_warm_server() {
  bench_start_warm_server "$server" "$work/config.textproto" "$work" "$port" "$metrics_port" \
    "$loadgen" "$m"
}

start_warm_server
bench_loadgen "$loadgen" "$out_dir/saturation.json" "$out_dir/saturation.log" \
  --target="127.0.0.1:$port" \
  --metrics_url="http://127.0.0.1:$metrics_port/metrics" --mode=closed --concurrency="$callers" \
  --candidates=50 --dim=16 --warmup_seconds=2 --baseline_seconds=3 --duration_seconds=10 \
  --reward_ratio="$saturation_rewards" --progress=false
server_cores=$(nproc)
[[ -n "${BENCH_SERVER_CPUS:-}" ]] && server_cores=1
rate=$(python3 - "$out_dir/saturation.json" "$fraction" "$saturation_rewards" "$server_cores" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
s = r["select"]
# With rewards, a closed loop can decide faster than the writer learns (the backlog shows as
# freshness): the sustainable rewarded-decision rate is also bounded by the server's cores over
# its CPU per decision through the learning of its reward.
saturation = s["throughput_per_second"]
learned_ms = r.get("server_cpu_ms_per_select_learned")
if sys.argv[3] != "0" and learned_ms:
    sustainable = float(sys.argv[4]) * 1e3 / learned_ms
    print("rewarded-decision saturation: closed loop %d/s; %s server core(s) / %.3f ms of server "
          "CPU per decision through learning (%.1fx a health call) = %.0f/s; the lower is used" % (
              saturation, sys.argv[4], learned_ms, r.get("server_cpu_select_over_health") or 0,
              sustainable), file=sys.stderr)
    saturation = min(saturation, sustainable)
num = lambda x: "-" if x is None else "%.3f" % x
print("saturation: %d SelectArm/s with %s callers (errors %d); health %s/s; F %.3g flops; "
      "P %.1f GFLOP/s; R %.0f/s; SelectArm / R = %.2f; CPU per decision: server %s ms, "
      "load generator %s ms" % (
          s["throughput_per_second"], r.get("concurrency", "?"), s["errors"],
          "%.0f" % r["baseline"]["throughput_per_second"] if r.get("baseline") else "-",
          r["flops_per_request"] or 0, (r["product_flops_per_second"] or 0) / 1e9,
          r["roofline_rpc_per_second"] or 0, r["select_over_roofline"] or 0,
          num(r.get("server_cpu_ms_per_select")), num(r.get("loadgen_cpu_ms_per_select"))),
      file=sys.stderr)
print("%.0f" % (float(sys.argv[2]) * saturation))
PY
)
if [[ -n "${CHECK_RATE:-}" ]]; then
  echo "open-loop rate set by CHECK_RATE: $CHECK_RATE/s (instead of $rate/s)" >&2
  rate=$CHECK_RATE
fi

# What each call costs the machine (both processes' CPU), on the same server: a bare gRPC round
# trip (health) and a decision with one caller, then decisions alone in open loop at the check's
# rate, then health calls alone in open loop at the check's fraction of the health saturation
# (the premium a bare call pays when calls come one at a time). With CHECK_COSTS=0, skipped.
if [[ "${CHECK_COSTS:-1}" != 0 ]]; then
  bench_loadgen "$loadgen" "$out_dir/costs-one-caller.json" "$out_dir/costs-one-caller.log" \
    --target="127.0.0.1:$port" --metrics_url="http://127.0.0.1:$metrics_port/metrics" \
    --mode=closed --concurrency=1 --candidates=50 --dim=16 --warmup_seconds=1 \
    --baseline_seconds=5 --duration_seconds=5 --reward_ratio=0 --roofline=false --progress=false
  bench_loadgen "$loadgen" "$out_dir/costs-open-decisions.json" \
    "$out_dir/costs-open-decisions.log" --target="127.0.0.1:$port" \
    --metrics_url="http://127.0.0.1:$metrics_port/metrics" --mode=open --rate="$rate" \
    --concurrency=64 --candidates=50 --dim=16 --warmup_seconds=2 --baseline_seconds=0 \
    --duration_seconds=10 --reward_ratio=0 --roofline=false --progress=false
  # Health calls alone, in open loop at the same fraction of the health saturation measured in
  # step 1: what the server's core pays per bare call when calls come one at a time.
  health_rate=$(python3 - "$out_dir/saturation.json" "$fraction" <<'PY'
import json, sys
baseline = json.load(open(sys.argv[1])).get("baseline")
if not baseline or not baseline.get("throughput_per_second"):
    sys.exit("latency_check: the saturation run has no health baseline to take a rate from")
rate = round(baseline["throughput_per_second"] * float(sys.argv[2]))
if rate < 1:
    sys.exit("latency_check: the health rate rounds to %d calls/s; nothing to measure" % rate)
print(rate)
PY
)
  bench_loadgen "$loadgen" "$out_dir/costs-open-health.json" "$out_dir/costs-open-health.log" \
    --target="127.0.0.1:$port" --metrics_url="http://127.0.0.1:$metrics_port/metrics" \
    --mode=closed --concurrency=64 --candidates=50 --dim=16 --warmup_seconds=0 \
    --baseline_seconds=5 --baseline_rate="$health_rate" --duration_seconds=0.2 --reward_ratio=0 \
    --roofline=false --progress=false
  python3 - "$out_dir" "$rate" <<'PY' >&2
import json, sys
one = json.load(open(sys.argv[1] + "/costs-one-caller.json"))
opn = json.load(open(sys.argv[1] + "/costs-open-decisions.json"))
sat = json.load(open(sys.argv[1] + "/saturation.json"))
ms = lambda x: "-" if x is None else "%.2f" % (1e3 * x)
def both(server, loadgen):
    if server is None or loadgen is None:
        return "-"
    return "%.3f ms (server %.3f + load generator %.3f)" % (server + loadgen, server, loadgen)
print("CPU per call, both processes: health with one caller %s; SelectArm with one caller %s; "
      "SelectArm at saturation %s; SelectArm alone in open loop at %s/s %s (p99 %s ms)" % (
          both(one.get("baseline_server_cpu_ms_per_call"),
               one.get("baseline_loadgen_cpu_ms_per_call")),
          both(one.get("server_cpu_ms_per_select"), one.get("loadgen_cpu_ms_per_select")),
          both(sat.get("server_cpu_ms_per_select"), sat.get("loadgen_cpu_ms_per_select")),
          sys.argv[2],
          both(opn.get("server_cpu_ms_per_select"), opn.get("loadgen_cpu_ms_per_select")),
          ms(((opn.get("select") or {}).get("latency_seconds") or {}).get("p99"))))
health = json.load(open(sys.argv[1] + "/costs-open-health.json"))
closed_ms, open_ms = sat.get("baseline_server_cpu_ms_per_call"), health.get("baseline_server_cpu_ms_per_call")
b = health.get("baseline") or {}
print("Server CPU per health call: closed loop at %.0f/s %s ms; open loop at %.0f/s %s ms (%s the "
      "closed loop's), p99 %s ms, errors %s, sent late %s" % (
          (sat.get("baseline") or {}).get("throughput_per_second", 0),
          "-" if closed_ms is None else "%.4f" % closed_ms, b.get("throughput_per_second", 0),
          "-" if open_ms is None else "%.4f" % open_ms,
          "%.2fx" % (open_ms / closed_ms) if closed_ms and open_ms else "-",
          ms((b.get("latency_seconds") or {}).get("p99")), b.get("errors", "-"),
          b.get("late_sends", "-")))
PY
fi
bench_stop_server

for run in $(seq "$runs"); do
  start_warm_server
  bench_loadgen "$loadgen" "$out_dir/open-$run.json" "$out_dir/open-$run.log" \
    --target="127.0.0.1:$port" \
    --metrics_url="http://127.0.0.1:$metrics_port/metrics" --mode=open --rate="$rate" \
    --concurrency=64 --candidates=50 --dim=16 --warmup_seconds=3 --baseline_seconds=0 \
    --roofline=false --duration_seconds="$seconds" --reward_ratio=1 --progress=true
  bench_stop_server
  python3 - "$out_dir/open-$run.json" "$rate" "$run" <<'PY'
import json, os, sys
r = json.load(open(sys.argv[1]))
s, w = r["select"], r.get("reward") or {}
lat = s["latency_seconds"]
ms = lambda x: "-" if x is None else "%.2f" % (1e3 * x)
num = lambda x: "-" if x is None else "%.3f" % x
def busy(r):
    # Both processes' CPU over the measured interval against the cores this script may use
    # (its affinity mask; a cgroup CPU quota is not looked at). The CPU window also covers
    # sending the rewards still due at the interval's end, so this reads a little high.
    server, loadgen = r.get("server_cpu_seconds"), r.get("loadgen_cpu_seconds")
    seconds = r["select"].get("seconds") or 0
    if server is None or loadgen is None or seconds <= 0:
        return ""
    cores = len(os.sched_getaffinity(0)) or 1
    return " (%.2f of %d cores busy)" % ((server + loadgen) / seconds, cores)
fresh = r["freshness_p99_seconds_at_most"]
print("open loop run %s at %s/s: SelectArm %d/s p50 %s p99 %s p99.9 %s max %s ms, errors %d, "
      "sent late %d; ReportReward p99 %s ms, errors %d; freshness p99 <= %s s; learned %d of %d; "
      "CPU per rewarded decision: server %s ms, load generator %s ms%s"
      % (sys.argv[3], sys.argv[2], s["throughput_per_second"], ms(lat["p50"]), ms(lat["p99"]),
         ms(lat["p99_9"]), ms(lat["max"]), s["errors"], s["late_sends"],
         ms((w.get("latency_seconds") or {}).get("p99")), w.get("errors", 0),
         "-" if fresh is None else fresh, r["learned_rewards"], r["accepted_rewards"],
         num(r.get("server_cpu_ms_per_select")), num(r.get("loadgen_cpu_ms_per_select")),
         busy(r)))
PY
done
