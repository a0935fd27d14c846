"""Fusion legality, in one place: which nodes may form one kernel.

Rules (each violation raises :class:`FusionError` naming the nodes and the reason):

* **Kinds.** Pointwise, copy and inference batch-norm nodes fuse freely with each other
  (vertical chains and siblings). A reduction, softmax or normalisation joins with its
  pointwise prologue and epilogue. At most one matmul/conv/attention per group, and its
  other members must be its *epilogue* (downstream of it: bias, activation, residual
  add, BN in eval) — libraries do not fuse work into a GEMM's operand loads. The one
  exception is **horizontal** GEMM fusion: sibling matmuls that read the same input with
  the same K and dtype (Q/K/V) become one wider matmul. Unmodelled ops never fuse.
* **Iteration space.** Non-GEMM members must loop over the same number of elements
  (a reduction counts its input's), or be an epilogue over a reduction's output; what
  a code generator cannot put in one loop nest cannot be one kernel.
* **Connected.** Members are linked by data edges or by reading a common tensor
  (horizontal fusion); unrelated ops gain nothing by sharing a kernel.
* **Convex.** No path leaves the group and comes back into it: the group could not run
  as one kernel without waiting for itself.
* **Size.** At most ``MAX_GROUP_OPS`` ops and ``MAX_GROUP_TENSORS`` tensors crossing the
  boundary (register pressure; see :func:`gpusim.cost.roofline.register_pressure`).
* **Partition.** Every compute node is in exactly one group and the kernel graph
  (groups as nodes) is acyclic.
"""

from __future__ import annotations

import networkx as nx

from gpusim.graph.opgraph import group_io
from gpusim.util.errors import GpusimError
from gpusim.graph.opgraph import FREE_KINDS, GEMM_KINDS, REDUCING_KINDS, OpGraph, main_shape, numel, quotient
from gpusim.graph.ops import is_eval_batch_norm, packet_name

MAX_GROUP_OPS = 32
MAX_GROUP_TENSORS = 16
HORIZONTAL_GEMM_OPS = frozenset({"mm", "matmul", "linear", "addmm", "bmm"})


class FusionError(GpusimError):
    """An illegal group or partition; the message names the nodes and the rule."""


def fusion_class(graph: OpGraph, n: str) -> str:
    """``gemm``, ``reduction``, ``pointwise`` or ``opaque`` (never fuses)."""
    a = graph.g.nodes[n]
    k = a["kind"]
    if a.get("unmodelled") or k == "other":
        return "opaque"
    if k in GEMM_KINDS:
        return "gemm"
    if k == "norm" and is_eval_batch_norm(a["op"]):
        return "pointwise"          # inference BN is a per-channel scale and shift
    if k in REDUCING_KINDS:
        return "reduction"
    return "pointwise"


def domain(graph: OpGraph, n: str) -> int:
    """Elements the node's loop runs over: its input for reductions, else its output."""
    a = graph.g.nodes[n]
    shape = a["shape"]
    out = numel(main_shape(shape))
    if fusion_class(graph, n) == "reduction":
        ins = [graph.g.nodes[p] for p in a["reads"]]
        if ins:
            return max(numel(p["shape"][0]) if p["shape"] and isinstance(p["shape"][0], tuple)
                       else numel(p["shape"] or ()) for p in ins)
    return out


def _op_name(graph, n):
    return packet_name(graph.g.nodes[n]["op"])


def kind_violation(graph: OpGraph, members) -> str | None:
    """Why ``members`` cannot be one kernel by their kinds and loops, or None."""
    members = list(members)
    if len(members) == 1:
        return None
    cls = {n: fusion_class(graph, n) for n in members}
    opaque = [n for n in members if cls[n] == "opaque"]
    if opaque:
        return f"{opaque[0]} ({graph.g.nodes[opaque[0]]['op']}) is not modelled and cannot be fused"
    gemms = [n for n in members if cls[n] == "gemm"]
    if len(gemms) > 1:
        others = [n for n in members if cls[n] != "gemm"]
        if others:
            return (f"{', '.join(gemms)} are several matmuls/convs; horizontal GEMM fusion "
                    f"takes sibling matmuls only, without {others[0]}")
        return _horizontal_violation(graph, gemms)
    if gemms:
        g = gemms[0]
        if any(cls[n] == "reduction" for n in members):
            r = next(n for n in members if cls[n] == "reduction")
            return f"{g} ({_op_name(graph, g)}) cannot take reduction {r} ({_op_name(graph, r)}) as an epilogue"
        desc = nx.descendants(graph.dataflow, g)
        for n in members:
            if n != g and n not in desc:
                return (f"{n} ({_op_name(graph, n)}) is not downstream of {g} "
                        f"({_op_name(graph, g)}): only epilogues fuse into a matmul/conv")
        out = domain(graph, g)
        for n in members:
            if n != g and domain(graph, n) != out:
                return (f"{n} ({_op_name(graph, n)}) loops over {domain(graph, n)} elements, "
                        f"the epilogue of {g} over {out}")
        return None
    doms = {n: domain(graph, n) for n in members}
    big = max(doms.values())
    red_outs = {numel(graph.g.nodes[n]["shape"] or ()) for n in members if cls[n] == "reduction"}
    for n in members:
        if doms[n] != big and doms[n] not in red_outs:
            m = max(doms, key=doms.get)
            return (f"{n} ({_op_name(graph, n)}) loops over {doms[n]} elements and "
                    f"{m} ({_op_name(graph, m)}) over {big}: not one loop nest")
    return None


