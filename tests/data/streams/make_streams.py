#!/usr/bin/env python3
"""Regenerate the raw one-direction TCP byte streams used by tests/cli.

  <pcap-stem>.init.bin / .resp.bin   payload of every TCP segment of one
                                     direction of spec/pcaps/*.pcap, in order
                                     (extracted with tshark; Initiator = the
                                     side sending to port 50001)
  synth_*.bin                        streams built here from the VECTORS.md
                                     hex, most of them deliberately malformed

Usage: make_streams.py [PCAP_DIR]   (default /work/shared/spec/pcaps)
Needs tshark for the pcap part; the committed .bin files make the tests
independent of it.
"""
import glob
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def h(s):
    return bytes.fromhex(s.replace(" ", "").replace("\n", ""))


def fpdu(ulpdu, crc=True):
    """ULPDU_Length | ULPDU | PAD | CRC (LSB first), no markers (RFC 5044 §4)."""
    f = len(ulpdu).to_bytes(2, "big") + ulpdu
    f += b"\0" * ((4 - len(f) % 4) % 4)
    v = crc32c(f) if crc else 0
    return f + v.to_bytes(4, "little")


def write(name, data):
    with open(os.path.join(HERE, name), "wb") as out:
        out.write(data)


def extract_pcaps(pcap_dir):
    tshark = ["tshark", "-n", "--disable-protocol", "rpcordma", "--disable-protocol", "smb_direct"]
    for pcap in sorted(glob.glob(os.path.join(pcap_dir, "*.pcap"))):
        stem = os.path.basename(pcap)[:-5]
        for suffix, flt in (("init", "tcp.dstport==50001"), ("resp", "tcp.srcport==50001")):
            out = subprocess.run(tshark + ["-r", pcap, "-Y", flt + " && tcp.len>0", "-T", "fields",
                                           "-e", "tcp.payload"], check=True, capture_output=True, text=True).stdout
            data = b"".join(bytes.fromhex(line.replace(":", "")) for line in out.split())
            if data:
                write(f"{stem}.{suffix}.bin", data)


V_R1 = h("4d 50 41 20 49 44 20 52 65 71 20 46 72 61 6d 65 40 01 00 09 69 77 65 6d 75 2d 72 65 71")
V_R2 = h("4d 50 41 20 49 44 20 52 65 70 20 46 72 61 6d 65 40 01 00 00")
V_F1 = h("00 1d 41 43 00 00 00 00 00 00 00 00 00 00 00 01 00 00 00 00 68 65 6c 6c 6f 20 69 57 41 52 50 00"
         "05 d0 2e 4c")
SEND_ULPDU = V_F1[2:31]  # V-F1's ULPDU: untagged Send "hello iWARP"
V_F2 = h("00 1e c1 40 12 34 56 78 00 00 00 00 00 00 10 00 00 01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e 0f"
         "81 cd 8e ad")
V_F3 = h("00 2e 41 41 00 00 00 00 00 00 00 01 00 00 00 01 00 00 00 00 aa bb cc dd 00 00 00 00 00 00 20 00"
         "00 00 10 00 11 22 33 44 00 00 00 00 00 00 80 00 e5 d4 77 06")


