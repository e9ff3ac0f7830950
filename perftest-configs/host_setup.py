"""What the benchmark runners (run, cpu_cost) need from the machine: the
iwemu-run launcher, free TCP ports, and a core each for server and client."""

import os
import random
import shutil
import socket

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def find_iwemu_run(explicit):
    """The launcher given, else the release build's, else the one on PATH."""
    for cand in ([explicit] if explicit else
                 [os.path.join(TOP, "build", "release", "bin", "iwemu-run"),
                  shutil.which("iwemu-run")]):
        if cand and os.access(cand, os.X_OK):
            return os.path.abspath(cand)
    return None


def free_port():
    """A TCP port nobody uses, and the next one (qperf's data port), below the
    usual ephemeral range (32768-60999)."""
    for _ in range(100):
        port = random.randint(20000, 31999)
        ok = True
        for p in (port, port + 1):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", p))
                except OSError:
                    ok = False
        if ok:
            return port
    raise RuntimeError("no free TCP port")


def pinning():
    """taskset prefixes: server and client on different cores when there are two."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) >= 2 and shutil.which("taskset"):
        return ["taskset", "-c", str(cpus[0])], ["taskset", "-c", str(cpus[1])]
    return [], []
