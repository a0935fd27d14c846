"""Partitions: every compute node of an OpGraph in exactly one group (kernel).

A partition's cost is what the search minimises. It is additive over groups::

    cost(P) = sum over groups g of max(t_kernel(g), h)

where ``t_kernel`` is :func:`gpusim.cost.estimate_group` and ``h`` is the host cost of
issuing one kernel in the runtime mode (``eager_op_us``, ``compiled_kernel_us`` or, under
a CUDA graph, ``cudagraph_kernel_us``). A stream that launches kernels faster than they
run is bound by the kernels; one that launches slower is bound by the host, kernel by
kernel: the sum of maxima is the simulated end-to-end time when host and GPU take turns
being the bottleneck, and an upper bound otherwise. Additivity is what lets exact search
use an integer program over candidate groups; every reported time still comes from the
full simulation (:mod:`gpusim.simulate`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from .cost import GEMM_KINDS, CostOptions, estimate_group
from .graph import OpGraph
from .legality import check_partition


@dataclass(frozen=True)
class Partition:
    """Groups of compute-node names; views follow their producers implicitly."""

    groups: tuple[tuple[str, ...], ...]
    folded: tuple[str, ...] = ()       # BN nodes folded into their conv (graph rewrite)

    @classmethod
    def singletons(cls, graph: OpGraph) -> "Partition":
        return cls(tuple((n,) for n in graph.compute_nodes))

    @classmethod
    def of(cls, groups, folded=()) -> "Partition":
        return cls(tuple(tuple(g) for g in groups if g), tuple(folded))

    def __len__(self) -> int:
        return len(self.groups)

    def group_of(self, node: str) -> tuple[str, ...]:
        for g in self.groups:
            if node in g:
                return g
        raise KeyError(node)

    def canonical(self) -> frozenset:
        return frozenset(frozenset(g) for g in self.groups)

    def validate(self, graph: OpGraph) -> "Partition":
        check_partition(graph, [list(g) for g in self.groups])
        return self

    def to_dict(self) -> dict:
        return {"groups": [list(g) for g in self.groups], "folded": list(self.folded)}


def host_per_kernel(spec, mode: str) -> float:
    return {"eager": spec.eager_op_us, "compiled": spec.compiled_kernel_us,
            "cudagraph": spec.cudagraph_kernel_us}[mode]


@dataclass
class Scorer:
    """Cost of groups and partitions on one graph/spec/mode, memoised by group."""

    graph: OpGraph
    spec: object
    mode: str = "compiled"
    opts: CostOptions = field(default_factory=CostOptions)

    def __post_init__(self):
        self.h = host_per_kernel(self.spec, self.mode)
        if self.mode == "eager":        # as predict_groups: eager runs ATen's kernels
            self.opts = dataclasses.replace(self.opts, aten=True)
        self._cache: dict = {}

    def kernel_us(self, group) -> float:
        key = frozenset(group)
        v = self._cache.get(key)
        if v is None:
            v = estimate_group(self.graph, sorted(group, key=self._pos), self.spec, self.opts).us
            self._cache[key] = v
        return v

    @property
    def _pos(self):
        p = getattr(self, "_posmap", None)
        if p is None:
            p = {n: i for i, n in enumerate(self.graph.compute_nodes)}
            self._posmap = p
        return p.__getitem__

    def group_cost(self, group) -> float:
        return max(self.kernel_us(group), self.h)

    def cost(self, partition) -> float:
        groups = partition.groups if isinstance(partition, Partition) else partition
        return sum(self.group_cost(g) for g in groups)


def as_compiled_by_inductor(graph: OpGraph, groups) -> list[list[str]]:
    """The kernels torch.compile (default settings) runs for each group of a partition.

    Inductor calls library GEMMs, convolutions and attention as extern kernels: it does
    not fuse a pointwise epilogue into cuBLAS/cuDNN, nor concatenate sibling matmuls
    (that takes ``max_autotune`` templates). So a group ``{mm, add, relu}`` runs as
    ``{mm}`` and ``{add, relu}``, and ``{q, k, v}`` as three GEMMs. Groups without a GEMM
    are one generated kernel. The validation harness records the kernels each group
    really became; this is what gpusim predicts for them.
    """
    out = []
    for g in groups:
        gemms = [n for n in g if graph.g.nodes[n]["kind"] in GEMM_KINDS]
        rest = [n for n in g if n not in gemms]
        out += [[n] for n in gemms]
        if rest:
            out.append(rest)
    return out

