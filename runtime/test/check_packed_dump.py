#!/usr/bin/env python3
"""check_packed_dump.py KILN_RUN REPO: the packed row that
test/HF/export-position-ids.test runs through kiln interp (built there by
test/HF/Inputs/packed_documents.py) is exactly what kiln-run's packing makes
of the same documents: converted by scripts/kiln_dataset.py, dumped by
kiln-run data-stats --dump --batching pack, compared element by element.
Needs transformers, onnx and numpy (exit 77, skipped, without)."""
import pathlib
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import transformers
    from onnx import TensorProto, numpy_helper
except ImportError as e:
    print(f"SKIP: {e}")
    sys.exit(77)

kiln_run, repo = sys.argv[1], pathlib.Path(sys.argv[2])
with tempfile.TemporaryDirectory() as tmp:
    tmp = pathlib.Path(tmp)
    transformers.LlamaConfig(vocab_size=256).save_pretrained(tmp / "cfg")
    subprocess.run([sys.executable, repo / "test/HF/Inputs/packed_documents.py", tmp / "cfg",
                    tmp / "data"], check=True)
    subprocess.run([sys.executable, repo / "scripts/kiln_dataset.py", tmp / "data/docs.jsonl",
                    "-o", tmp / "d.kdocs", "--vocab-size", "256"], check=True,
                   stdout=subprocess.DEVNULL)
    (tmp / "dump").mkdir()
    subprocess.run([kiln_run, "data-stats", tmp / "d.kdocs", "--seq", "16", "--batching", "pack",
                    "--shuffle", "off", "--dump", tmp / "dump", "--count", "1"], check=True,
                   stdout=subprocess.DEVNULL)
    failures = 0
    for k, name in enumerate(["input_ids", "position_ids", "labels"]):
        tensor = TensorProto()
        tensor.ParseFromString((tmp / f"data/packed/input_{k}.pb").read_bytes())
        want = numpy_helper.to_array(tensor).reshape(-1)
        got = np.fromfile(tmp / f"dump/0.{name}.bin", "<i8")
        same = got.shape == want.shape and (got == want).all()
        failures += not same
        print(f"{name}: {'OK' if same else 'FAIL'} kiln-run {got.tolist()}"
              + ("" if same else f" packed_documents.py {want.tolist()}"))
    counted = sum(int(c) for c in (tmp / "data/counts.txt").read_text().split())
    line = (tmp / "dump/batches.jsonl").read_text().strip()
    ok = f'"counted": {counted}' in line
    failures += not ok
    print(f"counted labels {counted}: {'OK' if ok else 'FAIL ' + line}")
sys.exit(1 if failures else 0)
