#!/usr/bin/env bash
# Two builds of graphbandit-server against each other at the default operating point, with the
# same load generator: does a change cost gRPC throughput?
#
#   tools/ab_servers.sh SERVER_A SERVER_B LOADGEN [ROUNDS] [ORDER]
#
# Each of ROUNDS (default 3) rounds starts each server in turn (ORDER "ab", the default, or
# "ba") with a fresh state directory and the default model (EK-UCB, dictionary cap 1,000), warms
# it until the dictionary holds 1,000 points (tools/bench_server.sh), then runs the load
# generator's closed loop (8 callers, C = 50, d = 16, a reward for every decision) for 10 s
# after its health-check baseline of 3 s, in the same run. One line per run on stdout:
# SelectArm/s, health/s, their ratio, p50, errors, server CPU per decision and per health call,
# and rewards learned of those accepted. Ports 50091/50092 on 127.0.0.1. Every server is
# stopped by its PID. Read pairs of the same round, on a quiet machine.
set -euo pipefail
if [[ $# -lt 3 ]]; then
  sed -n '2,14p' "$0" >&2
  exit 64
fi
server_a=$1
server_b=$2
loadgen=$3
rounds=${4:-3}
order=${5:-ab}
if [[ ! $rounds =~ ^[1-9][0-9]*$ ]]; then
  echo "ROUNDS must be a positive whole number, got '$rounds'" >&2
  exit 64
fi
if [[ $order != ab && $order != ba ]]; then
  echo "ORDER must be ab or ba, got '$order'" >&2
  exit 64
fi
# shellcheck source=tools/bench_server.sh
source "$(dirname "$0")/bench_server.sh"
work=$(mktemp -d)
trap 'bench_stop_server; rm -rf "$work"' EXIT
cat >"$work/config.textproto" <<CFG
default_model: "default"
models { name: "default" policy: EK_UCB nystrom { max_dictionary_size: 1000 } }
CFG
labels=(a b)
[[ $order == ba ]] && labels=(b a)
for round in $(seq "$rounds"); do
  for which in "${labels[@]}"; do
    server=$server_a
    [[ $which == b ]] && server=$server_b
    bench_start_warm_server "$server" "$work/config.textproto" "$work" 50091 50092 "$loadgen" 1000
    bench_loadgen "$loadgen" "$work/run.json" "$work/run.log" --target=127.0.0.1:50091 \
      --metrics_url=http://127.0.0.1:50092/metrics --mode=closed --concurrency=8 \
      --warmup_seconds=2 --baseline_seconds=3 --duration_seconds=10 --reward_ratio=1 \
      --progress=false
    bench_stop_server
    python3 - "$work/run.json" "$which" "$round" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
s = r["select"]
b = r.get("baseline") or {}
def num(x, fmt, scale=1.0):  # the load generator reports null for what it could not measure
    return "n/a" if x is None else format(x * scale, fmt)
print(f"round {sys.argv[3]} {sys.argv[2]}: select/s {num(s['throughput_per_second'], '.1f')} "
      f"health/s {num(b.get('throughput_per_second'), '.1f')} "
      f"select/health {num(r.get('select_over_health'), '.4f')} "
      f"p50 {num(s['latency_seconds'].get('p50'), '.3f', 1e3)} ms errors {s['errors']} "
      f"server CPU per decision {num(r.get('server_cpu_ms_per_select'), '.3f')} ms "
      f"per health call {num(r.get('baseline_server_cpu_ms_per_call'), '.4f')} ms "
      f"learned {r.get('learned_rewards')}/{r.get('accepted_rewards')}")
PY
  done
done
