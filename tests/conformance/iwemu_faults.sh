#!/bin/bash
# IWEMU_FAULTS against real programs, judged on the wire through
# IWEMU_CAPTURE and tshark (no root needed):
#  1. rping -V, the client's 10th FPDU leaves with a bad CRC: the server
#     answers with Terminate LLP/MPA/CRC error (2/0/0x02), both programs
#     end within their time limit (no hang);
#  2. a Terminate injected by rule (RDMAP 0/1/0x00 here) is on the wire as
#     given; a lost RTR leaves the stream whole without it;
#  3. ib_send_bw -R with the connection dropped (RST) after 1 MiB exits
#     with an error in bounded time, on both sides;
#  4. a seeded probabilistic rule fires at the same FPDU numbers in two runs.
#
# usage: iwemu_faults.sh IWEMU_RUN
set -u
run=$1
fail() { echo "FAIL: $*" >&2; failed=1; }
failed=0
command -v tshark >/dev/null || { echo "SKIPPED: tshark not installed"; exit 77; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
T() { tshark -n -r "$1" --disable-protocol rpcordma --disable-protocol smb_direct "${@:2}" 2>/dev/null; }

pick_port() {
    for _ in $(seq 1 100); do
        port=$((14100 + RANDOM % 1600))
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

# rping_pair TAG CLIENT_FAULTS: server and client, the client with the rule;
# sets s_rc, c_rc, and elapsed seconds.
rping_pair() {
    local tag=$1 rule=$2 start server
    pick_port
    start=$(date +%s)
    IWEMU_LOG=info IWEMU_CAPTURE="$dir/$tag-server.pcapng" timeout 60 "$run" rping -s -a 127.0.0.1 -p "$port" -C 100 -S 1024 -V \
        > "$dir/$tag-server.log" 2>&1 &
    server=$!
    wait_listen $server || fail "$tag: server did not listen"
    IWEMU_LOG=info IWEMU_FAULTS="$rule" IWEMU_CAPTURE="$dir/$tag-client.pcapng" timeout 50 "$run" rping -c -a 127.0.0.1 -p "$port" \
        -C 100 -S 1024 -V > "$dir/$tag-client.log" 2>&1
    c_rc=$?
    wait $server
    s_rc=$?
    elapsed=$(($(date +%s) - start))
    echo "$tag: client rc=$c_rc server rc=$s_rc in ${elapsed}s"
    [ $c_rc -ne 124 ] && [ $s_rc -ne 124 ] || fail "$tag: a program hung (killed by timeout)"
}

terminates() {
    T "$1" -Y 'iwarp_rdma.opcode==7' -T fields -E 'separator=;' -e tcp.srcport -e iwarp_rdma.term_layer -e iwarp_rdma.term_etype_rdma \
        -e iwarp_rdma.term_etype_llp -e iwarp_rdma.term_errcode_rdma -e iwarp_rdma.term_errcode_llp
}

# ---- 1. CRC corrupted at FPDU 10 ------------------------------------------------
rping_pair crc "crc,fpdu=10"
grep -q "faults: rule 'crc,fpdu=10' fired: qp [0-9]*, tx FPDU 10 " "$dir/crc-client.log" ||
    fail "crc: no log line for the rule firing at FPDU 10"
f=$dir/crc-client.pcapng
bad=$(T "$f" -V | grep -c 'Bad CRC32')
[ "$bad" -eq 1 ] || fail "crc: $bad bad CRCs on the wire, expected 1"
t=$(terminates "$f")
echo "crc: Terminates: ${t:-none}"
# From the server's port: layer 2 (LLP), etype 0 (MPA), code 0x02 (CRC error).
# Fields: port;layer;etype_rdma;etype_llp;errcode_rdma;errcode_llp.
echo "$t" | awk -F';' -v p="$port" '$1 == p && $2 == "0x02" && $4 == "0x00" && $6 == "0x02"' | grep -q . ||
    fail "crc: no Terminate LLP/MPA/CRC error from the server"
grep -q "CRC" "$dir/crc-server.log" || fail "crc: the server logged no CRC error"

# ---- 2. an injected Terminate --------------------------------------------------
rping_pair term "terminate:0/1/0x00,fpdu=5"
t=$(terminates "$dir/term-client.pcapng")
echo "term: Terminates: ${t:-none}"
echo "$t" | awk -F';' -v p="$port" '$1 != p && $2 == "0x00" && $3 == "0x01" && $5 == "0x00"' | grep -q . ||
    fail "term: the injected Terminate 0/1/0x00 is not on the wire"
grep -qi "terminate" "$dir/term-server.log" || fail "term: the server logged no Terminate"

# ---- 2b. the RTR lost ------------------------------------------------------
# The Initiator's first FPDU is its RTR (a zero-length Read, RFC 6581): with
# it lost, the first FPDU the capture shows from the client is what followed.
rping_pair lose "lose,fpdu=1"
grep -q "faults: rule 'lose,fpdu=1' fired: qp [0-9]*, tx FPDU 1 (opcode 0x1" "$dir/lose-client.log" ||
    fail "lose: the rule did not fire on the RTR (a Read Request)"
first=$(T "$dir/lose-client.pcapng" -Y "iwarp_mpa.fpdu && tcp.dstport == $port" -T fields -e iwarp_rdma.opcode -e iwarp_mpa.ulpdulength | head -1)
echo "lose: the client's first FPDU on the wire: $first"
[ -n "$first" ] && [ "$first" != "$(printf '0x01\t46')" ] || fail "lose: the RTR is still on the wire"
malformed=$(T "$dir/lose-client.pcapng" -Y '_ws.malformed || _ws.expert.severity == error' | grep -c .)
[ "$malformed" -eq 0 ] || fail "lose: the capture has $malformed malformed frames (the stream must close over the lost FPDU)"

# ---- 3. ib_send_bw -R, connection reset after 1 MiB ------------------------------
pick_port
start=$(date +%s)
timeout 90 "$run" ib_send_bw -R -p "$port" -n 2000 -s 65536 > "$dir/bw-server.log" 2>&1 &
server=$!
wait_listen $server || fail "bw: server did not listen"
IWEMU_LOG=info IWEMU_FAULTS="drop:rst,octets=1M,opcode=send" timeout 80 "$run" ib_send_bw -R -p "$port" -n 2000 -s 65536 127.0.0.1 \
    > "$dir/bw-client.log" 2>&1
c_rc=$?
wait $server
s_rc=$?
elapsed=$(($(date +%s) - start))
echo "bw: client rc=$c_rc server rc=$s_rc in ${elapsed}s"
grep "faults:" "$dir/bw-client.log" | head -3
[ $c_rc -ne 0 ] && [ $c_rc -ne 124 ] || fail "bw: client rc=$c_rc, expected an error exit (not a timeout)"
[ $s_rc -ne 124 ] || fail "bw: server hung"
[ "$elapsed" -le 60 ] || fail "bw: took ${elapsed}s"
grep -q "faults: rule 'drop:rst,octets=1M,opcode=send' fired: qp" "$dir/bw-client.log" || fail "bw: the rule never fired"

# ---- 4. a seeded rule replays -------------------------------------------------
for i in 1 2; do
    rping_pair seed$i "crc,p=0.05;seed=4242"
    grep -o "tx FPDU [0-9]*" "$dir/seed$i-client.log" > "$dir/seed$i.fired"
    grep -q "seed 4242" "$dir/seed$i-client.log" || fail "seed: the seed is not printed"
done
echo "seed: fired at $(tr '\n' ' ' < "$dir/seed1.fired") / $(tr '\n' ' ' < "$dir/seed2.fired")"
[ -s "$dir/seed1.fired" ] || fail "seed: the rule never fired"
cmp -s "$dir/seed1.fired" "$dir/seed2.fired" || fail "seed: the two runs fired at different FPDUs"

# ---- 5. a rule that does not parse is fatal, with its position ----------------
out=$(IWEMU_FAULTS="crc,fdpu=3" timeout 20 "$run" ibv_devices 2>&1)
rc=$?
echo "bad rule: rc=$rc: $out"
[ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "bad rule: ibv_devices ran (rc=$rc)"
echo "$out" | grep -q "position 5: unknown condition 'fdpu'" || fail "bad rule: no error with its position"
echo "$out" | grep -q "^      ^$" || fail "bad rule: no caret under the mistake"
echo "$out" | grep -q "iwemu0" && fail "bad rule: the program ran anyway"
# The same from a config file, and a setting the environment overrides is no error.
printf 'faults = delay:0\n' > "$dir/bad.conf"
out=$(IWEMU_CONFIG="$dir/bad.conf" timeout 20 "$run" ibv_devices 2>&1)
rc=$?
[ $rc -ne 0 ] && echo "$out" | grep -q "position 7: delay takes" || fail "bad rule in the config file: rc=$rc: $out"
IWEMU_CONFIG="$dir/bad.conf" IWEMU_FAULTS="crc,fpdu=1" timeout 20 "$run" ibv_devices > /dev/null 2>&1 ||
    fail "a bad file rule overridden by IWEMU_FAULTS still stopped the program"
# Without iwemu-run (its environment set by hand): the process stops at
# its first use of the device.
out=$(eval "$("$run" --env)"; IWEMU_FAULTS="crc,fdpu=3" timeout 20 ibv_devinfo 2>&1)
rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -q "iwemu: IWEMU_FAULTS: position 5" ||
    fail "bad rule without iwemu-run: rc=$rc: $out"
exit $failed
