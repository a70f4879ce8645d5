"""An independent NumPy NF4 (QLoRA) quantizer, the reference Kiln's is checked against.

Follows the QLoRA paper (Dettmers et al., 2023): the 16-value NormalFloat4 table
of its appendix E, blocks of 64 over the weight flattened row-major in
PyTorch's [out, in] layout, one fp32 absmax per block, every element rounded to
the nearest table value after scaling by the fp32 reciprocal of its block's
absmax (bitsandbytes' arithmetic); two codes per byte, the first in the high
nibble. Written with vectorized NumPy and argmin, not the midpoint search Kiln
uses, so the two implementations share only the table.
"""
import numpy as np

NF4_TABLE = np.array([
    -1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
    -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
    0.07958029955625534, 0.16093020141124725, 0.24611230194568634,
    0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
    0.7229568362236023, 1.0], dtype=np.float32)


def quantize(weight, block_size=64):
    """(packed codes uint8 [ceil(n/2)], absmax float32 [ceil(n/block)])."""
    flat = np.asarray(weight, dtype=np.float32).reshape(-1)
    n = flat.size
    blocks = -(-n // block_size)
    padded = np.zeros(blocks * block_size, dtype=np.float32)
    padded[:n] = flat
    grouped = padded.reshape(blocks, block_size)
    absmax = np.abs(grouped).max(axis=1).astype(np.float32)
    with np.errstate(divide="ignore"):
        inverse = np.where(absmax > 0, np.float32(1) / absmax, np.float32(0)).astype(np.float32)
    scaled = (grouped * inverse[:, None]).astype(np.float32).reshape(-1)[:n]
    distance = np.abs(scaled[:, None] - NF4_TABLE[None, :])
    codes = np.argmin(distance, axis=1).astype(np.uint8)  # ties: the lower code
    if n % 2:
        codes = np.append(codes, np.uint8(0))
    packed = (codes[0::2] << 4) | codes[1::2]
    return packed.astype(np.uint8), absmax


def dequantize(packed, absmax, count, block_size=64):
    """float32 [count]: table value of each code times its block's absmax."""
    codes = np.empty(packed.size * 2, dtype=np.uint8)
    codes[0::2] = packed >> 4
    codes[1::2] = packed & 0xF
    codes = codes[:count]
    scale = np.repeat(absmax.astype(np.float32), block_size)[:count]
    return (NF4_TABLE[codes] * scale).astype(np.float32)
