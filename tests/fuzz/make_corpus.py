#!/usr/bin/env python3
"""Regenerate the seed corpora from the hex dumps of VECTORS.md.

usage: make_corpus.py /path/to/spec/VECTORS.md
Writes corpus/fuzz_mpa_frame/*, corpus/fuzz_fpdu_receiver/*,
corpus/fuzz_fpdu_roundtrip/* and corpus/fuzz_qp_receive/* next to this script,
in the input formats documented at the top of each fuzz target.  Files named
by a SHA-1 are not generated: they are the minimized growth of the 10-minute
runs recorded in docs/robustness.md (libFuzzer -merge=1), kept so that CI's
short runs start deeper.
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


# ---- fuzz_qp_receive: whole FPDU streams against the target's fixed memory layout.
# Mirrors the constants at the top of fuzz_qp_receive.cpp (arena address, region
# order, STags from Config::stag_key_seed 0x1F00D); the target checks the STags.
ARENA, PAGE, BAND, REGION = 0x200000000000, 4096, 512, 4096
W, Z, R, N, P, RECV, SINK = range(7)
STAG = [0x105, 0x249, 0x305, 0x4EA, 0x5D1, 0x6C2, 0x73C]


IOVA = {Z: 0, RECV: 0x70000000, SINK: 0}  # regions not registered at their address


def va(region, off=0):
    """Tagged Offset of octet `off` of a region."""
    if region in IOVA:
        return IOVA[region] + off
    return ARENA + PAGE + BAND + region * (BAND + REGION) + off


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


class Stream:
    """The peer's side of one direction: FPDUs with PAD, CRC and markers (RFC 5044 §4)."""

    def __init__(self, crc=True, markers=False):
        self.crc, self.markers, self.pos, self.out = crc, markers, 0, bytearray()

    def fpdu(self, ulpdu):
        body = struct.pack(">H", len(ulpdu)) + ulpdu + bytes((4 - (2 + len(ulpdu)) % 4) % 4)
        f = bytearray()
        start = None
        for i, b in enumerate(body):
            if self.markers and self.pos % 512 == 0:
                f += struct.pack(">HH", 0, 0 if i == 0 else self.pos - start)
                self.pos += 4
            if i == 0:
                start = self.pos
            f.append(b)
            self.pos += 1
        if self.markers and self.pos % 512 == 0:
            f += struct.pack(">HH", 0, self.pos - start)
            self.pos += 4
        f += struct.pack("<I", crc32c(f) if self.crc else 0)
        self.pos += 4
        self.out += f
        return self


def tagged(op, stag, to, payload=b"", last=True):
    return bytes([0xC1 if last else 0x81, 0x40 | op]) + struct.pack(">IQ", stag, to) + payload


def untagged(op, qn, msn, mo=0, payload=b"", last=True, inv=0):
    return bytes([0x41 if last else 0x01, 0x40 | op]) + struct.pack(">IIII", inv, qn, msn, mo) + payload


def read_request(msn, sink_stag, sink_to, size, src_stag, src_to):
    return untagged(1, 1, msn, payload=struct.pack(">IQIIQ", sink_stag, sink_to, size, src_stag, src_to))


def atomic_request(msn, aopcode, stag, to, data, data_mask=0, compare=0, compare_mask=0xFFFFFFFFFFFFFFFF, req_id=1):
    # RFC 7306 §5.2.1: Reserved ‖ AOpCode, Request Identifier, STag, TO, four 64-bit operands.
    return untagged(10, 1, msn, payload=struct.pack(">IIIQQQQQ", aopcode, req_id, stag, to, data, data_mask,
                                                    compare, compare_mask))


def terminate(layer, etype, code, hdrs=b"", d=False, r=False, seg_len=0):
    ctl = struct.pack(">BBBB", layer << 4 | etype, code, (0x40 if d else 0) | (0x20 if r else 0), 0)
    return untagged(7, 2, 1, payload=ctl + (struct.pack(">H", seg_len) if d else b"") + hdrs)


def qp(name, stream, crc=True, markers=False, srq=False, responder=False, rtr=0, read=False, multi_sge=False,
       ird=4, receives=4, bad_access=False, bad_pd=False):
    s0 = (crc * 1) | (markers * 2) | (srq * 4) | (responder * 8) | (rtr << 4) | (read * 0x40) | (multi_sge * 0x80)
    s1 = (ird - 1) | receives << 3 | (bad_access * 0x40) | (bad_pd * 0x80)
    write("fuzz_qp_receive", name, bytes([s0, s1]) + bytes(stream.out))


text_payload = bytes(range(256))
for crc, markers, tag in ((True, False, ""), (False, False, "-crc-off"), (True, True, "-markers")):
    def st():
        return Stream(crc, markers)
    qp("send" + tag, st().fpdu(untagged(3, 0, 1, payload=b"hello iWARP"))
       .fpdu(untagged(3, 0, 2, 0, text_payload[:150], last=False))
       .fpdu(untagged(3, 0, 2, 150, text_payload[150:300]))
       .fpdu(untagged(5, 0, 3, payload=b"solicited")), crc, markers)
    qp("write" + tag, st().fpdu(tagged(0, STAG[W], va(W, 100), text_payload[:200]))
       .fpdu(tagged(0, STAG[W], va(W, 1000), bytes(1200), last=False))
       .fpdu(tagged(0, STAG[W], va(W, 2200), bytes(1896)))
       .fpdu(tagged(0, STAG[Z], va(Z, 4000), text_payload[:96]))
       .fpdu(tagged(0, 0, 0)), crc, markers)
    qp("read-request" + tag, st().fpdu(read_request(1, 0xABCD, 0, 2048, STAG[W], va(W, 0)))
       .fpdu(read_request(2, 0xABCD, 2048, 4096, STAG[R], va(R, 0)))
       .fpdu(read_request(3, 0xABCD, 0, 0, STAG[R], va(R, 0))), crc, markers)
    qp("read-response" + tag, st().fpdu(tagged(2, STAG[SINK], va(SINK, 64), text_payload * 2, last=False))
       .fpdu(tagged(2, STAG[SINK], va(SINK, 64 + 512), text_payload * 2)), crc, markers, read=True)

