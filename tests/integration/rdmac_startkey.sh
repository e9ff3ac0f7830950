#!/bin/bash
# draft-03 "Start Key" startup (seed 000 §8.1, issue 29): two iwemu
# processes, one with mpa_startup = startkey, in both roles: rping -V (data
# verified) and perftest -R (ib_write_bw, ib_read_bw, ib_send_bw; perftest
# checks completions, rping compares the data).  Each log must show the
# connection set up by Start Keys at DDP/RDMAP version 0 with CRC.  Then raw
# sockets against rping -s (default settings, permissive): a good key and an
# RFC 5044-shaped variant are answered with a Start Key, a bad key is closed
# with nothing sent (error 4) and the server logs why.  With IWEMU given,
# `iwemu decode` reads the server's capture of a Start Key connection.
# usage: rdmac_startkey.sh IWEMU_RUN [IWEMU] (with IWEMU: its decode reads a capture)
set -u
here=$(dirname "$0")
. "$here/rdmacm_lib.sh"
. "$here/rping_exit_race.sh"
run=$1
decode=${2:-}  # iwemu (decode), optional
addr=127.0.0.1
dir=$(mktemp -d)
server=
trap 'kill $server 2>/dev/null; rm -rf "$dir"' EXIT

# Both ends: Start Key startup, version 0, CRC both ways.  Markers follow
# the M bits: 1/1 when both sent a Start Key (M=1), else the Request's M.
check_startkey() {  # WHAT
    local f
    for f in "$dir/server.log" "$dir/client.log"; do
        grep -q "MPA rev 0 (draft-03 Start Key), DDP/RDMAP v0, CRC tx/rx 1/1" "$f" ||
            { show "$f"; fail "$1: $(basename "$f" .log) did not start with Start Keys at DDP/RDMAP version 0"; }
    done
}

sk=IWEMU_MPA_STARTUP=startkey
count=200
for roles in "IWEMU_MPA_STARTUP=frames $sk" "$sk IWEMU_MPA_STARTUP=frames"; do
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
    check_startkey "rping server $senv client $cenv"
    echo "rping -V, server $senv, client $cenv: $count pings verified after Start Keys"

    for t in ib_write_bw ib_read_bw ib_send_bw; do
        server_client_env "$senv" "$cenv" $t -R -p @PORT@ -n 200 -s 65536 -- $t -R -p @PORT@ -n 200 -s 65536 $addr
        row=$(grep -A1 "#bytes" "$dir/client.log" | tail -1)
        if [ "$client_rc" -ne 0 ] || [ "$server_rc" -ne 0 ] || ! [[ "$row" =~ ^\ *65536\ +200 ]]; then
            show "$dir/server.log" "$dir/client.log"
            fail "$t -R server $senv client $cenv: rc $server_rc/$client_rc, row '$row'"
        fi
        check_startkey "$t -R server $senv client $cenv"
        echo "$t -R, server $senv, client $cenv: $row"
    done
done

# The server's IWEMU_CAPTURE of a Start Key connection: `iwemu decode` reads
# both directions from their Start Keys through version-0 FPDUs with markers.
if [ -n "$decode" ]; then
    server_client_env "IWEMU_CAPTURE=$dir/sk.pcapng" "$sk" rping -s -a $addr -p @PORT@ -C 3 -S 100 -V -- \
        rping -c -a $addr -p @PORT@ -C 3 -S 100 -V -v
    "$decode" decode "$dir/sk.pcapng" > "$dir/decode.out" 2>&1
    rc=$?
    keys=$(grep -c '^startkey at=0 length=16 key="MPA ident frame" m=1 c=1 res=0 rev=0' "$dir/decode.out")
    ends=$(grep -c '^end: 1 startup frame(s)' "$dir/decode.out")
    if [ $rc -ne 0 ] || [ "$keys" -ne 2 ] || [ "$ends" -ne 2 ] || ! grep -q "markers=0x200" "$dir/decode.out"; then
        cat "$dir/decode.out"
        fail "iwemu decode of a Start Key capture: rc $rc, $keys keys, $ends whole directions"
    fi
    echo "iwemu decode of the capture: both Start Keys, $(grep -c '^fpdu' "$dir/decode.out") version-0 FPDUs with markers, all CRCs good"
fi

# Raw draft-03 peers against rping -s with the default (permissive) settings.
for mode in good variant bad; do
    port=$(free_port) || fail "no free port"
    env IWEMU_LOG=debug timeout 30 "$run" rping -s -a $addr -p "$port" -C 1 -V > "$dir/server.log" 2>&1 &
    server=$!
    wait_listen "$port" 20 $server || { show "$dir/server.log"; fail "server did not listen"; }
    out=$(timeout 20 python3 "$here/startkey_raw_client.py" "$port" $mode 2>&1)
    rc=$?
    sleep 0.2
    kill $server 2>/dev/null
    wait $server 2>/dev/null
    server=
    [ $rc -eq 0 ] || { show "$dir/server.log"; fail "raw draft-03 client ($mode): $out"; }
    if [ $mode = bad ]; then
        grep -q "invalid Start Key (draft-03 MPA error 4)" "$dir/server.log" ||
            { show "$dir/server.log"; fail "rping -s did not report the invalid Start Key"; }
        grep -q "CONNECT_REQUEST\|connect request" "$dir/server.log" &&
            { show "$dir/server.log"; fail "the bad key reached the ULP"; }
    fi
    echo "raw draft-03 client ($mode) vs rping -s: $out"
done
