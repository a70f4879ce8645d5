"""Checks the FLOP accounting against hand-computed values (runs without torch):
python3 -m unittest discover -s bench -p 'test_*.py'"""

import unittest

from configs import CONFIGS, frozen_gemm_params, lora_params, step_flops


class FlopTest(unittest.TestCase):
    def test_small_counts(self):
        cfg = CONFIGS["small"]
        # Per layer: 4 * 768^2 attention + 3 * 768 * 2048 MLP.
        per_layer = 4 * 768 * 768 + 3 * 768 * 2048
        self.assertEqual(frozen_gemm_params(cfg), 12 * per_layer + 768 * 32000)
        # r * (in + out) per adapted projection.
        lora_per_layer = 16 * (4 * (768 + 768) + 2 * (768 + 2048) + (2048 + 768))
        self.assertEqual(lora_params(cfg), 12 * lora_per_layer)

    def test_1b_uses_grouped_kv(self):
        cfg = CONFIGS["1b"]
        kv = 8 * 64
        per_layer = 2 * 2048 * 2048 + 2 * 2048 * kv + 3 * 2048 * 8192
        self.assertEqual(frozen_gemm_params(cfg), 16 * per_layer + 2048 * 128256)
        # Llama-3.2-1B's non-embedding GEMM weights are about 1.2 B with the head.
        self.assertAlmostEqual(frozen_gemm_params(cfg) / 1e9, 1.236, places=2)

    def test_step_flops(self):
        cfg = CONFIGS["small"]
        flops = step_flops(cfg)
        t = 8 * 1024
        self.assertEqual(flops["frozen"], 4 * frozen_gemm_params(cfg) * t)
        self.assertEqual(flops["lora"], 6 * lora_params(cfg) * t)
        self.assertEqual(flops["attention"], 3.5 * 2 * 8 * 1024 * 1024 * 768 * 12)
        self.assertEqual(flops["total"],
                         flops["frozen"] + flops["lora"] + flops["attention"])


if __name__ == "__main__":
    unittest.main()
