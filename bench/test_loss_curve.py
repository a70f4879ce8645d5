"""loss_curve.py's judging, name mapping and weights merge on synthetic data
(runs without torch): python3 -m unittest discover -s bench -p 'test_*.py'"""

import contextlib
import io
import json
import math
import os
import struct
import tempfile
import unittest

import loss_curve as lc
from configs import CONFIGS, linear_shapes


def kiln_log(losses, first=1):
    """What `kiln-run train --log-every 1` prints, around the step lines."""
    lines = ["artifact step.kiln: 89 params (56 trainable), 11 kernels, 3 guards",
             "weights w.safetensors: 47 tensors, every frozen parameter matches",
             "step program: 900 launches, 300 GEMMs; device memory: 1 bytes persistent + "
             "2 bytes arena and GEMM workspace (planned)"]
    for t, loss in enumerate(losses, first):
        lines.append(f"step {t} loss {loss:.7f} step_ms 3.100 tokens/s 330000 peak_mem 41943040")
    lines.append("cuda graphs: 1 captured")
    return "\n".join(lines) + "\n"


def curve(steps=100):
    """A plausible falling loss curve."""
    return [8.3 - 3.0 * (1 - math.exp(-t / 30)) for t in range(1, steps + 1)]


class CompareTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)

    def run_compare(self, kiln_losses, torch_losses, *extra, log=None):
        kiln_path = os.path.join(self.dir.name, "kiln.log")
        torch_path = os.path.join(self.dir.name, "pytorch.json")
        with open(kiln_path, "w") as f:
            f.write(log if log is not None else kiln_log(kiln_losses))
        with open(torch_path, "w") as f:
            json.dump({"system": "pytorch", "losses": torch_losses}, f)
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = lc.main(["compare", "--kiln", kiln_path, "--pytorch", torch_path, *extra])
        return rc, out.getvalue(), err.getvalue()

    def test_passes_within_tolerance(self):
        torch = curve()
        # Alternating +-0.9%: inside 1% everywhere.
        kiln = [v * (1 + (0.009 if t % 2 else -0.009)) for t, v in enumerate(torch)]
        rc, out, _ = self.run_compare(kiln, torch)
        self.assertEqual(rc, 0, out)
        self.assertTrue(out.rstrip().endswith("PASS"))
        self.assertIn("max relative difference", out)
        rows = [line.split()[0] for line in out.splitlines()[1:] if line.split()[0].isdigit()]
        self.assertEqual(rows, ["1"] + [str(t) for t in range(10, 101, 10)])

    def test_fails_beyond_tolerance(self):
        torch = curve()
        kiln = list(torch)
        kiln[56] *= 1.02  # step 57 off by 2%
        rc, out, _ = self.run_compare(kiln, torch)
        self.assertEqual(rc, 1)
        self.assertIn("FAIL: step 57:", out)
        self.assertIn("at step 57", out)
        # A looser tolerance accepts it.
        rc, out, _ = self.run_compare(kiln, torch, "--tolerance", "0.05")
        self.assertEqual(rc, 0, out)

    def test_fails_on_missing_step(self):
        torch = curve()
        log = kiln_log(curve()).replace("step 42 loss", "stepped 42 loss")
        rc, out, _ = self.run_compare(None, torch, log=log)
        self.assertEqual(rc, 1)
        self.assertIn("lacks 1 of 100 steps (42)", out)
        # kiln-run stopped early (e.g. a non-finite loss ends the run).
        rc, out, _ = self.run_compare(curve(60), torch)
        self.assertEqual(rc, 1)
        self.assertIn("lacks 40 of 100 steps", out)
        self.assertIn("missing", out)

    def test_fails_on_nan(self):
        torch = curve()
        log = kiln_log(curve()).replace(f"step 30 loss {curve()[29]:.7f}", "step 30 loss nan")
        rc, out, _ = self.run_compare(None, torch, log=log)
        self.assertEqual(rc, 1)
        self.assertIn("step 30: the Kiln loss is not finite", out)
        torch_nan = list(torch)
        torch_nan[9] = float("nan")
        rc, out, _ = self.run_compare(curve(), torch_nan)
        self.assertEqual(rc, 1)
        self.assertIn("step 10: the PyTorch loss is not finite", out)
        torch_inf = list(torch)
        torch_inf[0] = float("inf")
        rc, out, _ = self.run_compare(curve(), torch_inf)
        self.assertEqual(rc, 1)

    def test_extra_and_duplicate_steps(self):
        rc, out, _ = self.run_compare(curve(101), curve())
        self.assertEqual(rc, 1)
        self.assertIn("outside 1..100: 101", out)
        rc, out, _ = self.run_compare(curve(), curve(), "--steps", "101")
        self.assertEqual(rc, 1)
        self.assertIn("the PyTorch run has 100 steps, expected 101", out)
        log = kiln_log(curve()) + "step 5 loss 1.0 step_ms 1\n"
        rc, _, err = self.run_compare(None, curve(), log=log)
        self.assertEqual(rc, 2)
        self.assertIn("step 5 is logged twice", err)

    def test_parse_ignores_other_lines(self):
        losses = lc.parse_kiln_log(kiln_log([5.5, 5.25]))
        self.assertEqual(losses, {1: 5.5, 2: 5.25})

    def test_relative_difference(self):
        self.assertAlmostEqual(lc.relative_difference(1.01, 1.0), 0.01)
        self.assertEqual(lc.relative_difference(0.0, 0.0), 0.0)
        self.assertEqual(lc.relative_difference(1.0, 0.0), math.inf)
        self.assertTrue(math.isnan(lc.relative_difference(math.nan, 1.0)))


