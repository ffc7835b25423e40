#!/usr/bin/env bash
# Issue 43's mesh measurement, on loopback: AGENTS agents (`serve --metrics`, each a process this
# script starts and ends by its PID), two identical rounds of a throughput test both ways and a
# round-trip test; then one agent killed and a third round.
#   * `report compare` of rounds 1 and 2: how many pairs it calls a REGRESSION (the goal: none),
#     and `report mesh` of round 2: how many cells are coloured beyond "within the noise" (none);
#   * round 3: the killed agent's pairs as the round stores them (failed or "agent down", as many
#     as the tally's failures), the cells `report mesh` marks "agent down", and every other
#     agent's `linerate_mesh_up` toward it as scraped right after the round; then a
#     `promtool test rules` case built from those scraped series (20 minutes of them) checked
#     to fire `LinerateMeshPairFailing` for exactly the pairs at 0.
#
# Usage: bench/mesh-noise-and-down.sh [--agents N] [--time T] [--kill K] [--linerate PATH] [--keep DIR]
#   --agents N   agents (default 6, as the lab round of crates/cli/tests/e2e/mesh.rs)
#   --time T     seconds of the throughput test (default 2; the round trip runs 1 s)
#   --kill K     the agent killed before round 3 (default 3: a3)
#   --keep DIR   keep the store, the rounds' JSON, the pages and the promtool case in DIR
# Exit: 0 when the measurement ran (goals met or not), 1 when a tool failed, 2 bad usage.
set -euo pipefail

AGENTS=6 TIME=2 KILL=3 LR="" KEEP=""
while [ $# -gt 0 ]; do
  case "$1" in
    --agents) AGENTS="$2"; shift 2 ;;
    --time) TIME="$2"; shift 2 ;;
    --kill) KILL="$2"; shift 2 ;;
    --linerate) LR="$2"; shift 2 ;;
    --keep) KEEP="$2"; shift 2 ;;
    -h|--help) sed -n 2,20p "$0"; exit 0 ;;
    *) echo "mesh-noise-and-down: unknown option $1" >&2; exit 2 ;;
  esac
done
die() { echo "mesh-noise-and-down: $*" >&2; exit 1; }
root="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=bench/lib.sh
. "$root/bench/lib.sh"
find_linerate "$LR" "$root"
command -v python3 >/dev/null || die "python3 is needed for the JSON"
command -v promtool >/dev/null || die "promtool is needed (apt-get install prometheus)"

pids=()
if [ -n "$KEEP" ]; then work="$KEEP"; mkdir -p "$work"; else work="$(mktemp -d /tmp/linerate-mesh.XXXXXX)"; fi
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  [ -n "$KEEP" ] || rm -rf "$work"
}
trap cleanup EXIT
export LINERATE_DB="$work/runs.sqlite"

"$LINERATE" keygen --type ed25519 "$work/ctl" >"$work/ctl.line" 2>/dev/null
{ echo "mesh $(cat "$work/ctl.line")"; } >"$work/authorized_keys"
for i in $(seq 0 $((AGENTS - 1))); do
  mkdir -p "$work/a$i"
  echo "ro $("$LINERATE" keygen --type ed25519 "$work/a$i/host_key" 2>/dev/null)" >>"$work/authorized_keys"
done
inv="$work/inventory.toml"
printf 'interval = "1h"\n[limits]\nbackoff = "200ms"\nretries = 1\nconnect_timeout = "2s"\n' >"$inv"
for i in $(seq 0 $((AGENTS - 1))); do
  # stdout: LINERATE <version> LISTEN ADDR, then ... METRICS ADDR; the log's first line names
  # the host key's fingerprint (both read as they come, through FIFOs; the log then drained)
  mkfifo "$work/a$i/out" "$work/a$i/err"
  "$LINERATE" serve --listen 127.0.0.1:0 --metrics 127.0.0.1:0 --announce --host-key "$work/a$i/host_key" \
    --authorized-keys "$work/authorized_keys" >"$work/a$i/out" 2>"$work/a$i/err" &
  pids+=($!)
  echo $! >"$work/a$i/pid"
  exec {out}<"$work/a$i/out" {err}<"$work/a$i/err"
  read -r l1 <&"$out" && read -r l2 <&"$out" && read -r note <&"$err" || die "agent a$i did not start"
  cat <&"$err" >"$work/a$i/log" &
  addr=${l1##* } metrics=${l2##* }
  fp=$(grep -o 'SHA256:[A-Za-z0-9+/]*' <<<"$note" | head -1)
  [ -n "$fp" ] || die "agent a$i: no fingerprint in $note"
  echo "$metrics" >"$work/a$i/metrics"
  printf '[[agent]]\nname = "a%s"\naddress = "%s"\nhost_key = "%s"\n' "$i" "$addr" "$fp" >>"$inv"
done
printf '[[test]]\nname = "tput"\nkind = "tcp-stream"\nduration = "%ss"\n' "$TIME" >>"$inv"
printf '[[test]]\nname = "rtt"\nkind = "tcp-rr"\nduration = "1s"\n' >>"$inv"

round() { # N: runs a round, keeps its JSON; the exit status is printed, not fatal
  local rc=0
  "$LINERATE" mesh "$inv" --identity "$work/ctl" --once --json -q >"$work/round$1.json" 2>"$work/round$1.err" || rc=$?
  echo "round $1: exit $rc; $(tail -1 "$work/round$1.err")"
}
id() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["id"])' "$work/round$1.json"; }
coloured() { # page: cells filled red or green
  python3 - "$1" <<'PY'
import re, sys
t = open(sys.argv[1]).read()
cells = re.findall(r'<g class="cell">.*?</g>', t, re.S)
red = sum('fill="#f4a6a6"' in c for c in cells)
green = sum('fill="#a8d8a8"' in c for c in cells)
down = sum('>agent</text>' in c for c in cells)
failed = sum('class="failed"' in c for c in cells)
dash = sum('class="nm"' in c for c in cells)
print(f"cells {len(cells)}: red {red}, green {green}, agent down {down}, failed {failed}, not scheduled {dash}")
PY
}

