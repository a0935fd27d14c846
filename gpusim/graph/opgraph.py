"""The OpGraph: a networkx DAG of operators annotated with FLOPs and bytes.

Counting lives here and in :mod:`gpusim.graph.ops`; timing lives in :mod:`gpusim.cost.kernel`.
Neither knows the other's internals (the XLA split between cost analysis and
performance model).

Node attributes (every node):
    op            aten op name (``"aten.add.Tensor"``), ``"input"`` for graph inputs
    kind          one of :data:`KINDS`
    shape, dtype  output shape (tuple) and dtype name (``"float32"``)
    flops         floating-point operations of the op as a standalone kernel
    bytes_read    bytes the op reads as a standalone kernel (broadcasts at real size)
    bytes_written bytes it writes
    inputs        ordered list of producer node names (data edges)
    base          for a view: the non-view node whose tensor it aliases; else itself
    is_output     whether its tensor leaves the graph
    returned      (captured graphs) this node itself is one of the graph's outputs; a view
                  of a multi-output op's result names which of its tensors leaves
    unmodelled    True when the op is outside the registry (conservative estimate)
    reads         for compute nodes: ``{base producer: bytes read of it}``
    gemm          for matmul/conv/attention: ``{"b","m","n","k","unit_dtype"}``

Edges carry ``bytes``: how many bytes the consumer reads of that producer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from typing import Iterable, Mapping

import networkx as nx

from gpusim.util.errors import GpusimError

# The one kind taxonomy. Every node has one of KINDS; the sets below are the only
# groupings of kinds anywhere in gpusim.
KINDS = ("input", "view", "pointwise", "reduction", "norm", "matmul", "conv",
         "attention", "copy", "gather", "other")
#: Kinds that launch no kernel and move no bytes.
FREE_KINDS = frozenset({"input", "view"})
#: GEMM-like kinds: tensor-core work, run by cuBLAS/cuDNN/attention libraries.
GEMM_KINDS = frozenset({"matmul", "conv", "attention"})
#: Kinds eager PyTorch sends through a library or fused kernel (more dispatch layers).
LIBRARY_KINDS = GEMM_KINDS | {"norm"}
#: Kinds whose kernel reduces over an axis (block-wide reductions).
REDUCING_KINDS = frozenset({"reduction", "norm"})

#: 16-bit floating dtypes (tensor-core types, and the library paths that differ for them).
HALF_DTYPES = frozenset({"float16", "bfloat16"})

DTYPE_BYTES = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "int64": 8,
               "int32": 4, "int16": 2, "int8": 1, "uint8": 1, "bool": 1,
               "complex64": 8, "float8_e4m3fn": 1, "float8_e5m2": 1}


class GraphError(GpusimError):
    """A graph is malformed (names the offending node)."""


class OpGraph:
    """A DAG of aten operators. Wraps a :class:`networkx.DiGraph` (``.g``).

    Build one with :func:`gpusim.capture.tracing.capture` or :class:`GraphBuilder`.
    """

    def __init__(self, g: nx.DiGraph, name: str = "graph", meta: dict | None = None):
        self.g = g
        self.name = name
        # facts about the whole program: ``module_calls`` (nn.Module calls per forward),
        # ``inputs`` (tensor inputs, parameters included)
        self.meta = dict(meta or {})
        if not nx.is_directed_acyclic_graph(g):
            raise GraphError(f"graph {name!r} has a cycle: {nx.find_cycle(g)}")

    # -- basic queries -------------------------------------------------
    def __len__(self) -> int:
        return self.g.number_of_nodes()

    def __contains__(self, name: str) -> bool:
        return name in self.g

    def node(self, name: str) -> dict:
        try:
            return self.g.nodes[name]
        except KeyError:
            raise GraphError(f"no node named {name!r} in graph {self.name!r}") from None

    @cached_property
    def order(self) -> list[str]:
        """All nodes in a deterministic topological order (capture order where possible)."""
        index = {n: i for i, n in enumerate(self.g.nodes)}
        return list(nx.lexicographical_topological_sort(self.g, key=index.__getitem__))

    @cached_property
    def compute_nodes(self) -> list[str]:
        """Nodes that launch a kernel in eager mode, topologically ordered."""
        return [n for n in self.order if self.g.nodes[n]["kind"] not in FREE_KINDS]

    @cached_property
    def view_nodes(self) -> list[str]:
        return [n for n in self.order if self.g.nodes[n]["kind"] == "view"]

    @cached_property
    def unmodelled(self) -> list[str]:
        return [n for n in self.compute_nodes if self.g.nodes[n].get("unmodelled")]

    @cached_property
    def dataflow(self) -> nx.DiGraph:
        """Compute nodes plus the inputs they read, with views resolved away.

        Edge ``(p, c)`` carries ``bytes``: what compute node ``c`` reads of ``p``'s tensor.
        This is the graph fusion works on: a view never stands between two kernels.
        """
        d = nx.DiGraph()
        for n in self.compute_nodes:
            d.add_node(n)
            for p, b in self.g.nodes[n]["reads"].items():
                d.add_edge(p, n, bytes=b)
        return d

    @cached_property
    def position(self) -> dict:
        """Capture-order position of each compute node (ties in kernel orders break on it)."""
        return {n: i for i, n in enumerate(self.compute_nodes)}

    @cached_property
    def topo_index(self) -> dict:
        """Position of each dataflow node in one topological order: a path from u to v
        exists only if ``topo_index[u] < topo_index[v]``."""
        return {n: i for i, n in enumerate(nx.topological_sort(self.dataflow))}

    def consumers(self, name: str) -> list[str]:
        """Compute nodes that read ``name``'s tensor (through any views)."""
        return list(self.dataflow.successors(name)) if name in self.dataflow else []

    def output_bytes(self, name: str) -> int:
        return int(self.g.nodes[name]["bytes_written"])

    # -- totals ----------------------------------------------------------
    def totals(self) -> dict:
        nodes = [self.g.nodes[n] for n in self.compute_nodes]
        return {
            "nodes": len(self.g), "kernels": len(nodes),
            "flops": sum(a["flops"] for a in nodes),
            "bytes_read": sum(a["bytes_read"] for a in nodes),
            "bytes_written": sum(a["bytes_written"] for a in nodes),
        }

    # -- serialisation (validation records store the graph that was measured) --
    def to_dict(self) -> dict:
        nodes = []
        for n in self.g.nodes:
            a = dict(self.g.nodes[n])
            a["name"] = n
            a["shape"] = list(a["shape"]) if a.get("shape") is not None else None
            nodes.append(a)
        return {"name": self.name, "meta": self.meta, "nodes": nodes,
                "edges": [[u, v, d.get("bytes", 0)] for u, v, d in self.g.edges(data=True)]}

    @classmethod
    def from_dict(cls, data: Mapping) -> "OpGraph":
        g = nx.DiGraph()
        for a in data["nodes"]:
            a = dict(a)
            name = a.pop("name")
            if a.get("shape") is not None:
                a["shape"] = _as_shape(a["shape"])
            g.add_node(name, **a)
        for u, v, b in data["edges"]:
            g.add_edge(u, v, bytes=b)
        return cls(g, data.get("name", "graph"), data.get("meta"))

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    def __repr__(self) -> str:
        t = self.totals()
        return (f"OpGraph({self.name!r}, {t['nodes']} nodes, {t['kernels']} kernels, "
                f"{t['flops']:.3g} FLOP, {t['bytes_read'] + t['bytes_written']:.3g} B)")


