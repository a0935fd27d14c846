"""ATen's reduction kernel (``at::native::reduce_kernel``, ``Reduce.cuh``) priced by its launch configuration.

Eager ``sum``, ``mean``, ``amax``, ``linalg_vector_norm``, a global average pool and their kin run one kernel whose
grid ``setReduceConfig`` sizes from the tensor's layout (:func:`reduce_config`, read from PyTorch 2.x's
``Reduce.cuh``): TensorIterator puts the reduced dims first and coalesces adjacent ones; a reduction over the
fastest-moving dim splits it over a warp's lanes (vector loads when it has 128 elements or more), any other
vectorises over 4 outputs a thread; warps split the reduction when a thread would walk at least ``16 x`` the
block height, and blocks split it (a global pass through a staging buffer) when a thread would still walk 256
values and the grid does not fill the GPU. A thread then walks its values in a serial loop of dependent loads.
So a reduction with few outputs (ConvNeXt-V2's spatial norm over a channels-last map at batch 1: 5 blocks of 128
threads, 196 values each) is a chain of load latencies, not a stream (28 us for 2 MB on an H200).

The law (class ``aten_reduce``), per GPU from the aten_reduce sweep (``validation/fit/fit_aten_reduce.py``)::

    t = aten_reduce_us + stream + waves x (loads x latency + aten_reduce_wave_us) [+ aten_reduce_global_us]

``stream``: the roofline's DRAM bytes at ``aten_reduce_efficiency`` of the bandwidth, its L2-credited bytes at the
L2 bandwidth; ``loads``: a thread's serial loads (4 values a load, or 16 bytes a load where ``sum`` and ``mean``
vectorise their input); ``latency``: ``aten_reduce_load_ns``, or ``aten_reduce_l2_load_ns`` when the roofline reads
the input from L2 (the kernel before wrote it); ``waves``: the grid over the blocks the SMs hold at once. A GPU
without the figures keeps the reduction stream of the roofline.
"""

from __future__ import annotations

import math

from gpusim.graph.opgraph import DTYPE_BYTES, OpGraph, main_shape
from gpusim.graph.ops import packet_name
from gpusim.cost.roofline import REDUCE_THREADS as MAX_THREADS, REDUCE_VEC as VT0, REDUCE_WARP as WARP
from gpusim.lower.reductions import (DEFAULT_THREADS_PER_SM, GLOBAL_POOLS, _input_shape, _threads_per_sm, nhwc_on_gpu,
                                     reduced_dims)
from gpusim.util.ints import last_pow2

#: reductions whose contiguous input is read in 16-byte vectors (8 values of a 16-bit type: the sweep's bf16 sums
#: and means walk half the loads of fp32's; its bf16 ``amax`` walks as many)
VEC16_OPS = frozenset({"sum", "mean"}) | GLOBAL_POOLS
MIN_VALUES, MAX_VALUES = 16, 256                    # setReduceConfig's values per thread around a block split


def iter_dims(shape, strides, reduced) -> tuple[list, list]:
    """TensorIterator's view of a reduction: ``(reduced, kept)`` lists of ``(size, input stride)``, innermost first,
    each group ordered by stride and adjacent dims coalesced; size-1 dims dropped."""
    dims = [(int(s), int(st), i in reduced) for i, (s, st) in enumerate(zip(shape, strides)) if s != 1]

    def coalesce(ds):
        out = []
        for s, st, _ in sorted(ds, key=lambda d: d[1]):
            if out and out[-1][0] * out[-1][1] == st:
                out[-1] = (out[-1][0] * s, out[-1][1])
            else:
                out.append((s, st))
        return out
    return coalesce([d for d in dims if d[2]]), coalesce([d for d in dims if not d[2]])


