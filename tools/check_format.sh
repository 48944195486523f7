#!/usr/bin/env bash
# Fails when a C++ source of the project is not formatted as .clang-format says (Debian's
# clang-format 14). `tools/check_format.sh --fix` formats them in place instead.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=(--dry-run --Werror)
if [[ ${1:-} == --fix ]]; then mode=(-i); fi
mapfile -t files < <(find proto core server client sim bench tests \
  \( -name build -o -name node_modules \) -prune -o \
  -type f \( -name '*.cc' -o -name '*.h' \) -print | sort)
clang-format "${mode[@]}" "${files[@]}"
echo "check_format: ${#files[@]} files"
