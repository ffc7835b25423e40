#!/usr/bin/env bash
# What "nothing to install on the far host" costs (issue 32): `linerate cp` of the 640-file
# tree (~1 GB, linerate mktree) over ssh across one 10 Gbit/s link (two network namespaces, a
# veth pair shaped by tbf at both ends, burst 4 MiB, latency 10 ms, MTU 1500), trees on tmpfs,
# to a fresh user of a throwaway sshd whose PATH has no linerate:
#   preinstalled  cp --remote-linerate PATH (linerate installed there)
#   first         cp with the remote cache emptied first: it uploads itself, then copies
#   second        cp again: the cached copy runs, nothing is uploaded
# ROUNDS rounds, each running the three in that order (so they alternate); prints each run's
# wall time (process start to exit), its phases from --json, and per mode the median and
# range, and the median against preinstalled. Every copy is compared with its source.
#
# Needs root, ip, tc, sshd, ssh, ssh-keygen, useradd and python3. Removes its namespaces, user,
# processes and files on exit, also on failure or a signal.
#
# Usage: sudo bench/ssh-upload.sh [--rounds N] [--linerate PATH]
#   --linerate PATH  the linerate to run and upload (default <target>/release/linerate, built
#                    with `cargo build --release -p linerate` if missing)
# Exit status: 0 when every copy succeeded and matched, 1 otherwise, 2 for bad usage or setup.

set -euo pipefail
die() { echo "ssh-upload: $*" >&2; exit 2; }
ROUNDS=3
LINERATE=""
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) [ $# -ge 2 ] || die "--rounds needs a value"; ROUNDS=$2; shift 2 ;;
        --linerate) [ $# -ge 2 ] || die "--linerate needs a value"; LINERATE=$2; shift 2 ;;
        -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
        *) die "unknown argument: $1" ;;
    esac
done
[ "$(id -u)" = 0 ] || die "needs root (network namespaces, a user, an sshd)"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
find_linerate "$LINERATE" "$ROOT"

