"""Inductor's reduction rules: whether a reduction runs in one kernel or is split in two
(partial reductions, then a kernel that reduces the partials), and whether a kernel is a
*persistent* reduction (the whole row in registers, ``triton_per_``) or a looped one
(``triton_red_``).

Read from ``torch/_inductor`` (``ir.py``: ``Reduction.num_splits``, ``Reduction.create``;
``choices.py``: ``reduction_split_factor``, ``should_use_persistent_reduction``;
``codegen/simd_kernel_features.py``: ``reduction_hint``; PyTorch 2.5-2.14, sm < 100) and
checked against the profiler's kernel lists of compiled records (``python3 -m
validation.score.inductor_classes``):

1. **Inner or outer.** A reduction is *inner* when it reduces the tensor's innermost
   (stride-1) dimension, *outer* otherwise (a sum over the rows of a matrix; a spatial
   mean of a channels-last activation, whose channels are innermost).
2. **Split.** Only reductions with few outputs split, ``numel < 2 x 32 x SMs``, and only
   over more than 32 elements. An inner one splits only if it also has fewer than
   ``2 x SMs`` outputs and reduces more than 8192 elements; an outer one splits whenever
   the split factor of ``reduction_split_factor`` (partials of ``4 x split_size``
   elements per block) exceeds one. A global reduction to one element splits by the
   inner rule.
3. **Persistent.** A kernel is persistent when its reduction length is at most 1024 for
   an inner reduction, 64 for an outer one; a split reduction's second stage reduces
   ``split`` partials per output, a persistent inner reduction.
"""

from __future__ import annotations

from functools import lru_cache

from gpusim.graph.opgraph import OpGraph, main_shape, numel
from gpusim.graph.ops import packet_name
from gpusim.hw.arch import arch_of
from gpusim.lower.conv import conv_info
from gpusim.lower.layout import inductor_layout_opt

MIN_ELEMENTS_PER_THREAD = 32     # ir.Reduction.num_splits; choices: the warp size
MAX_ELEMENTS_PER_THREAD = 512    # choices.reduction_split_factor
SPLIT_THREADS = 8 * 32           # choices.reduction_split_factor: num_warps x warp size
INNER_NO_SPLIT = 8192            # choices._inner_reduction_no_split_threshold (sm < 100)
OUTER_RVALS_PER_THREAD = 4       # choices.reduction_split_factor, outer
OUTER_XBLOCK = 128               # choices.reduction_split_factor, outer
PERSISTENT_INNER = 1024          # choices.should_use_persistent_reduction, INNER hint
PERSISTENT_OUTER = 64            # ... any other hint
DEFAULT_THREADS_PER_SM = 2048    # choices.reduction_split_factor's fallback
#: full-size row reductions (output shaped as the input): they reduce the last dimension
ROW_OPS = frozenset({"softmax", "_softmax", "log_softmax", "_log_softmax", "_safe_softmax",
                     "layer_norm", "native_layer_norm", "rms_norm", "_fused_rms_norm"})

#: ops eager PyTorch runs as one ``reduce_kernel`` (an adaptive average pool only to one element a plane: ATen
#: computes it as ``mean`` over the map)
REDUCE_OPS = frozenset({"sum", "mean", "amax", "amin", "max", "min", "prod", "linalg_vector_norm", "norm", "any",
                        "all", "argmax", "argmin"})
GLOBAL_POOLS = frozenset({"adaptive_avg_pool2d", "_adaptive_avg_pool2d", "adaptive_avg_pool1d",
                          "adaptive_avg_pool3d", "_adaptive_avg_pool3d"})


def aten_reduce(graph: OpGraph, n: str) -> bool:
    """Whether eager runs node ``n`` as ATen's one ``reduce_kernel`` (class ``aten_reduce``,
    :mod:`gpusim.cost.aten_reduce`): a reduction op, or an adaptive average pool to one element a plane."""
    a = graph.g.nodes[n]
    name = packet_name(a.get("op", ""))
    if name in GLOBAL_POOLS:
        return all(s == 1 for s in main_shape(a.get("shape"))[2:])
    return name in REDUCE_OPS and a.get("kind") == "reduction"


