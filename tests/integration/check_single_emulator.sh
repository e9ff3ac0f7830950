#!/bin/sh
# One emulator per process: only libiwemu-emulator.so may define the
# emulator; the shim and the provider must import it (a static copy in
# either would give a process two RNICs that cannot see each other's QPs).
# usage: check_single_emulator.sh EMULATOR_SO SHIM_SO PROVIDER_SO
set -u
emu="$1"; shim="$2"; prov="$3"
sym='_ZN5iwemu8Emulator8instanceEv'
nm -D --defined-only "$emu" | grep -q " $sym\$" || { echo "FAIL: $emu does not define Emulator::instance"; exit 1; }
for lib in "$shim" "$prov"; do
    if nm -D --defined-only "$lib" | grep -q " $sym\$" || nm --defined-only "$lib" 2>/dev/null | grep -q " $sym\$"; then
        echo "FAIL: $lib carries its own emulator"; exit 1
    fi
    readelf -d "$lib" | grep -q 'NEEDED.*\[libiwemu-emulator.so\]' || { echo "FAIL: $lib does not link libiwemu-emulator.so"; exit 1; }
done
echo "one emulator: $(basename "$emu") shared by $(basename "$shim") and $(basename "$prov")"
