#!/usr/bin/env bash
# linerate cp in every mode (push and pull to its daemon, push and pull over ssh) against
# iperf3 (1 and 4 streams), scp, rsync, tar | ssh and rclone (sftp, --transfers 8), in a
# two-namespace lab over one 10 Gbit/s link (tbf burst 4 MiB latency 10 ms, MTU 1500), the
# trees on tmpfs at both ends (issue 15).
#
# Runs scenarios/07-cp-modes.toml ROUNDS times in a row (each round runs every tool once, so
# the tools alternate), then prints for each run: the median rate, min-max, the median against
# iperf3's 1-stream and 4-stream medians, and the whole machine's busy CPU core-seconds per GB
# moved (both ends, softirq included, from /proc/stat over the run). The lab compares every copy
# with its source byte for byte and fails the run if they differ. Needs root (network
# namespaces), iperf3, ssh, sshd, scp, rsync, tar, rclone, diff and python3. The lab removes its
# namespaces, processes and trees itself, also on failure or a signal; this script removes its
# own work directory, and checks at the end that nothing of the lab is left.
#
# With --scenario FILE it runs another scenario the same way (the long paths of issue 16:
# scenarios/08-10), its iperf3 runs named iperf3-1 and iperf3-4 giving the ratio columns.
#
# Usage: sudo bench/cp-modes.sh [--rounds N] [--linerate PATH] [--quick] [--keep DIR] [--scenario FILE]
# Exit status: 0 when every run of every round succeeded, 1 when some failed (the table shows
# what succeeded), 2 for bad usage or setup, 130/143 when interrupted.

set -euo pipefail

usage() {
    cat <<'USAGE'
Usage: bench/cp-modes.sh [OPTIONS]

Options:
  --rounds N       times to run the scenario (default 3; --quick: 1)
  --linerate PATH  linerate binary (default: <target>/release/linerate, built with
                   `cargo build --release -p linerate` if missing)
  --quick          smoke test: trees 20x smaller (the big file 64 MiB), iperf3 2 s, 1 round
  --keep DIR       keep each round's results JSON in DIR (created if missing)
  --scenario FILE  run this scenario instead of scenarios/07-cp-modes.toml
  -h, --help       this help
USAGE
}

die() { echo "cp-modes: $*" >&2; exit 2; }

ROUNDS=""
SCENARIO_ARG=""
LINERATE=""
KEEP=""
QUICK=0
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) [ $# -ge 2 ] || die "--rounds needs a value"; ROUNDS=$2; shift 2 ;;
        --linerate) [ $# -ge 2 ] || die "--linerate needs a value"; LINERATE=$2; shift 2 ;;
        --keep) [ $# -ge 2 ] || die "--keep needs a value"; KEEP=$2; shift 2 ;;
        --quick) QUICK=1; shift ;;
        --scenario) [ $# -ge 2 ] || die "--scenario needs a value"; SCENARIO_ARG=$2; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) usage >&2; die "unknown argument: $1" ;;
    esac
done
if [ -z "$ROUNDS" ]; then
    if [ "$QUICK" = 1 ]; then ROUNDS=1; else ROUNDS=3; fi
fi
[[ "$ROUNDS" =~ ^[0-9]+$ ]] && [ "$ROUNDS" -ge 1 ] && [ "$ROUNDS" -le 100 ] || die "--rounds must be 1 to 100"
[ "$(id -u)" = 0 ] || die "the lab needs root (network namespaces)"
for t in python3 iperf3 ssh scp rsync tar rclone diff; do
    command -v "$t" >/dev/null 2>&1 \
        || die "$t is required (apt-get install iperf3 openssh-client openssh-server rsync rclone diffutils python3)"
done
[ -x /usr/sbin/sshd ] || command -v sshd >/dev/null 2>&1 || die "sshd is required (apt-get install openssh-server)"

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SCENARIO="${SCENARIO_ARG:-$ROOT/scenarios/07-cp-modes.toml}"
SCENARIO=$(cd "$(dirname "$SCENARIO")" 2>/dev/null && pwd)/$(basename "$SCENARIO")
[ -f "$SCENARIO" ] || die "missing $SCENARIO"
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
find_linerate "$LINERATE" "$ROOT"

# tmpfs holds every tree (about 3.3 GB) and the largest copy (2 GiB) at once.
need=$((6 * 1024 * 1024 * 1024))
[ "$QUICK" = 1 ] && need=$((512 * 1024 * 1024))
avail=$(df --output=avail -B1 /dev/shm 2>/dev/null | tail -n 1 | tr -d ' ')
[[ "$avail" =~ ^[0-9]+$ ]] || die "cannot read the free space of /dev/shm"
[ "$avail" -ge "$need" ] || die "/dev/shm has $((avail >> 20)) MiB free; the trees and copies need $((need >> 20)) MiB"

WORK=$(mktemp -d /tmp/linerate-cp-modes.XXXXXX)
CHILD=""
# shellcheck disable=SC2317  # invoked by the trap
cleanup() {
    # The lab tears itself down on SIGTERM; wait for it before removing our files.
    if [ -n "$CHILD" ] && kill -0 "$CHILD" 2>/dev/null; then
        kill -TERM "$CHILD" 2>/dev/null || true
        wait "$CHILD" 2>/dev/null || true
    fi
    rm -rf -- "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [ "$QUICK" = 1 ]; then
    # Smaller trees, shorter iperf3: the same runs, for a smoke test.
    python3 - "$SCENARIO" "$WORK/cp-modes-quick.toml" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
def files(m):
    n = int(m.group(1))
    return f"files = {n if n == 1 else max(2, n // 20)}"
text = re.sub(r"^files = (\d+)$", files, text, flags=re.M)
# the one big file: 2 GiB / 32 = 64 MiB (mktree's one draw scales with the mean)
text = re.sub(r"^file_size = 4157813816$", f"file_size = {4157813816 // 32}", text, flags=re.M)
text = re.sub(r"^seconds = \d+$", "seconds = 2", text, flags=re.M)
open(sys.argv[2], "w").write(text)
PY
    SCENARIO="$WORK/cp-modes-quick.toml"
fi

load=$(cut -d' ' -f1-3 /proc/loadavg)
failed=0
for i in $(seq 1 "$ROUNDS"); do
    echo "round $i/$ROUNDS: linerate lab run $(basename "$SCENARIO")" >&2
    # In the background, so that a signal reaches the traps at once (they stop the lab).
    (cd "$WORK" && exec "$LINERATE" lab run "$SCENARIO" --no-save -o "$WORK/round-$i.json") >&2 &
    CHILD=$!
    rc=0
    wait "$CHILD" || rc=$?
    CHILD=""
    case "$rc" in
        0) ;;
        130|143) echo "cp-modes: interrupted; the lab was torn down" >&2; exit "$rc" ;;
        *) echo "cp-modes: round $i: some runs failed or the lab did not finish (see above)" >&2; failed=1 ;;
    esac
