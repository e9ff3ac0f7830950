#!/bin/sh
# ibv_devices and ibv_devinfo -v (the Debian binaries) over iwemu: the device
# is listed, its transport is iWARP, port 1 is active and a GID is printed.
# usage: check_devinfo.sh IWEMU_RUN [devices|devinfo]
set -u
run="$1"
what="${2:-devinfo}"
fail() { echo "FAIL: $*" >&2; echo "$out" >&2; exit 1; }

if [ "$what" = devices ]; then
    out=$("$run" ibv_devices 2>&1) || fail "ibv_devices exited non-zero"
    echo "$out" | grep -Eq '^[[:space:]]*iwemu0[[:space:]]+[0-9a-f]{16}$' || fail "iwemu0 with a node GUID not listed"
    echo "$out"
    exit 0
fi

out=$("$run" ibv_devinfo -v 2>&1) || fail "ibv_devinfo -v exited non-zero"
echo "$out" | grep -q 'hca_id:[[:space:]]*iwemu0' || fail "no hca_id iwemu0"
echo "$out" | grep -Eq 'transport:[[:space:]]*iWARP' || fail "transport is not iWARP"
echo "$out" | grep -q 'PORT_ACTIVE' || fail "port not PORT_ACTIVE"
echo "$out" | grep -Eq 'link_layer:[[:space:]]*Ethernet' || fail "link layer not Ethernet"
echo "$out" | grep -Eq 'GID\[ *0\]:[[:space:]]*0000:0000:0000:0000:0000:ffff:[0-9a-f]{4}:[0-9a-f]{4}' || fail "no IPv4-mapped GID[0]"
echo "$out" | grep -q 'node_guid:[[:space:]]*0269:7765:6d75:0001' || fail "unexpected node_guid"
echo "$out" | grep -Eq 'max_qp_rd_atom:[[:space:]]*([1-9]|[1-9][0-9]|1[0-9][0-9]|2[0-4][0-9]|25[0-5])$' || fail "max_qp_rd_atom not in 1..255"
echo "$out" | head -12
exit 0
