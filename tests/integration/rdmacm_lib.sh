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

# pair_setup ADDRESS: addr (ADDRESS, or for "nonloopback" a local
# non-loopback IPv4 address; without one the test is skipped with 77), an
# unused TCP port in port, a scratch directory in dir (removed at exit).
pair_setup() {
    addr=$1
    if [ "$addr" = nonloopback ]; then
        addr=$(local_address)
        [ -n "$addr" ] || { echo "no non-loopback IPv4 address: skipped"; exit 77; }
    fi
    port=$(free_port) || fail "no free port"
    dir=$(mktemp -d)
    trap 'rm -rf "$dir"' EXIT
}

# qperf_server IWEMU_RUN SECONDS: `qperf -lp $port` under IWEMU_RUN in the
# background for at most SECONDS ($server, its log $dir/server.log, killed at
# exit); returns once it listens.  Needs $port and $dir.
qperf_server() {
    timeout "$2" "$1" qperf -lp "$port" > "$dir/server.log" 2>&1 &
    server=$!
    trap 'kill $server 2>/dev/null; rm -rf "$dir"' EXIT
    wait_listen "$port" 20 $server || { show "$dir/server.log"; fail "qperf server did not listen"; }
}

# server_client IWEMU_RUN SERVER ARGV... -- CLIENT ARGV...: the server in the
# background and, once it listens on $port, the client, both under IWEMU_RUN
# and bounded in time (the server $pair_limit seconds, default 100, the
# client 10 less).  Leaves the logs in $dir/server.log and $dir/client.log,
# the exit codes in server_rc and client_rc.
server_client() {
    local run=$1 limit=${pair_limit:-100} server server_argv=()
    shift
    while [ $# -gt 0 ] && [ "$1" != -- ]; do server_argv+=("$1"); shift; done
    [ $# -gt 0 ] || fail "server_client: no -- before the client's command"
    shift
    timeout "$limit" "$run" "${server_argv[@]}" > "$dir/server.log" 2>&1 &
    server=$!
    wait_listen "$port" 20 $server || { kill $server 2>/dev/null; show "$dir/server.log"; fail "server did not listen"; }
    timeout $((limit - 10)) "$run" "$@" > "$dir/client.log" 2>&1
    client_rc=$?
    wait $server
    server_rc=$?
}

# perftest_pair IWEMU_RUN TEST ADDRESS ARGS... [-- CLIENT ARGS...]: a perftest
# server, then its client to ADDRESS (as for pair_setup), each with ARGS (the
# client also with CLIENT ARGS), through server_client.  Sets what
# server_client and pair_setup set, and the client's result row (size,
# iterations, ...) in result.
perftest_pair() {
    local run=$1 test=$2 args=()
    pair_setup "$3"
    shift 3
    while [ $# -gt 0 ] && [ "$1" != -- ]; do args+=("$1"); shift; done
    [ $# -gt 0 ] && shift
    server_client "$run" "$test" -p "$port" "${args[@]}" -- "$test" -p "$port" "${args[@]}" "$@" "$addr"
    result=$(grep -A1 "#bytes" "$dir/client.log" | tail -1)
}

# server_client_env SERVER_ENV CLIENT_ENV SERVER ARGV... -- CLIENT ARGV...:
# like server_client, each side with its own environment (IWEMU_MPA_REV=0,
# IWEMU_MPA_STARTUP=startkey, ...), both logging at debug; @PORT@ in either
# argv becomes a free port.  Uses $run and $dir; sets $server while the
# server runs, then client_rc and server_rc.
server_client_env() {
    local senv=$1 cenv=$2 sargv=()
    shift 2
    while [ "$1" != -- ]; do sargv+=("$1"); shift; done
    shift
    port=$(free_port) || fail "no free port"
    # shellcheck disable=SC2086
    env IWEMU_LOG=debug $senv timeout 60 "$run" "${sargv[@]/@PORT@/$port}" > "$dir/server.log" 2>&1 &
    server=$!
    wait_listen "$port" 20 $server || { show "$dir/server.log"; fail "server did not listen"; }
    # shellcheck disable=SC2086
    env IWEMU_LOG=debug $cenv timeout 50 "$run" "${@/@PORT@/$port}" > "$dir/client.log" 2>&1
    client_rc=$?
    wait $server
    server_rc=$?
    server=
}
