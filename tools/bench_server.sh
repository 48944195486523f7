# shellcheck shell=bash
# Sourced by tools/latency_check.sh and tools/perf_sweep.sh: one graphbandit server on loopback
# for a measurement, warmed up until its dictionary is full, and stopped by its PID.
#
#   bench_start_warm_server SERVER CONFIG WORK_DIR PORT METRICS_PORT LOADGEN M
#     starts SERVER with CONFIG and a fresh state directory under WORK_DIR, waits until it
#     serves, then sends rewarded decisions (closed loop, 8 callers, 20 candidates, d = 16) in
#     rounds of 10 s until the dictionary holds M points (at most 12 rounds). Exits the calling
#     script with status 1 if the server does not start, the load generator fails or the
#     dictionary stays short of M. Sets server_pid.
#   bench_stop_server
#     stops the server started last (by PID), if it runs.
# BENCH_SERVER_CPUS and BENCH_LOADGEN_CPUS (taskset CPU lists, e.g. 0 and 1), when set, pin the
# server and every load generator run to those cores.
#   bench_loadgen LOADGEN REPORT LOG ARGS...
#     runs LOADGEN with a fresh JSON report REPORT (its output in LOG). Exit status 2 (a
#     SelectArm failed or a reward was not learned) is a result to report; any other failure,
#     or no report, exits the calling script with status 1.

server_pid=""

bench_stop_server() {
  if [[ -n "$server_pid" ]] && kill -0 "$server_pid" 2>/dev/null; then
    kill "$server_pid"
    wait "$server_pid" 2>/dev/null || true
  fi
  server_pid=""
}

bench_loadgen() {
  local loadgen=$1 report=$2 log=$3
  shift 3
  rm -f "$report"  # a run that fails before writing must not be read as the previous one
  local status=0
  local pin=()
  [[ -n "${BENCH_LOADGEN_CPUS:-}" ]] && pin=(taskset -c "$BENCH_LOADGEN_CPUS")
  "${pin[@]}" "$loadgen" --report_json="$report" "$@" >"$log" 2>&1 || status=$?
  if [[ $status -ne 0 && $status -ne 2 ]] || [[ ! -s "$report" ]]; then
    echo "graphbandit-loadgen failed (exit status $status); its output:" >&2
    tail -20 "$log" >&2
    exit 1
  fi
}

bench_start_warm_server() {
  local server=$1 config=$2 work=$3 port=$4 metrics_port=$5 loadgen=$6 m=$7
  rm -rf "$work/state"
  local pin=()
  [[ -n "${BENCH_SERVER_CPUS:-}" ]] && pin=(taskset -c "$BENCH_SERVER_CPUS")
  "${pin[@]}" "$server" --config="$config" --state_dir="$work/state" --listen="127.0.0.1:$port" \
    --metrics_listen="127.0.0.1:$metrics_port" >"$work/server.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 100); do
    grep -q "serving gRPC" "$work/server.log" && break
    sleep 0.2
  done
  if ! grep -q "serving gRPC" "$work/server.log"; then
    echo "the server did not start; its log:" >&2
    cat "$work/server.log" >&2
    exit 1
  fi
  local dictionary=0
  for _ in $(seq 12); do
    bench_loadgen "$loadgen" "$work/warm.json" "$work/warm.log" --target="127.0.0.1:$port" \
      --metrics_url="" --mode=closed --concurrency=8 --candidates=20 --dim=16 \
      --warmup_seconds=0 --baseline_seconds=0 --duration_seconds=10 --reward_ratio=1 \
      --roofline=false --progress=false
    dictionary=$(python3 -c 'import json, sys; print(int(json.load(open(sys.argv[1]))["dictionary_size"]))' \
      "$work/warm.json" 2>/dev/null || echo 0)
    [[ "${dictionary:-0}" -ge "$m" ]] && break
  done
  if [[ "${dictionary:-0}" -lt "$m" ]]; then
    echo "the dictionary reached ${dictionary:-0} of $m points in 120 s of warm-up; not measuring" >&2
    exit 1
  fi
  echo "warmed: dictionary $dictionary of $m" >&2
}
