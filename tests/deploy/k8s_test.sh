#!/usr/bin/env bash
# The Kubernetes base in deploy/k8s, rendered and checked offline:
#  1. `kubectl kustomize deploy/k8s` renders it (Debian's kubernetes-client is kubectl 1.20).
#  2. tests/deploy/k8s/validate.mjs validates every object against the Kubernetes OpenAPI schemas of the
#     npm `kubernetes-models` package (types, enums, required fields, unknown kinds, and unknown
#     fields such as a misspelled `readinesProbe`). The npm packages are installed with `npm ci`
#     from the committed lock file into a cache outside the repository, keyed by the lock's hash.
#  3. tests/deploy/k8s/checks.mjs checks the objects against the server's flags: probe ports = the gRPC
#     port of --listen, metrics annotations = --metrics_listen, terminationGracePeriodSeconds >
#     --shutdown_grace_seconds, the state volume, the ConfigMap behind --config, Services, PDB,
#     security context.
#  4. The real graphbandit-server starts with the container's arguments (addresses and paths
#     moved to loopback and a temporary directory) and the rendered ConfigMap's textproto as
#     --config, answers health, hosts the configured models with the configured values, and
#     stops cleanly on SIGTERM within the drain grace.
#  5. The cluster overlay (deploy/k8s/cluster: three replicas, NATS JetStream, HAProxy) is
#     rendered, validated the same way, checked by checks.mjs (the server's flags) and
#     cluster_checks.mjs (NATS, the replicas' cluster block and HAProxy point at each other), and
#     its rendered configurations are run by the real nats-server, graphbandit-server and haproxy
#     on loopback (tests/deploy/k8s_cluster_run.py).
# Each checker is also fed a deliberately broken input and must reject it.
#
# usage: k8s_test.sh SOURCE_DIR BUILD_DIR
# needs: kubectl (Debian: kubernetes-client), node and npm (Debian: nodejs, npm), and the npm
# registry the first time (later runs reuse the cache).
set -euo pipefail
src=$(cd "$1" && pwd)
build=$(cd "$2" && pwd)
server=$build/server/graphbandit-server
cli=$build/client/graphbandit-cli

work=$(mktemp -d)
pid=""
cleanup() {
  if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid"; fi
  rm -rf "$work"
}
trap cleanup EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }

need() {
  command -v "$1" >/dev/null 2>&1 || fail "'$1' is not installed: $2 (tools/dev.sh installs it)"
}
need kubectl "install Debian's kubernetes-client (apt-get install kubernetes-client)"
need node "install Debian's nodejs (apt-get install nodejs)"
need npm "install Debian's npm (apt-get install npm)"
need nats-server "install Debian's nats-server (apt-get install nats-server)"
need haproxy "install Debian's haproxy (apt-get install haproxy)"
[[ -x $server && -x $cli ]] || fail "build the server and the CLI first ($server, $cli)"
echo "kubectl: $(kubectl version --client 2>/dev/null | head -1)"
echo "node: $(node --version), npm: $(npm --version)"

# --- 1. render -----------------------------------------------------------------------------
kubectl kustomize "$src/deploy/k8s" > "$work/rendered.yaml" 2> "$work/kustomize.err" \
  || fail "kubectl kustomize deploy/k8s failed: $(cat "$work/kustomize.err")"
echo "rendered $(grep -c '^kind:' "$work/rendered.yaml") objects"

# --- npm dependencies, cached outside the repository ----------------------------------------
pkg=$src/tests/deploy/k8s
key=$(cat "$pkg/package.json" "$pkg/package-lock.json" | sha256sum | cut -c1-16)
cache_root=${XDG_CACHE_HOME:-${HOME:-$build}/.cache}/graphbandit/k8s-validate
deps=$cache_root/$key
if [[ ! -f $deps/.complete ]]; then
  echo "installing the validator's npm packages into $deps"
  mkdir -p "$cache_root"
  rm -rf "$deps"
  staging=$(mktemp -d "$cache_root/staging.XXXXXX")
  cp "$pkg/package.json" "$pkg/package-lock.json" "$staging/"
  if ! (cd "$staging" && timeout 600 npm ci --no-audit --no-fund --ignore-scripts --loglevel=error) \
      > "$work/npm.log" 2>&1; then
    rm -rf "$staging"
    fail "npm ci failed (is the npm registry reachable?): $(tail -20 "$work/npm.log")"
  fi
  touch "$staging/.complete"
  # Another run may have finished first: keep whichever copy landed.
  mv -T "$staging" "$deps" 2>/dev/null || rm -rf "$staging"