ID=$$
NS_C=lrbc$ID NS_S=lrbs$ID DEV=lrbv$ID USER_NAME=lrbu$ID
C_IP=198.18.71.1 S_IP=198.18.71.2
WORK=$(mktemp -d /dev/shm/linerate-ssh-upload.XXXXXX)
SSHD_PID=""
cleanup() {
    [ -n "$SSHD_PID" ] && kill "$SSHD_PID" 2>/dev/null || true
    for ns in "$NS_S" "$NS_C"; do
        for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null || true; done
        ip netns del "$ns" 2>/dev/null || true
    done
    userdel -f "$USER_NAME" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

chmod 755 "$WORK"
HOME_DIR=$WORK/home
useradd -M -N -g nogroup -s /bin/sh -p '*' -d "$HOME_DIR" "$USER_NAME"
mkdir "$HOME_DIR" && chown "$USER_NAME:nogroup" "$HOME_DIR"
# The preinstalled linerate: a copy the user may run, outside its home.
mkdir "$WORK/opt" && cp "$LINERATE" "$WORK/opt/linerate" && chmod 755 "$WORK/opt/linerate"

ip netns add "$NS_C"; ip netns add "$NS_S"
ip link add "$DEV" netns "$NS_C" type veth peer name "${DEV}p" netns "$NS_S"
ip -n "$NS_C" addr add "$C_IP/30" dev "$DEV"
ip -n "$NS_S" addr add "$S_IP/30" dev "${DEV}p"
for pair in "$NS_C $DEV" "$NS_S ${DEV}p"; do
    set -- $pair
    ip -n "$1" link set lo up; ip -n "$1" link set "$2" up mtu 1500
    tc -n "$1" qdisc add dev "$2" root tbf rate 10gbit burst 4mb latency 10ms
done

K=$WORK/keys; mkdir "$K"; chmod 755 "$K"
ssh-keygen -q -t ed25519 -N '' -f "$K/host" && ssh-keygen -q -t ed25519 -N '' -f "$K/user"
cp "$K/user.pub" "$K/authorized_keys"; chmod 644 "$K/authorized_keys"
echo "bench $(cat "$K/host.pub")" > "$K/known_hosts"
cat > "$K/sshd_config" <<EOF
Port 22
ListenAddress $S_IP
HostKey $K/host
AuthorizedKeysFile $K/authorized_keys
PidFile none
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
LogLevel ERROR
EOF
cat > "$K/ssh_config" <<EOF
Host bench
  HostName $S_IP
  User $USER_NAME
  IdentityFile $K/user
  IdentitiesOnly yes
  UserKnownHostsFile $K/known_hosts
  HostKeyAlias bench
  StrictHostKeyChecking yes
  BatchMode yes
  LogLevel ERROR
EOF
mkdir -p /run/sshd
ip netns exec "$NS_S" /usr/sbin/sshd -D -e -f "$K/sshd_config" 2>"$WORK/sshd.log" &
SSHD_PID=$!
for _ in $(seq 50); do
    ip netns exec "$NS_C" ssh -F "$K/ssh_config" bench true 2>/dev/null && break
    sleep 0.2   # sshd starting: a bounded wait, outside any measurement
done
ip netns exec "$NS_C" ssh -F "$K/ssh_config" bench true || die "sshd did not accept a login: $(cat "$WORK/sshd.log")"
[ "$(ip netns exec "$NS_C" ssh -F "$K/ssh_config" bench 'command -v linerate || echo none')" = none ] \
    || die "linerate is on the remote PATH"

"$LINERATE" mktree --files 640 --mean-size 1.6MB "$WORK/src" >/dev/null
BYTES=$(du -sb "$WORK/src" | cut -f1)
RSH="ssh -F $K/ssh_config"
SSH_TRUE=()
RESULTS=$WORK/results.tsv
: > "$RESULTS"
status=0

run() { # mode round args...
    local mode=$1 round=$2; shift 2
    local dest="$HOME_DIR/d"
    rm -rf "$dest"
    # Warm the memory the copy will write (this VM reports free pages to its hypervisor, and
    # a first write to such a page faults): write and delete a scratch file of the tree's size.
    dd if=/dev/zero of="$WORK/prefault" bs=1M count=$(( BYTES >> 20 )) status=none; rm -f "$WORK/prefault"
    local t0 t1 out
    t0=$(date +%s.%N)
    if out=$(ip netns exec "$NS_C" "$LINERATE" cp --no-save --json -q -P 4 -e "$RSH" "$@" "$WORK/src/" "bench:d" 2>"$WORK/err"); then
        t1=$(date +%s.%N)
        if diff -r "$WORK/src" "$dest" >/dev/null; then
            printf '%s\t%s\t%s\t%s\n' "$mode" "$round" "$(echo "$t1 - $t0" | bc)" "$out" >> "$RESULTS"
        else
            echo "round $round $mode: the copy differs from its source" >&2; status=1
        fi
    else
        echo "round $round $mode: failed: $(cat "$WORK/err")" >&2; status=1
    fi
}

for r in $(seq "$ROUNDS"); do
    t0=$(date +%s.%N); ip netns exec "$NS_C" ssh -F "$K/ssh_config" bench true; t1=$(date +%s.%N)
    SSH_TRUE+=("$(echo "$t1 - $t0" | bc)")
    run preinstalled "$r" --remote-linerate "$WORK/opt/linerate"
    rm -rf "$HOME_DIR/.cache"
    run first "$r"
    run second "$r"
done

python3 - "$RESULTS" "$BYTES" "$LINERATE" "${SSH_TRUE[@]}" <<'EOF'
import json, statistics, sys, os
path, nbytes, exe = sys.argv[1], int(sys.argv[2]), sys.argv[3]
ssh_true = [float(x) for x in sys.argv[4:]]
rows = {}
print(f"# linerate cp over ssh, 640 files / {nbytes/1e9:.2f} GB, 10 Gbit/s tbf link, 4 streams; "
      f"executable {os.path.getsize(exe)/1e6:.1f} MB; ssh host true: median {statistics.median(ssh_true):.3f} s")
print(f"{'mode':<13} {'round':>5} {'wall s':>7} {'start s':>8} {'upload s':>9} {'upload MB':>9} {'copy s':>7} {'Gbit/s':>7}  remote")
for line in open(path):
    mode, rnd, wall, doc = line.rstrip("\n").split("\t", 3)
    j = json.loads(doc); p = j.get("phases", {})
    rows.setdefault(mode, []).append(float(wall))
    print(f"{mode:<13} {rnd:>5} {float(wall):7.2f} {p.get('remote_start_s',0):8.2f} {p.get('upload_s',0):9.2f} "
          f"{p.get('upload_bytes',0)/1e6:9.1f} {p.get('copy_s',0):7.2f} {j['gbit_per_s']:7.2f}  {p.get('remote_linerate')}")
print()
base = statistics.median(rows["preinstalled"]) if rows.get("preinstalled") else None
for mode in ("preinstalled", "first", "second"):
    v = rows.get(mode)
    if not v:
        continue
    m = statistics.median(v)
    ratio = f"{m/base:.2f} x preinstalled" if base else ""
    print(f"{mode:<13} median {m:6.2f} s  (min {min(v):.2f}, max {max(v):.2f}, n={len(v)})  {ratio}")
EOF
exit $status
