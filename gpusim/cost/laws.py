"""Kernel-class laws: one small function per eager kernel class (``Kernel.variant``, named by the
lowering's dispatch rules, :mod:`gpusim.lower.dispatch`), found through one registry (:data:`LAWS`).

Every law starts from the kernel's group roofline (:func:`gpusim.cost.roofline.estimate_group`) and
returns it retimed: ``t = max(floor, kernel_fixed_us + max(t_memory, t_compute))`` with the class's
own memory or compute term and floor. A GPU without a class's figure (None: nothing fitted it on
that GPU, and another GPU's figure is never a default) gets the neutral law (:func:`neutral`) or
the fallback each law names. Adding a kernel class is adding one law here and its figures to the
spec files (``hwspecs/``, with their provenance)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from gpusim.cost.classes import (BN_NHWC_CLASSES, BN_TRAIN_CLASSES, _bn_channels, _filter_taps, _groups, bn_eval_law,
                                 bn_input_contiguous, bn_nhwc_us, bn_train_figures, bn_train_us, conv_align_law, depthwise_aten_us,
                                 depthwise_nchw_us, mta_bytes, narrow_row_fraction, plane_padding, pool_us, stem_nhwc_law)
from gpusim.cost.aten_reduce import aten_reduce_law
from gpusim.cost.vit_kernels import attention_fp32_us, patchify_us
from gpusim.cost.decode_attention import decode_attention_us, reduce_us
from gpusim.cost.roofline import (CostOptions, KernelEstimate, _retimed, attention_flops, gemm_flops_effective,
                                  kernel_floor, matmul_efficiency, quantisation_efficiency, unit_for)
from gpusim.cost.few_rows import layer_norm_wide_floor
from gpusim.cost.layout import TRANSFORMS, layout_transform_us
from gpusim.cost.small_ops import bcast_mul_us, gather_us, layer_norm_floor
from gpusim.graph.opgraph import DTYPE_BYTES, HALF_DTYPES, OpGraph, main_shape, numel
from gpusim.graph.ops import packet_name
from gpusim.lower.conv import conv_info
from gpusim.lower.dispatch import cublas_split_k


@dataclass(frozen=True)
class LawInput:
    """What a law reads: the kernel, its first node's attributes ``a``, the GPU ``spec``, the
    group roofline ``est`` and the default ``floor`` (the library GEMM floor for GEMM-like
    kernels where the spec has one, else the common ``kernel_min_us``)."""

    graph: OpGraph
    kernel: object          # gpusim.lower.lowering.Kernel
    spec: object            # gpusim.hw.spec.GPUSpec
    opts: CostOptions
    est: KernelEstimate
    a: dict
    floor: float

    def retimed(self, mem_us: float, comp_us: float, floor: float | None = None) -> KernelEstimate:
        """The roofline with this class's memory and compute times (and floor)."""
        return _retimed(self.est, self.spec, mem_us, comp_us, self.floor if floor is None else floor,
                        variant=self.kernel.variant)


#: kernel class (``Kernel.variant``) -> its law
LAWS: dict[str, Callable[[LawInput], KernelEstimate]] = {}


def law(*variants: str):
    """Register the decorated function as the law of ``variants``."""
    def register(fn):
        for v in variants:
            if v in LAWS:
                raise ValueError(f"kernel class {v!r} has two laws: {LAWS[v].__name__} and {fn.__name__}")
            LAWS[v] = fn
        return fn
    return register


def neutral(x: LawInput) -> KernelEstimate:
    """A class with no law or no figures: the group roofline at the class's floor."""
    return x.retimed(x.est.mem_us, x.est.compute_us)


