#!/usr/bin/env python3
"""check_weight_names.py STEP.kiln WEIGHTS.safetensors: every parameter of
the artifact that kiln-run must read from the weights (not made by the init
program, no value of its own) is in the safetensors file under its source
or folded_from name (docs/artifact.md, "Weights: names and mapping")."""
import json
import pathlib
import subprocess
import sys

from safetensors import safe_open

here = pathlib.Path(__file__).resolve().parent
listing = subprocess.run([sys.executable, str(here.parent.parent / "Tools" / "Inputs" / "read_kiln.py"),
                          sys.argv[1]], capture_output=True, text=True, check=True).stdout.splitlines()
params = json.loads(listing[listing.index("section params") + 1])
with safe_open(sys.argv[2], "np") as f:
    names = set(f.keys())
needed = [p for p in params if not p.get("init") and "value" not in p]
missing = [p["name"] for p in needed
           if p["source"] not in names and p.get("folded_from") not in names]
print(f"{len(needed)} weights needed, {len(missing)} missing")
for name in missing:
    print(f"MISSING {name}")
