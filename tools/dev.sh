#!/usr/bin/env bash
# The two commands of the README, for a fresh Debian 12 machine:
#   tools/dev.sh serve [SERVER FLAGS...]  install what is missing, build, start graphbandit-server
#   tools/dev.sh test                     install what is missing, build, run the whole ctest suite
# and helpers: `tools/dev.sh deps` (only install), `tools/dev.sh build` (deps + build) and
# `tools/dev.sh container-test` (build the Dockerfile's image with podman and test it end to end;
# see tools/container_test.sh) and `tools/dev.sh cluster-test` (cluster mode on loopback: three
# NATS servers, three nodes, nginx; see tools/cluster_test.py; `cluster-bench` measures it).
# Every dependency is a Debian package; nothing is downloaded from anywhere else.
# GRAPHBANDIT_BUILD_DIR (default build) and GRAPHBANDIT_CMAKE_ARGS (extra words for the cmake
# configure step, e.g. -DGRAPHBANDIT_TSAN_TEST=OFF) adjust `build`, `serve` and `test`.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  g++ cmake ninja-build pkg-config
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler grpc-proto
  libabsl-dev libeigen3-dev prometheus-cpp-dev libgtest-dev libgmock-dev libnlopt-dev
  libspectra-dev   # sparse Laplacian eigenvectors: the community part of the user kernel
  libbenchmark-dev libnats-dev nats-server   # JetStream: the replicated log (cluster mode)
  libcpp-httplib-dev libssl-dev   # the Personalizer-compatible REST API (server/personalizer_http.h)
  haproxy   # the cluster overlay's load balancer, run by tests/deploy/k8s_test.sh
  curl python3 python3-grpcio python3-protobuf openssl prometheus
  clang clang-format   # the format and thread_safety checks (tests/CMakeLists.txt, label lint)
)
# COMMAND:PACKAGE pairs: PACKAGE is installed only when COMMAND is not already on PATH (some
# machines carry their own kubectl or node, which Debian's packages would conflict with).
COMMAND_PACKAGES=(kubectl:kubernetes-client node:nodejs npm:npm)
BUILD_DIR=${GRAPHBANDIT_BUILD_DIR:-build}

install_missing_packages() {
  local missing=()
  for package in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" \
      || missing+=("$package")
  done
  local pair
  for pair in "${COMMAND_PACKAGES[@]}"; do
    command -v "${pair%%:*}" >/dev/null 2>&1 || missing+=("${pair#*:}")
  done
  if ((${#missing[@]} == 0)); then return; fi
  local sudo=()
  if [[ $(id -u) -ne 0 ]]; then sudo=(sudo); fi
  echo "dev.sh: installing ${missing[*]}" >&2
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
}

build() {
  local extra=()
  read -r -a extra <<<"${GRAPHBANDIT_CMAKE_ARGS:-}"
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGRAPHBANDIT_WERROR=ON \
    "${extra[@]}" >/dev/null
  cmake --build "$BUILD_DIR" -j "$(nproc)"
}

case "${1:-}" in
  serve)
    shift
    install_missing_packages
    build
    exec "$BUILD_DIR/server/graphbandit-server" "$@"
    ;;
  test)
    install_missing_packages
    build
    exec ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$(nproc)" --timeout 900
    ;;
  deps)
    install_missing_packages
    ;;
  build)
    install_missing_packages
    build
    ;;
  container-test)
    shift
    exec tools/container_test.sh "$@"
    ;;
  cluster-test|cluster-bench)
    what=$1
    shift
    install_missing_packages
    # The proxy in front of the nodes. Not in PACKAGES (nor in the image's build stage): only
    # this test needs it. Debian starts its nginx service on port 80 when it installs it; the
    # test runs its own nginx on a free loopback port.
    if ! command -v nginx >/dev/null 2>&1 && [[ ! -x /usr/sbin/nginx ]]; then
      PACKAGES=(nginx-light)
      install_missing_packages
    fi
    build
    if [[ $what == cluster-bench ]]; then
      exec /usr/bin/python3 tools/cluster_bench.py --build_dir "$BUILD_DIR" "$@"
    fi
    exec /usr/bin/python3 tools/cluster_test.py --build_dir "$BUILD_DIR" "$@"
    ;;
  *)
    cat >&2 <<'USAGE'
usage: tools/dev.sh COMMAND
  serve [server flags]  install what is missing, build, start graphbandit-server
  test                  install what is missing, build, run the whole ctest suite
  deps                  only install the Debian packages the build and the tests need
  build                 deps + build (into $GRAPHBANDIT_BUILD_DIR, default build/)
  container-test        build the container image with podman (Debian base made with
                        debootstrap) and test it end to end: tools/container_test.sh
  cluster-test          three NATS servers, three nodes in cluster mode and nginx on loopback,
                        load through the proxy while a node and a NATS server are killed and
                        restarted: tools/cluster_test.py (--rounds=N: N rounds of random faults)
  cluster-bench         decisions per second with 1, 2 and 3 nodes, the stream against the local
                        log, lag between replicas, a replaced node's recovery:
                        tools/cluster_bench.py
USAGE
    exit 64
    ;;
esac
