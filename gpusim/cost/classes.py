"""The formulas of the eager kernel classes, shared by their laws (:mod:`gpusim.cost.laws`) and by the
lab's fits: batch-norm waves and planes, depthwise and pooling rates, layer norm's per-row cost,
multi-tensor-apply bytes. Each reads the spec figures it names; a GPU without one gets None."""

from __future__ import annotations

import math

from gpusim.graph.opgraph import (DTYPE_BYTES, HALF_DTYPES, OpGraph, main_shape,
                                  numel)
from gpusim.graph.ops import packet_name



def mta_bytes(a: dict) -> float:
    """A multi-tensor-apply op's bytes: its node's reads and writes (in-place lists
    included)."""
    return float(a.get("bytes_read") or 0.0) + float(a.get("bytes_written") or 0.0)


#: training batch-norm kernel classes (gpusim.lower.dispatch_train.batch_norm_train_kernels): forward
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


def conv_align_law(x):
    """A 16-bit 1x1 convolution over NCHW on a misaligned map, which cuBLAS runs with its align2 /
    align1 CUTLASS kernels as one GEMM per image (Cout x H*W, K = Cin): ``conv_{v}_us`` + the longer
    of its FLOPs at ``conv_{v}_efficiency`` of the tensor peak and its K loop, ``conv_{v}_k_us`` per
    input channel (a grid of few tiles runs each tile's whole K loop in turn); floor
    ``kernel_min_us`` (validation/fit/fit_conv_align.py on the cnn_dispatch sweeps' points). ``x``:
    the law input of :mod:`gpusim.cost.laws` (its GEMM law hands these kernels here)."""
    from gpusim.cost.roofline import unit_for
    from gpusim.lower.conv import conv_info
    a, spec, v = x.a, x.spec, x.kernel.variant
    eff, fixed, k_us = (getattr(spec, f"conv_{v}_{f}") for f in ("efficiency", "us", "k_us"))
    unit = unit_for(a["kind"], a["dtype"], spec, x.opts)
    cin = conv_info(x.graph, x.kernel.ops[0])["Cin"]
    comp = max(a["flops"] / (spec.peak_flops(unit) * eff) * 1e6, cin * (k_us or 0.0))
    return x.retimed(x.est.mem_us, (fixed or spec.kernel_fixed_us) - spec.kernel_fixed_us + comp, spec.kernel_min_us)


#: output channels a channels-last stem kernel computes at once: cuDNN's NHWC kernels take as long for 16,
#: 24 or 32 channels, and for 40 as for 64 (cnn_stems sweep; the law's error 10.1% -> 6.7% fp16, 16.0% -> 10.5% bf16)
STEM_COUT_TILE = 32
STEM_DTYPES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}
#: the largest map on which a bf16 4x4/4 stem whose output channels are not a multiple of 64 runs cuDNN's
#: grouped direct kernel (~1.7 TFLOP/s: ConvNeXt-V2's 123 us at batch 16): 96-160 px in the cnn_stems sweeps,
#: an implicit GEMM from 192 px (the class's ``direct`` figures)
STEM_DIRECT_MAX_PX = 160


def stem_direct(c: dict) -> bool:
    """Whether a channels-last stem (:func:`gpusim.lower.conv.conv_info` facts) runs cuDNN's grouped direct kernel."""
    return (c["dtype"] == "bfloat16" and c["kh"] == 4 and c["Ho"] * 4 == c["H"] and c["H"] <= STEM_DIRECT_MAX_PX
            and c["Cout"] % 64 != 0)


def stem_nhwc_law(x, conv_law):
    """A channels-last stem's estimate (:func:`stem_nhwc_us`; floor ``kernel_min_us``: the law has its own fixed
    cost); without the figures, ``conv_law`` (the class it had).
    ``x``: the law input of :mod:`gpusim.cost.laws`."""
    spec, n = x.spec, x.kernel.ops[0]
    t = stem_nhwc_us(x.graph, n, spec)
    if t is None:
        return conv_law(x)
    return x.retimed(x.est.mem_us, t - spec.kernel_fixed_us, spec.kernel_min_us)


