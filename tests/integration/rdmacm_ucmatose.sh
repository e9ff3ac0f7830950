#!/bin/bash
# ucmatose: N connections (default 10) between a server and a client process,
# each sending and receiving messages; both must exit 0.
# usage: rdmacm_ucmatose.sh IWEMU_RUN [ADDRESS] [CONNECTIONS] [EXTRA ARGS...]
set -u
here=$(dirname "$0")
. "$here/rdmacm_lib.sh"
run=$1
addr=${2:-127.0.0.1}
conns=${3:-10}
shift $(( $# < 3 ? $# : 3 ))
pair_setup "$addr"
server_client "$run" ucmatose -b "$addr" -p "$port" -c "$conns" "$@" -- \
    ucmatose -s "$addr" -p "$port" -c "$conns" "$@"
if [ $client_rc -ne 0 ] || [ $server_rc -ne 0 ] || ! grep -q "test complete" "$dir/client.log" ||
   ! grep -q "test complete" "$dir/server.log"; then
    show "$dir/server.log" "$dir/client.log"
    fail "ucmatose -c $conns: client rc=$client_rc server rc=$server_rc"
fi
echo "ucmatose $addr:$port: $conns connections, test complete on both sides"
