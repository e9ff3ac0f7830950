#!/bin/bash
# rping server + client in separate processes, data verified (-V), exit 0 both.
# usage: rdmacm_rping.sh IWEMU_RUN [ADDRESS|nonloopback] [COUNT] [SIZE]
set -u
here=$(dirname "$0")
. "$here/rdmacm_lib.sh"
run=$1
addr=${2:-127.0.0.1}
count=${3:-2000}
size=${4:-65535}  # rping's own limit: 65535 (-S 65536 is refused by rping itself)
pair_setup "$addr"
. "$here/rping_exit_race.sh"
server_client "$run" rping -s -a "$addr" -p "$port" -C "$count" -S "$size" -V -- \
    rping -c -a "$addr" -p "$port" -C "$count" -S "$size" -V -v
client_rc=$(rping_rc client $client_rc "$dir/client.log")
server_rc=$(rping_rc server $server_rc "$dir/server.log")
lines=$(grep -c "^ping data:" "$dir/client.log")
if [ $client_rc -ne 0 ] || [ $server_rc -ne 0 ] || [ "$lines" -ne "$count" ]; then
    head -c 4000 "$dir/server.log" > "$dir/s"; tail -c 4000 "$dir/client.log" > "$dir/c"
    show "$dir/s" "$dir/c"
    fail "rping: client rc=$client_rc server rc=$server_rc, $lines of $count pings verified"
fi
echo "rping $addr:$port: $count pings of $size bytes verified"
