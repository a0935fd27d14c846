"""Eager dispatch of a training step's backward and normalisation ops: the kernels autograd's backward ops launch (cuDNN backward-data and backward-filter convolutions, column sums, training batch norm), read off the profiler's kernel lists of the training records (:func:`training_kernels`; the forward ops are :mod:`gpusim.lower.dispatch`)."""

from __future__ import annotations
import math
from dataclasses import replace
from gpusim.graph.opgraph import OpGraph, main_shape, numel
from gpusim.graph.ops import packet_name
from gpusim.lower.conv import conv_info, conv_kernels
from gpusim.util.ints import last_pow2


def training_kernels(graph: OpGraph, n: str, spec, Kernel) -> list | None:
    """The kernels of a backward or optimizer op (:mod:`gpusim.capture.train`), None for others.

    * ``_foreach_*`` / ``_fused_*``: multi-tensor-apply launches
      (:func:`gpusim.graph.train_ops.mta_launches`) with the 4 KB kernel-argument tables, as the
      H100 training records launch them (torch 2.11: ResNet-50's AdamW step 26 kernels, SGD
      9, where the 32 KB tables would give 8 and 3); the first launch (class ``mta``)
      carries the op's bytes at ``mta_efficiency`` of the bandwidth, the others
      (``mta_launch``) at ``mta_launch_us`` each (a full table's tensors or blocks: more than
      the common floor; without the figure, the floor).
    * ``convolution_backward`` (one gradient per node after capture's split): cuDNN's
      backward-data or backward-filter kernel with the forward conv's layout kernels
      (:func:`conv_kernels` on the forward's shapes, :func:`_conv_backward_info`), priced by
      the forward conv law (class ``conv``) on its own implicit GEMM. The H100 ResNet-50
      fp32 training records have 72 ``nchwToNhwc`` and 31 ``nhwcToNchw`` kernels in
      backward where this rule gives 78 and 38; the backward kernels' efficiency is the
      forward's, ASSUMED (no fitted backward class yet).
    * ``native_layer_norm_backward``: the input gradient and the weight/bias column sums
      (``GammaBetaBackward``), two kernels.
    * ``embedding_dense_backward``: the indices sorted (a radix sort) and the gradient table
      zeroed before the segmented scatter-add: three kernels (ATen's
      ``embedding_backward_cuda_kernel`` runs a few more small ones).
    * ``nll_loss_backward``: the gradient zeroed, then the target column written.
    * a backward ``sum`` over the leading dim (:func:`column_sum`: bias and layer-scale
      gradients): class ``column_sum``."""
    a = graph.g.nodes[n]
    fe = a.get("foreach")
    if fe:
        from gpusim.graph.train_ops import mta_launches
        k = mta_launches(fe["numels"], fe["depth"], fe["scalarlist"])
        return [Kernel((n,), "aten", variant="mta")] + [
            Kernel((n,), "aten", role="aux", bytes=0.0, variant="mta_launch") for _ in range(max(0, k - 1))]
    name = packet_name(a["op"])
    if name == "convolution_backward":
        return conv_backward_kernels(graph, n, spec, Kernel)
    if name in BATCH_NORM_BACKWARD:
        if batch_norm_nhwc(graph, n):
            return batch_norm_nhwc_kernels(graph, n, Kernel, backward=True)
        return [Kernel((n,), "library" if cudnn_batch_norm(graph, n) else "aten", variant="bn_backward")]
    if name == "native_layer_norm_backward":
        return [Kernel((n,), "library"),
                Kernel((n,), "library", role="aux", bytes=float(a["bytes_read"]) / 2)]
    if name == "embedding_dense_backward":
        idx = sum(b for p, b in a["reads"].items() if graph.g.nodes[p]["dtype"] in ("int64", "int32"))
        return [Kernel((n,), "aten", role="aux", bytes=4.0 * idx),
                Kernel((n,), "aten", role="aux", bytes=a["bytes_written"] / 2), Kernel((n,), "aten")]
    if name == "nll_loss_backward":
        return [Kernel((n,), "aten", role="aux", bytes=a["bytes_written"]), Kernel((n,), "aten")]
    if name == "sum" and a.get("phase") == "backward" and column_sum(graph, n):
        return [Kernel((n,), "aten", variant="column_sum")]
    return None


