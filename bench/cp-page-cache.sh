#!/usr/bin/env bash
# Issue 43: what `linerate cp` prints for a copy to a real disk without --fsync. A 2 GiB file,
# read once into the page cache, copied N times into DIR (default target/measure: /work is ext4
# on a disk here; not tmpfs): Dirty + Writeback of /proc/meminfo before and after, the printed
# rate, `sync` timed after it and the rate counting it, and the summary's page_cache_bytes.
# usage: bench/cp-page-cache.sh BIN LABEL [N] [DIR]
set -u
BIN=$1; LABEL=$2; N=${3:-3}
D=${4:-target/measure}; mkdir -p "$D"
[ -f $D/src.bin ] || dd if=/dev/urandom of=$D/src.bin bs=1M count=2048 status=none
cat $D/src.bin > /dev/null
dirty() { awk '/^Dirty:|^Writeback:/ {s+=$2} END {print s*1024}' /proc/meminfo; }
for i in $(seq 1 $N); do
  rm -f $D/dst.bin; sync
  d0=$(dirty)
  t0=$(date +%s.%N)
  out=$($BIN cp --json --no-save $D/src.bin $D/dst.bin 2>$D/err.txt)
  t1=$(date +%s.%N)
  d1=$(dirty)
  sync
  t2=$(date +%s.%N)
  echo "$out" > $D/$LABEL-$i.json
  python3 - "$out" $d0 $d1 $t0 $t1 $t2 "$LABEL" $i "$(tail -1 $D/err.txt)" <<'PY'
import json,sys
j=json.loads(sys.argv[1]); d0,d1=int(sys.argv[2]),int(sys.argv[3]); t0,t1,t2=map(float,sys.argv[4:7])
b=j["bytes"]; s=j["seconds"]; g=j["gbit_per_s"]
print(f'{sys.argv[7]} run {sys.argv[8]}: {b/1e9:.2f} GB in {s:.2f} s, printed {g:.2f} Gbit/s; dirty+writeback {d0/1e6:.0f} -> {d1/1e6:.0f} MB at the end; sync took {t2-t1:.2f} s; counting it {b*8/(s+t2-t1)/1e9:.2f} Gbit/s ({(b*8/(s+t2-t1)/1e9)/g-1:+.1%}); page_cache_bytes {j.get("page_cache_bytes")}')
PY
done
