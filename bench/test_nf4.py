"""bench/nf4.py against its definition (CPU): codes round trip, the nearest
NF4 value per element, bitsandbytes' tie rule, the layout Kiln uses, the
backward dequantizing again without keeping the weight, and loss_curve.py's
--quant nf4 model. test/Quant/nf4-bench-codes.test checks the codes against
Kiln's own."""
import unittest

import torch

import nf4


class NF4Test(unittest.TestCase):
    def test_codes_are_the_nearest_value_and_the_layout_is_kilns(self):
        torch.manual_seed(0)
        w = torch.randn(8, 64)
        codes, absmax = nf4.quantize(w)
        self.assertEqual(codes.shape, (256,))
        self.assertEqual(absmax.shape, (8,))
        torch.testing.assert_close(absmax, w.abs().amax(dim=1))
        table = torch.tensor(nf4.NF4_VALUES)
        scaled = (w / absmax[:, None]).reshape(-1)
        nearest = (scaled[:, None] - table).abs().argmin(dim=1)
        # Element 2i in the high nibble, 2i+1 in the low one.
        self.assertTrue(torch.equal((codes >> 4).long(), nearest[0::2]))
        self.assertTrue(torch.equal((codes & 15).long(), nearest[1::2]))
        back = nf4.dequantize(codes, absmax, w.shape, torch.float32)
        torch.testing.assert_close(back, (table[nearest] * absmax.repeat_interleave(64)).view(8, 64))
        # NF4's worst spacing is 0.2 of the block's absmax.
        self.assertLessEqual(float((back - w).abs().max()), 0.2 * float(absmax.max()))

    def test_ties_take_the_lower_code_and_a_zero_block_has_absmax_zero(self):
        mids = nf4.midpoints()
        up = torch.nextafter(mids, torch.tensor(2.0))
        block = torch.cat([torch.tensor([1.0]), mids, up, torch.zeros(64 - 31)])
        w = torch.stack([block, torch.zeros(64)])
        codes, absmax = nf4.quantize(w)
        high, low = (codes >> 4).long(), (codes & 15).long()
        every = torch.stack((high, low), dim=1).reshape(-1)
        self.assertTrue(torch.equal(every[1:16], torch.arange(15)))  # on a midpoint: lower
        self.assertTrue(torch.equal(every[16:31], torch.arange(1, 16)))  # one ulp above: upper
        self.assertEqual(int(every[0]), 15)
        self.assertEqual(absmax.tolist(), [1.0, 0.0])
        self.assertTrue(bool((every[64:] == 7).all()))  # zero block: the value 0

    def test_scaling_is_by_the_fp32_reciprocal(self):
        # An element whose product with 1 / absmax is on or below the
        # midpoint of codes 13 and 14 while its quotient by absmax is above
        # it: bitsandbytes and Kiln multiply, so it takes code 13.
        m = nf4.midpoints()[13]
        found = None
        for a in torch.linspace(1.01, 3.99, 300):
            x = torch.nextafter(m * a, torch.tensor(0.0))
            for _ in range(4):
                if x * (1.0 / a) <= m < x / a:
                    found = (a, x)
                    break
                x = torch.nextafter(x, 2.0 * a)
            if found:
                break
        self.assertIsNotNone(found)
        a, x = found
        codes, _ = nf4.quantize(torch.cat([a.view(1), x.view(1), torch.zeros(62)]).view(1, 64))
        self.assertEqual(int(codes[0] & 15), 13)

    def test_linear_backward_matches_the_dequantized_weight(self):
        torch.manual_seed(1)
        w = torch.randn(32, 64)
        weight = nf4.NF4Weight(w)
        x = torch.randn(4, 64, requires_grad=True)
        y = weight.linear(x)
        deq = nf4.dequantize(weight.codes, weight.absmax, w.shape, torch.float32)
        torch.testing.assert_close(y, x @ deq.T)
        g = torch.randn_like(y)
        y.backward(g)
        torch.testing.assert_close(x.grad, g @ deq)


class QuantizedCurveModelTest(unittest.TestCase):
    def test_quantize_base_replaces_every_linear_but_not_the_embedding(self):
        import loss_curve
        from configs import CONFIGS
        from model import build

        cfg = CONFIGS["tiny"]
        model = build(cfg, torch.device("cpu"), lora=True, seed=3)
        weights = {n: p.detach().clone() for n, p in model.named_parameters()
                   if n.endswith(".weight") and ".lora_" not in n and p.dim() == 2}
        ids = torch.randint(0, cfg.vocab, (cfg.batch, cfg.seq))
        record = loss_curve.quantize_base(model)
        self.assertEqual(record["weights"], cfg.layers * 7 + 1)  # and the LM head
        self.assertIsNotNone(model.model.embed_tokens.weight)
        self.assertIsNone(model.lm_head.weight)
        again = build(cfg, torch.device("cpu"), lora=True, seed=3)
        self.assertEqual(loss_curve.quantize_base(again)["sha256"], record["sha256"])
        # The loss is the bf16 model's with every weight replaced by its
        # dequantized NF4 value.
        reference = build(cfg, torch.device("cpu"), lora=True, seed=3)
        with torch.no_grad():
            for name, p in reference.named_parameters():
                if name in weights and name != "model.embed_tokens.weight":
                    codes, absmax = nf4.quantize(weights[name])
                    p.copy_(nf4.dequantize(codes, absmax, p.shape, p.dtype))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            got, want = model(ids, ids), reference(ids, ids)
        self.assertEqual(float(got.detach()), float(want.detach()))


if __name__ == "__main__":
    unittest.main()
