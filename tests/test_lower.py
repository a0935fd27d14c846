"""One lowering: predict, search, whatif, the scorer and accuracy agree on which kernels
run in each mode, and what they cost."""

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gpusim
from gpusim.capture.tracing import capture
from gpusim.models.examples import build_example
from gpusim.hw.spec import load_spec
from gpusim.predict.pipeline import lower
from gpusim.fusion.scoring import Scorer
from gpusim.fusion.search import fold_conv_bn
from validation.score.accuracy import evaluate

SPEC = load_spec("h200-sxm-calibrated")


def mm_add_relu():
    a = torch.empty(1024, 1024, device="meta", dtype=torch.float16)
    return capture(lambda a, b, c: torch.relu(torch.mm(a, b) + c), (a, a, a), name="mm_add_relu")


def kernels(p):
    return [tuple(k.ops) for k in p.kernels]


@pytest.mark.parametrize("mode", ["eager", "compiled", "cudagraph"])
def test_predict_search_whatif_and_accuracy_agree(mode):
    g = mm_add_relu()
    p = gpusim.predict(g, gpu=SPEC, mode=mode)
    assert kernels(p) == [tuple(k.ops) for k in lower(g, mode).kernels]
    r = gpusim.search(g, gpu=SPEC, mode=mode)
    w = gpusim.whatif(g, [], gpu=SPEC, mode=mode)
    for other in (r.compiled, w.compiled):
        q = gpusim.predict(g, gpu=SPEC, mode="compiled")
        assert kernels(other) == kernels(q)
        assert other.device_us == pytest.approx(q.device_us)
        assert other.end_to_end_us == pytest.approx(q.end_to_end_us)
    assert kernels(r.unfused) == kernels(gpusim.predict(g, gpu=SPEC, mode="eager"))
    # the partition the search chose, predicted directly, is what the search reports
    again = gpusim.predict(g, gpu=SPEC, mode=mode, partition=r.partition)
    assert kernels(again) == kernels(r.fused)
    assert again.end_to_end_us == pytest.approx(r.fused.end_to_end_us)
    # and the scorer prices it no lower than the simulation (sum of maxima bounds it)
    assert Scorer(g, SPEC, mode).cost(r.partition) >= r.fused.device_us - 1e-6


def test_compiled_runs_the_gemm_extern_and_its_epilogue_as_one_kernel():
    g = mm_add_relu()
    mm, add, relu = g.compute_nodes
    assert kernels(gpusim.predict(g, gpu=SPEC, mode="eager")) == [(mm,), (add,), (relu,)]
    assert kernels(gpusim.predict(g, gpu=SPEC, mode="compiled")) == [(mm,), (add, relu)]
    # the search cannot claim a GEMM epilogue fusion under torch.compile
    r = gpusim.search(g, gpu=SPEC, mode="compiled")
    assert kernels(r.fused) == [(mm,), (add, relu)]
    assert r.fused.device_us == pytest.approx(r.compiled.device_us)


def test_accuracy_prices_compiled_runs_as_predict_does():
    g = mm_add_relu()
    comp = gpusim.predict(g, gpu=SPEC, mode="compiled")
    eager = gpusim.predict(g, gpu=SPEC, mode="eager")
    rec = {"case": "x", "graph": g.to_dict(), "runs": {
        "eager": {"profile": {"kernels": [{"name": "k", "us": 1.0}] * 3}, "wall": {"median_us": 50.0}},
        "compiled": {"profile": {"kernels": [{"name": "k", "us": 1.0}] * 2}, "wall": {"median_us": 60.0}}}}
    model, _, _ = evaluate([rec], SPEC)
    dev = dict(((c, p) for c, p, _ in model.rows["device"]))
    assert dev["x:compiled"] == pytest.approx(comp.device_us)
    assert dev["x:eager"] == pytest.approx(eager.device_us)
    e2e = dict(((c, p) for c, p, _ in model.rows["end_to_end"]))
    assert e2e["x:compiled"] == pytest.approx(comp.end_to_end_us)


