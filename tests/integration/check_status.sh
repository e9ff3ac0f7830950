#!/usr/bin/env bash
# One view across processes (issue 27): while an ib_send_bw server and
# client (two processes, rdma_cm) run, `iwemu status` and `rdma resource
# show qp` list both QPs with their pids, `rdma statistic show` counters
# move between two reads, the hw_counters files read; the status directory
# is 0700, a dead pid's file is removed by a reader, and the processes'
# files are gone after they exit.
# Usage: check_status.sh IWEMU_RUN IWEMU_TOOL
set -uo pipefail
here=$(dirname "$0")
. "$here/rdmacm_lib.sh"
run=$1
tool=$2
command -v ib_send_bw >/dev/null || { echo "SKIP: no perftest"; exit 77; }
command -v rdma >/dev/null || { echo "SKIP: no rdma tool (iproute2)"; exit 77; }
tmp=$(mktemp -d)
chmod 700 "$tmp"
spid= cpid=
cleanup() {
  for p in $spid $cpid; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
export XDG_RUNTIME_DIR=$tmp  # a private status directory: only this test's processes
export IWEMU_CONFIG=$tmp/iwemu.conf
: >"$IWEMU_CONFIG"
dir=$tmp/iwemu/status
t() { timeout 20 "$run" "$@"; }
port=$(free_port) || fail "no free port"

# iwemu-run execs the program: $! is ib_send_bw's pid.  With -R each
# perftest has two QPs (its rdma_cm exchange and the test's).
"$run" ib_send_bw -R -D 6 -p "$port" >"$tmp/server.log" 2>&1 &
spid=$!
wait_listen "$port" 15 "$spid" || { show "$tmp/server.log"; fail "server did not listen"; }
"$run" ib_send_bw -R -D 6 -p "$port" 127.0.0.1 >"$tmp/client.log" 2>&1 &
cpid=$!

# Both QPs in RTS (up to 15 s).
status=
for _ in $(seq 1 150); do
  status=$(timeout 10 "$tool" status 2>&1)
  [ "$(grep -c ' RTS local ' <<<"$status")" -ge 2 ] && break
  sleep 0.1
done
echo "$status"
for p in $spid $cpid; do
  grep -Eq "^  pid $p ib_send_bw on iwemu0: [1-9][0-9]* QPs" <<<"$status" || fail "iwemu status lacks pid $p"
done
grep -Eq "^    qp [0-9]+ RTS local 127\.0\.0\.1:$port peer 127\.0\.0\.1:[0-9]+" <<<"$status" ||
  fail "the server's QP with its peer is not listed"
grep -Eq "^    qp [0-9]+ RTS local 127\.0\.0\.1:[0-9]+ peer 127\.0\.0\.1:$port" <<<"$status" ||
  fail "the client's QP with its peer is not listed"
grep -Eq "^      tx [1-9][0-9]* FPDUs [1-9][0-9]* B" <<<"$status" || fail "no QP sent FPDUs"

# rdma resource show qp, from a third process.
qps=$(t rdma resource show qp 2>&1) || fail "rdma resource show qp: $qps"
echo "$qps"
for p in $spid $cpid; do
  grep -Eq "state RTS .*pid $p comm ib_send_bw" <<<"$qps" || fail "rdma resource show qp lacks pid $p"
done

# Port counters move between two reads; per-QP counters name both QPs.
value() { grep -Eo "$1 [0-9]+" <<<"$2" | awk '{print $2}'; }
s1=$(t rdma statistic show 2>&1) || fail "rdma statistic show: $s1"
sleep 0.5
s2=$(t rdma statistic show 2>&1) || fail "rdma statistic show: $s2"
echo "$s2"
a=$(value sent_pkts "$s1") b=$(value sent_pkts "$s2")
[ -n "$a" ] && [ -n "$b" ] && [ "$b" -gt "$a" ] || fail "sent_pkts did not move: $a -> $b"
a=$(value rcvd_bytes "$s1") b=$(value rcvd_bytes "$s2")
[ "$b" -gt "$a" ] || fail "rcvd_bytes did not move: $a -> $b"
qs=$(t rdma statistic qp show 2>&1) || fail "rdma statistic qp show: $qs"
for p in $spid $cpid; do
  grep -Eq "cntn [0-9]+ qp-type RC pid $p comm ib_send_bw sent_pkts [0-9]+" <<<"$qs" || fail "rdma statistic qp show lacks pid $p: $qs"
done

# hw_counters files, through the shim's sysfs redirection.
hw=/sys/class/infiniband/iwemu0/ports/1/hw_counters
names=$(t ls "$hw") || fail "ls $hw"
for n in sent_pkts rcvd_pkts rcvd_crc_err sent_term_mpa rnr_waits read_reqs_over_ird tcp_retransmits; do
  grep -qx "$n" <<<"$names" || fail "$hw lacks $n: $names"
done
v=$(t cat "$hw/sent_pkts") || fail "cat $hw/sent_pkts"
[[ $v =~ ^[0-9]+$ ]] && [ "$v" -gt 0 ] || fail "$hw/sent_pkts reads '$v'"
echo "ok: $hw/sent_pkts = $v"

# The directory and the files are private.
[ "$(stat -c %a "$dir")" = 700 ] || fail "$dir has mode $(stat -c %a "$dir")"
for p in $spid $cpid; do
  [ "$(stat -c %a "$dir/$p.shm")" = 600 ] || fail "$dir/$p.shm is not 0600"
done

# Stale files of dead pids: ignored and removed by the next reader.
listed=$(t rdma resource show qp 2>&1 | grep -c 'comm ib_send_bw')
sh -c 'exit 0' &
dead=$!
wait "$dead"
cp "$dir/$spid.shm" "$dir/$dead.shm"                  # a whole segment naming a live pid inside
truncate -s 4096 "$dir/$((dead + 100000)).shm" 2>/dev/null  # a file that never got its header
before=$(t rdma resource show qp 2>&1 | grep -c 'comm ib_send_bw')
[ "$before" -eq "$listed" ] || fail "a stale file's QPs were listed ($before QPs, not $listed)"
[ ! -e "$dir/$dead.shm" ] || fail "$dir/$dead.shm of dead pid $dead was not removed"
if kill -0 $((dead + 100000)) 2>/dev/null; then :; else
  [ ! -e "$dir/$((dead + 100000)).shm" ] || fail "a headerless file of a dead pid was not removed"
fi

# The processes exit: their files go with them.
for p in $spid $cpid; do
  timeout 30 tail --pid="$p" -f /dev/null || fail "pid $p still runs"
done
wait "$spid"; rs=$?
wait "$cpid"; rc=$?
spid= cpid=
[ $rs -eq 0 ] && [ $rc -eq 0 ] || { show "$tmp/server.log" "$tmp/client.log"; fail "ib_send_bw exited $rs/$rc"; }
left=$(ls "$dir")
[ -z "$left" ] || fail "files left in $dir: $left"
echo "PASS"
