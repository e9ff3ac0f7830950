#!/usr/bin/env python3
"""A raw-socket draft-03 peer (seed 000 §8.1): sends a Start Key to PORT as
the draft's "Passive" side and checks the answer.  usage: PORT good|bad|variant
good:    "MPA ident frame" + M=1 C=1 Rev 0 (16 octets); expects the
         Responder's 16-octet Start Key (Rev 0) back, then nothing more
         before our first FPDU (rule 5).
variant: the same key followed by a zero Rev octet and a zero PD_Length
         (an RFC 5044-shaped reading of the lost figure); same answer.
bad:     "MPA ident framE"; expects the connection closed with no octet
         sent back (draft-03 §9 error 4, "invalid Start Key")."""
import socket
import sys

port, mode = int(sys.argv[1]), sys.argv[2]
key = b"MPA ident frame"
assert key == bytes.fromhex("4D 50 41 20 69 64 65 6E 74 20 66 72 61 6D 65")
msg = {"good": key + b"\xc0", "variant": key + b"\xc0\x00\x00\x00", "bad": b"MPA ident framE\xc0"}[mode]
s = socket.create_connection(("127.0.0.1", port), timeout=10)
s.sendall(msg)
got = b""
try:
    while len(got) < 16:
        chunk = s.recv(16 - len(got))
        if not chunk:
            break
        got += chunk
except ConnectionResetError:
    got += b"<RST>"
if mode == "bad":
    if got not in (b"", b"<RST>"):
        sys.exit(f"FAIL: bad key answered with {got!r}")
    print("invalid Start Key: connection closed, nothing sent back (error 4)")
    sys.exit(0)
if len(got) != 16 or got[:15] != key or got[15] & 0x0F != 0:
    sys.exit(f"FAIL: expected a Rev 0 Start Key, got {got!r}")
s.settimeout(0.3)
try:
    extra = s.recv(64)
except socket.timeout:
    extra = None
if extra:
    sys.exit(f"FAIL: the Responder sent {len(extra)} octets before our first FPDU (rule 5)")
print(f"Start Key answered: {got[15]:#04x} (M={got[15] >> 7} C={got[15] >> 6 & 1} Rev 0), nothing before our FPDU")