fi
# Node resolves packages from the script's own directory: run copies next to the cached modules.
mkdir "$work/js"
cp "$pkg/validate.mjs" "$pkg/checks.mjs" "$pkg/cluster_checks.mjs" "$pkg/checking.mjs" "$work/js/"
ln -s "$deps/node_modules" "$work/js/node_modules"

# --- 2. schema validation --------------------------------------------------------------------
node "$work/js/validate.mjs" "$work/rendered.yaml" || fail "schema validation failed"

# The validator must catch what it claims to catch.
rendered=$work/rendered.yaml  # what expect_reject breaks
expect_reject() {  # expect_reject WHAT PATTERN SED_EXPRESSION SCRIPT [ARGS]
  local what=$1 pattern=$2 expr=$3 script=$4
  shift 4
  sed "$expr" "$rendered" > "$work/broken.yaml"
  cmp -s "$rendered" "$work/broken.yaml" && fail "could not break the manifests for: $what"
  if node "$work/js/$script" "$work/broken.yaml" "$@" > "$work/broken.out" 2>&1; then
    fail "$script accepted $what"
  fi
  grep -q "$pattern" "$work/broken.out" || fail "$script rejected $what without saying '$pattern': $(cat "$work/broken.out")"
  echo "ok   $script rejects $what"
}
expect_reject "a misspelled field" "unknown field(s): .*/readinesProbe" \
  's/readinessProbe:/readinesProbe:/' validate.mjs
expect_reject "a string where an integer belongs" "must be integer" \
  's/containerPort: \([0-9]*\)/containerPort: "\1"/' validate.mjs
expect_reject "an unknown kind" "unknown apiVersion/kind" \
  's/^kind: PodDisruptionBudget$/kind: PodDisruptionBudgetX/' validate.mjs

# --- 3. consistency with the server's flags -------------------------------------------------
mkdir "$work/out"
node "$work/js/checks.mjs" "$work/rendered.yaml" "$work/out" || fail "consistency checks failed"
mkdir "$work/broken_out"
expect_reject "a probe on the wrong port" "readinessProbe gRPC port" \
  '/readinessProbe:/,/port:/s/port: [0-9]*/port: 50052/' checks.mjs "$work/broken_out"
expect_reject "a grace period below the drain grace" "terminationGracePeriodSeconds" \
  's/terminationGracePeriodSeconds: [0-9]*/terminationGracePeriodSeconds: 5/' checks.mjs "$work/broken_out"

# --- 4. the real server with the rendered configuration -------------------------------------
mapfile -t args < "$work/out/args"
run=()
grace=""
for a in "${args[@]}"; do
  case $a in
    --listen=*) run+=(--listen=127.0.0.1:0) ;;
    --metrics_listen=*) run+=(--metrics_listen=127.0.0.1:0) ;;
    --state_dir=*) run+=(--state_dir="$work/state") ;;
    --config=*) run+=(--config="$work/out/config.textproto") ;;
    --port_file=*) fail "the container should not set --port_file" ;;
    --shutdown_grace_seconds=*) grace=${a#*=}; run+=("$a") ;;
    *) run+=("$a") ;;
  esac
done
run+=(--port_file="$work/ports")

start_server() {  # start_server LOG: returns 0 once the port file appears, 1 if the server exits
  rm -f "$work/ports"
  "$server" "${run[@]}" 2> "$1" &
  pid=$!
  for _ in $(seq 150); do
    [[ -s $work/ports ]] && return 0
    kill -0 "$pid" 2>/dev/null || { wait "$pid" || true; pid=""; return 1; }
    sleep 0.1
  done
  fail "the server neither started nor exited within 15 s: $(cat "$1")"
}

