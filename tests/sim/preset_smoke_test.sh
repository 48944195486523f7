#!/usr/bin/env bash
# Every preset of graphbandit-sim runs end to end with one seed and 200 rounds and writes its
# summary without a failed run. The Last.fm presets read a small generated dataset in the
# HetRec format (the real files never enter the repository).
set -euo pipefail
sim=$1/sim/graphbandit-sim
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
data=$out/lastfm
mkdir -p "$data"
# 12 users, 40 artists, friends in a ring, tags on most artists; CRLF as the real files.
{
  printf 'userID\tartistID\tweight\r\n'
  for u in $(seq 2 13); do
    for k in 0 1 2 3 4 5; do printf '%d\t%d\t%d\r\n' "$u" $(( 100 + (u * 7 + k * 5) % 40 )) $(( k + 1 )); done
  done
} > "$data/user_artists.dat"
{
  printf 'userID\tfriendID\r\n'
  for u in $(seq 2 13); do
    v=$(( u == 13 ? 2 : u + 1 ))
    printf '%d\t%d\r\n%d\t%d\r\n' "$u" "$v" "$v" "$u"
  done
} > "$data/user_friends.dat"
{
  printf 'userID\tartistID\ttagID\tday\tmonth\tyear\r\n'
  for a in $(seq 100 135); do
    for t in 1 2 3; do printf '2\t%d\t%d\t1\t1\t2010\r\n' "$a" $(( (a * t) % 11 + 1 )); done
  done
} > "$data/user_taggedartists.dat"

"$sim" --list_presets > "$out/presets.txt"
presets=$(grep -E '^[a-z0-9-]+$' "$out/presets.txt")
[[ -n $presets ]] || { echo "FAIL: no presets listed"; exit 1; }
for preset in $presets; do
  start=$(date +%s)
  # Exits non-zero when any run failed; what failed is checked below.
  "$sim" --preset="$preset" --seeds=1 --rounds=200 --jobs=2 --lastfm_dir="$data" \
    --out="$out/$preset" > "$out/$preset.stdout" 2> "$out/$preset.stderr" || true
  if [[ ! -s $out/$preset/summary.md ]]; then
    tail -5 "$out/$preset.stderr"
    echo "FAIL: $preset wrote no summary"
    exit 1
  fi
  # A run may fail only by refusing a task beyond a documented size limit (the robustness
  # preset's GraphUCB on its 1,000-user task, docs/results.md, "What we found").
  unexpected=$(sed -n '/^## Failed runs/,/^## /p' "$out/$preset/summary.md" | grep '^- ' |
               grep -v 'exceeds its limit of' || true)
  if [[ -n $unexpected ]]; then
    echo "$unexpected" | head -5
    echo "FAIL: $preset had failed runs"
    exit 1
  fi
  echo "$preset: $(( $(date +%s) - start ))s"
done
echo PASS
