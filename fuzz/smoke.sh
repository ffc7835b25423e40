#!/usr/bin/env bash
# Smoke-fuzz every cargo-fuzz target (linerate-proto, linerate-lab, linerate-remote) for FUZZ_SECONDS seconds each (default 10).
#
#   bash fuzz/smoke.sh                       # all targets, 10 s each
#   FUZZ_SECONDS=120 bash fuzz/smoke.sh      # longer
#   FUZZ_TARGETS="frame_decode tracker" bash fuzz/smoke.sh
#   FUZZ_ARGS="-fork=2 -ignore_crashes=1" …  # extra libFuzzer flags
#
# Each target runs on a temporary copy of its seed corpus (fuzz/corpus/<target>/), so the
# committed corpus never grows. Crash inputs are kept in fuzz/artifacts/<target>/ (ignored by
# git). Exits non-zero if any target fails to build or crashes.
# Only stable Rust is needed: RUSTC_BOOTSTRAP=1 unlocks the -Z flags cargo-fuzz uses.
set -euo pipefail

export RUSTC_BOOTSTRAP=1
fuzz_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$fuzz_dir")"
secs="${FUZZ_SECONDS:-10}"
case "$secs" in
  '' | *[!0-9]* | 0) echo "FUZZ_SECONDS must be a positive integer, got '$secs'" >&2; exit 2 ;;
esac
# A single input running this long counts as a hang.
timeout_s="${FUZZ_TIMEOUT:-20}"
read -r -a extra <<< "${FUZZ_ARGS:-}"

# cargo-fuzz is installed beneath target/ (removed with `cargo clean`), not into ~/.cargo/bin;
# one found on the PATH is used as it is.
tools="$root/target/tools"
export PATH="$tools/bin:$PATH"
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "== installing cargo-fuzz into $tools"
  cargo install --root "$tools" cargo-fuzz --locked
fi

cd "$root"
echo "== building fuzz targets (release, AddressSanitizer, debug assertions)"
cargo fuzz build --fuzz-dir "$fuzz_dir"

if [ -n "${FUZZ_TARGETS:-}" ]; then
  read -r -a targets <<< "$FUZZ_TARGETS"
else
  mapfile -t targets < <(cargo fuzz list --fuzz-dir "$fuzz_dir")
fi

mkdir -p "$root/target/tmp"
work="$(mktemp -d "$root/target/tmp/linerate-fuzz.XXXXXX")"
trap 'rm -rf "$work"' EXIT

failed=()
for t in "${targets[@]}"; do
  corpus="$work/corpus/$t"
  mkdir -p "$corpus"
  if [ -d "$fuzz_dir/corpus/$t" ]; then
    cp -R "$fuzz_dir/corpus/$t/." "$corpus/"
  fi
  seeds=$(find "$corpus" -type f | wc -l)
  log="$work/$t.log"
  echo "== $t: ${secs}s from $seeds seeds"
  status=0
  start=$SECONDS
  cargo fuzz run --fuzz-dir "$fuzz_dir" "$t" "$corpus" -- \
    -max_total_time="$secs" -timeout="$timeout_s" -print_final_stats=1 \
    ${extra[@]+"${extra[@]}"} >"$log" 2>&1 || status=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  if [ -z "$execs" ]; then
    execs=$(sed -n 's/^Done \([0-9]*\) runs.*/\1/p' "$log" | tail -n 1)
  fi
  if [ -z "$execs" ]; then
    # Crashed: libFuzzer's last progress line ("#N ...") is the best count there is.
    execs=$(sed -n 's/^#\([0-9][0-9]*\).*/at least \1/p' "$log" | tail -n 1)
  fi
  took=$((SECONDS - start))
  grown=$(find "$corpus" -type f | wc -l)
  if [ "$status" -ne 0 ]; then
    echo "!! $t FAILED (exit $status) after ${execs:-?} executions in ${took}s"
    grep -E -A2 "panicked at|ERROR: (libFuzzer|AddressSanitizer)" "$log" | head -n 20 || true
    echo "-- log tail:"
    tail -n 60 "$log"
    failed+=("$t")
  else
    echo "   ok: ${execs:-?} executions in ${took}s, corpus $seeds -> $grown"
  fi
done

if [ "${#failed[@]}" -ne 0 ]; then
  echo "== FAILED: ${failed[*]} (crash inputs under $fuzz_dir/artifacts/)"
  exit 1
fi
echo "== all ${#targets[@]} targets ran ${secs}s without a crash"
