#!/bin/bash
# ibv_rc_pingpong (rdma-core's IB-style example) between two processes: QPN,
# PSN and GID swapped over its own TCP socket, QPs connected with
# ibv_modify_qp.  -g 0 selects GID 0, the IPv4-mapped address (docs/oob-connect.md).
# usage: oob_pingpong.sh IWEMU_RUN [ADDRESS] [EXTRA ARGS...]
set -u
here=$(dirname "$0")
. "$here/rdmacm_lib.sh"
run=$1
addr=${2:-127.0.0.1}
shift $(( $# < 2 ? $# : 2 ))
pair_setup "$addr"
server_client "$run" ibv_rc_pingpong -g 0 -p "$port" "$@" -- ibv_rc_pingpong -g 0 -p "$port" "$@" "$addr"
if [ $client_rc -ne 0 ] || [ $server_rc -ne 0 ] || ! grep -q "iters in" "$dir/client.log" ||
   ! grep -q "iters in" "$dir/server.log"; then
    show "$dir/server.log" "$dir/client.log"
    fail "ibv_rc_pingpong $*: client rc=$client_rc server rc=$server_rc"
fi
echo "ibv_rc_pingpong $*: $(grep "iters in" "$dir/client.log")"
