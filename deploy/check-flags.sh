#!/usr/bin/env bash
# Every flag the deployments pass to linerate exists in that subcommand's --help, so a renamed
# flag fails CI instead of a deployment: the Kubernetes manifests' container args and the systemd
# units' ExecStart lines.
# Usage: deploy/check-flags.sh PATH/TO/linerate
set -euo pipefail
bin=${1:?usage: deploy/check-flags.sh PATH/TO/linerate}
dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
fail=0
# check FILE SUBCOMMAND FLAG...: each FLAG is in `linerate SUBCOMMAND --help`.
check() {
    local f=$1 sub=$2 help bad=0
    shift 2
    help=$("$bin" "$sub" --help)
    for flag in "$@"; do
        if ! grep -qE -- "$flag([ ,=]|$)" <<<"$help"; then
            echo "$f: linerate $sub has no $flag" >&2
            bad=1
        fi
    done
    if [ "$bad" = 0 ]; then echo "$f: linerate $sub: flags ok"; else fail=1; fi
}
for f in "$dir"/kubernetes/*.yaml; do
    # the container's args: the first is the subcommand, the --words are its flags
    sub=$(awk '/^ *args:/{getline; sub(/^ *- */, ""); print; exit}' "$f")
    [ -n "$sub" ] || continue
    # shellcheck disable=SC2046 # one flag per word
    check "$f" "$sub" $(grep -oE '^ *- --[a-z0-9-]+' "$f" | sed 's/^ *- //')
done
for f in "$dir"/systemd/*.service; do
    # ExecStart=/path/linerate SUBCOMMAND --flag value ...
    line=$(grep -E '^ExecStart=' "$f")
    sub=$(awk '{print $2}' <<<"$line")
    [ -n "$sub" ] || { echo "$f: no linerate subcommand in ExecStart" >&2; fail=1; continue; }
    # shellcheck disable=SC2046
    check "$f" "$sub" $(grep -oE ' --[a-z0-9-]+' <<<"$line")
done
exit "$fail"
