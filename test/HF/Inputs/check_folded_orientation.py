#!/usr/bin/env python3
"""check_folded_orientation.py FIXTURE... : for every fixture (a model.onnx
with the meta.json scripts/export_hf_fixtures.py writes), each initializer
the exporter folded from a PyTorch parameter must carry the orientation
kiln-run will load it in, and it must be the true one. The truth is
meta.json's "transposed", found by comparing the initializer's values with
the PyTorch parameter's; Kiln's claim is the importer's
kiln.source_transposed in `kiln import`'s IR. A square weight without the
record would be refused at load (its shape cannot tell), a non-square one
is loaded by shape: both are judged too. One line per fixture, then the
totals; exit 1 on any wrong or unresolved weight."""
import json
import pathlib
import re
import subprocess
import sys

PARAM = re.compile(r'kiln\.parameter "([^"]+)"[^{:]*(\{[^}]*\})?\s*:\s*tensor<([0-9x]+)x[a-z0-9]+>')
SOURCE = re.compile(r'kiln\.source_name = "([^"]+)"')
TRANSPOSED = re.compile(r"kiln\.source_transposed = (true|false)")

bad = 0
totals = {"folded": 0, "square": 0}
for fixture in map(pathlib.Path, sys.argv[1:]):
    meta = json.loads((fixture / "meta.json").read_text())
    truth = {p["initializer"]: (name, p["transposed"]) for name, p in meta["params"].items()
             if p.get("initializer")}
    ir = subprocess.run(["kiln", "import", str(fixture / "model.onnx")], capture_output=True,
                        text=True, check=True).stdout
    folded = square = 0
    problems = []
    for name, attrs, dims in PARAM.findall(ir):
        source = SOURCE.search(attrs or "")
        if not source or name not in truth:
            continue
        shape = [int(d) for d in dims.split("x")]
        folded += 1
        pytorch_name, transposed = truth[name]
        if source.group(1) != pytorch_name:
            problems.append(f"{name}: folded from {source.group(1)}, meta says {pytorch_name}")
            continue
        record = TRANSPOSED.search(attrs)
        is_square = len(shape) == 2 and shape[0] == shape[1]
        square += is_square
        if record:
            if (record.group(1) == "true") != transposed:
                problems.append(f"{name}: recorded transposed={record.group(1)}, "
                                f"its values say {str(transposed).lower()}")
        elif is_square:
            problems.append(f"{name}: square and no orientation recorded")
    totals["folded"] += folded
    totals["square"] += square
    bad += len(problems)
    print(f"{fixture.name}: {folded} folded weights ({square} square), {len(problems)} wrong")
    for p in problems:
        print(f"  WRONG {p}")
print(f"all: {totals['folded']} folded weights ({totals['square']} square), {bad} wrong")
sys.exit(1 if bad else 0)
