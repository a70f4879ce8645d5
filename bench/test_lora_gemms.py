"""lora_gemms.py's attribution of a profile to adapter roles (no torch):
python3 -m unittest test_lora_gemms"""

import contextlib
import io
import os
import tempfile
import unittest

import lora_gemms
from configs import CONFIGS


def synthetic_profile(cfg, skip_first_dx=True):
    """A profile TSV in the step's issue order: every LoRA role of every
    layer at 1 ms per GEMM, a frozen GEMM between them, the LM head between
    forward and backward; layer 0's backward has no q/k/v dX (the
    embedding's input needs none)."""
    fwd, bwd = lora_gemms.lora_roles(cfg)
    rows, op = [], 0

    def add(label, ms):
        nonlocal op
        rows.append(f"{op}\t{label}\t{ms}")
        op += 1

    t, h = cfg.tokens, cfg.d_model
    for _ in range(cfg.layers):
        add(f"gemm {t}x{h}x{h} BF16", 10.0)
        for role in fwd:
            for _ in range(role.per_layer):
                add(f"gemm {role.m}x{role.n}x{role.k} BF16", 1.0)
    add("kiln_head_rows", 5.0)
    for layer in reversed(range(cfg.layers)):
        for role in bwd:
            if skip_first_dx and layer == 0 and role.group == "q/k/v" and role.name.startswith("dX"):
                continue
            for _ in range(role.per_layer):
                add(f"gemm {role.m}x{role.n}x{role.k} BF16", 1.0)
        add(f"gemm {t}x{h}x{h} BF16", 10.0)
    return "op\tlabel\tms\n" + "\n".join(rows) + "\n"


class LoraGemmsTest(unittest.TestCase):
    def run_on(self, text, config):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "profile.tsv")
            with open(path, "w") as f:
                f.write(text)
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                lora_gemms.main(["--config", config, "--profile", path])
            return out.getvalue()

    def test_every_gemm_attributed(self):
        for config in ("tiny", "small", "1b"):
            cfg = CONFIGS[config]
            fwd, bwd = lora_gemms.lora_roles(cfg)
            per_layer = sum(r.per_layer for r in fwd + bwd)
            out = self.run_on(synthetic_profile(cfg), config)
            expected = per_layer * cfg.layers - 1
            self.assertIn(f"today: {expected} LoRA GEMMs, {expected:.2f} ms", out)
            kept = sum(r.per_layer for r in fwd + bwd if r.kcat) * cfg.layers
            self.assertIn(f"K-concat: {kept} LoRA GEMMs", out)

    def test_bytes(self):
        cfg = CONFIGS["1b"]
        fwd, _ = lora_gemms.lora_roles(cfg, "frozen-writes")
        gate_up = next(r for r in fwd if r.name.startswith("gate, up up"))
        # t [8192, 32] and B [8192, 32] read, C [8192, 8192] read and written.
        self.assertEqual(gate_up.bytes(), 2 * (8192 * 32 + 32 * 8192 + 2 * 8192 * 8192))
        # Since the smaller-k rule the up projection only writes C.
        fwd, _ = lora_gemms.lora_roles(cfg)
        gate_up = next(r for r in fwd if r.name.startswith("gate, up up"))
        self.assertEqual(gate_up.bytes(), 2 * (8192 * 32 + 32 * 8192 + 8192 * 8192))

    def test_unknown_gemm_is_an_error(self):
        text = "op\tlabel\tms\n0\tgemm 8192x16x999 BF16\t1.0\n"
        with self.assertRaises(SystemExit) as e:
            self.run_on(text, "1b")
        self.assertIn("8192, 16, 999", str(e.exception))


if __name__ == "__main__":
    unittest.main()
