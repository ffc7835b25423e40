#!/usr/bin/env bash
# Issue 43: how much `linerate doctor`'s ceiling moves between runs. Runs `linerate doctor --json`
# N times in a row and prints each run's single- and multi-stream ceilings (with the range of
# builds that print one) and the per-core figures behind them. Alternate two builds by calling
# it with N = 1 in a loop. usage: bench/doctor-repeat.sh BIN LABEL [N] [DIR]
set -u
BIN=$1; LABEL=$2; N=${3:-5}
D=${4:-target/measure}; mkdir -p "$D"
for i in $(seq 1 $N); do
  s0=$(date +%s.%N)
  $BIN doctor --json > $D/doctor-$LABEL-$i.json
  s1=$(date +%s.%N)
  python3 - $D/doctor-$LABEL-$i.json "$LABEL" $i $s0 $s1 <<'PY'
import json,sys
j=json.load(open(sys.argv[1])); v=j["verdict"]; c=j["facts"].get("copy") or {}; a=j["facts"].get("aead") or {}
def e(x):
    lo,hi=x.get("ceiling_low_bps"),x.get("ceiling_high_bps")
    r=f' range {lo/1e9:.2f}-{hi/1e9:.2f}' if lo and hi else ''
    return f'{x["ceiling_bps"]/1e9:.2f}{r} ({x["limited_by"]})'
print(f'{sys.argv[2]} run {sys.argv[3]} ({float(sys.argv[5])-float(sys.argv[4]):.1f} s): single {e(v["single_stream"])}; {v["multi_stream"]["streams"]} streams {e(v["multi_stream"])}; page write {c.get("page_write_bps",0)/1e9:.1f} read {c.get("page_read_bps",0)/1e9:.1f} tcp {c.get("tcp_both_ends_bps",0)/1e9:.1f} aes {a.get("aes_256_gcm_bps",0)/1e9:.1f} Gbit/s')
PY
done
