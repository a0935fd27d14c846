"""Cost that depends on the kernel before: a memory-bound kernel that directly follows a
convolution in an eager stream (:func:`after_conv`).

Every other law prices a kernel alone (order-free, so that a partition's device time is a sum).
Inside a CNN forward, a small memory-bound kernel (batch norm, ReLU, a bias add, cuDNN's layout
transform, batch norm's per-channel prologue) that directly follows a convolution takes longer
than the same kernel on the same tensors after another memory-bound kernel (the chain sweep,
``validation/measure/cnn_chain.py``: the kernel in a conv -> batch norm -> ReLU chain against the
same chain with a spin kernel before each stage; fitted by ``validation/fit/fit_chain.py``). The
law adds ``after_conv_us`` to such a kernel, tapered by its size:
``after_conv_us x max(0, 1 - bytes / after_conv_bytes)`` (none without ``after_conv_bytes``).
Only convolutions (whichever library runs them: cuDNN, cuBLAS for a 1x1, ATen's depthwise) are
predecessors: the chain sweep measured nothing else, and the kernels after a transformer's GEMMs
keep the laws fitted on the records they run in. A GPU without the figure (None) keeps the
order-free laws.
"""

from __future__ import annotations

from dataclasses import replace

from gpusim.cost.roofline import KernelEstimate
from gpusim.graph.opgraph import GEMM_KINDS


def is_convolution(est: KernelEstimate) -> bool:
    """A convolution's main kernel (any library's)."""
    return est.role == "main" and est.kind == "conv"


def after_conv_extra_us(est: KernelEstimate, spec) -> float:
    """The µs a memory-bound kernel ``est`` adds when a convolution ran just before it (0 without
    the GPU's figure, or for a GEMM-like kernel)."""
    us = spec.after_conv_us
    if not us or est.kind in GEMM_KINDS and est.role == "main":
        return 0.0
    span = spec.after_conv_bytes
    return us * max(0.0, 1.0 - est.bytes / span) if span else us


def after_conv(estimates: list[KernelEstimate], spec) -> list[KernelEstimate]:
    """``estimates`` (one eager stream, in launch order) with :func:`after_conv_extra_us` added to
    each kernel that directly follows a convolution."""
    if not spec.after_conv_us:
        return estimates
    out = list(estimates)
    for i in range(1, len(out)):
        if is_convolution(estimates[i - 1]):
            extra = after_conv_extra_us(out[i], spec)
            if extra:
                out[i] = replace(out[i], us=out[i].us + extra, fixed_us=out[i].fixed_us + extra)
    return out
