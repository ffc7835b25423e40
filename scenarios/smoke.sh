#!/usr/bin/env bash
# Runs every shipped scenario end to end, shortened (`linerate lab run --scale-time F`), and
# fails on any failed run or incomplete group (the run's exit status), on a results file that
# says otherwise, and on anything a run leaves behind (a namespace, a state file).
# Needs root. .ci/run runs it; by hand, from the repository root:
#   sudo bash scenarios/smoke.sh [LINERATE] [FACTOR]     # default target/debug/linerate, 0.05
set -euo pipefail
cd "$(dirname "$0")/.."
linerate="${1:-target/debug/linerate}"
factor="${2:-0.05}"
out="$(mktemp -d "${TMPDIR:-/tmp}/linerate-smoke.XXXXXX")"
trap 'rm -rf "$out"' EXIT
# what a run left behind: namespaces named after its id, its state file
leftovers() {
  ip netns list 2>/dev/null | awk -v id="$1" 'index($1, id) == 1 {print $1}'
  [ ! -e "/run/linerate/lab/$1.json" ] || echo "/run/linerate/lab/$1.json"
}
failed=()
t0=$(date +%s)
for f in scenarios/[0-9]*.toml; do
  name="$(basename "$f" .toml)"
  s=$(date +%s)
  if "$linerate" lab run "$f" --scale-time "$factor" --no-save -o "$out/$name.json" >"$out/$name.log" 2>&1; then
    # the exit status already covers failed runs and incomplete groups; the document must agree
    if ! python3 - "$out/$name.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
bad = [r["name"] for r in d["runs"] if not r["ok"]] + [g["group"] for g in d["groups"] if not g["ok"]]
sys.exit(1 if bad or not d["runs"] else 0)
PY
    then
      failed+=("$name (results file lists failed runs or incomplete groups)")
    fi
  else
    failed+=("$name (exit $?)")
    tail -n 30 "$out/$name.log" >&2
  fi
  id="$(awk '$1 == "lab" && $3 == "up:" {print $2; exit}' "$out/$name.log")"
  if [ -z "$id" ]; then
    failed+=("$name (no lab came up)")
  else
    left="$(leftovers "$id")"
    [ -z "$left" ] || failed+=("$name left behind: $(echo $left)")
  fi
  printf '%-40s %4d s  lab %s\n' "$name" $(( $(date +%s) - s )) "${id:-?}"
done
echo "all scenarios, durations x $factor: $(( $(date +%s) - t0 )) s"
if [ ${#failed[@]} -gt 0 ]; then
  printf 'smoke run failed: %s\n' "${failed[@]}" >&2
  exit 1
fi
