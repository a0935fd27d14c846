"""Hardware: GPU spec files (``hwspecs/*.toml``) loaded into a frozen, validated dataclass.

The device is data, not code: no ``if gpu == "a100"`` anywhere. Every figure says where it
came from, in the data: ``bandwidth_gbs = { value = 936.0, source = "datasheet", ref =
"..." }`` with source ``datasheet`` (document and table), ``measured`` (GPU, date, command
or record), ``derived`` (rule and inputs) or ``assumed`` (the assumption and its
uncertainty); the loader keeps it in ``GPUSpec.provenance``. Builtin specs must give it
for every figure; a user's own spec file may give plain numbers, which
load as source ``user`` (the user vouches for them; ``gpusim specs FILE`` shows which).
Kernel-class figures are fitted per GPU by calibration, or written into a datasheet spec as
``derived`` by a named rule (:data:`gpusim.hw.arch.SAME_ARCH_RULE`); a GPU without one is priced
by the class's neutral law (:func:`gpusim.cost.kernel.estimate_kernel`), never by a default
fitted on another GPU.
What differs by generation rather than by product lives in the architecture table
(``hwspecs/arch/``, :mod:`gpusim.hw.arch`); the host's figures live in host profiles (:mod:`gpusim.hw.host`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Mapping

from gpusim.hw.schema import (ALIASES, FRACTIONS, INTS, OPTIONAL_MODEL, OVER_PEAK, REQUIRED_UNITS, SECTIONS,
                              SOURCES, UNITS, USER_SOURCE, SpecError, builtin_dir, read_toml)
from gpusim.hw.spec_transformer import TransformerFigures


@dataclass(frozen=True)
class GPUSpec(TransformerFigures):
    name: str
    display_name: str
    source: str
    measured_on: str | None
    measured_date: str | None
    path: str
    bandwidth_gbs: float
    capacity_gib: float
    l2_mib: float
    sm_count: int
    boost_clock_mhz: float
    smem_per_sm_kib: float
    registers_per_sm: int
    peak_tflops: Mapping[str, float]
    mem_efficiency: float
    l2_bandwidth_gbs: float
    l2_resident_fraction: float
    kernel_fixed_us: float
    kernel_min_us: float
    cuda_core_efficiency: float
    matmul_efficiency: float
    matmul_tile_m: int
    matmul_tile_n: int
    aten_strided_efficiency: float = 1.0       # ATen elementwise with a broadcast/strided operand
    aten_strided_efficiency_16bit: float = 1.0  # same, 2-byte elements
    aten_reduction_efficiency: float = 1.0     # ATen reduce kernels (sum, amax, ...)
    aten_norm_efficiency: float = 1.0          # ATen layer/group/rms norm kernels
    aten_norm_efficiency_16bit: float = 1.0
    reduction_min_us: float | None = None      # floor of reduction/norm kernels
    gemm_min_us: float | None = None           # floor of library GEMM/conv kernels
    compute_capability: float | None = None    # [compute] e.g. 9.0: library defaults that differ by generation
    # Eager kernel classes (gpusim.lower.dispatch), fitted per GPU on its own sweeps (validation/fit/). None: the
    # class's neutral law (gpusim.cost.kernel.estimate_kernel); one GPU's figure is never another's default (issue
    # #21), though a datasheet spec may carry one derived by gpusim.hw.arch.SAME_ARCH_RULE, saying so in its ref.
    layout_transform_efficiency: float | None = None  # cuDNN nchwToNhwc/nhwcToNchw, of DRAM bandwidth
    bn_eval_efficiency: float | None = None     # eager eval batch norm, of DRAM bandwidth
    depthwise_aten_efficiency: float | None = None  # ATen NCHW depthwise conv, of fp32 CUDA-core peak
    # cuDNN depthwise kernels (channels-last; NCHW fp16 up to 5x5): fixed + per filter tap
    # + FLOPs over this fraction of the fp32 CUDA-core peak; fp32 and 16-bit apart
    depthwise_us: float | None = None
    depthwise_tap_us: float | None = None
    depthwise_efficiency: float | None = None
    depthwise_us_16bit: float | None = None
    depthwise_tap_us_16bit: float | None = None
    depthwise_efficiency_16bit: float | None = None
    weight_transform_us: float | None = None    # cuDNN's generic weight transform (grouped convs)
    layer_norm_row_ns: float | None = None      # ATen layer norm: time per row past the stream
    bn_plane_cycles: float | None = None        # eval batch norm (gpusim.cost.classes.bn_eval_law)
    bn_plane_element_cycles: float | None = None
    bn_nhwc_image_cycles: float | None = None
    bn_nhwc_min_us: float | None = None
    bn_cl_min_us: float | None = None
    layer_norm_row_ns_16bit: float | None = None
    # ViT's small ATen kernels (gpusim.cost.small_ops; validation/fit/fit_vit_small_ops.py on the
    # vit_small_ops sweep): gather fixed µs + ns per index (vectorized) or ps per element; the
    # layer-scale broadcast multiply's fixed µs + ps per element; the layer norm's floor by width
    gather_vec_us: float | None = None
    gather_vec_index_ns: float | None = None
    gather_elem_us: float | None = None
    gather_elem_ps: float | None = None
    bcast_mul_us: float | None = None
    bcast_mul_ps: float | None = None
    bcast_mul_us_16bit: float | None = None
    bcast_mul_ps_16bit: float | None = None
    layer_norm_floor_us: float | None = None
    layer_norm_floor_us_16bit: float | None = None
    layer_norm_floor_ch_ns: float | None = None
    matmul_align1_efficiency: float | None = None  # misaligned 16-bit GEMM (align1), of tensor peak
    attention_fp32_efficiency: float | None = None  # fp32 memory-efficient attention, of fp32 peak
    # ... by waves of key blocks (gpusim.cost.vit_kernels; validation/fit/fit_attention_fp32.py)
    attention_fp32_block_us: float | None = None
    attention_fp32_block_us_wide: float | None = None
    attention_fp32_ctas_per_sm: float | None = None
    attention_fp32_mask_factor: float | None = None
    # ViT patch embeddings (gpusim.cost.vit_kernels.patchify_us; validation/fit/fit_patchify.py)
    patchify_wave_us_16bit: float | None = None
    patchify_wave_tap_ns_16bit: float | None = None
    patchify_next_wave_16bit: float | None = None
    patchify_narrow_tap_ns_16bit: float | None = None
    patchify_narrow_ps_16bit: float | None = None
    patchify_tap_ns: float | None = None
    patchify_tflops: float | None = None
    bn_eval_efficiency_16bit: float | None = None  # 16-bit eval batch norm (ATen), of DRAM bandwidth
    conv_efficiency_scale: float | None = None  # cuDNN conv kernel time over a same-shape GEMM's
    # fp32 convolutions on CUDA cores (no TF32: Volta, Turing, or allow_tf32 off), dense
    # (groups == 1): nominal FLOPs over the fp32 peak
    conv_simt_efficiency: float | None = None
    mta_efficiency: float | None = None      # multi-tensor-apply (optimizer) streams
    # each further launch of a multi-tensor-apply op (a full table of tensors or blocks):
    # its own time, not the common floor (None: kernel_min_us)
    mta_launch_us: float | None = None
    # backward column sums (a gradient summed over its leading dim: ATen's reduce_kernel over the outer dims): a fixed
    # time of their own (column_sum_us, for kernel_fixed_us), the bytes at this fraction of the bandwidth (column_sum)
    column_sum_efficiency: float | None = None
    column_sum_us: float | None = None
    # backward kernels (gpusim.cost.kernel.BACKWARD_SCALES): time over the forward law's on the gradient's shapes: dense
    # convs' dgrad and wgrad (spatial: cuDNN; 1x1: mostly cuBLAS), fp32 and 16-bit; cuDNN's depthwise backward-data and
    # -filter; ATen's depthwise kernels by direction; fp32 matrix products of the backward
    conv_backward_scale: float | None = None
    conv_backward_scale_16bit: float | None = None
    conv_backward_scale_1x1: float | None = None
    conv_backward_scale_1x1_16bit: float | None = None
    depthwise_dgrad_scale: float | None = None
    depthwise_wgrad_scale: float | None = None
    depthwise_wgrad_scale_16bit: float | None = None
    depthwise_aten_dgrad_scale: float | None = None
    depthwise_aten_wgrad_scale: float | None = None
    gemm_backward_scale: float | None = None
    # large tensor-core GEMMs, of the tensor-core peak (gpusim.hw.arch.TENSOR_LOAD_RULE on
    # datasheet specs); None: matmul_efficiency, which then covers every unit
    matmul_tc_efficiency: float | None = None
    # training batch norm: cuDNN's bn_fw_tr / bn_bw, fp32 and 16-bit, and ATen's native bf16 kernels, forward and
    # backward; channels in waves over the SMs, each a fixed cost per channel (*_channel_us) and its planes at the
    # efficiency's share of the bandwidth (gpusim.cost.classes.bn_train_us)
    bn_train_efficiency: float | None = None
    bn_train_efficiency_16bit: float | None = None
    bn_backward_efficiency: float | None = None
    bn_backward_efficiency_16bit: float | None = None
    bn_native_train_efficiency: float | None = None
    bn_native_backward_efficiency: float | None = None
    bn_train_channel_us: float | None = None
    bn_train_channel_us_16bit: float | None = None
    bn_backward_channel_us: float | None = None
    bn_backward_channel_us_16bit: float | None = None
    bn_native_train_channel_us: float | None = None
    bn_native_backward_channel_us: float | None = None
    # channels-last training batch norm (gpusim.cost.classes.bn_nhwc_us): per kernel class a fixed
    # us, a fraction of the bandwidth and (ATen's kernels) us per row a thread walks
    bn_nhwc_fw_us: float | None = None
    bn_nhwc_fw_efficiency: float | None = None
    bn_nhwc_bw_us: float | None = None
    bn_nhwc_bw_efficiency: float | None = None
    bn_nhwc_stats_us: float | None = None
    bn_nhwc_stats_efficiency: float | None = None
    bn_nhwc_stats_iter_us: float | None = None
    bn_nhwc_transform_us: float | None = None
    bn_nhwc_transform_efficiency: float | None = None
    bn_nhwc_transform_iter_us: float | None = None
    bn_nhwc_reduce_us: float | None = None
    bn_nhwc_reduce_efficiency: float | None = None
    bn_nhwc_reduce_iter_us: float | None = None
    bn_nhwc_elemt_us: float | None = None
    bn_nhwc_elemt_efficiency: float | None = None
    bn_nhwc_elemt_iter_us: float | None = None
    # ATen elementwise paths (gpusim.cost.roofline.elementwise_fraction), of a copy's bandwidth:
    aten_cast_efficiency: float | None = None          # contiguous, an operand cast on the fly
    aten_strided_cast_efficiency: float | None = None  # broadcast/strided and a cast
    aten_permuted_efficiency: float | None = None      # an operand read across the output's layout
    aten_permuted_efficiency_16bit: float | None = None
    pool_output_rate: float | None = None       # ATen window pooling, NCHW: G outputs/s
    pool_output_rate_nhwc: float | None = None  # same, channels-last input
    # ATen's NCHW fp16 depthwise kernel (gpusim.cost.classes.depthwise_aten_us): G outputs/s and
    # G output-taps/s (an output's filter taps)
    depthwise_aten_output_rate_fp16: float | None = None
    depthwise_aten_tap_rate_fp16: float | None = None
    # cuDNN's NCHW fp16 depthwise kernels (gpusim.cost.classes.depthwise_nchw_us), picoseconds per
    # (plane x tap), per output and per (output x tap)
    depthwise_nchw_plane_tap_ps_fp16: float | None = None
    depthwise_nchw_output_ps_fp16: float | None = None
    depthwise_nchw_output_tap_ps_fp16: float | None = None
    conv_min_us: float | None = None            # floor of cuDNN conv kernels
    conv_stem_us: float | None = None           # stem conv (< 8 input channels): fixed time
    conv_stem_tflops: float | None = None       # stem conv: rate (TFLOP/s, absolute)
    matmul_align2_efficiency: float | None = None  # 16-bit GEMM with even but unaligned N/K
    gemm_eager_min_us: float | None = None      # floor of eager cuBLAS GEMMs
    gemm_mem_efficiency: float | None = None    # skinny eager GEMMs: weight stream, of bandwidth
    # skinny 16-bit cuBLAS GEMMs streaming weights back to back (no L2 flush): the stream's fixed
    # time (µs, on top of kernel_fixed_us) and its rate, of bandwidth; None: gemm_mem_efficiency
    gemm_stream_us: float | None = None
    gemm_stream_efficiency: float | None = None
    # ... and its floor for a product cuBLAS does not split: each output tile streams its K
    # columns serially, gemm_stream_k_us + K x gemm_stream_k_ns
    gemm_stream_k_us: float | None = None
    gemm_stream_k_ns: float | None = None
    # mid-size 16-bit cuBLAS GEMMs (more rows than a skinny stream, output tiles within one wave,
    # K unsplit): each tile's K loop adds gemm_kloop_us + K x gemm_kloop_ns to the compute time
    # (validation/fit/fit_gemm_kloop.py on the dispatch sweep); None: the plain roofline
    gemm_kloop_us: float | None = None
    gemm_kloop_ns: float | None = None
    # 1x1 conv run by cuBLAS over NCHW: fixed µs, fraction of bandwidth (fit_conv_gemm); None: conv law
    conv_gemm_us: float | None = None
    conv_gemm_efficiency: float | None = None
    # eval batch norm's cold-parameter µs inside a model (fit_chain); None: none
    bn_cold_us: float | None = None
    # a misaligned 16-bit 1x1 conv on cuBLAS's align2 / align1 kernels (fit_conv_align): fraction of peak, µs, µs a channel
    conv_align2_efficiency: float | None = None
    conv_align2_us: float | None = None
    conv_align2_k_us: float | None = None
    conv_align1_efficiency: float | None = None
    conv_align1_us: float | None = None
    conv_align1_k_us: float | None = None
    # a channels-last 3x3 / 4x4 stem conv (fit_stems): fixed µs and TFLOPS by dtype; direct: bf16 4x4/4 up to 160 px
    conv_stem_nhwc_fp32_us: float | None = None
    conv_stem_nhwc_fp32_tflops: float | None = None
    conv_stem_nhwc_fp16_us: float | None = None
    conv_stem_nhwc_fp16_tflops: float | None = None
    conv_stem_nhwc_bf16_us: float | None = None
    conv_stem_nhwc_bf16_tflops: float | None = None
    conv_stem_nhwc_direct_us: float | None = None
    conv_stem_nhwc_direct_tflops: float | None = None
    # ATen's reduce_kernel by its launch configuration (gpusim.cost.aten_reduce; fit_aten_reduce): fixed µs, DRAM
    # stream of bandwidth, serial-load latency from DRAM and L2 (ns), µs a wave, µs of a global pass
    aten_reduce_us: float | None = None
    aten_reduce_efficiency: float | None = None
    aten_reduce_load_ns: float | None = None
    aten_reduce_l2_load_ns: float | None = None
    aten_reduce_wave_us: float | None = None
    aten_reduce_global_us: float | None = None
    # cuDNN's NCHW<->NHWC transforms by their tiles (gpusim.cost.layout; fit_layout): fixed µs, tile
    # elements per second (G), DRAM stream past the L2-resident cap (fp32, 16-bit), of bandwidth;
    # None: the byte stream at layout_transform_efficiency
    layout_transform_us: float | None = None
    layout_transform_gelems: float | None = None
    layout_transform_dram_efficiency: float | None = None
    layout_transform_dram_efficiency_16bit: float | None = None
    # Inductor's Triton kernels (gpusim.cost.triton; validation/fit/fit_triton.py on the triton_bench sweep)
    triton_mem_efficiency: float | None = None   # pointwise / persistent streams, of DRAM bandwidth
    triton_red_efficiency: float | None = None   # looped reductions (triton_red_), of DRAM bandwidth
    triton_fixed_us: float | None = None
    triton_min_us: float | None = None
    triton_l2_bandwidth_gbs: float | None = None  # reading an intermediate written by the kernels before
    triton_erf_cycles: float | None = None       # SM cycles per element of one heavy op, by class
    triton_tanh_cycles: float | None = None
    triton_exp_cycles: float | None = None
    triton_sqrt_cycles: float | None = None
    triton_div_cycles: float | None = None
    # steady-state wall of a full stream over its profiled kernel sum (gaps between
    # kernels, clocks under sustained load); None: the kernel sum (factor 1)
    stream_busy_factor: float | None = None
    # the device's gap between consecutive kernels of a replayed CUDA graph (µs); None: the host
    # profile's cudagraph_kernel_us
    graph_kernel_gap_us: float | None = None
    # field (``peak_tflops.<unit>`` for a peak) -> (source, ref): where each figure came
    # from (:data:`SOURCES`; ``user`` for a plain number in a user's own spec file)
    provenance: Mapping[str, tuple[str, str]] = dataclasses.field(
        default_factory=lambda: MappingProxyType({}))

    @property
    def bandwidth(self) -> float:
        """Peak DRAM bandwidth, bytes/s."""
        return self.bandwidth_gbs * 1e9

    @property
    def l2_bytes(self) -> float:
        return self.l2_mib * 2**20

    @property
    def l2_bandwidth(self) -> float:
        return self.l2_bandwidth_gbs * 1e9

    def peak_flops(self, unit: str) -> float:
        """Peak FLOP/s of an execution unit (``fp32``, ``fp16_tc``, ...)."""
        if unit not in self.peak_tflops:
            raise SpecError(f"{self.name}: no peak for unit {unit!r} (has {', '.join(self.peak_tflops)})")
        return self.peak_tflops[unit] * 1e12

    def replace(self, **changes) -> "GPUSpec":
        if "peak_tflops" in changes:
            changes["peak_tflops"] = MappingProxyType(dict(changes["peak_tflops"]))
        if "provenance" in changes:
            changes["provenance"] = MappingProxyType(dict(changes["provenance"]))
        return dataclasses.replace(self, **changes)

    def figure(self, key: str):
        """A figure by provenance key (``bandwidth_gbs``, ``peak_tflops.fp32``)."""
        if key.startswith("peak_tflops."):
            return self.peak_tflops.get(key.split(".", 1)[1])
        return getattr(self, key)

    def __hash__(self):
        return hash((self.name, self.path, self.bandwidth_gbs, self.kernel_fixed_us))



def _num(path, section, key, v, integer=False):
    where = f"{path}: field [{section}].{key}" if section else f"{path}: field {key}"
    kind = "a positive"
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise SpecError(f"{where} must be {kind} number, got {v!r}; fix the spec file")
    if not math.isfinite(v) or v <= 0:
        raise SpecError(f"{where} must be {kind} number, got {v!r}; fix the spec file")
    if key in FRACTIONS and v > 1:
        raise SpecError(f"{where} is a fraction and must be in (0, 1], got {v!r}")
    if key in OVER_PEAK and v > OVER_PEAK[key]:
        raise SpecError(f"{where} must be in (0, {OVER_PEAK[key]}], got {v!r}")
    if integer:
        if int(v) != v:
            raise SpecError(f"{where} must be a whole number, got {v!r}")
        return int(v)
    return float(v)


def split_figure(raw: dict, where: str, sources, error=None) -> tuple:
    """``{ value = ..., source = ..., ref = ... }`` -> ``(value, source, ref)``: the one
    check of a figure's provenance, for GPU specs and host profiles alike (``error``: the
    file kind's exception; ``where``: file and field for the one-line message)."""
    error = error or SpecError
    if set(raw) - {"value", "source", "ref"} or "value" not in raw:
        raise error(f"{where} must be {{ value = ..., source = ..., ref = ... }}, "
                    f"got keys {sorted(raw)}")
    src, ref = raw.get("source"), raw.get("ref")
    if src not in sources:
        raise error(f"{where}: source must be one of {', '.join(sources)}, got {src!r}")
    if not isinstance(ref, str) or not ref.strip():
        raise error(f"{where}: ref must say where the figure came from (the machine and date "
                    "and command that measured it, the rule that derived it, or what was assumed)")
    return raw["value"], src, ref


