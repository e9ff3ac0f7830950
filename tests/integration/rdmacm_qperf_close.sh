#!/bin/bash
# qperf -cm1 rc_bw ends without waiting for the RNR wait: its receiver
# stops posting at the end while the sender still streams, so the receiver
# is parked on a Send (rx_rnr_wait.cpp) when the two disconnect.  The close
# must not wait for rnr_wait_ms (QueuePair::close_locked, rx_rnr_check_peer).
# rnr_wait_ms is raised to 20 s so that a close that waits for it is
# unmistakable against a loaded machine's slowness; the run repeats because
# which side disconnects while which is parked varies from run to run.
# usage: rdmacm_qperf_close.sh IWEMU_RUN [RUNS] [LIMIT_S]
set -u
here=$(dirname "$0")
. "$here/rdmacm_lib.sh"
run=$1
runs=${2:-3}
limit=${3:-12}  # qperf -t 1 plus start-up; a waiting close takes 21 s or more
export IWEMU_RNR_WAIT_MS=20000
port=$(free_port) || fail "no free port"
dir=$(mktemp -d)
qperf_server "$run" 150
for i in $(seq 1 "$runs"); do
    t0=$(date +%s%N)
    timeout 40 "$run" qperf -cm1 -lp "$port" -t 1 127.0.0.1 rc_bw > "$dir/client.log" 2>&1
    client_rc=$?
    ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    if [ $client_rc -ne 0 ] || grep -qi "fail\|error" "$dir/client.log"; then
        show "$dir/server.log" "$dir/client.log"
        fail "qperf -cm1 rc_bw run $i: client rc=$client_rc"
    fi
    grep -q "bw *=" "$dir/client.log" || { show "$dir/client.log"; fail "run $i: no bandwidth reported"; }
    echo "run $i: $(grep "bw *=" "$dir/client.log" | tr -s ' '), ${ms} ms"
    [ "$ms" -lt $(( limit * 1000 )) ] || fail "run $i took ${ms} ms: the close waited (limit ${limit} s, rnr_wait_ms 20000)"
done
