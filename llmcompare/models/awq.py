"""AutoAWQ "gemm" int4 layout, in numpy (no torch): packing, unpacking, random valid tensors, dequantization.

For a linear y = x @ W with W of shape [K (in), N (out)] and group size g along K:
  qweight int32 [K, N/8]    eight 4-bit weights per int32, nibble i holds column 8c + ORDER[i]
  qzeros  int32 [K/g, N/8]  same packing, one zero point per group and column
  scales  fp16  [K/g, N]
  W[k, n] = (q[k, n] - z[k // g, n]) * s[k // g, n]
"""

from __future__ import annotations

import numpy as np

ORDER = (0, 2, 4, 6, 1, 3, 5, 7)  # nibble i <- column ORDER[i] of each group of eight


REVERSE = (0, 4, 1, 5, 2, 6, 3, 7)  # column j -> nibble REVERSE[j]


def pack(values: np.ndarray) -> np.ndarray:
    """[R, C] integers in 0..15 -> [R, C/8] int32 in AutoAWQ order."""
    r, c = values.shape
    if c % 8:
        raise ValueError(f"columns must be a multiple of 8, got {c}")
    v = values.astype(np.uint32).reshape(r, c // 8, 8)
    out = np.zeros((r, c // 8), dtype=np.uint32)
    for i, col in enumerate(ORDER):
        out |= (v[:, :, col] & 0xF) << np.uint32(4 * i)
    return out.view(np.int32)


def unpack(packed: np.ndarray) -> np.ndarray:
    """[R, C/8] int32 -> [R, C] uint8 in 0..15."""
    u = packed.view(np.uint32)
    r, c8 = u.shape
    out = np.empty((r, c8, 8), dtype=np.uint8)
    for col in range(8):
        out[:, :, col] = (u >> np.uint32(4 * REVERSE[col])) & 0xF
    return out.reshape(r, c8 * 8)


def random_awq(k: int, n: int, group_size: int, rng: np.random.Generator,
               weight_std: float = 0.02) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Random but valid AWQ tensors whose dequantized weight has std ~weight_std.
    qweight: every nibble uniform in 0..15 (random 32-bit words); zeros 7 or 8; scales ~weight_std/4.6."""
    if k % group_size or n % 8:
        raise ValueError(f"K={k} must be a multiple of group_size={group_size}, N={n} a multiple of 8")
    qweight = rng.integers(0, 2**32, size=(k, n // 8), dtype=np.uint32).view(np.int32)
    qzeros = pack(rng.integers(7, 9, size=(k // group_size, n), dtype=np.uint8))
    # (q - z) has std ~4.6 for q uniform in 0..15
    scales = (rng.uniform(0.5, 1.5, size=(k // group_size, n)) * weight_std / 4.6).astype(np.float16)
    return qweight, qzeros, scales


def dequantize(qweight: np.ndarray, qzeros: np.ndarray, scales: np.ndarray, group_size: int) -> np.ndarray:
    """-> float32 W [K, N]."""
    q = unpack(qweight).astype(np.float32)
    z = unpack(qzeros).astype(np.float32)
    s = scales.astype(np.float32)
    k, n = q.shape
    g = q.reshape(k // group_size, group_size, n)
    return ((g - z[:, None, :]) * s[:, None, :]).reshape(k, n)
