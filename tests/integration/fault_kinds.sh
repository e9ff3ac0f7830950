#!/bin/bash
# IWEMU_FAULTS kinds beyond drop/crc/terminate/lose (tests/conformance/
# iwemu_faults.sh has those), against real programs, judged on the wire
# through IWEMU_CAPTURE and tshark:
#  1. corrupt:FIELD: the peer answers with the RFC's Terminate for that
#     field (untagged QN: DDP 1/2/0x01 from rping -V; tagged STag: DDP
#     1/1/0x00 from ib_write_bw; RDMAP version: RDMAP 0/2/0x05), the CRC
#     still sound, both programs end (perftest with an error exit) in time;
#  2. reject:TEXT: the client's connect is rejected, the MPA Reply on the
#     wire has Rej set and carries TEXT;
#  3. delay / late_read / stall: rping -V completes with its data verified;
#     the time each run took against one without the rule is printed, and
#     only a generous lower bound (the delays it must contain) is asserted.
#
# usage: fault_kinds.sh IWEMU_RUN
set -u
run=$1
fail() { echo "FAIL: $*" >&2; failed=1; }
failed=0
command -v tshark >/dev/null || { echo "SKIPPED: tshark not installed"; exit 77; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# rping's own exit race (EBADF after DISCONNECTED) is no failure of ours.
. "$(dirname "$0")/rping_exit_race.sh"
T() { tshark -n -r "$1" --disable-protocol rpcordma --disable-protocol smb_direct "${@:2}" 2>/dev/null; }

pick_port() {
    for _ in $(seq 1 100); do
        port=$((15700 + RANDOM % 1600))
        ss -Htan "sport = :$port or dport = :$port" | grep -q . || return 0
    done
    echo "no free port"; exit 1
}
wait_listen() {
    for _ in $(seq 1 200); do
        ss -Hltn "sport = :$port" | grep -q . && return 0
        kill -0 "$1" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}
now_ms() { echo $(($(date +%s%N) / 1000000)); }

# pair TAG SERVER_RULE CLIENT_RULE PROGRAM ARGS...: server and client of
# PROGRAM (rping or a perftest), each with its rule; sets s_rc, c_rc, ms
# (wall time of the client).  rping gets -s/-c, perftest the address.
pair() {
    local tag=$1 srule=$2 crule=$3 prog=$4 server t0
    shift 4
    pick_port
    local sargs=("$@" -p "$port") cargs=("$@" -p "$port")
    if [ "$prog" = rping ]; then
        sargs=(-s -a 127.0.0.1 "${sargs[@]}")
        cargs=(-c -a 127.0.0.1 "${cargs[@]}")
    else
        cargs+=(127.0.0.1)
    fi
    IWEMU_LOG=info IWEMU_FAULTS="$srule" IWEMU_CAPTURE="$dir/$tag-server.pcapng" timeout 60 "$run" "$prog" "${sargs[@]}" \
        > "$dir/$tag-server.log" 2>&1 &
    server=$!
    wait_listen $server || fail "$tag: server did not listen"
    t0=$(now_ms)
    IWEMU_LOG=info IWEMU_FAULTS="$crule" IWEMU_CAPTURE="$dir/$tag-client.pcapng" timeout 50 "$run" "$prog" "${cargs[@]}" \
        > "$dir/$tag-client.log" 2>&1
    c_rc=$?
    ms=$(($(now_ms) - t0))
    if [ "$prog" = rping ] && [ "${expect_refused:-0}" = 1 ]; then
        kill $server 2>/dev/null  # a rejecting rping server waits for the next client
    fi
    wait $server
    s_rc=$?
    if [ "$prog" = rping ]; then
        c_rc=$(rping_rc client $c_rc "$dir/$tag-client.log")
        s_rc=$(rping_rc server $s_rc "$dir/$tag-server.log")
    fi
    echo "$tag: client rc=$c_rc server rc=$s_rc, client ran ${ms} ms"
    [ $c_rc -ne 124 ] && [ $s_rc -ne 124 ] || fail "$tag: a program hung (killed by timeout)"
}

# port;layer;etype_rdma;etype_ddp;errcode_rdma;errcode_ddp_tagged;errcode_ddp_untagged
terminates() {
    T "$1" -Y 'iwarp_rdma.opcode==7' -T fields -E 'separator=;' -e tcp.srcport -e iwarp_rdma.term_layer \
        -e iwarp_rdma.term_etype_rdma -e iwarp_rdma.term_etype_ddp -e iwarp_rdma.term_errcode_rdma \
        -e iwarp_rdma.term_errcode_ddp_tagged -e iwarp_rdma.term_errcode_ddp_untagged
}
sound_crcs() {
    local bad
    bad=$(T "$1" -V | grep -c 'Bad CRC32')
    [ "$bad" -eq 0 ] || fail "$2: $bad bad CRCs on the wire: the corrupted header must come with a sound CRC"
}

# ---- 1. header fields ------------------------------------------------------------
# QN of the client's first Send: the server (rping, passive) answers DDP/untagged/invalid QN.
pair qn "" "corrupt:qn,opcode=send" rping -C 20 -S 1024 -V
grep -q "faults: rule 'corrupt:qn,opcode=send' fired: qp [0-9]*, tx FPDU [0-9]* (opcode 0x3" "$dir/qn-client.log" ||
    fail "qn: no log line for the firing"
t=$(terminates "$dir/qn-client.pcapng"); echo "qn: Terminates: ${t:-none}"
echo "$t" | awk -F';' -v p="$port" '$1 == p && $2 == "0x01" && $4 == "0x02" && $7 == "0x01"' | grep -q . ||
    fail "qn: no Terminate DDP/untagged/invalid QN (1/2/0x01) from the server"
sound_crcs "$dir/qn-client.pcapng" qn
grep -q "Terminate received 1/2/0x01" "$dir/qn-client.log" || fail "qn: the client did not take the Terminate"
grep -q "DISCONNECT\|error" "$dir/qn-client.log" || fail "qn: the client did not report the end"

# STag of a Write: ib_write_bw's server answers DDP/tagged/invalid STag; both
# exit with an error.  Writes complete at the sender once sent: the run is
# long enough (64 MiB) to be still under way when the Terminate comes back.
pair stag "" "corrupt:stag,opcode=write,fpdu=20" ib_write_bw -R -n 1000 -s 65536
t=$(terminates "$dir/stag-client.pcapng"); echo "stag: Terminates: ${t:-none}"
echo "$t" | awk -F';' -v p="$port" '$1 == p && $2 == "0x01" && $4 == "0x01" && $6 == "0x00"' | grep -q . ||
    fail "stag: no Terminate DDP/tagged/invalid STag (1/1/0x00) from the server"
sound_crcs "$dir/stag-client.pcapng" stag
[ $c_rc -ne 0 ] && [ $s_rc -ne 0 ] || fail "stag: both sides must exit with an error (client $c_rc, server $s_rc)"
grep -q "Completion with error\|Failed status" "$dir/stag-client.log" || fail "stag: the client shows no error completion"

# RDMAP version of a Send: RDMAP/remote operation/invalid RDMAP version.
pair rv "" "corrupt:rdmap_version,opcode=send,fpdu=3" ib_send_bw -R -n 1000 -s 65536
t=$(terminates "$dir/rv-client.pcapng"); echo "rv: Terminates: ${t:-none}"
echo "$t" | awk -F';' -v p="$port" '$1 == p && $2 == "0x00" && $3 == "0x02" && $5 == "0x05"' | grep -q . ||
    fail "rv: no Terminate RDMAP/operation/invalid version (0/2/0x05) from the server"
[ $c_rc -ne 0 ] && [ $s_rc -ne 0 ] || fail "rv: both sides must exit with an error (client $c_rc, server $s_rc)"

# ---- 2. MPA Reject ----------------------------------------------------------------
expect_refused=1 pair reject "reject:iwemu says no" "" rping -C 5 -S 1024 -V
grep -q "faults: rule 'reject:iwemu says no' fired: connection request 1" "$dir/reject-server.log" ||
    fail "reject: no log line for the firing"
grep -q "RDMA_CM_EVENT_REJECTED" "$dir/reject-client.log" || fail "reject: the client saw no REJECTED event"
[ $c_rc -ne 0 ] || fail "reject: the client exited 0"
rep=$(T "$dir/reject-client.pcapng" -Y iwarp_mpa.rep -T fields -e iwarp_mpa.rej_flag -e iwarp_mpa.privatedata)
echo "reject: MPA Reply on the wire: $rep"
want=$(printf 'iwemu says no' | od -An -tx1 | tr -d ' \n')
echo "$rep" | grep -q "^1[[:space:]].*$want" || fail "reject: no MPA Reply with Rej and the private data"

# ---- 3. delay, late Read Response, stall: completed, and slower ----------------------
pair base "" "" rping -C 5 -S 1024 -V
base_ms=$ms
[ $c_rc -eq 0 ] && [ $s_rc -eq 0 ] || fail "base: rping failed"

# Every Send the server receives, 200 ms late.
pair delay "delay:200,opcode=send,p=1" "" rping -C 5 -S 1024 -V
n=$(grep -c "faults: rule 'delay:200,opcode=send,p=1' fired: qp" "$dir/delay-server.log")
echo "delay: $n Sends held 200 ms each; ${ms} ms against ${base_ms} ms without (+$((ms - base_ms)) ms)"
[ $c_rc -eq 0 ] && [ $s_rc -eq 0 ] || fail "delay: rping -V failed (data not verified)"
[ "$n" -ge 5 ] || fail "delay: fired $n times, expected one per Send (>= 5)"
grep -q "faults: rule 'delay:200,opcode=send,p=1' fired $n times in this process" "$dir/delay-server.log" ||
    fail "delay: the exit tally (faults::fired_count) does not say $n"
[ "$ms" -ge $((5 * 200)) ] || fail "delay: ${ms} ms cannot contain five 200 ms delays"

# The client answers each of the server's RDMA Reads 150 ms late.
pair late "" "late_read:150,p=1" rping -C 5 -S 1024 -V
n=$(grep -c "faults: rule 'late_read:150,p=1' fired: qp [0-9]*, rx FPDU [0-9]* (opcode 0x1" "$dir/late-client.log")
echo "late_read: $n Read Requests answered 150 ms late; ${ms} ms against ${base_ms} ms (+$((ms - base_ms)) ms)"
[ $c_rc -eq 0 ] && [ $s_rc -eq 0 ] || fail "late_read: rping -V failed"
[ "$n" -ge 5 ] || fail "late_read: fired $n times, expected one per RDMA Read (>= 5)"
[ "$ms" -ge $((5 * 150)) ] || fail "late_read: ${ms} ms cannot contain five 150 ms delays"

# The client stops reading its socket for 1 s at its third received FPDU.
pair stall "" "stall:1000,fpdu=3" rping -C 5 -S 1024 -V
echo "stall: ${ms} ms against ${base_ms} ms (+$((ms - base_ms)) ms)"
grep -q "faults: rule 'stall:1000,fpdu=3' fired: qp [0-9]*, rx FPDU 3 " "$dir/stall-client.log" || fail "stall: did not fire"
[ $c_rc -eq 0 ] && [ $s_rc -eq 0 ] || fail "stall: rping -V failed"
[ "$ms" -ge 1000 ] || fail "stall: ${ms} ms cannot contain a 1000 ms stall"

# perftest, polling instead of waiting for events: ib_write_lat's server
# places each RDMA Write 20 ms late (ib_write_lat reports half a round trip);
# ib_read_bw's server answers its 10th Read Request 500 ms late.
pair wlat "delay:20,p=1" "" ib_write_lat -R -n 50
typ=$(awk '$1 == 2 && $2 == 50 {print $5}' "$dir/wlat-client.log")
echo "delay: ib_write_lat typical ${typ:-?} us with every Write 20 ms late"
[ $c_rc -eq 0 ] && [ $s_rc -eq 0 ] || fail "wlat: ib_write_lat failed"
[ -n "$typ" ] && awk -v t="$typ" 'BEGIN { exit !(t >= 5000) }' || fail "wlat: typical ${typ:-?} us cannot contain a 20 ms delay"
pair rbw "late_read:500,fpdu=10" "" ib_read_bw -R -n 100 -s 65536
avg=$(awk '$1 == 65536 && $2 == 100 {print $4}' "$dir/rbw-client.log")
echo "late_read: ib_read_bw average ${avg:-?} MB/s, ${ms} ms, with one Read answered 500 ms late"
[ $c_rc -eq 0 ] && [ $s_rc -eq 0 ] || fail "rbw: ib_read_bw failed"
grep -q "faults: rule 'late_read:500,fpdu=10' fired: qp" "$dir/rbw-server.log" || fail "rbw: did not fire"
[ "$ms" -ge 500 ] || fail "rbw: ${ms} ms cannot contain a 500 ms late Read Response"

# A stall the peer does not wait out: its end (here killed 1 s in) ends
# the hold at once (no hang until the deadline, no spinning meanwhile).
pick_port
"$run" rping -s -a 127.0.0.1 -p "$port" -C 5 -S 1024 -V > "$dir/stallend-server.log" 2>&1 &  # exec: $! is rping
server=$!
wait_listen $server || fail "stallend: server did not listen"
t0=$(now_ms)
IWEMU_LOG=info IWEMU_FAULTS="stall:30000,fpdu=3" timeout 50 "$run" rping -c -a 127.0.0.1 -p "$port" -C 5 -S 1024 -V \
    > "$dir/stallend-client.log" 2>&1 &
client=$!
sleep 1
kill -9 $server
wait $client
c_rc=$?
ms=$(($(now_ms) - t0))

echo "stallend: the client ended ${ms} ms in (rc=$c_rc) with a 30 s stall armed"
grep -q "rule 'stall:30000,fpdu=3' fired: qp" "$dir/stallend-client.log" || fail "stallend: did not fire"
[ $c_rc -ne 124 ] && [ "$ms" -lt 20000 ] || fail "stallend: the client waited out the stall after its peer was gone"

exit $failed
