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
pair_setup "$addr"
pair_limit=$((limit + 15)) server_client "$run" "$bench" server -a "$addr" -p "$port" -n "$n" -t "$limit" "$@" -- \
    "$bench" client -a "$addr" -p "$port" -n "$n" -t "$limit" "$@"
cat "$dir/server.log" "$dir/client.log"
[ $client_rc -eq 0 ] && [ $server_rc -eq 0 ] || fail "client rc=$client_rc server rc=$server_rc"
for side in server client; do
    grep -qx "$side.result=ok" "$dir/$side.log" || fail "$side did not report result=ok"
    grep -qx "$side.connections=$n" "$dir/$side.log" || fail "$side did not report $n connections"
    grep -qx "$side.bad_messages=0" "$dir/$side.log" || fail "$side saw corrupted messages"
done
echo "scale_bench: $n connections up, one Send each way on every QP, both sides ok"
