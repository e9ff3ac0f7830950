# Sourced by the conformance scripts: a private loopback capture.
# start_capture DIR: picks $port and starts dumpcap on it, writing $cap; the
# caller kills $dc when done.  Needs skip() from the caller.

# A port with no registered TCP dissector (ORACLE §2: none in 49000-51999 in
# tshark 4.0) that no socket uses, TIME_WAIT included, so the capture is ours alone.
pick_capture_port() {
    local p
    port=
    for _ in $(seq 1 100); do
        p=$((49000 + RANDOM % 3000))
        if ! ss -Htan "sport = :$p or dport = :$p" | grep -q .; then port=$p; return 0; fi
    done
    echo "no free port in 49000-51999"
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
