"""The partition scorer: what the search minimises, through the same lowering and cost
that :func:`gpusim.predict` uses.

A partition's cost is additive over its groups::

    cost(P) = sum over groups g, over the kernels k that g lowers to, of max(t(k), h(k))

where ``t`` is :func:`gpusim.cost.kernel.estimate_kernel` and ``h`` the per-kernel overhead of
the runtime (:func:`gpusim.sim.timeline.kernel_overhead_us`: host dispatch in eager and
compiled mode, the inter-kernel gap in a CUDA graph). A group lowers as the runtime
realises it (:func:`gpusim.lower.lowering.realize`): under torch.compile a GEMM with an epilogue
is two kernels, so the search is not rewarded for a fusion Inductor would not do. A
stream that launches faster than it runs is bound by the kernels, one that launches
slower by the host, kernel by kernel: the sum of maxima equals the simulated end-to-end
time when host and GPU take turns being the bottleneck and bounds it otherwise.
Additivity is what lets exact search use an integer program over candidate groups;
every reported time still comes from the full simulation.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpusim.cost.kernel import estimate_kernel, kernel_us
from gpusim.cost.roofline import CostOptions
from gpusim.graph.opgraph import OpGraph
from gpusim.hw.host import load_host
from gpusim.lower.lowering import realize
from gpusim.lower.partition import Partition
from gpusim.sim.timeline import kernel_overhead_us
from gpusim.lower.modes import check_mode


@dataclass
class Scorer:
    """Cost of groups and partitions on one graph/spec/mode, memoised by group."""

    graph: OpGraph
    spec: object
    mode: str = "compiled"
    opts: CostOptions = field(default_factory=CostOptions)
    host: object = None     # a host profile (name, path); None: the reference host

    def __post_init__(self):
        check_mode(self.mode)
        self.host = load_host(self.host)
        self._cache: dict = {}

    def group_cost(self, group) -> float:
        key = frozenset(group)
        v = self._cache.get(key)
        if v is None:
            pos = self.graph.position.__getitem__
            v = 0.0
            for k in realize(self.graph, sorted(group, key=pos), self.mode, self.spec, price=kernel_us):
                est = estimate_kernel(self.graph, k, self.spec, self.opts)
                v += max(est.us, kernel_overhead_us(est, self.host, self.mode,
                                                    len(self.graph.compute_nodes), self.spec))
            self._cache[key] = v
        return v

    def cost(self, partition) -> float:
        groups = partition.groups if isinstance(partition, Partition) else partition
        return sum(self.group_cost(g) for g in groups)
