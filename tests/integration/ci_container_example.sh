#!/bin/bash
# The README's unprivileged container example, run exactly as written: the
# shell block between <!-- ci-container-example:begin --> and :end is
# extracted from README.md and run with this build's iwemu-run first on PATH
# (a user + network namespace of its own: lo up, ibv_devinfo, an rping pair
# with -V).  Passes only when ibv_devinfo shows iwemu0 with an active port
# and the client verified every ping the block asks for.  No unshare, or a
# kernel that refuses the namespaces, is a failure: the README promises it.
# Usage: ci_container_example.sh IWEMU_RUN [README]
set -u
here=$(cd "$(dirname "$0")" && pwd)
run=$1
readme=${2:-$here/../../README.md}
. "$here/rping_exit_race.sh"

fail() { echo "FAIL: $*"; exit 1; }

[ -r "$readme" ] || fail "cannot read $readme"
block=$(awk '/<!-- ci-container-example:begin -->/ { on = 1; next }
             /<!-- ci-container-example:end -->/ { on = 0 }
             on && /^```/ { fence = !fence; next }
             on && fence' "$readme")
[ -n "$block" ] || fail "no ci-container-example block in $readme"
count=$(echo "$block" | grep -- 'rping -c' | grep -o -- '-C [0-9]*' | awk '{ print $2 }')
[ -n "$count" ] || fail "the README block has no 'rping -c ... -C N'"

command -v unshare > /dev/null ||
    fail "unshare (util-linux) is not installed: the README's container example cannot run"
err=$(timeout 10 unshare -Urn true 2>&1) ||
    fail "this kernel or sandbox refuses a user + network namespace (unshare -Urn: $err)"

log=$(mktemp)
trap 'rm -f "$log"' EXIT
# The example's commands find iwemu-run (and nothing else of ours) on PATH.
bindir=$(cd "$(dirname "$run")" && pwd)
PATH="$bindir:$PATH" timeout 50 bash -c "$block" > "$log" 2>&1
rc=$?
rc=$(rping_rc "README example" $rc "$log")

pings=$(grep -c '^ping data: rdma-ping-' "$log")
last=$(grep -o '^ping data: rdma-ping-[0-9]*' "$log" | tail -1 | grep -o '[0-9]*$')
if [ "$rc" -ne 0 ] || ! grep -q 'hca_id:.*iwemu0' "$log" || ! grep -q 'state:.*PORT_ACTIVE' "$log" ||
        [ "$pings" -ne "$count" ] || [ "${last:-}" != $((count - 1)) ]; then
    echo "--- output of the README block (exit status $rc)"
    head -c 6000 "$log"
    fail "README container example: exit $rc, $pings of $count pings verified, iwemu0 active: $(grep -c 'state:.*PORT_ACTIVE' "$log")"
fi
echo "README container example: iwemu0 PORT_ACTIVE, $pings of $count rping pings verified (uid $(id -u))"
