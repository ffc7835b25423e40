#!/usr/bin/env bash
# Benchmark `linerate cp` (memory to memory, over loopback, encrypted) against
# iperf3 (one unencrypted TCP stream over loopback) on the same machine.
#
# See bench/README.md. Usage: bench/cp-vs-iperf3.sh [--runs R] [--dir D]
#   [--streams N] [--linerate PATH] [--quick]
#
# Exit status: 0 when every copy completed (whether or not the targets are met),
# 1 when a copy failed or reported complete=false (or iperf3 could not run),
# 2 for bad usage or setup.

set -euo pipefail

usage() {
    cat <<'EOF'
Usage: bench/cp-vs-iperf3.sh [OPTIONS]

Compares `linerate cp` of a LARGE tree (640 files, mean 1.6 MB) and a SMALL tree
(20,000 files of 1-16 KiB), tmpfs to tmpfs, with iperf3 (one stream, 127.0.0.1).

Options:
  --runs R         repetitions (default 5; 2 with --quick)
  --dir D          work directory, must not exist; created and removed on exit
                   (default /dev/shm/linerate-bench-$$; should be on tmpfs)
  --streams N      passed as -P N to `linerate cp` (default: linerate's own)
  --linerate PATH  linerate binary (default: <repo>/target/release/linerate,
                   built with `cargo build --release` if missing)
  --quick          trees 10x smaller and 2 runs (smoke test)
  -h, --help       this help

Targets (issues 15 and 34): LARGE Gbit/s >= 0.6 x iperf3 and machine CPU per GB
<= 2 x iperf3's; SMALL >= 60000 files/s by the wall clock of the whole command
(process start to exit), local and pushed to a daemon on 127.0.0.1, and never
below `tar c | tar x` on the same file system in the same run; peak RSS < 64 MiB
on both sides. Exits 0 whether or not they are met.
EOF
}

die() { echo "cp-vs-iperf3: $*" >&2; exit 2; }
fail() { echo "cp-vs-iperf3: ERROR: $*" >&2; exit 1; }

# ---------------------------------------------------------------- options
RUNS=""
WORK=""
STREAMS=""
LINERATE=""
QUICK=0
while [ $# -gt 0 ]; do
    case "$1" in
        --runs) [ $# -ge 2 ] || die "--runs needs a value"; RUNS=$2; shift 2 ;;
        --runs=*) RUNS=${1#*=}; shift ;;
        --dir) [ $# -ge 2 ] || die "--dir needs a value"; WORK=$2; shift 2 ;;
        --dir=*) WORK=${1#*=}; shift ;;
        --streams) [ $# -ge 2 ] || die "--streams needs a value"; STREAMS=$2; shift 2 ;;
        --streams=*) STREAMS=${1#*=}; shift ;;
        --linerate) [ $# -ge 2 ] || die "--linerate needs a value"; LINERATE=$2; shift 2 ;;
        --linerate=*) LINERATE=${1#*=}; shift ;;
        --quick) QUICK=1; shift ;;
        -h|--help) usage; exit 0 ;;
        *) usage >&2; die "unknown argument: $1" ;;
    esac
done

if [ -z "$RUNS" ]; then
    if [ "$QUICK" = 1 ]; then RUNS=2; else RUNS=5; fi
fi
if ! [[ "$RUNS" =~ ^[0-9]+$ ]] || [ "$RUNS" -lt 1 ] || [ "$RUNS" -gt 1000 ]; then
    die "--runs must be an integer from 1 to 1000"
fi
if [ -n "$STREAMS" ] && { ! [[ "$STREAMS" =~ ^[0-9]+$ ]] || [ "$STREAMS" -lt 1 ]; }; then
    die "--streams must be a positive integer"
fi

if [ "$QUICK" = 1 ]; then
    LARGE_FILES=64;  SMALL_FILES=2000
else
    LARGE_FILES=640; SMALL_FILES=20000
