"""Counter-based uniforms for sampling: u(seed, step, attempt), a hash computed in integer tensor ops.

A draw depends on the row's own seed and step only, never on its position in the batch or on its
batch-mates, and the same integer ops run on CPU and CUDA. The hash is lowbias32 (C. Wellons' hash
prospector), a bijection on 32-bit integers, applied to the attempt number under two 32-bit keys
derived from (seed, step); two rounds give the 53 bits of a float64 in [0, 1).

`uniforms` computes a [B, A] block in tensor ops; `row_uniform` one value in Python integers, the same
bits: a sampler that needs one attempt a row (nearly always) computes only that one, in a few
microseconds, where the tensor version's fixed cost was a quarter of a batch-1 sampling step.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

_MASK32 = 0xFFFFFFFF
_GOLDEN = 0x9E3779B9


def uniforms(seeds: Sequence[int], steps: Sequence[int], attempts: int, device: torch.device) -> torch.Tensor:
    """[B, attempts] float64 in [0, 1): row b, column j is a function of (seeds[b], steps[b], j) alone."""
    keys = [row_key(seed, step) for seed, step in zip(seeds, steps)]
    k1 = torch.tensor([a for a, _ in keys], dtype=torch.int64, device=device)[:, None]  # [B, 1]
    k2 = torch.tensor([b for _, b in keys], dtype=torch.int64, device=device)[:, None]  # [B, 1]
    j = torch.arange(attempts, dtype=torch.int64, device=device)[None, :]  # [1, A]
    high = hash32(hash32(j ^ k1) ^ k2)  # [B, A] in [0, 2**32)
    low = hash32(high ^ _GOLDEN)
    return (high >> 5).double() * 2.0**-27 + (low >> 6).double() * 2.0**-53


def row_uniform(key: tuple[int, int], attempt: int) -> float:
    """Column `attempt` of `uniforms` for the row whose `row_key` is `key`, in Python integers."""
    k1, k2 = key
    high = hash32_int(hash32_int(attempt ^ k1) ^ k2)
    low = hash32_int(high ^ _GOLDEN)
    return (high >> 5) * 2.0**-27 + (low >> 6) * 2.0**-53


def row_key(seed: int, step: int) -> tuple[int, int]:
    if step < 0:
        raise ValueError(f"a step is a count of generated tokens, found {step}")
    seed &= 2**64 - 1
    key = hash32_int(hash32_int(seed & _MASK32) ^ (seed >> 32))
    key = hash32_int(key ^ (step & _MASK32) ^ hash32_int(step >> 32))
    return key, hash32_int(key ^ _GOLDEN)


def hash32_int(x: int) -> int:
    """lowbias32 on a Python int."""
    x &= _MASK32
    x ^= x >> 16
    x = (x * 0x7FEB352D) & _MASK32
    x ^= x >> 15
    x = (x * 0x846CA68B) & _MASK32
    return x ^ (x >> 16)


def hash32(x: torch.Tensor) -> torch.Tensor:
    """`hash32_int` over an int64 tensor of values in [0, 2**32)."""
    x = x ^ (x >> 16)
    x = _mul32(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = _mul32(x, 0x846CA68B)
    return x ^ (x >> 16)


def _mul32(x: torch.Tensor, c: int) -> torch.Tensor:
    """(x * c) mod 2**32 for x in [0, 2**32), in two 16-bit halves of c so that int64 never overflows."""
    return (x * (c & 0xFFFF) + (((x * (c >> 16)) & 0xFFFF) << 16)) & _MASK32
