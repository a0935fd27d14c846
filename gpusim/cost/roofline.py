"""The roofline of a group of nodes: one kernel's estimate before its kernel class is known
(:func:`estimate_group`), the record every stage speaks (:class:`KernelEstimate`), and the
shared terms (units, GEMM tile quantisation, floors, ATen's fractions of the bandwidth).

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

from gpusim.graph.opgraph import (GEMM_KINDS, HALF_DTYPES, REDUCING_KINDS, OpGraph, group_io, main_shape,
                                  numel)
from gpusim.graph.ops import is_eval_batch_norm, packet_name
from gpusim.cost.few_rows import append_cat_us, cast_floor_us, strided_cat_floor_us, strided_floor_us
from gpusim.util.ints import last_pow2


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


def _horizontal_gemms(nodes: list[dict]) -> list[dict]:
    """The nodes a kernel's compute time is summed over: sibling matmuls fused horizontally
    (sharing an operand) run as one wider GEMM (``n`` and FLOPs summed), the rest as they are."""
    gemm_nodes = [a for a in nodes if a["kind"] in GEMM_KINDS and a.get("gemm")]
    if len(gemm_nodes) <= 1:
        return nodes
    g0 = dict(gemm_nodes[0]["gemm"])
    g0["n"] = sum(a["gemm"]["n"] for a in gemm_nodes)
    merged = dict(gemm_nodes[0], gemm=g0, flops=sum(a["flops"] for a in gemm_nodes))
    return [merged] + [a for a in nodes if a not in gemm_nodes]


def estimate_group(graph: OpGraph, members, spec, opts: CostOptions = CostOptions(),
                   name: str | None = None) -> KernelEstimate:
    """Predict one kernel made of ``members`` (node names) on ``spec``."""
    members = list(members)
    if not members:
        raise ValueError("a kernel needs at least one node")
    nodes = [graph.g.nodes[n] for n in members]
    reads, writes = group_io(graph, members)
    path = cat_path(graph, members[0], spec) if opts.aten and len(nodes) == 1 else ""
    if path == "append":
        return _append_cat(graph, members, spec, name)
    bw_frac = aten_fraction(nodes, spec, path == "strided") if opts.aten and len(nodes) == 1 else 1.0
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
    for a in _horizontal_gemms(nodes):
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
    floor = kernel_floor(nodes, spec)
    if opts.aten and len(nodes) == 1:
        mem_us = max(mem_us, row_walk_us(graph, members[0], spec))
        cat_floor = strided_cat_floor_us(numel(main_shape(nodes[0].get("shape"))), spec) if path == "strided" else None
        floor = max(floor, aten_floor(nodes[0], spec)) if cat_floor is None else max(spec.kernel_min_us, cat_floor)
    body = max(mem_us, comp_us) * register_pressure(len(members), len(reads) + len(writes))
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


def _append_cat(graph: OpGraph, members: list, spec, name) -> KernelEstimate:
    """An appending cat's estimate (:func:`append_cat_us`): its bytes from DRAM (the cache is resident)."""
    a = graph.g.nodes[members[0]]
    reads, writes = group_io(graph, members)
    rd, wr = float(sum(reads.values())), float(sum(writes.values()))
    us = append_cat_us(spec, rd + wr)
    return KernelEstimate(name=name or members[0], ops=tuple(members), op_types=(packet_name(a["op"]),),
                          kind=a["kind"], shape=a.get("shape") or (), flops=0.0, bytes_read=rd, bytes_read_l2=0.0,
                          bytes_written=wr, mem_us=us - spec.kernel_fixed_us, compute_us=0.0,
                          fixed_us=spec.kernel_fixed_us, us=us, bound="memory", unit="fp32")


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


def _retimed(est: KernelEstimate, spec, mem_us: float, comp_us: float, floor: float,
             **changes) -> KernelEstimate:
    """``est`` with new memory and compute times: the kernel-time formula of
    :func:`estimate_group` (fixed + the larger of the two, at least ``floor``)."""
    body = max(mem_us, comp_us)
    us = max(spec.kernel_fixed_us + body, floor)
    bound = "latency" if body < spec.kernel_fixed_us else ("compute" if comp_us > mem_us else "memory")
    return replace(est, mem_us=mem_us, compute_us=comp_us, us=us, bound=bound, **changes)


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


#: the widest row the prefill_classes sweep walked (RMSNorm over 896-4096 columns at 128-16384 rows): the
#: row-walk law is not carried past it (an argmax over a 128k vocabulary splits each row over many blocks:
#: 36 us measured for 8 x 128256 on the H200, validation/results/decode/h200-2026-11-28.jsonl)
ROW_WALK_MAX_COLS = 4096


