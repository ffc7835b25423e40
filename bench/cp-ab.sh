#!/usr/bin/env bash
# Two variants of `linerate cp` side by side (two builds, or one build with different options),
# local copies on tmpfs, A and B alternating. The small tree (20,000 files of 1-16 KiB) is timed
# by the shell's clock as the whole command, with `tar c | tar x` of the same tree beside it in
# every round; the large tree (640 files, 1 GB) by the copy's own --json (rate, and each side's
# user + system CPU per GB). Prints each round and the medians.
#
# Usage: bench/cp-ab.sh A B [--large] [--runs R] [--files N] [--a-args ARGS] [--b-args ARGS]
#
# Exit status: 0 when every copy completed with every file, 1 when one did not, 2 for bad usage.

set -euo pipefail

die() { echo "cp-ab: $*" >&2; exit 2; }
usage() {
    cat <<'EOF'
Usage: bench/cp-ab.sh A B [--large] [--runs R] [--files N] [--a-args ARGS] [--b-args ARGS]

  A, B           how to run each linerate: a binary, or a command that ends with one
                 (split on spaces: "env VAR=1 path/to/linerate")
  --large        the large tree (640 files, mean 1.6 MB): Gbit/s and core-s per GB of each
                 side, from `cp --json`; default: the small tree by the wall clock, tar beside
  --runs R       alternating rounds (default 6, at most 50)
  --files N      files in the small tree (default 20000, at most 200000)
  --a-args ARGS  options for A's `cp` (split on spaces: "--chunk-size 4M"); --b-args for B's

Work happens in /dev/shm/linerate-cpab-$$ (removed on exit). Every copy is preceded by
writing and freeing as much memory as it will write, so that each writes into memory the VM
has already given back (see bench/README.md "Why tmpfs").
EOF
}

[ $# -ge 2 ] || { usage >&2; die "two variants are needed"; }
A=$1 B=$2
shift 2
RUNS=6 FILES=20000 LARGE=0 A_ARGS="" B_ARGS=""
while [ $# -gt 0 ]; do
    case $1 in
        --large) LARGE=1; shift ;;
        --runs) [ $# -ge 2 ] || die "--runs needs a value"; RUNS=$2; shift 2 ;;
        --files) [ $# -ge 2 ] || die "--files needs a value"; FILES=$2; shift 2 ;;
        --a-args) [ $# -ge 2 ] || die "--a-args needs a value"; A_ARGS=$2; shift 2 ;;
        --b-args) [ $# -ge 2 ] || die "--b-args needs a value"; B_ARGS=$2; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) usage >&2; die "unknown argument: $1" ;;
    esac
done
[[ $RUNS =~ ^[0-9]+$ ]] && [ "$RUNS" -ge 1 ] && [ "$RUNS" -le 50 ] || die "--runs: 1 to 50"
[[ $FILES =~ ^[0-9]+$ ]] && [ "$FILES" -ge 100 ] && [ "$FILES" -le 200000 ] || die "--files: 100 to 200000"
read -r -a a_cmd <<<"$A"
read -r -a b_cmd <<<"$B"
read -r -a a_args <<<"$A_ARGS"
read -r -a b_args <<<"$B_ARGS"
for b in "${a_cmd[-1]}" "${b_cmd[-1]}"; do [ -x "$b" ] || die "not an executable: $b"; done
command -v python3 >/dev/null || die "python3 is needed (to read --json)"

W=/dev/shm/linerate-cpab-$$
mkdir "$W" || die "cannot create $W"
trap 'rm -rf "$W"' EXIT
if [ "$LARGE" = 1 ]; then
    FILES=640
    tree=(--files 640 --mean-size 1600000 --per-dir 64 --seed 1)
    MB=1200
else
    tree=(--files "$FILES" --min-size 1024 --max-size 16384 --per-dir 100 --seed 2)
    MB=$((FILES / 100 + 20))
fi
"${a_cmd[-1]}" mktree "$W/src" "${tree[@]}" >/dev/null 2>&1 || die "mktree failed"

prefault() {
    dd if=/dev/zero of="$W/prefault" bs=1M count="$MB" status=none
    rm -f "$W/prefault"
}
# copied DEST: exit 1 unless DEST holds every file.
copied() {
    local n
    n=$(find "$1" -type f | wc -l)
    [ "$n" -eq "$FILES" ] || { echo "cp-ab: $1 has $n of $FILES files" >&2; exit 1; }
    rm -rf "$1"
}
# wall CMD...: files/s of CMD by the wall clock.
wall() {
    prefault
    local t0 t1
    t0=$(date +%s.%N)
    "$@"
    t1=$(date +%s.%N)
    awk -v a="$t0" -v b="$t1" -v n="$FILES" 'BEGIN { printf "%.0f", n / (b - a) }'
}
# json CMD...: "Gbit/s client-core-s/GB server-core-s/GB" from CMD's --json.
json() {
    prefault
    "$@" | python3 -c '
import json, sys
d = json.load(sys.stdin)
gb = d["bytes"] / 1e9
side = lambda s: (d["cpu"][s]["user_s"] + d["cpu"][s]["system_s"]) / gb
print("%.2f %.3f %.3f" % (d["gbit_per_s"], side("client"), side("server")))'
}
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }

