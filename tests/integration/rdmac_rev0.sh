#!/bin/bash
# MPA Rev 0 (RDMA Consortium) peers, RFC 5044 Appendix C (CHECKLIST MPA-057,
# issue 29): two iwemu processes, one forced to mpa_rev = 0, in both roles:
# rping -V (data verified) and perftest -R (ib_write_bw, ib_read_bw,
# ib_send_bw); each side's log must show the connection at DDP/RDMAP version 0
# with markers and CRC both ways.  Then the non-permissive setting: the same
# Rev 0 client against a server with mpa_rev0 = off is refused.
# usage: rdmac_rev0.sh IWEMU_RUN
set -u
here=$(dirname "$0")
. "$here/rdmacm_lib.sh"
. "$here/rping_exit_race.sh"
run=$1
addr=127.0.0.1
dir=$(mktemp -d)
server=
trap 'kill $server 2>/dev/null; rm -rf "$dir"' EXIT

# Both ends ran the connection as RDMAC: version 0, CRC and markers both ways.
check_version0() {  # WHAT
    local f
    for f in "$dir/server.log" "$dir/client.log"; do
        grep -q "DDP/RDMAP v0, CRC tx/rx 1/1, markers tx/rx 1/1" "$f" ||
            { show "$f"; fail "$1: $(basename "$f" .log) did not run DDP/RDMAP version 0 with markers and CRC"; }
    done
}

count=200
for roles in "IWEMU_MPA_REV=0 IWEMU_MPA_REV=2" "IWEMU_MPA_REV=2 IWEMU_MPA_REV=0"; do
    set -- $roles
    senv=$1 cenv=$2
    server_client_env "$senv" "$cenv" rping -s -a $addr -p @PORT@ -C $count -S 4000 -V -- \
        rping -c -a $addr -p @PORT@ -C $count -S 4000 -V -v
    client_rc=$(rping_rc client $client_rc "$dir/client.log")
    server_rc=$(rping_rc server $server_rc "$dir/server.log")
    lines=$(grep -c "^ping data:" "$dir/client.log")
    if [ "$client_rc" -ne 0 ] || [ "$server_rc" -ne 0 ] || [ "$lines" -ne $count ]; then
        show "$dir/server.log" "$dir/client.log"
        fail "rping server $senv client $cenv: rc $server_rc/$client_rc, $lines of $count verified"
    fi
    check_version0 "rping server $senv client $cenv"
    echo "rping -V, server $senv, client $cenv: $count pings verified at DDP/RDMAP version 0"

    for t in ib_write_bw ib_read_bw ib_send_bw; do
        server_client_env "$senv" "$cenv" $t -R -p @PORT@ -n 200 -s 65536 -- $t -R -p @PORT@ -n 200 -s 65536 $addr
        row=$(grep -A1 "#bytes" "$dir/client.log" | tail -1)
        if [ "$client_rc" -ne 0 ] || [ "$server_rc" -ne 0 ] || ! [[ "$row" =~ ^\ *65536\ +200 ]]; then
            show "$dir/server.log" "$dir/client.log"
            fail "$t -R server $senv client $cenv: rc $server_rc/$client_rc, row '$row'"
        fi
        check_version0 "$t -R server $senv client $cenv"
        echo "$t -R, server $senv, client $cenv: $row"
    done
done

# Non-permissive server: the Rev 0 client is refused (Rev 1 Reply with R=1,
# rdma_cm's REJECTED at the client); the rping server never sees a request.
port=$(free_port) || fail "no free port"
env IWEMU_LOG=debug IWEMU_MPA_REV0=off timeout 30 "$run" rping -s -a $addr -p "$port" -C 1 -V > "$dir/server.log" 2>&1 &
server=$!
wait_listen "$port" 20 $server || { show "$dir/server.log"; fail "server did not listen"; }
env IWEMU_LOG=debug IWEMU_MPA_REV=0 timeout 20 "$run" rping -c -a $addr -p "$port" -C 1 -V -v > "$dir/client.log" 2>&1
client_rc=$?
kill $server 2>/dev/null
wait $server 2>/dev/null
server=
if [ $client_rc -eq 0 ] || grep -q "ping data" "$dir/client.log" || ! grep -q "REJECTED" "$dir/client.log" ||
    grep -q "DDP/RDMAP v0" "$dir/server.log"; then
    show "$dir/server.log" "$dir/client.log"
    fail "mpa_rev0 = off: the Rev 0 client was not refused cleanly (client rc $client_rc)"
fi
echo "mpa_rev0 = off: Rev 0 client refused (REJECTED, rc $client_rc)"

# A raw-socket Rev 0 Request against rping -s: served by default, refused
# with mpa_rev0 = off.
for mode in accept refuse; do
    port=$(free_port) || fail "no free port"
    senv=IWEMU_MPA_REV0=on
    [ $mode = refuse ] && senv=IWEMU_MPA_REV0=off
    env IWEMU_LOG=debug $senv timeout 30 "$run" rping -s -a $addr -p "$port" -C 1 -V > "$dir/server.log" 2>&1 &
    server=$!
    wait_listen "$port" 20 $server || { show "$dir/server.log"; fail "server did not listen"; }
    out=$(timeout 20 python3 "$here/rev0_raw_client.py" "$port" $mode 2>&1)
    rc=$?
    kill $server 2>/dev/null
    wait $server 2>/dev/null
    server=
    [ $rc -eq 0 ] || { show "$dir/server.log"; fail "raw Rev 0 client ($mode): $out"; }
    if [ $mode = accept ]; then
        grep -q "accepted 127.0.0.1:[0-9]*: MPA rev 0, DDP/RDMAP v0, CRC tx/rx 1/1, markers tx/rx 1/1" "$dir/server.log" ||
            { show "$dir/server.log"; fail "rping -s did not switch the raw Rev 0 connection to version 0"; }
    fi
    echo "raw client vs rping -s: $out"
done