@law("mta")
def mta(x: LawInput) -> KernelEstimate:
    """Multi-tensor apply (foreach and fused optimizer kernels): the op's own bytes (every list read, every list
    written in place) over ``mta_efficiency x bandwidth``, floor ``kernel_min_us`` (fit_train.py on the training
    records). A fused optimizer op writes its lists without an output tensor, which the group's boundary count
    misses (GPT-2's ``_fused_adamw_``: 16 of its 28 bytes per element). Without the figure: the plain ATen stream."""
    spec = x.spec
    if not spec.mta_efficiency:
        return x.est
    est = replace(x.est, bytes_read=max(x.est.bytes_read, mta_bytes(x.a) - x.est.bytes_written))
    return _retimed(est, spec, est.bytes / (spec.mta_efficiency * spec.bandwidth) * 1e6,
                    est.compute_us, spec.kernel_min_us, variant=x.kernel.variant)


@law("bn_eval")
def bn_eval(x: LawInput) -> KernelEstimate:
    """Eval batch norm: bytes at ``bn_eval_efficiency[_16bit]``, then the SM-cycle law of its
    planes (:func:`gpusim.cost.classes.bn_eval_law`: ``bn_plane_cycles``, ...) as a lower bound
    and floor; without it, the stream times the small-plane padding. Those figures were measured
    with the parameters L2-resident; inside a model they are cold: ``bn_cold_us`` more (the chain
    sweep's batch norms against the same kernels alone, warm; a 16-bit batch norm's prologue
    kernels' share is carried by its main kernel)."""
    a, spec = x.a, x.spec
    eff = spec.bn_eval_efficiency_16bit if a["dtype"] in HALF_DTYPES else spec.bn_eval_efficiency
    contiguous = bn_input_contiguous(x.graph, x.kernel.ops[0])
    mem = x.est.mem_us * spec.mem_efficiency / (eff or spec.mem_efficiency)
    floor = x.floor
    fitted = bn_eval_law(a, contiguous, spec)
    if fitted is None:
        mem = mem * plane_padding(a, contiguous)
    else:
        sm_us, law_floor = fitted
        mem, floor = max(mem, sm_us), max(floor, law_floor)
    est = x.retimed(mem, x.est.compute_us, floor)
    cold = spec.bn_cold_us or 0.0    # in a model: its parameters read cold (validation/fit/fit_chain.py)
    return replace(est, us=est.us + cold, fixed_us=est.fixed_us + cold) if cold else est


def _cuda_core_depthwise(x: LawInput) -> KernelEstimate:
    """Depthwise kernels without figures (cuDNN's and ATen's alike in the sweeps' profiler lists)
    run on CUDA cores with one filter per channel, so there is no GEMM to tile: FLOPs over the
    fp32 peak x ``cuda_core_efficiency``, not a K = kh*kw tensor-core GEMM."""
    return x.retimed(x.est.mem_us, x.a["flops"] / (x.spec.peak_flops("fp32") * x.spec.cuda_core_efficiency) * 1e6)


@law("depthwise")
def depthwise(x: LawInput) -> KernelEstimate:
    """cuDNN's depthwise convolution: ``depthwise_us[_16bit]`` + ``depthwise_tap_us`` per filter tap
    + FLOPs at ``depthwise_efficiency`` of the fp32 peak (cnn sweep), or the NCHW kernel's own law
    (:func:`gpusim.cost.classes.depthwise_nchw_us`)."""
    spec, a = x.spec, x.a
    if not spec.depthwise_efficiency:
        return _cuda_core_depthwise(x)
    half = a["dtype"] in HALF_DTYPES
    fixed, tap, eff = ((spec.depthwise_us_16bit, spec.depthwise_tap_us_16bit, spec.depthwise_efficiency_16bit)
                       if half else (spec.depthwise_us, spec.depthwise_tap_us, spec.depthwise_efficiency))
    # a GPU whose fraction is derived but whose fixed costs are not: none (neutral)
    comp = (fixed or 0.0) + (tap or 0.0) * _filter_taps(x.graph, a) + a["flops"] / (spec.peak_flops("fp32") * eff) * 1e6
    nchw = depthwise_nchw_us(x.graph, x.kernel.ops[0], spec)
    if nchw is not None:
        return x.retimed(x.est.mem_us, nchw)
    return x.retimed(x.est.mem_us, comp - spec.kernel_fixed_us)


