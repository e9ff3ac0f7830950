#!/bin/bash
# rping server and client, each under valgrind memcheck (valgrind_check.sh):
# RDMA Read, Write and Send through the shim's rdma_cm across two processes.
# usage: valgrind_rping.sh VALGRIND IWEMU_RUN [COUNT]
set -u
here=$(dirname "$0")
. "$here/rdmacm_lib.sh"
. "$here/rping_exit_race.sh"
valgrind=$1 run=$2 count=${3:-100}
pair_setup 127.0.0.1
"$here/valgrind_check.sh" "$valgrind" "$run" rping -s -a "$addr" -p "$port" -C "$count" -S 4096 -V \
    > "$dir/server.log" 2>&1 &
server=$!
# valgrind starts slowly: allow it time to listen.
wait_listen "$port" 60 $server || { kill $server 2>/dev/null; show "$dir/server.log"; fail "server did not listen"; }
"$here/valgrind_check.sh" "$valgrind" "$run" rping -c -a "$addr" -p "$port" -C "$count" -S 4096 -V \
    > "$dir/client.log" 2>&1
client_rc=$?
wait $server
server_rc=$?
client_rc=$(rping_rc client $client_rc "$dir/client.log")
server_rc=$(rping_rc server $server_rc "$dir/server.log")
if [ $client_rc -ne 0 ] || [ $server_rc -ne 0 ]; then
    show "$dir/server.log" "$dir/client.log"
    fail "rping under valgrind: client rc=$client_rc server rc=$server_rc"
fi
cat "$dir/server.log" "$dir/client.log"