def quotient(graph: OpGraph, groups) -> nx.DiGraph:
    """The kernel graph of a partition: node ``i`` is ``groups[i]``; an edge ``i -> j``
    when a member of group ``j`` reads a tensor a member of group ``i`` produces."""
    gid = {n: i for i, g in enumerate(groups) for n in g}
    q = nx.DiGraph()
    q.add_nodes_from(range(len(groups)))
    for u, v in graph.dataflow.edges:
        if u in gid and v in gid and gid[u] != gid[v]:
            q.add_edge(gid[u], gid[v])
    return q


def kernel_order(graph: OpGraph, groups) -> list[list[str]]:
    """Groups in an order the GPU can run them: a topological order of the kernel graph,
    ties broken by capture order (so eager order is kept where possible); members sorted
    by capture order."""
    groups = [list(g) for g in groups]
    pos = graph.position
    q = quotient(graph, groups)
    first = [min(pos[n] for n in grp) for grp in groups]
    order = nx.lexicographical_topological_sort(q, key=lambda i: first[i])
    return [sorted(groups[i], key=pos.__getitem__) for i in order]


def _as_shape(s):
    if s and isinstance(s[0], list):
        return tuple(tuple(x) for x in s)
    return tuple(s)


def main_shape(shape) -> tuple:
    """The shape of a node's (first) output: nodes with several outputs store a tuple of
    shapes."""
    return tuple(shape[0]) if shape and isinstance(shape[0], tuple) else tuple(shape or ())


