"""Cost: one kernel's time on one GPU spec.

A kernel is a group of compute nodes of an :class:`OpGraph` (one node in eager mode).
It reads only the tensors that cross into it and writes only those that leave it;
tensors internal to the group cost nothing. Its time is a roofline with a fixed cost::

    t = max(kernel_min_us, kernel_fixed_us + max(t_memory, t_compute))

* ``t_memory``: DRAM bytes over ``mem_efficiency x bandwidth``, plus bytes served by
  L2 over the L2 bandwidth. A tensor produced by an earlier kernel of the same graph and
  no larger than ``l2_resident_fraction x L2`` is read from L2; graph inputs (weights,
  activations from outside) are cold. The rule is order-free on purpose, so that a
  partition's device time is a sum over its kernels (which exact search relies on).
* ``t_compute``: GEMM-like FLOPs (matmul, conv, attention) over the peak of the unit
  that runs them times ``matmul_efficiency`` (``matmul_tc_efficiency`` on tensor cores
  where a spec has it) times a tile/wave-quantisation efficiency; other FLOPs over the CUDA-core peak times ``cuda_core_efficiency``.

Units follow PyTorch's defaults: float32 matmuls run on CUDA cores (TF32 off,
``torch.backends.cuda.matmul.allow_tf32 = False``) while float32 convolutions run on
TF32 tensor cores (``torch.backends.cudnn.allow_tf32 = True``); float16 and bfloat16 use
tensor cores (bfloat16 falls back to CUDA cores where a GPU has none, as on V100).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

from gpusim.graph.opgraph import (DTYPE_BYTES, GEMM_KINDS, HALF_DTYPES, REDUCING_KINDS, OpGraph, group_io, main_shape,
                                  numel)
from gpusim.graph.ops import is_eval_batch_norm, packet_name


@dataclass(frozen=True)
class KernelEstimate:
    """The common currency: one kernel's counts and predicted time (µs)."""

    name: str
    ops: tuple[str, ...]           # member node names, topological order
    op_types: tuple[str, ...]      # their aten op names
    kind: str                      # dominant kind (gemm kind if any, else reduction/norm, ...)
    shape: tuple                   # output shape of the last member
    flops: float
    bytes_read: float              # bytes crossing into the kernel (DRAM + L2)
    bytes_read_l2: float           # of which served by L2
    bytes_written: float
    mem_us: float
    compute_us: float
    fixed_us: float
    us: float
    bound: str                     # "memory" | "compute" | "latency"
    unit: str                      # "fp32", "fp16_tc", ... the unit the FLOPs run on
    role: str = "main"             # "aux": a library helper kernel (layout transform, ...)
    variant: str = ""              # eager kernel class (gpusim.lower.dispatch), "" for the default

    @property
    def bytes(self) -> float:
        return self.bytes_read + self.bytes_written

    @property
    def intensity(self) -> float:
        """Arithmetic intensity, FLOP per byte moved."""
        return self.flops / self.bytes if self.bytes else math.inf

    def to_dict(self) -> dict:
        d = asdict(self)
        d["ops"], d["op_types"], d["shape"] = list(self.ops), list(self.op_types), _jsonable(self.shape)
        d["bytes"] = self.bytes
        d["intensity"] = None if math.isinf(self.intensity) else self.intensity
        return d


def _jsonable(s):
    if isinstance(s, tuple):
        return [_jsonable(x) for x in s]
    return s


@dataclass(frozen=True)
class CostOptions:
    allow_tf32: bool = False        # torch.backends.cuda.matmul.allow_tf32
    cudnn_allow_tf32: bool = True   # torch.backends.cudnn.allow_tf32
    # Kernels are eager PyTorch's own (ATen) rather than generated ones: set per kernel by
    # estimate_kernel from the lowering. ATen's elementwise, reduce and norm kernels reach less bandwidth than a copy
    # in measured cases (the spec's aten_* fractions); generated (Triton) kernels are
    # timed as plain streams.
    aten: bool = False


def unit_for(kind: str, dtype: str, spec, opts: CostOptions) -> str:
    """The execution unit FLOPs of a node of ``kind`` in ``dtype`` run on."""
    if dtype == "float64":
        return "fp64"
    if kind in GEMM_KINDS:
        if dtype == "float16":
            return "fp16_tc"
        if dtype == "bfloat16":
            return "bf16_tc" if "bf16_tc" in spec.peak_tflops else "fp32"
        tf32 = opts.cudnn_allow_tf32 if kind == "conv" else opts.allow_tf32
        if dtype == "float32" and tf32 and "tf32_tc" in spec.peak_tflops:
            return "tf32_tc"
    return "fp32"


