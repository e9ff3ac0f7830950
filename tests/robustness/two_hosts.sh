#!/bin/bash
# Two "hosts": two network namespaces joined by a veth pair, each side a
# separate iwemu-run inside its own namespace, nothing per-namespace set by
# hand (the sysfs tree and its GID table are keyed by namespace).  Runs
# ib_write_bw without -R (modify_qp connect over the GIDs each side reads from
# its own tree) and with -R, and rping -V; every run must move data and exit 0.
# Then faults on the path (the veth carrier goes away, a silent drop: no
# RST, no ICMP): one that heals after 5 s (rping -V goes on, every ping
# verified), and one that never heals (both sides report an error within the
# liveness bound, IWEMU_LIVENESS_TIMEOUT_MS).  Also qperf -cm1, kill -9 of
# either side mid-transfer and `ss -K` of the QP socket: the survivor (or
# both, for ss -K) reports it and ends in bounded time, and the path then
# carries a fresh run.
# usage: two_hosts.sh IWEMU_RUN
# Exit 77 (skip) only when a network namespace cannot be created here.
set -u
run=$1
# rping's own exit race (EBADF after DISCONNECTED) is rping's, not a failure.
. "$(dirname "$0")/../integration/rping_exit_race.sh"
tag=iw$$
ns_a=${tag}a ns_b=${tag}b
addr_a=10.251.0.1 addr_b=10.251.0.2
dir=$(mktemp -d)

cleanup() {
    local pids
    for ns in "$ns_a" "$ns_b"; do
        pids=$(ip netns pids "$ns" 2>/dev/null)
        [ -n "$pids" ] && kill -9 $pids 2>/dev/null
        ip netns del "$ns" 2>/dev/null
    done
    [ -n "${KEEP_LOGS:-}" ] && cp -r "$dir" "$KEEP_LOGS"; rm -rf "$dir"
}
trap cleanup EXIT

if ! err=$(ip netns add "$ns_a" 2>&1); then
    echo "SKIP: cannot create a network namespace (ip netns add: $err)"
    exit 77
fi
ip netns add "$ns_b" || exit 1
ip link add "${tag}va" netns "$ns_a" type veth peer name "${tag}vb" netns "$ns_b" || exit 1
ip -n "$ns_a" addr add "$addr_a/24" dev "${tag}va" && ip -n "$ns_b" addr add "$addr_b/24" dev "${tag}vb" || exit 1
for ns in "$ns_a" "$ns_b"; do
    ip -n "$ns" link set lo up && ip -n "$ns" link set "${tag}v${ns: -1}" up || exit 1
done

