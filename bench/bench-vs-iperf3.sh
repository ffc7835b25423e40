#!/usr/bin/env bash
# Benchmark `linerate bench` against iperf3 on the same loopback path in the same run:
# single-stream TCP throughput and whole-machine CPU per Gbit/s (medians of --runs), then
# 10,000 concurrent connections held for --hold seconds with per-connection fairness.
#
# Usage: bench/bench-vs-iperf3.sh [--runs R] [--time T] [--hold S] [--conns N] [--linerate PATH]
# Exit: 0 when every run completed (targets met or not), 1 when a tool failed, 2 bad usage.
set -euo pipefail

RUNS=5 TIME=10 HOLD=30 CONNS=10000 LR=""
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) RUNS="$2"; shift 2 ;;
    --time) TIME="$2"; shift 2 ;;
    --hold) HOLD="$2"; shift 2 ;;
    --conns) CONNS="$2"; shift 2 ;;
    --linerate) LR="$2"; shift 2 ;;
    -h|--help) sed -n 2,8p "$0"; exit 0 ;;
    *) echo "bench-vs-iperf3: unknown option $1" >&2; exit 2 ;;
  esac
done
root="$(cd "$(dirname "$0")/.." && pwd)"
if [ -z "$LR" ]; then
  LR="$root/target/release/linerate"
  [ -x "$LR" ] || (cd "$root" && cargo build --release --locked -q)
fi
command -v iperf3 >/dev/null || { echo "bench-vs-iperf3: iperf3 is not installed" >&2; exit 2; }
command -v python3 >/dev/null || { echo "bench-vs-iperf3: python3 is needed for the JSON" >&2; exit 2; }

work="$(mktemp -d /tmp/linerate-bench.XXXXXX)"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT INT TERM

# Free ports for both servers, on loopback only.
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
IP=$(port); LP=$(port)
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
"$LR" keygen "$work/key" 2>/dev/null
iperf3 -s -B 127.0.0.1 -p "$IP" >/dev/null 2>&1 & pids+=($!)
"$LR" serve --listen "127.0.0.1:$LP" --key-file "$work/key" --quiet & pids+=($!)
sleep 0.5

busy() { awk '/^cpu /{print $2+$3+$4+$7+$8+$9, $2+$3+$4+$5+$6+$7+$8+$9}' /proc/stat; }
cores=$(nproc)
# Core-seconds busy over a run: (busy ticks delta / all ticks delta) * cores * wall seconds.
measure() { # $1 = output file; rest = command
  local out="$1"; shift
  read -r b0 t0 < <(busy); local s0; s0=$(date +%s.%N)
  "$@" > "$out"
  read -r b1 t1 < <(busy); local s1; s1=$(date +%s.%N)
  python3 -c "print(($b1-$b0)/max(1,($t1-$t0))*$cores*($s1-$s0))"
}

echo "== single stream, $RUNS runs of $TIME s each, alternating (same loopback, same run)"
: > "$work/rows"
for r in $(seq 1 "$RUNS"); do
  ic=$(measure "$work/i.json" iperf3 -c 127.0.0.1 -p "$IP" -t "$TIME" -J) || exit 1
  ig=$(python3 -c "import json;d=json.load(open('$work/i.json'));print(d['end']['sum_received']['bits_per_second'])")
  lc=$(measure "$work/l.json" "$LR" bench "127.0.0.1:$LP" --key-file "$work/key" -t "$TIME" --json --no-save) || exit 1
  lg=$(python3 -c "import json;d=json.load(open('$work/l.json'));print(d['summary']['throughput_bps'])")
  echo "$ig $ic $lg $lc" >> "$work/rows"
  python3 - "$ig" "$ic" "$lg" "$lc" "$TIME" <<'PY'
import sys
ig, ic, lg, lc, t = map(float, sys.argv[1:])
print(f"  iperf3 {ig/1e9:6.2f} Gbit/s {ic/(ig*t/1e9):.3f} core-s/Gbit   linerate {lg/1e9:6.2f} Gbit/s {lc/(lg*t/1e9):.3f} core-s/Gbit   ratio {lg/ig:.3f}")
PY
done
python3 - "$work/rows" "$TIME" <<'PY'
import sys, statistics as st
rows = [list(map(float, l.split())) for l in open(sys.argv[1])]
t = float(sys.argv[2])
ig = st.median(r[0] for r in rows); lg = st.median(r[2] for r in rows)
icpu = st.median(r[1] / (r[0] * t / 1e9) for r in rows); lcpu = st.median(r[3] / (r[2] * t / 1e9) for r in rows)
ratios = [r[2] / r[0] for r in rows]
print(f"median: iperf3 {ig/1e9:.2f} Gbit/s, linerate {lg/1e9:.2f} Gbit/s, ratio of medians {lg/ig:.3f} "
      f"(median of per-run ratios {st.median(ratios):.3f}; target >= 0.97)")
print(f"median CPU (whole machine, both ends): iperf3 {icpu:.3f}, linerate {lcpu:.3f} core-s per Gbit "
      f"(linerate/iperf3 {lcpu/icpu:.3f}; target <= 1.0)")
PY

echo "== $CONNS connections held for $HOLD s"
"$LR" bench "127.0.0.1:$LP" --key-file "$work/key" -P "$CONNS" -t "$HOLD" -i 5 --json --no-save > "$work/c.json" || exit 1
python3 - "$work/c.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
s = d["summary"]; f = s["fairness"]
iv = [round(i["bps"] / 1e9, 2) for i in d["intervals"]]
print(f"{s['connections']} connections: {s['throughput_bps']/1e9:.2f} Gbit/s, Jain {f['jain']:.3f}, "
      f"min {f['min_bps']/1e6:.2f} / mean {f['mean_bps']/1e6:.2f} / max {f['max_bps']/1e6:.2f} Mbit/s, "
      f"{f['starved']} starved, errors {len(s['errors'])}; per-5 s Gbit/s {iv}")
PY
