"""NF4 frozen weights for the PyTorch rows of the QLoRA benchmark.

bitsandbytes is not installed on the GPU machine, so the PyTorch QLoRA rows
use this: the same structure as bitsandbytes' 4-bit linear layers (the
weight stored as 4-bit NormalFloat codes, two per byte, with one fp32
absmax per block of 64; dequantized to bf16 right before the matmul in the
forward and again in the backward, never saved for it) written in plain
PyTorch. The layout is Kiln's (`kiln.nf4_quantize`: blocks over the
row-major [out, in] weight, the even element in the high nibble); the code
values are the QLoRA paper's NF4 table. No double quantization.

The codes are Kiln's bit for bit (test/Quant/nf4-bench-codes.test), which
are bitsandbytes': the element times the fp32 reciprocal of its block's
absmax (not divided by the absmax: the two differ in the last bit), then
the code above every fp32 midpoint of neighbouring values the scaled
element exceeds, so an element exactly on a midpoint takes the lower code
(bitsandbytes' `x > threshold` tree; the nearest value by argmin picks the
upper one on six of the fifteen midpoints, whose fp32 value lies above
the exact one). An all-zero block has absmax 0 and codes 7 (the value 0).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

# The 16 NF4 values (QLoRA, Dettmers et al. 2023, appendix E).
NF4_VALUES = (
    -1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
    -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
    0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
    0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0,
)
BLOCK = 64


def midpoints(device=None):
    """The 15 fp32 midpoints of neighbouring NF4 values: code c covers
    (midpoints[c - 1], midpoints[c]]."""
    table = torch.tensor(NF4_VALUES, dtype=torch.float32, device=device)
    return (table[:-1] + table[1:]) * 0.5


def quantize(weight: torch.Tensor):
    """(codes uint8 [numel / 2], absmax fp32 [numel / BLOCK]) of a weight,
    from its values as they are (a bf16 weight's bf16 values)."""
    flat = weight.detach().float().reshape(-1)
    assert flat.numel() % BLOCK == 0, "NF4 needs a multiple of 64 elements"
    blocks = flat.view(-1, BLOCK)
    absmax = blocks.abs().amax(dim=1)
    inverse = torch.where(absmax > 0, 1.0 / absmax, torch.zeros_like(absmax))
    bounds = midpoints(flat.device)
    codes = torch.empty(flat.numel(), dtype=torch.uint8, device=flat.device)
    rows = max(1, (1 << 24) // BLOCK)
    for start in range(0, blocks.shape[0], rows):  # bounded temporary memory
        scaled = blocks[start:start + rows] * inverse[start:start + rows, None]
        # How many midpoints lie strictly below: ties take the lower code.
        part = torch.bucketize(scaled.reshape(-1), bounds, right=False)
        codes[start * BLOCK:start * BLOCK + part.numel()] = part.to(torch.uint8)
    packed = (codes[0::2] << 4) | codes[1::2]
    return packed.contiguous(), absmax.contiguous()


def dequantize(codes, absmax, shape, dtype):
    table = torch.tensor(NF4_VALUES, device=codes.device)
    high, low = (codes >> 4).long(), (codes & 15).long()
    values = torch.stack((table[high], table[low]), dim=1).reshape(-1, BLOCK)
    return (values * absmax[:, None]).reshape(shape).to(dtype)


class _NF4Linear(torch.autograd.Function):
    """y = x W^T with W dequantized in the forward and again in the backward."""

    @staticmethod
    def forward(ctx, x, codes, absmax, shape):
        ctx.save_for_backward(codes, absmax)
        ctx.shape = shape
        return F.linear(x, dequantize(codes, absmax, shape, x.dtype))

    @staticmethod
    def backward(ctx, grad):
        codes, absmax = ctx.saved_tensors
        w = dequantize(codes, absmax, ctx.shape, grad.dtype)
        return grad @ w, None, None, None


class NF4Weight(nn.Module):
    """A frozen weight as NF4 codes and absmax buffers."""

    def __init__(self, weight: torch.Tensor, on=None):
        super().__init__()
        # `on`: the device that computes the codes (they are kept on the
        # weight's own).
        codes, absmax = quantize(weight if on is None else weight.to(on))
        self.register_buffer("codes", codes.to(weight.device))
        self.register_buffer("absmax", absmax.to(weight.device))
        self.shape = tuple(weight.shape)
        self.dtype = weight.dtype

    def linear(self, x):
        return _NF4Linear.apply(x, self.codes, self.absmax, self.shape)


def quantize_model(model: nn.Module, on=None) -> int:
    """Replaces the frozen weight of every LoRALinear (the LM head too, as
    `kiln compile --quant nf4` does) by NF4, the codes computed on device
    `on` (default: the weight's); returns how many."""
    from model import LoRALinear

    count = 0
    for module in model.modules():
        if isinstance(module, LoRALinear) and isinstance(module.weight, nn.Parameter):
            nf4 = NF4Weight(module.weight, on)
            del module.weight
            module.nf4 = nf4
            module.weight = None
            count += 1
    return count