@law("depthwise_aten")
def depthwise_aten(x: LawInput) -> KernelEstimate:
    """ATen's own depthwise kernel: its fitted law (:func:`gpusim.cost.classes.depthwise_aten_us`),
    else FLOPs at ``depthwise_aten_efficiency`` of the fp32 peak, else the CUDA-core law."""
    us = depthwise_aten_us(x.graph, x.a, x.spec)
    if us is not None:
        return x.retimed(x.est.mem_us, us)
    if x.spec.depthwise_aten_efficiency:
        return x.retimed(x.est.mem_us, x.a["flops"] / (x.spec.peak_flops("fp32") * x.spec.depthwise_aten_efficiency) * 1e6)
    return _cuda_core_depthwise(x)


law("aten_reduce")(aten_reduce_law)     # ATen's reduce_kernel by its launch configuration (gpusim.cost.aten_reduce)


@law("pool")
def pool(x: LawInput) -> KernelEstimate:
    """Pooling: its window's rate (:func:`gpusim.cost.classes.pool_us`) at the reduction floor; else the stream."""
    us = pool_us(x.a, x.spec)
    if us is None:
        return x.est
    return x.retimed(x.est.mem_us, us, kernel_floor([x.a], x.spec))


@law("layer_norm")
def layer_norm(x: LawInput) -> KernelEstimate:
    """ATen's layer norm runs a block per row: ``layer_norm_row_ns[_16bit]`` per row on top of the
    stream, scaled by how narrow the row is (:func:`gpusim.cost.classes.narrow_row_fraction`; it
    dominates Swin's and ConvNeXt's 96-768 channels); floor ``reduction_min_us``, or the width's
    floor (:func:`gpusim.cost.small_ops.layer_norm_floor`; wider rows at decode sizes:
    :func:`gpusim.cost.few_rows.layer_norm_wide_floor`) where the spec has it."""
    a, spec = x.a, x.spec
    mem = x.est.mem_us
    row_ns = spec.layer_norm_row_ns_16bit if a["dtype"] in HALF_DTYPES else spec.layer_norm_row_ns
    shape = main_shape(a.get("shape"))
    if row_ns and shape:
        mem = mem + numel(shape) / max(shape[-1], 1) * row_ns * narrow_row_fraction(shape[-1]) * 1e-3
    floor = layer_norm_floor(a, spec) or layer_norm_wide_floor(a, spec) or spec.reduction_min_us or x.floor
    return x.retimed(mem, x.est.compute_us, floor)


@law("gather", "bcast_mul")
def small_op(x: LawInput) -> KernelEstimate:
    """ViT's gather and layer-scale multiply (:mod:`gpusim.cost.small_ops`): that time in its domain; else the stream."""
    us = (gather_us if x.kernel.variant == "gather" else bcast_mul_us)(x.a, x.spec)
    if us is None:
        return x.est
    return replace(x.est, mem_us=us, us=us, bound="memory", variant=x.kernel.variant)


@law("column_sum")
def column_sum(x: LawInput) -> KernelEstimate:
    """A backward sum over the leading dim (:func:`gpusim.lower.dispatch_train.column_sum`): ``column_sum_us`` for
    ``kernel_fixed_us``, its bytes at ``column_sum_efficiency`` (fit_train.py); else the reduction stream."""
    spec = x.spec
    if not spec.column_sum_efficiency:
        return x.est
    mem = ((spec.column_sum_us or spec.kernel_fixed_us) - spec.kernel_fixed_us
           + x.est.bytes / (spec.column_sum_efficiency * spec.bandwidth) * 1e6)
    return x.retimed(mem, x.est.compute_us, kernel_floor([x.a], x.spec))


