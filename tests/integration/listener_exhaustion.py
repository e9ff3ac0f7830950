#!/usr/bin/env python3
"""An rdma_cm listener under iwemu-run against clients that never finish MPA startup.

usage: listener_exhaustion.py IWEMU_RUN [ATTACKERS]

The server is the distro's `rping -s -P` (persistent: one thread per client).
After a warm-up client, ATTACKERS (default 2 x the half-open cap of 64) TCP
connections are opened to its port and left hanging: a third send nothing,
a third send half of the 16-octet MPA Request key, a third a whole Request
header announcing 512 octets of private data followed by only 100 of them
(RFC 5044 §7.1).  Issue 7 asks, and this test asserts:

  (a) a real client (`rping -c -V`) connects and verifies its pings while the
      attack connections are open: at the half-open cap each new connection
      evicts the oldest one without a complete Request, so the listener keeps
      accepting;
  (b) the server closes every attack connection (EOF or reset seen here):
      those beyond the cap were made way for (evicted, early), the last
      HALF_OPEN_CAP - 1 at the MPA timeout (IWEMU_MPA_TIMEOUT_MS, short here)
      and not before it;
  (c) the server's descriptors stay within the cap and its resident memory
      bounded while under attack, and both return near the warm-up level once
      the attack connections are gone.

Every wait is bounded; the server is killed on any way out.
"""
import os
import random
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

HALF_OPEN_CAP = 64            # default of IWEMU_MAX_HALF_OPEN (emulator/cm/cm_settings.h)
MPA_TIMEOUT_MS = 2000         # server's IWEMU_MPA_TIMEOUT_MS
CLIENT_MPA_TIMEOUT_MS = 60000  # the real client may wait in the kernel backlog
FD_SLACK = 8                  # listener, CM/engine descriptors opened on demand
RSS_SLACK_MB = 24             # per whole attack, not per connection
RSS_SLACK_MB_ASAN = 96        # ASan keeps freed memory in quarantine
PINGS = 20

MPA_REQ_KEY = b"MPA ID Req Frame"  # RFC 5044 §7.1


