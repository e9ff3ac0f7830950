#!/bin/bash
# IWEMU_CAPTURE judged against a live capture of the same run: server and
# client each write their own pcapng (IWEMU_CAPTURE=...-%p.pcapng) while
# dumpcap captures loopback.  For each iwemu capture, tshark must find
#  * zero malformed packets and zero bad CRCs, every FPDU's CRC good;
#  * per direction, the same sequence of FPDUs (RDMAP opcode, ULPDU_Length)
#    as in the dumpcap capture: every FPDU present, in order;
#  * the TCP handshake and both FINs;
# and `iwemu decode --qp N` reads the capture for the QP noted in it.
# Then the options: payload elision (headers kept, every FPDU still decodes)
# and rotation at a size cap (every file decodes on its own).
#
# usage: iwemu_capture.sh IWEMU_RUN IWEMU_CLI PROGRAM COUNT
#   PROGRAM  rping | ib_write_bw | ib_read_bw | ib_send_bw
set -u
run=$1 cli=$2 prog=$3 count=$4

. "$(dirname "$0")/capture_lib.sh"

dir=$(mktemp -d)
dc=
cleanup() { [ -n "$dc" ] && kill "$dc" 2>/dev/null; if [ -n "${CONFORMANCE_KEEP:-}" ]; then echo "kept $dir"; else rm -rf "$dir"; fi; }
trap cleanup EXIT

wait_listen() {
    for _ in $(seq 1 200); do
        ss -Hltn "sport = :$port" | grep -q . && return 0
        kill -0 "$1" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}

. "$(dirname "$0")/../integration/rping_exit_race.sh"

# run_pair TAG SIZE [ENV=V...]: one server/client run (perftest message
# size SIZE), each capturing to $dir/TAG-{server,client}-PID.pcapng.
run_pair() {
    local tag=$1 size=$2 server s_rc c_rc
    shift 2
    case $prog in
    rping)
        env "$@" IWEMU_CAPTURE="$dir/$tag-server-%p.pcapng" timeout 80 "$run" rping -s -a 127.0.0.1 -p "$port" -C "$count" -S 1024 -V \
            > "$dir/$tag-server.log" 2>&1 &
        server=$!
        wait_listen $server || fail "$tag: server did not listen"
        env "$@" IWEMU_CAPTURE="$dir/$tag-client-%p.pcapng" timeout 70 "$run" rping -c -a 127.0.0.1 -p "$port" -C "$count" -S 1024 -V \
            > "$dir/$tag-client.log" 2>&1
        c_rc=$(rping_rc client $? "$dir/$tag-client.log")
        wait $server
        s_rc=$(rping_rc server $? "$dir/$tag-server.log")
        ;;
    *)
        env "$@" IWEMU_CAPTURE="$dir/$tag-server-%p.pcapng" timeout 80 "$run" "$prog" -R -p "$port" -n "$count" -s "$size" \
            > "$dir/$tag-server.log" 2>&1 &
        server=$!
        wait_listen $server || fail "$tag: server did not listen"
        env "$@" IWEMU_CAPTURE="$dir/$tag-client-%p.pcapng" timeout 70 "$run" "$prog" -R -p "$port" -n "$count" -s "$size" 127.0.0.1 \
            > "$dir/$tag-client.log" 2>&1
        c_rc=$?
        wait $server
        s_rc=$?
        ;;
    esac
    if [ "$c_rc" -ne 0 ] || [ "$s_rc" -ne 0 ]; then
        tail -20 "$dir/$tag-server.log" "$dir/$tag-client.log"
        fail "$tag: $prog client rc=$c_rc server rc=$s_rc"
        exit 1
    fi
}

# fpdu_list FILE: "SRCPORT DSTPORT OPCODE ULPDU_LENGTH" per FPDU, in order per direction.
fpdu_list() {
    tshark -n -r "$1" --disable-protocol rpcordma --disable-protocol smb_direct -Y iwarp_mpa.fpdu \
        -T fields -E separator=' ' -e tcp.srcport -e tcp.dstport -e iwarp_rdma.opcode -e iwarp_mpa.ulpdulength 2>/dev/null |
        awk '{ n = split($3, op, ","); split($4, len, ","); for (i = 1; i <= n; i++) print $1, $2, op[i], len[i] }' |
        sort -s -k1,2
}

# judge FILE [elided]: the tshark verdicts on one capture.
judge() {
    local f=$1 elided=${2:-} fpdus good bad malformed
    fpdus=$(fpdu_list "$f" | grep -c .)
    tshark -n -r "$f" --disable-protocol rpcordma --disable-protocol smb_direct -V 2>/dev/null > "$dir/verbose.txt"
    good=$(grep -c '(Good CRC32)' "$dir/verbose.txt")
    bad=$(grep -c 'Bad CRC32' "$dir/verbose.txt")
    malformed=$(tshark -n -r "$f" --disable-protocol rpcordma --disable-protocol smb_direct \
                -Y '_ws.malformed || _ws.expert.severity == error' 2>/dev/null | grep -c .)
    echo "$(basename "$f"): fpdus=$fpdus good_crc=$good bad_crc=$bad malformed=$malformed"
    [ "$fpdus" -gt 0 ] || fail "$f: no FPDU decoded"
    [ "$malformed" -eq 0 ] || fail "$f: $malformed malformed packets"
    [ "$bad" -eq 0 ] || fail "$f: $bad bad CRCs"
    [ -n "$elided" ] || [ "$good" -eq "$fpdus" ] || fail "$f: only $good of $fpdus FPDUs with a good CRC"
}