def tile_candidates(spec) -> list[tuple[int, int]]:
    """Output tiles a GEMM library chooses among: the spec's large tile and its halvings
    down to a quarter per side (cuBLAS kernel names on an H200 show 128x128 .. 32x32)."""
    tm, tn = spec.matmul_tile_m, spec.matmul_tile_n
    return [(tm, tn), (tm, max(tn // 2, 16)), (max(tm // 2, 16), max(tn // 2, 16)),
            (max(tm // 2, 16), max(tn // 4, 16)), (max(tm // 4, 16), max(tn // 4, 16))]


def quantisation_efficiency(gemm: dict, spec, split_k: bool = True) -> float:
    """Fraction of the GPU's GEMM rate a product reaches from its shape: the best over the
    candidate tiles (:func:`tile_candidates`) of tile reuse x wave fill.

    Output tiles are spread over the SMs in waves; the last wave is partly idle, and edge
    tiles are partly padding. Smaller tiles fill more SMs but reuse each loaded operand
    less: a ``tm x tn`` tile does ``tm*tn`` multiply-adds per ``tm+tn`` operand elements
    loaded, so its rate relative to the large tile scales with ``tm*tn/(tm+tn)``.
    ``split_k=False``: a library path that never splits K (cuBLASLt's fp32 bias epilogue).
    """
    tm0, tn0 = spec.matmul_tile_m, spec.matmul_tile_n
    reuse0 = tm0 * tn0 / (tm0 + tn0)
    best = 0.0
    for tm, tn in tile_candidates(spec):
        reuse = min(1.0, (tm * tn / (tm + tn)) / reuse0)
        best = max(best, reuse * _fill(gemm, spec, tm, tn, split_k))
    return best


def _fill(gemm: dict, spec, tm: int, tn: int, split_k: bool = True) -> float:
    """Wave fill and padding of one tile choice. When there are fewer tiles than SMs,
    libraries split K across blocks: a split of up to ``k / (4 * tile)`` lets a
    skinny-output, long-K product still fill the GPU."""
    m, n, k, b = gemm["m"], gemm["n"], gemm["k"], gemm.get("b", 1)
    tiles_m, tiles_n = math.ceil(m / tm), math.ceil(n / tn)
    tiles = tiles_m * tiles_n * b
    pad = (m * n) / (tiles_m * tm * tiles_n * tn)
    split = 1
    if split_k and tiles < spec.sm_count:
        # each K slice keeps at least 4 tiles' depth when the tiles fill under a quarter of
        # the SMs, 8 otherwise (gemm_mid sweep: fp32 1024^3 runs unsplit, 256x1024x1024
        # and 1024x1024x4096 split)
        depth = 4 if tiles <= spec.sm_count // 4 else 8
        split = max(1, min(spec.sm_count // tiles, k // (depth * max(tm, tn))))
    work = tiles * split
    waves = math.ceil(work / spec.sm_count)
    return pad * work / (waves * spec.sm_count)


def gemm_flops_effective(a: dict) -> float:
    """FLOPs the hardware actually performs: causal attention skips half the scores."""
    g = a.get("gemm") or {}
    return a["flops"] * (0.5 if g.get("causal") else 1.0)



def matmul_efficiency(spec, unit: str) -> float:
    """Large GEMMs' fraction of ``unit``'s peak: the tensor-core figure where the spec has
    one (``matmul_tc_efficiency``, derived by the tensor-load rule on datasheet specs), else
    ``matmul_efficiency`` (a calibration's median over the units, or the assumed figure)."""
    if unit.endswith("_tc") and spec.matmul_tc_efficiency is not None:
        return spec.matmul_tc_efficiency
    return spec.matmul_efficiency

def estimate_group(graph: OpGraph, members, spec, opts: CostOptions = CostOptions(),
                   name: str | None = None) -> KernelEstimate:
    """Predict one kernel made of ``members`` (node names) on ``spec``."""
    members = list(members)
    if not members:
        raise ValueError("a kernel needs at least one node")
    nodes = [graph.g.nodes[n] for n in members]
    reads, writes = group_io(graph, members)
    bw_frac = aten_fraction(nodes, spec) if opts.aten and len(nodes) == 1 else 1.0
    l2_cap = spec.l2_resident_fraction * spec.l2_bytes
    rd_l2 = 0.0
    rd_dram = 0.0
    for p, b in reads.items():
        if graph.g.nodes[p]["kind"] != "input" and b <= l2_cap:
            rd_l2 += b
        else:
            rd_dram += b
    wr = float(sum(writes.values()))
    mem_s = ((rd_dram + wr) / (spec.mem_efficiency * spec.bandwidth)
             + rd_l2 / spec.l2_bandwidth) / bw_frac

    comp_s = 0.0
    flops = 0.0
    unit = "fp32"
    kind = nodes[0]["kind"]
    gemm_nodes = [a for a in nodes if a["kind"] in GEMM_KINDS and a.get("gemm")]
    if len(gemm_nodes) > 1:
        # horizontal fusion: sibling matmuls sharing an operand run as one wider GEMM
        g0 = dict(gemm_nodes[0]["gemm"])
        g0["n"] = sum(a["gemm"]["n"] for a in gemm_nodes)
        merged = dict(gemm_nodes[0], gemm=g0, flops=sum(a["flops"] for a in gemm_nodes))
        nodes_for_time = [merged] + [a for a in nodes if a not in gemm_nodes]
    else:
        nodes_for_time = nodes
    for a in nodes_for_time:
        flops += a["flops"]
        if a["kind"] in GEMM_KINDS and a.get("gemm"):
            u = unit_for(a["kind"], a["gemm"].get("unit_dtype", a["dtype"]), spec, opts)
            q = quantisation_efficiency(a["gemm"], spec)
            comp_s += gemm_flops_effective(a) / (spec.peak_flops(u) * matmul_efficiency(spec, u) * q)
            unit, kind = u, a["kind"]
        else:
            u = "fp64" if a["dtype"] == "float64" else "fp32"
            comp_s += a["flops"] / (spec.peak_flops(u) * spec.cuda_core_efficiency)
            if kind not in GEMM_KINDS and a["kind"] in REDUCING_KINDS:
                kind = a["kind"]
    mem_us, comp_us = mem_s * 1e6, comp_s * 1e6
    body = max(mem_us, comp_us) * register_pressure(len(members), len(reads) + len(writes))
    floor = kernel_floor(nodes, spec)
    us = max(floor, spec.kernel_fixed_us + body)
    if body < spec.kernel_fixed_us or us == floor:
        bound = "latency"
    else:
        bound = "compute" if comp_us > mem_us else "memory"
    last = nodes[-1]
    return KernelEstimate(
        name=name or "+".join(members) if len(members) <= 3 else
        (name or f"{members[0]}+{len(members) - 1}"),
        ops=tuple(members), op_types=tuple(packet_name(a["op"]) for a in nodes), kind=kind,
        shape=last.get("shape") or (), flops=flops, bytes_read=rd_l2 + rd_dram,
        bytes_read_l2=rd_l2, bytes_written=wr, mem_us=mem_us, compute_us=comp_us,
        fixed_us=spec.kernel_fixed_us, us=us, bound=bound, unit=unit)


def attention_flops(a: dict, spec=None) -> float:
    """FLOPs of the two products over the full score matrix (cuDNN's causal kernel takes
    as long as the full one in the sweeps), from the node's SDPA facts; with ``spec``'s
    attention tiles, over whole tiles (ViT's 197 tokens cost as 256 queries x 256 keys
    with 128 x 64 tiles: broad H100 AMP records, 164 us per ViT-B/16 attention at batch
    256 against 97 us untiled)."""
    s = a.get("sdpa") or {}
    if not s:
        return float(a["flops"])
    b = numel(main_shape(a["shape"])[:-2]) if a.get("shape") else 1
    q, kv = s["q_len"], s["kv_len"]
    tq, tkv = (getattr(spec, "attention_tile_q", None), getattr(spec, "attention_tile_kv", None))
    q = math.ceil(q / tq) * tq if tq else q
    kv = math.ceil(kv / tkv) * tkv if tkv else kv
    # the backward's five products (gpusim.graph.train_ops.sdpa_backward_flops): 2.5x
    bwd = 2.5 if packet_name(a.get("op", "")).endswith("_backward") else 1.0
    return bwd * 2.0 * b * q * kv * (s["head_dim"] + s["head_dim_v"])


#: backward kernel classes timed as their forward law times a fitted figure
#: (validation/fit_train.py on the training records): (variant, direction, 16-bit?, 1x1?)
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
        from gpusim.lower.dispatch import conv_info
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
    classes (``variant``) and helper kernels (``role == "aux"``) take their measured
    fractions of the datasheet peaks (:mod:`gpusim.lower.dispatch`).

    A GPU without a figure for a class (None: no calibration has fitted it on that GPU,
    and another GPU's figure is never a default) gets the class's neutral law: its bytes
    at ``mem_efficiency`` (layout transforms, eval batch norm, weight streams), its FLOPs
    at the plain roofline of :func:`estimate_group` (convolutions as a same-shape GEMM,
    misaligned GEMMs, depthwise and fp32 attention), the common floor
    (:func:`kernel_floor`) and no per-row or per-tap term. The neutral law is optimistic
    where the fitted class is slow (the H100's align1 GEMM at 0.11 of the tensor peak):
    calibrating that GPU is what closes the gap."""
    aten = kernel.impl != "generated"
    if aten != opts.aten:
        opts = replace(opts, aten=aten)
    if kernel.role == "aux":
        return _aux_estimate(graph, kernel, spec)
    est = estimate_group(graph, kernel.ops, spec, opts)
    v = kernel.variant
    if not v:
        return est
    if v == "mta":
        # multi-tensor-apply (foreach and fused optimizer kernels): the op's bytes at a
        # fitted fraction of the bandwidth (validation/fit_train.py on the training
        # records); without a figure the plain ATen stream
        if not spec.mta_efficiency:
            return est
        # the op's own bytes (every list read, every list written in place): a fused
        # optimizer op writes its parameter and state lists without an output tensor, which
        # the group's boundary count misses (GPT-2's _fused_adamw_: 16 of its 28 bytes per
        # element)
        nb = mta_bytes(graph.g.nodes[kernel.ops[0]])
        est = replace(est, bytes_read=max(est.bytes_read, nb - est.bytes_written))
        return _retimed(est, spec, est.bytes / (spec.mta_efficiency * spec.bandwidth) * 1e6,
                        est.compute_us, spec.kernel_min_us, variant=v)
    a = graph.g.nodes[kernel.ops[0]]
    mem, comp = est.mem_us, est.compute_us
    # GEMM-like kernels keep the library floor; the rest the common one (eval batch norm
    # too, as fitted: not the reduction floor kernel_floor gives norms)
    floor = spec.gemm_min_us if est.kind in GEMM_KINDS and spec.gemm_min_us else spec.kernel_min_us
    if v == "bn_eval":
        eff = spec.bn_eval_efficiency_16bit if a["dtype"] in HALF_DTYPES else spec.bn_eval_efficiency
        contiguous = bn_input_contiguous(graph, kernel.ops[0])
        mem = mem * spec.mem_efficiency / (eff or spec.mem_efficiency)
        law = bn_eval_law(a, contiguous, spec)
        if law is None:
            mem = mem * plane_padding(a, contiguous)
        else:
            sm_us, law_floor = law
            mem, floor = max(mem, sm_us), max(floor, law_floor)
    elif v == "depthwise" and spec.depthwise_efficiency:
        # cuDNN's depthwise kernels: a fixed part growing with the filter taps, and the
        # multiply-adds at a small fraction of the CUDA-core peak (cnn sweep)
        half = a["dtype"] in HALF_DTYPES
        taps = _filter_taps(graph, a)
        fixed, tap, eff = ((spec.depthwise_us_16bit, spec.depthwise_tap_us_16bit, spec.depthwise_efficiency_16bit)
                           if half else (spec.depthwise_us, spec.depthwise_tap_us, spec.depthwise_efficiency))
        # a GPU whose fraction is derived but whose fixed costs are not: none (neutral)
        comp = (fixed or 0.0) + (tap or 0.0) * taps + a["flops"] / (spec.peak_flops("fp32") * eff) * 1e6
        nchw = depthwise_nchw_us(graph, kernel.ops[0], spec)
        if nchw is not None:
            return _retimed(est, spec, mem, nchw, floor, variant=v)
        return _retimed(est, spec, mem, comp - spec.kernel_fixed_us, floor, variant=v)
    elif v == "pool":
        if pool_us(a, spec) is None:
            return est          # no rate: the reduction stream, as before the class
        comp = pool_us(a, spec)
        floor = kernel_floor([a], spec)
    elif v == "layer_norm":
        # ATen's layer norm runs a block per row: a fixed cost per row on top of the
        # stream, which dominates narrow rows (Swin's and ConvNeXt's 96-768 channels)
        row_ns = spec.layer_norm_row_ns_16bit if a["dtype"] in HALF_DTYPES else spec.layer_norm_row_ns
        shape = main_shape(a.get("shape"))
        if row_ns and shape:
            mem = mem + numel(shape) / max(shape[-1], 1) * row_ns * narrow_row_fraction(shape[-1]) * 1e-3
        floor = spec.reduction_min_us or floor
    elif v == "column_sum":
        # a backward sum over the leading dim (gpusim.lower.dispatch.column_sum): a fixed time of
        # its own (column_sum_us, in place of kernel_fixed_us) and its bytes at a fitted
        # fraction of the bandwidth (validation/fit_train.py on the training records);
        # without the figures, the reduction stream
        if not spec.column_sum_efficiency:
            return est
        mem = ((spec.column_sum_us or spec.kernel_fixed_us) - spec.kernel_fixed_us
               + est.bytes / (spec.column_sum_efficiency * spec.bandwidth) * 1e6)
        floor = kernel_floor([a], spec)
    elif v in BN_TRAIN_CLASSES:
        eff, ch_us = bn_train_figures(spec, kernel, a["dtype"])
        if eff:
            # training batch norm (cuDNN's bn_fw_tr / bn_bw; ATen's native kernels for bf16):
            # channel waves (bn_train_us), figures fitted by validation/fit_train.py on the
            # training records
            mem = bn_train_us(est.bytes, _bn_channels(a), eff, ch_us or 0.0, spec)
        return _retimed(est, spec, mem, comp, spec.reduction_min_us or floor, variant=v)
    elif v in ("conv", "conv_dgrad", "conv_wgrad"):
        if (spec.conv_simt_efficiency and unit_for("conv", a["dtype"], spec, opts) == "fp32"
                and _groups(graph, a) == 1):
            # cuDNN's fp32 CUDA-core kernels (implicit GEMM, FFT): their own class, not a
            # tensor-core GEMM's law (validation/microbench.py conv_simt)
            comp = a["flops"] / (spec.peak_flops("fp32") * spec.conv_simt_efficiency) * 1e6
        else:
            comp = comp * (spec.conv_efficiency_scale or 1.0)
        # cuDNN's backward-data and backward-filter kernels (conv_dgrad, conv_wgrad): the
        # forward law on their own implicit GEMMs (no fitted scale yet: docs/model.md)
        return _retimed(est, spec, mem, comp, spec.conv_min_us or floor, variant=v)
    elif v == "conv_stem" and spec.conv_stem_tflops:
        comp = (spec.conv_stem_us or 0.0) + a["flops"] / (spec.conv_stem_tflops * 1e12) * 1e6
        return _retimed(est, spec, mem, comp, spec.conv_min_us or floor, variant=v)
    elif v == "depthwise_aten" and depthwise_aten_us(graph, a, spec) is not None:
        comp = depthwise_aten_us(graph, a, spec)
    elif v == "depthwise_aten" and spec.depthwise_aten_efficiency:
        comp = a["flops"] / (spec.peak_flops("fp32") * spec.depthwise_aten_efficiency) * 1e6
    elif v in ("depthwise", "depthwise_aten"):
        # no figure: depthwise kernels (cuDNN's and ATen's alike, in the sweeps' profiler
        # lists) run on CUDA cores with one filter per channel, so there is no GEMM to tile:
        # the neutral law is the CUDA-core rate, not a K = kh*kw tensor-core GEMM's
        comp = a["flops"] / (spec.peak_flops("fp32") * spec.cuda_core_efficiency) * 1e6
    elif v in ("gemm", "align1", "align2", "gemv", "gemm_lt"):
        mem = est.mem_us * spec.mem_efficiency / (spec.gemm_mem_efficiency or spec.mem_efficiency)
        unit = unit_for(a["kind"], a["dtype"], spec, opts)
        eff = spec.matmul_align1_efficiency if v == "align1" else spec.matmul_align2_efficiency
        if v in ("align1", "align2") and eff:
            comp = a["flops"] / (spec.peak_flops(unit) * eff) * 1e6
        elif v == "gemv" and unit == "fp32":
            # cuBLAS gemv: streams the weight; no output tiles to quantise
            mem = est.mem_us * spec.mem_efficiency / (spec.gemv_fp32_efficiency or spec.gemm_mem_efficiency
                                                      or spec.mem_efficiency)
            comp = a["flops"] / (spec.peak_flops(unit) * matmul_efficiency(spec, unit)) * 1e6
        elif v == "gemm_lt" and unit == "fp32":
            g = a["gemm"]
            comp = comp * quantisation_efficiency(g, spec) / quantisation_efficiency(g, spec, split_k=False)
        # the floor was fitted on 16-bit GEMMs; fp32 gemv kernels share it (sweeps: 4-5 us)
        lib_floor = a["dtype"] in HALF_DTYPES or (v == "gemv" and unit == "fp32")
        floor = (spec.gemm_eager_min_us if lib_floor else None) or floor
        if a["kind"] == "conv":
            # a 1x1 conv run as an align GEMM keeps cuDNN's conv floor (H100 zoo records:
            # densenet121's smallest align2 kernels 7.5 us)
            floor = spec.conv_min_us or floor
        return _retimed(est, spec, mem, comp, floor, variant=v)
    elif v == "attention_fp32" and spec.attention_fp32_efficiency:
        comp = gemm_flops_effective(a) / (spec.peak_flops("fp32") * spec.attention_fp32_efficiency) * 1e6
    elif v in ("attention", "attention_mask"):
        eff = spec.attention_mask_efficiency if v == "attention_mask" else spec.attention_efficiency
        if eff:
            comp = attention_flops(a, spec) / (spec.peak_flops("fp16_tc") * eff) * 1e6
            floor = spec.attention_min_us or floor
    return _retimed(est, spec, mem, comp, floor, variant=v)


def mta_bytes(a: dict) -> float:
    """A multi-tensor-apply op's bytes: its node's reads and writes (in-place lists
    included)."""
    return float(a.get("bytes_read") or 0.0) + float(a.get("bytes_written") or 0.0)


#: training batch-norm kernel classes (gpusim.lower.dispatch.batch_norm_train_kernels): forward
#: with batch statistics, and backward
BN_TRAIN_CLASSES = ("bn_train", "bn_backward")


def bn_train_figures(spec, kernel, dtype: str) -> tuple:
    """The spec's (fraction of the bandwidth, per-channel µs) for a training batch-norm
    kernel: cuDNN's (``impl`` ``library``) by direction and dtype, or ATen's native ones."""
    d = "train" if kernel.variant == "bn_train" else "backward"
    if kernel.impl != "library":
        base, suffix = f"bn_native_{d}", ""
    else:
        base, suffix = f"bn_{d}", "_16bit" if dtype in HALF_DTYPES else ""
    return getattr(spec, f"{base}_efficiency{suffix}"), getattr(spec, f"{base}_channel_us{suffix}")


def bn_train_us(nbytes: float, channels: int, eff: float, channel_us: float, spec) -> float:
    """Memory time of a training batch-norm kernel: cuDNN and ATen run a block per channel
    (its whole N x H x W plane: statistics, or the gradient's two sums and the input
    gradient), the channels in waves over the SMs; a wave costs ``channel_us`` plus one
    plane at the SM's share (``eff x bandwidth / SMs``). H100 training records: 16 channels
    of 8 x 112 x 112 take 93 us (one wave, the GPU mostly idle) where 2,048 of 8 x 7 x 7,
    half the bytes, take 20 us (16 waves of small planes)."""
    c = max(1, int(channels))
    waves = math.ceil(c / spec.sm_count)
    plane = nbytes / c
    return waves * (channel_us + plane * spec.sm_count / (eff * spec.bandwidth) * 1e6)


def _bn_channels(a: dict) -> int:
    shape = main_shape(a.get("shape"))
    return shape[1] if len(shape) >= 2 else 1


def _conv_operands(a: dict) -> list:
    """A convolution node's input and weight: its first two inputs, or for a
    ``convolution_backward(grad_out, input, weight, ...)`` node its second and third."""
    ins = list(a.get("inputs") or a["reads"])
    return ins[1:3] if packet_name(a.get("op", "")) == "convolution_backward" else ins[:2]


def _groups(graph: OpGraph, a: dict) -> int:
    """A convolution node's groups: input channels over the weight's."""
    ins = _conv_operands(a)
    if len(ins) < 2:
        return 1
    x = main_shape(graph.g.nodes[ins[0]].get("shape"))
    w = main_shape(graph.g.nodes[ins[1]].get("shape"))
    return max(1, x[1] // max(w[1], 1)) if len(x) == 4 and len(w) == 4 else 1


def _filter_taps(graph: OpGraph, a: dict) -> int:
    """kh x kw of a convolution node's weight (a backward node's too: not its input's
    H x W, which priced a ConvNeXt step's 7x7 depthwise backward at 100 us a kernel)."""
    ins = _conv_operands(a)
    w = main_shape(graph.g.nodes[ins[1]].get("shape")) if len(ins) > 1 else ()
    return int(w[2] * w[3]) if len(w) == 4 else 1


#: bytes one warp loads at once (32 lanes x 16-byte vectors)
WARP_LOAD_BYTES = 512


def bn_input_contiguous(graph: OpGraph, n: str) -> bool | None:
    """Whether batch norm ``n`` reads an NCHW-contiguous input: the CUDA trace's own fact
    (``input_contiguous``), else, on a meta trace (the zoo's and the broad sample's
    re-captures), its producer convolution's layout as cuDNN runs it
    (:func:`gpusim.lower.dispatch.conv_layout`: NCHW in, NCHW out); None when neither tells."""
    a = graph.g.nodes[n]
    if a.get("input_contiguous") is not None:
        return a["input_contiguous"]
    ins = list(a.get("inputs") or a.get("reads") or [])
    p = graph.g.nodes[ins[0]] if ins and ins[0] in graph.g else None
    if p is None or p.get("kind") != "conv":
        return None
    from gpusim.lower.dispatch import conv_layout
    return conv_layout(graph, ins[0]) == "nchw"


def bn_eval_law(a: dict, contiguous: bool | None, spec) -> tuple[float, float] | None:
    """Eval batch norm's time as its kernels' own parallelism bounds it (``bn`` sweep,
    ``validation/fit_bn.py``): ``(us, floor_us)``, or None where the GPU has no fitted
    figure for the layout (the stream with :func:`plane_padding`, the old law).

    * NCHW (cuDNN's ``bn_fw_inf_1C11_kernel_NCHW`` in fp32, ATen's
      ``batch_norm_transform_input_kernel`` in 16-bit: the same law): a block per
      (n, c) plane. Many small planes cost ``bn_plane_cycles`` SM-cycles each, spread over
      the SMs (the 7x7 planes of a ResNet's last stage: 41 us for 32x2048 planes on the H100
      and the H200 alike, at 29% and 21% of their bandwidth); few large planes cost the
      cycles one block needs to walk one plane, ``bn_plane_element_cycles`` per element
      (a batch-1 stem: 16 planes of 112x112 take 12 us).
    * channels-last fp32 (cuDNN's ``bn_fw_inf_1C11_kernel_NHWC``): the images are what it
      splits, so each image's elements cost ``bn_nhwc_image_cycles`` on the clock
      (batch 1 runs at 3% of the bandwidth), and a floor of its own (``bn_nhwc_min_us``).
    * channels-last 16-bit (ATen's ``batch_norm_transform_input_channels_last_kernel``):
      the stream, with a floor of its own (``bn_cl_min_us``).

    The cycle figures carry to a GPU by its SMs and clock (the SM-cycle rule); the floors
    are times."""
    shape = main_shape(a.get("shape"))
    if len(shape) != 4 or contiguous is None:
        return None
    n, c, h, w = shape
    clock = spec.boost_clock_mhz * 1e-3            # cycles per ns
    if contiguous:
        if not spec.bn_plane_cycles:
            return None
        planes = n * c * spec.bn_plane_cycles / (spec.sm_count * clock) * 1e-3
        walk = h * w * (spec.bn_plane_element_cycles or 0.0) / clock * 1e-3
        return max(planes, walk), 0.0
    if a["dtype"] in HALF_DTYPES:
        return (0.0, spec.bn_cl_min_us) if spec.bn_cl_min_us else None
    if not spec.bn_nhwc_image_cycles:
        return None
    return c * h * w * spec.bn_nhwc_image_cycles / clock * 1e-3, spec.bn_nhwc_min_us or 0.0


def plane_padding(a: dict, contiguous: bool | None = None) -> float:
    """Eval batch norm's kernels walk each (n, c) plane in warp-wide vector loads: a
    plane's bytes round up to whole loads (7x7 planes of fp32 use 196 of 512 bytes). The
    norms sweep: 7x7 planes at 0.18 (fp32) and 0.09 (16-bit) of bandwidth against 0.67
    and 0.47 at 112x112. ``contiguous``: the input's layout where the caller knows it
    (:func:`bn_input_contiguous`), else the node's ``input_contiguous``."""
    shape = main_shape(a.get("shape"))
    if contiguous is None:
        contiguous = a.get("input_contiguous")
    if len(shape) != 4 or not contiguous:
        # channels-last: no planes (the sweep measured NCHW). The input's own layout
        # decides, known on CUDA traces only (``input_contiguous``; the node's
        # ``contiguous``, every operand at the output's shape, is false for any batch
        # norm, whose weights and statistics are [C] vectors)
        return 1.0
    plane = shape[2] * shape[3] * DTYPE_BYTES.get(a["dtype"], 4)
    return math.ceil(plane / WARP_LOAD_BYTES) * WARP_LOAD_BYTES / plane if plane else 1.0


#: the row width calibrate times ATen's layer norm at: the per-row cost of rows this wide
#: is inside ``aten_norm_efficiency`` already
NORM_CALIBRATION_COLS = 1024


def narrow_row_fraction(width: int) -> float:
    """How much of ATen layer norm's per-row cost (``layer_norm_row_ns``) a row of
    ``width`` elements pays beyond the calibrated stream: all of it for very narrow rows,
    none at the calibration width (:data:`NORM_CALIBRATION_COLS`) and past it."""
    return max(0.0, 1.0 - width / NORM_CALIBRATION_COLS)


def _retimed(est: KernelEstimate, spec, mem_us: float, comp_us: float, floor: float,
             **changes) -> KernelEstimate:
    """``est`` with new memory and compute times: the kernel-time formula of
    :func:`estimate_group` (fixed + the larger of the two, at least ``floor``)."""
    body = max(mem_us, comp_us)
    us = max(spec.kernel_fixed_us + body, floor)
    bound = "latency" if body < spec.kernel_fixed_us else ("compute" if comp_us > mem_us else "memory")
    return replace(est, mem_us=mem_us, compute_us=comp_us, us=us, bound=bound, **changes)


def _aux_estimate(graph: OpGraph, kernel, spec) -> KernelEstimate:
    """A library helper kernel: a stream over ``kernel.bytes`` (cuDNN's layout
    transforms, mask conversions) or, with no bytes, a tiny setup kernel at the floor."""
    a = graph.g.nodes[kernel.ops[0]]
    eff = spec.mem_efficiency if kernel.impl == "generated" else (spec.layout_transform_efficiency
                                                                   or spec.mem_efficiency)
    if kernel.variant == "strided_copy":
        # ATen's copy of a strided tensor to a contiguous one: a permuting copy, the
        # class of cuDNN's layout transforms (a transposed read per element)
        eff = spec.layout_transform_efficiency or spec.aten_strided_efficiency * spec.mem_efficiency
        perm = (spec.aten_permuted_efficiency_16bit if a["dtype"] in HALF_DTYPES
                else spec.aten_permuted_efficiency)
        if perm:        # ATen's own permuting copy (broad records), not cuDNN's tiled one
            eff = perm * spec.mem_efficiency
    bn = bn_train_figures(spec, kernel, a["dtype"]) if kernel.variant in BN_TRAIN_CLASSES else (None, None)
    if kernel.variant in BN_TRAIN_CLASSES:
        # a native batch norm's statistics pass (bf16): without a figure, ATen's norm
        # kernels' stream (as the pass's main kernel)
        eff = spec.mem_efficiency * (spec.aten_norm_efficiency_16bit if a["dtype"] in HALF_DTYPES
                                     else spec.aten_norm_efficiency)
    if kernel.variant == "moments":
        # a group norm's statistics: a block-per-row reduction over its input
        eff = spec.mem_efficiency * spec.aten_reduction_efficiency
    if kernel.variant in ("conv_bias", "cat_copy"):
        # ATen's add_ of a conv's bias: a broadcast operand, the non-vectorised path
        # (cnn sweep: 0.78 / 0.45 of bandwidth in fp32 / 16-bit, as the broadcast add);
        # a cat's per-input copies into strided slices take the same path
        eff = spec.mem_efficiency * (spec.aten_strided_efficiency_16bit if a["dtype"] in HALF_DTYPES
                                     else spec.aten_strided_efficiency)
    mem = kernel.bytes / (eff * spec.bandwidth) * 1e6
    if bn[0]:
        mem = bn_train_us(kernel.bytes, _bn_channels(a), bn[0], bn[1] or 0.0, spec)
    us = max(spec.kernel_min_us, spec.kernel_fixed_us + mem) if kernel.bytes else spec.kernel_min_us
    if kernel.variant == "mta_launch" and spec.mta_launch_us:
        # a multi-tensor-apply op's further launch (training records: validation/fit_train.py)
        us = spec.mta_launch_us
    if kernel.variant == "weight_transform" and spec.weight_transform_us:
        us = max(us, spec.weight_transform_us)
    return KernelEstimate(
        name=f"{kernel.ops[0]}:aux", ops=tuple(kernel.ops), op_types=(packet_name(a["op"]),),
        kind="copy", shape=a.get("shape") or (), flops=0.0, bytes_read=kernel.bytes / 2,
        bytes_read_l2=0.0, bytes_written=kernel.bytes / 2, mem_us=mem, compute_us=0.0,
        fixed_us=spec.kernel_fixed_us, us=us, bound="memory" if kernel.bytes else "latency",
        unit="fp32", role="aux")


# Register pressure. A generated kernel keeps a register tile per live boundary tensor
# and per op in flight; past some size occupancy falls and so does achieved bandwidth.
# The H200 records' fused groups (up to 10 boundary tensors, 9 ops) show no penalty, so
# the term starts past that; its slope is ASSUMED (not yet measured) and is what stops
# the search from treating unbounded fusion as free.
PRESSURE_FREE_TENSORS = 10
PRESSURE_FREE_OPS = 16
PRESSURE_PER_TENSOR = 0.05     # assumed: +5% kernel time per boundary tensor past 10
PRESSURE_PER_OP = 0.02         # assumed: +2% per op past 16


def register_pressure(n_ops: int, n_tensors: int) -> float:
    """Slow-down factor (>= 1) of a fused kernel from register pressure."""
    if n_ops <= 1:
        return 1.0
    return (1.0 + PRESSURE_PER_TENSOR * max(0, n_tensors - PRESSURE_FREE_TENSORS)
            + PRESSURE_PER_OP * max(0, n_ops - PRESSURE_FREE_OPS))


def aten_fraction(nodes, spec) -> float:
    """Bandwidth of eager PyTorch's kernel for one op, as a fraction of a plain copy's.

    Elementwise ops with a broadcast or strided operand run ATen's non-vectorised path
    (one element per load: 2-byte types suffer most); reduce and norm kernels do a
    block-wide reduction per row. The fractions are measured by ``gpusim calibrate``.
    """
    a = nodes[0]
    kind = a["kind"]
    half = a.get("dtype") in ("float16", "bfloat16")
    if kind in ("pointwise", "copy"):
        return elementwise_fraction(a, spec)
    if kind == "reduction":
        return spec.aten_reduction_efficiency
    if kind == "norm" and not is_eval_batch_norm(a["op"]):
        return spec.aten_norm_efficiency_16bit if half else spec.aten_norm_efficiency
    return 1.0


def elementwise_fraction(a: dict, spec) -> float:
    """Bandwidth of ATen's elementwise kernel for node ``a``, as a fraction of a copy's: the
    path TensorIterator takes (``CUDALoops.cuh``). Contiguous operands of the output's dtype:
    the vectorised kernel (1). An operand of another dtype (``casts``: an fp16 branch added
    to an fp32 residual under autocast) is cast on the fly: the unrolled kernel when all are
    contiguous (``aten_cast_efficiency``), the legacy per-element kernel with dynamic casts
    otherwise (``aten_strided_cast_efficiency``). An operand read across the output's layout
    (``permuted``: a ViT's transposed residual stream plus a contiguous branch, ``.contiguous()``
    of a transpose) makes half the accesses uncoalesced (``aten_permuted_efficiency``); a
    broadcast or sliced operand alone is the calibrated ``aten_strided_efficiency``. Each
    figure missing from a spec falls back to the law before it (broad H100 AMP records:
    validation/fit_broad.py)."""
    half = a.get("dtype") in HALF_DTYPES
    strided = spec.aten_strided_efficiency_16bit if half else spec.aten_strided_efficiency
    # a copy converts dtypes in its own vectorised kernels (float16_copy_kernel_cuda)
    casts = a.get("casts") and a["kind"] == "pointwise"
    if a.get("contiguous", True):
        return (spec.aten_cast_efficiency or 1.0) if casts else 1.0
    perm = spec.aten_permuted_efficiency_16bit if half else spec.aten_permuted_efficiency
    if a.get("permuted") and perm:
        return perm
    if casts and spec.aten_strided_cast_efficiency:
        return spec.aten_strided_cast_efficiency
    return strided


def pool_us(a: dict, spec) -> float | None:
    """ATen's window pooling kernels (``avg_pool2d_out_cuda_frame``, ``max_pool_forward_nchw``
    and their ``_nhwc`` twins) run a thread per output that walks its window with scalar,
    uncoalesced loads: their time follows the outputs, not the bytes (broad H100 AMP
    records: ~80 G outputs/s NCHW for 2x2 and 3x3 windows alike, ~40 channels-last). None
    where the spec has no rate (the reduction stream prices it)."""
    rate = spec.pool_output_rate_nhwc if a.get("layout") == "nhwc" else spec.pool_output_rate
    if not rate:
        return None
    return numel(main_shape(a.get("shape"))) / (rate * 1e3)


def depthwise_aten_us(graph: OpGraph, a: dict, spec) -> float | None:
    """ATen's NCHW depthwise kernel in fp16 (``conv_depthwise2d_forward_kernel``: a thread
    per output walking its filter): the slower of a per-output cost and a per-tap one,
    ``max(outputs / output_rate, outputs x taps / tap_rate)``. Broad H100 AMP records: 3x3
    filters ~11 ps an output whatever the shape (the per-output cost: indexing, the
    3x3-specialised loop), 5x5 and 7x7 ~0.75 ps an output-tap (the multiply-adds). None
    where the spec has no rates (bf16 and fp32, not in the AMP fp16 records, or an unfitted
    GPU: the FLOP law)."""
    if a["dtype"] != "float16" or not (spec.depthwise_aten_output_rate_fp16
                                             and spec.depthwise_aten_tap_rate_fp16):
        return None
    outputs = numel(main_shape(a.get("shape")))
    taps = _filter_taps(graph, a)
    return max(outputs / spec.depthwise_aten_output_rate_fp16,
               outputs * taps / spec.depthwise_aten_tap_rate_fp16) / 1e3


def depthwise_nchw_us(graph: OpGraph, n: str, spec) -> float | None:
    """cuDNN's depthwise kernels on NCHW fp16 (``conv2d_c1_k1_nchw_shmem_tiling``, and
    ``conv2d_grouped_direct_kernel`` on 7x7 maps at large batches): ``planes x taps x
    plane_tap + outputs x (output + taps x output_tap)`` picoseconds, a plane one image's
    channel. Broad H100 AMP records: 3x3 ~3.3 ps an output on 56x56 maps, ~4 on 14x14 and
    ~9 on 7x7 (the per-plane part: halo and filter loads), 5x5 ~5.5 on 28x28 and up, ~10.5
    on 14x14; about twice the channels-last kernels the cnn sweep's class was fitted on.
    None where the spec has no figures or the conv is not NCHW fp16 (the sweep's class)."""
    from gpusim.lower.dispatch import conv_info
    c = conv_info(graph, n)
    if (c is None or c["layout"] != "nchw" or c["dtype"] != "float16"
            or spec.depthwise_nchw_output_ps_fp16 is None or spec.depthwise_nchw_plane_tap_ps_fp16 is None
            or spec.depthwise_nchw_output_tap_ps_fp16 is None):
        return None
    taps, planes = c["kh"] * c["kw"], c["N"] * c["Cout"]
    outputs = planes * c["Ho"] * c["Wo"]
    return (planes * taps * spec.depthwise_nchw_plane_tap_ps_fp16
            + outputs * (spec.depthwise_nchw_output_ps_fp16
                         + taps * spec.depthwise_nchw_output_tap_ps_fp16)) * 1e-6


def kernel_floor(nodes, spec) -> float:
    """Shortest duration of a kernel of this class: library GEMMs and block reductions
    have longer prologues than a streaming elementwise kernel (measured floors)."""
    kinds = {a["kind"] for a in nodes}
    if kinds & GEMM_KINDS and spec.gemm_min_us:
        return spec.gemm_min_us
    if kinds & REDUCING_KINDS and spec.reduction_min_us:
        return spec.reduction_min_us
    return spec.kernel_min_us
