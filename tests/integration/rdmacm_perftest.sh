#!/bin/bash
# A perftest benchmark with -R (every connection through rdma_cm, as iWARP
# needs) between two processes; both must exit 0 and print a result line.
# usage: rdmacm_perftest.sh IWEMU_RUN TEST [ADDRESS] [EXTRA ARGS...]   e.g. ib_send_bw
set -u
here=$(dirname "$0")
. "$here/rdmacm_lib.sh"
run=$1
test=$2
address=${3:-127.0.0.1}
shift $(( $# < 3 ? $# : 3 ))
perftest_pair "$run" "$test" "$address" -R "$@"
# The result row: message size first, then the iteration count.
if [ $client_rc -ne 0 ] || [ $server_rc -ne 0 ] || ! echo "$result" | grep -Eq "^ *[0-9]+ +[0-9]+ "; then
    show "$dir/server.log" "$dir/client.log"
    fail "$test -R: client rc=$client_rc server rc=$server_rc"
fi
echo "$test -R $addr:$port:$result"
