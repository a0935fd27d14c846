"""Partitions: every compute node of an OpGraph in exactly one group (kernel), and the
greedy merge that builds them (used by the search; the compiled lowering has its own
rules in :mod:`gpusim.lower.inductor`). Scoring lives in :mod:`gpusim.fusion.scoring`.
"""

from __future__ import annotations

import heapq
import itertools
import random
from dataclasses import dataclass

import networkx as nx

from gpusim.graph.opgraph import group_io
from gpusim.graph.opgraph import OpGraph, quotient
from gpusim.lower.legality import check_partition, group_violation


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


def _neighbour_pairs(graph: OpGraph, gid: dict) -> set:
    pairs = set()
    df = graph.dataflow
    for u, v in df.edges:
        if u in gid and v in gid and gid[u] != gid[v]:
            pairs.add((min(gid[u], gid[v]), max(gid[u], gid[v])))
    for p in df.nodes:
        cons = sorted({gid[c] for c in df.successors(p) if c in gid})
        if 1 < len(cons) <= 8:
            for a, b in itertools.combinations(cons, 2):
                pairs.add((a, b))
    return pairs


def _io_bytes(graph, members) -> float:
    r, w = group_io(graph, members)
    return float(sum(r.values()) + sum(w.values()))


def greedy(graph: OpGraph, scorer=None, objective: str = "time", seed: int = 0) -> Partition:
    """Merge the best legal pair of groups until no merge improves ``objective``
    (``"time"``, ``"bytes"``, or ``"random"``: random legal merges, used by the
    validation harness to measure a spread of partitions). ``scorer`` (with a
    ``group_cost(group)`` method, :class:`gpusim.fusion.scoring.Scorer`) is needed for
    ``"time"`` only."""
    if objective == "time" and scorer is None:
        raise ValueError("greedy(objective='time') needs a scorer")
    rng = random.Random(seed)
    groups: dict[int, frozenset] = {i: frozenset([n]) for i, n in enumerate(graph.compute_nodes)}
    gid = {n: i for i, g in groups.items() for n in g}
    q = quotient(graph, [list(groups[i]) for i in range(len(groups))])
    version = {i: 0 for i in groups}
    heap: list = []

    def gain(a, b):
        merged = groups[a] | groups[b]
        if group_violation(graph, list(merged), explain=False):
            return None
        if objective == "random":
            return rng.random() if rng.random() < 0.5 else None
        if objective == "time":
            return scorer.group_cost(groups[a]) + scorer.group_cost(groups[b]) - scorer.group_cost(merged)
        return _io_bytes(graph, groups[a]) + _io_bytes(graph, groups[b]) - _io_bytes(graph, merged)

    def creates_cycle(a, b):
        for x, y in ((a, b), (b, a)):
            for s in q.successors(x):
                if s != y and nx.has_path(q, s, y):
                    return True
        return False

    def push(a, b):
        s = gain(a, b)
        if s is not None and s > 1e-9:
            heapq.heappush(heap, (-s, a, b, version[a], version[b]))

    for a, b in _neighbour_pairs(graph, gid):
        push(a, b)
    while heap:
        _, a, b, va, vb = heapq.heappop(heap)
        if a not in groups or b not in groups or version[a] != va or version[b] != vb:
            continue
        if creates_cycle(a, b):
            continue
        groups[a] = groups[a] | groups.pop(b)
        version[a] += 1
        for n in groups[a]:
            gid[n] = a
        q = nx.contracted_nodes(q, a, b, self_loops=False)
        # re-score the merged group's neighbours
        nbrs = set(q.predecessors(a)) | set(q.successors(a))
        for n in groups[a]:
            for p in graph.g.nodes[n]["reads"]:
                for c in graph.dataflow.successors(p):
                    if c in gid and gid[c] != a:
                        nbrs.add(gid[c])
        for c in nbrs:
            if c in groups and c != a:
                push(min(a, c), max(a, c))
    pos = graph.position.__getitem__
    ordered = [sorted(g, key=pos) for g in groups.values()]
    return Partition.of(sorted(ordered, key=lambda g: pos(g[0])))
