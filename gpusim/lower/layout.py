"""Inductor's layout optimisation: whether a compiled graph runs its convolutions (and so
the activations between them) channels-last. Read by the lowering (layout copies, cuDNN's
NHWC kernels) and by the reduction rules (a spatial reduction of a channels-last activation
is an *outer* reduction: :mod:`gpusim.lower.reductions`)."""

from __future__ import annotations

from gpusim.graph.opgraph import OpGraph
from gpusim.lower.conv import conv_info


# Inductor's measured channels-last speed-up per conv class (inference), from its
# scheduler's own table (torch/_inductor/graph.py, decide_layout_opt): < 1 is faster.
LAYOUT_OPT_MULTIPLIER = {"grouped": 1.358, "default": 0.823, "in_out": 0.725, "small": 0.783}


def _conv_class(c: dict) -> str:
    cout, cin_g, kh = c["Cout"], c["Cin"] // c["groups"], c["kh"]
    if c["groups"] > 1 and cin_g > 1:
        return "grouped"
    if cout <= 64 and cin_g <= 64:
        return "small"
    if cout * 2 <= cin_g and kh > 1:
        return "in_out"
    return "default"


def inductor_layout_opt(graph: OpGraph, nodes=None) -> bool:
    """Whether Inductor runs this graph's convolutions channels-last (inference rule of
    ``decide_layout_opt``): some conv, not a few convs in a large graph, and the
    FLOP-weighted class multipliers predict a speed-up."""
    nodes = graph.compute_nodes if nodes is None else nodes
    convs = [(n, conv_info(graph, n)) for n in nodes if graph.g.nodes[n]["kind"] == "conv"]
    convs = [(n, c) for n, c in convs if c is not None]
    if not convs or len(graph.order) >= 300 * len(convs):
        return False
    total = sum(graph.g.nodes[n]["flops"] for n, _ in convs)
    weighted = sum(graph.g.nodes[n]["flops"] * LAYOUT_OPT_MULTIPLIER[_conv_class(c)]
                   for n, c in convs)
    return weighted <= total
