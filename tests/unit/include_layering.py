#!/usr/bin/env python3
"""The layers reach only downward: every project #include is checked
against the folder rules (wire <- base <- cm / faults / capture <- emulator:
the device objects and qp/ <- provider / kmod-shim; DESIGN.md).  Exit 1 with one line per offending include."""
import pathlib
import re
import sys

ROOT = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)

# folder -> include prefixes it may use (besides its own folder).  The most
# specific folder that contains a file decides.
ALLOWED = {
    "emulator/wire": [],
    "emulator/base": [],
    # The CM hands a socket to a QP only through base/connection_params.h.
    "emulator/cm": ["emulator/wire/", "emulator/base/", "emulator/faults/", "emulator/capture/"],
    "emulator/capture": ["emulator/wire/", "emulator/base/", "emulator/faults/"],
    # A fault counts on its QP's status slot (iwemu status).
    "emulator/faults": ["emulator/wire/", "emulator/base/", "emulator/status_publisher.h"],
    "emulator/status": ["emulator/qp_counters.h", "emulator/verbs_types.h"],
    "emulator/qp": ["emulator/"],
    "emulator": ["emulator/"],
    "provider": ["emulator/", "provider/"],
    "kmod-shim": ["emulator/", "kmod-shim/"],
}


def rule_for(rel: str):
    best = None
    for folder in ALLOWED:
        if rel.startswith(folder + "/") and (best is None or len(folder) > len(best)):
            best = folder
    return best


def main() -> int:
    bad = []
    checked = 0
    paths = [p for top in ("emulator", "provider", "kmod-shim") for p in sorted((ROOT / top).glob("**/*"))]
    for path in paths:
        if path.suffix not in (".h", ".cpp", ".c") or not path.is_file():
            continue
        rel = path.relative_to(ROOT).as_posix()
        folder = rule_for(rel)
        if folder is None:
            continue
        checked += 1
        allowed = [folder + "/"] + ALLOWED[folder]
        for inc in INCLUDE.findall(path.read_text(errors="replace")):
            if "/" not in inc:
                continue  # a file beside it (generated or local)
            if not any(inc == a or (a.endswith("/") and inc.startswith(a)) for a in allowed):
                bad.append(f"{rel}: includes {inc} (layer {folder} may use {', '.join(allowed)})")
    for line in bad:
        print(line)
    print(f"{checked} files checked, {len(bad)} includes reach across layers")
    return 1 if bad or checked == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
