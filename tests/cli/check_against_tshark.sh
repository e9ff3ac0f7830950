#!/bin/sh
# Cross-check `iwemu decode` against Wireshark's iWARP dissector (ORACLE.md):
# for each spec capture tshark decodes fully (pcaps 01-10, VECTORS §7), the
# ULPDU_Length sequence of each direction must be what iwemu decode prints for
# the same direction's raw stream.  Exit 77 (skipped) without tshark.
#
# usage: check_against_tshark.sh IWEMU PCAP_DIR STREAM_DIR
set -u
iwemu=$1 pcaps=$2 streams=$3
command -v tshark >/dev/null 2>&1 || { echo "tshark not installed: skipped"; exit 77; }
[ -d "$pcaps" ] || { echo "no $pcaps: skipped"; exit 77; }

fail=0
for pcap in "$pcaps"/0[1-9]_*.pcap "$pcaps"/10_*.pcap; do
    stem=$(basename "$pcap" .pcap)
    opts=""
    case $stem in 03_*|04_*) opts="--markers on" ;; esac
    fields=$(timeout 60 tshark -n --disable-protocol rpcordma --disable-protocol smb_direct -r "$pcap" \
             -Y iwarp_mpa.fpdu -T fields -e tcp.srcport -e iwarp_mpa.ulpdulength 2>/dev/null)
    for dir in init resp; do
        stream="$streams/$stem.$dir.bin"
        [ -f "$stream" ] || continue
        if [ $dir = resp ]; then
            want=$(printf '%s\n' "$fields" | awk '$1 == 50001 { print $2 }' | tr ',' '\n' | grep . | tr '\n' ' ')
        else
            want=$(printf '%s\n' "$fields" | awk '$1 != 50001 { print $2 }' | tr ',' '\n' | grep . | tr '\n' ' ')
        fi
        got=$(timeout 20 "$iwemu" decode $opts "$stream" | grep -o 'ulpdu_length=[0-9]*' | cut -d= -f2 | tr '\n' ' ')
        if [ "$want" != "$got" ]; then
            echo "FAIL $stem.$dir: tshark [$want] iwemu [$got]"
            fail=1
        else
            echo "ok   $stem.$dir: [$got]"
        fi
    done
done
exit $fail
