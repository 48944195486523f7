#!/usr/bin/env bash
# graphbandit-sim end to end: the smoke preset (every policy family, two environments) must run
# without a failed run and write its CSV, plots and summary.
set -euo pipefail
sim=$1/sim/graphbandit-sim
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# Captured first: grep -q stops reading at the first match, which would hand the simulator a
# SIGPIPE (and this script, under pipefail, a spurious failure) while it still prints the list.
"$sim" --list_presets > "$out/presets.txt" || { echo "FAIL: --list_presets"; exit 1; }
grep -q '^lk-table1$' "$out/presets.txt" || { echo "FAIL: presets not listed"; exit 1; }
"$sim" --preset=smoke --out="$out" --jobs=2 > "$out/stdout.txt" 2> "$out/stderr.txt" \
  || { cat "$out/stderr.txt"; echo "FAIL: smoke preset"; exit 1; }
for f in summary.md regret.csv regret-easy-gp-draw-er-n-10.svg regret-bump.svg tradeoff.svg; do
  [[ -s $out/$f ]] || { echo "FAIL: $f missing"; ls "$out"; exit 1; }
done
grep -q "^- commit: " "$out/summary.md" || { echo "FAIL: no commit line"; exit 1; }
grep -q "Failed runs" "$out/summary.md" && { echo "FAIL: failed runs"; exit 1; }
# 2 environments x 11 policies x 2 seeds, 30 samples each, plus the header.
[[ $(wc -l < "$out/regret.csv") -eq $((2 * 11 * 2 * 30 + 1)) ]] || { echo "FAIL: regret.csv rows"; exit 1; }
head -c 5 "$out/regret-bump.svg" | grep -q "<svg" || { echo "FAIL: not an SVG"; exit 1; }
echo PASS