fi
LARGE_MEAN=1600000; LARGE_PER_DIR=100
SMALL_MIN=1024; SMALL_MAX=16384; SMALL_PER_DIR=1000
IPERF_SECONDS=5
# issue 15's goals on this 2-core machine: cp at least 0.6 x iperf3 and at most 2 x its
# machine CPU per GB, 60,000 small files/s, peak RSS of either side under 64 MiB.
TARGET_RATIO=0.6
TARGET_CPU_X=2.0
TARGET_FPS=60000
TARGET_RSS_MIB=64

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# ---------------------------------------------------------------- tools
have() { command -v "$1" >/dev/null 2>&1; }

command -v python3 >/dev/null 2>&1 || die "python3 is required (used to parse JSON)"

if ! have iperf3; then
    echo "iperf3 not found; installing it with apt-get" >&2
    SUDO=()
    if [ "$(id -u)" != 0 ]; then
        have sudo || die "iperf3 is missing and I am not root (install it: apt-get install iperf3)"
        SUDO=(sudo)
    fi
    have apt-get || die "iperf3 is missing and apt-get is not available"
    "${SUDO[@]}" apt-get update -qq >&2 || die "apt-get update failed"
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iperf3 >&2 \
        || die "apt-get install iperf3 failed"
    have iperf3 || die "iperf3 still not found after installing it"
fi

if [ -z "$LINERATE" ]; then
    LINERATE="${CARGO_TARGET_DIR:-$ROOT/target}/release/linerate"
    if [ ! -x "$LINERATE" ]; then
        echo "building $LINERATE (cargo build --release)" >&2
        (cd "$ROOT" && cargo build --release) >&2 || die "cargo build --release failed"
    fi
fi
[ -x "$LINERATE" ] || die "linerate binary not found or not executable: $LINERATE"

# ---------------------------------------------------------------- work dir
CREATED=0
IPERF_PID=""
DAEMON_PID=""

# shellcheck disable=SC2317  # invoked by the trap below
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    if [ -n "$DAEMON_PID" ] && kill -0 "$DAEMON_PID" 2>/dev/null; then
        kill "$DAEMON_PID" 2>/dev/null || true
        wait "$DAEMON_PID" 2>/dev/null || true
    fi
    if [ -n "$IPERF_PID" ] && kill -0 "$IPERF_PID" 2>/dev/null; then
        kill "$IPERF_PID" 2>/dev/null || true
        wait "$IPERF_PID" 2>/dev/null || true
    fi
    if [ "$CREATED" = 1 ] && [ -n "$WORK" ] && [ -d "$WORK" ]; then
        rm -rf -- "$WORK"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

[ -n "$WORK" ] || WORK="/dev/shm/linerate-bench-$$"
[ -e "$WORK" ] && die "work directory already exists (it would be deleted on exit): $WORK"
mkdir -- "$WORK" || die "cannot create work directory $WORK"
CREATED=1
WORK=$(cd "$WORK" && pwd)

FSTYPE=$(stat -f -c %T "$WORK" 2>/dev/null || echo unknown)
if [ "$FSTYPE" != tmpfs ] && [ "$FSTYPE" != ramfs ]; then
    echo "WARNING: $WORK is on $FSTYPE, not tmpfs: the copies will measure that file system too" >&2
fi

# Two source trees plus one copy at a time: about 2x (1.03 GB + 0.22 GB) at full size.
NEED_KB=$(( (LARGE_FILES * LARGE_MEAN * 23 / 10 + SMALL_FILES * 12 * 1024 * 23 / 10) / 1024 ))
AVAIL_KB=$(df -Pk "$WORK" | awk 'NR == 2 { print $4 }')
if [ -n "$AVAIL_KB" ] && [ "$AVAIL_KB" -lt "$NEED_KB" ]; then
    die "need about $((NEED_KB / 1024)) MiB free in $WORK, only $((AVAIL_KB / 1024)) MiB available"
fi

# ---------------------------------------------------------------- JSON helper
PY="$WORK/helper.py"
cat >"$PY" <<'EOF'
import json, statistics, sys

MIB = 1048576.0

def load(path):
    with open(path) as f:
        return json.load(f)

