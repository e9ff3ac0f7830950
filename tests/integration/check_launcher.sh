#!/bin/sh
# iwemu-run as a command: help, argument errors, clear messages for what is
# missing, environment it passes, exit status of the program.
# usage: check_launcher.sh IWEMU_RUN
set -u
run="$1"
fail() { echo "FAIL: $*" >&2; exit 1; }
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT

"$run" --help > "$tmp/help" 2>&1 || fail "--help exited non-zero"
grep -q "usage: iwemu-run" "$tmp/help" || fail "--help prints no usage"

"$run" > /dev/null 2>&1; [ $? -eq 2 ] || fail "no program: exit status is not 2"
"$run" --bogus true > /dev/null 2>&1; [ $? -eq 2 ] || fail "unknown option: exit status is not 2"

"$run" /nonexistent/program > "$tmp/out" 2>&1; rc=$?
[ $rc -eq 127 ] || fail "missing program: exit $rc, not 127"
grep -q "cannot run /nonexistent/program" "$tmp/out" || fail "missing program not named"

IWEMU_PROVIDER=/nonexistent/libiwemu-rdmav34.so "$run" true > "$tmp/out" 2>&1; rc=$?
[ $rc -eq 127 ] && grep -q "IWEMU_PROVIDER" "$tmp/out" || fail "unreadable IWEMU_PROVIDER not reported (rc $rc)"

# A launcher copied away from its libraries says where it looked.
cp "$run" "$tmp/iwemu-run"
env -u IWEMU_LIBDIR "$tmp/iwemu-run" true > "$tmp/out" 2>&1; rc=$?
[ $rc -eq 127 ] && grep -q "cannot find libiwemu-shim.so" "$tmp/out" || fail "missing shim not reported (rc $rc)"
# ... and IWEMU_LIBDIR points it at them.
libdir=$(dirname "$(dirname "$run")")/lib
IWEMU_LIBDIR="$libdir" "$tmp/iwemu-run" true || fail "IWEMU_LIBDIR=$libdir not honoured"

"$run" --env > "$tmp/env" || fail "--env"
for v in SYSFS_PATH IWEMU_PROVIDER LD_PRELOAD RDMAV_DRIVERS; do
    grep -q "^export $v='" "$tmp/env" || fail "--env lacks $v"
done

out=$(LD_PRELOAD=libm.so.6 "$run" sh -c 'echo "$LD_PRELOAD"') || fail "sh under iwemu-run"
case "$out" in *libiwemu-shim.so:libm.so.6) ;; *) fail "LD_PRELOAD not kept: $out" ;; esac

"$run" sh -c 'exit 7'; [ $? -eq 7 ] || fail "exit status not passed through"
echo "launcher ok"