round 1
round 2
rc=0
"$LINERATE" report compare "$(id 1)" "$(id 2)" >"$work/compare.txt" 2>&1 || rc=$?
echo "report compare round 1 round 2: exit $rc, $(grep -c REGRESSION "$work/compare.txt" || true) REGRESSION rows of $(grep -c ':a[0-9]*>a' "$work/compare.txt" || true) pairs; $(grep -c 'within the noise' "$work/compare.txt" || true) worse but within the noise"
"$LINERATE" report mesh "$(id 2)" -o "$work/round2.html" >/dev/null
echo "report mesh round 2: $(coloured "$work/round2.html")"

kill "$(cat "$work/a$KILL/pid")"
wait "$(cat "$work/a$KILL/pid")" 2>/dev/null || true
round 3
python3 - "$work/round3.json" "a$KILL" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); k = sys.argv[2]
last = {}
for row in r["tables"][0]["rows"]:
    last[(row[0], row[1], row[2])] = row[4]
mine = {p: s for p, s in last.items() if k in p[1:]}
bad = sum(s != "ok" for s in mine.values())
t = r["params"]["tally"]
print(f"round 3: down {t['down']}, tally failed {t['failed']}; pairs with {k}: {len(mine)}, failed {bad} "
      f"({sum(s.startswith('agent down') for s in mine.values())} not tried, 'agent down')")
PY
"$LINERATE" report mesh "$(id 3)" -o "$work/round3.html" >/dev/null
echo "report mesh round 3: $(coloured "$work/round3.html")"

# Every other agent's linerate_mesh_up series, scraped now; a promtool case from them.
case="$work/round3.test.yml"
python3 - "$work" "$AGENTS" "$KILL" "$root/deploy/prometheus/linerate.rules.yml" "$case" <<'PY'
import re, sys, urllib.request
work, n, kill, rules, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
series, down = [], []
for i in range(n):
    if i == kill:
        continue
    at = open(f"{work}/a{i}/metrics").read().strip()
    body = urllib.request.urlopen(f"http://{at}/metrics", timeout=10).read().decode()
    for line in body.splitlines():
        if line.startswith("linerate_mesh_up{"):
            s, v = line.rsplit(" ", 1)
            s = s.replace("{", f'{{instance="a{i}:9478",job="linerate",', 1)
            series.append((s, float(v)))
            if float(v) == 0:
                down.append(s)
t = f"rule_files:\n  - {rules}\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    input_series:\n"
for s, v in series:
    t += f"      - series: '{s}'\n        values: '{v:g}x20'\n"
t += "    alert_rule_test:\n      - eval_time: 15m\n        alertname: LinerateMeshPairFailing\n        exp_alerts:\n"
for s in down:
    labels = dict(re.findall(r'(\w+)="([^"]*)"', s))
    t += "          - exp_labels: {severity: warning, " + ", ".join(f'{k}: "{v}"' for k, v in labels.items()) + "}\n"
    t += f'            exp_annotations:\n              summary: "{labels["test"]} from {labels["instance"]} to {labels["peer"]} failed"\n'
    t += "              description: \"The pair's last mesh test did not run (the peer was unreachable or down, or the test failed).\"\n"
open(out, "w").write(t)
ups = sum(v == 1 for _, v in series)
peers = sorted(set(re.search(r'peer="([^"]*)"', s).group(1) for s in down))
print(f"scraped after round 3: {len(series)} linerate_mesh_up series, {len(down)} at 0 (peer: {peers}), {ups} at 1")
PY
rc=0
promtool test rules "$case" >"$work/promtool.txt" 2>&1 || rc=$?
echo "promtool test rules (LinerateMeshPairFailing at 15 m for each series at 0): $(tail -1 "$work/promtool.txt" | tr -s ' ') (exit $rc)"
[ -z "$KEEP" ] || echo "kept in $work"
