#!/bin/sh
# tshark's view of a draft-03 Start Key connection (issue 29): a Start Key
# each way ("MPA ident frame" + M=1 C=1, Initiator first), then seed 000's
# Figure 5 FPDU, in a hand-made pcap.  Recorded (tshark 4.x): its iWARP MPA
# dissector finds a connection only by the RFC 5044 Request/Reply keys, so the
# two keys show as undecoded TCP payload ("Data (16 bytes)") and the FPDU
# after them as "Data (52 bytes)": no MPA/DDP/RDMAP layer at all.  The test
# fails if that changes (then docs/interop.md needs the new view).  `iwemu
# decode` reads the same stream (cli.decode.startkey_*).  Exit 77 without tshark.
# usage: check_startkey_tshark.sh HERE FPDU_STREAM
set -u
here=$1 stream=$2
command -v tshark >/dev/null 2>&1 || { echo "tshark not installed: skipped"; exit 77; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
python3 "$here/startup_pcap.py" startkey "$stream" "$dir/sk.pcap" || exit 1
timeout 60 tshark -n -r "$dir/sk.pcap" -O iwarp_mpa,iwarp_ddp_rdmap > "$dir/out" 2>&1
fail=0
[ "$(grep -c '^Data (16 bytes)' "$dir/out")" = 2 ] || { echo "FAIL: the two Start Keys are not shown as 16 undecoded octets each"; fail=1; }
grep -q '^Data (52 bytes)' "$dir/out" || { echo "FAIL: the FPDU is not shown as 52 undecoded octets"; fail=1; }
if grep -q "iWARP" "$dir/out"; then echo "FAIL: tshark decodes iWARP here now"; fail=1; fi
[ $fail = 0 ] || { cat "$dir/out"; exit 1; }
echo "tshark shows both Start Keys and the FPDU after them as undecoded TCP data (Data 16/16/52 bytes)"
