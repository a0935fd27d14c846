"""Integer helpers the lowering and the cost laws share when they follow a library's launch arithmetic."""

from __future__ import annotations


def last_pow2(n: int) -> int:
    """The largest power of two not above ``n`` (1 for ``n`` < 2): CUDA libraries' block shapes
    (ATen's ``ReduceConfig``, cuDNN's NHWC batch norm grids) round their sizes down to one."""
    return 1 << (max(int(n), 1).bit_length() - 1)
