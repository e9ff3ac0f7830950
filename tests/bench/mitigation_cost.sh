#!/bin/bash
# What the siw mitigations (docs/interop.md) cost between two iwemu ends:
# the wake-ups after the first FPDUs (peer_wakeup), the Read RTR preference
# and the FIN grace (close_grace_ms, also held at process exit).  Rounds
# interleave the variants; prints medians.
#   tests/bench/mitigation_cost.sh IWEMU_RUN [ROUNDS]
# Variants: defaults | off (IWEMU_PEER_WAKEUP=0 IWEMU_CLOSE_GRACE_MS=0
# IWEMU_RTR=write, the start-up before the mitigations).
# Measures: cmtime -c 100 (connect and disconnect steps, ms for all 100);
# an rping -C 1 -S 64 -V pair (connect, one verified ping, both exit; wall ms
# of the client and of the server).
set -u
run=$1 rounds=${2:-7}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
port_base=$((24000 + RANDOM % 4000))
ms() { date +%s%3N; }

one_round() {  # VARIANT ROUND
    local v=$1 r=$2 env=() p t0 server
    [ "$v" = off ] && env=(IWEMU_PEER_WAKEUP=0 IWEMU_CLOSE_GRACE_MS=0 IWEMU_RTR=write)
    p=$((port_base + r * 4 + $([ "$v" = off ] && echo 2 || echo 0)))
    env "${env[@]}" timeout 30 "$run" cmtime -b 127.0.0.1 -p $p >/dev/null 2>&1 &
    server=$!
    for _ in $(seq 100); do ss -Hltn "sport = :$p" | grep -q . && break; sleep 0.05; done
    env "${env[@]}" timeout 30 "$run" cmtime -s 127.0.0.1 -p $p -c 100 >"$dir/cmtime.log" 2>&1
    kill $server 2>/dev/null; wait $server 2>/dev/null
    awk -v v="$v" '$1 == "connect" || $1 == "disconnect" { print v, "cmtime_" $1, $3 }' "$dir/cmtime.log" >>"$dir/results"
    p=$((p + 1))
    t0=$(ms)
    ( env "${env[@]}" timeout 30 "$run" rping -s -a 127.0.0.1 -p $p -C 1 -S 64 -V >/dev/null 2>&1; echo "$v rping_server_ms $(( $(ms) - t0 ))" >>"$dir/results" ) &
    server=$!
    for _ in $(seq 100); do ss -Hltn "sport = :$p" | grep -q . && break; sleep 0.01; done
    t0=$(ms)
    env "${env[@]}" timeout 30 "$run" rping -c -a 127.0.0.1 -p $p -C 1 -S 64 -V >/dev/null 2>&1
    echo "$v rping_client_ms $(( $(ms) - t0 ))" >>"$dir/results"
    wait $server
}

for r in $(seq 1 "$rounds"); do
    one_round defaults "$r"
    one_round off "$r"
done
python3 - "$dir/results" <<'EOF'
import collections, statistics, sys
vals = collections.defaultdict(list)
for line in open(sys.argv[1]):
    v, k, x = line.split()
    vals[(k, v)].append(float(x))
keys = sorted({k for k, _ in vals})
print(f"{'measure (ms)':<22} {'defaults':>22} {'off':>22}")
for k in keys:
    cells = []
    for v in ('defaults', 'off'):
        xs = vals[(k, v)]
        cells.append(f"{statistics.median(xs):8.1f} ({min(xs):.0f}-{max(xs):.0f})" if xs else "-")
    print(f"{k:<22} {cells[0]:>22} {cells[1]:>22}")
EOF