# A configuration the server refuses must be noticed: a misspelled field.
config=$work/out/config.textproto
cp "$config" "$work/config.good"
sed -i '0,/max_candidates:/s/max_candidates:/max_candidate:/' "$config"
cmp -s "$config" "$work/config.good" && fail "could not break the configuration"
if start_server "$work/bad.log"; then fail "the server accepted a misspelled config field"; fi
echo "ok   the server refuses a misspelled config field: $(head -1 "$work/bad.log")"
cp "$work/config.good" "$config"

start_server "$work/server.log" || fail "the server did not start with the rendered configuration: $(cat "$work/server.log")"
read -r grpc_port _ < "$work/ports"
target=127.0.0.1:$grpc_port
echo "ok   the server started with the rendered ConfigMap and arguments: ${run[*]}"
[[ $("$cli" --target="$target" health) == SERVING ]] || fail "health is not SERVING"

# Every model the ConfigMap declares is served, with the values it sets.
models=$(grep -oP '^\s*name:\s*"\K[^"]+' "$config" || true)
[[ -n $models ]] || fail "the ConfigMap declares no model"
for model in $models; do
  "$cli" --target="$target" DescribeModel "{\"model\":\"$model\"}" > "$work/describe.json" \
    || fail "DescribeModel $model failed"
  grep -q "\"name\": \"$model\"" "$work/describe.json" || fail "model $model is not served"
done
if [[ $(wc -w <<<"$models") == 1 ]]; then
  for key in reward_window_seconds max_candidates max_dictionary_size max_decisions; do
    value=$(grep -oP "^\s*$key:\s*\K[0-9]+" "$config" | head -1 || true)
    [[ -z $value ]] && continue
    grep -qE "\"$key\": \"?$value\"?[,}]?$" "$work/describe.json" \
      || fail "DescribeModel does not show $key = $value from the ConfigMap"
    echo "ok   $models: $key = $value"
  done
fi

# SIGTERM drains within the grace the kubelet gives (checked above to be larger).
kill -TERM "$pid"
deadline=$(( ${grace%.*} + 10 ))
for _ in $(seq $(( deadline * 10 ))); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$pid" 2>/dev/null && fail "the server did not stop within ${deadline} s of SIGTERM"
status=0
wait "$pid" || status=$?
pid=""
[[ $status -eq 0 ]] || fail "the server exited with status $status after SIGTERM: $(cat "$work/server.log")"
echo "ok   the server stopped cleanly on SIGTERM"

# --- 5. the cluster overlay ------------------------------------------------------------------
kubectl kustomize "$src/deploy/k8s/cluster" > "$work/cluster.yaml" 2> "$work/kustomize.err" \
  || fail "kubectl kustomize deploy/k8s/cluster failed: $(cat "$work/kustomize.err")"
echo "rendered the cluster overlay: $(grep -c '^kind:' "$work/cluster.yaml") objects"
node "$work/js/validate.mjs" "$work/cluster.yaml" || fail "schema validation of the cluster overlay failed"
mkdir "$work/cluster_out"
node "$work/js/checks.mjs" "$work/cluster.yaml" "$work/cluster_out" \
  || fail "the cluster overlay's server does not match the server's flags"
node "$work/js/cluster_checks.mjs" "$work/cluster.yaml" "$work/cluster_out" \
  || fail "cluster consistency checks failed"
rendered=$work/cluster.yaml
expect_reject "a NATS route to a pod that does not exist" "routes" \
  's|nats://nats-2.nats:6222|nats://nats-3.nats:6222|' cluster_checks.mjs "$work/broken_out"
expect_reject "replicas pointed at the NATS cluster port" "nats_servers" \
  's|"nats://nats-1.nats:4222"|"nats://nats-1.nats:6222"|' cluster_checks.mjs "$work/broken_out"
expect_reject "a proxy that resends calls a replica may have received" "retry-on" \
  's|retry-on conn-failure|retry-on conn-failure empty-response|' cluster_checks.mjs "$work/broken_out"
expect_reject "a single replica in cluster mode" "cluster mode with 1 replica" \
  '0,/^  replicas: 3$/s/^  replicas: 3$/  replicas: 1/' checks.mjs "$work/broken_out"
/usr/bin/python3 "$src/tests/deploy/k8s_cluster_run.py" "$work/cluster_out" "$build" \
  || fail "the cluster overlay's configurations did not run"
echo "k8s manifests: all checks passed"