def cp_fields(path):
    """One line: complete files bytes seconds gbit streams cipher cpu_c cpu_s rss_c rss_s"""
    j = load(path)
    cpu = j["cpu"]
    rss = j["peak_rss_bytes"]
    print(
        "true" if j.get("complete") is True else "false",
        int(j["files"]), int(j["bytes"]), repr(float(j["seconds"])),
        repr(float(j["gbit_per_s"])), j.get("streams", "?"), j.get("cipher", "?"),
        repr(cpu["client"]["user_s"] + cpu["client"]["system_s"]),
        repr(cpu["server"]["user_s"] + cpu["server"]["system_s"]),
        repr(rss["client"] / MIB), repr(rss["server"] / MIB),
    )

def iperf(path):
    j = load(path)
    if "error" in j:
        sys.exit("iperf3: " + str(j["error"]))
    e = j["end"]["sum_received"]
    print(repr(e["bits_per_second"] / 1e9), int(e["bytes"]))

# Results file columns (tab-separated), one line per run.
COLS = ["run", "iperf", "i_cpb", "l_gbit", "l_ratio", "l_cpb", "l_cpu_x", "l_cpu_c", "l_cpu_s",
        "l_rss_c", "l_rss_s", "s_fps", "s_gbit", "s_cpu_c", "s_cpu_s", "s_rss_c", "s_rss_s",
        "s_wall", "s_daemon", "tar"]

def fmt(label, r):
    return ("%-6s %7.2f %5.2f | %7.2f %5.2f %5.2f %5.2f %6.2f %6.2f %6.1f %6.1f | %8.0f %6.2f %6.2f %6.2f %6.1f %6.1f"
            " | %7.0f %7.0f %7.0f"
            % (label, r["iperf"], r["i_cpb"], r["l_gbit"], r["l_ratio"], r["l_cpb"], r["l_cpu_x"],
               r["l_cpu_c"], r["l_cpu_s"], r["l_rss_c"], r["l_rss_s"], r["s_fps"], r["s_gbit"],
               r["s_cpu_c"], r["s_cpu_s"], r["s_rss_c"], r["s_rss_s"], r["s_wall"], r["s_daemon"], r["tar"]))

def row(*vals):
    r = dict(zip(COLS, [float(v) for v in vals]))
    print(fmt(str(int(r["run"])), r))

def summary(path, t_ratio, t_cpu_x, t_fps, t_rss):
    rows = []
    with open(path) as f:
        for line in f:
            if line.strip():
                rows.append(dict(zip(COLS, [float(v) for v in line.split()])))
    med = {c: statistics.median(r[c] for r in rows) for c in COLS}
    print("-" * 148)
    print(fmt("median", med))
    ratio, cpu_x = med["l_ratio"], med["l_cpu_x"]
    # small files by the wall clock of the whole command, the slower of local and to a daemon
    fps = min(med["s_wall"], med["s_daemon"])
    below_tar = sum(1 for r in rows if min(r["s_wall"], r["s_daemon"]) < r["tar"])
    rss = max(max(r[c] for c in ("l_rss_c", "l_rss_s", "s_rss_c", "s_rss_s")) for r in rows)
    t_ratio, t_cpu_x, t_fps, t_rss = float(t_ratio), float(t_cpu_x), float(t_fps), float(t_rss)
    ok = lambda b: "PASS" if b else "MISS"
    print()
    print("SUMMARY (%d runs): median LARGE/iperf3 ratio %.2f (target >= %.2f: %s); "
          "median LARGE CPU per GB %.2f x iperf3's (target <= %.1f: %s); "
          "median SMALL by the wall clock %.0f files/s (local %.0f, to a daemon %.0f; target >= %.0f: %s), "
          "tar c | tar x %.0f (runs slower than tar: %d, target 0: %s); "
          "max peak RSS %.1f MiB (target < %.0f: %s)"
          % (len(rows), ratio, t_ratio, ok(ratio >= t_ratio), cpu_x, t_cpu_x, ok(cpu_x <= t_cpu_x),
             fps, med["s_wall"], med["s_daemon"], t_fps, ok(fps >= t_fps), med["tar"], below_tar,
             ok(below_tar == 0), rss, t_rss, ok(rss < t_rss)))

