#!/usr/bin/env python3
"""Regenerate the seed corpora from the hex dumps of VECTORS.md.

usage: make_corpus.py /path/to/spec/VECTORS.md
Writes corpus/fuzz_mpa_frame/* and corpus/fuzz_fpdu_receiver/* next to this
script, in the input formats documented at the top of each fuzz target.
"""
import os
import re
import struct
import sys

here = os.path.dirname(os.path.abspath(__file__))
text = open(sys.argv[1]).read()

vectors = {}
for m in re.finditer(r"^### (V-[A-Z]+\d+)[^\n]*\n(.*?)(?=^### |^## |\Z)", text, re.S | re.M):
    block = re.search(r"```\n(.*?)```", m.group(2), re.S)
    if not block:
        continue
    octets = bytearray()
    for line in block.group(1).splitlines():
        parts = line.split()
        octets += bytes(int(p, 16) for p in parts[1:])
    vectors[m.group(1)] = bytes(octets)


def write(target, name, data):
    d = os.path.join(here, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# MPA frames: option octet = expected type (0 req, 1 rep, 2 rtr, 3 any) | eos << 2.
kinds = {"V-R1": 0, "V-R2": 1, "V-R3": 1, "V-R4": 0, "V-R5": 1, "V-R6": 0, "V-R7": 2, "V-R8": 2,
         "V-R9": 0, "V-R10": 1, "V-R11": 0, "V-R12": 1, "V-R13": 0, "V-R14": 1}
for vid, kind in kinds.items():
    write("fuzz_mpa_frame", vid, bytes([kind]) + vectors[vid])
    write("fuzz_mpa_frame", vid + "-any-eos", bytes([3 | 4]) + vectors[vid][:-1])
# An FPDU right behind the Reply.
write("fuzz_mpa_frame", "V-R2+V-F1", bytes([1]) + vectors["V-R2"] + vectors["V-F1"])


def rx_input(data, crc=True, markers=False, offset=0, chunking=0, max_len=0):
    opts = (1 if crc else 0) | (2 if markers else 0) | (chunking << 2)
    return bytes([opts]) + struct.pack(">IH", offset, max_len) + data


plain = [v for v in sorted(vectors) if v.startswith(("V-F", "V-X"))]
for vid in plain:
    write("fuzz_fpdu_receiver", vid, rx_input(vectors[vid]))
write("fuzz_fpdu_receiver", "all-plain-1octet", rx_input(b"".join(vectors[v] for v in plain), chunking=1))
write("fuzz_fpdu_receiver", "all-plain-chunked", rx_input(b"".join(vectors[v] for v in plain), chunking=3))
crc_off = bytearray(vectors["V-F1"])
crc_off[-4:] = b"\0\0\0\0"
write("fuzz_fpdu_receiver", "V-F1-crc-off", rx_input(bytes(crc_off), crc=False))
bad = bytearray(vectors["V-F1"])
bad[-1] ^= 1
write("fuzz_fpdu_receiver", "V-F1-bad-crc", rx_input(bytes(bad)))
for vid, off in (("V-M1", 0), ("V-M2", 0x1EC), ("V-M3", 500), ("V-M4", 992), ("V-M5", 1536)):
    write("fuzz_fpdu_receiver", vid, rx_input(vectors[vid], markers=True, offset=off))
write("fuzz_fpdu_receiver", "short-limit", rx_input(vectors["V-F3"], max_len=32))

# Round trip: options, then segments [ctl len_hi len_lo payload].
def seg(ctl, payload):
    return bytes([ctl]) + struct.pack(">H", len(payload)) + payload


rt = seg(0x00, b"hello iWARP") + seg(0x01, bytes(range(16))) + seg(0x2B, bytes(600))
write("fuzz_fpdu_roundtrip", "plain", bytes([0x01]) + struct.pack(">I", 0) + rt)
write("fuzz_fpdu_roundtrip", "markers-500", bytes([0x03]) + struct.pack(">I", 500) + rt)
write("fuzz_fpdu_roundtrip", "markers-chunk7", bytes([0x03 | 7 << 2]) + struct.pack(">I", 0xFFFFFE00) + rt)
write("fuzz_fpdu_roundtrip", "crc-off-1octet", bytes([0x02 | 1 << 2]) + struct.pack(">I", 1536) + rt)
print("corpus written:", len(vectors), "vectors")
