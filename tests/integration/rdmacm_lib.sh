# Helpers for the rdma_cm integration tests (sourced).  Every program runs
# under iwemu-run and under `timeout`, so a hang is a failure, never a stuck CI.

# A TCP port no socket uses, in any state (rdma_cm ports are TCP ports on
# iWARP), outside the usual ephemeral range (32768-60999) where possible.
free_port() {
    local p
    for _ in $(seq 1 50); do
        p=$((20000 + RANDOM % 12000))
        if ! ss -Htan "sport = :$p" | grep -q .; then echo "$p"; return 0; fi
    done
    return 1
}

# Waits (up to $2 seconds) until something listens on TCP port $1; gives up
# early when process $3 (the server) has exited.
wait_listen() {
    local port=$1 limit=$(( ${2:-10} * 10 )) pid=${3:-}
    for _ in $(seq 1 "$limit"); do
        ss -Hltn "sport = :$port" | grep -q . && return 0
        if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then
            echo "server exited before listening on port $port" >&2
            return 1
        fi
        sleep 0.1
    done
    echo "nothing listens on port $port after ${2:-10} s" >&2
    return 1
}

# A non-loopback local IPv4 address, or nothing.
local_address() {
    ip -4 -o addr show scope global 2>/dev/null | awk '{split($4, a, "/"); print a[1]; exit}'
}

fail() {
    echo "FAIL: $*" >&2
    exit 1
}

# show LOG...: print logs (on failure) with a header each.
show() {
    for f in "$@"; do echo "----- $f"; cat "$f"; done
}

# perftest_pair IWEMU_RUN TEST ADDRESS ARGS...: a perftest server, then its
# client to ADDRESS ("nonloopback": a local non-loopback IPv4 address, or the
# test is skipped with 77), each with ARGS and bounded in time.  Leaves the
# logs in $dir/server.log and $dir/client.log, the exit codes in client_rc and
# server_rc, the client's result row (size, iterations, ...) in result, and
# the port and address used in port and addr.
perftest_pair() {
    local run=$1 test=$2 server
    addr=$3
    shift 3
    if [ "$addr" = nonloopback ]; then
        addr=$(local_address)
        [ -n "$addr" ] || { echo "no non-loopback IPv4 address: skipped"; exit 77; }
    fi
    port=$(free_port) || fail "no free port"
    dir=$(mktemp -d)
    trap 'rm -rf "$dir"' EXIT
    timeout 100 "$run" "$test" -p "$port" "$@" > "$dir/server.log" 2>&1 &
    server=$!
    wait_listen "$port" 20 $server || { kill $server 2>/dev/null; show "$dir/server.log"; fail "server did not listen"; }
    timeout 90 "$run" "$test" -p "$port" "$@" "$addr" > "$dir/client.log" 2>&1
    client_rc=$?
    wait $server
    server_rc=$?
    result=$(grep -A1 "#bytes" "$dir/client.log" | tail -1)
}
