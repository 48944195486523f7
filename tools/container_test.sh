#!/usr/bin/env bash
# The container image, tested end to end with podman (`tools/dev.sh container-test`):
#   1. installs podman, buildah, debootstrap and runc when missing (Debian packages);
#   2. makes the Debian 12 base image from Debian's archive (debootstrap --variant=minbase), since
#      these machines cannot pull from a registry, and imports it as
#      localhost/graphbandit-bookworm-base;
#   3. builds the top-level Dockerfile with BASE_IMAGE set to it (the build stage installs
#      tools/dev.sh's package list, compiles and runs the unit tests);
#   4. runs the image with a named volume on host networking (free loopback ports), drives it from
#      the host with graphbandit-loadtest (3000 rounds; regret must fall), reads /metrics, records
#      DescribeModel, checks the image's HEALTHCHECK, the non-root user and that the runtime image
#      holds no compiler;
#   5. stops it with SIGTERM (podman stop) and requires exit status 0 before the drain grace ends;
#   6. starts a new container on the same volume and requires the same DescribeModel counters;
#   7. prints the image size;
#   8. with --compose, also brings up deploy/compose (graphbandit and a Prometheus built from
#      Debian's package with deploy/compose/prometheus.Dockerfile, host networking override) with
#      docker-compose talking to `podman system service`, and checks that Prometheus scrapes the
#      server (Grafana's image cannot be pulled on these machines and is not started).
# Everything podman makes lives in a scratch storage directory (overlay driver, configured through
# CONTAINERS_STORAGE_CONF / CONTAINERS_CONF) that is wiped on exit, so no container, volume or
# image of this test outlives it.
#
# Environment:
#   GRAPHBANDIT_BUILD_DIR     host build tree with graphbandit-cli and graphbandit-loadtest
#                             (default build/; built with tools/dev.sh build when missing)
#   GRAPHBANDIT_CACHE_DIR     where the debootstrap root file system is cached as a tarball
#                             (default ~/.cache/graphbandit; saves ~1 min per run). Set
#                             GRAPHBANDIT_CACHE_DIR= (empty) to make it afresh in the scratch dir.
#   GRAPHBANDIT_DEBIAN_MIRROR debootstrap mirror (default http://deb.debian.org/debian)
#   GRAPHBANDIT_CONTAINER_STORAGE  a directory to keep podman's storage in instead of a scratch
#                             one: the base and the built image (and build layers) stay there for
#                             faster reruns; containers and volumes are still removed.
#   GRAPHBANDIT_CONTAINER_IMAGE  with GRAPHBANDIT_CONTAINER_STORAGE: test this already built
#                             image from that storage instead of building one
#   RUN_TESTS                 passed to the image build (default 1: unit tests run in the build)
set -euo pipefail
# The whole script is one brace group, so bash parses all of it before running any of it (the
# file may be edited while a long run is in progress).
{
compose=0
for arg in "$@"; do
  case $arg in
    --compose) compose=1 ;;
    *) echo "usage: tools/container_test.sh [--compose]" >&2; exit 64 ;;
  esac
done
cd "$(dirname "$0")/.."
repo=$(pwd)
started=$(date +%s)
say() { echo "container-test [$(($(date +%s) - started))s]: $*" >&2; }

build_dir=${GRAPHBANDIT_BUILD_DIR:-build}
cli=$repo/$build_dir/client/graphbandit-cli
loadtest=$repo/$build_dir/client/graphbandit-loadtest
python=/usr/bin/python3
grace=10           # --shutdown_grace_seconds given to the server
rounds=3000

sudo=()
if [[ $(id -u) -ne 0 ]]; then sudo=(sudo); fi

# ---- 1. tools ----
missing=()
for pair in podman:podman buildah:buildah debootstrap:debootstrap runc:runc curl:curl \
            python3:python3; do
  command -v "${pair%%:*}" >/dev/null 2>&1 || [[ -x /usr/sbin/${pair%%:*} ]] || missing+=("${pair#*:}")