def row_walk_us(graph: OpGraph, n: str, spec) -> float:
    """ATen's reduction over the last dim (one output per row: RMSNorm's ``mean(-1)``) walks each
    row in series, ``reduction_col_ns`` per column of one row, however few the rows: at a few
    thousand rows that walk, not the bytes, is the time (the prefill_classes sweep). 0 without the
    figure, or for another reduction."""
    a = graph.g.nodes[n]
    if not spec.reduction_col_ns or a["kind"] != "reduction":
        return 0.0
    ins = list(a.get("inputs") or a.get("reads") or [])
    src = main_shape(graph.g.nodes[ins[0]].get("shape")) if ins and ins[0] in graph.g else ()
    out = tuple(main_shape(a.get("shape")))
    # the reduced dims may be several trailing ones (a squeeze-excite mean over H x W): TensorIterator
    # coalesces them into one row of their product
    k = next((k for k in range(len(src) - 1, -1, -1)
              if out in (tuple(src[:k]) + (1,) * (len(src) - k), tuple(src[:k]))), None)
    cols = numel(src[k:]) if k is not None and src else 0
    if not cols or cols > ROW_WALK_MAX_COLS:
        return 0.0
    return cols * spec.reduction_col_ns * 1e-3 * row_walk_share(math.prod(src[:k]), cols)


#: ATen's reduction block (Reduce.cuh, ``ReduceConfig``): at most 512 threads, one warp wide at first
REDUCE_THREADS, REDUCE_WARP, REDUCE_VEC = 512, 32, 4


