"""Partitions, legality and search: invariants on random DAGs, and the classics."""

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpusim.capture.tracing import capture
from gpusim.graph.opgraph import group_io
from gpusim.models.examples import build_example
from gpusim.graph.opgraph import GraphBuilder
from gpusim.hw.spec import load_spec
from gpusim.lower.legality import FusionError, check_partition, is_legal_partition
from gpusim.lower.partition import Partition
from gpusim.fusion.scoring import Scorer
from gpusim.fusion.search import brute_force, exact, greedy, search, whatif

H100 = load_spec("h100")


@st.composite
def random_dags(draw, max_nodes=10):
    """Random op DAGs: pointwise chains and branches over (rows, 64) tensors, with
    reductions to (rows,) and matmuls; sizes from launch-bound to DRAM-bound."""
    rows = draw(st.sampled_from([64, 4096, 1 << 16]))
    n = draw(st.integers(2, max_nodes))
    b = GraphBuilder("random")
    full = [b.input("x", (rows, 64)), b.input("y", (rows, 64))]
    small = []
    w = b.input("w", (64, 64))
    for i in range(n):
        kind = draw(st.sampled_from(["pointwise"] * 4 + ["reduction", "matmul"]))
        name = f"n{i}"
        if kind == "matmul":
            a = draw(st.sampled_from(full))
            full.append(b.matmul(name, a, w, rows, 64, 64))
        elif kind == "reduction":
            a = draw(st.sampled_from(full))
            small.append(b.op(name, "reduction", [a], shape=(rows,), flops=rows * 64))
        else:
            pool = full + small if draw(st.booleans()) or not small else small
            srcs = draw(st.lists(st.sampled_from(pool), min_size=1, max_size=2, unique=True))
            shapes = {b.g.nodes[s]["shape"] for s in srcs}
            if len(shapes) > 1:   # broadcast a (rows,) operand over (rows, 64)
                srcs = [s for s in srcs if b.g.nodes[s]["shape"] == (rows, 64)] or srcs[:1]
            out = b.g.nodes[srcs[0]]["shape"]
            node = b.op(name, "pointwise", srcs, shape=out)
            (full if out == (rows, 64) else small).append(node)
    last = f"n{n - 1}"
    b.output(last)
    for s in full + small:
        if s.startswith("n") and not any(True for _ in b.g.successors(s)):
            b.output(s)
    return b.build()


MODES = st.sampled_from(["eager", "compiled", "cudagraph"])
FAST = settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))


@FAST
@given(random_dags(), MODES, st.sampled_from(["greedy", "bytes", "exact"]))
def test_search_returns_legal_acyclic_never_slower(g, mode, algo):
    scorer = Scorer(g, H100, mode)
    res = search(g, gpu=H100, mode=mode, algo=algo)
    check_partition(res.graph, [list(x) for x in res.partition.groups])
    assert scorer.cost(res.partition) <= scorer.cost(Partition.singletons(g)) + 1e-9
    # fusing never increases bytes moved
    unf = sum(sum(group_io(g, [n])[0].values()) + sum(group_io(g, [n])[1].values())
              for n in g.compute_nodes)
    fus = sum(sum(group_io(g, list(x))[0].values()) + sum(group_io(g, list(x))[1].values())
              for x in res.partition.groups)
    assert fus <= unf


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(random_dags(max_nodes=9), MODES)
def test_exact_equals_brute_force(g, mode):
    scorer = Scorer(g, H100, mode)
    part, optimal, over, _ = exact(g, scorer)
    best, cost = brute_force(g, scorer)
    assert optimal and over == "all legal partitions"
    assert scorer.cost(part) == pytest.approx(cost, rel=1e-9, abs=1e-9)
    assert scorer.cost(part) <= scorer.cost(greedy(g, scorer)) + 1e-9
    assert scorer.cost(part) <= scorer.cost(greedy(g, scorer, "bytes")) + 1e-9


