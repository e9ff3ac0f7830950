#!/bin/bash
# rdma_server / rdma_client: synchronous ids (rdma_create_ep, rdma_get_request,
# MIGRATE_ID onto private channels), one Send each way; both must exit 0.
# usage: rdmacm_rdma_server_client.sh IWEMU_RUN [ADDRESS]
set -u
here=$(dirname "$0")
. "$here/rdmacm_lib.sh"
run=$1
addr=${2:-127.0.0.1}
pair_setup "$addr"
pair_limit=60 server_client "$run" rdma_server -s "$addr" -p "$port" -- rdma_client -s "$addr" -p "$port"
if [ $client_rc -ne 0 ] || [ $server_rc -ne 0 ] || ! grep -q "rdma_client: end 0" "$dir/client.log" ||
   ! grep -q "rdma_server: end 0" "$dir/server.log"; then
    show "$dir/server.log" "$dir/client.log"
    fail "rdma_server/rdma_client: client rc=$client_rc server rc=$server_rc"
fi
echo "rdma_server/rdma_client $addr:$port: end 0 on both sides"
