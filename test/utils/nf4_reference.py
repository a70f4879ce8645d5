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


def dynamic_map():
    """The signed 8-bit dynamic map of the 8-bit optimizers paper (Dettmers et
    al., 2022) that QLoRA's double quantization uses: for e = 0..6, the 2^e
    midpoints of 2^e + 1 evenly spaced points on [0.1, 1], scaled by
    10^(e - 6), both signs; plus 0 and 1. float32 arithmetic throughout."""
    values = [np.float32(0), np.float32(1)]
    for e in range(7):
        points = 2 ** e + 1
        step = (np.float32(1) - np.float32(0.1)) / np.float32(points - 1)
        grid = np.float32(0.1) + step * np.arange(points, dtype=np.float32)
        means = (grid[:-1] + grid[1:]) * np.float32(0.5)
        scaled = np.float32(10.0 ** (e - 6)) * means
        values += list(scaled) + list(-scaled)
    table = np.sort(np.array(values, dtype=np.float32))
    assert table.size == 256
    return table


def quantize_8bit(values, block_size=256):
    """(codes uint8 [n], absmax float32 [ceil(n/block)]): nearest map value."""
    table = dynamic_map()
    flat = np.asarray(values, dtype=np.float32).reshape(-1)
    n = flat.size
    blocks = -(-n // block_size)
    absmax = np.array([np.abs(flat[b * block_size:(b + 1) * block_size]).max()
                       for b in range(blocks)], dtype=np.float32)
    with np.errstate(divide="ignore"):
        inverse = np.where(absmax > 0, np.float32(1) / absmax, np.float32(0)).astype(np.float32)
    scaled = (flat * np.repeat(inverse, block_size)[:n]).astype(np.float32)
    distance = np.abs(scaled[:, None] - table[None, :])
    return np.argmin(distance, axis=1).astype(np.uint8), absmax


def dequantize_8bit(codes, absmax, block_size=256):
    table = dynamic_map()
    scale = np.repeat(absmax.astype(np.float32), block_size)[:codes.size]
    return (table[codes] * scale).astype(np.float32)


def double_quantize(absmax):
    """QLoRA's double quantization of NF4 absmax values: the fp32 mean
    (accumulated in fp64) as offset, the centred values as 8-bit codes."""
    offset = np.float32(np.mean(absmax.astype(np.float64)))
    codes, scale = quantize_8bit((absmax - offset).astype(np.float32))
    return codes, scale, offset


def double_dequantize(codes, scale, offset):
    return (dequantize_8bit(codes, scale) + np.float32(offset)).astype(np.float32)