@law(*BN_TRAIN_CLASSES)
def bn_train(x: LawInput) -> KernelEstimate:
    """Training batch norm (cuDNN's bn_fw_tr / bn_bw; ATen's native kernels for bf16): channel waves
    (:func:`gpusim.cost.classes.bn_train_us`) with ``bn_train_efficiency``, ``bn_backward_efficiency``
    and their per-channel times (validation/fit/fit_train.py); floor ``reduction_min_us``."""
    a, spec = x.a, x.spec
    eff, ch_us = bn_train_figures(spec, x.kernel, a["dtype"])
    mem = bn_train_us(x.est.bytes, _bn_channels(a), eff, ch_us or 0.0, spec) if eff else x.est.mem_us
    return x.retimed(mem, x.est.compute_us, spec.reduction_min_us or x.floor)


@law(*BN_NHWC_CLASSES)
def bn_nhwc(x: LawInput) -> KernelEstimate:
    """Channels-last training batch norm (cuDNN's ``*_nhwc_semiPersist``, ATen's channels-last
    kernels): :func:`gpusim.cost.classes.bn_nhwc_us` past the fixed cost (figures fitted on the
    ``bn_train`` sweep, validation/fit/fit_bn_nhwc.py); without them, the roofline."""
    mem = bn_nhwc_us(x.kernel.variant, x.est.bytes, x.a.get("shape"), x.spec)
    return x.est if mem is None else x.retimed(mem, x.est.compute_us, x.spec.kernel_min_us)


@law("conv", "conv_dgrad", "conv_wgrad")
def conv(x: LawInput) -> KernelEstimate:
    """cuDNN convolutions (and their backward-data and backward-filter kernels, the forward law on
    their own implicit GEMMs): fp32 CUDA-core kernels at ``conv_simt_efficiency`` of the fp32 peak
    (microbench conv_simt); tensor-core ones the GEMM roofline x ``conv_efficiency_scale``; floor
    ``conv_min_us``."""
    a, spec = x.a, x.spec
    if (spec.conv_simt_efficiency and unit_for("conv", a["dtype"], spec, x.opts) == "fp32"
            and _groups(x.graph, a) == 1):
        comp = a["flops"] / (spec.peak_flops("fp32") * spec.conv_simt_efficiency) * 1e6
    else:
        comp = x.est.compute_us * (spec.conv_efficiency_scale or 1.0)
    return x.retimed(x.est.mem_us, comp, spec.conv_min_us or x.floor)


@law("conv_gemm")
def conv_gemm(x: LawInput) -> KernelEstimate:
    """A 1x1 convolution cuDNN hands to cuBLAS over NCHW (``nvjet``, ``cutlass::Kernel2``, ``xmma_gemm``; no layout
    transforms): ``conv_gemm_us`` + its bytes at ``conv_gemm_efficiency`` of the bandwidth, or its tensor-core time if
    longer, floor ``kernel_min_us`` (validation/fit/fit_conv_gemm.py on the cnn sweeps' cuBLAS-run 1x1 points). Without
    the figures, the conv law it was priced by before."""
    spec = x.spec
    if not spec.conv_gemm_efficiency:
        return conv(x)
    mem = ((spec.conv_gemm_us or spec.kernel_fixed_us) - spec.kernel_fixed_us
           + x.est.bytes / (spec.conv_gemm_efficiency * spec.bandwidth) * 1e6)
    return x.retimed(mem, x.est.compute_us, spec.kernel_min_us)


@law("conv_stem", "conv_stem_nhwc")
def conv_stem(x: LawInput) -> KernelEstimate:
    """A stem convolution (3 input channels): channels-last by :func:`gpusim.cost.classes.stem_nhwc_law`; a ViT patch embedding
    by :func:`gpusim.cost.vit_kernels.patchify_us`; else ``conv_stem_us`` + FLOPs at ``conv_stem_tflops`` (floor ``conv_min_us``)."""
    spec = x.spec
    if x.kernel.variant == "conv_stem_nhwc":
        return stem_nhwc_law(x, conv)
    if (patch := patchify_us(conv_info(x.graph, x.kernel.ops[0]), spec)) is not None:
        return x.retimed(x.est.mem_us, patch - spec.kernel_fixed_us, spec.kernel_min_us)
    if not spec.conv_stem_tflops:
        return neutral(x)
    comp = (spec.conv_stem_us or 0.0) + x.a["flops"] / (spec.conv_stem_tflops * 1e12) * 1e6
    return x.retimed(x.est.mem_us, comp, spec.conv_min_us or x.floor)