#: kinds an activation passes through keeping its layout (elementwise ops, casts, an eval dropout)
LAYOUT_KEEPING = ("pointwise", "copy", "view")


def nhwc_on_gpu(graph: OpGraph, n: str, hops: int = 8) -> bool:
    """Whether the 4-D activation node ``n`` is channels-last on the GPU although a meta trace left it NCHW: its
    producer chain (same-shape elementwise ops) starts at a convolution cuDNN ran NHWC (ConvNeXt-V2's 1x1
    convolutions of a permuted layer norm's output), whose output cuDNN writes channels-last."""
    shape = main_shape(graph.g.nodes[n].get("shape"))
    if len(shape) != 4:
        return False
    for _ in range(hops):
        a = graph.g.nodes[n]
        if a["kind"] == "conv":
            c = conv_info(graph, n)
            return c is not None and c["layout"] != "nchw"
        if a["kind"] not in LAYOUT_KEEPING or main_shape(a.get("shape")) != shape:
            return False
        srcs = [p for p in a.get("inputs") or () if p in graph.g and main_shape(graph.g.nodes[p].get("shape")) == shape]
        if not srcs:
            return False
        n = srcs[0]
    return False

def channels_last(graph: OpGraph, nodes=None) -> bool:
    """Whether the 4-D activations of this compiled graph are channels-last: Inductor's
    layout optimisation chose it, or the model was captured channels-last."""
    if inductor_layout_opt(graph, nodes):
        return True
    for n in graph.compute_nodes if nodes is None else nodes:
        if graph.g.nodes[n]["kind"] == "conv":
            c = conv_info(graph, n)
            if c is not None and c["layout"] != "nchw":
                return True
    return False


def _input_shape(graph: OpGraph, n: str) -> tuple:
    shapes = [main_shape(graph.g.nodes[p]["shape"]) for p in graph.g.nodes[n]["reads"]]
    return max(shapes, key=numel, default=())


def reduced_dims(in_shape: tuple, out_shape: tuple) -> list[int]:
    """The input dimensions a reduction folds: size-1 in a same-rank (keepdim) output, or
    missing from a lower-rank one (its dimensions other than 1 matched in order)."""
    if len(out_shape) == len(in_shape):
        return [i for i, (a, b) in enumerate(zip(in_shape, out_shape)) if b == 1 and a != 1]
    kept = [d for d in out_shape if d != 1]          # (1, 384) from (8, 197, 384): 384 kept
    out, j = [], 0
    for i, a in enumerate(in_shape):
        if j < len(kept) and kept[j] == a:
            j += 1
        elif a != 1:
            out.append(i)
    return out


def is_inner(graph: OpGraph, n: str, nhwc: bool = False) -> bool:
    """Rule 1: whether reduction ``n`` reduces its input's innermost dimension (``nhwc``:
    4-D activations are channels-last, so a reduction over H and W keeps the innermost
    dimension, the channels; a tensor permuted to (N, H, W, C) has C innermost already)."""
    a = graph.g.nodes[n]
    if packet_name(a["op"]) in ROW_OPS:
        return True
    ins, out = _input_shape(graph, n), main_shape(a["shape"])
    dims = reduced_dims(ins, out)
    if not dims or len(ins) < 2:
        return True
    if nhwc and len(ins) == 4 and set(dims) == {2, 3} and ins[1] > 1:
        return False         # a spatial reduction of an NCHW-shaped, channels-last activation
    inner = max((i for i, d in enumerate(ins) if d > 1), default=len(ins) - 1)
    return inner in dims     # the innermost dimension with more than one element


