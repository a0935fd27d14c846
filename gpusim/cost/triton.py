"""Inductor's Triton kernels: the law of a generated kernel (:func:`triton_law`).

A generated kernel (``Kernel.impl == "generated"``: Inductor's ``triton_poi_`` / ``triton_per_`` /
``triton_red_`` kernels, or a partition's fused group, which the harness runs through Inductor) is
the group roofline of :func:`gpusim.cost.roofline.estimate_group` with the figures the
``triton_bench`` sweep fitted on the GPU (``hwspecs/``, provenance there)::

    t = max(floor, triton_fixed_us + max(t_memory, t_compute))

* ``t_memory``: DRAM bytes over ``triton_mem_efficiency x bandwidth`` (a looped reduction:
  ``triton_red_efficiency``); the bytes the order-free L2 rule credits (an intermediate written by
  an earlier kernel, no larger than ``l2_resident_fraction x L2``) over
  ``triton_l2_bandwidth_gbs``: the rate the sweep's producer -> consumer chains reach, not a warm
  copy's;
* ``t_compute``: the larger of the FLOP roofline and the heavy ops' issue time: every element of
  a transcendental, division or square root (:data:`HEAVY_OPS`: Triton calls libdevice and, in
  16-bit, computes in fp32) costs its class's ``triton_<class>_cycles`` SM cycles (erf, tanh, exp,
  sqrt, div), spread over the SMs at the boost clock. An eval batch norm computes ``1 / sqrt(var + eps)`` per element (Inductor does not hoist
  it to the channels), so a CNN's BN + ReLU kernels are compute-bound on an H100.

A GPU without the figures keeps the roofline (each missing figure falls back to the common one).
"""

from __future__ import annotations

import weakref
from dataclasses import replace

from gpusim.cost.roofline import KernelEstimate, kernel_floor, register_pressure
from gpusim.graph.opgraph import GEMM_KINDS, REDUCING_KINDS, OpGraph, group_io, main_shape, numel
from gpusim.graph.ops import is_eval_batch_norm, packet_name
from gpusim.hw.schema import TRITON_FIGURES
from gpusim.lower.inductor import UNROLL_REDUCTION
from gpusim.lower.legality import fusion_class
from gpusim.lower.reductions import channels_last, persistent, row_numel

#: heavy ops per output element of an aten op, by class, as Inductor's Triton code computes it:
#: libdevice's erf and tanh, an exponential-class call (exp, log, sin, cos; a sigmoid or SiLU is one
#: exp and a fast division), an IEEE square root and an IEEE division. A softmax is an exp and a
#: division per element; a layer norm's or RMS norm's rsqrt node is per row (counted on its own
#: output). ``pow`` is none: Inductor lowers the integer powers models use (RMS norm's ``pow(2)``)
#: to multiplications
HEAVY_CLASSES = ("erf", "tanh", "exp", "sqrt", "div")
HEAVY_OPS = {
    **{op: {"erf": 1} for op in ("erf", "erfc", "gelu")},
    "tanh": {"tanh": 1}, "mish": {"exp": 1, "tanh": 1},
    **{op: {"exp": 1} for op in ("exp", "exp2", "expm1", "log", "log2", "log1p", "sin", "cos", "sigmoid",
                                 "silu", "softplus", "elu", "selu", "logit")},
    **{op: {"sqrt": 1} for op in ("sqrt", "rsqrt")},
    **{op: {"div": 1} for op in ("div", "reciprocal")},
    **{op: {"exp": 1, "div": 1} for op in ("softmax", "_softmax", "log_softmax", "_log_softmax")},
}
#: an eval batch norm: ``1 / sqrt(var + eps)`` per element
BATCH_NORM_HEAVY = {"sqrt": 1, "div": 1}


def heavy_elements(graph: OpGraph, members) -> dict:
    """Elements x heavy ops per class (:data:`HEAVY_OPS`) over the kernel's member nodes."""
    total = dict.fromkeys(HEAVY_CLASSES, 0.0)
    for n in members:
        a = graph.g.nodes[n]
        ops = BATCH_NORM_HEAVY if is_eval_batch_norm(a.get("op", "")) else \
            HEAVY_OPS.get(packet_name(a.get("op", "")).rstrip("_"), {})
        for c, k in ops.items():
            total[c] += k * numel(main_shape(a.get("shape")))
    return total


def heavy_us(graph: OpGraph, members, spec) -> float:
    """The heavy ops' issue time: elements x ``triton_<class>_cycles`` over the SMs at the boost clock."""
    cycles = sum(e * (getattr(spec, f"triton_{c}_cycles", None) or 0.0)
                 for c, e in heavy_elements(graph, members).items())
    return cycles / (spec.sm_count * spec.boost_clock_mhz * 1e6) * 1e6


_NHWC: "weakref.WeakKeyDictionary[OpGraph, bool]" = weakref.WeakKeyDictionary()


def looped_reduction(graph: OpGraph, members, spec) -> bool:
    """Whether Inductor runs the kernel of ``members`` as a looped reduction (``triton_red_``):
    a reduction member too long to unroll and not persistent (:func:`gpusim.lower.reductions.persistent`)."""
    reds = [n for n in members if fusion_class(graph, n) == "reduction" and row_numel(graph, n) >= UNROLL_REDUCTION]
    if not reds:
        return False
    if graph not in _NHWC:
        _NHWC[graph] = channels_last(graph)
    return not all(persistent(graph, n, spec, _NHWC[graph]) for n in reds)


def has_triton_figures(spec) -> bool:
    """Whether ``spec`` carries any Triton figure (else the plain roofline prices the kernel)."""
    return any(getattr(spec, f, None) for f in TRITON_FIGURES)


def triton_law(graph: OpGraph, kernel, spec, est: KernelEstimate, looped: bool) -> KernelEstimate:
    """The generated kernel ``kernel`` (its roofline ``est``) under the GPU's Triton figures;
    ``looped``: a looped reduction (``triton_red_``), whose stream is ``triton_red_efficiency``."""
    eff = (spec.triton_red_efficiency if looped else None) or spec.triton_mem_efficiency or spec.mem_efficiency
    l2_bw = spec.triton_l2_bandwidth_gbs * 1e9 if spec.triton_l2_bandwidth_gbs else spec.l2_bandwidth
    dram = est.bytes - est.bytes_read_l2
    reads, writes = group_io(graph, list(kernel.ops))
    pressure = register_pressure(len(kernel.ops), len(reads) + len(writes))
    mem_us = (dram / (eff * spec.bandwidth) + est.bytes_read_l2 / l2_bw) * 1e6 * pressure
    comp_us = max(est.compute_us, heavy_us(graph, kernel.ops, spec))
    nodes = [graph.g.nodes[n] for n in kernel.ops]
    floor = kernel_floor(nodes, spec)          # reductions and GEMM-like members keep theirs
    if not any(a["kind"] in REDUCING_KINDS or a["kind"] in GEMM_KINDS for a in nodes):
        floor = spec.triton_min_us or floor
    fixed = spec.triton_fixed_us if spec.triton_fixed_us is not None else spec.kernel_fixed_us
    body = max(mem_us, comp_us)
    us = max(floor, fixed + body)
    bound = "latency" if body < fixed or us == floor else ("compute" if comp_us > mem_us else "memory")
    return replace(est, mem_us=mem_us, compute_us=comp_us, fixed_us=fixed, us=us, bound=bound)