def stem_nhwc_us(graph: OpGraph, n: str, spec) -> float | None:
    """A channels-last stem convolution (``conv_stem_nhwc``: 3x3 or 4x4 over fewer than 8 input channels):
    ``conv_stem_nhwc_{dtype}_us`` + its FLOPs, output channels rounded up to :data:`STEM_COUT_TILE`, at
    ``conv_stem_nhwc_{dtype}_tflops`` (validation/fit/fit_stems.py on the cnn_stems sweeps); cuDNN's direct kernel
    (:func:`stem_direct`) by ``conv_stem_nhwc_direct_*`` on its true FLOPs; None without the figures (the caller
    keeps its law)."""
    from gpusim.lower.conv import conv_info
    c = conv_info(graph, n)
    dt = STEM_DTYPES.get(c["dtype"]) if c else None
    if dt is None:
        return None
    direct = stem_direct(c) and spec.conv_stem_nhwc_direct_tflops
    fixed, tflops = (getattr(spec, f"conv_stem_nhwc_{'direct' if direct else dt}_{f}") for f in ("us", "tflops"))
    if not tflops:
        return None
    cout = c["Cout"]
    tile = 1 if direct else STEM_COUT_TILE
    flops = graph.g.nodes[n]["flops"] * math.ceil(cout / tile) * tile / cout
    return (fixed or 0.0) + flops / (tflops * 1e12) * 1e6


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
    (:func:`gpusim.lower.conv.conv_layout`: NCHW in, NCHW out); None when neither tells."""
    a = graph.g.nodes[n]
    if a.get("input_contiguous") is not None:
        return a["input_contiguous"]
    ins = list(a.get("inputs") or a.get("reads") or [])
    p = graph.g.nodes[ins[0]] if ins and ins[0] in graph.g else None
    if p is None or p.get("kind") != "conv":
        return None
    from gpusim.lower.conv import conv_layout
    return conv_layout(graph, ins[0]) == "nchw"


def bn_eval_law(a: dict, contiguous: bool | None, spec) -> tuple[float, float] | None:
    """Eval batch norm's time as its kernels' own parallelism bounds it (``bn`` sweep,
    ``validation/fit/fit_bn.py``): ``(us, floor_us)``, or None where the GPU has no fitted
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
    from gpusim.lower.conv import conv_info
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


#: channels-last training batch-norm kernel classes (gpusim.lower.dispatch_train.batch_norm_nhwc_kernels):
#: cuDNN's ``batchnorm_fwtr/bwtr_nhwc_semiPersist`` (fp32; fp16 with fp32 parameters) and ATen's
#: channels-last kernels (Normalization.cuh, 16-bit): the statistics, the input transform, the
#: backward reduce and the backward elementwise kernel
BN_NHWC_CLASSES = ("bn_nhwc_fw", "bn_nhwc_bw", "bn_nhwc_stats", "bn_nhwc_transform",
                   "bn_nhwc_reduce", "bn_nhwc_elemt")
def bn_nhwc_iters(reduction: int, channels: int, cls: str) -> int:
    """Rows one thread of a channels-last ATen batch-norm kernel walks in series (cuDNN's
    classes: 0). H100 bn_train sweep: 8 x 256 x 14 x 14 statistics take 46 us for 0.8 MB (98
    rows a thread, one block row of 16 per channel) where 8 x 256 x 56 x 56 take 28 us for
    12.8 MB (16 rows a thread over 98 grid rows)."""
    if cls in ("bn_nhwc_fw", "bn_nhwc_bw"):
        return 0
    from gpusim.lower.dispatch_train import bn_nhwc_grid
    by, gy = bn_nhwc_grid(reduction, channels, cls in ("bn_nhwc_stats", "bn_nhwc_reduce"))
    return math.ceil(reduction / (by * gy))


def bn_nhwc_us(cls: str, nbytes: float, shape, spec) -> float | None:
    """A channels-last training batch-norm kernel's time past nothing: ``bn_nhwc_<c>_us`` fixed,
    its bytes at ``bn_nhwc_<c>_efficiency`` of the bandwidth, ``bn_nhwc_<c>_iter_us`` per row
    a thread walks (:func:`bn_nhwc_iters`); None where the GPU has no such figures
    (validation/fit/fit_bn_nhwc.py fits them on the ``bn_train`` sweep)."""
    c = cls.removeprefix("bn_nhwc_")
    eff = getattr(spec, f"bn_nhwc_{c}_efficiency", None)
    if not eff:
        return None
    shape = main_shape(shape)
    ch = shape[1] if len(shape) >= 2 else 1
    red = max(1, numel(shape) // max(1, ch))
    it = getattr(spec, f"bn_nhwc_{c}_iter_us", None) or 0.0
    return (getattr(spec, f"bn_nhwc_{c}_us", None) or 0.0) + nbytes / (eff * spec.bandwidth) * 1e6 \
        + it * bn_nhwc_iters(red, ch, cls)
