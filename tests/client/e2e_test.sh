#!/usr/bin/env bash
# End to end with the real programs, as a user would run them: start graphbandit-server on
# loopback (free ports), check health and reflection with graphbandit-cli, play the load
# generator and check that regret falls, read /metrics, stop the server with SIGTERM, restart
# it on the same state directory and check that the log was replayed.
#
# usage: e2e_test.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
server=$build/server/graphbandit-server
cli=$build/client/graphbandit-cli
loadtest=$build/client/graphbandit-loadtest

# shellcheck source=tests/client/server_lib.sh
source "$(dirname "$0")/server_lib.sh"

json_number() {  # json_number FILE KEY: the first number after "KEY": (64-bit integers are quoted)
  grep -o "\"$2\": \"\?[-0-9.eE+]*" "$1" | head -1 | awk '{print $2}' | tr -d '"'
}

start_server
[[ $("$cli" --target="$target" health) == SERVING ]] || fail "health is not SERVING"
grep -qx graphbandit.v1.BanditService <<< "$("$cli" --target="$target" services)" || fail "reflection does not list the service"

"$loadtest" --target="$target" --rounds=3000 --concurrency=4 --users=20 --seed=3 \
  --compare_window=1000 --report_json="$work/report.json" > "$work/loadtest.out" || fail "loadtest failed: $(cat "$work/loadtest.out")"
cat "$work/loadtest.out"
for key in p50 p90 p99; do grep -q "$key" "$work/loadtest.out" || fail "no $key latency printed"; done
[[ $(json_number "$work/report.json" rounds_completed) == 3000 ]] || fail "not every round completed"
ratio=$(json_number "$work/report.json" last_over_first)
[[ -n $ratio ]] && awk -v r="$ratio" 'BEGIN { exit !(r < 0.5) }' || fail "regret did not halve: last/first = $ratio"
grep -A2 '"windows": \[' "$work/report.json" | grep -q '"start": "0"' \
  || fail "no per-window regret in the JSON report"

metrics=$(curl -sf "http://127.0.0.1:$metrics_port/metrics") || fail "cannot read /metrics"
for series in 'graphbandit_rpc_requests_total{code="OK",method="SelectArm"} 3000' \
              'graphbandit_rewards_total{model="default",outcome="accepted"} 3000' \
              'graphbandit_rewards_learned{model="default"} 3000' \
              'graphbandit_users{model="default"} 20'; do
  grep -qF "$series" <<<"$metrics" || fail "metrics lack: $series"
done
grep -qE '^graphbandit_dictionary_size\{model="default"\} [1-9]' <<<"$metrics" || fail "dictionary size is 0"
grep -qF 'graphbandit_state_freshness_seconds_count{model="default"} 3000' <<<"$metrics" \
  || fail "no freshness observation per learned reward"
grep -qE '^graphbandit_state_freshness_seconds_bucket\{model="default",le="\+Inf"\} 3000' <<<"$metrics" \
  || fail "freshness histogram has no +Inf bucket"
grep -qE '^graphbandit_rpc_duration_seconds_count\{code="OK",method="ReportReward"\} 3000' <<<"$metrics" \
  || fail "no ReportReward latency histogram"

stop_server
start_server
# SIGTERM wrote a final snapshot: the restart loads it and has nothing to replay.
grep -qE 'snapshot at record [1-9][0-9]*, 0 log records replayed in [0-9.]+ s, 3000 rewards learned, 20 users' \
  "$work/server.log" || fail "restart did not start from the shutdown snapshot"
grep -q '"rewards_learned": "3000"' <<< "$("$cli" --target="$target" DescribeModel '{}')" || fail "DescribeModel after restart"
stop_server
echo "PASS"
