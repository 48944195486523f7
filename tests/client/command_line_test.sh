#!/usr/bin/env bash
# Every program's command line: --help exits 0 and shows no build paths; an unknown flag, a bad
# value or a missing value prints one line naming it and exits 64 (EX_USAGE).
# Usage: command_line_test.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
fail() { echo "FAIL: $*" >&2; exit 1; }
out=$(mktemp)
trap 'rm -f "$out"' EXIT

check_usage_error() {  # program, expected substring, args...
  local program=$1 expected=$2; shift 2
  local rc=0
  "$program" "$@" > "$out" 2>&1 || rc=$?
  [[ $rc -eq 64 ]] || fail "$(basename "$program") $*: exit status $rc, expected 64"
  [[ $(wc -l < "$out") -eq 1 ]] || fail "$(basename "$program") $*: $(wc -l < "$out") lines: $(cat "$out")"
  grep -qF -- "$expected" "$out" || fail "$(basename "$program") $*: '$(cat "$out")' lacks '$expected'"
}

for program in server/graphbandit-server client/graphbandit-cli client/graphbandit-loadtest \
               sim/graphbandit-sim sim/graphbandit-ope-coverage sim/graphbandit-replay \
               bench/graphbandit-bench; do
  binary="$build/$program"
  name=$(basename "$program")
  for help in --help -h --helpfull; do
    rc=0
    "$binary" "$help" > "$out" 2>&1 || rc=$?
    [[ $rc -eq 0 ]] || fail "$name $help: exit status $rc"
    grep -q "^Usage\|Usage:" "$out" || fail "$name $help: no usage line"
    grep -q -- "--help" "$out" || fail "$name $help: does not list --help"
    if grep -qE '\.\./|\.cc|'"$build" "$out"; then
      fail "$name $help shows a build path or source file: $(grep -E '\.\./|\.cc|'"$build" "$out" | head -1)"
    fi
  done
  check_usage_error "$binary" "unknown flag --no_such_flag" --no_such_flag=1
  check_usage_error "$binary" "unknown flag --no_such_flag" --no_such_flag
done
check_usage_error "$build/sim/graphbandit-sim" "bad value for --rounds" --rounds=abc
check_usage_error "$build/sim/graphbandit-ope-coverage" "--epsilon" --epsilon=1
check_usage_error "$build/sim/graphbandit-replay" "either --state_dir or --dsjson"
check_usage_error "$build/server/graphbandit-server" "flag --listen needs a value" --listen
check_usage_error "$build/server/graphbandit-server" "bad value for --max_message_bytes" \
  --max_message_bytes=many
echo "command lines: OK"
