#!/usr/bin/python3
"""Writes rounding_f32.txt and rounding_f64.txt, the f16/bf16 rounding references of the tests.

Run once with Debian's python3-numpy and python3-torch:  /usr/bin/python3 make_rounding_table.py
Expected values come from numpy and torch casts; the bf16 column is also checked against an
exact nearest-value search in float64, so every row has two independent sources. NaNs are left
out: numpy does not force the quiet bit as Burn does, and the tests check NaNs by rule.
"""
import os
import numpy as np
import torch

here = os.path.dirname(os.path.abspath(__file__))
rng = np.random.default_rng(20261202)


def f32_inputs():
    special = [0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7F7FFFFF, 0xFF7FFFFF,
               0x00800000, 0x00000001, 0x807FFFFF, 0x3F800000, 0xBF800000]
    for v in [65504.0, 65519.0, 65519.996, 65520.0, 65536.0, 2.0**-14, 2.0**-24, 2.0**-25,
              1.5 * 2.0**-25, 2.0**-26, 1 + 2.0**-11, 1 + 3 * 2.0**-11, 1 + 2.0**-8,
              1 + 3 * 2.0**-8, 3.3895313892515355e38, 0.1, 1.0 / 3.0]:
        for s in (1.0, -1.0):
            special.append(int(np.array([s * v], dtype=np.float32).view(np.uint32)[0]))
    uniform = rng.integers(0, 2**32, 8000, dtype=np.uint64).astype(np.uint32)
    # Values in the f16 range with the 13 dropped bits at, just below and just above a tie.
    exps = rng.integers(127 - 26, 127 + 16, 4000, dtype=np.uint32)
    mant = rng.integers(0, 2**23, 4000, dtype=np.uint32)
    low13 = rng.choice(np.array([0x0FFF, 0x1000, 0x1001, 0x0000], dtype=np.uint32), 4000)
    sign = rng.integers(0, 2, 4000, dtype=np.uint32) << 31
    f16_ties = sign | (exps << 23) | ((mant & ~np.uint32(0x1FFF)) | low13)
    # The same at the 16 dropped bits of bf16, over the whole exponent range.
    exps = rng.integers(0, 255, 4000, dtype=np.uint32)
    low16 = rng.choice(np.array([0x7FFF, 0x8000, 0x8001, 0x0000], dtype=np.uint32), 4000)
    bf16_ties = sign | (exps << 23) | ((mant & ~np.uint32(0xFFFF)) | low16)
    bits = np.concatenate([np.array(special, dtype=np.uint32), uniform, f16_ties, bf16_ties])
    values = bits.view(np.float32)
    return bits[~np.isnan(values)]


def bf16_nearest(x64):
    """Round each float64 value (exactly an f32) to bf16 by comparing exact distances."""
    out = []
    for x in x64:
        if np.isinf(x):
            out.append(0x7F80 if x > 0 else 0xFF80)
            continue
        bits = int(np.array([x], dtype=np.float32).view(np.uint32)[0])
        lo = bits >> 16
        cands = [lo, lo + 1]
        vals = [float(np.array([c << 16], dtype=np.uint32).view(np.float32)[0]) for c in cands]
        # The step above the largest finite bf16 is infinity; its value as the next power.
        if (lo + 1) & 0x7FFF == 0x7F80:
            vals[1] = float(np.sign(x)) * 2.0**128
        d0, d1 = abs(x - vals[0]), abs(x - vals[1])
        pick = 0 if d0 < d1 else 1 if d1 < d0 else (0 if lo % 2 == 0 else 1)
        out.append(cands[pick])
    return np.array(out, dtype=np.uint16)


def main():
    bits = f32_inputs()
    f32 = torch.from_numpy(bits.view(np.float32).copy())
    f16_torch = f32.to(torch.float16).view(torch.int16).numpy().view(np.uint16)
    f16_numpy = bits.view(np.float32).astype(np.float16).view(np.uint16)
    assert (f16_torch == f16_numpy).all(), "numpy and torch disagree on f16"
    bf16_torch = f32.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    assert (bf16_torch == bf16_nearest(bits.view(np.float32).astype(np.float64))).all()
    with open(os.path.join(here, "rounding_f32.txt"), "w") as out:
        out.write("# f32 bits, f16 bits, bf16 bits (round to nearest even); made by "
                  "make_rounding_table.py\n")
        for b, h, bh in zip(bits, f16_torch, bf16_torch):
            out.write(f"{b:08x} {h:04x} {bh:04x}\n")

    # f64 inputs: Burn narrows through f32 (double rounding). The last column is numpy's direct
    # f64 -> f16 rounding, to show which rows double rounding changes.
    base = rng.uniform(-70000.0, 70000.0, 3000)
    scale = 2.0 ** rng.integers(-30, 2, 3000)
    f64 = np.concatenate([base * scale,
                          [1 + 2.0**-11 + 2.0**-40, -(1 + 2.0**-11 + 2.0**-40),
                           1 + 2.0**-8 + 2.0**-40, 65519.99999999, 1e300, -1e300, 5e-324]])
    t64 = torch.from_numpy(f64)
    f16_double = t64.to(torch.float32).to(torch.float16).view(torch.int16).numpy().view(np.uint16)
    bf16_double = t64.to(torch.float32).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    f16_direct = f64.astype(np.float16).view(np.uint16)
    with open(os.path.join(here, "rounding_f64.txt"), "w") as out:
        out.write("# f64 bits, f16 bits and bf16 bits through f32, f16 bits rounded directly\n")
        for d, h, bh, hd in zip(f64.view(np.uint64), f16_double, bf16_double, f16_direct):
            out.write(f"{d:016x} {h:04x} {bh:04x} {hd:04x}\n")


if __name__ == "__main__":
    main()
