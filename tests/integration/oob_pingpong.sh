#!/bin/bash
# rdma-core's IB-style examples (ibv_rc_pingpong, ibv_srq_pingpong) between
# two processes: QPN, PSN and GID swapped over their own TCP socket, QPs
# connected with ibv_modify_qp.  -g 0 selects GID 0, the IPv4-mapped address
# (docs/oob-connect.md).
# usage: oob_pingpong.sh IWEMU_RUN PROGRAM [ADDRESS] [EXTRA ARGS...]
set -u
here=$(dirname "$0")
. "$here/rdmacm_lib.sh"
run=$1
program=$2
addr=${3:-127.0.0.1}
shift $(( $# < 3 ? $# : 3 ))
pair_setup "$addr"
server_client "$run" "$program" -g 0 -p "$port" "$@" -- "$program" -g 0 -p "$port" "$@" "$addr"
if [ $client_rc -ne 0 ] || [ $server_rc -ne 0 ] || ! grep -q "iters in" "$dir/client.log" ||
   ! grep -q "iters in" "$dir/server.log"; then
    show "$dir/server.log" "$dir/client.log"
    fail "$program $*: client rc=$client_rc server rc=$server_rc"
fi
echo "$program $*: $(grep "iters in" "$dir/client.log")"
