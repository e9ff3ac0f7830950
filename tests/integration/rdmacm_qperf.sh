#!/bin/bash
# qperf -cm1 (connections through rdma_cm, which iWARP needs): the qperf
# server forks a child per test; the client runs the given tests.
# usage: rdmacm_qperf.sh IWEMU_RUN [ADDRESS] TEST...   e.g. rc_bw rc_lat
set -u
here=$(dirname "$0")
. "$here/rdmacm_lib.sh"
run=$1
addr=${2:-127.0.0.1}
shift $(( $# < 2 ? $# : 2 ))
port=$(free_port) || fail "no free port"
dir=$(mktemp -d)
qperf_server "$run" 100
timeout 90 "$run" qperf -cm1 -lp "$port" -t 2 "$addr" "$@" > "$dir/client.log" 2>&1
client_rc=$?
if [ $client_rc -ne 0 ] || grep -qi "fail\|error" "$dir/client.log"; then
    show "$dir/server.log" "$dir/client.log"
    fail "qperf -cm1 $*: client rc=$client_rc"
fi
# Each test must have printed its figure ("name:" then "    metric = value").
for t in "$@"; do
    if ! grep -A1 "^$t:" "$dir/client.log" | grep -q " = "; then
        show "$dir/server.log" "$dir/client.log"
        fail "qperf -cm1 $t: no figure"
    fi
done
cat "$dir/client.log"
