#!/bin/bash
# Our FIN waits close_grace_ms after the peer's last message, also when the
# process exits right after it (emulator/qp/fin_grace.cpp, docs/interop.md §8):
# perftest destroys its control QP and exits about a millisecond after the
# peer's last Send of its closing exchange, and a FIN that soon makes Linux
# siw fail that Send although it arrived.
#
# usage: fin_grace.sh IWEMU_RUN
# Captures `ib_send_bw -R` between two iwemu processes with close_grace_ms
# 200 and checks, for both of its connections and both directions, that a
# side's FIN comes at least 150 ms after the last data segment of the other
# side.  Exit 77 (skipped) only when capturing is impossible.
set -u
run=$1
. "$(dirname "$0")/capture_lib.sh"

dir=$(mktemp -d)
dc=
cleanup() { [ -n "$dc" ] && kill "$dc" 2>/dev/null; rm -rf "$dir"; }
trap cleanup EXIT
start_capture "$dir"

export IWEMU_CLOSE_GRACE_MS=200
timeout 60 "$run" ib_send_bw -R -p "$port" -s 64 -n 20 > "$dir/server.log" 2>&1 &
server=$!
for _ in $(seq 1 200); do
    ss -Hltn "sport = :$port" | grep -q . && break
    kill -0 $server 2>/dev/null || break
    sleep 0.1
done
timeout 50 "$run" ib_send_bw -R -p "$port" -s 64 -n 20 127.0.0.1 > "$dir/client.log" 2>&1
client_rc=$?
wait $server
server_rc=$?
sleep 0.5  # the last FINs into the capture
kill $dc 2>/dev/null; wait $dc 2>/dev/null; dc=
[ $client_rc -eq 0 ] && [ $server_rc -eq 0 ] || { tail -5 "$dir"/*.log; fail "ib_send_bw: client rc=$client_rc server rc=$server_rc"; exit 1; }

T -Y "tcp.port == $port" -T fields -e tcp.stream -e frame.time_relative -e tcp.srcport \
    -e tcp.flags.fin -e tcp.len > "$dir/segments.txt"
python3 - "$dir/segments.txt" <<'EOF' || failed=1
import collections, sys
streams = collections.defaultdict(list)
for line in open(sys.argv[1]):
    stream, t, sport, fin, length = line.split('\t')
    streams[stream].append((float(t), sport, fin.strip() in ('1', 'True'), int(length)))
checked = bad = 0
for stream, segs in streams.items():
    for side in {s[1] for s in segs}:
        fins = [i for i, s in enumerate(segs) if s[1] == side and s[2]]
        if not fins:
            continue
        first_fin = fins[0]
        peer_data = [s for s in segs[:first_fin] if s[1] != side and s[3] > 0]
        if not peer_data:
            continue
        gap_ms = (segs[first_fin][0] - peer_data[-1][0]) * 1000
        checked += 1
        ok = gap_ms >= 150
        bad += not ok
        print(f"{'ok' if ok else 'FAIL:'} connection {stream}, port {side}: FIN {gap_ms:.1f} ms after the peer's last data")
if checked < 4:
    print(f"FAIL: {checked} FINs after peer data seen, expected 4 (2 connections, both ways)")
    sys.exit(1)
sys.exit(1 if bad else 0)
EOF
[ $failed -eq 0 ] && echo PASS
exit $failed
