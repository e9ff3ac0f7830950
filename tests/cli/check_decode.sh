#!/bin/sh
# CTest driver for `iwemu decode`: run it on one stream, check the exit status
# and that every expected fixed string is in the output ("!text": must not be).
#
# usage: check_decode.sh IWEMU MODE STREAM EXIT "OPTIONS" [EXPECT...]
#   MODE  file  - iwemu decode OPTIONS STREAM
#         stdin - iwemu decode OPTIONS - < STREAM
#         raw   - iwemu OPTIONS            (STREAM ignored: --help etc.)
set -u
iwemu=$1 mode=$2 stream=$3 want_rc=$4 opts=$5
shift 5

out=$(mktemp) || exit 1
trap 'rm -f "$out"' EXIT
# Word splitting of $opts is intended (options never contain spaces).
case $mode in
file)  timeout 20 "$iwemu" decode $opts "$stream" >"$out" 2>&1 ;;
stdin) timeout 20 "$iwemu" decode $opts - <"$stream" >"$out" 2>&1 ;;
raw)   timeout 20 "$iwemu" $opts >"$out" 2>&1 ;;
*)     echo "bad mode $mode"; exit 1 ;;
esac
rc=$?

fail=0
if [ "$rc" -ne "$want_rc" ]; then
    echo "FAIL: exit status $rc, expected $want_rc"
    fail=1
fi
for p in "$@"; do
    case $p in
    !*) if grep -qF -- "${p#!}" "$out"; then echo "FAIL: unexpected: ${p#!}"; fail=1; fi ;;
    *)  if ! grep -qF -- "$p" "$out"; then echo "FAIL: missing: $p"; fail=1; fi ;;
    esac
done
if [ $fail -ne 0 ]; then
    echo "---- output of iwemu ($mode $opts $stream) ----"
    cat "$out"
fi
exit $fail
