#!/usr/bin/env python3
"""A TCP port forwarder that resets chosen connections right after their
first octets, as qemu's slirp (or any user-space forwarder) does when it has
accepted for a server that is not listening: the client sees its connect
succeed, then a reset.  usage: reset_forwarder.py LISTEN_PORT TARGET_PORT N...
(N: 1-based numbers of the connections to reset).  Prints one line per
connection it resets; exits when killed."""
import socket
import struct
import sys
import threading


def pump(src, dst):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    try:
        dst.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def main():
    listen_port, target_port = int(sys.argv[1]), int(sys.argv[2])
    to_reset = {int(n) for n in sys.argv[3:]}
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", listen_port))
    ls.listen(16)
    count = 0
    while True:
        conn, _ = ls.accept()
        count += 1
        if count in to_reset:
            conn.recv(20)  # the MPA Request's first octets
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.close()
            print(f"reset connection {count}", flush=True)
            continue
        upstream = socket.create_connection(("127.0.0.1", target_port))
        threading.Thread(target=pump, args=(conn, upstream), daemon=True).start()
        threading.Thread(target=pump, args=(upstream, conn), daemon=True).start()


if __name__ == "__main__":
    main()
