#!/usr/bin/env bash
# The false-alarm rate of `linerate report compare` on this machine (issue 33): PAIRS pairs of
# identical measurements back to back, each `bench -t T --repeat N` (N runs of T seconds, the
# figure their mean, its noise the mean's standard error), each pair compared (how many are
# flagged as a regression: the goal is none at the default settings), and after each pair one
# capped at (100 - SLOW) % of the pair's first figure, compared with it (how many are caught:
# the goal is all). iperf3 runs of T seconds alternate with linerate's so that its run-to-run
# spread is printed beside linerate's. Also judged against the median of the last K
# measurements (`--against last:K`), as a fleet's rounds are (false alarms only: a capped run is
# another test).
#
# Why N runs: on the 2-core VM two identical single runs differ by 10 % (median) and up to 39 %,
# iperf3's as much, so one run against one run cannot tell a 15 % change from noise; the mean of
# N runs is known √N times better (the rule: docs/USER_GUIDE.md, "Noise").
#
# Usage: bench/noise-false-alarms.sh [--pairs N] [--time T] [--repeat N] [--slow PCT] [--last K]
#                                    [--linerate PATH] [--keep DIR] [--judge-only DIR]
#   --time T          seconds per run (default 1)
#   --repeat N        runs per measurement (default 15)
#   --keep DIR        keep the run store, the ids and each measurement's document (doc.ID.json)
#                     in DIR (default: a temporary directory)
#   --judge-only DIR  do not measure: judge the measurements kept in DIR again (after a rule
#                     change; their documents are imported anew with the given linerate)
# Exit: 0 when the measurement ran (goals met or not), 1 when a tool failed, 2 bad usage.
set -euo pipefail

PAIRS=20 TIME=1 REPEAT=15 SLOW=15 LAST=5 LR="" KEEP="" JUDGE=""
while [ $# -gt 0 ]; do
  case "$1" in
    --pairs) PAIRS="$2"; shift 2 ;;
    --time) TIME="$2"; shift 2 ;;
    --repeat) REPEAT="$2"; shift 2 ;;
    --slow) SLOW="$2"; shift 2 ;;
    --last) LAST="$2"; shift 2 ;;
    --linerate) LR="$2"; shift 2 ;;
    --keep) KEEP="$2"; shift 2 ;;
    --judge-only) JUDGE="$2"; shift 2 ;;
    -h|--help) sed -n 2,24p "$0"; exit 0 ;;
    *) echo "noise-false-alarms: unknown option $1" >&2; exit 2 ;;
  esac
done
die() { echo "noise-false-alarms: $*" >&2; exit 1; }
root="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=bench/lib.sh
. "$root/bench/lib.sh"
find_linerate "$LR" "$root"
command -v python3 >/dev/null || { echo "noise-false-alarms: python3 is needed for the JSON" >&2; exit 2; }

pids=()
if [ -n "$JUDGE" ]; then
  work="$JUDGE"
elif [ -n "$KEEP" ]; then
  work="$KEEP"; mkdir -p "$work"
else
  work="$(mktemp -d /tmp/linerate-noise.XXXXXX)"
fi
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  if [ -z "$KEEP" ] && [ -z "$JUDGE" ]; then rm -rf "$work"; fi
}
trap cleanup EXIT INT TERM
db="$work/runs.sqlite"

if [ -z "$JUDGE" ]; then
  command -v iperf3 >/dev/null || { echo "noise-false-alarms: iperf3 is not installed" >&2; exit 2; }
  port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
  IP=$(port); LP=$(port)
  "$LINERATE" keygen "$work/key" 2>/dev/null
  iperf3 -s -B 127.0.0.1 -p "$IP" >/dev/null 2>&1 & pids+=($!)
  "$LINERATE" serve --listen "127.0.0.1:$LP" --key-file "$work/key" --quiet & pids+=($!)
  sleep 0.5
  # one linerate run: its id on stdout, its goodput in $work/last.bps
  lr() {
    local tag="$1"; shift
    "$LINERATE" bench "127.0.0.1:$LP" --key-file "$work/key" -t "$TIME" --repeat "$REPEAT" --db "$db" \
      --json "$@" > "$work/last.json" 2> "$work/last.err" || { cat "$work/last.err" >&2; die "linerate bench failed"; }
    # the measurement's figure (the runs' mean); each run's figure kept for the spread
    python3 - "$work/last.json" "$work/last.bps" "$work/runs.$tag" <<'PY'
import json, sys
runs = json.load(open(sys.argv[1]))["points"][0]["repeats"]["runs"]
open(sys.argv[2], "w").write(f"{sum(runs) / len(runs)}\n")
with open(sys.argv[3], "a") as f:
    f.write("".join(f"{x}\n" for x in runs))
PY
    local id
    id=$("$LINERATE" report --db "$db" list | tail -n 1 | cut -d' ' -f1)
    # each measurement's document kept (its runs and their steal), for analyses of the rule
    cp "$work/last.json" "$work/doc.$id.json"
    echo "$id"
  }
  ip3() {
    iperf3 -c 127.0.0.1 -p "$IP" -t "$TIME" -J > "$work/i.json" || die "iperf3 failed"
    python3 -c "import json;print(json.load(open('$work/i.json'))['end']['sum_received']['bits_per_second'])"
  }
  : > "$work/pairs"; : > "$work/runs.same"; : > "$work/runs.capped"; : > "$work/runs.iperf3"
  for i in $(seq 1 "$PAIRS"); do
    ia=$(ip3)
    a=$(lr same); abps=$(cat "$work/last.bps")
    ib=$(ip3)
    b=$(lr same); bbps=$(cat "$work/last.bps")
    cap=$(python3 -c "print(int($abps * (100 - $SLOW) / 100))")
    c=$(lr capped -b "$cap"); cbps=$(cat "$work/last.bps")
    echo "$a $b $c $abps $bbps $cbps $ia $ib" >> "$work/pairs"
    echo "$ia" >> "$work/runs.iperf3"; echo "$ib" >> "$work/runs.iperf3"
    echo "pair $i: linerate A $abps B $bbps capped $cbps; iperf3 A $ia B $ib" >&2
  done
