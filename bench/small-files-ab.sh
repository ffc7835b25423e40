#!/usr/bin/env bash
# Two builds of linerate side by side on small files: `linerate cp SRC/ DEST` (local, the whole
# command by the wall clock) of 20,000 files of 1-16 KiB on tmpfs, A and B alternating, and
# `tar c | tar x` of the same tree beside them in every round. Prints each round and the medians.
#
# Usage: bench/small-files-ab.sh A B [--runs R] [--files N]
#
# Exit status: 0 when every copy completed with every file, 1 when one did not, 2 for bad usage.

set -euo pipefail

die() { echo "small-files-ab: $*" >&2; exit 2; }
usage() {
    cat <<'EOF'
Usage: bench/small-files-ab.sh A B [--runs R] [--files N]

  A, B        two linerate binaries (for example a release build before and after a change)
  --runs R    alternating rounds (default 6, at most 50)
  --files N   files in the tree (default 20000, at most 200000)

Work happens in /dev/shm/linerate-sfab-$$ (removed on exit). Every copy is preceded by
writing and freeing 200 MB, so that each tool writes into memory the VM has already given
back (see bench/README.md "Why tmpfs").
EOF
}

[ $# -ge 2 ] || { usage >&2; die "two binaries are needed"; }
A=$1 B=$2
shift 2
RUNS=6 FILES=20000
while [ $# -gt 0 ]; do
    case $1 in
        --runs) [ $# -ge 2 ] || die "--runs needs a value"; RUNS=$2; shift 2 ;;
        --files) [ $# -ge 2 ] || die "--files needs a value"; FILES=$2; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) usage >&2; die "unknown argument: $1" ;;
    esac
done
[[ $RUNS =~ ^[0-9]+$ ]] && [ "$RUNS" -ge 1 ] && [ "$RUNS" -le 50 ] || die "--runs: 1 to 50"
[[ $FILES =~ ^[0-9]+$ ]] && [ "$FILES" -ge 100 ] && [ "$FILES" -le 200000 ] || die "--files: 100 to 200000"
for b in "$A" "$B"; do [ -x "$b" ] || die "not an executable: $b"; done

W=/dev/shm/linerate-sfab-$$
mkdir "$W" || die "cannot create $W"
trap 'rm -rf "$W"' EXIT
"$A" mktree "$W/src" --files "$FILES" --min-size 1024 --max-size 16384 --per-dir 100 --seed 2 >/dev/null 2>&1 \
    || die "mktree failed"

# rate CMD...: run CMD after the prefault; print files/s by the wall clock.
rate() {
    dd if=/dev/zero of="$W/prefault" bs=1M count=200 status=none
    rm -f "$W/prefault"
    local t0 t1
    t0=$(date +%s.%N)
    "$@"
    t1=$(date +%s.%N)
    awk -v a="$t0" -v b="$t1" -v n="$FILES" 'BEGIN { printf "%.0f", n / (b - a) }'
}
# copied DEST: exit 1 unless DEST holds every file.
copied() {
    local n
    n=$(find "$1" -type f | wc -l)
    [ "$n" -eq "$FILES" ] || { echo "small-files-ab: $1 has $n of $FILES files" >&2; exit 1; }
    rm -rf "$1"
}

ra=() rb=() rt=()
printf '%-6s %12s %12s %12s\n' round "A files/s" "B files/s" "tar files/s"
for i in $(seq 1 "$RUNS"); do
    a=$(rate "$A" cp -q --no-save "$W/src/" "$W/a") || { echo "small-files-ab: A failed" >&2; exit 1; }
    copied "$W/a"
    b=$(rate "$B" cp -q --no-save "$W/src/" "$W/b") || { echo "small-files-ab: B failed" >&2; exit 1; }
    copied "$W/b"
    mkdir "$W/t"
    t=$(rate sh -c "tar c -C '$W/src' . | tar x -C '$W/t'")
    copied "$W/t"
    ra+=("$a") rb+=("$b") rt+=("$t")
    printf '%-6s %12s %12s %12s\n' "$i" "$a" "$b" "$t"
done
median() { printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
ma=$(median "${ra[@]}") mb=$(median "${rb[@]}") mt=$(median "${rt[@]}")
printf '%-6s %12s %12s %12s\n' median "$ma" "$mb" "$mt"
awk -v a="$ma" -v b="$mb" -v t="$mt" 'BEGIN { printf "B/A %.3f   A/tar %.3f   B/tar %.3f\n", b / a, a / t, b / t }'
