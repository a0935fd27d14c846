"""Predict: a graph (or a model to capture) -> kernels -> simulated run on a GPU spec."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import networkx as nx

from .cost import CostOptions, KernelEstimate, estimate_group
from .graph import OpGraph
from .hardware import GPUSpec, load_spec
from .simulate import Timeline, check_mode, simulate


@dataclass
class Prediction:
    """A predicted run: per-kernel estimates and the simulated timing (all in µs)."""

    gpu: str
    mode: str
    graph: OpGraph
    kernels: list[KernelEstimate]
    timeline: Timeline
    spec: GPUSpec

    @property
    def device_us(self) -> float:
        return self.timeline.device_us

    @property
    def end_to_end_us(self) -> float:
        return self.timeline.end_to_end_us

    @property
    def latency_us(self) -> float:
        return self.timeline.latency_us

    @property
    def idle_us(self) -> float:
        return self.timeline.idle_us

    @property
    def unmodelled_ops(self) -> list[str]:
        return [f"{n} ({self.graph.node(n)['op']})" for n in self.graph.unmodelled]

    @property
    def flops(self) -> float:
        return sum(k.flops for k in self.kernels)

    @property
    def bytes(self) -> float:
        return sum(k.bytes for k in self.kernels)

    def to_dict(self) -> dict:
        return {
            "gpu": self.gpu, "mode": self.mode, "graph": self.graph.name,
            "device_us": self.device_us, "end_to_end_us": self.end_to_end_us,
            "latency_us": self.latency_us, "idle_us": self.idle_us,
            "host_us": self.timeline.host_us, "n_kernels": len(self.kernels),
            "flops": self.flops, "bytes": self.bytes,
            "kernels": [k.to_dict() for k in self.kernels],
            "unmodelled_ops": self.unmodelled_ops,
        }


def as_spec(gpu) -> GPUSpec:
    return gpu if isinstance(gpu, GPUSpec) else load_spec(gpu)


def as_graph(target, args=None) -> OpGraph:
    """An OpGraph as is, or capture a callable/module on ``args``."""
    if isinstance(target, OpGraph):
        return target
    from .capture import capture
    return capture(target, () if args is None else args)


def kernel_order(graph: OpGraph, groups: list[list[str]]) -> list[list[str]]:
    """Groups in an order the GPU can run them: a topological order of the kernel graph
    (ties broken by capture order, so eager order is kept where possible)."""
    pos = {n: i for i, n in enumerate(graph.compute_nodes)}
    gid = {n: i for i, grp in enumerate(groups) for n in grp}
    q = nx.DiGraph()
    q.add_nodes_from(range(len(groups)))
    for u, v in graph.dataflow.edges:
        if u in gid and v in gid and gid[u] != gid[v]:
            q.add_edge(gid[u], gid[v])
    first = [min(pos[n] for n in grp) for grp in groups]
    order = nx.lexicographical_topological_sort(q, key=lambda i: first[i])
    return [sorted(groups[i], key=pos.__getitem__) for i in order]


def views_per_kernel(graph: OpGraph, groups: list[list[str]]) -> tuple[list[int], int]:
    """For eager dispatch: how many view ops the host dispatches before each kernel."""
    kid = {grp[0]: i for i, grp in enumerate(groups) if len(grp) == 1}
    counts = [0] * len(groups)
    pending = 0
    for n in graph.order:
        k = graph.g.nodes[n]["kind"]
        if k == "view":
            pending += 1
        elif n in kid:
            counts[kid[n]] += pending
            pending = 0
    return counts, pending


def predict_groups(graph: OpGraph, groups, spec: GPUSpec, mode: str = "eager",
                   opts: CostOptions = CostOptions(), names: list[str] | None = None,
                   host_before: dict | None = None, inputs: int | None = None) -> Prediction:
    """Predict a run in which each group of compute nodes is one kernel.

    ``host_before``: extra host µs paid before the kernel whose first node (in capture
    order) is the key. ``inputs``: tensor inputs a compiled call checks (default: the
    graph's)."""
    check_mode(mode)
    if mode == "eager":
        opts = dataclasses.replace(opts, aten=True)   # eager runs ATen's own kernels
    groups = kernel_order(graph, [list(g) for g in groups])
    kernels = [estimate_group(graph, g, spec, opts) for g in groups]
    if mode == "eager":
        vb, trailing = views_per_kernel(graph, groups)
    else:
        vb, trailing = None, 0
    hb = [host_before.get(g[0], 0.0) for g in groups] if host_before else None
    tl = simulate(kernels, spec, mode, vb, trailing, host_before=hb,
                  module_calls=graph.meta.get("module_calls", 0),
                  inputs=graph.meta.get("inputs", 0) if inputs is None else inputs)
    return Prediction(spec.name, mode, graph, kernels, tl, spec)


def predict(target, args=None, gpu="h100", mode: str = "eager", groups=None,
            opts: CostOptions = CostOptions()) -> Prediction:
    """Predict how long ``target`` takes on ``gpu``.

    Parameters
    ----------
    target : callable, nn.Module or OpGraph
    args : example inputs for a callable/module (meta tensors are fine)
    gpu : spec name, alias, path to a .toml spec, or a GPUSpec
    mode : "eager" | "compiled" | "cudagraph"
    groups : optional list of node-name groups (kernels); default one kernel per op

    >>> import torch
    >>> p = predict(lambda x: x + 2, (torch.empty(2**26, device="meta"),), gpu="rtx3090ti")
    >>> round(2**26 / p.device_us / 1e3)   # G elements/s
    113
    """
    check_mode(mode)
    spec = as_spec(gpu)
    graph = as_graph(target, args)
    if groups is None:
        groups = [[n] for n in graph.compute_nodes]
    return predict_groups(graph, groups, spec, mode, opts)
