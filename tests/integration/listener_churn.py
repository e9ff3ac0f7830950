#!/usr/bin/env python3
"""An rdma_cm listener under iwemu-run against an attacker who keeps reopening
silent TCP connections, while real clients connect.

usage: listener_churn.py IWEMU_RUN

The server is the distro's `rping -s -P` with a half-open cap of 4
(IWEMU_MAX_HALF_OPEN) and a long MPA timeout (IWEMU_MPA_TIMEOUT_MS=20000).
An attacker thread keeps 2 x cap silent connections open: as soon as the
server closes one it opens another (paced, one new connection every few
milliseconds, so the test does not eat the machine).  At the cap each new
connection evicts the oldest silent one once that one has had its grace
(CmSettings::half_open_grace, 250 ms: late Requests of a burst of real
clients are not evicted), so this asserts:

  (a) real `rping -c -V` clients, one after the other while the attack goes
      on, each verify their pings within CLIENT_BOUND_S, well below the MPA
      timeout (a listener that stopped accepting at the cap would keep them
      waiting for at least one MPA timeout, as the attacker refills every
      freed slot at once);
  (b) the server keeps closing attack connections (EOF or reset seen here,
      never data), long before the MPA timeout: steadily in the ATTACK_GAP_S
      before each client (about cap per grace), and at least once during its
      run (the client's own connection, accepted at the cap, makes way for a
      silent one);
  (c) the server's descriptors stay within the cap (+ slack) throughout.

Every wait is bounded; the server is killed on any way out.
"""
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from listener_exhaustion import fail, fd_count, free_port, start_rping_server  # noqa: E402

HALF_OPEN_CAP = 4             # server's IWEMU_MAX_HALF_OPEN
MPA_TIMEOUT_MS = 20000        # server's IWEMU_MPA_TIMEOUT_MS
CLIENT_MPA_TIMEOUT_MS = 60000  # the client's own limit stays out of the way
CLIENT_BOUND_S = 8.0          # each real client, start to last ping, < MPA timeout
ATTACK_SLOTS = 2 * HALF_OPEN_CAP
OPEN_INTERVAL_S = 0.004       # attacker: at most one new connection per 4 ms
CLIENTS = 3
GRACE_S = 0.25                # the server's half-open grace (CmSettings default)
ATTACK_GAP_S = 1.0            # attack alone before each client
# A quarter of the cap-per-grace rate: a loaded host (sanitizers, CI) slows
# the attacker and the server alike; no eviction at all is what fails.
MIN_GAP_EVICTIONS = int(HALF_OPEN_CAP * ATTACK_GAP_S / GRACE_S) // 4
PINGS = 20
FD_SLACK = 12                 # listener, a real client's connection and QP, CM/engine descriptors


class Attacker(threading.Thread):
    """Keeps ATTACK_SLOTS silent connections open, reopening each one the
    server closes; records when the server closed one."""

    def __init__(self, port):
        super().__init__(daemon=True)
        self.port = port
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.opened = 0
        self.closed_at = []   # monotonic times of EOF/reset seen
        self.error = None

    def closed_between(self, start, end):
        with self.lock:
            return sum(1 for t in self.closed_at if start <= t <= end)

    def run(self):
        slots = []
        next_open = 0.0
        try:
            while not self.stop.is_set():
                now = time.monotonic()
                if len(slots) < ATTACK_SLOTS and now >= next_open:
                    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                    s.setblocking(False)
                    s.connect_ex(("127.0.0.1", self.port))
                    slots.append(s)
                    self.opened += 1
                    next_open = now + OPEN_INTERVAL_S
                wait = max(0.0, next_open - now) if len(slots) < ATTACK_SLOTS else 0.05
                r, _, _ = select.select(slots, [], [], wait)
                for s in r:
                    try:
                        data = s.recv(4096)
                    except BlockingIOError:
                        continue
                    except ConnectionRefusedError:
                        self.error = "an attack connection was refused: the listener is gone"
                        return
                    except ConnectionError:
                        data = b""
                    if data:
                        self.error = f"server sent data to a silent connection: {data[:32]!r}"
                        return
                    with self.lock:
                        self.closed_at.append(time.monotonic())
                    slots.remove(s)
                    s.close()
        finally:
            for s in slots:
                s.close()


def diagnose(client_pid, server_pid, port):
    """What a stuck client and its server were doing: their threads' stacks
    (gdb, when installed) and the TCP connections on the port."""
    print(subprocess.run(["ss", "-tnoi", f"( sport = :{port} or dport = :{port} )"],
                         capture_output=True, text=True).stdout[-6000:])
    for name, pid in (("client", client_pid), ("server", server_pid)):
        try:
            out = subprocess.run(["gdb", "-p", str(pid), "-batch", "-nx",
                                  "-ex", "thread apply all bt 12"],
                                 capture_output=True, text=True, timeout=60).stdout
            print(f"--- {name} ({pid}) threads:\n{out[-8000:]}")
        except (OSError, subprocess.TimeoutExpired) as e:
            print(f"--- {name}: no stacks ({e})")


