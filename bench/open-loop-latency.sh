#!/usr/bin/env bash
# Open-loop request/response latency: `linerate bench --test tcp-rr --rate R` against sockperf's
# under-load mode (the reference for latency at a fixed message rate) on the same loopback path,
# alternating, at 1,000, 5,000 and 20,000 messages/s. Prints p50, p99 and p99.9 round trips
# (medians over --runs) and linerate/sockperf ratios (goal: p50 at most 1.2x sockperf's), and
# linerate's achieved rate against the one asked (a missed schedule is reported, not hidden).
#
# Usage: bench/open-loop-latency.sh [--runs R] [--time T] [--rates "1000 5000 20000"] [--size B]
#                                   [--linerate PATH]
# Needs sockperf (Debian: apt-get install sockperf) and python3. Traffic stays on 127.0.0.1.
# Exit: 0 when every run completed (goal met or not), 1 when a tool failed, 2 bad usage.
set -euo pipefail

RUNS=5 TIME=10 RATES="1000 5000 20000" SIZE=64 LR=""
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) RUNS="$2"; shift 2 ;;
    --time) TIME="$2"; shift 2 ;;
    --rates) RATES="$2"; shift 2 ;;
    --size) SIZE="$2"; shift 2 ;;
    --linerate) LR="$2"; shift 2 ;;
    -h|--help) sed -n 2,12p "$0"; exit 0 ;;
    *) echo "open-loop-latency: unknown option $1" >&2; exit 2 ;;
  esac
done
root="$(cd "$(dirname "$0")/.." && pwd)"
if [ -z "$LR" ]; then
  LR="$root/target/release/linerate"
  [ -x "$LR" ] || (cd "$root" && cargo build --release --locked -q)
fi
command -v sockperf >/dev/null || { echo "open-loop-latency: sockperf is not installed (apt-get install sockperf)" >&2; exit 2; }
command -v python3 >/dev/null || { echo "open-loop-latency: python3 is needed" >&2; exit 2; }

work="$(mktemp -d /tmp/linerate-openloop.XXXXXX)"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT INT TERM

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
SP=$(port); LP=$(port)
"$LR" keygen "$work/key" 2>/dev/null
sockperf server --tcp -i 127.0.0.1 -p "$SP" >"$work/sockperf-server.log" 2>&1 & pids+=($!)
"$LR" serve --listen "127.0.0.1:$LP" --key-file "$work/key" --quiet & pids+=($!)
sleep 1

# sockperf: every message is timed (--reply-every 1), full round trips, after its warm-up.
sockperf_run() { # rate -> "p50 p99 p999" in µs
  sockperf under-load --tcp -i 127.0.0.1 -p "$SP" -m "$SIZE" --mps "$1" -t "$TIME" --reply-every 1 \
    --full-rtt >"$work/sp.out" 2>&1 || { cat "$work/sp.out" >&2; return 1; }
  python3 - "$work/sp.out" <<'EOF'
import re, sys
t = open(sys.argv[1]).read()
p = {k: float(v) for k, v in re.findall(r"percentile (\d+\.\d+) =\s+([\d.]+)", t)}
print(p["50.000"], p["99.000"], p["99.900"])
EOF
}

# linerate: open loop at the same rate, one connection, the same message in both directions,
# with its defaults (TCP_NODELAY for request/response tests, as sockperf's).
linerate_run() { # rate -> "p50 p99 p999 achieved"
  "$LR" bench "127.0.0.1:$LP" --key-file "$work/key" --test tcp-rr -l "$SIZE" --response "$SIZE" \
    --rate "$1" -t "$TIME" --omit 1 --json --no-save >"$work/lr.json" 2>"$work/lr.err" \
    || { cat "$work/lr.err" >&2; return 1; }
  grep -h "schedule was missed" "$work/lr.err" >&2 || true
  python3 - "$work/lr.json" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))["summary"]
l = s["latency_us"]
print(l["p50"], l["p99"], l["p999"], s["transactions_per_s"])
EOF
}

echo "open-loop latency, $SIZE-byte request and response, $RUNS runs of $TIME s per rate, alternating"
echo "$(date -u '+%Y-%m-%d %H:%M:%SZ'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
: >"$work/rows"
for rate in $RATES; do
  for r in $(seq 1 "$RUNS"); do
    sp=$(sockperf_run "$rate") || exit 1
    lr=$(linerate_run "$rate") || exit 1
    echo "$rate $sp $lr" >>"$work/rows"
    echo "  rate $rate run $r: sockperf p50/p99/p99.9 $sp µs; linerate $lr (last: achieved/s)"
  done
done
python3 - "$work/rows" <<'EOF'
import statistics as st, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1])]
print()
print(f"{'rate/s':>7} | {'sockperf p50':>12} {'p99':>8} {'p99.9':>8} | {'linerate p50':>12} {'p99':>8} {'p99.9':>8} | {'ratio p50':>9} {'p99':>6} {'p99.9':>6} | achieved/s")
met = True
for rate in sorted({r[0] for r in rows}):
    rs = [r for r in rows if r[0] == rate]
    m = [st.median(r[i] for r in rs) for i in range(1, 8)]
    ratio = [m[3 + i] / m[i] if m[i] > 0 else float("inf") for i in range(3)]
    met &= ratio[0] <= 1.2
    missed = " (schedule missed)" if m[6] < 0.95 * rate else ""
    print(f"{rate:>7.0f} | {m[0]:>12.1f} {m[1]:>8.1f} {m[2]:>8.1f} | {m[3]:>12.1f} {m[4]:>8.1f} {m[5]:>8.1f} | {ratio[0]:>9.2f} {ratio[1]:>6.2f} {ratio[2]:>6.2f} | {m[6]:.0f}{missed}")
print()
print("goal p50 <= 1.2 x sockperf at every rate:", "met" if met else "NOT met")
EOF
