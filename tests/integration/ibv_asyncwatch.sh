#!/bin/bash
# rdma-core's ibv_asyncwatch sees the port events iwemu reports when the
# interface its port follows goes down, comes up and changes its MAC
# (IBV_EVENT_PORT_ERR, IBV_EVENT_PORT_ACTIVE, IBV_EVENT_LID_CHANGE, as
# siw_netdev_event reports them), and ibv_devinfo shows the port's state.
# In a network namespace of its own (root: unshare -n) with one veth pair,
# so the host's interfaces are never touched.
# Usage: ibv_asyncwatch.sh IWEMU_RUN   (exit 77: no network namespace here)
run=$1
if [ -z "$IWEMU_ASYNCWATCH_INNER" ]; then
    if ! err=$(unshare -n true 2>&1); then
        echo "SKIP: cannot create a network namespace (unshare -n: $err)"
        exit 77
    fi
    IWEMU_ASYNCWATCH_INNER=1 exec unshare -n "$0" "$@"
fi

dir=$(mktemp -d)
watch_pid=
cleanup() {
    [ -n "$watch_pid" ] && kill "$watch_pid" 2>/dev/null && wait "$watch_pid" 2>/dev/null
    rm -rf "$dir"
}
trap cleanup EXIT
fail() {
    echo "FAIL: $*"
    echo "--- ibv_asyncwatch output"; cat "$dir/watch.log"
    exit 1
}

ip link set lo up || exit 1
ip link add iwa type veth peer name iwb || exit 1
ip link set iwa up && ip link set iwb up || exit 1
# The port follows the first non-loopback interface that is up and running:
# wait for the veth's carrier, then take whichever of the pair that is.
for _ in $(seq 50); do
    ip -br link show iwa | grep -q ' UP ' && ip -br link show iwb | grep -q ' UP ' && break
    sleep 0.1
done
netdev=$(ip -o link show up | awk -F': ' '$2 !~ /^lo/ { sub(/@.*/, "", $2); print $2; exit }')
[ -n "$netdev" ] || fail "no veth came up: $(ip -br link)"
echo "port 1 follows $netdev"
# Every process below follows the same interface, whatever is up when it
# starts (the automatic choice would move to another one once it is down).
export IWEMU_NETDEV=$netdev

port_state() {
    timeout 20 "$run" ibv_devinfo -d iwemu0 | awk '/state:/ { print $2; exit }'
}
wait_for_event() {  # EVENT_NAME COUNT
    for _ in $(seq 100); do
        [ "$(grep -c "event_type $1 " "$dir/watch.log")" -ge "$2" ] && return 0
        sleep 0.1
    done
    fail "no $1 (#$2) within 10 s of the change"
}

state=$(port_state)
[ "$state" = PORT_ACTIVE ] || fail "port state at start: '$state', expected PORT_ACTIVE"
state=$(IWEMU_NETDEV=nosuchdev0 port_state)
[ "$state" = PORT_DOWN ] || fail "port state with IWEMU_NETDEV=nosuchdev0: '$state', expected PORT_DOWN"

timeout 60 "$run" stdbuf -oL ibv_asyncwatch -d iwemu0 > "$dir/watch.log" 2>&1 &
watch_pid=$!
for _ in $(seq 100); do grep -q "async event FD" "$dir/watch.log" && break; sleep 0.1; done
grep -q "async event FD" "$dir/watch.log" || fail "ibv_asyncwatch did not start"
sleep 0.3  # its context is open: the port's watch runs from there

ip link set "$netdev" down
wait_for_event IBV_EVENT_PORT_ERR 1
state=$(port_state)
[ "$state" = PORT_DOWN ] || fail "port state after 'ip link set $netdev down': '$state', expected PORT_DOWN"

ip link set "$netdev" up
wait_for_event IBV_EVENT_PORT_ACTIVE 1
ip link set "$netdev" address 02:1e:77:00:00:01
wait_for_event IBV_EVENT_LID_CHANGE 1
# Traffic on the other interfaces is not the port's business.
ip link set lo down && ip link set lo up
ip link set "$netdev" down && ip link set "$netdev" up
wait_for_event IBV_EVENT_PORT_ACTIVE 2
[ "$(grep -c 'event_type IBV_EVENT_PORT_ERR ' "$dir/watch.log")" -eq 2 ] || fail "expected exactly 2 PORT_ERR events"
grep -v -E 'async event FD|event_type IBV_EVENT_(PORT_ERR|PORT_ACTIVE|LID_CHANGE) \([0-9]+\), port 1$' "$dir/watch.log" \
    && fail "unexpected lines above"
kill -0 "$watch_pid" || fail "ibv_asyncwatch exited early"
echo "--- ibv_asyncwatch output"; cat "$dir/watch.log"
echo "PASS"
