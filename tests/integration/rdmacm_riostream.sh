#!/bin/bash
# riostream (librdmacm's example of rsockets' RDMA Write API, riowrite) as
# server and client under iwemu-run; both sides wait for each transfer by
# spinning on the last octet the peer's Write fills.
# usage: rdmacm_riostream.sh IWEMU_RUN pingpong RUNS   riostream -C 1 -I 100, RUNS times
#        rdmacm_riostream.sh IWEMU_RUN default         riostream's default run
#
# The default run is a latency phase (64 B .. 1 MiB), then a second
# connection for a bandwidth phase on which riostream sets RDMA_INLINE to 0.
# rsockets on iWARP carries its own messages as inline Sends and refuses a QP
# granted less than 4 octets of inline data; kernel siw grants the 0 asked
# for, so there the bandwidth phase is refused ("rconnect: Operation not
# supported").  iwemu grants the device's 256 (docs/limits.md), and the phase
# then hangs: `default` is kept for investigation and is not registered in
# CTest (docs/running.md).
set -u
here=$(dirname "$0")
. "$here/rdmacm_lib.sh"
run=$1 mode=$2 runs=${3:-10}

pingpong() {
    local i
    for i in $(seq 1 "$runs"); do
        pair_setup 127.0.0.1
        pair_limit=40 server_client "$run" riostream -p "$port" -C 1 -I 100 -- \
            riostream -s 127.0.0.1 -p "$port" -C 1 -I 100
        if [ $client_rc -ne 0 ] || [ $server_rc -ne 0 ] || ! grep -q "^custom  *1000  *1  *100 " "$dir/client.log"; then
            show "$dir/server.log" "$dir/client.log"
            fail "riostream -C 1 -I 100, run $i of $runs: client rc=$client_rc server rc=$server_rc"
        fi
        tail -1 "$dir/client.log"
        rm -rf "$dir"
    done
    echo "riostream -C 1 -I 100: $runs of $runs runs passed"
}

default_run() {
    pair_setup 127.0.0.1
    timeout 280 "$run" riostream -p "$port" > "$dir/server.log" 2>&1 &
    local server=$!
    trap 'kill $server 2>/dev/null; rm -rf "$dir"' EXIT
    wait_listen "$port" 20 $server || { show "$dir/server.log"; fail "riostream server did not listen"; }
    timeout 250 "$run" riostream -s 127.0.0.1 -p "$port" > "$dir/client.log" 2>&1
    local client_rc=$?
    kill $server 2>/dev/null
    wait $server 2>/dev/null
    cat "$dir/client.log"
    [ $client_rc -ne 124 ] || fail "riostream's default run hung (client)"
    local size
    for size in 64 4k 64k 1m; do
        grep -q "^${size}_lat " "$dir/client.log" || fail "latency phase: no ${size}_lat row"
    done
    grep -q "rconnect: Operation not supported" "$dir/client.log" ||
        fail "bandwidth phase: expected rsockets' refusal of a QP without inline data (as over siw)"
    echo "riostream default run: latency phase complete; bandwidth phase refused by rsockets (inline 0 on iWARP), as over siw"
}

case $mode in
pingpong) pingpong ;;
default) default_run ;;
*) fail "unknown mode $mode" ;;
esac
