#!/bin/bash
# librdmacm's cmtime, client against server, RUNS times: every connection
# must see RDMA_CM_EVENT_DISCONNECTED.  The client disconnects, destroys
# its QP at once and then waits for that event; it hung at "disconnecting"
# when the destroyed QP's socket was closed before the server's FIN came
# (emulator/close_linger.cpp).  The cmtime server never exits: it is killed.
# usage: rdmacm_cmtime.sh IWEMU_RUN RUNS CONNECTIONS
set -u
here=$(dirname "$0")
. "$here/rdmacm_lib.sh"
run=$1
runs=$2
connections=$3
pair_setup 127.0.0.1
for i in $(seq 1 "$runs"); do
    port=$(free_port) || fail "no free port"
    timeout 60 "$run" cmtime -b 127.0.0.1 -p "$port" > "$dir/server.log" 2>&1 &
    server=$!
    trap 'kill $server 2>/dev/null; rm -rf "$dir"' EXIT
    wait_listen "$port" 20 $server || { show "$dir/server.log"; fail "cmtime server did not listen"; }
    timeout 20 "$run" cmtime -s 127.0.0.1 -p "$port" -c "$connections" > "$dir/client.log" 2>&1
    rc=$?
    kill $server 2>/dev/null
    wait $server 2>/dev/null
    if [ $rc -ne 0 ] || ! grep -q "^disconnect" "$dir/client.log"; then
        show "$dir/server.log" "$dir/client.log"
        fail "cmtime -c $connections, run $i of $runs: client rc=$rc"
    fi
done
echo "cmtime -c $connections: $runs runs:"
grep -E "^(connect|disconnect) " "$dir/client.log"
