#!/usr/bin/env bash
# Plays the load generator once per seed, each against a fresh server (loopback, free ports,
# temporary state), and prints one line per run: throughput, latency and the regret ratio.
# Reproduces the figures quoted in the README.
#
# usage: tools/loadtest_sweep.sh [--build=DIR] [--server_flags="..."] [--loadtest_flags="..."] SEED...
set -euo pipefail
build=build
server_flags=""
loadtest_flags="--rounds=10000 --concurrency=4 --users=20"
seeds=()
for arg in "$@"; do
  case "$arg" in
    --build=*) build=${arg#*=} ;;
    --server_flags=*) server_flags=${arg#*=} ;;
    --loadtest_flags=*) loadtest_flags=${arg#*=} ;;
    *) seeds+=("$arg") ;;
  esac
done
((${#seeds[@]})) || { echo "usage: $0 [--build=DIR] [--server_flags=...] [--loadtest_flags=...] SEED..." >&2; exit 64; }

printf "%-5s %10s %9s %9s %9s %9s %11s %11s %9s %6s\n" seed rounds/s sel_p50 sel_p90 sel_p99 rew_p99 first_avg last_avg last/first dict
for seed in "${seeds[@]}"; do
  work=$(mktemp -d)
  # shellcheck disable=SC2086
  "$build/server/graphbandit-server" --listen=127.0.0.1:0 --metrics_listen= --state_dir="$work/state" \
    --port_file="$work/ports" $server_flags 2>"$work/server.log" &
  pid=$!
  for _ in $(seq 100); do [[ -s $work/ports ]] && break; sleep 0.1; done
  read -r port _ < "$work/ports"
  # shellcheck disable=SC2086
  "$build/client/graphbandit-loadtest" --target="127.0.0.1:$port" --seed="$seed" $loadtest_flags \
    --report_json="$work/report.json" >/dev/null || echo "seed $seed: loadtest exited $?" >&2
  kill -TERM "$pid"
  wait "$pid" || true
  python3 - "$seed" "$work/report.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[2]))
lat, reg = r["latency_ms"], r["regret"]
nan = float("nan")  # an undefined figure is left out of the report
print("%-5s %10.1f %9.3f %9.3f %9.3f %9.3f %11.5f %11.5f %9.3f %6s" % (
    sys.argv[1], r["throughput"]["rounds_per_second"], lat["select_arm"].get("p50", nan),
    lat["select_arm"].get("p90", nan), lat["select_arm"].get("p99", nan),
    lat["report_reward"].get("p99", nan), reg.get("first_average", nan),
    reg.get("last_average", nan), reg.get("last_over_first", nan),
    r["model_after"]["dictionary_size"]))
EOF
  rm -rf "$work"
done
