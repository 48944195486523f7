#!/usr/bin/env bash
# graphbandit-loadgen against a real server on loopback: closed loop with rewards and the health
# baseline, then open loop at a fixed rate with delayed rewards on two channels and two
# completion threads. Checks its reports for what the flags ask (calls, reward ratio, every
# reward learned) and its count of accepted rewards against the server's own (/metrics).
#
# usage: loadgen_test.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
server=$build/server/graphbandit-server
loadgen=$build/client/graphbandit-loadgen

# shellcheck source=tests/client/server_lib.sh
source "$(dirname "$0")/server_lib.sh"

# json FILE EXPR: a value from the report (Debian's python3, as the rest of the tools).
json() { /usr/bin/python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"; }
metric() {  # metric NAME_AND_LABELS: its value on /metrics (0 when absent)
  curl -sf "http://127.0.0.1:$metrics_port/metrics" | awk -v k="$1" '$1 == k { print $2; f = 1 } END { if (!f) print 0 }'
}

# The first server's model learns cheaply: fixed hyper-parameters and at most 200 dictionary
# points. This test checks the generator and its reports, not the server's capacity (bench/ and
# PERFORMANCE.md measure the default model). With the default model, a neighbour test on a
# 2-core CI machine can slow the writer enough that the backlog of the warm-up's rewards holds
# back decisions (they wait up to durability.max_learning_lag), and the 2-s closed loop below
# then completed 10 calls instead of thousands.
cat > "$work/cheap.textproto" <<'CONFIG'
models {
  name: "default"
  hyperparameters { fit: false }
  nystrom { max_dictionary_size: 200 }
}
CONFIG
start_server --config="$work/cheap.textproto"
url=http://127.0.0.1:$metrics_port/metrics

# Closed loop: 4 callers, a reward for every decision, the health baseline and the roofline.
cpu_outer_before=$(metric process_cpu_seconds_total) || fail "cannot read /metrics"
"$loadgen" --target="$target" --metrics_url="$url" --mode=closed --concurrency=4 --candidates=10 \
  --dim=8 --warmup_seconds=0.5 --baseline_seconds=0.5 --duration_seconds=2 --reward_ratio=1 \
  --progress=false --report_json="$work/closed.json" >"$work/closed.out" 2>&1 \
  || fail "closed loop exited with $?: $(cat "$work/closed.out")"
cpu_outer_after=$(metric process_cpu_seconds_total) || fail "cannot read /metrics"
cpu_outer=$(/usr/bin/python3 -c 'import sys; print(float(sys.argv[2]) - float(sys.argv[1]))' \
  "$cpu_outer_before" "$cpu_outer_after")
cat "$work/closed.out"
calls=$(json "$work/closed.json" 'r["select"]["calls"]') || fail "no SelectArm summary in the report"
[[ $calls -gt 100 ]] || fail "closed loop completed only $calls SelectArm calls in 2 s"
[[ $(json "$work/closed.json" 'r["select"]["errors"]') == 0 ]] || fail "closed loop had errors"
[[ $(json "$work/closed.json" 'r["reward"]["calls"] > 100 and r["reward"]["errors"] == 0') == True ]] \
  || fail "closed loop: no rewards, or rewards with errors"
[[ $(json "$work/closed.json" 'r["baseline"]["calls"] > 0') == True ]] || fail "no health baseline"
[[ $(json "$work/closed.json" 'r["select_over_roofline"] > 0') == True ]] || fail "no roofline ratio"
for p in p50 p90 p99 p99_9 max; do
  [[ $(json "$work/closed.json" "r['select']['latency_seconds']['$p'] > 0") == True ]] || fail "no $p"
done
# CPU on both sides over the measured interval (2 s, plus the rewards still due): some, and no
# more than every core of this machine for the whole time (the server's from its
# process_cpu_seconds_total on /metrics, the generator's from getrusage).
cores=$(nproc)
[[ $(json "$work/closed.json" "0 < r['server_cpu_seconds'] <= $cores * 4 and 0 < r['loadgen_cpu_seconds'] <= $cores * 4") == True ]] \
  || fail "implausible CPU seconds: server $(json "$work/closed.json" 'r["server_cpu_seconds"]'), generator $(json "$work/closed.json" 'r["loadgen_cpu_seconds"]')"
# The generator's two windows on the server's counter (the health baseline, then the measured
# interval) do not overlap and lie inside the one read here around the whole run, so together
# they cannot exceed it (the counter is the server's getrusage and never goes down; 0.02 s of
# slack for the text format's rounding).
[[ $(json "$work/closed.json" "0 < r['server_cpu_seconds'] and 0 < r['baseline_server_cpu_ms_per_call'] and r['server_cpu_seconds'] + r['baseline_server_cpu_ms_per_call'] * r['baseline']['calls'] / 1e3 <= $cpu_outer + 0.02") == True ]] \
  || fail "server CPU: measured interval $(json "$work/closed.json" 'r["server_cpu_seconds"]') s plus baseline, more than the whole run's $cpu_outer s"
[[ $(json "$work/closed.json" "abs(r['server_cpu_ms_per_select'] * r['select']['calls'] - 1e3 * r['server_cpu_seconds']) < 1e-3 * r['server_cpu_seconds'] + 1e-6") == True ]] \
  || fail "server CPU per SelectArm is not its CPU seconds over the calls"
grep -q "CPU per SelectArm (with its rewards), measured interval: server [0-9.]* ms" "$work/closed.out" \
  || fail "no CPU line in the report"
[[ $(json "$work/closed.json" "0 < r['baseline_server_cpu_ms_per_call'] and 0 < r['baseline_loadgen_cpu_ms_per_call']") == True ]] \
  || fail "no CPU per health call in the report"
accepted=$(json "$work/closed.json" 'r["accepted_rewards"]')
[[ $accepted -gt 100 && $(json "$work/closed.json" 'r["learned_rewards"]') == "$accepted" ]] \
  || fail "not every accepted reward was learned"
# The server saw what the generator says it sent (warm-up included in both).
[[ $(metric 'graphbandit_rewards_total{model="default",outcome="accepted"}') == "$accepted" ]] \
  || fail "the server accepted $(metric 'graphbandit_rewards_total{model="default",outcome="accepted"}') rewards, the report says $accepted"

# Open loop: 200 requests/s for 2 s, rewards 50 ms later. The schedule sends request i at
# i / rate whatever the answers do (a late one still goes, its latency counted from when it was
# due), so the measured interval holds exactly 400 calls.
"$loadgen" --target="$target" --metrics_url="$url" --mode=open --rate=200 --concurrency=8 \
  --channels=2 --client_threads=2 \
  --candidates=10 --dim=8 --warmup_seconds=0.5 --baseline_seconds=0 --duration_seconds=2 \
  --reward_ratio=0.5 --reward_delay_ms=50 --roofline=false --progress=false \
  --report_json="$work/open.json" >"$work/open.out" 2>&1 \
  || fail "open loop exited with $?: $(cat "$work/open.out")"
cat "$work/open.out"
[[ $(json "$work/open.json" 'r["select"]["calls"]') == 400 ]] \
  || fail "open loop at 200/s for 2 s made $(json "$work/open.json" 'r["select"]["calls"]') calls"
[[ $(json "$work/open.json" 'r["select"]["errors"]') == 0 ]] || fail "open loop had errors"
# Half of the 500 decisions rewarded (warm-up included): 250 expected, standard deviation 11;
# ratios of 0.4 or 0.6 would land outside.
[[ $(json "$work/open.json" '215 <= r["accepted_rewards"] <= 285') == True ]] \
  || fail "reward_ratio 0.5 gave $(json "$work/open.json" 'r["accepted_rewards"]') rewards"
[[ $(json "$work/open.json" 'r["learned_rewards"] == r["accepted_rewards"]') == True ]] \
  || fail "open loop: not every accepted reward was learned"

# A --metrics_url that answers an error status gives no server CPU (null), even when the error
# page's body looks like metrics: a stand-in on loopback answers 500 with a counter that grows.
/usr/bin/python3 - "$work/fake-port" <<'PY' &
import http.server, sys, threading
calls = [0]
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        calls[0] += 1
        body = ("process_cpu_seconds_total %d\n" % calls[0]).encode()
        self.send_response(500)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
import os; os.rename(sys.argv[1] + ".tmp", sys.argv[1])
threading.Timer(60, server.shutdown).start()  # stops by itself if the test dies
server.serve_forever()
PY
fake_pid=$!
for _ in $(seq 100); do [[ -s $work/fake-port ]] && break; sleep 0.1; done
[[ -s $work/fake-port ]] || fail "the stand-in metrics server did not start"
"$loadgen" --target="$target" --metrics_url="http://127.0.0.1:$(cat "$work/fake-port")/metrics" \
  --mode=closed --concurrency=1 --candidates=10 --dim=8 --warmup_seconds=0 --baseline_seconds=0.2 \
  --duration_seconds=0.5 --reward_ratio=0 --roofline=false --progress=false \
  --report_json="$work/bad-url.json" >"$work/bad-url.out" 2>&1 \
  || fail "a metrics URL answering 500 made the run fail: $(cat "$work/bad-url.out")"
kill "$fake_pid" 2>/dev/null || true
wait "$fake_pid" 2>/dev/null || true
[[ $(json "$work/bad-url.json" 'r["server_cpu_seconds"] is None and r["baseline_server_cpu_ms_per_call"] is None and r["loadgen_cpu_seconds"] > 0') == True ]] \
  || fail "server CPU read off a 500 page: $(json "$work/bad-url.json" '(r["server_cpu_seconds"], r["baseline_server_cpu_ms_per_call"])')"
grep -q -- "--metrics_url: GET .* answered \"HTTP/1.0 500 .*\", not 200" "$work/bad-url.out" \
  || fail "the generator did not say its metrics URL answered 500: $(cat "$work/bad-url.out")"

# The health baseline as an open loop: exactly the calls due in its interval (200/s for 1 s),
# each answered, and no closed-loop ceiling to set the roofline or the ratio to health against.
"$loadgen" --target="$target" --metrics_url="$url" --mode=closed --concurrency=8 --candidates=10 \
  --dim=8 --warmup_seconds=0 --baseline_seconds=1 --baseline_rate=200 --duration_seconds=0.5 \
  --reward_ratio=0 --progress=false --report_json="$work/open-baseline.json" \
  >"$work/open-baseline.out" 2>&1 \
  || fail "open-loop baseline exited with $?: $(cat "$work/open-baseline.out")"
[[ $(json "$work/open-baseline.json" 'r["baseline_rate"] == 200 and r["baseline"]["calls"] == 200 and r["baseline"]["errors"] == 0') == True ]] \
  || fail "open-loop baseline: $(json "$work/open-baseline.json" '(r["baseline_rate"], r["baseline"]["calls"], r["baseline"]["errors"])'), not 200 calls at 200/s without errors"
[[ $(json "$work/open-baseline.json" 'abs(r["baseline"]["throughput_per_second"] - 200) < 1e-6 and r["select_over_health"] is None and r["roofline_rpc_per_second"] is None and r["baseline_server_cpu_ms_per_call"] > 0') == True ]] \
  || fail "open-loop baseline: rate, ratio, roofline or CPU per call wrong: $(cat "$work/open-baseline.json")"
[[ $(json "$work/closed.json" 'r["baseline_rate"] == 0') == True ]] || fail "closed-loop baseline not reported as such"
grep -q "open loop at 200 calls/s; sent more than 1 ms after their scheduled time:" "$work/open-baseline.out" \
  || fail "no open-loop line for the baseline: $(cat "$work/open-baseline.out")"
[[ $(json "$work/open-baseline.json" 'r["server_cpu_select_over_health"] is None') == True ]] \
  || fail "a CPU ratio against an open-loop health call"

# A rate one caller cannot keep: calls leave late, and their latency counts from when they were
# due (100,000/s for 0.25 s with one call in flight: 25,000 calls, which take at least 0.5 s if
# a gRPC round trip on loopback takes 20 us or more; about 60 us here, so the last ones are
# seconds late). 20,000/s was too close to what a fast machine keeps up with.
"$loadgen" --target="$target" --metrics_url="$url" --mode=closed --concurrency=1 --candidates=10 \
  --dim=8 --warmup_seconds=0 --baseline_seconds=0.25 --baseline_rate=100000 --duration_seconds=0.2 \
  --reward_ratio=0 --progress=false --report_json="$work/late-baseline.json" \
  >"$work/late-baseline.out" 2>&1 \
  || fail "late open-loop baseline exited with $?: $(cat "$work/late-baseline.out")"
[[ $(json "$work/late-baseline.json" 'r["baseline"]["calls"] == 25000 and r["baseline"]["late_sends"] > 5000 and r["baseline"]["latency_seconds"]["max"] > 0.1') == True ]] \
  || fail "an overloaded open-loop baseline: $(json "$work/late-baseline.json" 'r["baseline"]')"

# Bad flags are refused before anything is sent.
for bad in "--baseline_rate=-1" "--baseline_rate=inf" "--baseline_rate=nan" "--baseline_rate=1e300" \
  "--baseline_rate=10 --baseline_seconds=0" "--mode=open --rate=inf"; do
  status=0
  # shellcheck disable=SC2086  # the flags are meant to split
  "$loadgen" --target="$target" $bad >/dev/null 2>&1 || status=$?
  [[ $status == 64 ]] || fail "$bad exited with $status, not 64"
done
status=0
"$loadgen" --target="$target" --mode=open --rate=0 >/dev/null 2>&1 || status=$?
[[ $status == 64 ]] || fail "--mode=open --rate=0 exited with $status, not 64"
status=0
"$loadgen" --target="$target" --client_threads=0 >/dev/null 2>&1 || status=$?
[[ $status == 64 ]] || fail "--client_threads=0 exited with $status, not 64"
status=0
"$loadgen" --target="$target" --features=sparse >/dev/null 2>&1 || status=$?
[[ $status == 64 ]] || fail "--features=sparse exited with $status, not 64"
stop_server

# Named features, against a fresh model (the one above has dense dimensions for good): the
# model takes its default slots from the first request, and the roofline's d counts them. The
# same decisions then go to the Personalizer REST API (--http_target), with its key.
rm -rf "$work/state"
echo "loadgen-test-key" > "$work/key"
start_server --http_listen=127.0.0.1:0 --bandit_token_file="$work/key"
url=http://127.0.0.1:$metrics_port/metrics
"$loadgen" --target="$target" --token_file="$work/key" --metrics_url="$url" --mode=closed \
  --concurrency=2 --candidates=10 --dim=4 --context_dim=2 --features=named --warmup_seconds=0.3 \
  --baseline_seconds=0.3 --duration_seconds=1 --reward_ratio=1 --progress=false \
  --http_target="127.0.0.1:$http_port" --http_key_file="$work/key" \
  --report_json="$work/named.json" >"$work/named.out" 2>&1 \
  || fail "named features exited with $?: $(cat "$work/named.out")"
cat "$work/named.out"
grep -q "d = 128 (named features)" "$work/named.out" || fail "no named header: $(cat "$work/named.out")"
[[ $(json "$work/named.json" 'r["select"]["errors"]') == 0 ]] || fail "named features had errors"
[[ $(json "$work/named.json" 'r["select"]["calls"] > 0 and r["learned_rewards"] == r["accepted_rewards"] > 0') == True ]] \
  || fail "named features: nothing decided or not every reward learned"
# The HTTP phase: every rank and reward answered, and counted by the server as such.
[[ $(json "$work/named.json" 'r["http"]["rank"]["calls"] > 0 and r["http"]["rank"]["errors"] == 0 and r["http"]["reward"]["errors"] == 0 and r["http"]["server_cpu_ms_per_rank"] > 0') == True ]] \
  || fail "the HTTP phase failed: $(json "$work/named.json" 'r["http"]')"
http_ranks=$(json "$work/named.json" 'r["http"]["rank"]["calls"]')
[[ $(metric 'graphbandit_rpc_requests_total{code="OK",method="Personalizer.Rank"}') -ge $http_ranks ]] \
  || fail "the server counted fewer ranks than the $http_ranks the report says"
# Without the key the HTTP phase fails, and says so in its exit status.
status=0
"$loadgen" --target="$target" --token_file="$work/key" --metrics_url= --features=named \
  --candidates=10 --dim=4 --context_dim=2 --warmup_seconds=0 --baseline_seconds=0 \
  --duration_seconds=0.3 --roofline=false --progress=false --http_target="127.0.0.1:$http_port" \
  --report_json="$work/nokey.json" >"$work/nokey.out" 2>&1 || status=$?
[[ $status == 2 && $(json "$work/nokey.json" '"HTTP 401" in r["http"]["rank"]["codes"]') == True ]] \
  || fail "a missing key gave status $status: $(cat "$work/nokey.out")"
stop_server
echo "PASS"