done
if ((${#missing[@]})); then
  say "installing ${missing[*]}"
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq "${missing[@]}" >/dev/null
fi
debootstrap=$(command -v debootstrap || echo /usr/sbin/debootstrap)
if [[ ! -x $cli || ! -x $loadtest ]]; then
  say "no host client programs in $build_dir: tools/dev.sh build"
  tools/dev.sh build
fi

# ---- podman in a scratch configuration ----
work=$(mktemp -d /tmp/gb-container-test.XXXXXX)
storage=${GRAPHBANDIT_CONTAINER_STORAGE:-$work/storage}
mkdir -p "$storage" "$work/tmp"
cat > "$work/storage.conf" <<EOF
[storage]
driver = "overlay"
graphroot = "$storage/root"
runroot = "$storage/run"
EOF
cat > "$work/containers.conf" <<EOF
[containers]
netns = "host"
# This machine lacks CAP_SYS_RESOURCE: ask for limits it can grant.
default_ulimits = ["nofile=20000:20000", "nproc=4096:4096"]
[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
# crun rejects this host's hybrid cgroup layout; runc copes.
runtime = "runc"
tmp_dir = "$storage/tmp"
[network]
network_config_dir = "$storage/networks"
EOF
export CONTAINERS_STORAGE_CONF=$work/storage.conf CONTAINERS_CONF=$work/containers.conf
export TMPDIR=$work/tmp

tag=$$-$RANDOM
base_image=localhost/graphbandit-bookworm-base:latest
image=localhost/graphbandit:container-test-$tag
volume=graphbandit-container-test-$tag
containers=()
service_pid=""
project=gbct$tag

cleanup() {
  local status=$?
  set +e
  if [[ -n $service_pid ]]; then
    [[ -f $work/compose.test.yaml ]] && DOCKER_HOST=unix://$work/podman.sock timeout 120 \
      docker-compose -p "$project" -f "$work/compose.test.yaml" down -v >/dev/null 2>&1
    kill "$service_pid" 2>/dev/null; wait "$service_pid" 2>/dev/null
  fi
  podman ps -aq --filter "label=com.docker.compose.project=$project" | xargs -r podman rm -f >/dev/null 2>&1
  podman volume ls -q --filter "label=com.docker.compose.project=$project" | xargs -r podman volume rm -f >/dev/null 2>&1
  for c in "${containers[@]}"; do podman rm -f -t 0 "$c" >/dev/null 2>&1; done
  podman volume rm -f "$volume" >/dev/null 2>&1
  if [[ -z ${GRAPHBANDIT_CONTAINER_STORAGE:-} ]]; then
    podman rmi -af >/dev/null 2>&1   # everything in the scratch storage: our images only
    # Anything podman left mounted below the scratch directory, before removing it.
    awk -v w="$work/" 'index($2, w) == 1 {print $2}' /proc/mounts | sort -r \
      | while read -r m; do "${sudo[@]}" umount -l "$m"; done
  fi
  "${sudo[@]}" rm -rf "$work"
  if ((status == 0)); then say "PASS (total $(($(date +%s) - started)) s)"; else say "FAIL"; fi
}
trap cleanup EXIT
# A signal ends the test as a failure. Without these traps the EXIT trap saw the status of
# whatever command ran last, and a run killed during the image build reported PASS.
trap 'exit 130' INT
trap 'exit 143' TERM

fail() {
  echo "FAIL: $*" >&2
  local c
  for c in "${containers[@]}"; do
    echo "--- podman logs $c:" >&2
    podman logs "$c" 2>&1 | tail -30 | sed 's/^/  /' >&2
  done
  exit 1
}

# ---- 2. the base image ----
cache_dir=${GRAPHBANDIT_CACHE_DIR-${XDG_CACHE_HOME:-$HOME/.cache}/graphbandit}
tarball=${cache_dir:-$work}/bookworm-minbase-slim-v1.tar
if podman image exists "$base_image"; then
  say "base image $base_image already in the storage"
else
  if [[ ! -s $tarball ]]; then
    say "debootstrap --variant=minbase bookworm (about a minute)"
    mkdir -p "$(dirname "$tarball")"
    "${sudo[@]}" "$debootstrap" --variant=minbase bookworm "$work/rootfs" \
      "${GRAPHBANDIT_DEBIAN_MIRROR:-http://deb.debian.org/debian}" > "$work/debootstrap.log" 2>&1 \
      || { tail -20 "$work/debootstrap.log" >&2; fail "debootstrap failed"; }
    # Trim it like Debian's -slim images: no documentation, manuals or translations (now or in
    # packages installed later), no package lists or caches (every RUN apt-get updates first).
    "${sudo[@]}" sh -euc '
      cd "$1"
      printf "%s\n" "path-exclude /usr/share/doc/*" "path-include /usr/share/doc/*/copyright" \
        "path-exclude /usr/share/man/*" "path-exclude /usr/share/info/*" \
        "path-exclude /usr/share/locale/*" "path-include /usr/share/locale/locale.alias" \
        "path-exclude /usr/share/lintian/*" > etc/dpkg/dpkg.cfg.d/01-graphbandit-slim
      find usr/share/doc ! -type d ! -name copyright -delete
      find usr/share/locale -mindepth 1 -maxdepth 1 ! -name locale.alias -exec rm -rf {} +
      rm -rf usr/share/man/* usr/share/info/* usr/share/lintian/* var/lib/apt/lists/* \
             var/cache/apt/*.bin var/cache/apt/archives/*.deb' sh "$work/rootfs"
    "${sudo[@]}" tar -C "$work/rootfs" -cf "$tarball.tmp.$$" . && mv "$tarball.tmp.$$" "$tarball"
    "${sudo[@]}" rm -rf "$work/rootfs"
  else
    say "base root file system from the cache: $tarball"
  fi
  podman import "$tarball" "$base_image" >/dev/null 2>&1 || fail "podman import of the base failed"
fi

# ---- 3. the image ----
if [[ -n ${GRAPHBANDIT_CONTAINER_IMAGE:-} && -n ${GRAPHBANDIT_CONTAINER_STORAGE:-} ]]; then
  image=$GRAPHBANDIT_CONTAINER_IMAGE
  podman image exists "$image" || fail "no image $image in $GRAPHBANDIT_CONTAINER_STORAGE"
  say "testing the existing image $image (no build)"
else
say "podman build (compiles everything and runs the unit tests; ~10-20 min on 2 cores)"
build_start=$(date +%s)
if ! timeout 5400 podman build --isolation chroot --format docker \
     --build-arg BASE_IMAGE="$base_image" --build-arg RUN_TESTS="${RUN_TESTS:-1}" \
     -t "$image" -f Dockerfile . > "$work/build.log" 2>&1; then
  tail -60 "$work/build.log" >&2
  fail "podman build failed"
fi
grep -E "tests passed|runtime packages:" "$work/build.log" | sed 's/^/  build: /' >&2 || true
say "image built in $(($(date +%s) - build_start)) s"
fi

# ---- 4. run it ----
read -r grpc_port metrics_port < <("$python" -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')
target=127.0.0.1:$grpc_port
podman volume create "$volume" >/dev/null

run_container() {  # run_container NAME: the image on the shared volume and the chosen ports
  containers+=("$1")
  podman run -d --name "$1" --network host -v "$volume:/var/lib/graphbandit" \
    -e GRAPHBANDIT_HEALTH_TARGET="$target" --health-interval=disable \
    "$image" --listen="$target" --metrics_listen="127.0.0.1:$metrics_port" \
    --shutdown_grace_seconds="$grace" >/dev/null 2>"$work/run-$1.err" \
    || fail "podman run $1 failed: $(cat "$work/run-$1.err")"
  # (podman without systemd logs that it cannot add a healthcheck timer: expected here; the
  # HEALTHCHECK itself is run below with `podman healthcheck run`.)
  local _
  for _ in $(seq 120); do
    [[ $("$cli" --target="$target" --deadline_ms=1000 health 2>/dev/null) == SERVING ]] && return
    [[ $(podman inspect -f '{{.State.Running}}' "$1") == true ]] || fail "container $1 exited"
    sleep 0.5
  done
  fail "container $1 is not SERVING after 60 s"
}

stop_container() {  # stop_container NAME: SIGTERM, exit status 0 before the grace ends
  local t0 elapsed code
  t0=$(date +%s.%N)
  podman stop -t "$grace" "$1" >/dev/null 2>"$work/stop-$1.err" \
    || fail "podman stop $1 failed: $(cat "$work/stop-$1.err")"
  elapsed=$("$python" -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" \
            "$t0" "$(date +%s.%N)")
  code=$(podman inspect -f '{{.State.ExitCode}}' "$1")
  [[ $code == 0 ]] || fail "$1 exited with status $code after SIGTERM (137 = killed at the grace)"
  # grep without -q reads all of its input: with -q it may exit first, and podman logs' SIGPIPE
  # would fail the pipeline under pipefail.
  podman logs "$1" 2>&1 | grep "stopped cleanly" >/dev/null || fail "$1: no clean stop in its log"
  say "$1 stopped with status 0 in $elapsed s (grace $grace s)"
}

describe_counters() {  # the model's counters from DescribeModel, one "key value" per line
  "$cli" --target="$target" DescribeModel '{}' > "$work/describe.json" || fail "DescribeModel failed"
  "$python" - "$work/describe.json" <<'EOF'
import json, sys
model = json.load(open(sys.argv[1]))
# What the model has learned and holds (the count of decisions served is per process).
for key in ("users", "edges", "graph_components", "rewards_learned", "history_size",
            "dictionary_size", "model_version", "pending_decisions", "arm_feature_dim"):
    print(key, model.get(key, 0))
hyper = model.get("hyperparameters", {})
for key in ("fits_applied", "signal_variance", "noise_variance", "rho"):
    print(key, hyper.get(key, 0))
EOF
}

first=graphbandit-container-test-$tag-a
say "podman run $image on $target (metrics 127.0.0.1:$metrics_port), volume $volume"
run_container "$first"
podman healthcheck run "$first" >/dev/null || fail "the image's HEALTHCHECK does not pass"
grep -qx graphbandit.v1.BanditService <<<"$("$cli" --target="$target" services)" \
  || fail "reflection does not list BanditService"

# Non-root: inside the container and as seen from the host.
[[ $(podman exec "$first" id -u) == 10001 ]] || fail "the container's user is not uid 10001"
pid=$(podman inspect -f '{{.State.Pid}}' "$first")
host_uid=$(awk '/^Uid:/{print $2}' "/proc/$pid/status")
[[ $host_uid != 0 ]] || fail "graphbandit-server runs as root"
say "server runs as uid $host_uid ($(podman top "$first" user comm 2>/dev/null | tail -1 | xargs))"

# No compiler and no development package in the runtime image.
podman run --rm --network host --entrypoint /bin/sh "$image" -c '
  for c in cc c++ gcc g++ clang clang++ cpp as ld; do
    if command -v "$c"; then echo "compiler present: $c"; exit 1; fi
  done
  if dpkg-query -W -f "\${Package}\n" | grep -E -- "-dev(:|\$)"; then exit 1; fi' \
  > "$work/no-compiler.out" 2>&1 \
  || fail "the runtime image holds a compiler or -dev packages: $(cat "$work/no-compiler.out")"

say "graphbandit-loadtest --rounds=$rounds from the host"
"$loadtest" --target="$target" --rounds="$rounds" --concurrency=4 --users=20 --seed=3 \
  --window=500 --compare_window=1000 --report_json="$work/report.json" > "$work/loadtest.out" 2>&1 \
  || fail "loadtest failed: $(cat "$work/loadtest.out")"
sed 's/^/  loadtest: /' "$work/loadtest.out" >&2
"$python" - "$work/report.json" "$rounds" <<'EOF' || fail "loadtest report check failed"
import json, sys
report = json.load(open(sys.argv[1]))
def find(node, key):
    if isinstance(node, dict):
        if key in node: return node[key]
        for v in node.values():
            r = find(v, key)
            if r is not None: return r
    elif isinstance(node, list):
        for v in node:
            r = find(v, key)
            if r is not None: return r
completed, ratio = find(report, "rounds_completed"), find(report, "last_over_first")
print(f"rounds completed {completed}, regret last/first window {ratio}", file=sys.stderr)
assert int(completed) == int(sys.argv[2]), "not every round completed"
assert float(ratio) < 0.5, f"regret did not fall to under half: last/first = {ratio}"
EOF

metrics=$(curl -sf --max-time 10 "http://127.0.0.1:$metrics_port/metrics") || fail "cannot read /metrics"
for series in "graphbandit_rpc_requests_total{code=\"OK\",method=\"SelectArm\"} $rounds" \
              "graphbandit_rewards_total{model=\"default\",outcome=\"accepted\"} $rounds" \
              "graphbandit_rewards_learned{model=\"default\"} $rounds" \
              'graphbandit_users{model="default"} 20'; do
  grep -qF "$series" <<<"$metrics" || fail "/metrics lacks: $series"
done
grep -qE '^graphbandit_dictionary_size\{model="default"\} [1-9]' <<<"$metrics" || fail "dictionary size is 0"
grep -qE "^graphbandit_rpc_duration_seconds_count\{code=\"OK\",method=\"ReportReward\"\} $rounds" \
  <<<"$metrics" || fail "no ReportReward latency histogram"
say "/metrics: $(grep -c '^graphbandit_' <<<"$metrics") graphbandit series, expected values present"

# A hyper-parameter fit may still be running after the last reward; it is logged when it ends
# (at the latest while the server drains), so the state to compare is the one after it. Wait,
# bounded, until no fit is in flight and the model's version holds still over two reads.
settle_deadline=$(($(date +%s) + 180))
before=$(describe_counters)
fits_in_flight() {
  curl -sf --max-time 10 "http://127.0.0.1:$metrics_port/metrics" |
    awk '/^graphbandit_hyperparameter_fits_in_flight\{model="default"\}/ {print $2}'
}
while :; do
  in_flight=$(fits_in_flight || true)
  sleep 2
  again=$(describe_counters)
  in_flight_after=$(fits_in_flight || true)
  [[ $in_flight == 0 && $in_flight_after == 0 && $again == "$before" ]] && break
  (($(date +%s) < settle_deadline)) || fail "the model did not settle within 180 s (fits in flight: ${in_flight:-?})"
  before=$again
done
grep -qx "rewards_learned $rounds" <<<"$before" || fail "DescribeModel: $before"
say "DescribeModel before the restart: $(tr '\n' ' ' <<<"$before")"

stop_container "$first"

# ---- 6. a new container on the same volume ----
second=graphbandit-container-test-$tag-b
run_container "$second"
after=$(describe_counters)
say "DescribeModel after the restart:  $(tr '\n' ' ' <<<"$after")"
[[ $before == "$after" ]] || fail "counters changed across the restart: $(diff <(echo "$before") <(echo "$after"))"
podman logs "$second" 2>&1 | grep -E "snapshot at record [1-9][0-9]*, 0 log records replayed" >/dev/null \
  || fail "the new container did not start from the shutdown snapshot"
stop_container "$second"

# ---- 7. size ----
size=$(podman image inspect -f '{{.Size}}' "$image")
say "image size: $((size / 1000000)) MB ($size bytes); base $(( $(podman image inspect -f '{{.Size}}' "$base_image") / 1000000 )) MB"
podman images --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep -F graphbandit | sed 's/^/  /' >&2

if ((compose == 0)); then exit 0; fi

# ---- 8. deploy/compose with docker-compose through podman's Docker-compatible API ----
if ! command -v docker-compose >/dev/null; then
  say "installing docker-compose"
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq docker-compose >/dev/null
fi
prometheus_image=localhost/graphbandit-prometheus:container-test-$tag
say "podman build deploy/compose/prometheus.Dockerfile"
podman build --isolation chroot --format docker --build-arg BASE_IMAGE="$base_image" \
  -t "$prometheus_image" -f deploy/compose/prometheus.Dockerfile deploy/compose \
  > "$work/prometheus-build.log" 2>&1 || { tail -30 "$work/prometheus-build.log" >&2; fail "prometheus image build"; }
podman tag "$image" localhost/graphbandit:compose-test-$tag
podman system service --time=0 "unix://$work/podman.sock" > "$work/service.log" 2>&1 &
service_pid=$!
for _ in $(seq 100); do [[ -S $work/podman.sock ]] && break; sleep 0.1; done
[[ -S $work/podman.sock ]] || fail "podman system service did not start"
"$python" -c 'import socket; socket.socket().bind(("127.0.0.1", 9464))' 2>/dev/null \
  || fail "port 9464 (the scrape port in deploy/prometheus/prometheus.yml) is taken on this host"
read -r compose_grpc prometheus_port < <("$python" -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')
compose_env=(env DOCKER_HOST="unix://$work/podman.sock" GRAPHBANDIT_IMAGE="localhost/graphbandit:compose-test-$tag"
             PROMETHEUS_IMAGE="$prometheus_image" GRAPHBANDIT_GRPC_PORT="$compose_grpc"
             PROMETHEUS_PORT="$prometheus_port")
# docker-compose 1.29 refuses published ports together with host networking and an override
# cannot delete them, so render compose.yaml + compose.hostnet.yaml and drop `ports`.
"${compose_env[@]}" docker-compose -f deploy/compose/compose.yaml -f deploy/compose/compose.hostnet.yaml \
  config > "$work/compose.rendered.yaml" || fail "docker-compose config"
"$python" - "$work/compose.rendered.yaml" "$work/compose.test.yaml" <<'EOF'
import sys, yaml
config = yaml.safe_load(open(sys.argv[1]))
for service in config["services"].values():
    service.pop("ports", None)
yaml.safe_dump(config, open(sys.argv[2], "w"), sort_keys=False)
EOF
compose_cmd=("${compose_env[@]}" timeout 300 docker-compose -p "$project" -f "$work/compose.test.yaml")
say "docker-compose up -d graphbandit prometheus (gRPC 127.0.0.1:$compose_grpc, Prometheus 127.0.0.1:$prometheus_port)"
"${compose_cmd[@]}" up -d --no-build graphbandit prometheus > "$work/compose.log" 2>&1 \
  || { cat "$work/compose.log" >&2; fail "docker-compose up"; }
ctarget=127.0.0.1:$compose_grpc
for _ in $(seq 120); do
  [[ $("$cli" --target="$ctarget" --deadline_ms=1000 health 2>/dev/null) == SERVING ]] && break
  sleep 0.5
done
[[ $("$cli" --target="$ctarget" health 2>/dev/null) == SERVING ]] || fail "compose graphbandit is not SERVING"
gb_container=$(podman ps -q --filter "label=com.docker.compose.project=$project" \
               --filter "label=com.docker.compose.service=graphbandit")
podman healthcheck run "$gb_container" >/dev/null || fail "compose graphbandit: HEALTHCHECK fails"
"$loadtest" --target="$ctarget" --rounds=300 --concurrency=2 --users=10 --seed=5 \
  --compare_window=100 > "$work/compose-loadtest.out" 2>&1 || fail "loadtest against compose: $(cat "$work/compose-loadtest.out")"
prom=http://127.0.0.1:$prometheus_port
value=""
for _ in $(seq 90); do
  value=$(curl -sf --max-time 5 "$prom/api/v1/query" --data-urlencode \
            'query=sum(graphbandit_rewards_learned{job="graphbandit"}) and on() up{job="graphbandit"} == 1' \
          | "$python" -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else "")' 2>/dev/null) || true
  [[ $value == 300 ]] && break
  sleep 1
done
[[ $value == 300 ]] || fail "Prometheus does not show the 300 learned rewards (got '$value'): $(curl -s "$prom/api/v1/targets")"
rules=$(curl -sf "$prom/api/v1/rules" | "$python" -c 'import json,sys; print(sum(len(g["rules"]) for g in json.load(sys.stdin)["data"]["groups"]))')
((rules > 0)) || fail "Prometheus loaded no alerting rules"
say "compose: graphbandit SERVING and healthy, Prometheus target up, graphbandit_rewards_learned=300 scraped, $rules rules loaded"
"${compose_cmd[@]}" down -v > "$work/compose-down.log" 2>&1 || { cat "$work/compose-down.log" >&2; fail "docker-compose down"; }
left=$(podman ps -aq --filter "label=com.docker.compose.project=$project"; podman volume ls -q --filter "label=com.docker.compose.project=$project")
[[ -z $left ]] || fail "docker-compose down left: $left"
kill "$service_pid"; wait "$service_pid" 2>/dev/null || true; service_pid=""
podman rmi "localhost/graphbandit:compose-test-$tag" "$prometheus_image" >/dev/null 2>&1 || true
say "compose: down -v removed its containers and volumes"
exit 0
}
