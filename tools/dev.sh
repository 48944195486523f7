#!/usr/bin/env bash
# The two commands of the README, for a fresh Debian 12 machine:
#   tools/dev.sh serve [SERVER FLAGS...]  install what is missing, build, start graphbandit-server
#   tools/dev.sh test                     install what is missing, build, run the whole ctest suite
# and two helpers: `tools/dev.sh deps` (only install) and `tools/dev.sh build` (deps + build).
# Every dependency is a Debian package; nothing is downloaded from anywhere else.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  g++ cmake ninja-build pkg-config
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler grpc-proto
  libabsl-dev libeigen3-dev prometheus-cpp-dev libgtest-dev libgmock-dev libnlopt-dev
  curl
)
BUILD_DIR=${GRAPHBANDIT_BUILD_DIR:-build}

install_missing_packages() {
  local missing=()
  for package in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" \
      || missing+=("$package")
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
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
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
  *)
    echo "usage: tools/dev.sh serve [server flags] | test | deps | build" >&2
    exit 64
    ;;
esac
