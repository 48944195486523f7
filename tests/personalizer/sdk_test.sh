#!/usr/bin/env bash
# Azure Personalizer's own JavaScript SDK (npm @azure/cognitiveservices-personalizer 2.0.1 on
# @azure/ms-rest-js 2.7.0) against the server's Personalizer-compatible REST API (--http_listen):
# rank/reward/activate, a wrong key (401), bad requests (400/404) and learning a categorical task,
# all through the SDK (tests/personalizer/sdk_test.mjs says what exactly). The npm packages are
# installed with `npm ci` from the committed lock file into a cache outside the repository, keyed
# by the lock's hash, as tests/deploy/k8s_test.sh does; a cache hit needs no registry.
#
# usage: sdk_test.sh BUILD_DIR
# needs: node and npm (Debian: nodejs, npm), and the npm registry the first time.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=$(cd "$1" && pwd)
server=$build/server/graphbandit-server

work=$(mktemp -d)
pid=""
cleanup() {
  if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid"; fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM  # through the EXIT trap

fail() {
  echo "FAIL: $*" >&2
  [[ -f $work/server.log ]] && sed 's/^/  server: /' "$work/server.log" | tail -40 >&2
  exit 1
}
need() {
  command -v "$1" >/dev/null 2>&1 || fail "'$1' is not installed: $2 (tools/dev.sh installs it)"
}
need node "install Debian's nodejs (apt-get install nodejs)"
need npm "install Debian's npm (apt-get install npm)"
[[ -x $server ]] || fail "build the server first ($server)"
echo "node: $(node --version), npm: $(npm --version)"

# --- npm dependencies, cached outside the repository ----------------------------------------
key=$(cat "$here/package.json" "$here/package-lock.json" | sha256sum | cut -c1-16)
cache_root=${XDG_CACHE_HOME:-${HOME:-$build}/.cache}/graphbandit/personalizer-sdk
deps=$cache_root/$key
if [[ ! -f $deps/.complete ]]; then
  echo "installing the Personalizer SDK's npm packages into $deps"
  mkdir -p "$cache_root"
  rm -rf "$deps"
  staging=$(mktemp -d "$cache_root/staging.XXXXXX")
  cp "$here/package.json" "$here/package-lock.json" "$staging/"
  if ! (cd "$staging" && timeout 600 npm ci --no-audit --no-fund --ignore-scripts --loglevel=error) \
      > "$work/npm.log" 2>&1; then
    rm -rf "$staging"
    fail "npm ci failed (is the npm registry reachable?): $(tail -20 "$work/npm.log")"
  fi
  touch "$staging/.complete"
  # Another run may have finished first: keep whichever copy landed.
  mv -T "$staging" "$deps" 2>/dev/null || rm -rf "$staging"
fi
# ES modules ignore NODE_PATH; Node resolves packages from the script's own directory: run a copy
# next to the cached modules.
mkdir "$work/js"
cp "$here/sdk_test.mjs" "$work/js/"
ln -s "$deps/node_modules" "$work/js/node_modules"

# --- the server, with the REST API and a key ------------------------------------------------
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$work/key"
"$server" --listen=127.0.0.1:0 --metrics_listen= --http_listen=127.0.0.1:0 \
  --state_dir="$work/state" --bandit_token_file="$work/key" --port_file="$work/ports" \
  2>> "$work/server.log" &
pid=$!
ports=()
for _ in $(seq 150); do
  [[ -s $work/ports ]] && read -r -a ports < "$work/ports"
  [[ ${#ports[@]} -ge 3 ]] && break
  kill -0 "$pid" 2>/dev/null || { wait "$pid" || true; pid=""; fail "the server exited at start"; }
  sleep 0.1
done
[[ ${#ports[@]} -ge 3 && ${ports[2]} -gt 0 ]] \
  || fail "the server wrote no HTTP port to $work/ports within 15 s: '${ports[*]}'"
endpoint=http://127.0.0.1:${ports[2]}
echo "server pid $pid, Personalizer API at $endpoint"

# --- the SDK's checks -------------------------------------------------------------------------
status=0
PERSONALIZER_ENDPOINT=$endpoint PERSONALIZER_KEY=$(cat "$work/key") \
  timeout 120 node "$work/js/sdk_test.mjs" || status=$?
[[ $status -eq 0 ]] || fail "the Personalizer SDK checks failed (status $status)"

# --- a clean stop -----------------------------------------------------------------------------
kill -TERM "$pid"
for _ in $(seq 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$pid" 2>/dev/null && fail "the server did not stop within 15 s of SIGTERM"
status=0
wait "$pid" || status=$?
pid=""
[[ $status -eq 0 ]] || fail "the server exited with status $status after SIGTERM"
grep -q "stopped cleanly" "$work/server.log" || fail "no clean stop in the server log"
echo "ok   the server stopped cleanly on SIGTERM"
