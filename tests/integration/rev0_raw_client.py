#!/usr/bin/env python3
"""A raw-socket RDMA Consortium peer (RFC 5044 Appendix C): sends a Rev 0 MPA
Request (M=1, C=1) to PORT and checks the Reply.  usage: PORT accept|refuse
accept: a Rev 0 Reply with M=1, C=1, R=0 (permissive responder).
refuse: a Rev 1 Reply with R=1, then the connection closes."""
import socket
import sys

port, expect = int(sys.argv[1]), sys.argv[2]
request = b"MPA ID Req Frame" + bytes([0xC0, 0x00, 0x00, 0x00])
s = socket.create_connection(("127.0.0.1", port), timeout=10)
s.sendall(request)
reply = b""
while len(reply) < 20:
    chunk = s.recv(20 - len(reply))
    if not chunk:
        sys.exit(f"FAIL: closed after {len(reply)} octets of the Reply")
    reply += chunk
key, flags, rev = reply[:16], reply[16], reply[17]
if key != b"MPA ID Rep Frame":
    sys.exit(f"FAIL: Reply key {key!r}")
if expect == "accept":
    if rev != 0 or flags & 0xE0 != 0xC0:
        sys.exit(f"FAIL: expected Rev 0 M=1 C=1 R=0, got Rev {rev} flags {flags:#x}")
    print("Rev 0 Request served: Rev 0 Reply, M=1 C=1")
else:
    if rev != 1 or not flags & 0x20:
        sys.exit(f"FAIL: expected Rev 1 R=1, got Rev {rev} flags {flags:#x}")
    s.settimeout(5)
    rest = s.recv(4096 + (reply[18] << 8 | reply[19]))
    rest2 = s.recv(4096) if rest else b""
    if rest2:
        sys.exit("FAIL: the refusing Responder kept the connection open")
    print("Rev 0 Request refused: Rev 1 Reply with R=1, then close")
s.close()