def row_walk_share(rows: int, cols: int) -> float:
    """The part of a row's columns one thread walks, relative to a warp-wide block (the prefill sweep's
    shapes, where ``reduction_col_ns`` was fitted): ATen's ``setReduceConfig`` for a reduction over the
    contiguous last dim puts ``block_height = min(last_pow2(rows), 512 / 32)`` rows in a block and widens
    it to ``block_width = min(last_pow2(cols / 4), 512 / block_height)`` threads a row (vector loads of 4
    from 128 columns), so each thread walks ``cols / block_width`` columns: a decode step's 1-8 rows
    walk 1/16-1/2 of what 16 rows and more do (H200 decode records: a 2048-column mean 2.1 us at 1 row,
    3.6 at 8, 5.6 predicted by the warp-wide walk). 1 from 16 rows up."""
    height = min(last_pow2(rows), REDUCE_THREADS // REDUCE_WARP)
    lanes = cols // REDUCE_VEC if cols >= 128 else cols
    width = min(last_pow2(lanes), REDUCE_THREADS // height)
    return min(1.0, REDUCE_WARP / max(width, 1))


def cat_path(graph: OpGraph, n: str, spec) -> str:
    """Which CatArrayBatchedCopy an eager ``cat``/``stack`` node runs, by its largest input: ``"append"``
    when that is a graph input (a decode step's resident KV cache, the new token appended: every input
    contiguous, so ATen's vectorised copy, ``CatArrayBatchedCopy_vectorized`` in the H200 generate records)
    priced as a contiguous copy (:func:`append_cat_us`); ``"strided"`` when it is a strided view, a strided
    graph input (a sliding-window cache once full: a slice of the last step's cat), appended with a strided
    token (``strided_inputs``: GPT-2's key sliced from the fused qkv at batch > 1) or a non-contiguous result (RoPE's ``rotate_half`` halves, DynamicCache's first cat of the transposed
    values: the kernel the prefill_classes sweep measured, at ``aten_cat_strided_efficiency``; only on a
    GPU with that figure); ``""`` for every other node (read first: a cheap test on every single-op
    kernel). The capture marks every cat non-contiguous (its inputs' shapes are not the output's)."""
    a = graph.g.nodes[n]
    if a["kind"] != "copy" or a.get("contiguous", True) or packet_name(a.get("op", "")) not in ("cat", "stack"):
        return ""
    ins = [i for i in a.get("inputs") or [] if i in graph.g]
    if not ins:
        return ""
    big = graph.g.nodes[max(ins, key=lambda i: math.prod(main_shape(graph.g.nodes[i].get("shape")) or (0,)))]
    if big.get("op") == "input" and not big.get("strided_input") and not a.get("strided_inputs"):
        return "append"
    if big.get("op") == "input":      # a strided cache (a sliding window's slice) or token: ATen's strided cat
        return "strided" if spec.aten_cat_strided_efficiency else ""
    return "strided" if spec.aten_cat_strided_efficiency and big.get("contiguous") is not True else ""


def strided_cat(graph: OpGraph, n: str, spec) -> bool:
    """:func:`cat_path` is ``"strided"``."""
    return cat_path(graph, n, spec) == "strided"


def aten_floor(a: dict, spec) -> float:
    """The shortest time of eager PyTorch's kernel for one op: ATen's non-vectorised elementwise
    kernel on 16-bit outputs (a strided or broadcast operand: ``elementwise_kernel<128, 4>``, the
    unroll CUDALoops.cuh picks for types under 4 bytes) takes at least ``aten_strided_min_us``,
    about twice the vectorised kernel's floor; 0 without the figure. The fp32 instantiation
    (``<128, 2>``) keeps ``kernel_min_us``: the sweep's fp32 ones are shorter (1.9 us at 128 rows),
    and flooring them too broke the H200 classic accuracy guards (device median and p90, speed-up)."""
    if a["kind"] in ("pointwise", "copy") and not a.get("contiguous", True) \
            and a.get("dtype") in HALF_DTYPES:
        return strided_floor_us(numel(main_shape(a.get("shape"))), spec)
    if a["kind"] == "copy" and a.get("casts") and a.get("contiguous", True) and a.get("dtype") not in HALF_DTYPES \
            and packet_name(a.get("op", "")) in CONVERSIONS:
        return cast_floor_us(spec)       # the unrolled kernel with dynamic casts (:func:`elementwise_fraction`)
    return 0.0


def aten_fraction(nodes, spec, strided_cat_op: bool = False) -> float:
    """Bandwidth of eager PyTorch's kernel for one op, as a fraction of a plain copy's.

    Elementwise ops with a broadcast or strided operand run ATen's non-vectorised path
    (one element per load: 2-byte types suffer most); reduce and norm kernels do a
    block-wide reduction per row. The fractions are measured by ``gpusim calibrate``.
    """
    a = nodes[0]
    kind = a["kind"]
    half = a.get("dtype") in ("float16", "bfloat16")
    if strided_cat_op:     # CatArrayBatchedCopy over strided inputs (:func:`strided_cat`)
        return spec.aten_cat_strided_efficiency
    if kind in ("pointwise", "copy"):
        return elementwise_fraction(a, spec)
    if kind == "reduction":
        return spec.aten_reduction_efficiency
    if kind == "norm" and not is_eval_batch_norm(a["op"]):
        return spec.aten_norm_efficiency_16bit if half else spec.aten_norm_efficiency
    return 1.0


#: ops whose copy converts its input's dtype (``x.to(dtype)``, ``copy_`` across dtypes)
CONVERSIONS = ("_to_copy", "to", "copy", "copy_", "type_as")


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
    validation/fit/fit_broad.py)."""
    half = a.get("dtype") in HALF_DTYPES
    strided = spec.aten_strided_efficiency_16bit if half else spec.aten_strided_efficiency
    # a copy to a 16-bit type converts in its own vectorised kernel (Copy.cu: fp32 ->
    # fp16/bf16, float16_copy_kernel_cuda / bfloat16_copy_kernel_cuda); any other converting
    # copy (bf16 -> fp32: RMSNorm's upcast) is direct_copy_kernel_cuda with dynamic casts, the
    # unrolled kernel (H200 prefill records: unrolled_elementwise_kernel<direct_copy...> for
    # every hidden_states.to(torch.float32), vectorized bfloat16_copy_kernel_cuda back). Only a
    # conversion is such a copy: a gather (embedding's int64 indices) converts nothing
    casts = a.get("casts") and (a["kind"] == "pointwise"
                                or (not half and packet_name(a.get("op", "")) in CONVERSIONS))
    if a.get("contiguous", True):
        return (spec.aten_cast_efficiency or 1.0) if casts else 1.0
    perm = spec.aten_permuted_efficiency_16bit if half else spec.aten_permuted_efficiency
    if a.get("permuted") and perm:
        return perm
    if casts and spec.aten_strided_cast_efficiency:
        return spec.aten_strided_cast_efficiency
    return strided


def kernel_floor(nodes, spec) -> float:
    """Shortest duration of a kernel of this class: library GEMMs and block reductions
    have longer prologues than a streaming elementwise kernel (measured floors)."""
    kinds = {a["kind"] for a in nodes}
    if kinds & GEMM_KINDS and spec.gemm_min_us:
        return spec.gemm_min_us
    if kinds & REDUCING_KINDS and spec.reduction_min_us:
        return spec.reduction_min_us
    return spec.kernel_min_us