def _figure(path, section, key, raw, prov: dict, pkey: str, builtin: bool, integer=False):
    """One figure: ``{ value = ..., source = ..., ref = ... }`` (its provenance goes into
    ``prov[pkey]``), or, in a user's own spec file, a plain number (source ``user``: the
    user vouches for it). Builtin specs must say where every figure came from."""
    where = f"{path}: field [{section}].{key}"
    if isinstance(raw, dict):
        raw, src, ref = split_figure(raw, where, SOURCES)
        prov[pkey] = (src, ref)
    elif builtin:
        raise SpecError(f"{where}: a builtin spec gives every figure as "
                        "{ value = ..., source = ..., ref = ... }")
    else:
        prov[pkey] = (USER_SOURCE, f"plain number in {path}")
    return _num(path, section, key, raw, integer)


def parse_spec(data: dict, path: str, builtin: bool = False) -> GPUSpec:
    """Validate a parsed TOML document and build a GPUSpec. ``builtin``: a file of
    ``hwspecs/``, which must give provenance for every figure."""
    for key in ("name", "display_name"):
        if not isinstance(data.get(key), str) or not data.get(key):
            raise SpecError(f"{path}: field {key} is missing or not a string; add it")
    source = data.get("source", "datasheet")
    if source not in ("datasheet", "measured"):
        raise SpecError(f"{path}: field source must be 'datasheet' or 'measured', got {source!r}")
    vals: dict = {}
    prov: dict = {}

    def fig(section, k, raw, pkey=None, integer=False):
        return _figure(path, section, k, raw, prov, pkey or k, builtin, integer)
    for section, keys in SECTIONS.items():
        sec = data.get(section)
        if not isinstance(sec, dict):
            raise SpecError(f"{path}: section [{section}] is missing; add it (see hwspecs/h100-sxm.toml)")
        for k in keys:
            if k not in sec:
                raise SpecError(f"{path}: field [{section}].{k} is missing; add it")
            vals[k] = fig(section, k, sec[k], integer=k in INTS)
    peaks = (data.get("compute") or {}).get("peak_tflops")
    if not isinstance(peaks, dict):
        raise SpecError(f"{path}: section [compute.peak_tflops] is missing; add it")
    for k in peaks:
        if k not in UNITS:
            raise SpecError(f"{path}: field [compute.peak_tflops].{k} is not a known unit "
                            f"({', '.join(UNITS)})")
    for k in REQUIRED_UNITS:
        if k not in peaks:
            raise SpecError(f"{path}: field [compute.peak_tflops].{k} is missing; add it")
    pk = {k: fig("compute.peak_tflops", k, v, f"peak_tflops.{k}") for k, v in peaks.items()}
    if "compute_capability" in data["compute"]:
        vals["compute_capability"] = fig("compute", "compute_capability",
                                         data["compute"]["compute_capability"])
    for k in OPTIONAL_MODEL:
        if k in data["model"]:
            vals[k] = fig("model", k, data["model"][k], integer=k in INTS)
    if vals["kernel_min_us"] <= 0:
        raise SpecError(f"{path}: field [model].kernel_min_us must be positive")
    return GPUSpec(name=data["name"], display_name=data["display_name"], source=source,
                   measured_on=data.get("measured_on"), measured_date=data.get("measured_date"),
                   path=str(path), peak_tflops=MappingProxyType(pk),
                   provenance=MappingProxyType(prov), **vals)



