"""Cost: one kernel's time on one GPU spec (:func:`estimate_kernel`).

A lowered kernel (:class:`gpusim.lower.lowering.Kernel`) is first its group's roofline
(:func:`gpusim.cost.roofline.estimate_group`: bytes crossing the group over the bandwidth,
FLOPs over the unit's peak, a fixed cost and a floor); an eager library kernel of a known class
(``variant``) is then retimed by that class's law, found in one registry
(:data:`gpusim.cost.laws.LAWS`); a helper kernel (``role == "aux"``) is a stream over its bytes
(:func:`gpusim.cost.laws.aux_law`); a backward kernel takes its class's backward scale."""

from __future__ import annotations

from dataclasses import replace

from gpusim.cost.laws import LAWS, LawInput, aux_law, neutral
from gpusim.cost.roofline import CostOptions, KernelEstimate, estimate_group
from gpusim.cost.triton import has_triton_figures, looped_reduction, triton_law
from gpusim.graph.opgraph import GEMM_KINDS, HALF_DTYPES, OpGraph
from gpusim.graph.ops import packet_name


#: backward kernel classes timed as their forward law times a fitted figure
#: (validation/fit/fit_train.py on the training records): (variant, direction, 16-bit?, 1x1?)
#: -> field. Directions: a convolution's ``data`` / ``filter`` gradient (gpusim.lower.dispatch's
#: conv_info), ``mm`` for a backward matrix product. Dense convolutions by geometry: 1x1
#: filters (their gradients mostly cuBLAS GEMMs) and spatial ones (cuDNN's dgrad / wgrad)
BACKWARD_SCALES = {
    **{(v, d, True, True): "conv_backward_scale_1x1_16bit"
       for v, d in (("conv_dgrad", "data"), ("conv_wgrad", "filter"))},
    **{(v, d, False, True): "conv_backward_scale_1x1"
       for v, d in (("conv_dgrad", "data"), ("conv_wgrad", "filter"))},
    **{(v, d, True, False): "conv_backward_scale_16bit"
       for v, d in (("conv_dgrad", "data"), ("conv_wgrad", "filter"))},
    **{(v, d, False, False): "conv_backward_scale"
       for v, d in (("conv_dgrad", "data"), ("conv_wgrad", "filter"))},
    ("depthwise", "data", True, False): "depthwise_dgrad_scale",
    ("depthwise", "data", False, False): "depthwise_dgrad_scale",
    ("depthwise", "filter", True, False): "depthwise_wgrad_scale_16bit",
    ("depthwise", "filter", False, False): "depthwise_wgrad_scale",
    ("depthwise_aten", "data", True, False): "depthwise_aten_dgrad_scale",
    ("depthwise_aten", "data", False, False): "depthwise_aten_dgrad_scale",
    ("depthwise_aten", "filter", True, False): "depthwise_aten_wgrad_scale",
    ("depthwise_aten", "filter", False, False): "depthwise_aten_wgrad_scale",
    ("gemm", "mm", False, False): "gemm_backward_scale",
}


def backward_scale_field(graph: OpGraph, kernel) -> str | None:
    """The spec field scaling backward kernel ``kernel`` (:data:`BACKWARD_SCALES`), None
    for other kernels. A convolution's gradient by its direction (backward-data or
    backward-filter: cuDNN's ``dgrad`` / ``wgrad`` kernels, ATen's depthwise
    ``conv_depthwise2d_backward`` / ``_grad_weight``) and, dense, its filter (1x1 or
    spatial); a backward fp32 ``mm`` (the transposed products of a linear layer's
    gradients)."""
    if kernel.role != "main" or not kernel.variant:
        return None
    a = graph.g.nodes[kernel.ops[0]]
    if a.get("phase") != "backward":
        return None
    name = packet_name(a.get("op", ""))
    pointwise = False
    if name == "convolution_backward":
        from gpusim.lower.conv import conv_info
        c = conv_info(graph, kernel.ops[0])
        direction = c.get("backward") if c else None
        pointwise = bool(c) and kernel.variant in ("conv_dgrad", "conv_wgrad") and c["kh"] == c["kw"] == 1
    elif name in ("mm", "bmm") and a["dtype"] == "float32":
        direction = "mm"
    else:
        return None
    return BACKWARD_SCALES.get((kernel.variant, direction, a["dtype"] in HALF_DTYPES, pointwise))


def kernel_us(graph: OpGraph, kernel, spec, opts: CostOptions = CostOptions()) -> float:
    """One kernel's time in µs (:func:`estimate_kernel`'s ``us``): the price the lowering asks
    for the choices Inductor makes by benchmarking (:func:`gpusim.lower.lowering.padding`)."""
    return estimate_kernel(graph, kernel, spec, opts).us


def estimate_kernel(graph: OpGraph, kernel, spec, opts: CostOptions = CostOptions()) -> KernelEstimate:
    """:func:`estimate_kernel_forward_law`, times the class's backward figure for a
    backward kernel of :data:`BACKWARD_SCALES` (none on the GPU: the forward law)."""
    est = estimate_kernel_forward_law(graph, kernel, spec, opts)
    field = backward_scale_field(graph, kernel)
    scale = getattr(spec, field, None) if field else None
    if not scale:
        return est
    return replace(est, us=est.us * scale, mem_us=est.mem_us * scale, compute_us=est.compute_us * scale)


def estimate_kernel_forward_law(graph: OpGraph, kernel, spec,
                                opts: CostOptions = CostOptions()) -> KernelEstimate:
    """Predict one lowered kernel (:class:`gpusim.lower.lowering.Kernel`): PyTorch's and the
    libraries' own kernels (``impl`` ``aten``/``library``) reach the measured ATen
    efficiencies; generated kernels are timed as plain streams. Eager library kernel
    classes (``variant``) take their law from :data:`gpusim.cost.laws.LAWS` (measured
    fractions of the datasheet peaks, :mod:`gpusim.lower.dispatch` names the classes);
    helper kernels (``role == "aux"``) :func:`gpusim.cost.laws.aux_law`.

    A GPU without a figure for a class (None: no calibration has fitted it on that GPU,
    and another GPU's figure is never a default) gets the class's neutral law: its bytes
    at ``mem_efficiency`` (layout transforms, eval batch norm, weight streams), its FLOPs
    at the plain roofline of :func:`estimate_group` (convolutions as a same-shape GEMM,
    misaligned GEMMs, depthwise and fp32 attention), the common floor
    (:func:`gpusim.cost.roofline.kernel_floor`) and no per-row or per-tap term. The neutral
    law is optimistic where the fitted class is slow (the H100's align1 GEMM at 0.11 of the
    tensor peak): calibrating that GPU is what closes the gap."""
    aten = kernel.impl != "generated"
    if aten != opts.aten:
        opts = replace(opts, aten=aten)
    if kernel.role == "aux":
        return aux_law(graph, kernel, spec)
    est = estimate_group(graph, kernel.ops, spec, opts)
    if not aten and kernel.role == "main" and has_triton_figures(spec):
        # Inductor's Triton kernels (and a partition's fused groups, which run through it)
        return triton_law(graph, kernel, spec, est, looped_reduction(graph, kernel.ops, spec))
    if not kernel.variant:
        return est
    # GEMM-like kernels keep the library floor; the rest the common one
    floor = spec.gemm_min_us if est.kind in GEMM_KINDS and spec.gemm_min_us else spec.kernel_min_us
    x = LawInput(graph, kernel, spec, opts, est, graph.g.nodes[kernel.ops[0]], floor)
    return LAWS.get(kernel.variant, neutral)(x)
