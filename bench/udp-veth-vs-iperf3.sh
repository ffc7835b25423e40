#!/usr/bin/env bash
# UDP across a veth pair between two namespaces, counted by the wire and by each tool (issue 43):
# `linerate bench -u -l 64 -b 0` against `iperf3 -u -l 64 -b 0`, alternating, and paced runs
# (`-b 100M`, `-b 1G`, datagrams of the path's MSS) for goodput against the offered rate. The
# unpaced rows put each tool's received datagrams/s beside the receiving veth's rx_packets/s
# over the test (its counter read before and after, divided by the test's length: the control
# connection's few packets included); linerate with --gsro is run too, to show what trains do
# to the tool's count against the wire's. Namespaces and veth names carry this script's PID and
# are removed on exit, failure or Ctrl-C; traffic stays in 198.18.77.0/30.
#
# Usage: sudo bench/udp-veth-vs-iperf3.sh [--runs R] [--time T] [--size B] [--rates "100M 1G"]
#                                         [--linerate PATH]
# Exit: 0 when every run completed (goals met or not), 1 when a tool failed, 2 bad usage.
set -euo pipefail

RUNS=3 TIME=3 SIZE=64 RATES="100M 1G" LR=""
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) RUNS="$2"; shift 2 ;;
    --time) TIME="$2"; shift 2 ;;
    --size) SIZE="$2"; shift 2 ;;
    --rates) RATES="$2"; shift 2 ;;
    --linerate) LR="$2"; shift 2 ;;
    -h|--help) sed -n 2,13p "$0"; exit 0 ;;
    *) echo "udp-veth-vs-iperf3: unknown option $1" >&2; exit 2 ;;
  esac
done
root="$(cd "$(dirname "$0")/.." && pwd)"
die() { echo "udp-veth-vs-iperf3: $*" >&2; exit 1; }
# shellcheck source=bench/lib.sh
. "$root/bench/lib.sh"
find_linerate "$LR" "$root"
LR=$LINERATE
[ "$(id -u)" = 0 ] || { echo "udp-veth-vs-iperf3: needs root (network namespaces)" >&2; exit 2; }
for t in iperf3 python3 ip; do
  command -v "$t" >/dev/null || { echo "udp-veth-vs-iperf3: $t is needed" >&2; exit 2; }
done

A="lr-udp-a-$$" B="lr-udp-b-$$" VA="lrua$$" VB="lrub$$"
AIP=198.18.77.1 BIP=198.18.77.2 LPORT=7878 IPORT=5201
work="$(mktemp -d /tmp/linerate-udp-veth.XXXXXX)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  ip netns del "$A" 2>/dev/null || true
  ip netns del "$B" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT INT TERM

ip netns add "$A"
ip netns add "$B"
ip link add "$VA" netns "$A" type veth peer name "$VB" netns "$B"
ip -n "$A" addr add "$AIP/30" dev "$VA"
ip -n "$B" addr add "$BIP/30" dev "$VB"
for n in "$A" "$B"; do ip -n "$n" link set lo up; done
ip -n "$A" link set "$VA" up
ip -n "$B" link set "$VB" up
inA() { ip netns exec "$A" "$@"; }
inB() { ip netns exec "$B" "$@"; }

"$LR" keygen "$work/key" 2>/dev/null
inB "$LR" serve --listen "$BIP:$LPORT" --key-file "$work/key" --quiet & pids+=($!)
inB iperf3 -s -B "$BIP" -p "$IPORT" >/dev/null 2>&1 & pids+=($!)
# Wait until both servers accept (no fixed sleep): each port answers a TCP connect from A.
for p in "$LPORT" "$IPORT"; do
  inA python3 - "$BIP" "$p" <<'PY' || die "a server did not start on port $p"
import socket, sys, time
end = time.monotonic() + 10
while True:
    try:
        socket.create_connection((sys.argv[1], int(sys.argv[2])), 0.2).close(); break
    except OSError:
        if time.monotonic() > end: sys.exit(1)
        time.sleep(0.05)
PY
done

rx_packets() { inB cat "/sys/class/net/$VB/statistics/rx_packets"; }

# One linerate run: prints received/s, loss %, goodput bit/s, offered bit/s, datagrams per train.
linerate_run() { # $@ = bench flags
  inA "$LR" bench "$BIP:$LPORT" --key-file "$work/key" -u -t "$TIME" --json --no-save "$@" > "$work/l.json" \
    || return 1
  python3 - "$work/l.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))["summary"]
b = (s.get("udp_batching") or {}).get("datagrams_per_train") or 0
print(s["packets_per_s"], s["loss_pct"], s["throughput_bps"], s["sender_bps"], b)
PY
}
# One iperf3 run: the same five figures (its datagrams per train: 1).
iperf_run() { # $@ = iperf3 flags
  inA iperf3 -c "$BIP" -p "$IPORT" -u -t "$TIME" -J "$@" > "$work/i.json" || return 1
  python3 - "$work/i.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))["end"]
r = d.get("sum_received") or d["sum"]
sent = d.get("sum_sent") or d["sum"]
pk, lost, secs = r["packets"], r["lost_packets"], r["seconds"]
loss = 100.0 * lost / max(pk, 1)
# iperf3 before 3.13 has no sum_received: its UDP "sum" is the sender's rate with the receiver's loss.
goodput = r["bits_per_second"] if "sum_received" in d else r["bits_per_second"] * (1 - loss / 100.0)
print((pk - lost) / secs, loss, goodput, sent["bits_per_second"], 1)
PY
}
# Wraps a run with the receiving veth's counter: appends "wire_pps" to the tool's figures.
counted() {
  local before after out
  before=$(rx_packets)
  out=$("$@") || return 1
  after=$(rx_packets)
  echo "$out $(python3 -c "print(($after - $before) / $TIME)")"
}

