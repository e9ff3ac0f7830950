#!/usr/bin/env python3
"""Runs perftest-configs/run --smoke into a fresh directory and checks its outputs:
one JSON and one markdown file, well-formed, with the smoke set's seven points each
measured (a positive median, no threshold: figures are never pass/fail),
each iwemu point compared with qperf TCP within the round, ib_write_lat compared with its floor over plain TCP and ib_send_bw with a TCP
stream carrying the same MPA framing.

  check_smoke.py RUNNER IWEMU_RUN OUT_DIR
"""
import json
import os
import shutil
import subprocess
import sys

runner, iwemu_run, out = sys.argv[1:4]
shutil.rmtree(out, ignore_errors=True)
r = subprocess.run([sys.executable, runner, "--smoke", "--no-install", "--timeout", "40",
                    "--iwemu-run", iwemu_run, "--out", out], timeout=220)
failures = []
if r.returncode != 0:
    failures.append(f"runner exited with {r.returncode}")

files = os.listdir(out) if os.path.isdir(out) else []
jsons = [f for f in files if f.endswith(".json")]
mds = [f for f in files if f.endswith(".md")]
if len(jsons) != 1 or len(mds) != 1:
    sys.exit(f"FAIL: expected one .json and one .md in {out}, found {files}")

with open(os.path.join(out, jsons[0])) as f:
    doc = json.load(f)
meta, results = doc.get("meta", {}), doc.get("results", [])
for key in ("date", "set", "reps", "cpus", "iwemu_run", "skipped"):
    if key not in meta:
        failures.append(f"meta lacks {key}")
if meta.get("set") != "smoke" or meta.get("reps") != 1:
    failures.append(f"meta says set={meta.get('set')} reps={meta.get('reps')}")
expected = {("ib_send_bw", 65536, "MB/s"), ("ib_write_lat", 8, "us"),
            ("qperf:tcp_bw", 65536, "MB/s"), ("qperf:tcp_lat", 8, "us"),
            ("floor:write_lat", 8, "us"), ("floor:spin_lat", 8, "us"),
            ("floor:mpa_crc_bw", 65536, "MB/s")}
got = {(x.get("program"), x.get("size"), x.get("unit")) for x in results}
if got != expected:
    failures.append(f"results are {sorted(got)}, expected {sorted(expected)}")
for x in results:
    med = x.get("median")
    if not isinstance(med, (int, float)) or med <= 0 or len(x.get("values", [])) != 1:
        failures.append(f"{x.get('program')}: not measured ({x.get('note')})")
    elif x.get("best") != med:
        failures.append(f"{x['program']}: best {x.get('best')} is not its one run {med}")
    elif x.get("rounds") != x.get("values"):
        failures.append(f"{x['program']}: rounds {x.get('rounds')} are not its one run")
    elif x["kind"] == "iwemu" and not isinstance(x.get("ratio_vs_tcp"), (int, float)):
        failures.append(f"{x['program']}: no ratio to TCP")
    elif x["kind"] == "iwemu" and (
            (x.get("paired") or {}).get("qperf:tcp_bw" if x["unit"] == "MB/s"
                                        else "qperf:tcp_lat", {}).get("rounds") != 1):
        failures.append(f"{x['program']}: no per-round ratio to qperf TCP ({x.get('paired')})")
    elif x["program"] == "ib_write_lat" and not isinstance(x.get("ratio_vs_floor"), (int, float)):
        failures.append("ib_write_lat: no ratio to floor:write_lat")
    elif x["program"] == "ib_send_bw" and (x.get("floor") != "floor:mpa_crc_bw" or
                                           not isinstance(x.get("ratio_vs_floor"), (int, float))):
        failures.append("ib_send_bw: no ratio to floor:mpa_crc_bw")

with open(os.path.join(out, mds[0])) as f:
    md = f.read().splitlines()
rows = [l for l in md if l.startswith("| ") and not l.startswith("| ---")]
if not rows or not rows[0].startswith("| program | size | median"):
    failures.append("markdown table header missing")
if len(rows) != 1 + len(expected):
    failures.append(f"markdown table has {len(rows) - 1} rows, expected {len(expected)}")
for l in rows:
    if l.count("|") != rows[0].count("|"):
        failures.append(f"malformed markdown row: {l}")

for msg in failures:
    print("FAIL:", msg)
if failures:
    sys.exit(1)
print(f"OK: {len(results)} points measured, outputs {jsons[0]} and {mds[0]} well-formed")
