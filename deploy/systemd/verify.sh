#!/usr/bin/env bash
# The systemd unit is valid (systemd-analyze verify, every warning a failure, its man page link
# included) and stays hardened (systemd-analyze security: exposure at most 2.0 of 10).
# Usage: deploy/systemd/verify.sh PATH/TO/linerate
set -euo pipefail
bin=$(realpath "${1:?usage: deploy/systemd/verify.sh PATH/TO/linerate}")
dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
command -v systemd-analyze >/dev/null || { echo "systemd-analyze is missing (apt-get install systemd)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# verify checks that ExecStart's program exists and that Documentation=man: pages open.
mkdir -p "$tmp/man/man1"
"$bin" generate man --dir "$tmp/man/man1" >/dev/null
fail=0
for unit in "$dir"/*.service; do
    name=$(basename "$unit")
    sed "s#/usr/local/bin/linerate#$bin#" "$unit" >"$tmp/$name"
    out=$(MANPATH="$tmp/man" systemd-analyze verify "$tmp/$name" 2>&1) || fail=1
    if [ -n "$out" ]; then
        printf '%s: systemd-analyze verify:\n%s\n' "$unit" "$out" >&2
        fail=1
    fi
    if ! systemd-analyze security --offline=yes --threshold=20 --no-pager "$tmp/$name" >"$tmp/security" 2>&1; then
        tail -n 3 "$tmp/security" >&2
        echo "$unit: exposure above 2.0 (systemd-analyze security --offline=yes)" >&2
        fail=1
    fi
    [ "$fail" = 1 ] || echo "$unit: verify ok, $(grep -o 'Overall exposure level.*' "$tmp/security")"
done
exit "$fail"