def synthesize():
    assert fpdu(SEND_ULPDU) == V_F1
    # Request key with one octet changed ("MPA ID Rxq Frame"): LLP/MPA/0x04.
    write("synth_bad_key.bin", V_R1[:8] + b"\x78" + V_R1[9:] + V_F1)
    # PD_Length 513 > 512 (MPA-041): LLP/MPA/0x04.
    write("synth_pd_too_long.bin", V_R1[:18] + (513).to_bytes(2, "big") + b"x" * 513)
    # Send with DV=2 (control 0x42), CRC correct: DDP 1/2/06.
    write("synth_ddp_version.bin", V_R1 + fpdu(b"\x42" + SEND_ULPDU[1:]))
    # Write with DV=0 (control 0xC0): DDP 1/1/04.
    write("synth_ddp_version_tagged.bin", V_R1 + fpdu(b"\xc0" + V_F2[3:32]))
    # Send with RV=0 (RDMAP control 0x03): RDMAP 0/2/05.
    write("synth_rdmap_version.bin", V_R1 + fpdu(b"\x41\x03" + SEND_ULPDU[2:]))
    # Opcode 0xC: RDMAP 0/2/06.
    write("synth_unknown_opcode.bin", V_R1 + fpdu(b"\x41\x4c" + SEND_ULPDU[2:]))
    # Send on QN 5: DDP 1/2/01.
    write("synth_invalid_qn.bin", V_R1 + fpdu(SEND_ULPDU[:6] + (5).to_bytes(4, "big") + SEND_ULPDU[10:]))
    # V-F1 with its last CRC octet flipped (like pcaps/10): LLP/MPA/0x02.
    write("synth_bad_crc.bin", V_R1 + V_F1[:-1] + bytes([V_F1[-1] ^ 1]))
    # Stream ends 20 octets into V-F2: truncated, LLP/MPA/0x01.
    write("synth_truncated_fpdu.bin", V_R1 + V_F1 + V_F2[:20])
    # Request cut inside its Private Data.
    write("synth_truncated_request.bin", V_R1[:25])
    # ULPDU_Length 10, smaller than any DDP header.
    write("synth_short_ulpdu.bin", V_R1 + fpdu(SEND_ULPDU[:10]))
    # Reply + Terminate 2/0/02 laid out as Linux siw on x86 sends it
    # (02 02 00 00 instead of 20 02 00 00): decodes, layout reported.
    term_siw = h("41 47 00 00 00 00 00 00 00 02 00 00 00 01 00 00 00 00 02 02 00 00")
    write("synth_siw_terminate.bin", V_R2 + fpdu(term_siw))
    # The same Terminate for V-F3 (0/1/00, M D R) in siw layout: 10 00 07 00.
    term_vf7_siw = (h("41 47 00 00 00 00 00 00 00 02 00 00 00 01 00 00 00 00 10 00 07 00 00 2e") + V_F3[2:48])
    write("synth_siw_terminate_headers.bin", V_R2 + fpdu(term_vf7_siw))
    # V-M3: V-F1 with markers at stream offset 500 (decode with --start fpdu
    # --markers on --offset 500): a marker 12 octets into the FPDU.
    write("synth_vm3_offset500.bin", h("00 1d 41 43 00 00 00 00 00 00 00 00 00 00 00 0c 00 00 00 01 00 00 00 00"
                                       "68 65 6c 6c 6f 20 69 57 41 52 50 00 77 f2 17 c8"))
    # V-M3 with FPDUPTR 16 instead of 12, CRC recomputed over the changed
    # marker: MPA error 3, Marker and ULPDU_Length disagree (LLP/MPA/0x03).
    vm3 = bytearray(h("00 1d 41 43 00 00 00 00 00 00 00 00 00 00 00 0c 00 00 00 01 00 00 00 00"
                      "68 65 6c 6c 6f 20 69 57 41 52 50 00 77 f2 17 c8"))
    assert crc32c(vm3[:36]).to_bytes(4, "little") == vm3[36:]
    vm3[15] = 0x10
    vm3[36:] = crc32c(vm3[:36]).to_bytes(4, "little")
    write("synth_marker_mismatch.bin", bytes(vm3))
    # Mid-connection start: V-F1, V-F3, V-F2 without any startup frame.
    write("synth_fpdus_only.bin", V_F1 + V_F3 + V_F2)
    # draft-03 Start Key (seed 000 §8.1.1: "MPA ident frame" + M=1 C=1 Rev 0,
    # iwemu's 16-octet reading) before seed 000's Figure 5 FPDU (marker, Send
    # at version 0); the RFC 5044-shaped variant (zero Rev octet and
    # PD_Length after the key); and an invalid key (draft-03 error 4).
    key = b"MPA ident frame"
    assert key == h("4D 50 41 20 69 64 65 6E 74 20 66 72 61 6D 65")
    with open(os.path.join(HERE, "21_rev0_seed000_figure5.fpdu.bin"), "rb") as f:
        figure5 = f.read()
    write("22_startkey_seed000_figure5.init.bin", key + b"\xc0" + figure5)
    write("synth_startkey_variant.bin", key + b"\xc0\x00\x00\x00" + figure5)
    write("synth_startkey_bad.bin", b"MPA ident framE\xc0" + figure5)


if __name__ == "__main__":
    synthesize()
    if len(sys.argv) > 1 or os.path.isdir("/work/shared/spec/pcaps"):
        extract_pcaps(sys.argv[1] if len(sys.argv) > 1 else "/work/shared/spec/pcaps")
