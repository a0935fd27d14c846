"""Inductor's layout optimisation: whether a compiled graph runs its convolutions (and so
the activations between them) channels-last. Read by the lowering (layout copies, cuDNN's
NHWC kernels) and by the reduction rules (a spatial reduction of a channels-last activation
is an *outer* reduction: :mod:`gpusim.lower.reductions`)."""

from __future__ import annotations

from gpusim.graph.opgraph import OpGraph
from gpusim.graph.ops import packet_name
from gpusim.lower.conv import conv_info, conv_layout


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


#: view ops that keep their input's layout (a strided input stays strided)
LAYOUT_KEEPING_VIEWS = ("dropout", "alias", "detach", "clone")
#: view ops that merge or split dims: a contiguous input stays contiguous
RESHAPING_VIEWS = ("flatten", "view", "_unsafe_view", "reshape", "unsqueeze", "squeeze")
#: view ops that reorder dims: the unit-stride dim moves with its size
PERMUTING_VIEWS = ("transpose", "permute", "t", "swapaxes", "movedim")
#: how many ops :func:`unit_size` walks back through (a residual stream: two adds a block)
STRIDED_WALK = 256


def _inner(shape) -> int | None:
    """The last size other than 1 of ``shape`` (a contiguous tensor's unit-stride dim)."""
    sizes = [int(s) for s in (shape or ()) if int(s) != 1]
    return sizes[-1] if sizes else None


def unit_size(graph: OpGraph, p: str, depth: int = 0) -> int | None:
    """The size of tensor ``p``'s unit-stride dim on the GPU, read off the graph (meta
    traces record no strides that hold on the GPU: cuDNN writes channels-last outputs a
    meta convolution does not), or None where the graph cannot tell. A kernel writes its
    output contiguous (a conv cuDNN runs channels-last: the channels); an elementwise op's
    output takes the layout of its first operand of the output's shape
    (``TensorIteratorBase::compute_strides``); a transpose or permute moves the unit dim
    with its size; a reshape of a contiguous tensor is contiguous."""
    if depth > STRIDED_WALK or p not in graph.g:
        return None
    a = graph.g.nodes[p]
    kind, name = a.get("kind"), packet_name(a.get("op", ""))
    ins = [i for i in (a.get("inputs") or a.get("reads") or ()) if i in graph.g]
    if kind == "conv":
        shape = a.get("shape") or ()
        return int(shape[1]) if conv_layout(graph, p) != "nchw" and len(shape) == 4 else _inner(shape)
    if kind == "pointwise":
        first = next((i for i in ins if graph.g.nodes[i].get("shape") == a.get("shape")), None)
        return unit_size(graph, first, depth + 1) if first else None
    if kind == "view" and ins:
        src = unit_size(graph, ins[0], depth + 1)
        if name in PERMUTING_VIEWS or name in LAYOUT_KEEPING_VIEWS:
            return src
        if name in RESHAPING_VIEWS and src is not None and \
                src == _inner(graph.g.nodes[ins[0]].get("shape")):
            return _inner(a.get("shape"))
        return None
    if kind in ("input", "view"):
        return None
    return _inner(a.get("shape"))


def strided(graph: OpGraph, p: str) -> bool | None:
    """Whether tensor ``p`` is laid out transposed on the GPU, so that a row-wise kernel
    (layer norm, a GEMM's rows) needs a contiguous copy first: True when its unit-stride
    dim (:func:`unit_size`) is not its last; None where the graph cannot tell (the sizes
    agree, or the walk stops). MLP-Mixer's residual stream stays transposed from the patch
    embedding's ``flatten(2).transpose(1, 2)`` on; ConvNeXt's permute of a channels-last
    tensor to NHWC is contiguous."""
    u = unit_size(graph, p)
    last = _inner(graph.g.nodes[p].get("shape"))
    return True if u is not None and last is not None and u != last else None