def model_adapter_shapes(cfg):
    """bench/model.py's adapter parameter names and shapes, without torch."""
    shapes = {}
    for layer in range(cfg.layers):
        for name, fan_in, fan_out in linear_shapes(cfg):
            block = "mlp" if name in ("gate_proj", "up_proj", "down_proj") else "self_attn"
            prefix = f"model.layers.{layer}.{block}.{name}"
            shapes[f"{prefix}.lora_A.weight"] = [cfg.lora_r, fan_in]
            shapes[f"{prefix}.lora_B.weight"] = [fan_out, cfg.lora_r]
    return shapes


class MappingTest(unittest.TestCase):
    cfg = CONFIGS["curve"]

    def peft_file(self):
        return {lc.PEFT_PREFIX + n: s for n, s in model_adapter_shapes(self.cfg).items()}

    def test_every_adapter_maps(self):
        model = model_adapter_shapes(self.cfg)
        mapping = lc.adapter_mapping(self.peft_file(), model)
        self.assertEqual(len(mapping), 4 * 7 * 2)
        self.assertEqual(mapping["model.layers.3.mlp.down_proj.lora_A.weight"],
                         "base_model.model.model.layers.3.mlp.down_proj.lora_A.weight")

    def test_missing_extra_and_shape_fail_loudly(self):
        model = model_adapter_shapes(self.cfg)
        f = self.peft_file()
        del f["base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight"]
        f["base_model.model.lm_head.lora_A.weight"] = [16, 256]
        f["base_model.model.model.layers.1.self_attn.k_proj.lora_B.weight"] = [256, 16]
        with self.assertRaises(lc.CurveError) as e:
            lc.adapter_mapping(f, model)
        message = str(e.exception)
        self.assertIn("'model.layers.0.self_attn.q_proj.lora_B.weight' has no tensor", message)
        self.assertIn("'base_model.model.lm_head.lora_A.weight' is no parameter", message)
        self.assertIn("k_proj.lora_B.weight' is [256, 16], the model's", message)
        self.assertIn("[128, 16]", message)

    def test_non_peft_names(self):
        with self.assertRaises(lc.CurveError) as e:
            lc.adapter_mapping(model_adapter_shapes(self.cfg), model_adapter_shapes(self.cfg))
        self.assertIn("not PEFT names", str(e.exception))

    def test_base_weights(self):
        model = {"model.embed_tokens.weight": [4096, 256], "lm_head.weight": [4096, 256]}
        self.assertEqual(lc.base_mapping(dict(model), model)["lm_head.weight"], "lm_head.weight")
        with self.assertRaises(lc.CurveError) as e:
            lc.base_mapping({"model.embed_tokens.weight": [4096, 256], "mul_5": [16]}, model)
        self.assertIn("'lm_head.weight' has no tensor", str(e.exception))
        self.assertIn("'mul_5' is no parameter", str(e.exception))


