"""Lower: the one answer to "which kernels run" for a graph and a mode.

Every consumer — :func:`gpusim.predict`, :func:`gpusim.search` (its eager, torch.compile
and best-partition rows), :func:`gpusim.whatif`, the partition scorer, the memory model
and ``validation/accuracy`` — calls :func:`lower`; nothing re-derives the kernel list.

Modes (the runtime that issues the kernels):

``eager``      PyTorch's own dispatch, op by op: one ATen or library kernel per compute op
               (cuBLAS/cuDNN/attention for GEMM-like ops).
``compiled``   ``torch.compile`` in its default mode: Inductor fuses pointwise and
               reduction ops (here: the bytes-greedy partition over legal groups, the
               heuristic its scheduler follows) and calls GEMMs, convolutions and
               attention as extern library kernels — it fuses no epilogue into cuBLAS or
               cuDNN and does not concatenate sibling matmuls (that takes
               ``max_autotune`` templates).
``cudagraph``  the compiled kernels replayed as one CUDA graph
               (``torch.compile(mode="reduce-overhead")``).

A ``partition`` (groups of compute nodes chosen by a user or the search) replaces the
runtime's own grouping; the runtime still realises it: under ``compiled``/``cudagraph``
a group's GEMM runs as its extern kernel and the rest as one generated kernel; under
``eager`` a group is one hand-fused kernel launched from eager PyTorch (a single op stays
ATen's own kernel).
"""

from __future__ import annotations

from dataclasses import dataclass

from .cost import group_io
from .graph import GEMM_KINDS, LIBRARY_KINDS, OpGraph, kernel_order
from .legality import check_partition
from .partition import Partition, greedy
from .simulate import check_mode

#: How a kernel is implemented; the cost model and the host model key on it.
IMPLS = ("aten", "library", "generated")


@dataclass(frozen=True)
class Kernel:
    """One kernel that runs: the compute nodes it computes and who wrote it.

    ``impl``: ``"aten"`` (eager PyTorch's own elementwise/reduction/norm kernels),
    ``"library"`` (cuBLAS, cuDNN, attention kernels), ``"generated"`` (Inductor's
    Triton kernels, or a hand-fused kernel of a partition). ``region_inputs``: set when
    the kernel opens a separately compiled region (how the validation harness executes
    a partition): the region's tensor inputs, each checked on entry.
    """

    ops: tuple[str, ...]
    impl: str
    region_inputs: int | None = None


@dataclass(frozen=True)
class Lowering:
    """The kernels of one graph in one mode, in the order the GPU runs them."""

    graph: OpGraph
    mode: str
    kernels: tuple[Kernel, ...]
    partition: Partition | None = None

    @property
    def groups(self) -> list[list[str]]:
        return [list(k.ops) for k in self.kernels]


def _single_impl(graph: OpGraph, node: str) -> str:
    return "library" if graph.g.nodes[node]["kind"] in LIBRARY_KINDS else "aten"


def realize(graph: OpGraph, group, mode: str) -> list[Kernel]:
    """The kernels one group of compute nodes becomes under ``mode``'s runtime."""
    group = list(group)
    if mode == "eager":
        if len(group) == 1:
            return [Kernel((group[0],), _single_impl(graph, group[0]))]
        return [Kernel(tuple(group), "generated")]
    gemms = [n for n in group if graph.g.nodes[n]["kind"] in GEMM_KINDS]
    rest = [n for n in group if n not in gemms]
    out = [Kernel((n,), "library") for n in gemms]
    if rest:
        out.append(Kernel(tuple(rest), "generated"))
    return out


def inductor_groups(graph: OpGraph) -> list[list[str]]:
    """The groups Inductor's scheduler fuses: merge the legal pair of groups that saves
    the most bytes first, until none saves any."""
    return [list(g) for g in greedy(graph, objective="bytes").groups]


def lower(graph: OpGraph, mode: str = "eager", partition=None,
          regions: bool = False) -> Lowering:
    """Which kernels run for ``graph`` in ``mode``.

    Parameters
    ----------
    graph : OpGraph
    mode : "eager" | "compiled" | "cudagraph"
    partition : optional :class:`Partition` or list of node-name groups; checked for
        legality (raises :class:`~gpusim.legality.FusionError`)
    regions : each group of ``partition`` runs as its own compiled region (the
        validation harness's way of executing a partition)

    >>> from gpusim.graph import GraphBuilder
    >>> b = GraphBuilder(); x = b.input("x", (1024,))
    >>> _ = b.op("a", "pointwise", [x]); _ = b.op("r", "pointwise", ["a"]); b.output("r")
    >>> g = b.build()
    >>> [k.ops for k in lower(g, "eager").kernels], [k.ops for k in lower(g, "compiled").kernels]
    ([('a',), ('r',)], [('a', 'r')])
    """
    check_mode(mode)
    if partition is not None:
        part = partition if isinstance(partition, Partition) else Partition.of(partition)
        groups = [list(g) for g in part.groups]
        check_partition(graph, groups)
    elif mode == "eager":
        part, groups = None, [[n] for n in graph.compute_nodes]
    else:
        part, groups = None, inductor_groups(graph)
    kernels: list[Kernel] = []
    for g in kernel_order(graph, groups):
        ks = realize(graph, g, mode)
        if regions:            # the region is entered before its first kernel runs
            first = min(range(len(ks)), key=lambda i: graph.position[ks[i].ops[0]])
            ks[first] = Kernel(ks[first].ops, ks[first].impl, len(group_io(graph, g)[0]))
        kernels += ks
    ordered = kernel_order(graph, [k.ops for k in kernels])
    by_ops = {k.ops: k for k in kernels}
    return Lowering(graph, mode, tuple(by_ops[tuple(g)] for g in ordered), part)
