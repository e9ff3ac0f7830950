#!/usr/bin/env bash
# iproute2's `rdma` under iwemu-run, answered by the shim's NETLINK_RDMA
# socket: link / dev / resource / statistic / sys show, and a link add /
# delete round trip that the next process sees (rdma, ibv_devices, the
# sysfs tree).  The configuration is a private file (IWEMU_CONFIG).
# Usage: check_rdma_tool.sh IWEMU_RUN
set -euo pipefail
run=$1
command -v rdma >/dev/null || { echo "SKIP: no rdma tool (iproute2)"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export IWEMU_CONFIG=$tmp/iwemu.conf
export XDG_RUNTIME_DIR=$tmp  # a private status directory: no other test's QPs
chmod 700 "$tmp"
: >"$IWEMU_CONFIG"
t() { timeout 20 "$run" "$@"; }
fail() { echo "FAIL: $*" >&2; exit 1; }
expect() {  # expect PATTERN CMD...: CMD succeeds and prints a line matching PATTERN
  local pat=$1; shift
  local out
  out=$(t "$@" 2>&1) || fail "$* exited $?: $out"
  grep -Eq -- "$pat" <<<"$out" || fail "$*: no line matching '$pat' in: $out"
  echo "ok: $* -> $(grep -E -m1 -- "$pat" <<<"$out")"
}

expect '^link iwemu0/1 state (ACTIVE|DOWN) physical_state (LINK_UP|DISABLED)' rdma link show
expect '^0: iwemu0: node_type rnic fw iwemu .* node_guid 0269:7765:6d75:0001' rdma dev show
expect '^0: iwemu0: pd 0 cq 0 qp 0 cm_id 0 mr 0' rdma resource show
expect '^link iwemu0/1 sent_pkts [0-9]+ rcvd_pkts [0-9]+ sent_bytes [0-9]+' rdma statistic show
expect 'copy-on-fork on' rdma sys show
# Scripts that read /sys/class/infiniband themselves: ls, cat, and
# infiniband-diags' ibstatus, which lists the devices by `cd` and `*`.
expect ' iwemu0$' ls -l /sys/class/infiniband/
expect '^4: ACTIVE$' cat /sys/class/infiniband/iwemu0/ports/1/state
expect "^Infiniband device 'iwemu0' port 1 status:" ibstatus
expect '^[[:space:]]+link_layer:[[:space:]]+Ethernet$' ibstatus iwemu0:1
out=$(t rdma resource show qp 2>&1) || fail "rdma resource show qp: $out"
[ -z "$out" ] || fail "a process without QPs listed some: $out"
# A device name the tool does not know, and deleting the built-in device: errors, not hangs.
if t rdma dev show nosuch >/dev/null 2>&1; then fail "rdma dev show nosuch succeeded"; fi
if t rdma link delete iwemu0 >/dev/null 2>&1; then fail "iwemu0 was deleted"; fi

# link add: stored in the configuration, seen by the next process.
t rdma link add iwemu5 type iwemu netdev lo || fail "rdma link add"
grep -q '^rdma_link = iwemu5 lo' "$IWEMU_CONFIG" || fail "not in $IWEMU_CONFIG: $(cat "$IWEMU_CONFIG")"
expect '^link iwemu5/1 state ACTIVE physical_state LINK_UP netdev lo' rdma link show
expect '^1: iwemu5: node_type rnic' rdma dev show
expect 'iwemu5' ibv_devices
IWEMU_NETLINK=off expect 'iwemu5' ibv_devices
expect '^[0-9a-f:]+$' sh -c 'cat /sys/class/infiniband/iwemu5/node_guid'
if t rdma link add iwemu5 type iwemu netdev lo >/dev/null 2>&1; then fail "a second iwemu5 was added"; fi
if t rdma link add iwemu6 type nosuchtype netdev lo >/dev/null 2>&1; then fail "unknown link type accepted"; fi
if t rdma link add iwemu6 type iwemu netdev nosuchif0 >/dev/null 2>&1; then fail "unknown interface accepted"; fi

# link delete: gone from the configuration, netlink, libibverbs and the tree.
t rdma link delete iwemu5 || fail "rdma link delete"
grep -q iwemu5 "$IWEMU_CONFIG" && fail "still in $IWEMU_CONFIG"
out=$(t rdma dev show 2>&1)
grep -q iwemu5 <<<"$out" && fail "still listed: $out"
out=$(t ibv_devices 2>&1)
grep -q iwemu5 <<<"$out" && fail "libibverbs still lists it: $out"
t sh -c 'test ! -e /sys/class/infiniband/iwemu5' || fail "still in the sysfs tree"
echo "PASS"
