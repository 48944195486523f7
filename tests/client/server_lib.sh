# shellcheck shell=bash disable=SC2034,SC2154  # server comes from, and the ports go to, the sourcing script
# Sourced by the end-to-end scripts in this folder: a scratch directory removed at exit, and one
# graphbandit-server on loopback (free ports) with its state there, stopped by its PID.
#
#   Set `server` (the binary) before sourcing.
#   start_server [FLAGS...]  starts it with the state in $work/state, its stderr appended to
#                      $work/server.log, and FLAGS added; sets pid, grpc_port, metrics_port,
#                      http_port (with --http_listen) and target.
#   stop_server        SIGTERM; fails unless it exits 0 and logs a clean stop.
#   fail MESSAGE...    prints FAIL with the message and the server's log, exits 1.
# The server is killed when the script exits, however it exits (INT and TERM included).

work=$(mktemp -d)
pid=""
cleanup() {
  if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid"; fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM  # through the EXIT trap

fail() { echo "FAIL: $*" >&2; [[ -f $work/server.log ]] && sed 's/^/  server: /' "$work/server.log" >&2; exit 1; }

start_server() {
  rm -f "$work/ports"
  "$server" --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 --state_dir="$work/state" \
    --port_file="$work/ports" "$@" 2>>"$work/server.log" &
  pid=$!
  for _ in $(seq 100); do [[ -s $work/ports ]] && break; sleep 0.1; done
  [[ -s $work/ports ]] || fail "server did not start"
  read -r grpc_port metrics_port http_port < "$work/ports"
  target=127.0.0.1:$grpc_port
}

stop_server() {
  kill -TERM "$pid"
  local status=0
  wait "$pid" || status=$?
  pid=""
  [[ $status -eq 0 ]] || fail "server exited with status $status after SIGTERM"
  grep -q "stopped cleanly" "$work/server.log" || fail "no clean stop in the server log"
}
