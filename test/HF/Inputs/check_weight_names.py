#!/usr/bin/env python3
"""check_weight_names.py STEP.kiln WEIGHTS.safetensors [MODEL.onnx]: every
parameter of the artifact that kiln-run must read from the weights (not made
by the init program, no value of its own) is in the safetensors file under
its source or folded_from name, or a tied alias of it (docs/artifact.md,
"Weights: names and mapping"). With the export's MODEL.onnx, also the values: the weight as
kiln-run reads it (transposed where the artifact's folded_transposed says)
equals the ONNX initializer the step was compiled from, element for
element. A square weight is where a wrong orientation hides."""
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


def weight_key(p):
    """The name kiln-run reads p under: source, else folded_from, else a
    tied alias of the name it is read by (StepArtifact::matchWeight)."""
    read_by = p.get("folded_from") or p["source"]
    for key in [p["source"], p.get("folded_from")] + p.get("aliases", []):
        if key in names:
            return key, key != p["source"] and len(p["shape"]) == 2 and read_by != p["source"]
    return None, False


missing = [p["name"] for p in needed if weight_key(p)[0] is None]
print(f"{len(needed)} weights needed, {len(missing)} missing")
for name in missing:
    print(f"MISSING {name}")
if len(sys.argv) > 3:
    import numpy as np
    import onnx
    from onnx import numpy_helper

    model = onnx.load(sys.argv[3])
    initializers = {t.name: t for t in model.graph.initializer}
    compared, differ = 0, []
    with safe_open(sys.argv[2], "np") as f:
        for p in needed:
            if p["name"] not in initializers or p["name"] in missing:
                continue
            key, folded = weight_key(p)
            value = f.get_tensor(key).astype(np.float64)
            if folded:
                transposed = p.get("folded_transposed")
                if transposed is None:  # kiln-run's rule without the record: the shape
                    transposed = list(value.shape) != p["shape"]
                if transposed:
                    value = value.T
            expected = numpy_helper.to_array(initializers[p["name"]]).astype(np.float64)
            compared += 1
            if value.shape != expected.shape or not np.array_equal(value, expected):
                differ.append(f"{p['name']} (from {key})")
    print(f"{compared} weights compared with the ONNX initializers, {len(differ)} differ")
    for name in differ:
        print(f"DIFFERS {name}")
