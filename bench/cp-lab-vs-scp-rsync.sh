#!/usr/bin/env bash
# linerate cp against scp and rsync over ssh and against iperf3's ceiling, in a two-namespace
# lab over one 10 Gbit/s link (tbf), on the same trees: one 2 GiB file and 20,000 small files.
#
# Runs scenarios/06-cp-vs-scp-rsync.toml ROUNDS times in a row (each round runs every tool once,
# so the tools alternate), then prints the median rate of each and the ratios
# linerate/scp, linerate/rsync and linerate/iperf3. Needs root (network namespaces), iperf3,
# ssh, sshd, scp and rsync. The lab removes its namespaces, processes and trees itself, also on
# failure; this script removes its own work directory.
#
# Usage: sudo bench/cp-lab-vs-scp-rsync.sh [--rounds N] [--linerate PATH] [--keep DIR]
# Exit status: 0 when every run of every round succeeded, 1 when some failed (the table shows
# what succeeded), 2 for bad usage or setup.

set -euo pipefail

usage() {
    cat <<'USAGE'
Usage: bench/cp-lab-vs-scp-rsync.sh [OPTIONS]

Options:
  --rounds N       times to run the scenario (default 3)
  --linerate PATH  linerate binary (default: <repo>/target/release/linerate, built with
                   `cargo build --release -p linerate` if missing)
  --keep DIR       keep each round's results JSON in DIR (created if missing)
  -h, --help       this help
USAGE
}

die() { echo "cp-lab-vs-scp-rsync: $*" >&2; exit 2; }

ROUNDS=3
LINERATE=""
KEEP=""
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) [ $# -ge 2 ] || die "--rounds needs a value"; ROUNDS=$2; shift 2 ;;
        --linerate) [ $# -ge 2 ] || die "--linerate needs a value"; LINERATE=$2; shift 2 ;;
        --keep) [ $# -ge 2 ] || die "--keep needs a value"; KEEP=$2; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) usage >&2; die "unknown argument: $1" ;;
    esac
done
[[ "$ROUNDS" =~ ^[0-9]+$ ]] && [ "$ROUNDS" -ge 1 ] && [ "$ROUNDS" -le 100 ] || die "--rounds must be 1 to 100"
[ "$(id -u)" = 0 ] || die "the lab needs root (network namespaces)"
for t in python3 iperf3 ssh scp rsync; do
    command -v "$t" >/dev/null 2>&1 || die "$t is required (apt-get install iperf3 openssh-client openssh-server rsync python3)"
done
[ -x /usr/sbin/sshd ] || command -v sshd >/dev/null 2>&1 || die "sshd is required (apt-get install openssh-server)"

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SCENARIO="$ROOT/scenarios/06-cp-vs-scp-rsync.toml"
[ -f "$SCENARIO" ] || die "missing $SCENARIO"
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
find_linerate "$LINERATE" "$ROOT"

WORK=$(mktemp -d /tmp/linerate-cp-lab.XXXXXX)
# shellcheck disable=SC2317  # invoked by the trap
cleanup() { rm -rf -- "$WORK"; }
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

failed=0
for i in $(seq 1 "$ROUNDS"); do
    echo "round $i/$ROUNDS: linerate lab run $(basename "$SCENARIO")" >&2
    if ! (cd "$WORK" && "$LINERATE" lab run "$SCENARIO" --no-save -o "$WORK/round-$i.json" >&2); then
        echo "cp-lab-vs-scp-rsync: round $i failed (see above)" >&2
        failed=1
    fi
done
if [ -n "$KEEP" ]; then
    mkdir -p -- "$KEEP" && cp -- "$WORK"/round-*.json "$KEEP"/ 2>/dev/null || true
fi

python3 - "$WORK" "$LINERATE" <<'PY' || failed=1
import glob, json, statistics, subprocess, sys
work, linerate = sys.argv[1], sys.argv[2]
rates, fails, machine = {}, {}, {}
for path in sorted(glob.glob(work + "/round-*.json")):
    doc = json.load(open(path))
    machine = doc.get("machine", machine)
    for r in doc.get("runs", []):
        name = r.get("name", "?")
        if r.get("ok") and isinstance(r.get("rate_bps"), (int, float)):
            rates.setdefault(name, []).append(r["rate_bps"] / 1e9)
        else:
            fails[name] = fails.get(name, 0) + 1
if not rates:
    sys.exit("no successful runs")
med = {k: statistics.median(v) for k, v in rates.items()}
version = subprocess.run([linerate, "--version"], capture_output=True, text=True).stdout.strip()
print(f"# {version}; kernel {machine.get('kernel', '?')}; {machine.get('cpus', '?')} CPUs; 10 Gbit/s tbf link, MTU 1500")
print("| run | median Gbit/s | runs (Gbit/s) | failed |")
print("|---|---:|---|---:|")
for k in ["iperf3", "cp-big", "scp-big", "rsync-big", "cp-small", "scp-small", "rsync-small"]:
    if k in med or k in fails:
        runs = ", ".join(f"{x:.2f}" for x in rates.get(k, []))
        print(f"| {k} | {med.get(k, float('nan')):.2f} | {runs} | {fails.get(k, 0)} |")
def ratio(a, b):
    return f"{med[a] / med[b]:.2f}x" if a in med and b in med and med[b] > 0 else "n/a"
print()
print("| tree | linerate/scp | linerate/rsync | linerate/iperf3 |")
print("|---|---:|---:|---:|")
for t in ["big", "small"]:
    print(f"| {t} | {ratio('cp-' + t, 'scp-' + t)} | {ratio('cp-' + t, 'rsync-' + t)} | {ratio('cp-' + t, 'iperf3')} |")
if fails:
    sys.exit(1)
PY
exit "$failed"
