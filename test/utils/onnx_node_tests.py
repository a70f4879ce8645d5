#!/usr/bin/env python3
"""Runs the ONNX backend node tests (Debian's libonnx-testdata) whose ops
Kiln claims through `kiln interp` and compares every output.

usage: onnx_node_tests.py KILN NODE_TEST_DIR WORK_DIR [--verbose]

A test is run when every op type in its graph is in `kiln import --list-ops`
(the claimed list). Tolerances are the ONNX backend runner's defaults
(rtol 1e-3, atol 1e-7). Prints the pass rate over claimed tests and each
failure; exits 1 when any claimed test fails. The test data is not edited.
"""
import pathlib
import subprocess
import sys

import numpy as np
import onnx
from onnx import numpy_helper


# Node tests Kiln does not run, each with the reason. Everything else whose
# op types are all claimed must pass.
EXCLUDED = {
    # Kiln has no string, sequence or optional types.
    "test_cast_FLOAT_to_STRING": "string tensors",
    "test_cast_STRING_to_FLOAT": "string tensors",
    "test_castlike_FLOAT_to_STRING": "string tensors",
    "test_castlike_FLOAT_to_STRING_expanded": "string tensors",
    "test_castlike_STRING_to_FLOAT": "string tensors",
    "test_castlike_STRING_to_FLOAT_expanded": "string tensors",
    "test_identity_opt": "optional type",
    "test_identity_sequence": "sequence type",
    # ONNX 1.12's data stores bfloat16 as uint16 bits and computes the
    # float->bfloat16 reference by truncation; Kiln rounds to nearest even
    # (PyTorch's and ONNX >= 1.14's rule).
    "test_cast_BFLOAT16_to_FLOAT": "bfloat16 data stored as uint16",
    "test_cast_FLOAT_to_BFLOAT16": "bfloat16 reference by truncation",
    "test_castlike_BFLOAT16_to_FLOAT": "bfloat16 data stored as uint16",
    "test_castlike_BFLOAT16_to_FLOAT_expanded": "bfloat16 data stored as uint16",
    "test_castlike_FLOAT_to_BFLOAT16": "bfloat16 reference by truncation",
    "test_castlike_FLOAT_to_BFLOAT16_expanded": "bfloat16 reference by truncation",
    # Training-mode dropout with a non-zero ratio draws numpy's RNG.
    "test_training_dropout": "random mask from numpy's RNG",
    "test_training_dropout_default": "random mask from numpy's RNG",
    "test_training_dropout_default_mask": "random mask from numpy's RNG",
    "test_training_dropout_mask": "random mask from numpy's RNG",
}


def compare(got_path, want_path):
    want = numpy_helper.to_array(onnx.load_tensor(str(want_path)))
    if not got_path.exists():
        return "missing output"
    got = numpy_helper.to_array(onnx.load_tensor(str(got_path)))
    if got.shape != want.shape:
        return f"shape {got.shape} vs {want.shape}"
    if want.dtype == object or got.dtype == object:
        return "non-numeric output"
    if want.dtype == bool or np.issubdtype(want.dtype, np.integer):
        if not np.array_equal(got.astype(np.int64), want.astype(np.int64)):
            return "integer mismatch"
        return None
    g, w = got.astype(np.float64), want.astype(np.float64)
    same_nan = np.isnan(g) == np.isnan(w)
    close = np.isclose(g, w, rtol=1e-3, atol=1e-7, equal_nan=True)
    if not (same_nan.all() and close.all()):
        return f"max abs err {np.nanmax(np.abs(g - w)):.3g}"
    return None


def main():
    kiln, root, work = sys.argv[1], pathlib.Path(sys.argv[2]), pathlib.Path(sys.argv[3])
    verbose = "--verbose" in sys.argv
    claimed = set(subprocess.run([kiln, "import", "--list-ops"], check=True,
                                 capture_output=True, text=True).stdout.split())
    work.mkdir(parents=True, exist_ok=True)
    ran, failures, ops_seen, excluded = 0, [], set(), 0
    for test in sorted(p for p in root.iterdir() if (p / "model.onnx").exists()):
        model = onnx.load(str(test / "model.onnx"), load_external_data=False)
        ops = {n.op_type for n in model.graph.node}
        if any(n.domain not in ("", "ai.onnx") for n in model.graph.node):
            continue
        if not ops or not ops <= claimed:
            continue
        if test.name in EXCLUDED:
            excluded += 1
            continue
        for data in sorted(test.glob("test_data_set_*")):
            ran += 1
            ops_seen |= ops
            out = work / test.name / data.name
            proc = subprocess.run([kiln, "interp", "--const-small-inputs", str(test / "model.onnx"),
                                   "--inputs", str(data), "--outputs", str(out)],
                                  capture_output=True, text=True)
            if proc.returncode != 0:
                failures.append(f"{test.name}: {proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else 'exit ' + str(proc.returncode)}")
                continue
            for i, _ in enumerate(model.graph.output):
                problem = compare(out / f"output_{i}.pb", data / f"output_{i}.pb")
                if problem:
                    failures.append(f"{test.name} output {i}: {problem}")
                    break
            else:
                if verbose:
                    print(f"PASS {test.name}/{data.name}")
    for f in failures:
        print(f"FAIL {f}")
    print(f"claimed ops: {len(claimed)}; ops exercised by node tests: {len(ops_seen)}")
    print(f"excluded node tests (listed with reasons in this script): {excluded}")
    print(f"node tests over claimed ops: {ran - len(failures)}/{ran} passed")
    return 1 if failures or ran == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
