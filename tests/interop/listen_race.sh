#!/usr/bin/env bash
# The matrix's handling of siw's listen race (docs/interop.md §10), proved on
# demand: builds a research siw.ko from the harness's cached siw source that
# sleeps inside siw_create_listen's window (between listen() and LISTENING)
# on one chosen call, loads it in place of the stock siw
# (IWEMU_INTEROP_SIW_KO) and runs client_server ib_read_lat.  The second
# listen call after loading is perftest's second listener, so the first try
# loses iwemu's connection exactly as in the CI failure; the pair must pass on
# a later try, the report must say so, and the kernel-log check must pass with
# the race's traces left out.  Needs root and the siw-peer cache (run
# matrix.sh once first).  About 2 minutes (1 of them the module build).
#
#   tests/interop/listen_race.sh BUILD_DIR
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:?usage: listen_race.sh BUILD_DIR}
cache=${SIW_PEER_CACHE:-/var/cache/siw-peer}
fail() { echo "listen_race: FAIL: $*"; exit 1; }

src=
for d in "$cache"/siw-*/src/drivers/infiniband/sw/siw; do [ -d "$d" ] && { src=$d; break; }; done
[ -n "$src" ] || fail "no cached siw source in $cache (run tests/interop/matrix.sh once)"
kver=$(modinfo -F vermagic "${src%/src/drivers/infiniband/sw/siw}/stock/siw.ko" | awk '{print $1}')
[ -d "/usr/src/linux-headers-$kver" ] || fail "no linux-headers-$kver"
work=$(mktemp -d /tmp/iwemu-listen-race.XXXXXX)
cp "$src"/* "$work/"

# Our lines only: two module parameters and a sleep after listen().
python3 - "$work/siw_cm.c" <<'EOF' || fail "the research patch does not apply"
import sys
p = sys.argv[1]; s = open(p).read()
anchor = "\trv = s->ops->listen(s, backlog);\n\tif (rv) {\n\t\tsiw_dbg(id->device, \"listen error %d\\n\", rv);\n\t\tgoto error;\n\t}\n"
head = "int siw_create_listen(struct iw_cm_id *id, int backlog)\n{"
if anchor not in s or head not in s:
    sys.exit(1)
s = s.replace(anchor, anchor + (
    "\t/* research build: widen the listen() -> LISTENING window once */\n"
    "\tif (++race_listen_calls == race_listen_nth) {\n"
    "\t\tpr_info(\"siw-research: listen call %d sleeps %d ms before LISTENING\\n\",\n"
    "\t\t\trace_listen_calls, race_listen_ms);\n"
    "\t\tmsleep(race_listen_ms);\n"
    "\t}\n"))
s = s.replace(head,
    "static int race_listen_nth;\nmodule_param(race_listen_nth, int, 0444);\n"
    "static int race_listen_ms = 100;\nmodule_param(race_listen_ms, int, 0444);\n"
    "static int race_listen_calls;\n\n" + head, 1)
s = "#include <linux/delay.h>\n#include <linux/moduleparam.h>\n" + s
open(p, "w").write(s)
EOF
make -s -C "/usr/src/linux-headers-$kver" M="$work" CONFIG_RDMA_SIW=m modules >"$work/build.log" 2>&1 ||
  { tail -n 20 "$work/build.log"; fail "research siw build failed"; }
strip --strip-debug "$work/siw.ko"

# The matrix guest has no siw_lo: listen call 1 is perftest's first
# listener on siw0, call 2 its second.
IWEMU_INTEROP_SIW_KO=$work/siw.ko IWEMU_INTEROP_SIW_KO_ARGS="race_listen_nth=2" \
  "$here/matrix.sh" "$build" --variants client_server --tests ib_read_lat | tee "$work/matrix.log"
rc=${PIPESTATUS[0]}
grep -q 'PASS  client_server: iwemu client -> siw ib_read_lat .*try [23]: siw lost' "$work/matrix.log" ||
  fail "the pair did not meet the race, or was not run again (log: $work/matrix.log)"
grep -q "PASS  guest kernel log clean (client_server) .*trace(s) of siw's listen race left out" "$work/matrix.log" ||
  fail "the race's traces were not left out of the kernel-log check"
[ "$rc" -eq 0 ] || fail "matrix rc $rc"
rm -rf "$work"
echo "listen_race: PASS"