if [ "$LARGE" = 0 ]; then
    ra=() rb=() rt=()
    printf '%-6s %12s %12s %12s\n' round "A files/s" "B files/s" "tar files/s"
    for i in $(seq 1 "$RUNS"); do
        a=$(wall "${a_cmd[@]}" cp -q --no-save "${a_args[@]}" "$W/src/" "$W/a") || { echo "cp-ab: A failed" >&2; exit 1; }
        copied "$W/a"
        b=$(wall "${b_cmd[@]}" cp -q --no-save "${b_args[@]}" "$W/src/" "$W/b") || { echo "cp-ab: B failed" >&2; exit 1; }
        copied "$W/b"
        mkdir "$W/t"
        t=$(wall sh -c "tar c -C '$W/src' . | tar x -C '$W/t'")
        copied "$W/t"
        ra+=("$a") rb+=("$b") rt+=("$t")
        printf '%-6s %12s %12s %12s\n' "$i" "$a" "$b" "$t"
    done
    ma=$(median "${ra[@]}") mb=$(median "${rb[@]}") mt=$(median "${rt[@]}")
    printf '%-6s %12s %12s %12s\n' median "$ma" "$mb" "$mt"
    awk -v a="$ma" -v b="$mb" -v t="$mt" 'BEGIN { printf "B/A %.3f   A/tar %.3f   B/tar %.3f\n", b / a, a / t, b / t }'
    exit 0
fi

declare -A g=([A]="" [B]="") c=([A]="" [B]="") s=([A]="" [B]="")
printf '%-6s %-4s %8s %18s %18s\n' round "" "Gbit/s" "client core-s/GB" "server core-s/GB"
for i in $(seq 1 "$RUNS"); do
    for v in A B; do
        if [ "$v" = A ]; then
            out=$(json "${a_cmd[@]}" cp --json -q --no-save "${a_args[@]}" "$W/src/" "$W/d") || { echo "cp-ab: A failed" >&2; exit 1; }
        else
            out=$(json "${b_cmd[@]}" cp --json -q --no-save "${b_args[@]}" "$W/src/" "$W/d") || { echo "cp-ab: B failed" >&2; exit 1; }
        fi
        copied "$W/d"
        read -r gi ci si <<<"$out"
        g[$v]+=" $gi" c[$v]+=" $ci" s[$v]+=" $si"
        printf '%-6s %-4s %8s %18s %18s\n' "$i" "$v" "$gi" "$ci" "$si"
    done
done
for v in A B; do
    # shellcheck disable=SC2086 # the lists are space-separated numbers
    printf '%-6s %-4s %8s %18s %18s\n' median "$v" "$(median ${g[$v]})" "$(median ${c[$v]})" "$(median ${s[$v]})"
done