fi

echo "== $PAIRS pairs of identical \`bench -t $TIME --repeat $REPEAT\` measurements, and one capped $SLOW % below each pair's first"
python3 - "$work" <<'EOF'
import sys, statistics as st
w = sys.argv[1]
rows = [l.split() for l in open(f"{w}/pairs") if l.strip()]
def runs(name):
    try:
        return [float(x) for x in open(f"{w}/runs.{name}") if x.strip()]
    except FileNotFoundError:
        return []
for name, v in (("linerate", runs("same")), ("iperf3", runs("iperf3"))):
    if len(v) >= 2:
        print(f"{name:9} single runs: {len(v)}, mean {st.mean(v) / 1e9:.2f} Gbit/s, sd {st.stdev(v) / st.mean(v) * 100:.1f} %")
for name, (x, y) in (("linerate", (3, 4)), ("iperf3", (6, 7))):
    d = [abs(float(r[y]) - float(r[x])) / float(r[x]) * 100 for r in rows]
    what = "means of the runs" if name == "linerate" else "single runs"
    print(f"{name:9} identical pairs ({what}): |B - A| / A median {st.median(d):.1f} %, max {max(d):.1f} %")
EOF
# Judging again (after a change of how a document becomes a stored run): the kept documents
# are imported anew, in the order they were measured, into a store of their own.
if [ -n "$JUDGE" ] && ls "$work"/doc.*.json >/dev/null 2>&1; then
  db="$work/judged.sqlite"; rm -f "$db"
  declare -A fresh
  while read -r a b c _; do
    for id in "$a" "$b" "$c"; do
      fresh[$id]=$("$LINERATE" report --db "$db" import "$work/doc.$id.json") || die "import of doc.$id.json failed"
    done
  done < "$work/pairs"
  while read -r a b c rest; do
    echo "${fresh[$a]} ${fresh[$b]} ${fresh[$c]} $rest"
  done < "$work/pairs" > "$work/pairs.judged"
  pairs="$work/pairs.judged"
else
  pairs="$work/pairs"
fi
flagged=0 caught=0 n=0
while read -r a b c _; do
  n=$((n + 1))
  "$LINERATE" report --db "$db" compare "$a" "$b" >/dev/null 2>&1 && rc=0 || rc=$?
  [ "$rc" -eq 4 ] && flagged=$((flagged + 1))
  [ "$rc" -ne 0 ] && [ "$rc" -ne 4 ] && die "report compare $a $b exited $rc"
  # the cap makes the runs unlike (a key parameter differs): --force compares them anyway
  "$LINERATE" report --db "$db" compare --force "$a" "$c" >/dev/null 2>&1 && rc=0 || rc=$?
  [ "$rc" -eq 4 ] && caught=$((caught + 1))
done < "$pairs"
echo "report compare A B (identical): $flagged of $n flagged as a regression (false alarms)"
echo "report compare A capped:        $caught of $n caught"

# Each B against the median of the last K uncapped runs before it (a capped run is another
# test, so it is never in such a baseline, nor has one).
flagged=0 n=0
while read -r a b c _; do
  n=$((n + 1))
  "$LINERATE" report --db "$db" compare --against "last:$LAST" "$b" >/dev/null 2>&1 && rc=0 || rc=$?
  [ "$rc" -eq 4 ] && flagged=$((flagged + 1))
done < "$pairs"
echo "report compare --against last:$LAST B: $flagged of $n flagged (false alarms)"