#: rows (the product's M, batch dims folded in) up to which a 16-bit GEMM streams its weight: the
#: skinny sweep's fitted range (validation/fit/fit_skinny.py fits on it); from 128 rows its kernels
#: are tiled for compute and run up to 19% slower than the stream law
STREAM_ROWS = 32


def streams_weights(a: dict) -> bool:
    """A product of at most :data:`STREAM_ROWS` rows: a decode step's projections."""
    g = a.get("gemm") or {}
    return bool(g) and g.get("b", 1) * g.get("m", STREAM_ROWS + 1) <= STREAM_ROWS


def weight_stream_us(x: LawInput) -> float | None:
    """The memory time of a 16-bit cuBLAS product of at most :data:`STREAM_ROWS` rows on a GPU
    with the skinny sweep's figures: ``gemm_stream_us`` + bytes at ``gemm_stream_efficiency``,
    at least ``gemm_stream_k_us`` + K x ``gemm_stream_k_ns`` (less the kernel's fixed time) when
    cuBLAS does not split K; None where the law does not apply. Eager's linear and Inductor's
    ``extern_kernels.mm`` call the same cuBLAS kernels."""
    a, spec = x.a, x.spec
    if not (spec.gemm_stream_efficiency and a["dtype"] in HALF_DTYPES and a["kind"] == "matmul"
            and streams_weights(a)):
        return None
    mem = (spec.gemm_stream_us or 0.0) + x.est.mem_us * spec.mem_efficiency / spec.gemm_stream_efficiency
    if spec.gemm_stream_k_ns and not cublas_split_k(x.graph, x.kernel.ops[0], spec):
        mem = max(mem, (spec.gemm_stream_k_us or 0.0) + a["gemm"]["k"] * spec.gemm_stream_k_ns * 1e-3
                  - spec.kernel_fixed_us)
    return mem


