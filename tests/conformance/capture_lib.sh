# Sourced by the conformance scripts: a private loopback capture judged by
# tshark.  Skips the test (77) at once where tshark or dumpcap is missing.
# start_capture DIR: picks $port and starts dumpcap on it, writing $cap; the
# caller kills $dc when done.
# T ARGS...: tshark on $cap.

# fail MSG: a failed check; the script goes on and exits 1 at the end ($failed).
fail() { echo "FAIL: $*" >&2; failed=1; }
# skip MSG: this machine cannot run the test.
skip() { echo "SKIPPED: $*"; exit 77; }
failed=0
command -v tshark >/dev/null && command -v dumpcap >/dev/null || skip "tshark/dumpcap not installed"

# A port with no registered TCP dissector (ORACLE §2; tshark 4.0 registers
# none in 14002-15739: `tshark -G decodes`) that no socket uses, TIME_WAIT
# included, so the capture is ours alone.  The range lies below the kernel's
# ephemeral ports (32768-60999) so that no parallel test's client socket can be
# given it, and apart from the integration tests' listeners (20000-31999).
pick_capture_port() {
    local p
    port=
    for _ in $(seq 1 100); do
        p=$((14100 + RANDOM % 1600))
        if ! ss -Htan "sport = :$p or dport = :$p" | grep -q .; then port=$p; return 0; fi
    done
    echo "no free port in 14100-15699"
    exit 1
}

start_capture() {
    local dir=$1
    pick_capture_port
    cap=$dir/cap.pcapng
    dumpcap -q -i lo -f "tcp port $port" -w "$cap" > "$dir/dumpcap.log" 2>&1 &
    dc=$!
    for _ in $(seq 1 50); do [ -s "$cap" ] && break; kill -0 $dc 2>/dev/null || break; sleep 0.1; done
    if ! kill -0 $dc 2>/dev/null || [ ! -s "$cap" ]; then
        cat "$dir/dumpcap.log"
        skip "cannot capture on lo (need root or CAP_NET_RAW for dumpcap)"
    fi
    sleep 0.5   # dumpcap catches packets only a moment after writing its header
}

# stop_capture: stops dumpcap once it has written what it captured.  On a
# loaded host dumpcap trails the traffic by more than a moment (CI lost the
# last FPDUs of a run after a fixed half second): wait until its file has
# stopped growing for half a second (at most 10 s), then stop it.
stop_capture() {
    local last=-1 size stable=0
    for _ in $(seq 1 100); do
        size=$(stat -c %s "$cap" 2>/dev/null || echo 0)
        if [ "$size" = "$last" ]; then
            stable=$((stable + 1))
            [ $stable -ge 5 ] && break
        else
            stable=0 last=$size
        fi
        sleep 0.1
    done
    kill -INT $dc; wait $dc; dc=
}

# Send payloads are offered to the RPC-over-RDMA and SMB Direct heuristics,
# which call arbitrary test data malformed (ORACLE.md §2): both off.
T() { tshark -n -r "$cap" --disable-protocol rpcordma --disable-protocol smb_direct "$@" 2>/dev/null; }
