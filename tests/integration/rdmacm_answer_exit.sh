#!/bin/bash
# A server that rejects (or accepts) with private data and calls exit() at
# once, ROUNDS times: the client must get REJECTED (ESTABLISHED) with the
# server's private data every time (issue 24.4: the answer was queued for
# the CM thread and exit() could come first).
# usage: rdmacm_answer_exit.sh IWEMU_RUN PROGRAM reject|accept [ROUNDS [_exit]]
# With _exit the server leaves through _exit(), which runs no exit handler:
# the answer must be on the wire when rdma_reject / rdma_accept returns.
set -u
here=$(dirname "$0")
. "$here/rdmacm_lib.sh"
run=$1 program=$2 answer=$3 rounds=${4:-50} how=${5:-}
pair_setup 127.0.0.1
lost=0
for round in $(seq 1 "$rounds"); do
    port=$(free_port) || fail "no free port"
    timeout 20 "$run" "$program" server "$answer" "$addr" "$port" $how > "$dir/server.log" 2>&1 &
    server=$!
    wait_listen "$port" 10 $server || { show "$dir/server.log"; fail "round $round: server did not listen"; }
    timeout 20 "$run" "$program" client "$answer" "$addr" "$port" > "$dir/client.log" 2>&1
    client_rc=$?
    wait $server
    server_rc=$?
    if [ $server_rc -ne 0 ]; then
        show "$dir/server.log" "$dir/client.log"
        fail "round $round: server rc=$server_rc"
    fi
    if [ $client_rc -ne 0 ]; then
        lost=$((lost + 1))
        echo "round $round: client rc=$client_rc: $(cat "$dir/client.log")"
    fi
done
[ $lost -eq 0 ] || fail "$answer + ${how:-exit}(): the client missed the server's private data in $lost of $rounds rounds"
echo "$answer + ${how:-exit}(): the client saw the server's private data in all $rounds rounds"
