#!/bin/bash
# rdma_xserver / rdma_xclient over RC (-c r): rdma_create_ep on both sides,
# one Send each way; the client posts it with IBV_SEND_INLINE on a QP created
# with max_inline_data 0 (inline is bounded by the device, as with siw).
# rdma_xserver binds the wildcard address.  Both must exit 0.
# usage: rdmacm_rdma_xserver_xclient.sh IWEMU_RUN
set -u
here=$(dirname "$0")
. "$here/rdmacm_lib.sh"
run=$1
pair_setup 127.0.0.1
pair_limit=60 server_client "$run" rdma_xserver -c r -p "$port" -- rdma_xclient -c r -s "$addr" -p "$port"
if [ $client_rc -ne 0 ] || [ $server_rc -ne 0 ] || ! grep -q "rdma_xclient: end 0" "$dir/client.log" ||
   ! grep -q "rdma_xserver: end 0" "$dir/server.log"; then
    show "$dir/server.log" "$dir/client.log"
    fail "rdma_xserver/rdma_xclient: client rc=$client_rc server rc=$server_rc"
fi
echo "rdma_xserver/rdma_xclient (RC) $addr:$port: end 0 on both sides"
