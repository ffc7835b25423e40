#!/usr/bin/env bash
# Small-datagram packet rates: `linerate bench -u` against iperf3 -u on the same loopback path in
# the same run, alternating, medians of --runs. One stream, --size-byte datagrams (64), unpaced
# on both sides (iperf3 -b 0; linerate --pps far above what loopback carries). Counted at the
# receiver: datagrams per second that arrived, and the loss it saw (sent but not received).
# linerate is measured twice per run: by default (sendmmsg/recvmmsg batches, one datagram per
# message: one packet on the wire) and with --gsro (UDP GSO and GRO trains), so the share of the
# gain the kernel's offloads bring is shown apart.
#
# Usage: bench/udp-pps-vs-iperf3.sh [--runs R] [--time T] [--size B] [--linerate PATH]
# Exit: 0 when every run completed (goal met or not), 1 when a tool failed, 2 bad usage.
set -euo pipefail

RUNS=3 TIME=5 SIZE=64 LR=""
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) RUNS="$2"; shift 2 ;;
    --time) TIME="$2"; shift 2 ;;
    --size) SIZE="$2"; shift 2 ;;
    --linerate) LR="$2"; shift 2 ;;
    -h|--help) sed -n 2,11p "$0"; exit 0 ;;
    *) echo "udp-pps-vs-iperf3: unknown option $1" >&2; exit 2 ;;
  esac
done
root="$(cd "$(dirname "$0")/.." && pwd)"
die() { echo "udp-pps-vs-iperf3: $*" >&2; exit 1; }
# shellcheck source=bench/lib.sh
. "$root/bench/lib.sh"
find_linerate "$LR" "$root"
LR=$LINERATE
command -v iperf3 >/dev/null || { echo "udp-pps-vs-iperf3: iperf3 is not installed" >&2; exit 2; }
command -v python3 >/dev/null || { echo "udp-pps-vs-iperf3: python3 is needed for the JSON" >&2; exit 2; }

work="$(mktemp -d /tmp/linerate-udp-pps.XXXXXX)"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT INT TERM

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
IP=$(port); LP=$(port)
"$LR" keygen "$work/key" 2>/dev/null
iperf3 -s -B 127.0.0.1 -p "$IP" >/dev/null 2>&1 & pids+=($!)
"$LR" serve --listen "127.0.0.1:$LP" --key-file "$work/key" --quiet & pids+=($!)
# Wait until both servers accept (no fixed sleep): each port answers a TCP connect.
for p in "$IP" "$LP"; do
  python3 - "$p" <<'PY' || die "a server did not start on port $p"
import socket, sys, time
end = time.monotonic() + 10
while True:
    try:
        socket.create_connection(("127.0.0.1", int(sys.argv[1])), 0.2).close(); break
    except OSError:
        if time.monotonic() > end: sys.exit(1)
        time.sleep(0.05)
PY
done

# Far above loopback's packet rate: the sender is never held back by pacing.
PPS=100000000
iperf_run() {
  iperf3 -c 127.0.0.1 -p "$IP" -u -l "$SIZE" -b 0 -t "$TIME" -J > "$work/i.json" || return 1
  python3 - "$work/i.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))["end"]
s = d.get("sum_received") or d["sum"]
sent = d.get("sum_sent", d["sum"])
pk, lost, secs = s["packets"], s["lost_packets"], s["seconds"]
# iperf3 counts a datagram lost when a later one arrived first; packets is the highest sequence.
print((pk - lost) / secs, 100.0 * lost / max(pk, 1), sent["packets"] / sent["seconds"])
PY
}
linerate_run() { # $@ = extra flags (--gsro)
  "$LR" bench "127.0.0.1:$LP" --key-file "$work/key" -u -l "$SIZE" --pps "$PPS" \
    -t "$TIME" --json --no-save "$@" > "$work/l.json" || return 1
  python3 - "$work/l.json" "$SIZE" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))["summary"]
print(s["packets_per_s"], s["loss_pct"], s["sender_bps"] / 8 / int(sys.argv[2]))
PY
}

echo "== $SIZE-byte UDP datagrams, one stream, $RUNS runs of $TIME s, alternating (received/s, receiver's loss, sent/s)"
: > "$work/rows"
for r in $(seq 1 "$RUNS"); do
  read -r ip il is < <(iperf_run) || die "iperf3 failed"
  read -r lp ll ls < <(linerate_run) || die "linerate bench failed"
  read -r op ol os < <(linerate_run --gsro) || die "linerate bench --gsro failed"
  echo "$ip $il $is $lp $ll $ls $op $ol $os" >> "$work/rows"
  python3 - "$ip" "$il" "$is" "$lp" "$ll" "$ls" "$op" "$ol" "$os" <<'PY'
import sys
ip, il, is_, lp, ll, ls, op, ol, os_ = map(float, sys.argv[1:])
print(f"  run: iperf3 {ip:>11,.0f}/s rx ({il:5.2f}% loss, {is_:>11,.0f}/s tx)   "
      f"linerate {lp:>11,.0f}/s rx ({ll:5.2f}% loss, {ls:>11,.0f}/s tx)   "
      f"--gsro {op:>11,.0f}/s rx ({ol:5.2f}% loss)   x{lp/ip:.1f}")
PY
done
python3 - "$work/rows" <<'PY'
import sys, statistics as st
rows = [list(map(float, l.split())) for l in open(sys.argv[1])]
m = [st.median(r[i] for r in rows) for i in range(9)]
print(f"median received/s: iperf3 {m[0]:,.0f} ({m[1]:.2f}% loss), linerate {m[3]:,.0f} ({m[4]:.2f}% loss), "
      f"linerate --gsro {m[6]:,.0f} ({m[7]:.2f}% loss)")
print(f"median sent/s: iperf3 {m[2]:,.0f}, linerate {m[5]:,.0f}, linerate --gsro {m[8]:,.0f}")
print(f"linerate / iperf3 received datagrams/s: {m[3]/m[0]:.1f}x; with --gsro {m[6]/m[0]:.1f}x")
PY