def _read(path: Path) -> GPUSpec:
    data = read_toml(path)
    builtin = path.resolve().parent == builtin_dir().resolve()
    spec = parse_spec(data, str(path), builtin=builtin)
    if builtin and spec.name != path.stem:
        raise SpecError(f"{path}: field name is {spec.name!r} but the file is {path.stem}.toml; "
                        "make them equal")
    return spec


@functools.lru_cache(maxsize=None)
def _builtin(name: str) -> GPUSpec:
    return _read(builtin_dir() / f"{name}.toml")


def canonical_names() -> list[str]:
    return sorted(p.stem for p in builtin_dir().glob("*.toml"))


def known_names() -> list[str]:
    return sorted(set(canonical_names()) | set(ALIASES))


def load_spec(name_or_path) -> GPUSpec:
    """A spec by canonical name, alias (case-insensitive) or path to a .toml file."""
    if isinstance(name_or_path, GPUSpec):
        return name_or_path
    s = str(name_or_path)
    if s.endswith(".toml") or "/" in s:
        p = Path(s)
        if not p.is_file():
            raise SpecError(f"spec file {s} does not exist")
        return _read(p)
    key = ALIASES.get(s.lower(), s.lower())
    if key not in canonical_names():
        raise SpecError(f"unknown GPU {s!r}; known: {', '.join(known_names())} "
                        "(or pass a path to a .toml spec file)")
    return _builtin(key)