cmd, args = sys.argv[1], sys.argv[2:]
{"cp": cp_fields, "iperf": iperf, "row": row, "summary": summary}[cmd](*args)
EOF
py() { python3 "$PY" "$@"; }

# ---------------------------------------------------------------- trees
LARGE="$WORK/large"
SMALL="$WORK/small"
DEST="$WORK/dest"
RESULTS="$WORK/results.tsv"
: >"$RESULTS"

# mktree reports "DIR: N files, B bytes" (on stderr); keep B to check the copies.
tree_bytes() { sed -n 's/.*: \([0-9]*\) files, \([0-9]*\) bytes.*/\2/p' <<<"$1"; }

echo "generating trees in $WORK ($FSTYPE) ..." >&2
out=$("$LINERATE" mktree "$LARGE" --files "$LARGE_FILES" --mean-size "$LARGE_MEAN" \
        --per-dir "$LARGE_PER_DIR" --seed 1 2>&1) || die "mktree LARGE failed"
LARGE_BYTES=$(tree_bytes "$out")
out=$("$LINERATE" mktree "$SMALL" --files "$SMALL_FILES" --min-size "$SMALL_MIN" \
        --max-size "$SMALL_MAX" --per-dir "$SMALL_PER_DIR" --seed 2 2>&1) || die "mktree SMALL failed"
SMALL_BYTES=$(tree_bytes "$out")
if [ -z "$LARGE_BYTES" ] || [ -z "$SMALL_BYTES" ]; then die "could not parse mktree output: $out"; fi

# ---------------------------------------------------------------- iperf3
# Sets IPERF_GBIT to the Gbit/s of one single-stream loopback test. Runs in this
# shell (not in $(...)) so that the EXIT trap knows IPERF_PID. Bounded: at most 5
# ports, each waited for at most 5 s to listen and 5 s to exit after the test.
listening() { [ -n "$(ss -Hltn "sport = :$1" 2>/dev/null)" ]; }

# The whole machine's busy clock ticks since boot (user nice system irq softirq steal of /proc/stat):
# both ends of the copy and the kernel's network work, softirq included.
HZ=$(getconf CLK_TCK 2>/dev/null || echo 100)
busy_ticks() { awk '/^cpu /{ print $2 + $3 + $4 + $7 + $8 + $9 }' /proc/stat; }
# core_s_per_gb TICKS_BEFORE TICKS_AFTER BYTES
core_s_per_gb() { awk -v a="$1" -v b="$2" -v n="$3" -v hz="$HZ" 'BEGIN { printf "%.6f", (n > 0 ? (b - a) / hz / (n / 1e9) : 0) }'; }

run_iperf() {
    local attempt port i json="$WORK/iperf.json" log="$WORK/iperf-server.log"
    local cerr="$WORK/iperf-client.err" perr="$WORK/iperf-parse.err"
    IPERF_GBIT=""
    for attempt in 1 2 3 4 5; do
        port=$((5201 + RANDOM % 799))
        if have ss && listening "$port"; then continue; fi
        iperf3 -s -1 -B 127.0.0.1 -p "$port" >"$log" 2>&1 &
        IPERF_PID=$!
        # Wait until it listens, without connecting (-1 would take a probe for its one client).
        for i in $(seq 1 50); do
            kill -0 "$IPERF_PID" 2>/dev/null || break
            if have ss; then
                if listening "$port"; then break; fi
            elif [ "$i" -ge 5 ]; then
                break
            fi
            sleep 0.1
        done
        if ! kill -0 "$IPERF_PID" 2>/dev/null; then
            wait "$IPERF_PID" 2>/dev/null || true
            IPERF_PID=""
            echo "iperf3 server on port $port did not start (attempt $attempt): $(tail -n1 "$log")" >&2
            continue
        fi
        local t0 t1 bytes
        t0=$(busy_ticks)
        iperf3 -c 127.0.0.1 -p "$port" -t "$IPERF_SECONDS" -J >"$json" 2>"$cerr" || true
        t1=$(busy_ticks)
        # The -1 server exits by itself after the test; give it 5 s, then stop it.
        for i in $(seq 1 50); do
            kill -0 "$IPERF_PID" 2>/dev/null || break
            sleep 0.1
        done
        if kill -0 "$IPERF_PID" 2>/dev/null; then kill "$IPERF_PID" 2>/dev/null || true; fi
        wait "$IPERF_PID" 2>/dev/null || true
        IPERF_PID=""
        if read -r IPERF_GBIT bytes < <(py iperf "$json" 2>"$perr") && [ -n "$bytes" ]; then
            IPERF_CPB=$(core_s_per_gb "$t0" "$t1" "$bytes")
            return 0
        fi
        echo "iperf3 client on port $port failed (attempt $attempt):" >&2
        cat "$perr" "$cerr" >&2
    done
    return 1
}