def kloop_us(x: LawInput) -> float:
    """The K-loop latency of a mid-size 16-bit cuBLAS product, added to its compute time:
    ``gemm_kloop_us`` + K x ``gemm_kloop_ns`` for a single product (no batch of matrices) with
    more rows than a skinny stream (:data:`STREAM_ROWS`), whose output tiles (the spec's
    ``matmul_tile_m x matmul_tile_n``) fit in one wave over the SMs, and that cuBLAS does not
    split over K. With one wave there is no second tile to hide a tile's K steps behind, so
    they add to the tensor-core time (the H100 dispatch sweep's 128-2048-row products: K
    3072 runs 7.7-9.7 us at 128-512 rows, K 768 4.4-5.2 us; fitted by
    validation/fit/fit_gemm_kloop.py). 0 without the figures or outside that domain."""
    a, spec = x.a, x.spec
    g = a.get("gemm") or {}
    if not (spec.gemm_kloop_ns and a["dtype"] in HALF_DTYPES and a["kind"] == "matmul" and g
            and g.get("b", 1) == 1 and not streams_weights(a)):
        return 0.0
    tiles = -(-int(g["m"]) // spec.matmul_tile_m) * -(-int(g["n"]) // spec.matmul_tile_n)
    if tiles > spec.sm_count or cublas_split_k(x.graph, x.kernel.ops[0], spec):
        return 0.0
    return (spec.gemm_kloop_us or 0.0) + g["k"] * spec.gemm_kloop_ns * 1e-3


@law("gemm", "align1", "align2", "gemv", "gemm_lt")
def gemm(x: LawInput) -> KernelEstimate:
    """cuBLAS GEMM classes: operand streams at ``gemm_mem_efficiency``, or for 16-bit GEMMs where the GPU has the
    skinny sweep's figures and the product has at most STREAM_ROWS rows, ``gemm_stream_us`` + bytes at
    ``gemm_stream_efficiency`` (weights streamed back to back, as a decode step reads them), at least
    ``gemm_stream_k_us`` + K x ``gemm_stream_k_ns`` when cuBLAS does not split K (each output tile streams its K
    columns in turn); misaligned 16-bit GEMMs (align1/align2) at ``matmul_align{1,2}_efficiency`` of the unit's peak
    (a 1x1 conv's where the GPU has its figures: :func:`gpusim.cost.classes.conv_align_law`); fp32 gemv streams the
    weight at ``gemv_fp32_efficiency`` (no output tiles to quantise); fp32 cuBLASLt without split-K; floors
    ``gemm_eager_min_us`` (16-bit GEMMs, fp32 gemv) and ``conv_min_us`` for a 1x1 conv run as a GEMM (densenet121: 7.5 us)."""
    a, spec, v = x.a, x.spec, x.kernel.variant
    if a["kind"] == "conv" and v in ("align1", "align2") and getattr(spec, f"conv_{v}_efficiency"):
        return conv_align_law(x)
    mem = x.est.mem_us * spec.mem_efficiency / (spec.gemm_mem_efficiency or spec.mem_efficiency)
    stream = weight_stream_us(x) if v in ("gemm", "gemm_lt") else None
    if stream is not None:
        mem = stream
    comp = x.est.compute_us
    unit = unit_for(a["kind"], a["dtype"], spec, x.opts)
    eff = spec.matmul_align1_efficiency if v == "align1" else spec.matmul_align2_efficiency
    if v in ("align1", "align2") and eff:
        comp = a["flops"] / (spec.peak_flops(unit) * eff) * 1e6
    elif v == "gemv" and unit == "fp32":
        mem = x.est.mem_us * spec.mem_efficiency / (spec.gemv_fp32_efficiency or spec.gemm_mem_efficiency or spec.mem_efficiency)
        comp = a["flops"] / (spec.peak_flops(unit) * matmul_efficiency(spec, unit)) * 1e6
    elif v == "gemm_lt" and unit == "fp32":
        comp = comp * quantisation_efficiency(a["gemm"], spec) / quantisation_efficiency(a["gemm"], spec, split_k=False)
    elif v in ("gemm", "gemm_lt") and stream is None:
        comp += kloop_us(x)
    lib_floor = a["dtype"] in HALF_DTYPES or (v == "gemv" and unit == "fp32")
    floor = (spec.gemm_eager_min_us if lib_floor else None) or x.floor
    if a["kind"] == "conv":
        floor = spec.conv_min_us or floor
    return x.retimed(mem, comp, floor)


@law("extern_mm")
def extern_mm(x: LawInput) -> KernelEstimate:
    """A GEMM Inductor leaves to cuBLAS (compiled ``extern_kernels.mm/addmm/bmm``): the plain
    calibrated roofline (Inductor's calls stream skinny weights faster than eager's linear),
    at the cuBLAS floor of a 16-bit GEMM, ``gemm_eager_min_us``: the same nvjet kernels run
    as in eager (H100 held-out OPUS-MT, 96 GEMMs: 477 us in both records), and 16-bit
    compiled GEMMs priced under 3 us by the calibrated ``gemm_min_us`` floor (an 8x128 mm)
    measured 1.45x their prediction (43 H100 zoo kernels, median 3.94 us; 0.87x with this
    floor). A skinny product streams its weight as eager's does (:func:`weight_stream_us`)."""
    half = x.a["dtype"] in HALF_DTYPES and x.a["kind"] == "matmul"
    stream = weight_stream_us(x)
    return x.retimed(x.est.mem_us if stream is None else stream,
                     x.est.compute_us + (kloop_us(x) if stream is None else 0.0),
                     (x.spec.gemm_eager_min_us if half else None) or x.floor)


@law("attention_fp32")
def attention_fp32(x: LawInput) -> KernelEstimate:
    """fp32 attention: :func:`gpusim.cost.vit_kernels.attention_fp32_us`, else FLOPs at ``attention_fp32_efficiency``."""
    if (blocks := attention_fp32_us(x.a, x.spec)) is not None:
        return x.retimed(x.est.mem_us, blocks - x.spec.kernel_fixed_us)
    if not x.spec.attention_fp32_efficiency:
        return neutral(x)
    return x.retimed(x.est.mem_us, gemm_flops_effective(x.a) / (x.spec.peak_flops("fp32") * x.spec.attention_fp32_efficiency) * 1e6)


#: masked attention class -> the spec's mask-read rate (TB/s) for it
MASK_RATES = {"attention_mask": "attention_mask_dense_tbps", "attention_mask_bcast": "attention_mask_bcast_tbps",
              "attention_mask_heads": "attention_mask_heads_tbps"}


@law("attention", *MASK_RATES)
def attention(x: LawInput) -> KernelEstimate:
    """Fused attention (flash, cuDNN, memory-efficient): the two products' FLOPs
    (:func:`gpusim.cost.roofline.attention_flops`) at ``attention_efficiency`` of the fp16 tensor
    peak, floor ``attention_min_us``; without the figure, the neutral law. At one query row on a
    GPU with the sdpa_decode sweep's figures: :func:`gpusim.cost.decode_attention.decode_attention_us`.
    With a mask (the
    classes of :func:`gpusim.lower.dispatch.mask_layout`): where the spec has the layout's rate
    (the sdpa_mask sweep), that time plus the mask read once per head, B x H x Sq x Skv
    elements, at the rate (an unaligned dense or per-head mask: :func:`unaligned_mask_us`),
    added to the unmasked time; else the products at ``attention_mask_efficiency``."""
    spec = x.spec
    decode = decode_attention_us(x.a, spec, x.kernel.variant in MASK_RATES)
    if decode is not None:      # one query row: the decode law (gpusim.cost.decode_attention)
        return x.retimed(decode - spec.kernel_fixed_us, 0.0, decode)
    rate = getattr(spec, MASK_RATES.get(x.kernel.variant, ""), None)
    masked = x.kernel.variant in MASK_RATES and not rate
    eff = spec.attention_mask_efficiency if masked else spec.attention_efficiency
    if not eff:
        return neutral(x)
    comp = attention_flops(x.a, spec) / (spec.peak_flops("fp16_tc") * eff) * 1e6 * causal_share(x.a, spec)
    est = x.retimed(x.est.mem_us, comp, spec.attention_min_us or x.floor)
    if not rate:
        return est
    # the mask's read comes on top of the unmasked call's time, its floor included (the sweep
    # fits it as the masked kernel less the same shape's unmasked one)
    slow = unaligned_mask_us(x.a, spec) if x.kernel.variant != "attention_mask_bcast" else None
    extra = slow if slow is not None else mask_read_bytes(x.a) / (rate * 1e12) * 1e6
    return replace(est, compute_us=est.compute_us + extra, us=est.us + extra)


def unaligned_mask_us(a: dict, spec) -> float | None:
    """The mask read of a dense or per-head mask whose rows are not a multiple of 16 bytes (ViT's
    197 keys): cuDNN's kernel then reads it element by element, so the time goes by waves of CTAs,
    each reading its ``attention_mask_unaligned_tile`` query rows x Skv of the mask at
    ``attention_mask_unaligned_cta_gbps`` (the H200 sdpa_mask sweep's unaligned shapes). None for
    an aligned mask, or without the figures (then the byte rate prices it)."""
    s = a.get("sdpa") or {}
    tile, gbps = spec.attention_mask_unaligned_tile, spec.attention_mask_unaligned_cta_gbps
    dt = str(s.get("mask_dtype") or a["dtype"]).replace("torch.", "")
    elt = DTYPE_BYTES.get(dt if dt != "bool" else a["dtype"], 2)
    sq, skv = int(s.get("q_len") or 0), int(s.get("kv_len") or 0)
    if not (tile and gbps and sq and skv) or (skv * elt) % 16 == 0:
        return None
    bh = numel(main_shape(a["shape"])[:-2]) if a.get("shape") else 1
    waves = -(-bh * -(-sq // int(tile)) // spec.sm_count)
    return waves * min(sq, int(tile)) * skv * elt / (gbps * 1e9) * 1e6


def causal_share(a: dict, spec) -> float:
    """The share of a causal self-attention's tiles the kernel computes: with the keys in tiles of
    ``attention_causal_tile`` and n = ceil(S / tile) of them, query tile i reads tiles 0..i, so
    (n + 1) / 2n of the full square (flash's and cuDNN's causal loop bound). 1 without the figure
    (the prefill_classes sweep's causal/full pairs fit it), for a non-causal call, or when queries
    and keys differ in length (a decode step)."""
    s = a.get("sdpa") or {}
    tile = getattr(spec, "attention_causal_tile", None)
    if not tile or not s.get("is_causal") or s.get("q_len") != s.get("kv_len") or not s.get("q_len"):
        return 1.0
    n = -(-int(s["q_len"]) // int(tile))
    return (n + 1) / (2 * n)


def mask_read_bytes(a: dict) -> float:
    """Bytes an attention call's kernel reads from its mask: one Sq x Skv matrix per batch and
    head, at the mask's element size (a bool mask reaches the kernel as a bias of the call's dtype)."""
    s = a.get("sdpa") or {}
    bh = numel(main_shape(a["shape"])[:-2]) if a.get("shape") else 1
    dt = str(s.get("mask_dtype") or a["dtype"]).replace("torch.", "")
    return float(bh * s.get("q_len", 0) * s.get("kv_len", 0) * DTYPE_BYTES.get(dt if dt != "bool" else a["dtype"], 2))


def aux_law(graph: OpGraph, kernel, spec) -> KernelEstimate:
    """A library helper kernel: a stream over ``kernel.bytes`` (cuDNN's layout
    transforms, mask conversions) or, with no bytes, a tiny setup kernel at the floor."""
    a = graph.g.nodes[kernel.ops[0]]
    eff = spec.mem_efficiency if kernel.impl == "generated" else (spec.layout_transform_efficiency
                                                                   or spec.mem_efficiency)
    if kernel.variant == "sector_copy":   # bytes count a 32-byte sector per strided read (gpusim.lower.pad_mm)
        eff = 1.0
    if kernel.variant == "strided_copy":  # ATen's permuting copy of a strided tensor (a transposed read per element)
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
    if kernel.variant in BN_NHWC_CLASSES:
        mem = bn_nhwc_us(kernel.variant, kernel.bytes, a.get("shape"), spec) or mem
    if bn[0]:
        mem = bn_train_us(kernel.bytes, _bn_channels(a), bn[0], bn[1] or 0.0, spec)
    us = max(spec.kernel_min_us, spec.kernel_fixed_us + mem) if kernel.bytes else spec.kernel_min_us
    if kernel.variant == "mta_launch" and spec.mta_launch_us:
        us = spec.mta_launch_us     # a multi-tensor-apply op's further launch (training records: fit_train)
    if kernel.variant == "weight_transform" and spec.weight_transform_us:
        us = max(us, spec.weight_transform_us)
    c = conv_info(graph, kernel.ops[0]) if kernel.variant in TRANSFORMS else None
    if c and not c.get("backward"):     # a forward conv's transform, by its tiles (fit_layout)
        us = layout_transform_us(c, kernel.variant, spec) or us
    if kernel.variant == "lean_reduction":
        us = reduce_us(a, spec) or us     # cuDNN's split-KV sum (sdpa_decode sweep)
    return KernelEstimate(
        name=f"{kernel.ops[0]}:aux", ops=tuple(kernel.ops), op_types=(packet_name(a["op"]),),
        kind="copy", shape=a.get("shape") or (), flops=0.0, bytes_read=kernel.bytes / 2,
        bytes_read_l2=0.0, bytes_written=kernel.bytes / 2, mem_us=mem, compute_us=0.0,
        fixed_us=spec.kernel_fixed_us, us=us, bound="memory" if kernel.bytes else "latency",
        unit="fp32", role="aux", variant=kernel.variant)