def column_sum(graph: OpGraph, n: str) -> bool:
    """Whether reduction node ``n`` sums over its input's leading dim, keeping others
    (``[tokens, features] -> [features]``, ``[N, C, H, W] -> [C]``): ATen's
    ``reduce_kernel`` then reduces across rows (an outer reduction), not along contiguous
    rows. Autograd's bias and layer-scale gradients are such sums (H100 training records:
    BERT-base's bf16 bias gradients over 1,024 tokens take 7-10 us a kernel where a stream
    of their bytes takes 1-2 us; each runs ``reduce_kernel<128, 4>``, the row sums
    ``reduce_kernel<512, 1>``)."""
    a = graph.g.nodes[n]
    ins = list(a.get("inputs") or a["reads"])
    if not ins or ins[0] not in graph.g:
        return False
    x = list(main_shape(graph.g.nodes[ins[0]].get("shape")))
    out = list(main_shape(a.get("shape")))
    kept = [d for d in out if d != 1]
    if not kept or len(x) < 2 or x[0] == 1:
        return False
    if len(out) == len(x):          # keepdim: the leading dim reduced to 1
        return out[0] == 1
    return kept != x[:len(kept)]


def conv_backward_kernels(graph: OpGraph, n: str, spec, Kernel) -> list:
    """:func:`conv_kernels` of a backward convolution node, its cuDNN kernel in the class of
    its direction: ``conv_dgrad`` (backward-data) or ``conv_wgrad`` (backward-filter), priced
    as the forward conv law times the direction's scale (:func:`gpusim.cost.kernel.estimate_kernel`);
    stems and depthwise convolutions keep their forward classes."""
    ks = conv_kernels(graph, n, spec, Kernel)
    c = conv_info(graph, n)
    if c is None or not c.get("backward"):
        return ks
    v = "conv_dgrad" if c["backward"] == "data" else "conv_wgrad"
    return [replace(k, variant=v) if k.role == "main" and k.variant == "conv" else k for k in ks]


#: training-mode batch norm (batch statistics; capture's :func:`gpusim.capture.train_fx.cuda_batch_norm`)
#: and the batch-norm backward ops
BATCH_NORM_TRAIN = ("cudnn_batch_norm",)


BATCH_NORM_BACKWARD = ("native_batch_norm_backward", "cudnn_batch_norm_backward")


def cudnn_batch_norm(graph: OpGraph, n: str) -> bool:
    """Whether PyTorch runs batch-norm node ``n`` (training forward or backward) on cuDNN:
    not for bfloat16, nor for float16 with float16 parameters (ATen's
    ``_select_batch_norm_backend``: cuDNN takes fp32, and fp16 input with fp32 parameters,
    as autocast leaves them); ATen's native kernels otherwise."""
    a = graph.g.nodes[n]
    if a["dtype"] == "bfloat16":
        return False
    if a["dtype"] != "float16":
        return True
    ins = list(a.get("inputs") or a["reads"])
    # forward (input, weight, ...); backward (grad_out, input, weight, ...)
    w = ins[2] if packet_name(a["op"]) in BATCH_NORM_BACKWARD else ins[1] if len(ins) > 1 else None
    return w is None or w not in graph.g or graph.g.nodes[w].get("dtype") == "float32"


def batch_norm_train_kernels(graph: OpGraph, n: str, Kernel) -> list:
    """A training-mode batch norm: cuDNN's one ``bn_fw_tr`` kernel (statistics, running
    averages and the normalised output), class ``bn_train``; ATen's native path (bf16)
    runs three (H100 AMP training records: ``batch_norm_collect_statistics_kernel`` reading
    the input, the running averages' multi-output elementwise kernel over the channels,
    ``batch_norm_transform_input_kernel``): the statistics pass an ``aux`` kernel of the
    class over the input's bytes, the running averages a launch."""
    a = graph.g.nodes[n]
    if batch_norm_nhwc(graph, n):
        return batch_norm_nhwc_kernels(graph, n, Kernel, backward=False)
    if cudnn_batch_norm(graph, n):
        return [Kernel((n,), "library", variant="bn_train")]
    ins = list(a.get("inputs") or a["reads"])
    xb = float(a["reads"].get(ins[0], 0.0)) if ins else 0.0
    return [Kernel((n,), "aten", role="aux", bytes=xb, variant="bn_train"),
            Kernel((n,), "aten", role="aux", bytes=0.0, variant="bn_train"),
            Kernel((n,), "aten", variant="bn_train")]


