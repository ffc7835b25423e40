#!/usr/bin/env bash
# Every flag the Kubernetes manifests pass to linerate exists in that subcommand's --help, so a
# renamed flag fails CI instead of a deployment.
# Usage: deploy/check-flags.sh PATH/TO/linerate
set -euo pipefail
bin=${1:?usage: deploy/check-flags.sh PATH/TO/linerate}
dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/kubernetes
fail=0
for f in "$dir"/*.yaml; do
    # the container's args: the first is the subcommand, the --words are its flags
    sub=$(awk '/^ *args:/{getline; sub(/^ *- */, ""); print; exit}' "$f")
    [ -n "$sub" ] || continue
    help=$("$bin" "$sub" --help)
    bad=0
    for flag in $(grep -oE '^ *- --[a-z0-9-]+' "$f" | sed 's/^ *- //'); do
        if ! grep -qE -- "$flag([ ,=]|$)" <<<"$help"; then
            echo "$f: linerate $sub has no $flag" >&2
            bad=1
        fi
    done
    if [ "$bad" = 0 ]; then echo "$f: linerate $sub: flags ok"; else fail=1; fi
done
exit "$fail"
