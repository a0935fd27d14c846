"""Inductor: which kernels ``torch.compile`` (default mode, inference) generates for a graph.

The rules, read from ``torch/_inductor`` (``lowering.py``, ``ir.py``, ``scheduler.py``,
``choices.py``, ``kernel/mm.py``, ``kernel/conv.py``, ``fx_passes/pad_mm.py``; PyTorch
2.5-2.11) and checked against the profiler's kernel lists of the compiled zoo records:

1. **Extern calls.** Matmuls, convolutions and attention run as library kernels (cuBLAS,
   cuDNN, the SDPA backends), one launch each: default mode has no Triton GEMM template
   and fuses nothing into a library call. Ops without a lowering fall back to ATen.
2. **Inline or store.** A pointwise op is an expression, inlined into every consumer
   (recomputed, not stored) unless it is *realised*: a graph output; read by an extern
   call or a pooling window; read by several consumers while its expression loads more
   than ``REALIZE_READS`` buffers; or loading more than ``REALIZE_ACC_READS``.
   Reductions (norms, softmax, sums, global pooling) are always stored; one over fewer
   than ``UNROLL_REDUCTION`` elements is unrolled into pointwise code.
3. **Fusion.** Stored nodes that share a buffer fuse, most bytes shared first: vertically
   (the consumer reads the producer) or horizontally (both read one buffer, at most
   ``MAX_DISTANCE`` scheduler nodes apart). Pointwise with pointwise of equal size;
   pointwise with a reduction over its whole input (prologue, or a full-size epilogue) or
   over its output (epilogue); reduction with reduction of the same shape. At most
   ``MAX_FUSION_SIZE`` ops a kernel, and never a cycle.
4. **Around library calls.** A convolution's bias is peeled off cuDNN and added by its
   consumer's kernel (a kernel of its own when no Triton kernel reads the conv); a
   compute-bound GEMM whose dimensions break alignment is padded (``pad_mm``: one copy
   kernel per padded operand, every call, since weights are not frozen); convolutions run
   channels-last when the layout optimisation says so (:mod:`gpusim.lower`).
5. **Host reads** (``.item()``, ``if mask.all():``) are not in a compiled graph: library
   code takes its ``torch.compiler.is_compiling()`` path (capture with ``compiling=True``).
"""

from __future__ import annotations

import heapq

import networkx as nx

from gpusim.graph.opgraph import GEMM_KINDS, OpGraph, main_shape, numel
from gpusim.lower.legality import domain, fusion_class
from gpusim.graph.ops import WINDOW_POOLS, packet_name
from gpusim.lower.reductions import channels_last, reduction_split

REALIZE_READS = 4          # config.realize_reads_threshold
REALIZE_ACC_READS = 8      # config.realize_acc_reads_threshold
UNROLL_REDUCTION = 8       # config.unroll_reductions_threshold
MAX_FUSION_SIZE = 64       # config.max_fusion_size
MAX_DISTANCE = 64          # scheduler: horizontal fusion of "long distant" nodes refused
#: scheduler nodes an extern attention call adds beyond its own: one ``MultiOutput`` per
#: tensor it returns (the H100 BERT allocator trace: four per cuDNN attention call). With
#: them, BERT's per-layer mask conversions fuse five layers at a time, as in that trace.
ATTENTION_OUTPUTS = 4


def _out_numel(graph: OpGraph, n: str) -> int:
    return numel(main_shape(graph.g.nodes[n]["shape"]))


