"""bench/nf4.py against its definition (CPU): codes round trip, the nearest
NF4 value per element, the layout Kiln uses, and the backward dequantizing
again without keeping the weight."""
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


if __name__ == "__main__":
    unittest.main()