# ---------------------------------------------------------------- linerate cp
CP_ARGS=(cp --json -q --no-save)
if [ -n "$STREAMS" ]; then CP_ARGS+=(-P "$STREAMS"); fi

# run_cp NAME SRC EXPECTED_FILES EXPECTED_BYTES -> sets CP_* variables
# prefault BYTES: warm the memory a copy of BYTES will write (see "Why tmpfs"): written and
# freed just before, for every tool alike.
prefault() {
    dd if=/dev/zero of="$WORK/prefault" bs=1M count=$(( ($1 >> 20) + 1 )) status=none \
        || fail "cannot write the scratch file $WORK/prefault (is tmpfs full?)"
    rm -f -- "$WORK/prefault"
}

# [TO [DIR]]: copy to TO (default $DEST) whose files land in DIR (default TO): a daemon's
# HOST:PORT:TAG and its directory. CP_WALL: the whole command's wall seconds.
run_cp() {
    local name=$1 src=$2 want_files=$3 want_bytes=$4 to=${5:-$DEST} dir=${6:-${5:-$DEST}} rc=0 fields got t0 t1 w0 w1
    local json="$WORK/cp-$name.json" err="$WORK/cp-$name.err"
    rm -rf -- "$dir"
    prefault "$want_bytes"
    t0=$(busy_ticks)
    w0=$(date +%s%N)
    "$LINERATE" "${CP_ARGS[@]}" "${KEY_ARGS[@]}" "$src/" "$to" >"$json" 2>"$err" || rc=$?   # src/: TO is the copy
    w1=$(date +%s%N)
    t1=$(busy_ticks)
    CP_WALL=$(awk -v a="$w0" -v b="$w1" 'BEGIN { printf "%.6f", (b - a) / 1e9 }')
    CP_CPB=$(core_s_per_gb "$t0" "$t1" "$want_bytes")
    if [ "$rc" != 0 ]; then
        cat "$err" >&2
        fail "linerate cp of $name exited with status $rc"
    fi
    fields=$(py cp "$json") || { cat "$json" "$err" >&2; fail "cannot parse linerate cp --json output for $name"; }
    read -r CP_COMPLETE CP_FILES CP_BYTES CP_SECONDS CP_GBIT CP_STREAMS CP_CIPHER \
        CP_CPU_C CP_CPU_S CP_RSS_C CP_RSS_S <<<"$fields"
    if [ -s "$err" ]; then sed "s/^/  [cp $name] /" "$err" >&2; fi
    [ "$CP_COMPLETE" = true ] || { cat "$json" >&2; fail "linerate cp of $name reported complete=false"; }
    if [ "$CP_FILES" != "$want_files" ] || [ "$CP_BYTES" != "$want_bytes" ]; then
        fail "linerate cp of $name: copied $CP_FILES files / $CP_BYTES bytes, expected $want_files / $want_bytes"
    fi
    got=$(find "$dir" -type f | wc -l)
    [ "$got" = "$want_files" ] || fail "linerate cp of $name: destination has $got files, expected $want_files"
    rm -rf -- "$dir"
}

