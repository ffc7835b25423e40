#!/usr/bin/env bash
# linerate's link emulator (issue 16): iperf3 through it against iperf3 over a plain veth pair,
# alternating, in two-namespace labs built by `linerate lab up`:
#   - no impairment, MTU 1500 and 9000 (what the emulator itself costs);
#   - 0.01 % loss at MTU 1500 (every wire packet drawn for: super-packets cut only when hit);
#   - 1 Gbit/s (tbf) with 100 ms round trip (50 ms each way), iperf3 -P 1 with the namespaces'
#     TCP buffers raised to 64 MiB (a 12.5 MB bandwidth-delay product held full or not).
# Prints each round, then medians and the emulator / veth ratio. Needs root, iperf3, python3.
# Usage: sudo bench/emulator.sh [--rounds N] [--linerate PATH] [--seconds S]
# Exit status: 0 done, 1 a measurement failed, 2 bad usage or setup.
set -euo pipefail

die() { echo "emulator: $*" >&2; exit 2; }
ROUNDS=3; SECS=5; LINERATE=""
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) ROUNDS=${2:?}; shift 2 ;;
        --seconds) SECS=${2:?}; shift 2 ;;
        --linerate) LINERATE=${2:?}; shift 2 ;;
        -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
        *) die "unknown argument: $1" ;;
    esac
done
[[ "$ROUNDS" =~ ^[0-9]+$ ]] && [ "$ROUNDS" -ge 1 ] && [ "$ROUNDS" -le 50 ] || die "--rounds must be 1 to 50"
[[ "$SECS" =~ ^[0-9]+$ ]] && [ "$SECS" -ge 1 ] && [ "$SECS" -le 120 ] || die "--seconds must be 1 to 120"
[ "$(id -u)" = 0 ] || die "needs root (network namespaces)"
for t in iperf3 python3; do command -v $t >/dev/null || die "$t is required"; done
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
find_linerate "$LINERATE" "$ROOT"

WORK=$(mktemp -d /tmp/linerate-emulator.XXXXXX)
RUN=""
cleanup() {
    [ -n "$RUN" ] && "$LINERATE" lab down "$RUN" >/dev/null 2>&1 || true
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# scenario NAME MTU LINK-LINES -> file
scenario() {
    printf 'name = "%s"\n[[host]]\nname = "a"\n[[host]]\nname = "b"\n[[link]]\na = "a"\nb = "b"\nmtu = %s\n%b' \
        "$1" "$2" "$3" >"$WORK/$1.toml"
    echo "$WORK/$1.toml"
}

# measure SCENARIO-FILE BIG-BUFFERS -> Gbit/s of iperf3 -P 1 from a to b
measure() {
    local out
    out=$("$LINERATE" lab up "$1" --detach 2>&1) || { echo "lab up failed: $out" >&2; return 1; }
    RUN=$(awk '/^lab /{print $2; exit}' <<<"$out")
    if [ "$2" = 1 ]; then
        for h in a b; do
            "$LINERATE" lab exec "$h" --run "$RUN" -- sysctl -q -w net.ipv4.tcp_rmem="4096 131072 67108864" \
                net.ipv4.tcp_wmem="4096 16384 67108864"
        done
    fi
    "$LINERATE" lab exec b --run "$RUN" -- iperf3 -s -1 -D -p 5201 -I "$WORK/iperf3.pid"
    sleep 0.5
    "$LINERATE" lab exec a --run "$RUN" -- iperf3 -c 198.18.1.2 -p 5201 -t "$SECS" -O 1 -J >"$WORK/r.json" || true
    "$LINERATE" lab down "$RUN" >/dev/null 2>&1 || true
    RUN=""
    python3 -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["end"]["sum_received"]["bits_per_second"]/1e9, 3))' \
        "$WORK/r.json" || return 1
}

CASES=(
    "veth-1500|$(scenario veth1500 1500 '')|0"
    "emulator-1500|$(scenario emu1500 1500 'emulator = "linerate"\ndelay = "0ms"\n')|0"
    "emulator-1500-loss|$(scenario emuloss 1500 'emulator = "linerate"\ndelay = "0ms"\nloss = 0.01\n')|0"
    "veth-9000|$(scenario veth9000 9000 '')|0"
    "emulator-9000|$(scenario emu9000 9000 'emulator = "linerate"\ndelay = "0ms"\n')|0"
    "1g-100ms-rtt|$(scenario wan 1500 'emulator = "linerate"\nrate = "1gbit"\ndelay = "50ms"\n')|1"
)
RES="$WORK/results"
: >"$RES"
echo "# linerate $("$LINERATE" --version 2>/dev/null | awk '{print $2}'); kernel $(uname -r); $(nproc) CPUs; iperf3 -P 1, ${SECS} s, $ROUNDS round(s)"
for r in $(seq 1 "$ROUNDS"); do
    for c in "${CASES[@]}"; do
        IFS='|' read -r name file big <<<"$c"
        g=$(measure "$file" "$big") || { echo "round $r $name: FAILED" >&2; exit 1; }
        echo "round $r  $name  $g Gbit/s"
        echo "$name $g" >>"$RES"
    done
done
python3 - "$RES" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    n, g = line.split()
    rows.setdefault(n, []).append(float(g))
med = {n: statistics.median(v) for n, v in rows.items()}
print("| path | median Gbit/s | min–max | × veth |")
print("|---|---:|---|---:|")
for n, v in rows.items():
    ref = {"emulator-1500": "veth-1500", "emulator-1500-loss": "veth-1500", "emulator-9000": "veth-9000"}.get(n)
    x = f"{med[n] / med[ref]:.2f}" if ref else ""
    print(f"| {n} | {med[n]:.2f} | {min(v):.2f}–{max(v):.2f} | {x} |")
PY