def _horizontal_violation(graph: OpGraph, gemms) -> str | None:
    for n in gemms:
        if _op_name(graph, n) not in HORIZONTAL_GEMM_OPS:
            return f"{n} ({_op_name(graph, n)}) cannot join a horizontal matmul fusion"
    shared = None
    for n in gemms:
        a = graph.g.nodes[n]
        ins = set(a["reads"])
        shared = ins if shared is None else shared & ins
    if not shared:
        return f"{', '.join(gemms)} share no input: horizontal matmul fusion needs a common operand"
    ks = {graph.g.nodes[n]["gemm"]["k"] for n in gemms}
    dts = {graph.g.nodes[n]["dtype"] for n in gemms}
    if len(ks) > 1 or len(dts) > 1:
        return f"{', '.join(gemms)} differ in K or dtype and cannot be one wider matmul"
    df = graph.dataflow
    for a in gemms:
        for b in gemms:
            if a != b and nx.has_path(df, a, b):
                return f"{b} depends on {a}: not siblings"
    return None


def connected(graph: OpGraph, members) -> bool:
    """Members linked by data edges or by a common input tensor."""
    mem = set(members)
    if len(mem) <= 1:
        return True
    u = nx.Graph()
    u.add_nodes_from(mem)
    for n in mem:
        for p in graph.g.nodes[n]["reads"]:
            if p in mem:
                u.add_edge(p, n)
            else:
                u.add_edge(("in", p), n)
    comp = nx.node_connected_component(u, next(iter(mem)))
    return mem <= comp


def convexity_violation(graph: OpGraph, members, explain: bool = True) -> list[str] | None:
    """A path that leaves the group and re-enters it, or None when convex.

    Searches forward from the group's outside successors, but only through nodes that
    come before the group's last member in topological order (no path from a later node
    can come back), so the check stays local on large graphs. With ``explain=False`` it
    returns ``[]`` instead of building the path (for search, which only needs yes/no).
    """
    mem = set(members)
    df = graph.dataflow
    idx = graph.topo_index
    last = max(idx[m] for m in mem)
    seen = set()
    stack = [s for n in mem for s in df.successors(n) if s not in mem and idx[s] < last]
    bad = None
    while stack and bad is None:
        x = stack.pop()
        if x in seen:
            continue
        seen.add(x)
        for s in df.successors(x):
            if s in mem:
                bad = x
                break
            if idx[s] < last and s not in seen:
                stack.append(s)
    if bad is None:
        return None
    if not explain:
        return []
    src = next(m for m in mem if nx.has_path(df, m, bad))
    dst = next(s for s in df.successors(bad) if s in mem)
    return nx.shortest_path(df, src, bad) + [dst]


def group_violation(graph: OpGraph, members, explain: bool = True) -> str | None:
    """Why ``members`` cannot form one kernel, or None if they can (``explain=False``:
    a shorter reason, computed faster, for search)."""
    members = list(members)
    for n in members:
        if n not in graph:
            return f"no node named {n!r}"
        if graph.g.nodes[n]["kind"] in FREE_KINDS:
            return f"{n} is a {graph.g.nodes[n]['kind']}, not a kernel; name compute nodes only"
    if len(set(members)) != len(members):
        return "a node is named twice"
    if len(members) > MAX_GROUP_OPS:
        return f"{len(members)} ops exceed the limit of {MAX_GROUP_OPS} per kernel"
    why = kind_violation(graph, members)
    if why:
        return why
    # convexity first: a group that a path leaves and re-enters is linked by data, and
    # naming that path tells the user what to add to the group
    path = convexity_violation(graph, members, explain)
    if path is not None:
        if not path:
            return "not convex"
        return f"not convex: the path {' -> '.join(path)} leaves the group and re-enters it"
    if not connected(graph, members):
        return "the nodes are neither connected by data nor share an input"
    reads, writes = group_io(graph, members)
    if len(reads) + len(writes) > MAX_GROUP_TENSORS:
        return (f"{len(reads) + len(writes)} tensors cross the kernel boundary, more than "
                f"{MAX_GROUP_TENSORS} (register pressure)")
    return None


def check_group(graph: OpGraph, members) -> None:
    why = group_violation(graph, members)
    if why:
        raise FusionError(f"cannot fuse {', '.join(members)}: {why}")


def check_partition(graph: OpGraph, groups) -> None:
    """Raise FusionError unless ``groups`` is a legal partition of the compute nodes."""
    seen: dict = {}
    for g in groups:
        for n in g:
            if n in seen:
                raise FusionError(f"{n} is in two groups")
            seen[n] = True
    missing = [n for n in graph.compute_nodes if n not in seen]
    if missing:
        raise FusionError(f"{missing[0]} is in no group")
    for g in groups:
        check_group(graph, list(g))
    q = quotient(graph, groups)
    if not nx.is_directed_acyclic_graph(q):
        cyc = nx.find_cycle(q)
        raise FusionError("the kernels form a cycle: " + " -> ".join(
            "{" + ",".join(groups[i]) + "}" for i, _ in cyc))


def is_legal_partition(graph: OpGraph, groups) -> bool:
    try:
        check_partition(graph, groups)
        return True
    except FusionError:
        return False
