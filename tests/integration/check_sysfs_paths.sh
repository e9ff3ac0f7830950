#!/bin/bash
# Under iwemu-run, programs that read the kernel's own paths see the device:
# /sys/class/infiniband and /sys/class/infiniband_verbs resolve into the
# generated tree, in the program and in its children (ls, cat, stat, find,
# Python), and the device shows its interface as device/net/<ifname>, the
# way rdma-core's tests find it (then `ip -j addr show <ifname>`).  Nothing
# else under /sys changes.
# usage: check_sysfs_paths.sh IWEMU_RUN
set -u
run=$1
fail() { echo "FAIL: $*"; exit 1; }
ib=/sys/class/infiniband

out=$("$run" ls "$ib") || fail "ls $ib"
[ "$out" = iwemu0 ] || fail "ls $ib: '$out'"
"$run" ls -l "$ib/" 2>&1 | grep -q "No such file" && fail "ls -l $ib/ reported a missing file"
[ "$("$run" cat $ib/iwemu0/node_type)" = "4: RNIC" ] || fail "cat node_type"
"$run" ls /sys/class/infiniband_verbs | grep -qx uverbs0 || fail "ls /sys/class/infiniband_verbs"
[ "$("$run" stat -c %F $ib/iwemu0/ports/1)" = directory ] || fail "stat ports/1"
"$run" find $ib/ -name gids | grep -qx "$ib/iwemu0/ports/1/gids" || fail "find"

# What ibstat and scripts read of the device and its port.
[ "$("$run" cat $ib/iwemu0/ports/1/state)" = "4: ACTIVE" ] || fail "cat ports/1/state"
[ "$("$run" cat $ib/iwemu0/ports/1/link_layer)" = "Ethernet" ] || fail "cat ports/1/link_layer"
"$run" cat $ib/iwemu0/ports/1/rate | grep -q "Gb/sec" || fail "cat ports/1/rate"
"$run" cat $ib/iwemu0/node_desc | grep -q iWARP || fail "cat node_desc"
[ "$("$run" cat $ib/iwemu0/ports/1/gid_attrs/types/0)" = "IB/RoCE v1" ] || fail "gid_attrs/types/0"
gid0_if=$("$run" cat $ib/iwemu0/ports/1/gid_attrs/ndevs/0) && ip link show "$gid0_if" >/dev/null 2>&1 ||
    fail "gid_attrs/ndevs/0 names '$gid0_if', not an interface"
[ "$("$run" ls $ib/iwemu0/ports/1/gids | wc -l)" = "$("$run" ls $ib/iwemu0/ports/1/gid_attrs/ndevs | wc -l)" ] ||
    fail "gid_attrs/ndevs does not list every GID"
# realpath(3) resolves inside glibc: it must land on the device's files too.
# Not in the sanitizer build: its runtime, first in LD_PRELOAD, intercepts
# realpath ahead of the shim.
if [ -n "${ASAN_OPTIONS:-}" ]; then
    echo "realpath: not checked (the ASan runtime intercepts it before the shim)"
else
resolved=$("$run" python3 -c '
import ctypes, sys
libc = ctypes.CDLL(None)
libc.realpath.restype = ctypes.c_char_p
r = libc.realpath(b"/sys/class/infiniband/iwemu0/node_type", None)
sys.stdout.write(r.decode() if r else "")') || fail "realpath"
[ -n "$resolved" ] && [ "$(cat "$resolved")" = "4: RNIC" ] || fail "realpath gave '$resolved'"
fi

# The interface: the one port 1 follows (IWEMU_NETDEV picks it; not changed
# here: the tree is shared with concurrent tests).
ifname=$("$run" ls $ib/iwemu0/device/net/) || fail "ls device/net"
[ -n "$ifname" ] && ip link show "$ifname" >/dev/null 2>&1 || fail "device/net lists '$ifname', not an interface"
# rdma-core's tests: os.path.exists(.../device/net/), then `ls` of it and
# `ip -j addr show` of the first name (a shell here: stat, then children).
"$run" sh -c "test -d $ib/iwemu0/device/net/ && ip -j addr show \$(ls $ib/iwemu0/device/net/ | head -n 1)" |
    grep -q '"ifname":"'"$ifname"'"' || fail "the rdma-core test suite's lookup"

# Outside these paths, and outside iwemu-run, nothing changes.
[ "$("$run" cat /sys/class/net/lo/ifindex)" = "$(cat /sys/class/net/lo/ifindex)" ] || fail "/sys/class/net changed"
if [ ! -e $ib ]; then
    "$run" sh -c "ls /sys/class/infiniband_x" >/dev/null 2>&1 && fail "a path only sharing the prefix was redirected"
fi
echo "PASS: /sys/class/infiniband* under iwemu-run (interface $ifname)"
