#!/bin/bash
# rstream (librdmacm's rsockets stream benchmark) between two processes.
# Without options it runs its latency tests (64 B .. 1 MiB ping-pong, inline
# as rstream tunes it) and its bandwidth tests, which ask rsockets for no
# inline data at all: on iWARP rsockets then needs the device to grant inline
# of its 4-octet message anyway (docs/limits.md, "Inline data").
# usage: rdmacm_rstream.sh IWEMU_RUN [RSTREAM OPTIONS...]
set -u
here=$(dirname "$0")
. "$here/rdmacm_lib.sh"
run=$1
shift
pair_setup 127.0.0.1
pair_limit=110 server_client "$run" rstream -p "$port" "$@" -- rstream -s "$addr" -p "$port" "$@"
rows=$(grep -cE "^[0-9a-z_]+ +[0-9]+[kmg]? +[0-9]+" "$dir/client.log")
expected=$([ $# -eq 0 ] && echo 8 || echo 1)  # 4 latency + 4 bandwidth tests, or one custom test
if [ $client_rc -ne 0 ] || [ $server_rc -ne 0 ] || [ "$rows" -ne "$expected" ]; then
    show "$dir/server.log" "$dir/client.log"
    fail "rstream $*: client rc=$client_rc server rc=$server_rc, $rows of $expected result rows"
fi
cat "$dir/client.log"