done
if [ -n "$KEEP" ]; then
    mkdir -p -- "$KEEP" && cp -- "$WORK"/round-*.json "$KEEP"/ 2>/dev/null || true
fi

python3 - "$WORK" "$LINERATE" "$ROUNDS" "$QUICK" "$load" <<'PY' || failed=1
import glob, json, os, statistics, subprocess, sys
work, linerate, rounds, quick, load = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1", sys.argv[5]
order, rates, cpu, what, errors = [], {}, {}, {}, {}
machine, link, workdir, leftovers = {}, {}, "?", []
for path in sorted(glob.glob(work + "/round-*.json")):
    doc = json.load(open(path))
    machine = doc.get("machine", machine)
    link = (doc.get("lab", {}).get("links") or [link])[0]
    workdir = doc.get("workdir") or workdir
    # nothing of the lab may remain: namespaces, working directory
    rid = doc.get("run_id", "")
    if rid:
        leftovers += [n for n in os.listdir("/run/netns") if n.startswith(rid)] if os.path.isdir("/run/netns") else []
    if doc.get("workdir") and os.path.exists(doc["workdir"]):
        leftovers.append(doc["workdir"])
    for r in doc.get("runs", []):
        name = r.get("name", "?")
        if name not in order:
            order.append(name)
        mode = r.get("mode")
        what[name] = f"cp {mode}" if mode else r.get("tool", "?")
        if r.get("ok") and isinstance(r.get("rate_bps"), (int, float)):
            rates.setdefault(name, []).append(r["rate_bps"] / 1e9)
            c, b = r.get("machine_cpu_s"), r.get("bytes")
            if isinstance(c, (int, float)) and isinstance(b, (int, float)) and b > 0:
                cpu.setdefault(name, []).append(c / (b / 1e9))
        else:
            errors.setdefault(name, []).append(r.get("error") or "?")
if not order:
    sys.exit("cp-modes: no results")
med = {k: statistics.median(v) for k, v in rates.items()}
version = subprocess.run([linerate, "--version"], capture_output=True, text=True).stdout.strip()
rate = link.get("rate_bps")
shape = f"{rate / 1e9:g} Gbit/s" if rate else "unshaped"
if link.get("burst_bytes"):
    shape += f" tbf burst {link['burst_bytes'] >> 10} KiB latency {link.get('latency_us', 0) / 1000:g} ms"
if link.get("delay_us"):
    shape += f", {link['delay_us'] / 1000:g} ms each way"
if link.get("loss_pct"):
    shape += f", {link['loss_pct']:g} % loss"
print(f"# {version}; kernel {machine.get('kernel', '?')}; {machine.get('cpus', '?')} CPUs; load before {load}")
print(f"# link {shape}, MTU {link.get('mtu', '?')}; trees in {workdir}; {rounds} round(s){' (--quick: small trees)' if quick else ''}")
print("| run | tool | median Gbit/s | min–max | × iperf3 1 | × iperf3 4 | core-s/GB | ok |")
print("|---|---|---:|---|---:|---:|---:|---:|")
def ratio(name, ceiling):
    c = med.get(ceiling)
    return f"{med[name] / c:.2f}" if name in med and c else "–"
for k in order:
    v = rates.get(k, [])
    m = f"{med[k]:.2f}" if k in med else "–"
    span = f"{min(v):.2f}–{max(v):.2f}" if v else "–"
    c = f"{statistics.median(cpu[k]):.2f}" if cpu.get(k) else "–"
    n_ok, n = len(v), len(v) + len(errors.get(k, []))
    print(f"| {k} | {what.get(k, '?')} | {m} | {span} | {ratio(k, 'iperf3-1')} | {ratio(k, 'iperf3-4')} | {c} | {n_ok}/{n} |")
for k, es in errors.items():
    for e in sorted(set(es)):
        print(f"failed: {k}: {e}", file=sys.stderr)
if leftovers:
    print(f"cp-modes: left behind by the lab: {leftovers}", file=sys.stderr)
if errors or leftovers:
    sys.exit(1)
PY
exit "$failed"
