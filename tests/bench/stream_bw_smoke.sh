#!/bin/bash
# Smoke test of stream_bw (perftest-configs' floor:*_bw): each framing moves
# its messages intact and reports a rate; a receiver checking CRCs that the
# sender did not compute stops with a CRC error.
#   stream_bw_smoke.sh STREAM_BW
set -u
bin=$1
. "$(dirname "$0")/../integration/rdmacm_lib.sh"   # free_port
fails=0

pair() {  # pair "SERVER OPTS" "CLIENT OPTS": prints the client's output, returns 1 if either failed
    local port srv_rc cli_rc out
    port=$(free_port) || { echo "no free port"; return 1; }
    timeout 20 "$bin" -p "$port" $1 >/tmp/stream_bw_srv.$$ 2>&1 &
    local srv=$!
    out=$(timeout 20 "$bin" -p "$port" $2 127.0.0.1 2>&1); cli_rc=$?
    wait "$srv"; srv_rc=$?
    echo "$out"
    cat /tmp/stream_bw_srv.$$; rm -f /tmp/stream_bw_srv.$$
    [ "$cli_rc" = 0 ] && [ "$srv_rc" = 0 ]
}

check() {  # check NAME OPTS...: both ends with the same options
    local name=$1; shift
    local out
    if out=$(pair "$*" "$*") && grep -Eq "^stream_bw ${name//+/\\+} [0-9]+ [0-9]+ [0-9.]+$" <<<"$out" \
        && ! grep -Eq " 0\.0$" <<<"$out"; then
        echo "ok   $* -> $out"
    else
        echo "FAIL $* -> $out"; fails=$((fails + 1))
    fi
}

check none     -s 1048576 -n 40 --framing none
check mpa      -s 1048576 -n 40
check mpa+crc  -s 1048576 -n 40 --crc
check mpa+crc  -s 100003 -n 50 --crc --batch 3     # PAD octets, short last FPDU
check mpa+crc  -s 7 -n 200 --crc                   # payload arrives with its header
check mpa+crc+tail -s 1048576 -n 40 --crc --tail 65536   # look-ahead: payload copied out of staging
check mpa+opaque   -s 1048576 -n 40 --rx opaque
check mpa+crc+tx-bounce -s 100003 -n 50 --crc --batch 3 --tx-bounce 131072  # sent from a copy
check none+read-max -s 1048576 -n 40 --framing none --read-max 65536
check mpa      -s 1048576 -n 40 --cc reno         # a congestion control of its own (reno: in every kernel)

# A congestion control the kernel does not have ends both ends with an error.
out=$(pair "-s 65536 -n 20 --cc no_such_algo" "-s 65536 -n 20 --cc no_such_algo")
if [ $? -ne 0 ] && grep -q "TCP_CONGESTION no_such_algo" <<<"$out"; then
    echo "ok   unknown congestion control refused"
else
    echo "FAIL unknown congestion control -> $out"; fails=$((fails + 1))
fi

# Peeking at the next headers needs SO_PEEK_OFF on TCP (Linux 6.9).
if out=$(pair "-s 100003 -n 100 --rx peek --batch 3" "-s 100003 -n 100 --rx peek --batch 3"); then
    check mpa+peek -s 1048576 -n 40 --rx peek
    check mpa+peek -s 100003 -n 100 --rx peek --batch 3
elif grep -q "SO_PEEK_OFF on TCP" <<<"$out"; then
    echo "note: this kernel ($(uname -r)) has no SO_PEEK_OFF for TCP; --rx peek not run"
else
    echo "FAIL --rx peek -> $out"; fails=$((fails + 1))
fi

# The receiver checks the CRC field; a sender with the digest off sends 0.
out=$(pair "-s 65536 -n 20 --crc" "-s 65536 -n 20")
if [ $? -ne 0 ] && grep -q "CRC error at MSN 1" <<<"$out"; then
    echo "ok   CRC mismatch detected"
else
    echo "FAIL CRC mismatch not detected -> $out"; fails=$((fails + 1))
fi
exit $((fails > 0))