def test_fold_conv_bn_never_touches_the_callers_graph():
    fn, args = build_example("conv_bn_relu", device="meta", batch=1, cin=8, cout=8, hw=8)
    g = capture(fn, args)
    before = {n: dict(g.g.nodes[n]["reads"]) for n in g.compute_nodes}
    df_before = set(g.dataflow.edges)
    g2, folded = fold_conv_bn(g)
    assert folded
    assert {n: dict(g.g.nodes[n]["reads"]) for n in g.compute_nodes} == before
    assert set(g.dataflow.edges) == df_before
    assert g2 is not g


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["add_relu_mul", "gelu_tanh", "layernorm_add", "softmax_manual", "qkv"]),
       st.sampled_from(["eager", "compiled", "cudagraph"]))
def test_every_compute_node_runs_in_exactly_one_kernel(name, mode):
    fn, args = build_example(name, device="meta")
    g = capture(fn, args)
    low = lower(g, mode)
    ops = [n for k in low.kernels for n in k.ops]
    assert sorted(ops) == sorted(g.compute_nodes)


def _window_attention(x, w):
    """torchvision Swin's window attention core: q, k, v are strided views of one qkv
    projection; 49 tokens a window (a misaligned GEMM dimension)."""
    b, n, c = x.shape
    qkv = torch.nn.functional.linear(x, w).reshape(b, n, 3, 3, c // 3).permute(2, 0, 3, 1, 4)
    q, k, v = qkv[0], qkv[1], qkv[2]
    attn = (q * 0.1).matmul(k.transpose(-2, -1)).softmax(-1)
    return attn.matmul(v)


def test_batched_matmul_copies_operands_it_cannot_fold():
    """at::matmul folds batch dims by reshape: a strided q, k or v is copied first (the
    Swin eager record: three direct_copy kernels around the two window GEMMs)."""
    x = torch.empty(2048, 49, 96, device="meta", dtype=torch.bfloat16)
    w = torch.empty(288, 96, device="meta", dtype=torch.bfloat16)
    g = capture(_window_attention, (x, w))
    ops = [g.g.nodes[n]["op"] for n in g.compute_nodes]
    assert ops.count("aten.bmm.default") == 2 and "aten.matmul.default" not in ops
    assert sum(g.g.nodes[n]["kind"] == "copy" for n in g.compute_nodes) == 3   # q, k, v
    # a contiguous batched product needs no copy
    a = torch.empty(8, 12, 128, 64, device="meta", dtype=torch.bfloat16)
    g2 = capture(lambda a: a.matmul(a.transpose(-2, -1)), (a,))
    assert [g2.g.nodes[n]["kind"] for n in g2.compute_nodes] == ["matmul"]


def test_inductor_fuses_no_siblings_that_read_different_parts_of_a_buffer():
    """Inductor scores a fusion by memory dependencies that match in buffer and index:
    the q, k, v copies read three different slices of the qkv output and stay three
    kernels (Swin compiled record: triton_poi ..._5, _6, _7); the misaligned window GEMMs
    that pad_mm leaves unpadded keep eager's align1 cuBLAS class."""
    x = torch.empty(2048, 49, 96, device="meta", dtype=torch.bfloat16)
    w = torch.empty(288, 96, device="meta", dtype=torch.bfloat16)
    g = capture(_window_attention, (x, w))
    ks = lower(g, "compiled", spec=SPEC).kernels
    copies = [k for k in ks if any(g.g.nodes[n]["kind"] == "copy" for n in k.ops)]
    assert len(copies) == 3 and all(len({g.g.nodes[n]["kind"] for n in k.ops} & {"copy"}) == 1
                                    for k in copies)
    assert [k.variant for k in ks if k.impl == "library"] == ["extern_mm", "align1", "align1"]
