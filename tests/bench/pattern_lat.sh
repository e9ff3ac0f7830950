#!/bin/bash
# The cliff check of issue 25: pattern_lat (spin on memory / poll / event
# armed before / after posting, N posts) as two processes under iwemu-run,
# with tx_coalesce on (the default) and off.  No round trip may wait for a
# timer: a post held back used to wait ~1.2 ms from N = 9 on, in every run.
# A row waited when its median is above BOUND us and above twice the same
# row's median with coalescing off plus 100 us.  A loaded host spoils rows
# at random (whole scheduler ticks); a held post spoils the same rows every
# time: the test fails only when some row waited in each of 3 attempts.
# usage: pattern_lat.sh IWEMU_RUN PATTERN_LAT [BOUND_US [options for both...]]
set -u
here=$(dirname "$0")
. "$here/../integration/rdmacm_lib.sh"
run=$1 bench=$2 bound=${3:-500}
shift $(( $# < 3 ? $# : 3 ))

# measure NAME: one server/client pair, the client's rows in $dir/NAME.rows.
measure() {
    local name=$1
    port=$(free_port) || fail "no free port"
    pair_limit=90 server_client "$run" "$bench" -p "$port" "${opts[@]}" -- \
        "$bench" -p "$port" "${opts[@]}" 127.0.0.1
    grep "^pattern_lat " "$dir/client.log" > "$dir/$name.rows"
    if [ $client_rc -ne 0 ] || [ $server_rc -ne 0 ] || [ ! -s "$dir/$name.rows" ]; then
        show "$dir/server.log" "$dir/client.log"
        fail "pattern_lat ($name): client rc=$client_rc server rc=$server_rc"
    fi
}

opts=("$@")
waited_every_time=""  # rows that waited in every attempt so far
for attempt in 1 2 3; do
    pair_setup 127.0.0.1
    measure on
    export IWEMU_TX_COALESCE=0
    measure off
    unset IWEMU_TX_COALESCE
    echo "attempt $attempt: pattern N median_us(coalescing on) median_us(off)"
    table=$(awk -v bound="$bound" '
        NR == FNR { off[$2 " " $3] = $4; next }
        { limit = 2 * off[$2 " " $3] + 100; if (limit < bound) limit = bound
          printf "%-9s %3d %10.2f %10.2f%s\n", $2, $3, $4, off[$2 " " $3], ($4 > limit ? "  <- waited" : "") }' \
        "$dir/off.rows" "$dir/on.rows")
    echo "$table"
    waited=$(echo "$table" | awk '/<- waited/ { print $1 "/" $2 }' | sort)
    rm -rf "$dir"
    if [ -z "$waited" ]; then
        echo "pattern_lat: no pattern waited (attempt $attempt)"
        exit 0
    fi
    if [ $attempt -eq 1 ]; then
        waited_every_time=$waited
    else
        waited_every_time=$(comm -12 <(echo "$waited_every_time") <(echo "$waited"))
    fi
    if [ -z "$waited_every_time" ]; then
        echo "pattern_lat: no row waited in every attempt (a loaded host, attempt $attempt)"
        exit 0
    fi
done
fail "pattern_lat: rows waited in all 3 attempts: $(echo $waited_every_time)"