def run_client(run, port, label, server_pid, peak):
    """One real rping client; returns (seconds taken, peak server fds)."""
    env = dict(os.environ, IWEMU_MPA_TIMEOUT_MS=str(CLIENT_MPA_TIMEOUT_MS))
    log = tempfile.TemporaryFile(mode="w+")  # -v prints every ping: more than a pipe holds
    start = time.monotonic()
    client = subprocess.Popen([run, "rping", "-c", "-a", "127.0.0.1", "-p", str(port),
                               "-C", str(PINGS), "-S", "4096", "-V", "-v"],
                              env=env, stdout=log, stderr=subprocess.STDOUT)
    deadline = start + 3 * CLIENT_BOUND_S
    while client.poll() is None:
        if time.monotonic() > deadline:
            diagnose(client.pid, server_pid, port)
            client.kill()
            client.wait()
            log.seek(0)
            lines = log.read().splitlines()
            verified = sum(1 for line in lines if line.startswith("ping data:"))
            print(f"{verified} of {PINGS} pings verified; the client's last lines:")
            for line in lines[-3:]:
                print("  " + line[:120])
            fail(f"{label} rping client did not finish within {3 * CLIENT_BOUND_S:.0f} s")
        peak = max(peak, fd_count(server_pid))
        time.sleep(0.02)
    took = time.monotonic() - start
    log.seek(0)
    out = log.read()
    verified = sum(1 for line in out.splitlines() if line.startswith("ping data:"))
    # rping's own exit race (tests/integration/rdmacm_rping.sh): EBADF after DISCONNECTED.
    race = client.returncode == 255 and "rdma_get_cm_event: Bad file descriptor" in out
    if (client.returncode != 0 and not race) or verified != PINGS:
        print(out[-4000:])
        fail(f"{label} rping client: rc={client.returncode}, {verified} of {PINGS} pings verified")
    return took, peak


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    run = sys.argv[1]
    port = free_port()
    env = dict(os.environ, IWEMU_MPA_TIMEOUT_MS=str(MPA_TIMEOUT_MS),
               IWEMU_MAX_HALF_OPEN=str(HALF_OPEN_CAP))
    server, server_log = start_rping_server(run, port, env)
    attacker = None
    try:
        # Warm-up: the emulator creates its threads and descriptors on first use.
        took, _ = run_client(run, port, "warm-up", server.pid, 0)
        time.sleep(0.2)  # the server's per-client thread tears its QP down
        base_fds = fd_count(server.pid)
        print(f"warm-up client: {PINGS} pings in {took:.2f} s; server fds={base_fds}")

        attacker = Attacker(port)
        attack_start = time.monotonic()
        attacker.start()
        # The cap is full once the server starts closing attack connections.
        until = attack_start + 5
        while attacker.closed_between(attack_start, time.monotonic()) == 0:
            if attacker.error:
                fail(attacker.error)
            if time.monotonic() > until:
                fail(f"no attack connection closed 5 s into the attack "
                     f"({attacker.opened} opened, cap {HALF_OPEN_CAP}): no eviction at the cap?")
            time.sleep(0.01)
        print(f"attack: first eviction after {time.monotonic() - attack_start:.2f} s")

        peak = base_fds
        for i in range(CLIENTS):
            gap_start = time.monotonic()
            while time.monotonic() < gap_start + ATTACK_GAP_S:
                peak = max(peak, fd_count(server.pid))
                time.sleep(0.02)
            start = time.monotonic()
            in_gap = attacker.closed_between(gap_start, start)
            took, peak = run_client(run, port, f"client {i + 1} under attack", server.pid, peak)
            during = attacker.closed_between(start, time.monotonic())
            if attacker.error:
                fail(attacker.error)
            # (a) promptly, (b) while the attack went on.
            if took > CLIENT_BOUND_S:
                fail(f"client {i + 1} took {took:.2f} s under attack (bound {CLIENT_BOUND_S} s, "
                     f"MPA timeout {MPA_TIMEOUT_MS / 1000:.0f} s)")
            if in_gap < MIN_GAP_EVICTIONS or during < 1:
                fail(f"attack connections closed by the server: {in_gap} in the {ATTACK_GAP_S} s "
                     f"before client {i + 1}, {during} during its run: the attack was not going on")
            print(f"(a) client {i + 1}: {PINGS} pings verified in {took:.2f} s; "
                  f"(b) attack connections evicted: {in_gap} in the {ATTACK_GAP_S} s before, "
                  f"{during} during the run")
            peak = max(peak, fd_count(server.pid))

        attacker.stop.set()
        attacker.join(5)
        if attacker.error:
            fail(attacker.error)
        elapsed = time.monotonic() - attack_start
        total = len(attacker.closed_at)
        print(f"attack: {attacker.opened} connections opened, {total} closed by the server "
              f"in {elapsed:.2f} s")
        # (c) Descriptors bounded by the cap all along.
        if peak > base_fds + HALF_OPEN_CAP + FD_SLACK:
            fail(f"server fds peaked at {peak} (start {base_fds}, cap {HALF_OPEN_CAP})")
        print(f"(c) server fds: start {base_fds}, peak {peak} (cap {HALF_OPEN_CAP})")
        if server.poll() is not None:
            server_log.seek(0)
            fail(f"server exited ({server.returncode}): {server_log.read()[-2000:]}")
        return 0
    finally:
        if attacker:
            attacker.stop.set()
            attacker.join(5)
        if server.poll() is None:
            server.send_signal(signal.SIGKILL)
        server.wait()


if __name__ == "__main__":
    sys.exit(main())
