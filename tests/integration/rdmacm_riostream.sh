#!/bin/bash
# riostream (librdmacm's example of rsockets' RDMA Write API, riowrite) as
# server and client under iwemu-run; both sides wait for each transfer by
# spinning on the last octet the peer's Write fills.
# usage: rdmacm_riostream.sh IWEMU_RUN pingpong RUNS   riostream -C 1 -I 100, RUNS times
#        rdmacm_riostream.sh IWEMU_RUN default         riostream's default run
#
# The default run is a latency phase (64 B .. 1 MiB ping-pong, rsockets'
# inline size 64), then a second connection for a bandwidth phase (the same
# sizes streamed, inline 0).  rsockets on iWARP announces its own messages
# with 4-octet inline Sends and refuses a QP granted less: iwemu grants its
# device maximum (256) whatever was asked for, so both phases run on QPs with
# 256 octets of inline data, and both complete.  Kernel siw grants the 0
# asked for, and there rsockets refuses the bandwidth phase ("rconnect:
# Operation not supported"; docs/limits.md, "Inline data").  Output is line
# buffered so that a run stopped by its time bound shows the rows it did.
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

# The server exits on its own right after its last row; one that is still
# running 20 s after the client ended waits for something that will not come
# (a refused connection leaves it in raccept): stopped, and a failure.
default_run() {
    local phase size rows server client_rc server_rc
    pair_setup 127.0.0.1
    timeout 250 "$run" stdbuf -oL riostream -p "$port" > "$dir/server.log" 2>&1 &
    server=$!
    trap 'kill $server 2>/dev/null; rm -rf "$dir"' EXIT
    wait_listen "$port" 20 $server || { show "$dir/server.log"; fail "riostream server did not listen"; }
    timeout 240 "$run" stdbuf -oL riostream -s 127.0.0.1 -p "$port" > "$dir/client.log" 2>&1
    client_rc=$?
    for _ in $(seq 1 200); do kill -0 $server 2>/dev/null || break; sleep 0.1; done
    kill $server 2>/dev/null && echo "the server was still running 20 s after the client ended: stopped"
    wait $server
    server_rc=$?
    rows=$(grep -cE "^[0-9]+[km]?_(lat|bw) " "$dir/client.log")
    if [ $client_rc -ne 0 ] || [ $server_rc -ne 0 ] || [ "$rows" -ne 8 ]; then
        show "$dir/server.log" "$dir/client.log"
        [ $client_rc -ne 124 ] || echo "the client hit its time bound after $rows of 8 result rows"
        fail "riostream's default run: client rc=$client_rc server rc=$server_rc, $rows of 8 result rows"
    fi
    for phase in lat bw; do
        for size in 64 4k 64k 1m; do
            grep -q "^${size}_${phase} " "$dir/client.log" || { show "$dir/client.log"; fail "no ${size}_${phase} row"; }
        done
    done
    cat "$dir/client.log"
    echo "riostream default run: latency and bandwidth phases complete"
}

case $mode in
pingpong) pingpong ;;
default) default_run ;;
*) fail "unknown mode $mode" ;;
esac