# run_tar SRC EXPECTED_FILES EXPECTED_BYTES -> TAR_FPS: `tar c | tar x` on the same file system,
# the file system's own single-threaded rate, warmed as the copies are.
run_tar() {
    local src=$1 want_files=$2 want_bytes=$3 w0 w1 got
    rm -rf -- "$DEST"; mkdir -- "$DEST"
    prefault "$want_bytes"
    w0=$(date +%s%N)
    tar -C "$src" -cf - . | tar -C "$DEST" -xf - || fail "tar c | tar x of $src failed"
    w1=$(date +%s%N)
    got=$(find "$DEST" -type f | wc -l)
    [ "$got" = "$want_files" ] || fail "tar c | tar x: destination has $got files, expected $want_files"
    TAR_FPS=$(awk -v f="$want_files" -v a="$w0" -v b="$w1" 'BEGIN { printf "%.6f", f / ((b - a) / 1e9) }')
    rm -rf -- "$DEST"
}

# The daemon the SMALL tree is also pushed to (127.0.0.1, a key of its own).
DAEMON_ROOT="$WORK/daemon-root"
KEY_ARGS=()
start_daemon() {
    local i
    mkdir -p -- "$DAEMON_ROOT"
    "$LINERATE" keygen "$WORK/key" >/dev/null 2>&1 || fail "linerate keygen failed"
    DAEMON_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    "$LINERATE" serve --listen "127.0.0.1:$DAEMON_PORT" --root "$DAEMON_ROOT" --key-file "$WORK/key" --quiet \
        >"$WORK/daemon.log" 2>&1 &
    DAEMON_PID=$!
    for i in $(seq 1 50); do
        listening "$DAEMON_PORT" && return 0
        kill -0 "$DAEMON_PID" 2>/dev/null || break
        sleep 0.1
    done
    cat "$WORK/daemon.log" >&2
    fail "linerate serve did not listen on 127.0.0.1:$DAEMON_PORT"
}

# ---------------------------------------------------------------- header
# How busy the machine is before we start (other processes skew every number here).
cpu_busy_pct() {
    local a b
    a=$(head -n1 /proc/stat 2>/dev/null) || return 0
    sleep 1
    b=$(head -n1 /proc/stat 2>/dev/null) || return 0
    awk -v a="$a" -v b="$b" 'BEGIN {
        n = split(a, x); split(b, y); tot = 0
        for (i = 2; i <= n; i++) tot += y[i] - x[i]
        idle = (y[5] - x[5]) + (y[6] - x[6])
        if (tot > 0) printf "%.0f", 100 * (tot - idle) / tot }'
}
BUSY=$(cpu_busy_pct)
gbytes() { awk -v b="$1" 'BEGIN { printf "%.2f GB", b / 1e9 }'; }
mbytes() { awk -v b="$1" 'BEGIN { printf "%.0f MB", b / 1e6 }'; }
echo "linerate cp vs iperf3 -- $(date -u '+%Y-%m-%d %H:%M:%SZ')"
echo "host:     $(uname -n), $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | sed 's/.*: //'), kernel $(uname -r)"
echo "linerate: $LINERATE ($("$LINERATE" --version 2>/dev/null || echo '?'), built $(date -r "$LINERATE" '+%F %T' 2>/dev/null || echo '?'); repo at git $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$ROOT" diff --quiet HEAD -- 2>/dev/null || echo ', dirty tree'))"
echo "iperf3:   $(iperf3 --version 2>/dev/null | head -n1), 1 stream, ${IPERF_SECONDS}s, 127.0.0.1"
echo "LARGE:    $LARGE_FILES files, $(gbytes "$LARGE_BYTES") (log-normal, mean $LARGE_MEAN B)"
echo "SMALL:    $SMALL_FILES files, $(mbytes "$SMALL_BYTES") (uniform $SMALL_MIN..$SMALL_MAX B)"
echo "load:     ${BUSY:-?}% of all CPUs busy in the second before the runs$([ "${BUSY:-0}" -ge 15 ] && echo ' -- WARNING: something else is running; results will be skewed')"
echo "work dir: $WORK ($FSTYPE); runs: $RUNS; streams: ${STREAMS:-linerate default}$([ "$QUICK" = 1 ] && echo '; QUICK (10x smaller trees)')"
echo
echo "         iperf3      |                  linerate cp LARGE                     |              linerate cp SMALL                  | SMALL files/s, wall clock"
echo "run     Gbit/s  c/GB |  Gbit/s ratio  c/GB cpu-x cpu-cl cpu-sv rss-cl rss-sv |  files/s Gbit/s cpu-cl cpu-sv rss-cl rss-sv |   local  daemon tar|tar"
echo "----------------------------------------------------------------------------------------------------------------------------------------------------"

