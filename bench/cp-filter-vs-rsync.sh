#!/usr/bin/env bash
# `linerate cp --exclude` beside `rsync -a --exclude` with the same rules, and what the rules cost
# the walk.
#
# Usage: bench/cp-filter-vs-rsync.sh [--linerate PATH] [--dir D] [--big N] [--runs R]
#
# 1. A tree of projects, each with node_modules/ (many small files), build output (*.o) and
#    sources, copied with `--exclude node_modules/ --exclude '*.o'` by both tools: the files that
#    arrive from each, and whether the two trees are identical (`diff -r`).
# 2. The walk of a big tree (N files, default 100,000) as a dry run (`cp -n`: walk, offer, no
#    data), without rules and with 10 rules that match nothing (so both walk the same entries
#    and the difference is the matching): wall time and the client's CPU, R runs each,
#    alternating.
#
# Exit status: 0 when the trees are identical, 1 when they differ or a copy failed, 2 for bad
# usage or setup.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
linerate="$here/../target/release/linerate"
dir="/dev/shm/linerate-filter-$$"
big=100000
runs=3
while [ $# -gt 0 ]; do
    case "$1" in
        --linerate) linerate="$2"; shift 2 ;;
        --dir) dir="$2"; shift 2 ;;
        --big) big="$2"; shift 2 ;;
        --runs) runs="$2"; shift 2 ;;
        -h | --help) sed -n '2,16p' "$0"; exit 0 ;;
        *) echo "unknown option $1" >&2; exit 2 ;;
    esac
done
[ -x "$linerate" ] || { echo "no linerate binary at $linerate (cargo build --release, or --linerate)" >&2; exit 2; }
command -v rsync >/dev/null || { echo "rsync is needed (apt-get install rsync)" >&2; exit 2; }
[ -e "$dir" ] && { echo "$dir exists" >&2; exit 2; }
mkdir -p "$dir"
trap 'rm -rf "$dir"' EXIT
export LINERATE_DB="$dir/runs.sqlite"

python3 - "$dir/src" "$dir/big" "$big" <<'EOF'
import os, sys
src, big, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
def put(p, data=b"x"):
    os.makedirs(os.path.dirname(p), exist_ok=True)
    with open(p, "wb") as f:
        f.write(data)
for p in range(20):
    proj = f"{src}/proj{p:02}"
    for k in range(20):
        for f in range(20):
            put(f"{proj}/node_modules/pkg{k:02}/lib/f{f:02}.js", b"module.exports = %d;\n" % f)
    for f in range(30):
        put(f"{proj}/src/m{f:02}.c", b"int f%d;\n" % f)
        put(f"{proj}/build/m{f:02}.o", bytes(512))
    put(f"{proj}/node_modules.txt", b"a file, not the directory\n")
    put(f"{proj}/README", b"readme\n")
for i in range(n):
    put(f"{big}/d{i // 1000:03}/f{i % 1000:03}.dat")
EOF

count() { find "$1" -type f | wc -l; }
echo "== 1. the same rules, linerate cp and rsync -a"
echo "source: $(count "$dir/src") files"
args=(--exclude node_modules/ --exclude '*.o')
"$linerate" cp -q --no-save "${args[@]}" "$dir/src" "$dir/lr"
rsync -a "${args[@]}" "$dir/src" "$dir/rs"
echo "linerate cp ${args[*]}: $(count "$dir/lr") files arrived"
echo "rsync -a    ${args[*]}: $(count "$dir/rs") files arrived"
status=0
if diff -r "$dir/lr" "$dir/rs" >/dev/null; then
    echo "diff -r: identical"
else
    echo "diff -r: the trees DIFFER"
    status=1
fi

echo "== 2. walking $big files (a dry run), without rules and with 10"
ten=(--exclude '*.nomatch' --exclude '/nowhere' --exclude 'cache/' --exclude 'tmp/**' --exclude '*.swp'
     --exclude '*~' --exclude '.git/' --exclude 'a/b/c' --exclude '[0-9]*.bak' --include '*.keep')
one_run() {
    local out
    out=$("$linerate" cp -n --json --no-save "$@" "$dir/big" "$dir/bigdest" 2>/dev/null)
    python3 -c 'import json,sys; d=json.loads(sys.argv[1]); c=d["cpu"]["client"]; print("%.2f %.2f" % (d["seconds"], c["user_s"] + c["system_s"]))' "$out"
}
mkdir -p "$dir/bigdest"
for r in $(seq "$runs"); do
    echo "run $r: no rules: $(one_run) (s wall, client CPU s); 10 rules: $(one_run "${ten[@]}")"
done
exit "$status"
