"""Lower across GPUs: what DDP and FSDP2 launch beside rank 0's step (the collective plan).

The single-GPU lowering of the captured step says which compute kernels run; this module adds what the
wrapper launches around them, read off the wrappers' source (torch 2.11-2.14) and placed against those
kernels. Each added operation is a :class:`DistOp` on the compute stream (copies) or the communication
stream (NCCL's kernels, and the copies FSDP2 runs on its own streams), issued by the host once a given
compute kernel is issued, and waiting for the operations it names; a compute kernel may wait for
operations too (:attr:`DistPlan.waits`). Nothing here is timed: :mod:`gpusim.sim.ranks` prices and
schedules the plan.

DDP (``torch/nn/parallel/distributed.py``, ``torch/csrc/distributed/c10d/reducer.cpp``):

- buckets (:func:`assign_buckets`, ``compute_bucket_assignment_by_size``): after the first iteration
  the Reducer rebuilds its buckets in the order gradients became ready (unless
  ``find_unused_parameters`` without ``static_graph``), split by dtype, the first closing once it
  holds ``first_bucket_bytes`` (1 MiB with the default cap), the others at ``bucket_cap_mb`` (25);
  without a rebuild, the constructor's assignment: registration order, buckets sorted by their first
  parameter and reversed;
- as each gradient is produced, its autograd hook writes it into its bucket divided by the world size
  (``mul_out(bucket_view, grad, 1/N)``; in place, ``div_``, with ``gradient_as_bucket_view``);
- a bucket's all-reduce is launched on NCCL's stream once all its gradients are in, buckets in order;
- at the end of backward the Reducer waits for every all-reduce and copies each bucket view back to
  its gradient (none with ``gradient_as_bucket_view``); the optimizer follows;
- ``broadcast_buffers`` (the default): the module's buffers are broadcast from rank 0 before each
  forward (``_sync_buffers``), which the forward waits for.

FSDP2 (``torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py``, ``_fsdp_collectives.py``), per
unit in forward order (the root's first, its parameters used throughout):

- before its forward, on the all-gather streams: with a ``param_dtype`` other than the master dtype a
  ``_foreach_copy_`` of the shards into one flat buffer of that dtype (the cast), the copy-in
  (``all_gather_copy_in``), the all-gather; then on the compute stream the copy-out into the unsharded
  parameters (``split_with_sizes_copy``), which the unit's first kernel waits for; at most one
  all-gather ahead of the compute stream (the next one waits for the previous copy-out);
- with ``reshard_after_forward`` (all but the root) the same again before its backward, prefetched
  when the unit after it (in forward order) begins its backward;
- after its backward: the copy-in of its gradients into the ``reduce_dtype`` input (``chunk_cat``, on
  the compute stream), then the reduce-scatter (``ReduceOp.AVG`` for fp32/bf16: no division kernel; for
  fp16 a division before and after) and, where the reduce dtype is not the master dtype, the cast of
  the sharded gradient, on the reduce-scatter stream; the optimizer waits for every reduce-scatter;
- FSDP2's hooks are Python: the torch calls they make per step (counted at capture by running ``fully_shard``
  on stand-in units, :func:`gpusim.capture.distributed.fsdp_hook_calls`) are host work before each unit's
  forward and backward (:attr:`DistPlan.host_calls`, split by the units' parameter counts); each unit
  also costs its own host time per step (and across ranks its syncs), half before its forward, half before its
  backward (:attr:`DistPlan.host_units`; priced by :mod:`gpusim.sim.ranks` from the host's fitted FSDP2 law);
- the optimizer runs on the rank's shard: each optimizer kernel's time scales by ``1/N`` x the master
  dtype's bytes over the traced param dtype's (:attr:`DistPlan.scale`; the traced step ran it on full
  ``param_dtype`` parameters, :mod:`gpusim.capture.distributed`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpusim.graph.opgraph import OpGraph

_DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}


@dataclass(frozen=True)
class DistOp:
    """One operation a wrapper adds. ``kind``: ``"copy"`` (a memory-bound kernel of ``bytes`` read
    plus written) or a collective (``all_reduce``, ``all_gather``, ``reduce_scatter``, ``broadcast``;
    ``bytes`` in nccl-tests' sense). Issued when compute kernel ``after`` is issued (-1: at the step's
    start); starts once the ops named in ``deps`` are done."""
    name: str
    stream: str          # "compute" | "comm"
    kind: str
    bytes: float
    after: int
    deps: tuple = ()
    phase: str = "backward"
    group: str = ""      # the bucket or unit it serves


@dataclass(frozen=True)
class DistPlan:
    strategy: str
    world: int
    nproc_per_node: int
    nnodes: int
    ops: tuple = ()
    waits: dict = field(default_factory=dict)      # compute kernel index -> names of ops it waits for
    scale: dict = field(default_factory=dict)      # compute kernel index -> factor on its time
    buckets: tuple = ()                            # DDP: ((param keys), bytes, dtype) in launch order
    units: tuple = ()                              # FSDP: per unit {name, fwd, bwd, grads_done, ...}
    issued_from: str = "python"                    # who launches the added ops: "c++" (DDP's Reducer) or "python"
    host_calls: dict = field(default_factory=dict)  # compute kernel index -> torch calls the host makes before it
    host_units: dict = field(default_factory=dict)  # compute kernel index -> FSDP units' per-step syncs before it


def dtype_bytes(name: str) -> int:
    return _DTYPE_BYTES.get(str(name).removeprefix("torch."), 4)


# ------------------------------------------------------------------ where things happen in the step


def kernel_of(low) -> dict:
    """Graph node -> index of the kernel that computes it (a view: its base's)."""
    out = {}
    for i, k in enumerate(low.kernels):
        if k.role == "main":
            for n in k.ops:
                out.setdefault(n, i)
    return out


def kernel_phases(low) -> list:
    g = low.graph.g
    return [g.nodes[k.ops[0]].get("phase", "forward") if k.ops and k.ops[0] in g else "forward"
            for k in low.kernels]


def param_nodes(graph: OpGraph) -> dict:
    """Parameter key -> its graph input node."""
    return {a.get("label"): n for n, a in graph.g.nodes(data=True)
            if a["kind"] == "input" and a.get("label") is not None}


def grad_kernels(low) -> dict:
    """Parameter key -> index of the last kernel producing its gradient (the gradient's base)."""
    g, where = low.graph.g, kernel_of(low)
    out = {}
    for key, node in low.graph.meta.get("grad_of", {}).items():
        base = g.nodes[node].get("base", node) if node in g else node
        if base in where:
            out[key] = where[base]
    return out


def readers(low, keys) -> dict:
    """Parameter key -> sorted kernel indices that read it (through views)."""
    g = low.graph.g
    pnode = param_nodes(low.graph)
    want = {pnode[k]: k for k in keys if k in pnode}
    out = {k: [] for k in keys}
    for i, k in enumerate(low.kernels):
        seen = set()
        for n in k.ops:
            for src in g.nodes[n].get("inputs", []) if n in g else []:
                base = g.nodes[src].get("base", src) if src in g else src
                if base in want and want[base] not in seen:
                    seen.add(want[base])
                    out[want[base]].append(i)
    return out


# ------------------------------------------------------------------ DDP


def assign_buckets(params, limits) -> list:
    """``compute_bucket_assignment_by_size``: ``params`` ``[(key, bytes, dtype)]`` in the order given
    walk into one open bucket per dtype; a bucket closes once its bytes reach its limit, and that dtype
    then moves to the next limit (the last one repeats). Returns ``[[keys], bytes, dtype]`` in closing
    order, then the open buckets.

    >>> assign_buckets([("a", 600, "f"), ("b", 600, "f"), ("c", 600, "f")], [1000, 5000])
    [[['a', 'b'], 1200, 'f'], [['c'], 600, 'f']]
    """
    out, open_, limit_at = [], {}, {}
    for key, nbytes, dtype in params:
        b = open_.setdefault(dtype, [[], 0, dtype])
        b[0].append(key)
        b[1] += nbytes
        li = limit_at.setdefault(dtype, 0)
        if b[1] >= limits[li]:
            out.append(b)
            del open_[dtype]
            limit_at[dtype] = min(li + 1, len(limits) - 1)
    return out + [b for b in open_.values() if b[0]]


def ddp_buckets(cfg, ready: dict) -> list:
    """DDP's buckets in launch order (module docstring): rebuilt in gradient-ready order, or the
    constructor's assignment when ``find_unused_parameters`` is on without ``static_graph``."""
    d = cfg.ddp
    limits = [d["first_bucket_bytes"], d["bucket_cap_bytes"]]
    if d["first_bucket_bytes"] >= d["bucket_cap_bytes"]:
        limits = [d["bucket_cap_bytes"]]
    params = list(cfg.ddp_params)
    rebuilt = d["static_graph"] or not d["find_unused_parameters"]
    if rebuilt:
        idx = {k: i for i, (k, _, _) in enumerate(params)}
        order = sorted(params, key=lambda p: (ready.get(p[0], -1), -idx[p[0]]))
        return assign_buckets(order, limits)
    index = {k: i for i, (k, _, _) in enumerate(params)}
    buckets = assign_buckets(params, limits)
    buckets.sort(key=lambda b: min(index[k] for k in b[0]))
    return buckets[::-1]


def ddp_plan(low, cfg) -> DistPlan:
    """What DDP adds to ``low`` (the step's single-GPU lowering), per the module docstring."""
    n = cfg.world
    ready = grad_kernels(low)
    phases = kernel_phases(low)
    buckets = ddp_buckets(cfg, ready)
    nbytes = {k: b for k, b, _ in cfg.ddp_params}
    view = cfg.ddp["gradient_as_bucket_view"]
    ops, waits = [], {}
    fwd = next((i for i, p in enumerate(phases) if p == "forward" and low.kernels[i].role == "main"), 0)
    if n > 1:       # _sync_buffers: _broadcast_coalesced, one broadcast per dtype (BN's int64 counters apart)
        for dt, size in sorted(cfg.ddp_buffers.items()):
            ops.append(DistOp(f"broadcast buffers {dt}", "comm", "broadcast", size, -1, (), "forward", "buffers"))
            waits[fwd] = tuple(waits.get(fwd, ())) + (f"broadcast buffers {dt}",)
    bwd = [i for i, p in enumerate(phases) if p == "backward"]
    last_bwd = max(bwd) if bwd else len(low.kernels) - 1
    ars = []
    # the Reducer exists at every world size: the copies into and out of the buckets run on one GPU too
    # (the H200 records: the same 1,482 compute kernels at world 1, 2 and 4); NCCL runs from world 2
    for bi, (keys, size, dtype) in enumerate(buckets):
        deps = []
        for k in sorted(keys, key=lambda k: ready.get(k, last_bwd)):
            name = f"ddp {'div_' if view else 'grad to bucket'} {k}"
            ops.append(DistOp(name, "compute", "copy", 2 * nbytes[k], ready.get(k, last_bwd), (),
                              "backward", f"bucket {bi}"))
            deps.append(name)
        if n > 1:
            at = max(ready.get(k, last_bwd) for k in keys)
            ops.append(DistOp(f"all_reduce bucket {bi}", "comm", "all_reduce", size, at, tuple(deps),
                              "backward", f"bucket {bi}"))
            ars.append(f"all_reduce bucket {bi}")
    if not view:
        for bi, (keys, _, _) in enumerate(buckets):
            for k in keys:
                ops.append(DistOp(f"ddp bucket to grad {k}", "compute", "copy", 2 * nbytes[k], last_bwd,
                                  tuple(ars), "backward", f"bucket {bi}"))
    opt = next((i for i, p in enumerate(phases) if p == "optimizer" and i > last_bwd), None)
    if opt is not None and ars:
        waits[opt] = tuple(waits.get(opt, ())) + tuple(ars)
    return DistPlan("ddp", n, cfg.nproc_per_node, cfg.nnodes, tuple(ops), waits, {},
                    tuple((tuple(k), s, d) for k, s, d in buckets), issued_from="c++")


# ------------------------------------------------------------------ FSDP2


def unit_bytes(unit, world: int, dtype: str) -> int:
    """Bytes of the unit's parameters gathered in ``dtype``: FSDP2 pads each parameter's dim 0 to a
    multiple of the world (``padded_sharded_param_size`` x N)."""
    total = 0
    for _, numel, dim0, _ in unit.params:
        rows = max(dim0, 1)
        per_row = numel // rows if rows else numel
        padded = -(-rows // world) * world
        total += padded * per_row
    return total * dtype_bytes(dtype)


def fsdp_units(low, cfg) -> list:
    """Per unit, where it runs: ``fwd`` (first, last forward kernel reading its parameters), ``bwd``
    (first backward kernel reading them or producing their gradients, the last producing a
    gradient), in forward order (the root first)."""
    phases = kernel_phases(low)
    ready = grad_kernels(low)
    reads = readers(low, [k for u in cfg.units for k, _, _, _ in u.params])
    out = []
    for u in cfg.units:
        keys = [k for k, _, _, _ in u.params]
        f = sorted(i for k in keys for i in reads[k] if phases[i] == "forward")
        b = sorted([i for k in keys for i in reads[k] if phases[i] == "backward"]
                   + [ready[k] for k in keys if k in ready])
        out.append({"unit": u, "fwd": (f[0], f[-1]) if f else None,
                    "bwd": (b[0], max(ready[k] for k in keys if k in ready) if any(k in ready for k in keys)
                            else b[-1]) if b else None})
    first = min((x["fwd"][0] for x in out if x["fwd"]), default=0)
    for x in out:
        if x["unit"].is_root and x["fwd"]:
            x["fwd"] = (first, x["fwd"][1])
    out.sort(key=lambda x: (not x["unit"].is_root, x["fwd"][0] if x["fwd"] else 1 << 30))
    return out


def fsdp_plan(low, cfg) -> DistPlan:
    """What FSDP2 adds to ``low``, per the module docstring."""
    n = cfg.world
    phases = kernel_phases(low)
    units = [x for x in fsdp_units(low, cfg) if x["fwd"] is not None]
    ops, waits = [], {}

    def wait(i, name):
        waits[i] = tuple(waits.get(i, ())) + (name,)

    def gather(x, when, before, tag, prev_out):
        u = x["unit"]
        full = unit_bytes(u, n, u.param_dtype)
        name = f"{u.module} {tag}"
        first = (prev_out,) if prev_out else ()
        pb, mb = dtype_bytes(u.param_dtype), dtype_bytes(u.master_dtype)
        if u.param_dtype != u.master_dtype:     # _foreach_copy_ of the fp32 shards into a bf16 flat buffer
            ops.append(DistOp(f"{name} cast", "comm", "copy", full / n * (1 + mb / pb), when, first, tag, u.module))
            first = (f"{name} cast",)
        ops.append(DistOp(f"{name} copy-in", "comm", "copy", 2 * full / n, when, first, tag, u.module))
        ops.append(DistOp(f"{name} all_gather", "comm", "all_gather", full, when, (f"{name} copy-in",), tag,
                          u.module))
        ops.append(DistOp(f"{name} copy-out", "compute", "copy", 2 * full, before - 1, (f"{name} all_gather",),
                          tag, u.module))
        wait(before, f"{name} copy-out")
        return f"{name} copy-out"

    if n > 1:
        prev = None
        for x in units:        # forward: gathered when the host reaches the unit
            prev = gather(x, max(x["fwd"][0] - 1, -1), x["fwd"][0], "forward", prev)
        back = sorted((x for x in units if x["bwd"] is not None), key=lambda x: x["bwd"][0])
        prev = None
        for j, x in enumerate(back):
            if x["unit"].reshard_after_forward:
                issue = back[j - 1]["bwd"][0] if j > 0 else x["bwd"][0] - 1     # prefetched
                prev = gather(x, issue, x["bwd"][0], "backward", prev)
        rs = []
        for x in sorted(back, key=lambda x: x["bwd"][1]):
            u = x["unit"]
            full = unit_bytes(u, n, u.reduce_dtype)
            name = f"{u.module} reduce_scatter"
            at = x["bwd"][1]
            # chunk_cat of the gradients into the reduce dtype, on the compute stream
            ops.append(DistOp(f"{name} copy-in", "compute", "copy", unit_bytes(u, n, u.param_dtype) + full, at, (),
                              "backward", u.module))
            last = f"{name} copy-in"
            if u.reduce_dtype not in ("float32", "bfloat16"):      # no ReduceOp.AVG: divide before and after
                ops.append(DistOp(f"{name} predivide", "comm", "copy", 2 * full, at, (last,), "backward", u.module))
                last = f"{name} predivide"
            ops.append(DistOp(name, "comm", "reduce_scatter", full, at, (last,), "backward", u.module))
            last = name
            if u.reduce_dtype not in ("float32", "bfloat16"):
                ops.append(DistOp(f"{name} postdivide", "comm", "copy", 2 * full / n, at, (last,), "backward",
                                  u.module))
                last = f"{name} postdivide"
            if u.reduce_dtype != u.master_dtype:                   # the sharded gradient in the master dtype
                ops.append(DistOp(f"{name} cast", "comm", "copy", full / n * (1 + dtype_bytes(u.master_dtype)
                                                                             / dtype_bytes(u.reduce_dtype)),
                                  at, (last,), "backward", u.module))
                last = f"{name} cast"
            rs.append(last)
        last_bwd = max((i for i, p in enumerate(phases) if p == "backward"), default=len(phases) - 1)
        opt = next((i for i, p in enumerate(phases) if p == "optimizer" and i > last_bwd), None)
        if opt is not None:
            for r in rs:
                wait(opt, r)
    scale = {}
    p_elems = sum(numel for u in cfg.units for _, numel, _, _ in u.params)
    if p_elems:
        ratio = sum(numel * dtype_bytes(u.master_dtype) / dtype_bytes(u.param_dtype)
                    for u in cfg.units for _, numel, _, _ in u.params) / p_elems
        for i, p in enumerate(phases):
            if p == "optimizer":
                scale[i] = ratio / n
    host_calls, host_units = {}, {}
    weight = sum(len(x["unit"].params) + 1 for x in units)
    for x in units:      # FSDP2's hook calls (counted at capture), half before the unit's forward, half its backward
        share = cfg.hook_calls * (len(x["unit"].params) + 1) / weight if weight else 0.0
        for at in (x["fwd"][0], x["bwd"][0] if x["bwd"] else None):
            if at is not None:
                host_calls[at] = host_calls.get(at, 0.0) + share / 2
                host_units[at] = host_units.get(at, 0.0) + 0.5     # the unit's own host time, half each phase
    info = tuple({"unit": x["unit"].module, "fwd": x["fwd"], "bwd": x["bwd"],
                  "reshard_after_forward": x["unit"].reshard_after_forward,
                  "param_bytes": unit_bytes(x["unit"], n, x["unit"].param_dtype),
                  "reduce_bytes": unit_bytes(x["unit"], n, x["unit"].reduce_dtype),
                  "master_bytes": unit_bytes(x["unit"], n, x["unit"].master_dtype)} for x in units)
    return DistPlan("fsdp", n, cfg.nproc_per_node, cfg.nnodes, tuple(ops), waits, scale, (), info,
                    host_calls=host_calls, host_units=host_units)


def plan(low, cfg) -> DistPlan:
    """The collective plan of a captured step's lowering ``low`` under ``cfg``
    (:class:`~gpusim.capture.distributed.DistConfig`)."""
    if cfg.strategy == "ddp":
        return ddp_plan(low, cfg)
    if cfg.strategy == "fsdp":
        return fsdp_plan(low, cfg)
    return DistPlan("none", cfg.world, cfg.nproc_per_node, cfg.nnodes)