# ---------------------------------------------------------------- runs
start_daemon
for run in $(seq 1 "$RUNS"); do
    run_iperf || fail "iperf3 did not produce a result (see messages above)"

    run_cp LARGE "$LARGE" "$LARGE_FILES" "$LARGE_BYTES"
    L_GBIT=$CP_GBIT; L_CPB=$CP_CPB; L_CPU_C=$CP_CPU_C; L_CPU_S=$CP_CPU_S; L_RSS_C=$CP_RSS_C; L_RSS_S=$CP_RSS_S
    L_INFO="$CP_STREAMS streams, $CP_CIPHER"

    run_cp SMALL "$SMALL" "$SMALL_FILES" "$SMALL_BYTES"
    S_FPS=$(awk -v f="$CP_FILES" -v s="$CP_SECONDS" 'BEGIN { printf "%.6f", (s > 0 ? f / s : 0) }')
    S_WALL=$(awk -v f="$CP_FILES" -v s="$CP_WALL" 'BEGIN { printf "%.6f", (s > 0 ? f / s : 0) }')
    S_ROW=("$S_FPS" "$CP_GBIT" "$CP_CPU_C" "$CP_CPU_S" "$CP_RSS_C" "$CP_RSS_S")

    KEY_ARGS=(--key-file "$WORK/key")
    run_cp SMALL-daemon "$SMALL" "$SMALL_FILES" "$SMALL_BYTES" "127.0.0.1:$DAEMON_PORT:small" "$DAEMON_ROOT/small"
    KEY_ARGS=()
    S_DAEMON=$(awk -v f="$CP_FILES" -v s="$CP_WALL" 'BEGIN { printf "%.6f", (s > 0 ? f / s : 0) }')

    run_tar "$SMALL" "$SMALL_FILES" "$SMALL_BYTES"

    L_RATIO=$(awk -v a="$L_GBIT" -v b="$IPERF_GBIT" 'BEGIN { printf "%.6f", (b > 0 ? a / b : 0) }')
    L_CPU_X=$(awk -v a="$L_CPB" -v b="$IPERF_CPB" 'BEGIN { printf "%.6f", (b > 0 ? a / b : 0) }')
    ROW=("$run" "$IPERF_GBIT" "$IPERF_CPB" "$L_GBIT" "$L_RATIO" "$L_CPB" "$L_CPU_X" "$L_CPU_C" "$L_CPU_S" "$L_RSS_C" "$L_RSS_S"
         "${S_ROW[@]}" "$S_WALL" "$S_DAEMON" "$TAR_FPS")
    (IFS=$'\t'; echo "${ROW[*]}") >>"$RESULTS"
    py row "${ROW[@]}"
done

py summary "$RESULTS" "$TARGET_RATIO" "$TARGET_CPU_X" "$TARGET_FPS" "$TARGET_RSS_MIB"
echo "(linerate: $L_INFO; c/GB = the whole machine's busy core-seconds per GB moved (both ends, softirq"
echo " included; cpu-x = LARGE's c/GB over iperf3's); cpu = user+system seconds of the client (cl) and server (sv) process;"
echo " rss = peak resident MiB; files/s = files / seconds as reported by linerate cp --json; wall clock: files over the"
echo " whole command, process start to exit: local, pushed to a linerate serve on 127.0.0.1, and tar c | tar x)"
exit 0
