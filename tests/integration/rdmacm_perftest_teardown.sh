#!/bin/bash
# ib_send_bw -R -s 2 -n 200 RUNS times under CPU load (two busy loops on
# the 2-core test host): perftest's closing exchange must complete every
# time.  Its last message (a Send that completed at the server) vanished
# 1 run in ~25 when a QP socket was closed with unread input: Linux then
# resets the stream instead of ending it with a FIN, and what it still
# held for the peer is lost (emulator/close_linger.cpp).
# usage: rdmacm_perftest_teardown.sh IWEMU_RUN RUNS
set -u
here=$(dirname "$0")
. "$here/rdmacm_lib.sh"
run=$1
runs=$2
load=()
for _ in 1 2; do
    timeout 600 sh -c 'while :; do :; done' &
    load+=($!)
done
trap 'kill "${load[@]}" 2>/dev/null' EXIT
for i in $(seq 1 "$runs"); do
    # perftest_pair's own trap replaces ours: keep stopping the load.
    (
        perftest_pair "$run" ib_send_bw 127.0.0.1 -R -s 2 -n 200
        if [ $client_rc -ne 0 ] || [ $server_rc -ne 0 ] || ! echo "$result" | grep -Eq "^ *2 +200 "; then
            show "$dir/server.log" "$dir/client.log"
            fail "ib_send_bw -R -s 2 -n 200, run $i of $runs: client rc=$client_rc server rc=$server_rc"
        fi
    ) || exit 1
done
echo "ib_send_bw -R -s 2 -n 200 under load: $runs runs passed"