def row_numel(graph: OpGraph, n: str) -> int:
    """Elements reduced per output: the last dimension for a full-size row reduction
    (softmax, layer norm), else the input's elements over the output's."""
    a = graph.g.nodes[n]
    out = main_shape(a["shape"])
    if packet_name(a["op"]) in ROW_OPS:
        return int(out[-1]) if out else 1
    return max(1, numel(_input_shape(graph, n)) // max(1, numel(out)))


@lru_cache(maxsize=4096)
def _closest_divisor(r: int, target: int) -> int:
    best = 1
    d = 1
    while d * d <= r:
        if r % d == 0:
            for x in (d, r // d):
                if abs(x - target) < abs(best - target):
                    best = x
        d += 1
    return best


def _threads_per_sm(spec) -> int:
    a = arch_of(spec)
    return int(a.max_threads_per_sm) if a is not None else DEFAULT_THREADS_PER_SM


def split_factor(out_numel: int, r: int, inner: bool, spec) -> int:
    """Rule 2: the number of partial reductions Inductor splits a reduction of ``r``
    elements into each of ``out_numel`` outputs (1: no split)."""
    sm, tps = spec.sm_count, _threads_per_sm(spec)
    if out_numel != 1 and (r <= MIN_ELEMENTS_PER_THREAD or out_numel >= 2 * 32 * sm):
        return 1
    lo = MIN_ELEMENTS_PER_THREAD * sm * tps          # elements per device, min and max
    hi = MAX_ELEMENTS_PER_THREAD * sm * tps
    work = r * out_numel
    if inner or out_numel == 1:
        if out_numel >= 2 * sm or r <= INNER_NO_SPLIT:
            return 1
        if work <= lo:
            size = MIN_ELEMENTS_PER_THREAD
        elif work < hi:
            per_out = -(-(sm * tps // (2 * SPLIT_THREADS)) // out_numel)
            tmp = -(-r // (SPLIT_THREADS * per_out))
            close = _closest_divisor(r, tmp)
            size = max(close, MIN_ELEMENTS_PER_THREAD) if abs(close - tmp) < 30 else tmp
        else:
            close = _closest_divisor(r, MAX_ELEMENTS_PER_THREAD)
            size = close if abs(close - MAX_ELEMENTS_PER_THREAD) < 50 else MAX_ELEMENTS_PER_THREAD
        return -(-r // (size * SPLIT_THREADS))
    xblocks = -(-out_numel // OUTER_XBLOCK)
    if work < lo:
        size = MIN_ELEMENTS_PER_THREAD
    elif work < hi:
        blocks = -(-(sm * tps // SPLIT_THREADS) // xblocks)
        tmp = -(-r // (OUTER_RVALS_PER_THREAD * blocks))
        close = _closest_divisor(r, tmp)
        size = max(close, MIN_ELEMENTS_PER_THREAD) if abs(tmp - close) < 20 else tmp
    else:
        close = _closest_divisor(r, MAX_ELEMENTS_PER_THREAD)
        size = close if abs(close - MAX_ELEMENTS_PER_THREAD) < 50 else MAX_ELEMENTS_PER_THREAD
    return -(-r // (OUTER_RVALS_PER_THREAD * size))


def reduction_split(graph: OpGraph, n: str, spec, nhwc: bool = False) -> int:
    """:func:`split_factor` for reduction node ``n`` (1 without a spec)."""
    if spec is None:
        return 1
    a = graph.g.nodes[n]
    if packet_name(a["op"]) in ROW_OPS:
        return 1             # a full-size row reduction has as many rows as it has outputs / row
    out = numel(main_shape(a["shape"]))
    return split_factor(out, row_numel(graph, n), is_inner(graph, n, nhwc), spec)


def persistent(graph: OpGraph, n: str, spec=None, nhwc: bool = False) -> bool:
    """Rule 3: whether the kernel computing reduction ``n`` is a persistent reduction
    (for a split one: its first stage, of ``r / split`` elements a row)."""
    inner = is_inner(graph, n, nhwc)
    r = row_numel(graph, n)
    split = reduction_split(graph, n, spec, nhwc)
    r = -(-r // split)
    return r <= (PERSISTENT_INNER if inner else PERSISTENT_OUTER)
