"""bench/hf_peft.py: the HF config and PEFT settings of the bench configs, the
reload judge and the log reader (no torch needed); with torch, transformers
and peft installed, the model's adapter names and its loss convention.
python3 -m unittest discover -s bench -p 'test_*.py'"""

import importlib.util
import math
import os
import tempfile
import unittest

import hf_peft
from configs import CONFIGS, LORA_TARGETS

HAVE_HF = all(importlib.util.find_spec(m) for m in ("torch", "transformers", "peft"))


class ConfigTest(unittest.TestCase):
    def test_llama_config_has_the_bench_shapes(self):
        for name in ("small", "1b", "curve"):
            cfg = CONFIGS[name]
            c = hf_peft.llama_config(cfg)
            self.assertEqual((c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"],
                              c["head_dim"], c["intermediate_size"], c["vocab_size"],
                              c["num_hidden_layers"]),
                             (cfg.d_model, cfg.heads, cfg.kv_heads, cfg.head_dim, cfg.ffn,
                              cfg.vocab, cfg.layers), name)
            # Untied, like bench/model.py's separate lm_head.
            self.assertFalse(c["tie_word_embeddings"])
            self.assertGreaterEqual(c["max_position_embeddings"], cfg.seq)

    def test_lora_settings_match_kiln_spec(self):
        cfg = CONFIGS["curve"]
        s = hf_peft.lora_settings(cfg)
        self.assertEqual(s["target_modules"], list(LORA_TARGETS))
        self.assertEqual((s["r"], s["lora_alpha"], s["lora_dropout"]), (16, 32, 0.0))
        self.assertEqual(hf_peft.kiln_lora_spec(cfg), "r=16,alpha=32,dropout=0")


class ReloadJudgeTest(unittest.TestCase):
    def test_within_and_outside(self):
        self.assertEqual(hf_peft.judge_reload(4.0004, 4.0, 1e-3)[0], True)
        ok, rel = hf_peft.judge_reload(4.01, 4.0, 1e-3)
        self.assertFalse(ok)
        self.assertAlmostEqual(rel, 0.0025)
        self.assertFalse(hf_peft.judge_reload(math.nan, 4.0, 1e-3)[0])
        self.assertFalse(hf_peft.judge_reload(4.0, math.inf, 1e-3)[0])

    def test_logged_loss(self):
        with tempfile.NamedTemporaryFile("w", suffix=".log", delete=False) as f:
            f.write("resume ckpt: step 100\nstep 101 loss 3.2500000 step_ms 1.0 tokens/s 9 "
                    "peak_mem 1\n")
        try:
            self.assertEqual(hf_peft.logged_loss(f.name, 101), 3.25)
            with self.assertRaises(hf_peft.HfError):
                hf_peft.logged_loss(f.name, 100)
        finally:
            os.remove(f.name)


@unittest.skipUnless(HAVE_HF, "torch, transformers and peft are not all installed")
class ModelTest(unittest.TestCase):
    def test_adapter_names_are_kilns(self):
        """PEFT's parameter names minus base_model.model. are the names
        kiln-lora gives the adapters of the export (<module>.lora_A.weight)."""
        cfg = CONFIGS["tiny"]
        model = hf_peft.add_lora(hf_peft.build_model(cfg, 0), cfg, 0)
        names = [n for n, p in model.named_parameters() if p.requires_grad]
        self.assertEqual(len(names), cfg.layers * len(LORA_TARGETS) * 2)
        for n in names:
            self.assertTrue(n.startswith("base_model.model.model.layers."), n)
            self.assertRegex(n, r"\.(q|k|v|o|gate|up|down)_proj\.lora_[AB]\.default\.weight$")

    def test_loss_takes_labels_as_the_next_tokens(self):
        """causal_lm_loss(inputs, labels) is the mean cross entropy of
        logits[t] against labels[t]: no second shift (export --labels shifted)."""
        import torch
        import torch.nn.functional as F

        cfg = CONFIGS["tiny"]
        model = hf_peft.build_model(cfg, 0).eval()
        ids = torch.randint(0, cfg.vocab, (2, 9), generator=torch.Generator().manual_seed(1))
        inputs, labels = ids[:, :-1], ids[:, 1:]
        with torch.no_grad():
            loss = hf_peft.causal_lm_loss(model, inputs, labels)
            logits = model(input_ids=inputs).logits
        want = F.cross_entropy(logits.reshape(-1, cfg.vocab).float(), labels.reshape(-1))
        self.assertAlmostEqual(float(loss), float(want), places=5)


if __name__ == "__main__":
    unittest.main()