def test_exact_equals_brute_force_twelve_nodes():
    b = GraphBuilder()
    x = b.input("x", (4096, 64))
    prev = x
    names = []
    for i in range(12):
        src = [prev] if i % 3 else [prev, x]
        prev = b.op(f"p{i}", "pointwise", src)
        names.append(prev)
    b.output(prev)
    g = b.build()
    scorer = Scorer(g, H100, "compiled")
    part, optimal, over, _ = exact(g, scorer)
    _, cost = brute_force(g, scorer)
    assert optimal and scorer.cost(part) == pytest.approx(cost)
    assert len(part) == 1          # the whole chain is one kernel


def _groups_of(res):
    return [sorted(res.graph.node(n)["op"].split(".")[1] for n in grp)
            for grp in res.partition.groups]


def _search_example(name, mode="compiled", **sizes):
    fn, args = build_example(name, **sizes)
    return search(capture(fn, args, name=name), gpu="h100", mode=mode, algo="exact")


def test_classic_add_relu_mul_is_one_kernel():
    r = _search_example("add_relu_mul")
    assert len(r.partition) == 1
    assert r.speedup_device > 2.0


def test_classic_gelu_and_softmax_are_one_kernel():
    assert len(_search_example("gelu_tanh").partition) == 1
    assert len(_search_example("softmax_manual").partition) == 1


def test_classic_conv_bn_relu_folds_bn_and_fuses_relu():
    # hand-fused kernels (mode eager): the conv takes BN (folded) and ReLU as epilogue
    r = _search_example("conv_bn_relu", mode="eager")
    assert r.partition.folded
    assert len(r.partition) == 1
    ops = _groups_of(r)[0]
    assert "conv2d" in ops and "relu" in ops
    # torch.compile calls cuDNN as an extern kernel: no epilogue, ReLU runs apart (and
    # Inductor's layout optimisation copies the NCHW input and weight to NHWC first)
    rc = _search_example("conv_bn_relu")
    assert rc.partition.folded
    assert [k.role for k in rc.fused.kernels] == ["aux", "aux", "main", "main"]


def test_classic_qkv_is_one_wide_matmul():
    # a hand-written kernel may concatenate Q/K/V; Inductor (default mode) does not
    assert len(_search_example("qkv", mode="eager").partition) == 1
    assert len(_search_example("qkv").fused.kernels) == 3


def test_whatif_errors_are_clear():
    fn, args = build_example("add_relu_mul", n=1024)
    g = capture(fn, args)
    names = g.compute_nodes
    with pytest.raises(FusionError, match="no node named"):
        whatif(g, [["nope", names[0]]], gpu="h100")
    with pytest.raises(FusionError, match="two --fuse"):
        whatif(g, [[names[0]], [names[0], names[1]]], gpu="h100")
    # first and last without the middle: the path leaves and re-enters
    with pytest.raises(FusionError, match="not convex"):
        whatif(g, [[names[0], names[2]]], gpu="h100")
    r = whatif(g, [names], gpu="h100")
    assert len(r.fused.kernels) == 1


def test_illegal_kinds_named():
    b = GraphBuilder()
    x = b.input("x", (256, 256))
    w = b.input("w", (256, 256))
    p = b.op("pre", "pointwise", [x])
    m = b.matmul("mm", p, w, 256, 256, 256)
    b.output(m)
    g = b.build()
    with pytest.raises(FusionError, match="not downstream"):
        check_partition(g, [["pre", "mm"]])
    assert is_legal_partition(g, [["pre"], ["mm"]])


def test_empty_graph_and_nothing_to_fuse():
    r = search(capture(lambda x: x.view(-1), (torch.empty(4, 4, device="meta"),)), gpu="h100")
    assert len(r.partition) == 0
    r = search(capture(lambda x: x + 1, (torch.empty(4, 4, device="meta"),)), gpu="h100")
    assert len(r.partition) == 1