def numel(shape: Iterable[int]) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


@dataclass
class GraphBuilder:
    """Build an :class:`OpGraph` by hand, without torch (tests, hand-written cases).

    >>> b = GraphBuilder()
    >>> x = b.input("x", (1024,))
    >>> y = b.op("relu", "pointwise", [x])
    >>> b.output(y); g = b.build()
    >>> g.node("relu")["bytes_read"]
    4096
    """

    name: str = "graph"

    def __post_init__(self):
        self.g = nx.DiGraph()

    def _nbytes(self, shape, dtype) -> int:
        return numel(shape) * DTYPE_BYTES[dtype]

    def input(self, name: str, shape, dtype: str = "float32") -> str:
        self.g.add_node(name, op="input", kind="input", shape=tuple(shape), dtype=dtype,
                        flops=0, bytes_read=0, bytes_written=0, inputs=[], base=name,
                        is_output=False, unmodelled=False, reads={})
        return name

    def op(self, name: str, kind: str, inputs: list[str], shape=None, dtype=None,
           flops: float | None = None, gemm: dict | None = None, op: str | None = None,
           reads: dict | None = None) -> str:
        """Add an operator. Defaults: output like the first input, 1 FLOP per output
        element, reads each input whole, writes its output once."""
        if kind not in KINDS:
            raise GraphError(f"node {name!r}: unknown kind {kind!r}; expected one of {KINDS}")
        if name in self.g:
            raise GraphError(f"node {name!r} already exists")
        for i in inputs:
            if i not in self.g:
                raise GraphError(f"node {name!r}: input {i!r} does not exist")
        first = self.g.nodes[inputs[0]] if inputs else {"shape": (1,), "dtype": "float32"}
        shape = tuple(shape) if shape is not None else first["shape"]
        dtype = dtype or first["dtype"]
        base = self.g.nodes[inputs[0]]["base"] if kind == "view" else name
        if kind == "view":
            rd, wr, fl, rmap = 0, 0, 0, {}
        else:
            rmap = dict(reads) if reads is not None else {}
            if reads is None:
                for i in inputs:
                    a = self.g.nodes[i]
                    rmap[a["base"]] = max(rmap.get(a["base"], 0), self._nbytes(a["shape"], a["dtype"]))
            rd = sum(rmap.values())
            wr = self._nbytes(shape, dtype)
            fl = numel(shape) if flops is None else flops
        self.g.add_node(name, op=op or f"aten.{name}", kind=kind, shape=shape, dtype=dtype,
                        flops=fl, bytes_read=rd, bytes_written=wr, inputs=list(inputs),
                        base=base, is_output=False, unmodelled=False, reads=rmap,
                        gemm=gemm)
        for i in inputs:
            a = self.g.nodes[i]
            self.g.add_edge(i, name, bytes=0 if kind == "view" else self._nbytes(a["shape"], a["dtype"]))
        return name

    def matmul(self, name: str, a: str, b: str, m: int, n: int, k: int, batch: int = 1,
               dtype: str = "float32") -> str:
        shape = (batch, m, n) if batch > 1 else (m, n)
        return self.op(name, "matmul", [a, b], shape=shape, dtype=dtype,
                       flops=2 * batch * m * n * k,
                       gemm={"b": batch, "m": m, "n": n, "k": k, "unit_dtype": dtype})

    def output(self, *names: str) -> None:
        for n in names:
            self.g.nodes[self.g.nodes[n]["base"]]["is_output"] = True

    def build(self) -> OpGraph:
        return OpGraph(self.g, self.name)


def group_io(graph: OpGraph, members) -> tuple[dict, dict]:
    """Tensors crossing a group's boundary: ``(reads, writes)``.

    ``reads``: ``{producer: bytes}`` for producers outside the group (max over readers
    of one tensor: a fused kernel loads it once). ``writes``: ``{member: bytes}`` for
    members whose tensor is read outside the group or is a graph output.
    """
    mem = set(members)
    reads: dict = {}
    writes: dict = {}
    df = graph.dataflow
    for n in members:
        for p, b in graph.g.nodes[n]["reads"].items():
            if p not in mem:
                reads[p] = max(reads.get(p, 0), b)
        a = graph.g.nodes[n]
        if a["is_output"] or any(s not in mem for s in df.successors(n)):
            writes[n] = a["bytes_written"]
    return reads, writes