def _rnumel(graph: OpGraph, n: str) -> int:
    """Elements a reduction reduces per output (1 for anything else)."""
    return max(1, domain(graph, n) // max(1, _out_numel(graph, n)))


def node_class(graph: OpGraph, n: str) -> str:
    """``extern``, ``reduction``, ``pointwise`` or ``free`` (no code: a host read)."""
    a = graph.g.nodes[n]
    if a.get("sync"):
        return "free"
    if a["kind"] in GEMM_KINDS:
        return "extern"
    cls = fusion_class(graph, n)
    if cls == "opaque":
        return "extern"                    # no lowering: ATen fallback kernel
    if cls == "reduction":
        return "reduction" if _rnumel(graph, n) >= UNROLL_REDUCTION else "pointwise"
    return "pointwise"


def _signature(graph: OpGraph, n: str, cls: str) -> tuple[int, int]:
    """(numel, rnumel) of a stored node's loop."""
    return _out_numel(graph, n), (_rnumel(graph, n) if cls == "reduction" else 1)


def split_reduction(graph: OpGraph, n: str, spec, nhwc: bool | None = None) -> bool:
    """Whether Inductor splits reduction ``n`` into two kernels (partials, then their
    reduction): :func:`gpusim.lower.reductions.reduction_split` (few outputs over a long
    reduction; an outer one, such as the spatial mean of a channels-last activation, splits
    from a few hundred elements). ``nhwc``: the graph's 4-D activations are channels-last
    (:func:`gpusim.lower.reductions.channels_last`, asked when not given)."""
    if spec is None:
        return False
    if graph.g.nodes[n].get("two_stage"):
        return True
    if _rnumel(graph, n) < UNROLL_REDUCTION or _out_numel(graph, n) >= 2 * 32 * spec.sm_count:
        return False
    if nhwc is None:
        nhwc = channels_last(graph)
    return reduction_split(graph, n, spec, nhwc) > 1


def _compatible(a: tuple, b: tuple) -> bool:
    """Inductor's SIMD backend gate on two loop signatures (numel, rnumel)."""
    (na, ra), (nb, rb) = a, b
    if ra == 1 and rb == 1:
        return na == nb
    if ra > 1 and rb > 1:
        return a == b
    (pw, red) = (a, b) if ra == 1 else (b, a)
    return pw[0] in (red[0] * red[1], red[0])


def stored_nodes(graph: OpGraph, cls: dict) -> set:
    """The pointwise and reduction nodes Inductor realises into buffers (rule 2). ``cls``
    covers the nodes of one compiled graph: a node read outside it is that graph's output."""
    df = graph.dataflow
    loads: dict = {}          # node -> buffers its inlined expression loads
    stored: set = set()
    for n in graph.compute_nodes:
        c = cls.get(n)
        if c is None:
            continue
        if c in ("free", "extern"):
            continue
        rd: set = set()
        for p in graph.g.nodes[n]["reads"]:
            if cls.get(p) == "pointwise" and p not in stored:
                rd |= loads.get(p, set())
            else:
                rd.add(p)
        loads[n] = rd
        if c == "reduction":
            stored.add(n)
            continue
        users = [s for s in df.successors(n) if cls.get(s) not in (None, "free")]
        if (graph.g.nodes[n]["is_output"] or any(s not in cls for s in df.successors(n))
                or mutates_input(graph, n) or scatters_input(graph, n)
                or any(cls[s] == "extern" or packet_name(graph.g.nodes[s]["op"]) in WINDOW_POOLS
                       for s in users)
                or (len(users) > 1 and len(rd) > REALIZE_READS)
                or len(rd) > REALIZE_ACC_READS):
            stored.add(n)
    return stored


def mutates_input(graph: OpGraph, n: str) -> bool:
    """An in-place op on a graph input that nothing reads after (a batch norm's
    ``num_batches_tracked.add_(1)``): a buffer mutation Inductor writes back, one kernel
    each (H100 compiled ResNet-50 steps: 53 ``triton_poi_fused_add_copy_`` kernels)."""
    a = graph.g.nodes[n]
    name = packet_name(a["op"])
    return (name.endswith("_") and not name.startswith("_") and bool(a["inputs"])
            and graph.g.nodes[a["inputs"][0]]["kind"] == "input"
            and not any(True for _ in graph.dataflow.successors(n)))


#: in-place indexed writes Inductor lowers to a scatter into the buffer they mutate
SCATTERS = frozenset({"index_copy_", "index_put_", "_index_put_impl_"})


def scatters_input(graph: OpGraph, n: str) -> bool:
    """An indexed in-place write into a graph input (a static KV cache's
    ``keys.index_copy_(2, cache_position, k)``): Inductor's ``index_put_impl_``
    (``torch/_inductor/lowering.py``) builds an ``ir.Scatter`` whose buffer has a
    ``MutationLayout`` on the input. It is always stored; its pointwise producers inline
    into it (the key's rotary embedding); it fuses with no other kernel: readers of the
    mutated cache read all of it where the scatter writes one indirect column, so no memory
    dependency matches, and the key and value updates stay two kernels (H100 generate
    records 2026-11-28c: ``triton_poi_fused_..._cat_cos_index_copy_..._3`` and
    ``triton_poi_fused_..._index_copy_transpose_view_4``, once per layer and step)."""
    a = graph.g.nodes[n]
    return (packet_name(a["op"]) in SCATTERS and bool(a["inputs"])
            and graph.g.nodes[a["inputs"][0]]["kind"] == "input")


def inductor_groups(graph: OpGraph, spec=None, nodes=None) -> list[list[str]]:
    """The compute nodes of each kernel Inductor generates, and each extern call as a
    group of one, in the order they run. Inlined nodes belong to the first kernel that
    reads them; host reads belong to none. ``nodes``: the compute nodes of one compiled
    graph (default: all); a node read by another one is this graph's output."""
    keep = None if nodes is None else set(nodes)
    region = [n for n in graph.compute_nodes if keep is None or n in keep]
    cls = {n: node_class(graph, n) for n in region}
    stored = stored_nodes(graph, cls)
    nhwc = channels_last(graph, region) if spec is not None else False
    owner: dict = {}
    groups: dict[int, list] = {}
    sig: dict[int, tuple] = {}
    for n in region:                               # topological
        if cls[n] == "extern":
            owner[n] = len(groups)
            groups[owner[n]] = [n]
            continue
        if n not in stored:
            continue
        gid = len(groups)
        members, stack = [n], [n]
        owner[n] = gid
        while stack:                               # inlined producers of this kernel
            for p in graph.g.nodes[stack.pop()]["reads"]:
                if cls.get(p) == "pointwise" and p not in stored and p not in owner:
                    owner[p] = gid
                    members.append(p)
                    stack.append(p)
        groups[gid] = members
        sig[gid] = _signature(graph, n, cls[n])
        if cls[n] == "reduction" and split_reduction(graph, n, spec, nhwc) \
                and not graph.g.nodes[n].get("two_stage"):
            sig[gid] = sig[gid] + ("split",)       # fuses with nothing
        if scatters_input(graph, n):
            sig[gid] = sig[gid] + ("scatter",)     # fuses with nothing (scatters_input)
    _break_cycles(graph, groups, sig, owner)
    _fuse(graph, groups, sig, owner, cls, stored)
    pos = graph.position
    out = [sorted(g, key=pos.__getitem__) for g in groups.values()]
    return sorted(out, key=lambda g: pos[g[-1]])


def _group_graph(graph, groups: dict, owner: dict) -> nx.DiGraph:
    q = nx.DiGraph()
    q.add_nodes_from(groups)
    for n, g in owner.items():
        for p in graph.g.nodes[n]["reads"]:
            if p in owner and owner[p] != g:
                q.add_edge(owner[p], g)
    return q


def _break_cycles(graph, groups: dict, sig: dict, owner: dict) -> None:
    """An inlined node read by several kernels is recomputed by each; gpusim keeps it in
    the first kernel that reads it. Where that makes two kernels wait for each other,
    the shared node is given a kernel of its own (rare: a cheap value shared across
    kernels that also exchange stored buffers)."""
    while not nx.is_directed_acyclic_graph(q := _group_graph(graph, groups, owner)):
        cyc = {g for e in nx.find_cycle(q) for g in e[:2]}
        moved = False
        for g in sorted(cyc):
            if g not in sig:
                continue
            anchor = max(groups[g], key=graph.position.__getitem__)
            for n in list(groups[g]):
                if n != anchor and any(owner.get(c) not in (None, g) for c in graph.dataflow.successors(n)):
                    groups[g].remove(n)
                    gid = max(groups) + 1
                    groups[gid] = [n]
                    owner[n] = gid
                    sig[gid] = (_out_numel(graph, n), 1)
                    moved = True
        if not moved:
            raise RuntimeError("inductor grouping: a cycle with no shared inlined node")


#: views that pick a part of their tensor (reading one leaves the rest unread)
REGION_VIEWS = frozenset({"select", "slice", "narrow", "split", "split_with_sizes", "unbind",
                          "chunk", "getitem", "unsafe_split", "as_strided", "diagonal"})


def read_region(graph: OpGraph, n: str, p: str) -> tuple:
    """Which part of ``p``'s tensor compute node ``n`` reads: the part-picking views
    (``qkv[0]``, ``x.split(...)[1]``) between them, empty for the whole tensor."""
    nodes = graph.g.nodes
    src = next((i for i in nodes[n]["inputs"] if i in nodes and nodes[i]["base"] == p), p)
    out = []
    while src != p and nodes[src]["kind"] == "view" and nodes[src]["inputs"]:
        if packet_name(nodes[src]["op"]) in REGION_VIEWS:
            out.append(src)
        src = nodes[src]["inputs"][0]
    return tuple(out)


def _fuse(graph, groups: dict, sig: dict, owner: dict, cls: dict, stored: set = frozenset()) -> None:
    """Rule 3, in place: merge Triton groups that share buffers, most bytes first.
    Horizontal partners share bytes only where they read the same elements: Inductor's
    ``score_fusion_memory`` matches memory dependencies by buffer *and index*, and
    refuses a fusion that shares none (``score_fusion_memory_threshold``), so the q, k
    and v copies of one qkv projection stay three kernels (torchvision Swin records)."""
    q = _group_graph(graph, groups, owner)
    # scheduler order: groups in program order of the node each one stores (its last
    # member; inlined producers come before it). A fused group spans [lo, hi] of it.
    pos = graph.position
    lo, at = {}, 0
    for g in sorted(groups, key=lambda g: max(pos[n] for n in groups[g])):
        lo[g] = at
        at += 1 + (ATTENTION_OUTPUTS if g not in sig and graph.g.nodes[groups[g][0]]["kind"]
                   == "attention" else 0)
    hi = dict(lo)

    def distance(a, b):
        """Inductor's proximity of two (fused) nodes: how far apart their spans reach."""
        return max(abs(lo[a] - hi[b]), abs(lo[b] - hi[a]))

    def far(a, b):
        """Inductor's ``are_long_distant_nodes``: horizontal partners more than
        ``MAX_DISTANCE`` scheduler nodes apart do not fuse."""
        return distance(a, b) > MAX_DISTANCE

    regions_read: dict = {}

    def region(n, p):
        """:func:`read_region`, once per (node, producer): candidates asks again per merge."""
        r = regions_read.get((n, p))
        if r is None:
            r = regions_read[n, p] = read_region(graph, n, p)
        return r

    def candidates(g):
        """(shared bytes, other group) for every group sharing a buffer with g."""
        out: dict = {}
        mine = set(groups[g])
        reads: dict = {}
        regions: dict = {}
        for n in groups[g]:
            for p, b in graph.g.nodes[n]["reads"].items():
                if p not in mine:
                    reads[p] = max(reads.get(p, 0), b)
                    regions.setdefault(p, set()).add(region(n, p))
        for p, b in reads.items():
            if p in stored and owner.get(p) in sig and owner[p] != g:    # vertical
                out[owner[p]] = out.get(owner[p], 0) + b
            for s in graph.dataflow.successors(p):                       # horizontal
                h = owner.get(s)
                if (h is not None and h != g and h in sig and not far(g, h)
                        and region(s, p) in regions[p]):
                    out[h] = out.get(h, 0) + b
        for n in groups[g]:                                              # consumers
            for s in graph.dataflow.successors(n):
                h = owner.get(s)
                if h is not None and h != g and h in sig:
                    out[h] = out.get(h, 0) + graph.g.nodes[n]["bytes_written"]
        return out

    def legal(a, b):
        if len(sig[a]) > 2 or len(sig[b]) > 2:
            return False
        if (a in outer and q.has_edge(a, b)) or (b in outer and q.has_edge(b, a)):
            return False            # an outer reduction takes no epilogue
        if not _compatible(sig[a], sig[b]) or len(groups[a]) + len(groups[b]) > MAX_FUSION_SIZE:
            return False
        # a path a -> x -> b (or b -> x -> a) through a third group would make a cycle
        for lo, hi in ((a, b), (b, a)):
            stack = [s for s in q.successors(lo) if s != hi]
            seen = set(stack)
            while stack:
                x = stack.pop()
                for s in q.successors(x):
                    if s == hi:
                        return False
                    if s not in seen:
                        seen.add(s)
                        stack.append(s)
        return True

    outer = {g for g, ms in groups.items() if any(graph.g.nodes[n].get("outer_reduction") for n in ms)}
    heap: list = []
    version = {g: 0 for g in groups}

    def push(g):
        for h, b in candidates(g).items():
            a, c = min(g, h), max(g, h)
            heapq.heappush(heap, (-b, distance(a, c), a, c, version[a], version[c]))
    for g in list(sig):
        push(g)
    while heap:
        _, _, a, b, va, vb = heapq.heappop(heap)
        if a not in groups or b not in groups or version[a] != va or version[b] != vb:
            continue
        if not legal(a, b):
            continue
        red = [s for s in (sig[a], sig[b]) if s[1] > 1]
        sig[a] = red[0] if red else sig[a]
        groups[a] = groups[a] + groups.pop(b)
        del sig[b]
        if b in outer:
            outer.add(a)
        for n in groups[a]:
            owner[n] = a
        # in place: a copy of the group graph per merge made this quadratic (Pythia-410m's
        # compiled lowering: 0.4 of its 0.8 s); legal() only asks q what reaches what
        nx.contracted_nodes(q, a, b, self_loops=False, copy=False)
        lo[a], hi[a] = min(lo[a], lo.pop(b)), max(hi[a], hi.pop(b))
        version[a] += 1
        push(a)


def conv_has_bias(graph: OpGraph, n: str) -> bool:
    a = graph.g.nodes[n]
    return a["kind"] == "conv" and len(a["reads"]) >= 3


# ------------------------------------------------------------------ training norms
#: norm ops of a training graph that AOTAutograd decomposes before Inductor sees them
#: (torch/_decomp/decompositions.py): a statistics reduction, then a pointwise kernel
TRAINING_NORMS = frozenset({"cudnn_batch_norm", "native_batch_norm", "_native_batch_norm_legit",
                            "_native_batch_norm_legit_functional", "native_batch_norm_backward",
                            "cudnn_batch_norm_backward", "native_layer_norm",
                            "native_layer_norm_backward"})


def decompose_norms(graph: OpGraph, nodes) -> OpGraph:
    """A copy of ``graph`` in which each training norm among ``nodes`` is what Inductor
    compiles (``_decomp``): a statistics reduction node (``<n>/stats``) and the norm node
    itself as the pointwise normalisation that reads it. Batch norm's statistics (forward:
    mean and variance per channel, the running-stat updates fused in; backward: the sums of
    the gradient and of gradient x normalised input, which also give the weight and bias
    gradients) reduce over batch and space, an *outer* reduction: Inductor fuses a
    pointwise producer into it but not the full-size normalisation after it (the H100
    compiled ResNet-50 step: ``triton_red_fused_native_batch_norm_backward_threshold_
    backward`` and separate ``triton_poi_fused_..._relu`` kernels), and in two stages at any
    size (``two_stage``: a ``triton_red_`` kernel of partial sums, then a ``triton_per_`` one
    that finishes them and updates the running stats: 53 of ResNet-50's 53 batch norms,
    batch 8 and 32; the first stage keeps its pointwise producer). Layer norm reduces
    each row (one persistent kernel with its normalisation); its backward adds a column
    reduction over the rows for the weight and bias gradients (``<n>/wgrad``)."""
    todo = [n for n in nodes if packet_name(graph.g.nodes[n]["op"]) in TRAINING_NORMS]
    if not todo:
        return graph
    extra: dict = {}                     # norm node -> [(name, attrs, [(src, bytes)])]
    attrs: dict = {}
    for n in todo:
        a = dict(graph.g.nodes[n])
        a["reads"], a["inputs"] = dict(a["reads"]), list(a["inputs"])
        name = packet_name(a["op"])
        bn = "batch_norm" in name
        backward = name.endswith("_backward")
        x_shape = main_shape(a["shape"])
        full = numel(x_shape)
        # the activation(s) the statistics read: x forward; dy and x backward
        acts = [p for p, b in a["reads"].items() if b >= max(a["reads"].values())]
        if bn:
            stat_shape = (x_shape[1] if len(x_shape) > 1 else 1,)
        else:
            stat_shape = tuple(x_shape[:-1]) + (1,)
        stats, nb = f"{n}/stats", 8 * numel(stat_shape)
        act_reads = {p: a["reads"][p] for p in acts}
        common = dict(dtype="float32", is_output=False, unmodelled=False, phase=a.get("phase"),
                      region=a.get("region"))
        new = [(stats, dict(common, op="aten.sum.dim_IntList" if backward else "aten.var_mean.correction",
                            kind="reduction", shape=stat_shape, flops=3.0 * full * len(acts),
                            bytes_read=sum(act_reads.values()), bytes_written=nb, inputs=acts,
                            base=stats, reads=dict(act_reads), outer_reduction=bn, two_stage=bn,
                            label=stats,
                            fx_name=stats), dict(act_reads))]
        a["reads"][stats] = nb
        a["inputs"].append(stats)
        if not bn and backward:          # the weight and bias gradients: column sums
            hidden = x_shape[-1] if x_shape else 1
            w = f"{n}/wgrad"
            rd = {**act_reads, stats: nb}
            new.append((w, dict(common, op="aten.sum.dim_IntList", kind="reduction", shape=(hidden,),
                                flops=2.0 * full * len(acts), bytes_read=sum(rd.values()),
                                bytes_written=8 * hidden, inputs=acts + [stats], base=w, reads=rd,
                                outer_reduction=True, label=w, fx_name=w), dict(rd)))
            a["reads"][w] = 8 * hidden
            a["inputs"].append(w)
        a["kind"] = "pointwise"
        attrs[n], extra[n] = a, new
    g = nx.DiGraph()
    for n, d in graph.g.nodes(data=True):     # capture order kept: the new nodes just before
        for name, d2, _ in extra.get(n, ()):
            g.add_node(name, **d2)
        g.add_node(n, **attrs.get(n, d))
    g.add_edges_from(graph.g.edges(data=True))
    for n, new in extra.items():
        for name, _, rd in new:
            for p, b in rd.items():
                g.add_edge(p, name, bytes=b)
            g.add_edge(name, n, bytes=g.nodes[name]["bytes_written"])
    return OpGraph(g, graph.name, graph.meta)
