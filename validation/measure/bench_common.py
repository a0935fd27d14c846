"""What the microbenchmark sweeps share: their dtypes and the timing of one point."""

from __future__ import annotations
import torch


DTYPES = ("float32", "float16", "bfloat16")


def _t(shape, dtype, cl=False, dev="cuda"):
    x = torch.randn(*shape, device=dev, dtype=getattr(torch, dtype))
    if cl and x.dim() == 4:
        x = x.contiguous(memory_format=torch.channels_last)
    return x