def datasheet_name(gpu: str) -> str:
    """The canonical datasheet spec of a GPU name or alias: ``"h100"`` -> ``"h100-sxm"``."""
    return ALIASES.get(gpu.lower(), gpu.lower())


def calibrated_name(gpu: str) -> str | None:
    """The spec ``gpusim calibrate`` measured for this GPU (``<datasheet>-calibrated``),
    or None when no such spec has been committed."""
    name = datasheet_name(gpu)
    name = name if name.endswith("-calibrated") else f"{name}-calibrated"
    return name if name in canonical_names() else None


def spec_for(gpu: str, calibrated: bool = True) -> GPUSpec:
    """The spec to predict ``gpu`` with: its calibrated spec when asked for and one
    exists, else its datasheet spec. The one GPU-name -> spec resolution."""
    name = calibrated_name(gpu) if calibrated else None
    return load_spec(name or datasheet_name(gpu))


def transfer_spec(source: GPUSpec, target_gpu: str) -> GPUSpec:
    """Predict a GPU no calibration has seen: ``source``'s fitted model figures with
    ``target_gpu``'s datasheet memory system and compute peaks (its L2 bandwidth stays
    ``source``'s: no datasheet gives it); the memory-bound classes' fractions carried by
    the bandwidth-latency rule (:func:`gpusim.hw.arch.carried_fractions`), not copied; figures ``source``
    derived from ``target_gpu``'s own calibration are dropped (the class's neutral law)."""
    ds = load_spec(datasheet_name(target_gpu))
    taken = ("bandwidth_gbs", "l2_mib", "capacity_gib", "sm_count", "boost_clock_mhz",
             "compute_capability")
    prov = {k: v for k, v in source.provenance.items() if not k.startswith("peak_tflops.")}
    prov.update({k: v for k, v in ds.provenance.items()
                 if k in taken or k.startswith("peak_tflops.")})
    from gpusim.hw.arch import BANDWIDTH_LATENCY_RULE, carried_fractions
    # figures the source carries from the target's own calibration (validation/fit/carry_decode.py) go back to
    # the neutral law: predicting the target from the source must not read the target's measurements
    own = {k: None for k, (src, ref) in source.provenance.items()
           if src == "derived" and f"{ds.name}-calibrated" in ref and hasattr(source, k)}
    prov = {k: v for k, v in prov.items() if k not in own}
    out = source.replace(name=f"{source.name}-as-{ds.name}", provenance=prov,
                         peak_tflops=ds.peak_tflops, **{k: getattr(ds, k) for k in taken}, **own)
    # the memory-bound classes' fractions by the bandwidth-latency rule, as a datasheet
    # spec's are derived (validation/fit/derive_specs.py), from the source's constants alone
    carried = carried_fractions(source, out)
    ref = f"{BANDWIDTH_LATENCY_RULE} (gpusim.hw.arch) from {source.name}'s fraction"
    return out.replace(provenance={**out.provenance, **{f: ("derived", ref) for f in carried}},
                       **carried)


def list_specs() -> list[GPUSpec]:
    return [load_spec(n) for n in canonical_names()]


