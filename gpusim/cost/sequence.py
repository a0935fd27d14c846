"""Cost that depends on the kernel before: a memory-bound kernel that follows a library
GEMM or convolution in an eager stream (:func:`after_library`).

Every other law prices a kernel alone (order-free, so that a partition's device time is a sum).
Inside a CNN forward a small memory-bound kernel (batch norm, ReLU, a bias add, cuDNN's layout
transform, batch norm's per-channel prologue) that directly follows a convolution or a GEMM takes
about a microsecond longer than the same kernel after another memory-bound kernel, on the same
tensors (the chain sweep, ``validation/measure/cnn_chain.py``: the kernel in a conv -> batch
norm -> ReLU chain against the same kernel in a batch norm -> ReLU chain and alone; fitted by
``validation/fit/fit_chain.py``). The law adds ``after_library_us`` to such a kernel, tapered
by its size: ``after_library_us x max(0, 1 - bytes / after_library_bytes)`` (a kernel that
streams ``after_library_bytes`` or more hides the start-up behind its own traffic). A GPU without
the figure (None) keeps the order-free laws.
"""

from __future__ import annotations

from dataclasses import replace

from gpusim.cost.roofline import KernelEstimate
from gpusim.graph.opgraph import GEMM_KINDS


def is_library_gemm(est: KernelEstimate) -> bool:
    """A GEMM-like kernel (matmul, convolution, attention): what leaves the SMs configured for a
    library's tiles, the kernels a memory-bound successor pays after."""
    return est.role == "main" and est.kind in GEMM_KINDS


def after_library_extra_us(est: KernelEstimate, spec) -> float:
    """The µs a memory-bound kernel ``est`` adds when a library GEMM or convolution ran just
    before it (0 without the GPU's figure, or for a GEMM-like kernel)."""
    us = spec.after_library_us
    if not us or is_library_gemm(est):
        return 0.0
    span = spec.after_library_bytes
    return us * max(0.0, 1.0 - est.bytes / span) if span else us


def after_library(estimates: list[KernelEstimate], spec) -> list[KernelEstimate]:
    """``estimates`` (one eager stream, in launch order) with :func:`after_library_extra_us`
    added to each kernel that follows a library GEMM or convolution."""
    if not spec.after_library_us:
        return estimates
    out = list(estimates)
    for i in range(1, len(out)):
        if is_library_gemm(estimates[i - 1]):
            extra = after_library_extra_us(out[i], spec)
            if extra:
                out[i] = replace(out[i], us=out[i].us + extra, fixed_us=out[i].fixed_us + extra)
    return out
