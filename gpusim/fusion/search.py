"""Search: find a good (or the optimal) fusion partition of an OpGraph.

One interface, several algorithms, one cost (:class:`gpusim.fusion.scoring.Scorer`, which
prices a partition through the same lowering and cost model as :func:`gpusim.predict`):

``greedy``  merge the legal pair of groups with the largest predicted time saving first,
            until no merge helps (cost-model driven, like XLA's priority fusion).
``bytes``   merge the legal pair that saves the most bytes first, ignoring the cost model
            (the heuristic of torch.compile's scheduler): a baseline.
``exact``   the optimum: an integer program (``scipy.optimize.milp``) choosing among
            candidate groups so that every node is covered once at least cost, with cuts
            that forbid cyclic kernel graphs. On small graphs the candidates are *all*
            legal groups, so the answer is the optimum over all legal partitions; on large
            graphs they are legal groups of up to ``max_group`` ops, and the result says
            so (``optimal_over``) and reports the solver's gap if it stopped early.
``auto``    ``exact`` when the graph is small enough to solve quickly, else ``greedy``.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field

import networkx as nx
import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import lil_matrix

from gpusim.cost.roofline import CostOptions
from gpusim.util.errors import GpusimError
from gpusim.graph.opgraph import OpGraph, quotient
from gpusim.lower.legality import FusionError, check_partition, group_violation
from gpusim.graph.ops import is_eval_batch_norm
from gpusim.lower.partition import Partition, greedy
from gpusim.predict.pipeline import Prediction, as_graph, as_spec, predict
from gpusim.fusion.scoring import Scorer
from gpusim.hw.host import load_host
from gpusim.lower.modes import check_mode

ALGOS = ("auto", "greedy", "bytes", "exact")
EXACT_ALL_GROUPS_MAX_NODES = 14     # enumerate every legal group up to this size
AUTO_EXACT_MAX_NODES = 400


class SearchError(GpusimError):
    pass


@dataclass
class SearchResult:
    partition: Partition
    graph: OpGraph                  # the graph partitioned (after BN folding, if any)
    unfused: Prediction             # eager, one kernel per op, original graph
    fused: Prediction               # the partition in the chosen mode
    algo: str
    seconds: float
    optimal: bool = False
    optimal_over: str = ""
    gap: float | None = None
    notes: list[str] = field(default_factory=list)
    compiled: Prediction | None = None   # what torch.compile runs (default mode)

    @property
    def speedup_device(self) -> float:
        return self.unfused.device_us / self.fused.device_us if self.fused.device_us else float("inf")

    @property
    def speedup_end_to_end(self) -> float:
        return self.unfused.end_to_end_us / self.fused.end_to_end_us if self.fused.end_to_end_us else float("inf")

    @property
    def rows(self) -> list[tuple[str, Prediction]]:
        """The runs compared: eager, torch.compile, and the chosen partition."""
        out = [("unfused (eager)", self.unfused)]
        if self.compiled is not None:
            out.append(("torch.compile", self.compiled))
        out.append((f"fused ({self.fused.mode})", self.fused))
        return out

    def to_dict(self) -> dict:
        groups = []
        for k in self.fused.kernels:
            groups.append({"name": k.name, "ops": list(k.ops), "op_types": list(k.op_types),
                           "bytes_in": k.bytes_read, "bytes_out": k.bytes_written,
                           "flops": k.flops, "us": k.us, "bound": k.bound})
        return {"gpu": self.fused.gpu, "host": self.fused.host.name, "mode": self.fused.mode,
                "algo": self.algo,
                "unfused_us": self.unfused.end_to_end_us, "fused_us": self.fused.end_to_end_us,
                "unfused_device_us": self.unfused.device_us, "fused_device_us": self.fused.device_us,
                "speedup_device": self.speedup_device,
                "speedup_end_to_end": self.speedup_end_to_end,
                "n_kernels_unfused": len(self.unfused.kernels),
                "n_kernels_fused": len(self.fused.kernels), "groups": groups,
                "compiled_device_us": self.compiled.device_us if self.compiled else None,
                "compiled_us": self.compiled.end_to_end_us if self.compiled else None,
                "n_kernels_compiled": len(self.compiled.kernels) if self.compiled else None,
                "folded": list(self.partition.folded), "optimal": self.optimal,
                "optimal_over": self.optimal_over, "gap": self.gap, "seconds": self.seconds,
                "notes": self.notes}


# ---------------------------------------------------------------------------
# Graph rewrite: conv -> batch_norm (eval) folding.
def fold_conv_bn(graph: OpGraph) -> tuple[OpGraph, list[str]]:
    """Fold inference BatchNorm into the preceding convolution.

    BN's per-channel scale and shift are absorbed into the conv's weights and bias
    offline, so the BN node becomes a free alias of the conv output and its parameter
    reads vanish. Applies when the conv's only consumer is the BN.
    """
    # A rewrite never touches the caller's graph: copy() gives new attribute dicts, and
    # the nested ``reads`` dicts are replaced, never mutated, below.
    g = graph.g.copy()
    folded = []
    for n in graph.compute_nodes:
        a = g.nodes[n]
        if not is_eval_batch_norm(a["op"]):
            continue
        x = next(iter(a["reads"]), None)
        if x is None or g.nodes[x]["kind"] != "conv" or g.nodes[x]["is_output"]:
            continue
        if set(graph.dataflow.successors(x)) != {n}:
            continue
        a.update(kind="view", flops=0, bytes_read=0, bytes_written=0, base=x, reads={},
                 folded_into=x)
        if a["is_output"]:
            g.nodes[x]["is_output"] = True
            a["is_output"] = False
        # readers of the BN output now read the conv output
        for m in g.nodes:
            r = g.nodes[m].get("reads") or {}
            if n in r:
                r = {p: b for p, b in r.items() if p != n}
                r[x] = max(r.get(x, 0), g.nodes[m]["reads"][n])
                g.nodes[m]["reads"] = r
            if g.nodes[m].get("base") == n:
                g.nodes[m]["base"] = x
        folded.append(n)
    if not folded:
        return graph, []
    return OpGraph(g, graph.name, graph.meta), folded


def enumerate_groups(graph: OpGraph, max_size: int, limit: int = 200_000) -> list[frozenset]:
    """Legal groups of up to ``max_size`` compute nodes, grown from each node through
    data edges and shared inputs. Grows through illegal sets too (a set that is not
    convex may become convex when the path's middle joins), up to ``limit`` sets."""
    df = graph.dataflow
    nodes = graph.compute_nodes
    nbr = {n: set() for n in nodes}
    for u, v in df.edges:
        if u in nbr and v in nbr:
            nbr[u].add(v)
            nbr[v].add(u)
    for p in df.nodes:
        cons = [c for c in df.successors(p) if c in nbr]
        if len(cons) <= 8:
            for a, b in itertools.combinations(cons, 2):
                nbr[a].add(b)
                nbr[b].add(a)
    seen: set = set()
    legal: list = []
    frontier = [frozenset([n]) for n in nodes]
    seen.update(frontier)
    while frontier:
        nxt = []
        for s in frontier:
            if len(s) == 1 or group_violation(graph, list(s), explain=False) is None:
                legal.append(s)
            if len(s) >= max_size:
                continue
            for n in set().union(*(nbr[m] for m in s)) - s:
                t = s | {n}
                if t not in seen:
                    seen.add(t)
                    nxt.append(t)
                    if len(seen) > limit:
                        raise SearchError(f"more than {limit} candidate groups; use greedy")
        frontier = nxt
    return legal


def exact(graph: OpGraph, scorer: Scorer, max_group: int | None = None,
          time_limit: float = 20.0) -> tuple[Partition, bool, str, float | None]:
    """Optimal partition over candidate groups (integer program with cycle cuts).

    Returns ``(partition, optimal, optimal_over, gap)``.
    """

    nodes = graph.compute_nodes
    if not nodes:
        return Partition(()), True, "all legal partitions", 0.0
    n = len(nodes)
    if max_group is None:
        max_group = n if n <= EXACT_ALL_GROUPS_MAX_NODES else 8
    cands = enumerate_groups(graph, max_group)
    over = ("all legal partitions" if max_group >= n else
            f"partitions into legal groups of at most {max_group} ops")
    idx = {v: i for i, v in enumerate(nodes)}
    c = np.array([scorer.group_cost(g) for g in cands])
    A = lil_matrix((n, len(cands)))
    for j, g in enumerate(cands):
        for v in g:
            A[idx[v], j] = 1
    cover = LinearConstraint(A.tocsr(), 1, 1)
    cuts: list[np.ndarray] = []
    cut_ub: list[float] = []
    gap = None
    t0 = time.perf_counter()
    for _ in range(200):
        left = max(1.0, time_limit - (time.perf_counter() - t0))
        allc = [cover]
        if cuts:
            allc.append(LinearConstraint(np.vstack(cuts), -np.inf, np.array(cut_ub)))
        res = milp(c, integrality=np.ones(len(cands)), bounds=Bounds(0, 1), constraints=allc,
                   options={"time_limit": left})
        if res.x is None:
            raise SearchError(f"exact search failed: {res.message}")
        gap = getattr(res, "mip_gap", None)
        chosen = [cands[j] for j in np.flatnonzero(res.x > 0.5)]
        q = quotient(graph, [list(g) for g in chosen])
        try:
            cyc = nx.find_cycle(q)
        except nx.NetworkXNoCycle:
            part = Partition.of(sorted((sorted(g, key=idx.__getitem__) for g in chosen),
                                       key=lambda g: idx[g[0]]))
            optimal = res.status == 0
            return part, optimal, over, gap
        # forbid this combination of groups: at most all but one of them
        row = np.zeros(len(cands))
        ids = {cands.index(chosen[i]) for i, _ in cyc}
        row[list(ids)] = 1
        cuts.append(row)
        cut_ub.append(len(ids) - 1)
    raise SearchError("exact search did not converge (too many cyclic solutions); use greedy")


def brute_force(graph: OpGraph, scorer: Scorer) -> tuple[Partition, float]:
    """Enumerate every legal partition (small graphs only) and return the cheapest."""
    best = [None, float("inf")]
    for p in enumerate_partitions(graph):
        c = scorer.cost(p)
        if c < best[1] - 1e-12:
            best = [p, c]
    return best[0], best[1]


def enumerate_partitions(graph: OpGraph):
    """Yield every legal partition of the compute nodes (exponential: tests only)."""
    nodes = graph.compute_nodes
    groups = enumerate_groups(graph, len(nodes))
    by_first: dict = {}
    pos = {v: i for i, v in enumerate(nodes)}
    for g in groups:
        by_first.setdefault(min(g, key=pos.__getitem__), []).append(g)

    def rec(covered, chosen):
        rest = [v for v in nodes if v not in covered]
        if not rest:
            try:
                check_partition(graph, [list(g) for g in chosen])
            except FusionError:
                return
            yield Partition.of([sorted(g, key=pos.__getitem__) for g in chosen])
            return
        first = rest[0]
        for g in by_first.get(first, []):
            if not (g & covered):
                yield from rec(covered | g, chosen + [g])
    yield from rec(frozenset(), [])


# ---------------------------------------------------------------------------
def search(target, args=None, gpu="h100", mode: str = "compiled", algo: str = "auto",
           fold_bn: bool = True, opts: CostOptions = CostOptions(),
           max_group: int | None = None, memory_limit: float | None = None,
           host=None, amp=None) -> SearchResult:
    """Find a fusion partition for ``target`` and predict what it buys.

    ``unfused`` is eager PyTorch (one kernel per op); ``fused`` is the partition run in
    ``mode``. Never returns a partition predicted slower than running every op alone in
    ``mode``. ``memory_limit`` (bytes): the fused run must fit (weights, inputs and its
    activation peak, :mod:`gpusim.sim.memory`): the fastest of the searched partition,
    Inductor's own grouping and one kernel per op that fits; :class:`SearchError` when
    none does. ``host``: the host profile (name, path; default the reference host).
    ``amp``: capture ``target`` under ``torch.autocast("cuda")`` (:func:`gpusim.predict`).
    """
    check_mode(mode)
    if algo not in ALGOS:
        raise SearchError(f"unknown algorithm {algo!r}; choose one of {', '.join(ALGOS)}")
    spec, host = as_spec(gpu), load_host(host)
    graph0 = as_graph(target, args, amp)
    t0 = time.perf_counter()
    graph, folded = fold_conv_bn(graph0) if fold_bn else (graph0, [])
    scorer = Scorer(graph, spec, mode, opts, host)
    notes = []
    n = len(graph.compute_nodes)
    chosen = algo
    if algo == "auto":
        chosen = "exact" if n <= AUTO_EXACT_MAX_NODES else "greedy"
    optimal, over, gap = False, "", None
    if chosen == "exact":
        try:
            part, optimal, over, gap = exact(graph, scorer, max_group)
        except SearchError as e:
            if algo == "exact":
                raise
            notes.append(f"exact search gave up ({e}); used greedy")
            chosen = "greedy"
    if chosen in ("greedy", "bytes"):
        part = greedy(graph, scorer, "time" if chosen == "greedy" else "bytes")
    single = Partition.singletons(graph)
    if scorer.cost(part) > scorer.cost(single) + 1e-9:
        notes.append("no fusion helps: every merge was predicted slower than launching ops alone")
        part = single
    if folded:
        part = Partition(part.groups, tuple(folded))
        notes.append(f"folded {len(folded)} batch norm(s) into their convolution")
    unfused = predict(graph0, gpu=spec, mode="eager", opts=opts, host=host)
    fused = predict(graph, gpu=spec, mode=mode, partition=part, opts=opts, host=host)
    compiled = predict(graph0, gpu=spec, mode="compiled", opts=opts, host=host)
    if memory_limit is not None:
        part, fused = _fit_memory(graph, spec, mode, opts, part, fused, memory_limit, notes,
                                  host)
    return SearchResult(part, graph, unfused, fused, algo if algo != "auto" else f"auto:{chosen}",
                        time.perf_counter() - t0, optimal, over, gap, notes, compiled)


def _fit_memory(graph, spec, mode, opts, part, fused, limit, notes, host=None):
    """The fastest candidate partition whose run fits in ``limit`` bytes."""
    from gpusim.lower.lowering import inductor_groups
    from gpusim.sim.memory import fmt_bytes
    if limit <= 0:
        raise SearchError(f"--memory-limit must be a positive number of bytes, got {limit:g}")
    cands = [("searched", part, fused)]
    for label, p in (("Inductor's grouping", Partition.of(inductor_groups(graph))),
                     ("one kernel per op", Partition.singletons(graph))):
        cands.append((label, p, predict(graph, gpu=spec, mode=mode, partition=p, opts=opts,
                                        host=host)))
    fits = [c for c in cands if c[2].memory.total_bytes <= limit]
    if not fits:
        least = min(c[2].memory.total_bytes for c in cands)
        raise SearchError(f"no partition tried fits in {fmt_bytes(limit)} (the smallest needs "
                          f"{fmt_bytes(least)}: weights, inputs and activation peak)")
    label, p, pred = min(fits, key=lambda c: c[2].end_to_end_us)
    if label != "searched":
        notes.append(f"the searched partition needs {fmt_bytes(fused.memory.total_bytes)}, over "
                     f"the memory limit {fmt_bytes(limit)}: {label} fits")
    return p, pred


def whatif(target, fuse: list[list[str]], args=None, gpu="h100", mode: str = "compiled",
           opts: CostOptions = CostOptions(), host=None, amp=None) -> SearchResult:
    """Predict the effect of fusing exactly the named groups (others stay alone), issued
    by ``host`` (a host profile name or path; default the reference host); ``amp`` as
    for :func:`search`."""
    check_mode(mode)
    spec, host = as_spec(gpu), load_host(host)
    graph = as_graph(target, args, amp)
    t0 = time.perf_counter()
    named = set()
    for grp in fuse:
        for v in grp:
            if v not in graph:
                close = [c for c in graph.compute_nodes if v in c or c in v][:5]
                hint = f" (did you mean {', '.join(close)}?)" if close else ""
                raise FusionError(f"no node named {v!r} in the graph{hint}; names are as "
                                  "`gpusim predict` prints them")
            if v in named:
                raise FusionError(f"{v} is named in two --fuse groups")
            named.add(v)
    groups = [list(g) for g in fuse] + [[v] for v in graph.compute_nodes if v not in named]
    check_partition(graph, groups)
    part = Partition.of(groups)
    unfused = predict(graph, gpu=spec, mode="eager", opts=opts, host=host)
    fused = predict(graph, gpu=spec, mode=mode, partition=part, opts=opts, host=host)
    compiled = predict(graph, gpu=spec, mode="compiled", opts=opts, host=host)
    return SearchResult(part, graph, unfused, fused, "whatif", time.perf_counter() - t0,
                        compiled=compiled)
