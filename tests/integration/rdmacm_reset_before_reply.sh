#!/bin/bash
# perftest -R whose second rdma_cm connection meets a reset right after its
# MPA Request, as through qemu's slirp when the server re-creates its listener
# (issue 23 (a)).  iwemu connects again (CmSettings::connect_retries), so the
# run completes.  Without that, perftest 4.5's own retry loop reuses the ids
# it has just destroyed and dies of SIGSEGV (docs/interop.md).
# usage: rdmacm_reset_before_reply.sh IWEMU_RUN TEST
set -u
here=$(dirname "$0")
. "$here/rdmacm_lib.sh"
run=$1 test=$2
dir=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$dir"' EXIT
server_port=$(free_port) || fail "no free port"
fwd_port=$(free_port) || fail "no free port"

timeout 60 "$run" "$test" -R -p "$server_port" -F -s 4096 -n 200 >"$dir/server.log" 2>&1 &
server=$!
wait_listen "$server_port" 10 $server || { cat "$dir/server.log"; fail "server did not start"; }
python3 "$here/reset_forwarder.py" "$fwd_port" "$server_port" 2 >"$dir/forwarder.log" 2>&1 &
wait_listen "$fwd_port" 10 || fail "forwarder did not start"

timeout 60 "$run" "$test" -R -p "$fwd_port" -F -s 4096 -n 200 127.0.0.1 >"$dir/client.log" 2>&1
client_rc=$?
wait $server
server_rc=$?
grep -q "reset connection 2" "$dir/forwarder.log" || fail "the forwarder never reset the second connection"
if [ $client_rc -ne 0 ] || [ $server_rc -ne 0 ]; then
    tail -n 15 "$dir/client.log" "$dir/server.log" >&2
    fail "$test -R through a reset: client rc=$client_rc server rc=$server_rc"
fi
echo "$test -R: second connection reset after its Request, connected again: $(grep -A1 '#bytes' "$dir/client.log" | tail -1)"