class PytorchFlagsTest(unittest.TestCase):
    """The QLoRA flags of `loss_curve.py pytorch` (the run itself needs torch:
    bench/check.sh dry-run)."""
    common = ["pytorch", "--weights", "w", "--adapters", "a", "--data", "d"]

    def test_quant_nf4_parses_and_other_schemes_do_not(self):
        args = lc.parse_args(self.common + ["--quant", "nf4", "--nf4-weights", "29"])
        self.assertEqual((args.quant, args.nf4_weights), ("nf4", 29))
        self.assertIsNone(lc.parse_args(self.common).quant)
        with contextlib.redirect_stderr(io.StringIO()), self.assertRaises(SystemExit):
            lc.parse_args(self.common + ["--quant", "int8"])

    def test_nf4_weights_needs_quant(self):
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            rc = lc.main(self.common + ["--nf4-weights", "29"])
        self.assertEqual(rc, 2)
        self.assertIn("--nf4-weights needs --quant nf4", err.getvalue())


class CurveInterpTest(unittest.TestCase):
    """curve_interp.py's reading of the step's frozen parameters."""

    def test_frozen_params(self):
        import curve_interp

        text = """
    %32 = kiln.parameter "val_23" {kiln.source_name = "model.layers.0.self_attn.q_proj.weight", kiln.source_transposed = true} : tensor<256x256xbf16>
    %16 = kiln.parameter "mul_5" : tensor<16xf32>
    %1 = kiln.parameter "model.embed_tokens.weight" : tensor<4096x256xbf16>
    %2 = kiln.parameter "val_23.nf4_codes" {kiln.init = "nf4_quantize(val_23)"} : tensor<32768xui8>
    %3 = kiln.parameter "model.layers.0.mlp.up_proj.lora_A.weight" : tensor<16x256xf32>
    %4 = kiln.parameter "val_9" : tensor<f32>
"""
        self.assertEqual(curve_interp.frozen_params(text), {
            "val_23": ("model.layers.0.self_attn.q_proj.weight", True, [256, 256], "bf16"),
            "mul_5": ("mul_5", False, [16], "f32"),
            "model.embed_tokens.weight": ("model.embed_tokens.weight", False, [4096, 256],
                                          "bf16"),
            "val_9": ("val_9", False, [], "f32"),
        })


class SafetensorsTest(unittest.TestCase):
    def test_round_trip_and_merge(self):
        with tempfile.TemporaryDirectory() as d:
            w, out = os.path.join(d, "w.safetensors"), os.path.join(d, "k.safetensors")
            a = struct.pack("<4f", 1, 2, 3, 4)
            lc.write_safetensors(w, [("a", "F32", [2, 2], a)], {"format": "pt"})
            tensors, metadata = lc.read_safetensors(w)
            self.assertEqual(tensors, {"a": ("F32", [2, 2], a)})
            self.assertEqual(metadata, {"format": "pt"})
            extra = [("a", "F32", [2, 2], b"\0" * 16), ("mul_5", "F32", [1], struct.pack("<f", 0.5)),
                     ("val_143", "BF16", [1], b"\xd7\x3e")]
            self.assertEqual(lc.merge_kiln_weights(w, extra, out), ["mul_5", "val_143"])
            merged, _ = lc.read_safetensors(out)
            self.assertEqual(merged["a"][2], a)  # the weights file's tensor wins
            self.assertEqual(merged["val_143"], ("BF16", [1], b"\xd7\x3e"))


if __name__ == "__main__":
    unittest.main()