def fail(msg):
    print(f"FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def free_port():
    for _ in range(50):
        port = random.randint(20000, 31999)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue
    fail("no free port")


def listening(port):
    out = subprocess.run(["ss", "-Hltn", f"sport = :{port}"], capture_output=True, text=True).stdout
    return bool(out.strip())


def start_rping_server(run, port, env):
    """`rping -s -P` under iwemu-run (which execs rping: the Popen's pid is the
    server's); returns (server, stderr log) once it listens on port."""
    log = tempfile.TemporaryFile(mode="w+")
    server = subprocess.Popen([run, "rping", "-s", "-P", "-a", "127.0.0.1", "-p", str(port),
                               "-S", "4096", "-V"],
                              env=env, stdout=subprocess.DEVNULL, stderr=log)
    deadline = time.monotonic() + 20
    while not listening(port):
        if server.poll() is not None:
            log.seek(0)
            fail(f"server exited ({server.returncode}) before listening: {log.read()[-2000:]}")
        if time.monotonic() > deadline:
            server.kill()
            fail("server does not listen after 20 s")
        time.sleep(0.05)
    return server, log


def fd_count(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def sanitized(pid):
    with open(f"/proc/{pid}/maps") as f:
        return "asan" in f.read()


def mpa_request_header(pd_length):
    # Key, then M C R res Rev (one octet of flags, one reserved, Rev 1), PD_Length.
    return MPA_REQ_KEY + struct.pack("!BBH", 0x40, 1, pd_length)


def run_client(run, port, label):
    env = dict(os.environ, IWEMU_MPA_TIMEOUT_MS=str(CLIENT_MPA_TIMEOUT_MS))
    start = time.monotonic()
    try:
        p = subprocess.run([run, "rping", "-c", "-a", "127.0.0.1", "-p", str(port),
                            "-C", str(PINGS), "-S", "4096", "-V", "-v"],
                           env=env, capture_output=True, text=True, timeout=70)
    except subprocess.TimeoutExpired:
        fail(f"{label} rping client did not finish within 70 s")
    took = time.monotonic() - start
    verified = sum(1 for line in p.stdout.splitlines() if line.startswith("ping data:"))
    # rping's own exit race (tests/integration/rdmacm_rping.sh): EBADF after DISCONNECTED.
    race = p.returncode == 255 and "rdma_get_cm_event: Bad file descriptor" in p.stdout + p.stderr
    if (p.returncode != 0 and not race) or verified != PINGS:
        print(p.stdout[-3000:], p.stderr[-3000:], sep="\n")
        fail(f"{label} rping client: rc={p.returncode}, {verified} of {PINGS} pings verified")
    return took


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    run = sys.argv[1]
    attackers = int(sys.argv[2]) if len(sys.argv) > 2 else 2 * HALF_OPEN_CAP

    port = free_port()
    env = dict(os.environ, IWEMU_MPA_TIMEOUT_MS=str(MPA_TIMEOUT_MS))
    server, server_log = start_rping_server(run, port, env)
    socks = []
    try:
        # Warm-up: the emulator creates its threads and descriptors on first use.
        run_client(run, port, "warm-up")
        time.sleep(0.2)  # the server's per-client thread tears its QP down
        base_fds, base_rss = fd_count(server.pid), rss_kib(server.pid)
        asan = sanitized(server.pid)
        rss_slack = (RSS_SLACK_MB_ASAN if asan else RSS_SLACK_MB) * 1024
        print(f"warm-up done: server fds={base_fds} rss={base_rss} KiB{' (ASan)' if asan else ''}")

        # The attack: non-blocking connects (beyond the cap and the backlog the
        # kernel holds SYNs, which it retransmits).
        attack_start = time.monotonic()
        for i in range(attackers):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", port))
            socks.append({"sock": s, "kind": i % 3, "sent": False, "eof": None})

        def sample(peak):
            return max(peak[0], fd_count(server.pid)), max(peak[1], rss_kib(server.pid))

        def service(timeout):
            """Sends each connection's partial Request once it is connected;
            records the time of EOF/reset on each."""
            pending = [c for c in socks if c["eof"] is None]
            if not pending:
                return
            w = [c["sock"] for c in pending if not c["sent"] and c["kind"] != 0]
            r, wr, _ = select.select([c["sock"] for c in pending], w, [], timeout)
            for c in pending:
                s = c["sock"]
                if s in wr and not c["sent"]:
                    try:
                        if c["kind"] == 1:
                            s.send(MPA_REQ_KEY[:8])
                        else:
                            s.send(mpa_request_header(512) + b"\x00" * 100)
                    except (BlockingIOError, ConnectionError):
                        pass
                    c["sent"] = True
                if s in r:
                    try:
                        data = s.recv(4096)
                    except BlockingIOError:
                        continue
                    except ConnectionError:
                        data = b""
                    if data:
                        fail(f"server answered a partial MPA Request: {data[:32]!r}")
                    c["eof"] = time.monotonic() - attack_start

        # Until the cap is reached (or some time passed), then the real client.
        peak = (base_fds, base_rss)
        until = time.monotonic() + 1.0
        while time.monotonic() < until:
            service(0.05)
            peak = sample(peak)
            if peak[0] >= base_fds + HALF_OPEN_CAP:
                break
        print(f"attack: {attackers} connections, server fds={peak[0]} after {time.monotonic() - attack_start:.2f} s")

        # (a) A real client while the attack connections are open.  It runs in
        # the background so that the attack sockets keep being serviced.
        open_now = sum(1 for c in socks if c["eof"] is None)
        client_env = dict(os.environ, IWEMU_MPA_TIMEOUT_MS=str(CLIENT_MPA_TIMEOUT_MS))
        client_start = time.monotonic()
        client_log = tempfile.TemporaryFile(mode="w+")  # -v prints every ping: more than a pipe holds
        client = subprocess.Popen([run, "rping", "-c", "-a", "127.0.0.1", "-p", str(port),
                                   "-C", str(PINGS), "-S", "4096", "-V", "-v"],
                                  env=client_env, stdout=client_log, stderr=subprocess.STDOUT)
        client_deadline = client_start + 70
        while client.poll() is None:
            if time.monotonic() > client_deadline:
                client.kill()
                client.wait()
                client_log.seek(0)
                print(client_log.read()[-4000:])
                fail("real rping client did not finish within 70 s under attack")
            service(0.05)
            peak = sample(peak)
        client_log.seek(0)
        out = client_log.read()
        client_took = time.monotonic() - client_start
        verified = sum(1 for line in out.splitlines() if line.startswith("ping data:"))
        race = client.returncode == 255 and "rdma_get_cm_event: Bad file descriptor" in out
        if (client.returncode != 0 and not race) or verified != PINGS:
            print(out[-4000:])
            fail(f"real client under attack: rc={client.returncode}, {verified} of {PINGS} pings verified")
        print(f"(a) real client: {PINGS} pings verified in {client_took:.2f} s "
              f"({open_now} attack connections open when it started)")

        # (b) Every attack connection closed by the server, none too early.
        bound = time.monotonic() + 60
        while any(c["eof"] is None for c in socks):
            if time.monotonic() > bound:
                left = sum(1 for c in socks if c["eof"] is None)
                fail(f"{left} of {attackers} attack connections still open 60 s after the MPA timeout")
            service(0.1)
            peak = sample(peak)
        eofs = sorted(c["eof"] for c in socks)
        # Evictions: one per connection accepted beyond the cap, the real
        # client's included.  The rest waited for the MPA timeout.
        early = sum(1 for t in eofs if t < 0.9 * MPA_TIMEOUT_MS / 1000)
        if early > max(0, attackers + 1 - HALF_OPEN_CAP):
            fail(f"{early} attack connections closed before the MPA timeout; at most "
                 f"{max(0, attackers + 1 - HALF_OPEN_CAP)} evictions are due (cap {HALF_OPEN_CAP})")
        if attackers >= HALF_OPEN_CAP and len(eofs) - early < HALF_OPEN_CAP - 1:
            fail(f"only {len(eofs) - early} attack connections lasted until the MPA timeout; "
                 f"the cap is {HALF_OPEN_CAP}")
        print(f"(b) all {attackers} attack connections closed by the server, "
              f"{early} evicted early (first after {eofs[0]:.2f} s), "
              f"the rest at the MPA timeout (last after {eofs[-1]:.2f} s)")

        # (c) Bounded while under attack, back near the start afterwards.
        if peak[0] > base_fds + HALF_OPEN_CAP + FD_SLACK:
            fail(f"server fds peaked at {peak[0]} (start {base_fds}, cap {HALF_OPEN_CAP})")
        if peak[1] > base_rss + rss_slack:
            fail(f"server RSS peaked at {peak[1]} KiB (start {base_rss} KiB)")
        for s in socks:
            s["sock"].close()
        socks = []
        settle = time.monotonic() + 10
        while True:
            fds, rss = fd_count(server.pid), rss_kib(server.pid)
            if fds <= base_fds + 2 or time.monotonic() > settle:
                break
            time.sleep(0.1)
        if fds > base_fds + 2:
            fail(f"server fds {fds} after the attack (start {base_fds})")
        if rss > base_rss + rss_slack:
            fail(f"server RSS {rss} KiB after the attack (start {base_rss} KiB)")
        print(f"(c) server fds: start {base_fds}, peak {peak[0]}, after {fds}; "
              f"RSS KiB: start {base_rss}, peak {peak[1]}, after {rss}")

        # And the listener still serves.
        took = run_client(run, port, "after-attack")
        print(f"listener still serves: {PINGS} pings in {took:.2f} s")
        if server.poll() is not None:
            server_log.seek(0)
            fail(f"server exited ({server.returncode}): {server_log.read()[-2000:]}")
        return 0
    finally:
        for c in socks:
            c["sock"].close()
        if server.poll() is None:
            server.send_signal(signal.SIGKILL)
        server.wait()


if __name__ == "__main__":
    sys.exit(main())