# ---- 1. the iwemu captures against dumpcap's -----------------------------------
start_capture "$dir"
# 4 KiB messages: tshark loses FPDU boundaries in a live capture of 64 KiB
# ones (TCP cuts an FPDU's first 8 octets apart, ORACLE.md §2); the iwemu
# capture cuts its segments at FPDUs and has no such trouble (sections 2, 3).
run_pair plain 4096
stop_capture
fpdu_list "$cap" > "$dir/live.txt"
echo "dumpcap: $(grep -c . "$dir/live.txt") FPDUs"
[ -s "$dir/live.txt" ] || fail "dumpcap saw no FPDU"
for side in server client; do
    f=$(ls "$dir"/plain-$side-*.pcapng 2>/dev/null | head -1)
    [ -n "$f" ] || { fail "no capture file from the $side"; continue; }
    judge "$f"
    fpdu_list "$f" > "$dir/$side.txt"
    if ! cmp -s "$dir/live.txt" "$dir/$side.txt"; then
        fail "$side capture: FPDUs differ from the live capture"
        diff "$dir/live.txt" "$dir/$side.txt" | head -10
    fi
    conns=$(tshark -n -r "$cap" -Y 'tcp.flags.syn==1 && tcp.flags.ack==0' 2>/dev/null | grep -c .)
    syns=$(tshark -n -r "$f" -Y 'tcp.flags.syn==1 && tcp.flags.ack==0' 2>/dev/null | grep -c .)
    ends=$(tshark -n -r "$f" -Y 'tcp.flags.fin==1 || tcp.flags.reset==1' -T fields -e tcp.stream 2>/dev/null | sort -u | grep -c .)
    [ "$syns" -eq "$conns" ] || fail "$side capture: $syns SYNs, the live capture $conns"
    [ "$ends" -eq "$conns" ] || fail "$side capture: $ends of $conns connections end in a FIN or RST"
    # iwemu decode, by the QP number the capture notes.
    qpn=$(tshark -n -r "$f" -Y frame.comment -T fields -e frame.comment 2>/dev/null | grep -o 'qp=[0-9]*' | tail -1 | cut -d= -f2)
    if [ -z "$qpn" ]; then
        fail "$side capture: no QP number noted"
    else
        "$cli" decode --qp "$qpn" "$f" > "$dir/decode.txt" 2>&1
        rc=$?
        n=$(grep -c 'ulpdu_length=' "$dir/decode.txt")
        # The QP's connection is the last one (perftest -R: control first).
        echo "iwemu decode --qp $qpn: rc=$rc, $n FPDUs"
        [ $rc -eq 0 ] || { fail "$side: iwemu decode --qp $qpn rc=$rc"; tail -5 "$dir/decode.txt"; }
        [ "$n" -gt 0 ] || fail "$side: iwemu decode --qp $qpn found no FPDU"
        # As many as tshark finds in the live capture for that connection's ports.
        read -r pa pb <<<"$(grep -m1 '^# ' "$dir/decode.txt" | sed -E 's/^# [^ ]*:([0-9]+) -> [^ ]*:([0-9]+):.*/\1 \2/')"
        want=$(awk -v a="$pa" -v b="$pb" '($1 == a && $2 == b) || ($1 == b && $2 == a)' "$dir/live.txt" | grep -c .)
        [ "$n" -eq "$want" ] || fail "$side: iwemu decode --qp $qpn: $n FPDUs, the live capture $want on ports $pa/$pb"
    fi
done

# ---- 2. payload elision: headers kept, every FPDU decodes -----------------------
pick_capture_port
run_pair elided 65536 IWEMU_CAPTURE_PAYLOAD=8
f=$(ls "$dir"/elided-client-*.pcapng | head -1)
judge "$f" elided
n=$(fpdu_list "$f" | grep -c .)
[ "$n" -ge "$(grep -c . "$dir/live.txt")" ] || fail "elided capture: $n FPDUs, fewer than the first run's"
big=$(tshark -n -r "$f" -Y 'frame.cap_len > 124' -T fields -e frame.number 2>/dev/null |
      head -1)
[ -z "$big" ] || fail "elided capture: frame $big keeps more than headers + 8 payload octets"
[ "$(stat -c %s "$f")" -lt "$(stat -c %s "$(ls "$dir"/plain-client-*.pcapng | head -1)")" ] ||
    [ "$prog" = rping ] || fail "elided capture is not smaller"

# ---- 3. rotation at a size cap: each file decodes on its own --------------------
pick_capture_port
run_pair rotated 16384 IWEMU_CAPTURE_MAX_SIZE=64K IWEMU_CAPTURE_FILES=3
files=$(ls "$dir"/rotated-client-*.pcapng | wc -l)
echo "rotation: $files files"
[ "$files" -ge 2 ] && [ "$files" -le 3 ] || fail "rotation kept $files files, expected 2 or 3"
for f in "$dir"/rotated-client-*.pcapng; do
    [ "$(stat -c %s "$f")" -lt $((64 * 1024 + 2 * 1024 * 1024)) ] || fail "$f: larger than the cap allows"
    judge "$f"
done
exit $failed