echo "== $SIZE-byte datagrams, unpaced, $RUNS rounds of $TIME s, alternating (tool's received/s, loss, veth rx packets/s)"
: > "$work/unpaced"
for r in $(seq 1 "$RUNS"); do
  read -r lp ll _ _ lb lw < <(counted linerate_run -l "$SIZE" -b 0) || die "linerate bench failed"
  read -r ip il _ _ _ iw < <(counted iperf_run -l "$SIZE" -b 0) || die "iperf3 failed"
  read -r gp gl _ _ gb gw < <(counted linerate_run -l "$SIZE" -b 0 --gsro) || die "linerate bench --gsro failed"
  echo "$lp $ll $lw $ip $il $iw $gp $gl $gw $lb $gb" >> "$work/unpaced"
  python3 - "$lp" "$ll" "$lw" "$ip" "$il" "$iw" "$gp" "$gl" "$gw" "$gb" <<'PY'
import sys
lp, ll, lw, ip, il, iw, gp, gl, gw, gb = map(float, sys.argv[1:])
print(f"  linerate {lp:>10,.0f}/s ({ll:5.2f}% loss) veth {lw:>10,.0f}/s  |  iperf3 {ip:>10,.0f}/s ({il:5.2f}% loss) "
      f"veth {iw:>10,.0f}/s  |  --gsro {gp:>12,.0f}/s ({gl:5.2f}% loss) veth {gw:>10,.0f}/s, trains of {gb:.0f}")
PY
done
python3 - "$work/unpaced" <<'PY'
import sys, statistics as st
rows = [list(map(float, l.split())) for l in open(sys.argv[1])]
col = lambda i: [r[i] for r in rows]
def f(i, fmt="{:,.0f}"):
    c = col(i); return f"{fmt.format(st.median(c))} ({fmt.format(min(c))}-{fmt.format(max(c))})"
print(f"median (range): linerate {f(0)}/s, its veth {f(2)}/s; iperf3 {f(3)}/s, its veth {f(5)}/s; "
      f"linerate --gsro {f(6)}/s, its veth {f(8)}/s")
ratio = [r[0] / r[2] for r in rows if r[2] > 0]
print(f"linerate packets_per_s / veth rx packets/s: median {st.median(ratio):.3f} "
      f"({min(ratio):.3f}-{max(ratio):.3f}; goal within 10 %)")
print(f"linerate / iperf3 delivered: {st.median(col(0)) / st.median(col(3)):.2f}x (goal >= 1.5x); "
      f"--gsro counted / its veth: {st.median([r[6] / r[8] for r in rows if r[8] > 0]):.1f}x")
PY

for rate in $RATES; do
  echo "== paced -b $rate, datagrams of the path's MSS, $RUNS rounds of $TIME s (goodput / offered, loss)"
  : > "$work/paced"
  for r in $(seq 1 "$RUNS"); do
    read -r _ ll lg lo _ < <(linerate_run -b "$rate") || die "linerate bench -b $rate failed"
    read -r _ il ig io _ < <(iperf_run -b "$rate") || die "iperf3 -b $rate failed"
    echo "$lg $lo $ll $ig $io $il" >> "$work/paced"
    python3 - "$lg" "$lo" "$ll" "$ig" "$io" "$il" <<'PY'
import sys
lg, lo, ll, ig, io, il = map(float, sys.argv[1:])
print(f"  linerate {lg/1e6:8.2f} of {lo/1e6:8.2f} Mbit/s ({100*lg/lo:6.2f} %, {ll:.3f}% loss)  |  "
      f"iperf3 {ig/1e6:8.2f} of {io/1e6:8.2f} Mbit/s ({100*ig/io:6.2f} %, {il:.3f}% loss)")
PY
  done
  python3 - "$work/paced" <<'PY'
import sys, statistics as st
rows = [list(map(float, l.split())) for l in open(sys.argv[1])]
lr = [100 * r[0] / r[1] for r in rows]; ip = [100 * r[3] / r[4] for r in rows]
print(f"goodput / offered, median (range): linerate {st.median(lr):.2f} % ({min(lr):.2f}-{max(lr):.2f}), "
      f"iperf3 {st.median(ip):.2f} % ({min(ip):.2f}-{max(ip):.2f}); loss medians "
      f"{st.median(r[2] for r in rows):.3f} % and {st.median(r[5] for r in rows):.3f} %")
PY
done
