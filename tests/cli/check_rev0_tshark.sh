#!/bin/sh
# tshark's view of an RDMA Consortium connection (issue 29): seed 000's
# Figure 5 FPDU after a Rev 0 Request/Reply, in a hand-made pcap.  Recorded
# (tshark 4.x): it decodes Rev 0 frames and version-0 FPDUs -- "Revision: 0",
# "DDP protocol version: 0", RDMAP "Version: 0", OpCode Send, CRC 0x4c86b384
# "Good CRC32", the opening marker with FPDU back pointer 0.  Exit 77 without tshark.
# usage: check_rev0_tshark.sh HERE FPDU_STREAM
set -u
here=$1 stream=$2
command -v tshark >/dev/null 2>&1 || { echo "tshark not installed: skipped"; exit 77; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
python3 "$here/startup_pcap.py" rev0 "$stream" "$dir/rev0.pcap" || exit 1
timeout 60 tshark -n -r "$dir/rev0.pcap" -O iwarp_mpa,iwarp_ddp_rdmap > "$dir/out" 2>&1
fail=0
for want in "Revision: 0" "Marker flag: True" "CRC flag: True" "ULPDU length: 42 bytes" \
            "CRC check: 0x4c86b384 (Good CRC32)" "FPDU back pointer: 0 bytes" \
            ".... ..00 = DDP protocol version: 0" "00.. .... = Version: 0" "OpCode: Send (0x3)" \
            "Message sequence number: 1"; do
    grep -qF "$want" "$dir/out" || { echo "FAIL: tshark did not show '$want'"; fail=1; }
done
[ $fail = 0 ] || { cat "$dir/out"; exit 1; }
echo "tshark decodes the Rev 0 startup and the version-0 FPDU (Good CRC32, DV 0, RV 0)"
