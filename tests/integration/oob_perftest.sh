#!/bin/bash
# A perftest benchmark WITHOUT -R between two processes: perftest swaps QPN
# and GID over its own TCP socket and connects with ibv_modify_qp
# INIT/RTR/RTS; iwemu dials the peer QP (docs/oob-connect.md).  Both sides
# must exit 0 and print a result line.
# usage: oob_perftest.sh IWEMU_RUN TEST [ADDRESS] [EXTRA ARGS...]
#
# Known perftest 4.5-0.17 bug: ib_send_bw on an iWARP device registers a
# credit MR but deregisters it only with -R, so without -R its
# ibv_dealloc_pd fails (EBUSY, as with the kernel) and the program exits 1
# after a correct run.  Exactly that failure is tolerated for ib_send_bw.
set -u
here=$(dirname "$0")
. "$here/rdmacm_lib.sh"
run=$1
test=$2
address=${3:-127.0.0.1}
shift $(( $# < 3 ? $# : 3 ))
perftest_pair "$run" "$test" "$address" "$@"

# Only the credit-MR leak described above, nothing else, may turn rc into 1.
credit_leak_only() {
    [ "$test" = ib_send_bw ] || return 1
    grep -q "Failed to deallocate PD" "$1" || return 1
    ! grep -v "Failed to deallocate PD\|Couldn't destroy all SEND resources" "$1" |
        grep -Eqi "fail|couldn't|error|unable"
}
for side in client server; do
    rc_var=${side}_rc
    if [ "${!rc_var}" -eq 1 ] && credit_leak_only "$dir/$side.log"; then
        eval "$rc_var=0"
    fi
done
if [ $client_rc -ne 0 ] || [ $server_rc -ne 0 ] || ! echo "$result" | grep -Eq "^ *[0-9]+ +[0-9]+ "; then
    show "$dir/server.log" "$dir/client.log"
    fail "$test (no -R): client rc=$client_rc server rc=$server_rc"
fi
# The QPs must really have been connected by modify_qp, not by rdma_cm.
grep -q "rdma_cm QPs.*OFF" "$dir/client.log" || { show "$dir/client.log"; fail "rdma_cm was used"; }
echo "$test $addr:$port $*:$result"
