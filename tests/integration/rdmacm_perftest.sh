#!/bin/bash
# A perftest benchmark with -R (every connection through rdma_cm, as iWARP
# needs) between two processes; both must exit 0 and print a result line.
# usage: rdmacm_perftest.sh IWEMU_RUN TEST [ADDRESS] [EXTRA ARGS...]   e.g. ib_send_bw
set -u
here=$(dirname "$0")
. "$here/rdmacm_lib.sh"
run=$1
test=$2
addr=${3:-127.0.0.1}
shift $(( $# < 3 ? $# : 3 ))
if [ "$addr" = nonloopback ]; then
    addr=$(local_address)
    [ -n "$addr" ] || { echo "no non-loopback IPv4 address: skipped"; exit 77; }
fi
port=$(free_port) || fail "no free port"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

timeout 100 "$run" "$test" -R -p "$port" "$@" > "$dir/server.log" 2>&1 &
server=$!
wait_listen "$port" 20 $server || { kill $server 2>/dev/null; show "$dir/server.log"; fail "server did not listen"; }
timeout 90 "$run" "$test" -R -p "$port" "$@" "$addr" > "$dir/client.log" 2>&1
client_rc=$?
wait $server
server_rc=$?
# The result row: message size first, then the iteration count.
result=$(grep -A1 "#bytes" "$dir/client.log" | tail -1)
if [ $client_rc -ne 0 ] || [ $server_rc -ne 0 ] || ! echo "$result" | grep -Eq "^ *[0-9]+ +[0-9]+ "; then
    show "$dir/server.log" "$dir/client.log"
    fail "$test -R: client rc=$client_rc server rc=$server_rc"
fi
echo "$test -R $addr:$port:$result"
