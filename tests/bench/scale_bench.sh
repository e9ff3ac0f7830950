#!/bin/bash
# Runs scale_bench as two processes under iwemu-run on one address (server,
# then client) and prints both reports.  Exit 0 only if both report
# result=ok for all N connections.  Every process is bounded by `timeout`.
# usage: scale_bench.sh IWEMU_RUN SCALE_BENCH [N [ADDRESS [options for both...]]]
set -u
here=$(dirname "$0")
. "$here/../integration/rdmacm_lib.sh"
run=$1 bench=$2 n=${3:-1000} addr=${4:-127.0.0.1}
shift $(( $# < 4 ? $# : 4 ))
limit=$(( 30 + n / 20 ))   # seconds; generous: the machine may be shared
port=$(free_port) || fail "no free port"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

timeout $((limit + 15)) "$run" "$bench" server -a "$addr" -p "$port" -n "$n" -t "$limit" "$@" > "$dir/server.log" 2>&1 &
server=$!
wait_listen "$port" 20 $server || { kill $server 2>/dev/null; show "$dir/server.log"; fail "server did not listen"; }
timeout $((limit + 5)) "$run" "$bench" client -a "$addr" -p "$port" -n "$n" -t "$limit" "$@" > "$dir/client.log" 2>&1
client_rc=$?
wait $server
server_rc=$?
cat "$dir/server.log" "$dir/client.log"
[ $client_rc -eq 0 ] && [ $server_rc -eq 0 ] || fail "client rc=$client_rc server rc=$server_rc"
for side in server client; do
    grep -qx "$side.result=ok" "$dir/$side.log" || fail "$side did not report result=ok"
    grep -qx "$side.connections=$n" "$dir/$side.log" || fail "$side did not report $n connections"
    grep -qx "$side.bad_messages=0" "$dir/$side.log" || fail "$side saw corrupted messages"
done
echo "scale_bench: $n connections up, one Send each way on every QP, both sides ok"
