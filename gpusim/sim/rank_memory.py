"""Memory of one rank: the single-GPU step's liveness (:mod:`gpusim.sim.memory`), changed where the wrapper
changes what is resident, kernel by kernel.

Single GPU, at kernel ``i``: ``resident`` (weights, buffers, optimizer states, inputs, BLAS workspaces,
the allocator's rounding) ``+ timeline[i]`` (what the step allocated by then: activations, and gradients,
each from the kernel that produces it to the step's end).

DDP: plus its buckets, allocated at construction and kept (the gradients' bytes: a second copy of every
gradient); with ``gradient_as_bucket_view`` the gradients are views into the buckets, so the traced
gradients are not counted again.

FSDP2: the resident parameters and optimizer states are the rank's shards in the master dtype (``1/N``
of the padded parameters: the traced ones were full, in ``param_dtype``); the traced gradients are
replaced by

- each unit's unsharded parameters (``param_dtype``) while in flight: from when its all-gather is issued
  to the end of its forward, and again from its prefetch to the end of its backward when it reshards
  after forward (the root's from its forward to its backward's end);
- each unit's unsharded gradients from the kernel producing each to the end of the unit's backward, then
  the reduce-scatter's input (``reduce_dtype``, padded) until the next unit's backward ends;
- the sharded gradients (master dtype, ``1/N``) from the unit's reduce-scatter to the step's end.

Not modelled: NCCL's own buffers (outside PyTorch's allocator: not in ``max_memory_allocated``), the
optimizer's temporaries scaled to the shard (counted full-size, in ``param_dtype``).
"""

from __future__ import annotations

from gpusim.lower.distributed import dtype_bytes, grad_kernels, kernel_phases, param_nodes
from gpusim.sim.buffers import node_bytes
from gpusim.sim.memory import capacity_bytes


def _grad_alive(low, n: int) -> tuple[list, dict]:
    """Bytes of traced gradients alive at each kernel, and each parameter's (kernel, bytes)."""
    g = low.graph.g
    pnode = param_nodes(low.graph)
    ready = grad_kernels(low)
    per = {k: (i, node_bytes(g.nodes[pnode[k]])) for k, i in ready.items() if k in pnode}
    delta = [0] * (n + 1)
    for i, b in per.values():
        delta[i] += b
    out, acc = [], 0
    for i in range(n):
        acc += delta[i]
        out.append(acc)
    return out, per


def _spans(n: int, spans) -> list:
    """``spans`` [(first, last, bytes)] summed per kernel."""
    delta = [0] * (n + 2)
    for a, b, size in spans:
        a, b = max(0, a), min(n - 1, b)
        if a <= b:
            delta[a] += size
            delta[b + 1] -= size
    out, acc = [], 0
    for i in range(n):
        acc += delta[i]
        out.append(acc)
    return out


def rank_memory(pred, dplan, cfg) -> dict:
    """Peak memory of rank 0 (module docstring): ``{"peak_bytes", "peak_kernel", "peak_phase",
    "resident_bytes", "fits", "capacity_bytes", "timeline"}`` (plain numbers; ``timeline[i]``: total bytes
    allocated while kernel ``i`` runs)."""
    low, mem = pred.lowering, pred.memory
    n = len(low.kernels)
    base = mem.baseline_bytes + mem.workspace_bytes + mem.resident_overhead_bytes
    grads, per = _grad_alive(low, n)
    world = dplan.world
    extra = [0] * n
    if dplan.strategy == "ddp":          # the Reducer's buckets exist at world 1 too
        bucket = sum(size for _, size, _ in dplan.buckets)
        view = cfg.ddp.get("gradient_as_bucket_view")
        extra = [bucket - (grads[i] if view else 0) for i in range(n)]
    elif dplan.strategy == "fsdp":
        train = low.graph.meta.get("train", {})
        traced_params = sum(node_bytes(low.graph.g.nodes[v]) for k, v in param_nodes(low.graph).items()
                            if any(k == p[0] for u in cfg.units for p in u.params))
        master = sum(u["master_bytes"] for u in dplan.units)
        ratio = (sum(u["master_bytes"] for u in dplan.units) / max(1, sum(u["param_bytes"] for u in dplan.units)))
        base += master // world - traced_params
        base += int(train.get("state_bytes", 0) * ratio / world) - train.get("state_bytes", 0)
        spans, units = [], list(dplan.units)
        by_bwd = sorted((u for u in units if u["bwd"]), key=lambda u: u["bwd"][0])
        for u in units:
            f0, f1 = u["fwd"]
            if not u["reshard_after_forward"]:
                spans.append((f0 - 1, u["bwd"][1] if u["bwd"] else f1, u["param_bytes"]))
            else:
                spans.append((f0 - 1, f1, u["param_bytes"]))
        for j, u in enumerate(by_bwd):
            b0, b1 = u["bwd"]
            if u["reshard_after_forward"]:
                spans.append((by_bwd[j - 1]["bwd"][0] if j else b0 - 1, b1, u["param_bytes"]))
        keys = {p[0]: u.module for u in cfg.units for p in u.params}
        unit_of = {u["unit"]: u for u in units}
        for k, (i, size) in per.items():
            u = unit_of.get(keys.get(k))
            if u and u["bwd"]:
                spans.append((i, u["bwd"][1], size))
        ends = sorted(u["bwd"][1] for u in by_bwd)
        for u in by_bwd:
            b1 = u["bwd"][1]
            nxt = next((e for e in ends if e > b1), b1)
            spans.append((b1, nxt, u["reduce_bytes"]))
            spans.append((b1, n - 1, u["master_bytes"] // world))
        inflight = _spans(n, spans)
        extra = [inflight[i] - grads[i] for i in range(n)]
    timeline = [base + mem.timeline[i] + extra[i] for i in range(n)] if n else [base]
    peak_kernel = max(range(len(timeline)), key=lambda i: (timeline[i], -i))
    phases = kernel_phases(low) if n else ["forward"]
    cap = capacity_bytes(pred.spec)
    peak = timeline[peak_kernel]
    return {"peak_bytes": int(peak), "peak_kernel": int(peak_kernel), "peak_phase": phases[peak_kernel],
            "resident_bytes": int(base), "fits": bool(peak <= cap), "capacity_bytes": float(cap),
            "timeline": [int(t) for t in timeline]}


__all__ = ["rank_memory", "dtype_bytes"]