st = Stream
qp("send-srq-multisge", st().fpdu(untagged(3, 0, 1, payload=text_payload[:101]))
   .fpdu(untagged(3, 0, 2, payload=text_payload[:245])).fpdu(untagged(3, 0, 3)), srq=True, multi_sge=True)
qp("send-too-long", st().fpdu(untagged(3, 0, 1, payload=bytes(401))))
qp("send-no-wqe", st().fpdu(untagged(3, 0, 1, payload=b"x")), receives=0)
qp("send-bad-msn", st().fpdu(untagged(3, 0, 7, payload=b"x")))
qp("send-bad-mo", st().fpdu(untagged(3, 0, 1, 8, payload=b"x")))
qp("send-lkey-no-local-write", st().fpdu(untagged(3, 0, 1, payload=b"x")), bad_access=True)
qp("send-lkey-other-pd", st().fpdu(untagged(3, 0, 1, payload=b"x")), bad_pd=True)
qp("send-with-invalidate", st().fpdu(untagged(4, 0, 1, payload=b"inv", inv=STAG[W]))
   .fpdu(untagged(6, 0, 2, payload=b"inv-se", inv=STAG[P])))
qp("write-no-right", st().fpdu(tagged(0, STAG[R], va(R, 0), b"no")))
qp("write-other-pd", st().fpdu(tagged(0, STAG[P], va(P, 0), b"no")))
qp("write-no-remote", st().fpdu(tagged(0, STAG[N], va(N, 0), b"no")))
qp("write-past-end", st().fpdu(tagged(0, STAG[W], va(W, 4090), b"0123456789")))
qp("write-before-start", st().fpdu(tagged(0, STAG[Z], 0xFFFFFFFFFFFFFFFC, b"01234567")))
qp("write-bad-key", st().fpdu(tagged(0, STAG[W] ^ 1, va(W, 0), b"no")))
qp("read-request-ird-overflow", st().fpdu(read_request(1, 1, 0, 8, STAG[W], va(W, 0)))
   .fpdu(read_request(2, 1, 0, 8, STAG[W], va(W, 0))), ird=1)
qp("read-request-no-right", st().fpdu(read_request(1, 1, 0, 8, STAG[Z], 0)))
qp("read-request-past-end", st().fpdu(read_request(1, 1, 0, 64, STAG[R], va(R, 4090))))
qp("read-response-unexpected", st().fpdu(tagged(2, STAG[SINK], va(SINK, 64), b"x")))
qp("read-response-too-long", st().fpdu(tagged(2, STAG[SINK], va(SINK, 64), bytes(1025))), read=True)
qp("read-response-wrong-to", st().fpdu(tagged(2, STAG[SINK], va(SINK, 0), b"x")), read=True)
qp("terminate-no-headers", st().fpdu(terminate(2, 0, 2)))
qp("terminate-ddp-tagged", st().fpdu(terminate(1, 1, 0, tagged(0, STAG[W], 0), d=True, seg_len=14)))
qp("terminate-rdma", st().fpdu(terminate(0, 1, 5, untagged(1, 1, 1) + bytes(28), d=True, r=True, seg_len=46)))
qp("rtr-send", st().fpdu(untagged(3, 0, 1)).fpdu(untagged(3, 0, 2, payload=b"after rtr")), responder=True, rtr=1)
qp("rtr-write", st().fpdu(tagged(0, 0, 0)).fpdu(untagged(3, 0, 1, payload=b"after rtr")), responder=True, rtr=2)
qp("rtr-read", st().fpdu(read_request(1, 0, 0, 0, 0, 0)).fpdu(untagged(3, 0, 1, payload=b"x")),
   responder=True, rtr=3)
qp("immediate-data", st().fpdu(untagged(8, 0, 1, payload=bytes(8))))
qp("atomic-fetch-add", st().fpdu(atomic_request(1, 0, STAG[W], va(W, 8), 5))
   .fpdu(atomic_request(2, 2, STAG[W], va(W, 8), 9, 0xFFFFFFFFFFFFFFFF, 5, req_id=2))
   .fpdu(atomic_request(3, 0, STAG[W], va(W, 16), 1, 1 << 31)))
qp("atomic-misaligned", st().fpdu(atomic_request(1, 0, STAG[W], va(W, 4), 1)))
qp("atomic-no-right", st().fpdu(atomic_request(1, 2, STAG[R], va(R, 0), 1)))
qp("atomic-response-unexpected", st().fpdu(untagged(11, 3, 1, payload=bytes(12))))
qp("bad-ddp-version", st().fpdu(bytes([0x42, 0x43]) + untagged(3, 0, 1)[2:]))
mixed = (st().fpdu(untagged(3, 0, 1, payload=b"first")).fpdu(tagged(0, STAG[W], va(W, 0), text_payload))
         .fpdu(read_request(1, 0xABCD, 0, 256, STAG[W], va(W, 0))).fpdu(tagged(2, STAG[SINK], va(SINK, 64), b"resp"))
         .fpdu(untagged(5, 0, 2, payload=b"second")))
qp("mixed", mixed, read=True)
print("corpus written:", len(vectors), "vectors")