def reduce_config(shape, strides, reduced, elem_bytes: int, sms: int, threads_per_sm: int = DEFAULT_THREADS_PER_SM,
                  vec16: bool = False) -> dict:
    """``setReduceConfig`` for an input of ``shape`` / ``strides`` (elements) reduced over dims ``reduced``:
    ``{threads, vec, blocks, values, loads, global, waves}`` (``vec``: outputs a thread loads at once, the kernel's
    template ``reduce_kernel<512 / vec, vec>``; ``values``: a thread's values; ``loads``: its serial loads;
    ``global``: the reduction split over blocks; ``waves``: the grid over the blocks the SMs hold at once)."""
    red, kept = iter_dims(shape, strides, set(reduced))
    n_in, n_out = math.prod(s for s, _ in red), math.prod(s for s, _ in kept)
    fastest = not kept or (bool(red) and red[0][1] < kept[0][1])
    dim0, dim1 = (n_in, n_out) if fastest else (n_out, n_in)
    unit = (red[0][1] if red else 1) if fastest else kept[0][1]
    vec_in, out_vec = False, 1
    if unit == 1 and fastest and dim0 >= 128 and len(red) == 1:
        vec_in, dim0 = True, dim0 // VT0
    elif unit == 1 and not fastest:
        out_vec = 4              # get_output_vec_size: 4, halved until it divides the sizes and strides
        for n in [kept[0][0]] + [st for _, st in red + kept[1:]]:
            while n % out_vec:
                out_vec //= 2
        dim0 //= out_vec
    mnt = MAX_THREADS // out_vec
    d0, d1 = (last_pow2(d) if d < mnt else mnt for d in (dim0, dim1))
    width = min(d0, WARP)
    height = min(d1, mnt // width)
    width = min(d0, mnt // height)
    step_in, step_out = (width, 1) if fastest else (1, width)
    if math.ceil(n_in / step_in) >= min(height * 16, MAX_VALUES):
        step_in, split_warps = step_in * height, True
    else:
        step_out, split_warps = step_out * height, False
    grid = math.ceil(n_out // out_vec / step_out) if out_vec > 1 else math.ceil(n_out / step_out)
    resident = sms * max(threads_per_sm // (width * height), 1)
    ctas = 1
    values = math.ceil(n_in / step_in)
    if split_warps and values >= MAX_VALUES and grid <= resident:
        ctas = max(math.ceil(values / MAX_VALUES), min(math.ceil(resident / grid), math.ceil(values / MIN_VALUES)))
        values = math.ceil(n_in / (step_in * ctas))
    per_load = max(16 // elem_bytes, 1) if vec_in and vec16 else VT0
    return {"threads": width * height, "vec": out_vec, "blocks": grid * ctas, "values": values,
            "loads": math.ceil(values / per_load), "global": ctas > 1,
            "waves": math.ceil(grid * ctas / resident)}


def reduce_time_us(cfg: dict, dram_bytes: float, l2_bytes: float, spec) -> float:
    """The law's time of a reduction of launch configuration ``cfg`` (:func:`reduce_config`) moving ``dram_bytes``
    from DRAM and ``l2_bytes`` from L2 (its input L2-resident when any are)."""
    stream = dram_bytes / (spec.aten_reduce_efficiency * spec.bandwidth) + l2_bytes / spec.l2_bandwidth
    latency = spec.aten_reduce_l2_load_ns if l2_bytes else spec.aten_reduce_load_ns
    return (spec.aten_reduce_us + stream * 1e6 + cfg["waves"] * (cfg["loads"] * latency * 1e-3 + spec.aten_reduce_wave_us)
            + (spec.aten_reduce_global_us if cfg["global"] else 0.0))


def node_config(graph: OpGraph, n: str, spec) -> dict | None:
    """:func:`reduce_config` of node ``n`` from its input's shape and strides (``in_strides``, from capture;
    contiguous without them; channels-last where a meta trace left cuDNN's NHWC output NCHW:
    :func:`gpusim.lower.reductions.nhwc_on_gpu`); None for an input it cannot read."""
    a = graph.g.nodes[n]
    shape, out = _input_shape(graph, n), main_shape(a.get("shape"))
    if not shape or not all(isinstance(s, int) for s in shape):
        return None
    contiguous = tuple(math.prod(shape[i + 1:]) for i in range(len(shape)))
    strides = a.get("in_strides")
    if not strides or len(strides) != len(shape):
        strides = contiguous
    src = next(iter(a.get("inputs") or ()), None)
    if tuple(strides) == contiguous and len(shape) == 4 and src in graph.g and nhwc_on_gpu(graph, src):
        strides = (shape[1] * shape[2] * shape[3], 1, shape[1] * shape[3], shape[1])
    name = packet_name(a.get("op", ""))
    red = reduced_dims(shape, out) if name not in GLOBAL_POOLS else list(range(2, len(shape)))
    return reduce_config(shape, strides, red, DTYPE_BYTES.get(graph.g.nodes[src if src in graph.g else n].get("dtype"), 4),
                         spec.sm_count, _threads_per_sm(spec), name in VEC16_OPS)


def aten_reduce_law(x):
    """The law of class ``aten_reduce`` (:func:`reduce_time_us`; a :class:`gpusim.cost.laws.LawInput`); without the
    figures, the roofline's reduction stream."""
    spec = x.spec
    cfg = node_config(x.graph, x.kernel.ops[0], spec) if spec.aten_reduce_load_ns else None
    if cfg is None:
        return x.retimed(x.est.mem_us, x.est.compute_us)
    t = reduce_time_us(cfg, x.est.bytes - x.est.bytes_read_l2, x.est.bytes_read_l2, spec)
    return x.retimed(t - spec.kernel_fixed_us, x.est.compute_us, spec.kernel_min_us)
