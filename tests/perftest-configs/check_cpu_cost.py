#!/usr/bin/env python3
"""Runs perftest-configs/cpu_cost once with little data and checks its JSON: every
row measured (CPU seconds and bytes positive, both processes' CPU counted), the
kernel TCP baseline among them.  Figures are never pass/fail.

  check_cpu_cost.py CPU_COST IWEMU_RUN OUT_DIR
"""
import json
import os
import subprocess
import sys

script, iwemu_run, out = sys.argv[1:4]
os.makedirs(out, exist_ok=True)
path = os.path.join(out, "cpu_cost.json")
if os.path.exists(path):
    os.remove(path)
r = subprocess.run([sys.executable, script, "--reps", "1", "--gib", "0.25", "--seconds", "1",
                    "--timeout", "40", "--iwemu-run", iwemu_run, "--json", path], timeout=280)
failures = [] if r.returncode == 0 else [f"cpu_cost exited with {r.returncode}"]
try:
    with open(path) as f:
        rows = json.load(f)["rows"]
except (OSError, ValueError, KeyError) as e:
    sys.exit(f"FAIL: no usable {path}: {e}")
if not any(row["program"] == "qperf:tcp_bw" for row in rows):
    failures.append("no TCP baseline row")
for row in rows:
    name = row["program"] + (" -e" if row["events"] else "") + ("" if row["crc"] else " crc=off")
    if row["runs"] != 1:
        failures.append(f"{name}: not measured: {row['errors']}")
        continue
    for key in ("cpu_s_per_gb", "server_cpu", "client_cpu", "bytes"):
        if not row.get(key) or row[key] <= 0:
            failures.append(f"{name}: {key} = {row.get(key)}")
if failures:
    sys.exit("FAIL: " + "; ".join(failures))
print(f"cpu_cost: {len(rows)} rows measured")
