#!/usr/bin/env python3
"""Writes the dtype golden vectors that tests/dtype_test.c reads, using the gguf package (PyPI
`gguf`, an implementation of ggml's formats independent of mk) as the reference.

For each of mk's 15 weight types, dtype_golden_<type>.bin holds blocks of random bytes with valid
fp16 scales, including extreme ones (0, subnormal, 65504, negative) and all-min / all-max quants,
and gguf.quants.dequantize's output for them. For the types gguf can also quantize,
dtype_quant_<type>.bin holds float inputs (random and edge-case blocks) and gguf.quants.quantize's
bytes for them.

File layout, all little-endian:
  golden: "MKDG", u32 ggml type, u32 n_blocks, u32 block_bytes, u32 block_elems,
          n_blocks * block_bytes bytes, then n_blocks * block_elems f32
  quant:  "MKQG", u32 ggml type, u32 n_elems, u32 out_bytes, n_elems f32, then out_bytes bytes

Usage: python3 tests/data/make_dtype_golden.py [OUT_DIR]   (default: this script's folder)
Requires: pip install gguf numpy
"""
import os
import struct
import sys

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants
from gguf.constants import GGML_QUANT_SIZES

# Byte offsets of the fp16 scale fields in one block of each type (from ggml-common.h).
FP16_FIELDS = {
    T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0],
    T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208],
    T.IQ4_NL: [0], T.IQ4_XS: [0],
}
PLAIN = {T.F32: 4, T.F16: 2, T.BF16: 2}
TYPES = [T.F32, T.F16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K,
         T.Q6_K, T.IQ4_NL, T.IQ4_XS, T.BF16]
QUANTIZABLE = [T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.BF16, T.F16]

# Extreme fp16 scales: +0, -0, smallest and largest subnormal, smallest normal, 1, -1, 65504, -65504.
EXTREME_HALVES = [0x0000, 0x8000, 0x0001, 0x03FF, 0x0400, 0x3C00, 0xBC00, 0x7BFF, 0xFBFF]


def random_finite_halves(rng, n):
    """n random fp16 bit patterns, never inf or NaN."""
    h = rng.integers(0, 1 << 16, size=n, dtype=np.uint32)
    bad = (h & 0x7C00) == 0x7C00
    h[bad] &= 0xBFFF  # clear the top exponent bit: finite
    return h.astype(np.uint16)


def golden_blocks(rng, qtype):
    if qtype in PLAIN:
        # 256 elements per "block": random finite values plus the extreme patterns
        if qtype == T.F32:
            vals = rng.standard_normal(1024).astype(np.float32)
            vals[:8] = [0.0, -0.0, 1e-45, -1e-45, 3.4e38, -3.4e38, 1.17549435e-38, 1.0]
            return vals.view(np.uint8).reshape(4, 1024), 256
        h = random_finite_halves(rng, 1024)
        if qtype == T.F16:
            h[: len(EXTREME_HALVES)] = EXTREME_HALVES
        else:  # bf16: keep finite (exponent not all ones)
            bad = (h & 0x7F80) == 0x7F80
            h[bad] &= 0xBFFF
            h[:6] = [0x0000, 0x8000, 0x0001, 0x807F, 0x7F7F, 0xFF7F]
        return h.view(np.uint8).reshape(4, 512), 256
    block_elems, block_bytes = GGML_QUANT_SIZES[qtype]
    n_blocks = 32 if block_elems == 32 else 8
    blocks = rng.integers(0, 256, size=(n_blocks, block_bytes), dtype=np.uint8)
    fields = FP16_FIELDS[qtype]
    for b in range(n_blocks):
        for k, off in enumerate(fields):
            if b < len(EXTREME_HALVES):
                h = EXTREME_HALVES[(b + 3 * k) % len(EXTREME_HALVES)]
            else:
                h = int(random_finite_halves(rng, 1)[0])
            blocks[b, off:off + 2] = [h & 0xFF, h >> 8]
    # min and max quants (every non-scale byte 0x00, resp. 0xFF) under ordinary and extreme scales
    scale_bytes = {o + i for o in fields for i in (0, 1)}
    rest = [i for i in range(block_bytes) if i not in scale_bytes]
    for b, fill in ((n_blocks - 1, 0x00), (n_blocks - 2, 0xFF), (1, 0xFF), (7, 0x00)):
        blocks[b, rest] = fill
    return blocks, block_elems


def quant_inputs(rng, block_elems):
    """Float blocks: random normal ones and edge cases for the scale and rounding logic."""
    blocks = [rng.standard_normal(block_elems).astype(np.float32) * np.float32(s)
              for s in (1.0, 0.02, 300.0, 1e-6, 1.0, 5.0)]
    edge = [
        np.zeros(block_elems, np.float32),
        np.full(block_elems, 0.75, np.float32),
        np.full(block_elems, -2.5, np.float32),
        np.linspace(-1, 1, block_elems, dtype=np.float32),
        np.linspace(0.5, 3, block_elems, dtype=np.float32),
        np.where(np.arange(block_elems) == 5, np.float32(-40.0), np.float32(0.01)).astype(np.float32),
        # tiny inputs whose scale underflows fp16 (not subnormal floats: ggml divides by the scale
        # and converts inf to int there, which C leaves undefined)
        (rng.standard_normal(block_elems) * 1e-36).astype(np.float32),
        np.abs(rng.standard_normal(block_elems)).astype(np.float32),      # one-signed
    ]
    return np.concatenate(blocks + edge).astype(np.float32)


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    rng = np.random.default_rng(20261122)
    for qtype in TYPES:
        blocks, block_elems = golden_blocks(rng, qtype)
        deq = quants.dequantize(blocks.reshape(-1), qtype).astype(np.float32).reshape(-1)
        assert deq.size == blocks.shape[0] * block_elems
        name = qtype.name.lower()
        with open(os.path.join(out_dir, f"dtype_golden_{name}.bin"), "wb") as f:
            f.write(b"MKDG" + struct.pack("<4I", int(qtype), blocks.shape[0], blocks.shape[1], block_elems))
            f.write(blocks.tobytes())
            f.write(deq.astype("<f4").tobytes())
    for qtype in QUANTIZABLE:
        x = quant_inputs(rng, 32)
        q = np.asarray(quants.quantize(x, qtype)).view(np.uint8).reshape(-1)
        name = qtype.name.lower()
        with open(os.path.join(out_dir, f"dtype_quant_{name}.bin"), "wb") as f:
            f.write(b"MKQG" + struct.pack("<3I", int(qtype), x.size, q.size))
            f.write(x.astype("<f4").tobytes())
            f.write(q.tobytes())


if __name__ == "__main__":
    main()
