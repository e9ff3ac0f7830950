#!/bin/bash
# One iwemu program under valgrind memcheck: iwemu-run prepares the
# environment and execs valgrind, which passes LD_PRELOAD (the shim) on to the
# program it runs.  Fails on any memcheck error (invalid access, use of
# uninitialised values, bad free ...) and on definite leaks whose allocation
# stack passes through iwemu code (shim, provider, emulator, this tree's
# test programs); leaks wholly inside the distro's libraries are listed only.
# rping_teardown.supp covers rping's own exit race (see there), nothing else.
# A clean run whose program exits non-zero prints the program's output and
# exits with the program's code, so that a caller can judge it (rping's exit
# race, rping_exit_race.sh); memcheck's own failures exit 1.
# usage: valgrind_check.sh VALGRIND IWEMU_RUN PROGRAM [ARGS...]
set -u
valgrind=$1 run=$2
shift 2
src=$(cd "$(dirname "$0")/../.." && pwd)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

"$run" "$valgrind" --tool=memcheck --error-exitcode=99 --leak-check=full \
    --show-leak-kinds=definite --errors-for-leak-kinds=none --num-callers=40 \
    --fullpath-after= --suppressions="$src/tests/integration/rping_teardown.supp" \
    --log-file="$dir/memcheck.%p" "$@" > "$dir/out" 2>&1
rc=$?
logs=("$dir"/memcheck.*)
# Definite-leak records (from "definitely lost" to the blank line after the
# stack) that name an iwemu source file or library.
ours=$(awk -v src="$src/" '
    /definitely lost in loss record/ { rec = $0 "\n"; inrec = 1; next }
    inrec && /^==[0-9]+== *$/ { if (hit) printf "%s\n", rec; inrec = 0; hit = 0; next }
    inrec { rec = rec $0 "\n"; if (index($0, src) || index($0, "libiwemu")) hit = 1 }
' "${logs[@]}")
summary=$(grep -h -E "ERROR SUMMARY|definitely lost:" "${logs[@]}")
if [ $rc -eq 99 ] || [ -n "$ours" ]; then
    cat "$dir/out" "${logs[@]}"
    echo "----- definite leaks through iwemu code:"
    echo "$ours"
    echo "FAIL: valgrind run of $1: exit $rc${ours:+, definite leaks in iwemu code}" >&2
    exit 1
fi
echo "$summary"
if [ $rc -ne 0 ]; then
    cat "$dir/out"
    echo "memcheck clean, but $1 exited $rc: $*" >&2
    exit $rc
fi
echo "memcheck clean: $*"