fail() { echo "FAIL: $*"; for f in "$dir"/*.log; do [ -f "$f" ] && { echo "--- $f"; tail -20 "$f"; }; done; exit 1; }


# perftest NAME ARGS...: server in A, client in B; both exit 0 and the client
# prints a result line with a non-zero iteration count.
perftest() {
    local name=$1; shift
    local port=$((18000 + RANDOM % 2000))
    timeout 30 ip netns exec "$ns_a" "$run" ib_write_bw -p $port "$@" >"$dir/$name.server.log" 2>&1 &
    local server=$!
    local client_rc=1 i
    for i in $(seq 50); do  # until the server listens on its TCP exchange port
        timeout 30 ip netns exec "$ns_b" "$run" ib_write_bw -p $port "$@" "$addr_a" >"$dir/$name.client.log" 2>&1
        client_rc=$?
        grep -q "Couldn't connect to $addr_a:$port\|Unable to perform rdma_client function" "$dir/$name.client.log" || break
        sleep 0.2
    done
    wait $server
    local server_rc=$?
    [ $client_rc -eq 0 ] && [ $server_rc -eq 0 ] || fail "$name: client rc=$client_rc server rc=$server_rc"
    local line
    line=$(grep -E "^ *[0-9]+ +[1-9][0-9]* " "$dir/$name.client.log") || fail "$name: no result line with iterations"
    echo "$name: $line"
}

# Each namespace has its own tree, listing its own address.
env_a=$(ip netns exec "$ns_a" "$run" --env | sed -n 's/^export SYSFS_PATH=//p' | tr -d "'\"")
env_b=$(ip netns exec "$ns_b" "$run" --env | sed -n 's/^export SYSFS_PATH=//p' | tr -d "'\"")
[ -n "$env_a" ] && [ "$env_a" != "$env_b" ] || fail "one sysfs tree for two namespaces: '$env_a' '$env_b'"

perftest write_bw_oob -n 300 -s 4096
perftest write_bw_rdmacm -R -n 300 -s 4096

# rping_pair NAME COUNT BASE_PORT: a verified rping -V pair, B to A; both
# must exit 0 (rping's own exit race aside).
rping_pair() {
    local name=$1 count=$2 port=$(($3 + RANDOM % 2000)) server client_rc server_rc
    timeout 30 ip netns exec "$ns_a" "$run" rping -s -V -a "$addr_a" -p $port -C $count -S 1000 >"$dir/$name.server.log" 2>&1 &
    server=$!
    sleep 0.5
    timeout 30 ip netns exec "$ns_b" "$run" rping -c -V -a "$addr_a" -p $port -C $count -S 1000 >"$dir/$name.client.log" 2>&1
    client_rc=$(rping_rc client $? "$dir/$name.client.log")
    wait $server
    server_rc=$(rping_rc server $? "$dir/$name.server.log")
    [ $client_rc -eq 0 ] && [ $server_rc -eq 0 ] || fail "rping -V ($name): client rc=$client_rc server rc=$server_rc"
}

rping_pair rping 200 20000
echo "rping -V: 200 verified pings"

# qperf -cm1 (its server forks a child per test; rdma_cm connections).
port=$((24000 + RANDOM % 2000))
timeout 60 ip netns exec "$ns_a" "$run" qperf -lp $port >"$dir/qperf.server.log" 2>&1 &
qperf_server=$!
for i in $(seq 50); do
    ip netns exec "$ns_a" ss -Hltn "sport = :$port" | grep -q . && break
    sleep 0.1
done
timeout 50 ip netns exec "$ns_b" "$run" qperf -cm1 -lp $port -t 2 "$addr_a" rc_bw rc_lat rc_rdma_write_bw \
    >"$dir/qperf.client.log" 2>&1
qperf_rc=$?
kill $qperf_server 2>/dev/null; wait $qperf_server 2>/dev/null
[ $qperf_rc -eq 0 ] && ! grep -qi "fail\|error" "$dir/qperf.client.log" || fail "qperf -cm1: client rc=$qperf_rc"
for t in rc_bw rc_lat rc_rdma_write_bw; do
    grep -q "^$t:" "$dir/qperf.client.log" || fail "qperf -cm1: no result for $t"
done
echo "qperf -cm1:" $(grep -E "bw|latency" "$dir/qperf.client.log" | tr -s ' ')

# rping_with_fault NAME FAULT: rping -V from B to A (endless); after 1 s of
# verified pings FAULT runs (a command).  Both programs must then end by
# themselves within the bound -- neither hangs nor spins on -- and a side that
# is still alive must say why.  Sets server_rc client_rc elapsed.
rping_with_fault() {
    local name=$1 fault=$2
    port=$((26000 + RANDOM % 2000))
    timeout 40 ip netns exec "$ns_a" "$run" rping -s -d -V -a "$addr_a" -p $port -C 1000000 -S 1000 >"$dir/$name.server.log" 2>&1 &
    local server=$!
    sleep 0.5
    timeout 40 ip netns exec "$ns_b" "$run" rping -c -d -v -V -a "$addr_a" -p $port -C 1000000 -S 1000 \
        >"$dir/$name.client.log" 2>&1 &
    local client=$!
    sleep 1
    [ "$(grep -c "ping data" "$dir/$name.client.log")" -gt 0 ] || fail "$name: no pings before the fault"
    local t0=$SECONDS
    eval "$fault"
    wait $client; client_rc=$?
    wait $server; server_rc=$?
    elapsed=$((SECONDS - t0))
    [ $client_rc -ne 124 ] && [ $server_rc -ne 124 ] || fail "$name: a side was still running 40 s later (client rc=$client_rc server rc=$server_rc)"
    [ $elapsed -le 15 ] || fail "$name: the sides ended ${elapsed} s after the fault"
}
kill_namespace() { local pids; pids=$(ip netns pids "$1"); [ -n "$pids" ] && kill -9 $pids; }
survivor_saw_it() {  # NAME SIDE: the side's log names the disconnect or an error
    grep -Eqi "error|fail|disconnect|flush" "$dir/$1.$2.log" || fail "$1: the $2 reported nothing"
}

# kill -9 of either side mid-transfer: the other side learns (FIN or RST from
# the dead process's kernel) and ends.
rping_with_fault kill_client 'kill_namespace "$ns_b"'
survivor_saw_it kill_client server
echo "kill -9 of the client: the server ended ${elapsed} s later (rc $server_rc)"
rping_with_fault kill_server 'kill_namespace "$ns_a"'
survivor_saw_it kill_server client
echo "kill -9 of the server: the client ended ${elapsed} s later (rc $client_rc)"

# ss -K of the client's QP socket (the rdma_cm connection's TCP socket, to
# the server's port): the client's socket is aborted, the server gets RST;
# both QPs fail and both programs end.
rping_with_fault ss_kill 'ip netns exec "$ns_b" ss -K dst "$addr_a" dport = :$port >"$dir/ss_kill.ss.log" 2>&1'
grep -q "$addr_a:$port" "$dir/ss_kill.ss.log" || fail "ss -K closed no socket: $(cat "$dir/ss_kill.ss.log")"
survivor_saw_it ss_kill server
survivor_saw_it ss_kill client
# (rping ends with 0 on DISCONNECTED, which is what the kernel's iw_cm
# reports for an aborted connection too; the logs say it.)
echo "ss -K of the QP socket: both sides saw it and ended ${elapsed} s later (client rc $client_rc, server rc $server_rc)"

# After all that, the path still carries a fresh, verified run.
rping_pair after 50 28000
echo "after the faults: 50 verified pings"

# rping_with_outage NAME SECONDS COUNT: rping -V from B to A; after 1 s the
# path drops everything for SECONDS (0: for good).  Sets server_rc client_rc
# and elapsed (seconds from the outage to both sides' exit).
rping_with_outage() {
    local name=$1 outage=$2 count=$3
    local port=$((22000 + RANDOM % 2000))
    # 20,000 pings take ~12 s on a quiet 2-core host, several times that
    # under load: the bound is generous, the outcome is what is checked.
    timeout 150 ip netns exec "$ns_a" "$run" rping -s -V -a "$addr_a" -p $port -C $count -S 1000 >"$dir/$name.server.log" 2>&1 &
    local server=$!
    sleep 0.5
    timeout 150 ip netns exec "$ns_b" "$run" rping -c -v -V -a "$addr_a" -p $port -C $count -S 1000 \
        >"$dir/$name.client.log" 2>&1 &
    local client=$!
    sleep 1
    before=$(grep -c "ping data" "$dir/$name.client.log")
    ip -n "$ns_b" link set "${tag}vb" down
    local t0=$SECONDS
    if [ "$outage" -gt 0 ]; then
        sleep "$outage"
        during=$(grep -c "ping data" "$dir/$name.client.log")
        ip -n "$ns_b" link set "${tag}vb" up
    fi
    wait $client; client_rc=$(rping_rc client $? "$dir/$name.client.log")
    wait $server; server_rc=$(rping_rc server $? "$dir/$name.server.log")
    elapsed=$((SECONDS - t0))
    ip -n "$ns_b" link set "${tag}vb" up
}

# Heals after 5 s: the transfer stalls, then resumes; every ping verified.
export IWEMU_LIVENESS_TIMEOUT_MS=30000
rping_with_outage heal 5 20000
[ $client_rc -eq 0 ] && [ $server_rc -eq 0 ] || fail "outage of 5 s: client rc=$client_rc server rc=$server_rc"
after=$(grep -c "ping data" "$dir/heal.client.log")
[ "$before" -gt 0 ] && [ "$after" -gt "$during" ] || fail "outage of 5 s: pings before $before, during $during, after $after"
grep -qi "error\|fail\|mismatch" "$dir/heal.client.log" "$dir/heal.server.log" && fail "outage of 5 s: an error was reported"
echo "outage of 5 s healed: $before pings before, $((after - during)) after, all verified"

# Never heals: both sides see the QP fail within the liveness bound (3 s)
# plus the time rping takes to notice.
export IWEMU_LIVENESS_TIMEOUT_MS=3000
rping_with_outage dead 0 1000000
[ $client_rc -ne 124 ] && [ $server_rc -ne 124 ] || fail "dead path: not detected within 150 s (client rc=$client_rc server rc=$server_rc)"
[ $elapsed -le 15 ] || fail "dead path: detected after ${elapsed} s, bound 3 s"
for side in client server; do
    grep -Eqi "error|fail|disconnect" "$dir/dead.$side.log" || fail "dead path: the $side reported no error"
done
echo "dead path: both sides reported an error ${elapsed} s after the drop (liveness 3 s)"
echo PASS
