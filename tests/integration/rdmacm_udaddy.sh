#!/bin/bash
# udaddy asks for the UDP port space, which an iWARP device does not have:
# it must fail at once with a clear message, never hang or crash.
# usage: rdmacm_udaddy.sh IWEMU_RUN
set -u
here=$(dirname "$0")
. "$here/rdmacm_lib.sh"
run=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

start=$(date +%s)
timeout 20 "$run" udaddy -b 127.0.0.1 > "$dir/server.log" 2>&1
server_rc=$?
timeout 20 "$run" udaddy -s 127.0.0.1 > "$dir/client.log" 2>&1
client_rc=$?
elapsed=$(( $(date +%s) - start ))
show "$dir/server.log" "$dir/client.log"
# udaddy exits with its (negative) status: 255.  124/137: timeout (hang);
# 134/135/136/139: SIGABRT/SIGBUS/SIGFPE/SIGSEGV (crash).
for rc in $server_rc $client_rc; do
    [ $rc -ne 0 ] || fail "udaddy succeeded on an iWARP device"
    case $rc in 124|137) fail "udaddy hung";; 134|135|136|139) fail "udaddy crashed (rc=$rc)";; esac
done
grep -q "bind address failed: Protocol not supported" "$dir/server.log" ||
    fail "server: no clear 'Protocol not supported' message"
grep -q "failure getting addr: Protocol not supported" "$dir/client.log" ||
    fail "client: no clear 'Protocol not supported' message"
[ $elapsed -lt 15 ] || fail "udaddy took ${elapsed}s to fail"
echo "udaddy fails cleanly: server rc=$server_rc client rc=$client_rc in ${elapsed}s"