def batch_norm_nhwc(graph: OpGraph, n: str) -> bool:
    """Whether training batch norm ``n`` (forward or backward) runs channels-last: a CUDA trace's
    non-contiguous input, or (meta traces keep a conv's output contiguous) its input, the
    backward's saved input, written by a channels-last convolution
    (:func:`gpusim.lower.conv.conv_layout`)."""
    a = graph.g.nodes[n]
    if a.get("input_contiguous") is not None:
        return a["input_contiguous"] is False
    ins = list(a.get("inputs") or a["reads"])
    x = ins[1 if packet_name(a["op"]) in BATCH_NORM_BACKWARD else 0] if ins else None
    if x is None or x not in graph.g or graph.g.nodes[x].get("kind") != "conv":
        return False
    from gpusim.lower.conv import conv_layout
    return conv_layout(graph, x) != "nchw"


def batch_norm_nhwc_kernels(graph: OpGraph, n: str, Kernel, backward: bool) -> list:
    """A channels-last training batch norm's kernels, as the H100 ``bn_train`` sweep's profiler
    lists them (validation/results/h100/bn_train.json). cuDNN (fp32; fp16 with fp32
    parameters): one ``batchnorm_fwtr_nhwc_semiPersist`` or ``batchnorm_bwtr_nhwc_semiPersist``.
    ATen (16-bit, Normalization.cuh): forward the statistics
    (``batch_norm_collect_statistics_channels_last_kernel``, reading the input), the running
    averages' elementwise launch and ``batch_norm_transform_input_channels_last_kernel``;
    backward ``batch_norm_backward_reduce_channels_last_kernel`` (reading the input and the
    gradient) and ``batch_norm_backward_elemt_channels_last_kernel``; a reduction over 8 or
    more grid rows first zeroes its semaphores (a fill launch)."""
    a = graph.g.nodes[n]
    lib = cudnn_batch_norm(graph, n)
    if lib:
        return [Kernel((n,), "library", variant="bn_nhwc_bw" if backward else "bn_nhwc_fw")]
    ins = list(a.get("inputs") or a["reads"])
    x = ins[1 if backward else 0] if ins else None
    xb = float(a["reads"].get(x, 0.0)) if x is not None else 0.0
    shape = main_shape(graph.g.nodes[x].get("shape")) if x in graph.g else ()
    ch = shape[1] if len(shape) >= 2 else 1
    red = max(1, numel(shape) // max(1, ch))
    fill = [Kernel((n,), "aten", role="aux", bytes=0.0)] if bn_nhwc_grid(red, ch, True)[1] > 1 else []
    if backward:
        return fill + [Kernel((n,), "aten", role="aux", bytes=2 * xb, variant="bn_nhwc_reduce"),
                       Kernel((n,), "aten", variant="bn_nhwc_elemt")]
    return fill + [Kernel((n,), "aten", role="aux", bytes=xb, variant="bn_nhwc_stats"),
                   Kernel((n,), "aten", role="aux", bytes=0.0),
                   Kernel((n,), "aten", variant="bn_nhwc_transform")]



def bn_nhwc_grid(reduction: int, channels: int, coop: bool) -> tuple[int, int]:
    """ATen's ``flexible_launch_configs`` for a channels-last batch-norm kernel over
    ``reduction`` = N x H x W rows of ``channels``: (block rows, grid rows). Blocks of 512
    threads, at most 32 channels wide, at least 16 rows a thread, at most 128 grid rows; a
    cooperative (grid) reduction only from 8 grid rows (``coop``: the statistics and the
    backward reduce, which then zero a semaphore array first)."""
    bx = min(last_pow2(channels), 32)
    by = min(last_pow2(math.ceil(reduction / 16)), 512 // bx)
    gy = min(math.ceil(reduction / (by * 16)), 128)
    return by, (1 if coop and gy < 8 else gy)
