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
if [ "$addr" = nonloopback ]; then
    addr=$(local_address)
    [ -n "$addr" ] || { echo "no non-loopback IPv4 address: skipped"; exit 77; }
fi
port=$(free_port) || fail "no free port"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

timeout 100 "$run" ucmatose -b "$addr" -p "$port" -c "$conns" "$@" > "$dir/server.log" 2>&1 &
server=$!
wait_listen "$port" 20 $server || { kill $server 2>/dev/null; show "$dir/server.log"; fail "server did not listen"; }
timeout 90 "$run" ucmatose -s "$addr" -p "$port" -c "$conns" "$@" > "$dir/client.log" 2>&1
client_rc=$?
wait $server
server_rc=$?
if [ $client_rc -ne 0 ] || [ $server_rc -ne 0 ] || ! grep -q "test complete" "$dir/client.log" ||
   ! grep -q "test complete" "$dir/server.log"; then
    show "$dir/server.log" "$dir/client.log"
    fail "ucmatose -c $conns: client rc=$client_rc server rc=$server_rc"
fi
echo "ucmatose $addr:$port: $conns connections, test complete on both sides"
