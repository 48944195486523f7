#!/usr/bin/env bash
# Runs the README's "Coming from Personalizer" examples as written: the first sh block (make a
# key, start the server with --http_listen) with free loopback ports in place of the README's,
# then the second block (curl: rank, reward, activate) verbatim, with `endpoint` and `key` set
# as the README says. The curl block runs twice: over HTTP, and over HTTPS with a certificate
# made here by openssl (curl is pointed at it through CURL_CA_BUNDLE). Checks what each call
# printed, and that the decision and its reward reached the model (the metrics).
#
#   tests/personalizer/readme_examples_test.sh BUILD_DIR
set -euo pipefail

build=$(cd "${1:?usage: $0 BUILD_DIR}" && pwd)
source_dir=$(cd "$(dirname "$0")/../.." && pwd)
server="$build/server/graphbandit-server"
# shellcheck source=tests/client/server_lib.sh
source "$source_dir/tests/client/server_lib.sh"
command -v curl > /dev/null || fail "curl is missing (apt-get install curl)"
command -v openssl > /dev/null || fail "openssl is missing (apt-get install openssl)"

# --- the two sh blocks of the section -------------------------------------------------------
section=$(awk '/^## Coming from Personalizer$/ {on = 1; next} on && /^## / {exit} on' \
  "$source_dir/README.md")
[[ -n "$section" ]] || fail "README.md has no section '## Coming from Personalizer'"
block() {  # the Nth (1-based) ```sh block of the section
  awk -v want="$1" '/^```sh$/ {n++; inside = (n == want); next} /^```$/ {inside = 0} inside' \
    <<< "$section"
}
setup=$(block 1)
calls=$(block 2)
[[ -n "$setup" && -n "$calls" ]] || fail "the section should hold two sh blocks"

# The set-up block: one key command, one server command.
key_line=$(grep -E '^openssl rand ' <<< "$setup") || fail "no 'openssl rand' line in: $setup"
server_line=$(grep -E '^build/server/graphbandit-server ' <<< "$setup") ||
  fail "no server command in: $setup"
[[ $(grep -cvE '^\s*$' <<< "$setup") -eq 2 ]] || fail "unexpected lines in the set-up block: $setup"
grep -q -- '--http_listen=' <<< "$server_line" || fail "the server command lacks --http_listen"
# `endpoint` and `key` as the README's text sets them.
# shellcheck disable=SC2016  # the README's text, literally
grep -qF '`endpoint=http://127.0.0.1:8080 key=$(cat personalizer.key)`' <<< "$section" ||
  fail "the README no longer says how endpoint and key are set"

cd "$work"
eval "${key_line%%#*}"
[[ -s personalizer.key ]] || fail "the key command made no personalizer.key"

# Starts the README's server command with free ports (a later flag overrides an earlier one)
# and the state in $work; extra flags follow. Sets pid and http_port.
start_readme_server() {
  local args
  read -r -a args <<< "${server_line#build/server/graphbandit-server }"
  rm -f "$work/ports"
  : > "$work/server.log"  # stop_server looks for this run's clean stop
  "$server" "${args[@]}" --http_listen=127.0.0.1:0 --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 \
    --state_dir="$work/state-$1" --port_file="$work/ports" "${@:2}" 2>> "$work/server.log" &
  pid=$!
  for _ in $(seq 100); do [[ -s $work/ports ]] && break; sleep 0.1; done
  [[ -s $work/ports ]] || fail "server did not start"
  read -r grpc_port metrics_port http_port < "$work/ports"
  [[ -n "${http_port:-}" ]] || fail "the port file names no HTTP port: $(cat "$work/ports")"
}

# Runs the curl block as written; checks its output and the model's metrics.
run_calls() {
  local scheme=$1 out
  out=$(endpoint="$scheme://127.0.0.1:$http_port" key=$(cat personalizer.key) \
    bash -euo pipefail -c "$calls" 2>&1) || fail "the README's curl block failed over $scheme: $out"
  python3 - "$out" << 'EOF' || fail "unexpected output over $scheme: $out"
import json, sys
rank = json.loads(sys.argv[1])  # the rank answer is the only output: reward and activate print nothing
ids = [a["id"] for a in rank["ranking"]]
assert ids[-1] == "salad" and rank["ranking"][-1]["probability"] == 0, ids
assert sorted(ids) == ["curry", "pasta", "salad"], ids
assert rank["eventId"] == "order-1001", rank
assert rank["rewardActionId"] == ids[0] and ids[0] in ("pasta", "curry"), rank
assert abs(sum(a["probability"] for a in rank["ranking"]) - 1) < 1e-9, rank
EOF
  local metrics
  metrics=$(curl -sS "http://127.0.0.1:$metrics_port/metrics")
  for method in Rank Reward Activate; do
    grep -qF "graphbandit_rpc_requests_total{code=\"OK\",method=\"Personalizer.$method\"} 1" \
      <<< "$metrics" || fail "Personalizer.$method was not counted once over $scheme"
  done
  echo "ok: the README's rank, reward and activate over $scheme"
}

start_readme_server http
run_calls http
stop_server

# HTTPS: the same block, with the server's certificate (for 127.0.0.1) trusted by curl.
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=127.0.0.1" \
  -addext "subjectAltName=IP:127.0.0.1,DNS:localhost" \
  -keyout "$work/tls.key" -out "$work/tls.crt" 2> /dev/null || fail "openssl could not make a certificate"
start_readme_server https --tls_cert_file="$work/tls.crt" --tls_key_file="$work/tls.key"
export CURL_CA_BUNDLE="$work/tls.crt"
run_calls https
# Plain HTTP to the HTTPS port gets nothing.
if curl -sS -o /dev/null "http://127.0.0.1:$http_port/personalizer/v1.0/rank" 2> /dev/null; then
  fail "the HTTPS port answered plain HTTP"
fi
stop_server
echo "PASS: the README's Personalizer examples"
