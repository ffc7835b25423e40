#!/usr/bin/env bash
# The client's CPU for a paced TCP stream (`bench -b RATE`) against iperf3's (`iperf3 -c -b RATE`)
# on loopback, alternating, RUNS times each at each rate. CPU is the client process's user +
# system seconds (from its rusage, read by python3 as the process ends) over the test's seconds;
# the rate each tool delivered is printed beside it, so a cheaper run that sends less is seen.
# Goal (issue 43): linerate's client CPU at most 2 x iperf3's at each rate.
#
# Usage: bench/paced-tcp-cpu.sh [--runs R] [--time T] [--rates "100M 1G 5G"] [--linerate PATH]
# Needs iperf3 and python3. Traffic stays on 127.0.0.1.
# Exit: 0 when every run completed (goal met or not), 1 when a tool failed, 2 bad usage.
set -euo pipefail

RUNS=3 TIME=5 RATES="100M 1G 5G" LR=""
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) RUNS="$2"; shift 2 ;;
    --time) TIME="$2"; shift 2 ;;
    --rates) RATES="$2"; shift 2 ;;
    --linerate) LR="$2"; shift 2 ;;
    -h|--help) sed -n 2,10p "$0"; exit 0 ;;
    *) echo "paced-tcp-cpu: unknown option $1" >&2; exit 2 ;;
  esac
done
die() { echo "paced-tcp-cpu: $*" >&2; exit 1; }
root="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=bench/lib.sh
. "$root/bench/lib.sh"
find_linerate "$LR" "$root"
command -v iperf3 >/dev/null || { echo "paced-tcp-cpu: iperf3 is not installed" >&2; exit 2; }
command -v python3 >/dev/null || { echo "paced-tcp-cpu: python3 is needed" >&2; exit 2; }

work="$(mktemp -d /tmp/linerate-paced.XXXXXX)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT INT TERM
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
IP=$(port); LP=$(port)
"$LINERATE" keygen "$work/key" 2>/dev/null
iperf3 -s -B 127.0.0.1 -p "$IP" >/dev/null 2>&1 & pids+=($!)
"$LINERATE" serve --listen "127.0.0.1:$LP" --key-file "$work/key" --quiet & pids+=($!)
# both servers answer before the first run (a bounded wait on their ports)
for p in "$IP" "$LP"; do
  python3 - "$p" <<'PY' || die "a server did not start on port $p"
import socket, sys, time
for _ in range(100):
    try:
        socket.create_connection(("127.0.0.1", int(sys.argv[1])), 0.1).close(); sys.exit(0)
    except OSError:
        time.sleep(0.05)
sys.exit(1)
PY
done

# one client run: "<cpu seconds> <delivered bit/s>" appended to $work/<tool>.<rate>
run() {
  local tool="$1" rate="$2"
  python3 - "$tool" "$rate" "$TIME" "$LINERATE" "$work" "$IP" "$LP" <<'PY' >> "$work/$1.$2" || die "$1 at $2 failed"
import json, resource, subprocess, sys
tool, rate, t, lr, work, ip, lp = sys.argv[1:]
if tool == "iperf3":
    cmd = ["iperf3", "-c", "127.0.0.1", "-p", ip, "-b", rate, "-t", t, "-J"]
else:
    cmd = [lr, "bench", f"127.0.0.1:{lp}", "--key-file", f"{work}/key", "-b", rate, "-t", t, "--json", "--no-save"]
before = resource.getrusage(resource.RUSAGE_CHILDREN)
out = subprocess.run(cmd, capture_output=True, check=True).stdout
after = resource.getrusage(resource.RUSAGE_CHILDREN)
cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
j = json.loads(out)
bps = j["end"]["sum_received"]["bits_per_second"] if tool == "iperf3" else j["summary"]["throughput_bps"]
print(cpu, bps)
PY
}
for rate in $RATES; do
  for _ in $(seq 1 "$RUNS"); do
    run iperf3 "$rate"
    run linerate "$rate"
  done
done

echo "== client CPU of a paced TCP stream, $RUNS runs of $TIME s each, alternating (median, range)"
python3 - "$work" "$TIME" $RATES <<'PY'
import statistics as st, sys
work, t, rates = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
print(f"{'rate':>6}  {'iperf3 CPU %':>18}  {'linerate CPU %':>18}  {'ratio':>5}  {'iperf3 Gbit/s':>13}  {'linerate Gbit/s':>15}")
for r in rates:
    rows = {}
    for tool in ("iperf3", "linerate"):
        v = [tuple(map(float, l.split())) for l in open(f"{work}/{tool}.{r}") if l.strip()]
        cpu = [c / t * 100 for c, _ in v]
        rows[tool] = (st.median(cpu), min(cpu), max(cpu), st.median([b for _, b in v]) / 1e9)
    i, l = rows["iperf3"], rows["linerate"]
    fmt = lambda x: f"{x[0]:5.1f} ({x[1]:.1f}–{x[2]:.1f})"
    print(f"{r:>6}  {fmt(i):>18}  {fmt(l):>18}  {l[0] / max(i[0], 1e-9):5.2f}  {i[3]:13.3f}  {l[3]:15.3f}")
PY
