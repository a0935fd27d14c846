"""FLOPs and bytes of registered ops against hand calculations and FlopCounterMode."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from gpusim.capture import CaptureError, capture

M = "meta"


def t(*shape, dtype=torch.float32):
    return torch.empty(*shape, device=M, dtype=dtype)


def only(g):
    """The single compute node of a graph."""
    assert len(g.compute_nodes) == 1, [g.node(n)["op"] for n in g.compute_nodes]
    return g.node(g.compute_nodes[0])


def real_flops(fn, *args):
    """FlopCounterMode on real CPU tensors of the same shapes."""
    real = [torch.randn(a.shape, dtype=torch.float32) if isinstance(a, torch.Tensor) else a
            for a in args]
    with FlopCounterMode(display=False) as fc:
        fn(*real)
    return fc.get_total_flops()


N = 1 << 12


@pytest.mark.parametrize("name,fn,per_elem", [
    ("add", lambda x, y: x + y, 1), ("sub", lambda x, y: x - y, 1),
    ("mul", lambda x, y: x * y, 1), ("div", lambda x, y: x / y, 1),
])
def test_binary_pointwise(name, fn, per_elem):
    a = only(capture(fn, (t(N), t(N))))
    assert a["kind"] == "pointwise"
    assert a["flops"] == per_elem * N
    assert a["bytes_read"] == 2 * 4 * N and a["bytes_written"] == 4 * N


def test_scalar_operand_reads_one_tensor():
    a = only(capture(lambda x: x * 2.0, (t(N),)))
    assert a["bytes_read"] == 4 * N and a["bytes_written"] == 4 * N


def test_broadcast_operand_counts_real_size():
    # bias of 64 elements broadcast over 1024x64: reads 1024*64 + 64 elements
    a = only(capture(lambda x, b: x + b, (t(1024, 64), t(64))))
    assert a["bytes_read"] == 4 * (1024 * 64 + 64)
    assert a["bytes_written"] == 4 * 1024 * 64
    e = only(capture(lambda x, b: x + b.expand(1024, 64), (t(1024, 64), t(64))))
    assert e["bytes_read"] == 4 * (1024 * 64 + 64)


@pytest.mark.parametrize("fn,weight", [
    (torch.relu, 1), (torch.sigmoid, 4), (torch.tanh, 4), (F.gelu, 8),
    (lambda x: F.gelu(x, approximate="tanh"), 8), (F.silu, 5), (torch.exp, 4), (torch.log, 4),
    (lambda x: torch.pow(x, 3), 4), (torch.sqrt, 2), (torch.rsqrt, 2), (torch.neg, 1),
    (lambda x: torch.clamp(x, -1, 1), 1), (lambda x: torch.where(x > 0, x, 0.0), 1),
])
def test_unary_pointwise(fn, weight):
    g = capture(fn, (t(N),))
    nodes = [g.node(n) for n in g.compute_nodes]
    main = nodes[-1]
    assert main["kind"] == "pointwise"
    assert main["flops"] == weight * N
    assert main["bytes_written"] == 4 * N


def test_bf16_bytes():
    a = only(capture(torch.relu, (t(N, dtype=torch.bfloat16),)))
    assert a["bytes_read"] == 2 * N and a["dtype"] == "bfloat16"


@pytest.mark.parametrize("fn,out_elems,per", [
    (lambda x: x.sum(-1), 64, 1), (lambda x: x.mean(-1), 64, 1),
    (lambda x: x.amax(-1), 64, 1), (lambda x: x.max(-1).values, 64, 1),
    (lambda x: x.var(-1), 64, 3),
])
def test_reductions(fn, out_elems, per):
    g = capture(fn, (t(64, 128),))
    a = g.node(g.compute_nodes[0])
    assert a["kind"] == "reduction"
    assert a["flops"] == per * 64 * 128
    assert a["bytes_read"] == 4 * 64 * 128


@pytest.mark.parametrize("fn", [lambda x: torch.softmax(x, -1), lambda x: F.log_softmax(x, -1)])
def test_softmax(fn):
    a = only(capture(fn, (t(64, 128),)))
    assert a["kind"] == "reduction" and a["flops"] == 5 * 64 * 128
    assert a["bytes_read"] == a["bytes_written"] == 4 * 64 * 128


def test_layer_norm_and_rms_norm():
    x = t(64, 128)
    a = only(capture(lambda x, w, b: F.layer_norm(x, (128,), w, b), (x, t(128), t(128))))
    assert a["kind"] == "norm" and a["flops"] == 8 * 64 * 128
    assert a["bytes_read"] == 4 * (64 * 128 + 2 * 128)
    if hasattr(F, "rms_norm"):
        g = capture(lambda x, w: F.rms_norm(x, (128,), w), (x, t(128)))
        assert any(g.node(n)["kind"] == "norm" for n in g.compute_nodes)


def test_batch_norm_eval_and_group_norm():
    x = t(8, 16, 10, 10)
    a = only(capture(lambda x, m, v, w, b: F.batch_norm(x, m, v, w, b, training=False),
                     (x, t(16), t(16), t(16), t(16))))
    assert a["kind"] == "norm" and a["flops"] == 2 * x.numel()
    assert a["bytes_read"] == 4 * (x.numel() + 4 * 16)
    g = capture(lambda x, w, b: F.group_norm(x, 4, w, b), (x, t(16), t(16)))
    assert g.node(g.compute_nodes[0])["kind"] == "norm"


MATMULS = [
    ("mm", lambda a, b: a @ b, (t(64, 32), t(32, 48)), 2 * 64 * 32 * 48),
    ("addmm", lambda c, a, b: torch.addmm(c, a, b), (t(48), t(64, 32), t(32, 48)), 2 * 64 * 32 * 48),
    ("bmm", torch.bmm, (t(4, 64, 32), t(4, 32, 48)), 2 * 4 * 64 * 32 * 48),
    ("matmul", torch.matmul, (t(2, 3, 64, 32), t(32, 48)), 2 * 6 * 64 * 32 * 48),
    ("linear", F.linear, (t(2, 64, 32), t(48, 32), t(48)), 2 * 128 * 32 * 48),
    ("baddbmm", torch.baddbmm, (t(4, 64, 48), t(4, 64, 32), t(4, 32, 48)), 2 * 4 * 64 * 32 * 48),
]


@pytest.mark.parametrize("name,fn,args,hand", MATMULS, ids=[m[0] for m in MATMULS])
def test_matmul_flops_match_hand_and_flopcounter(name, fn, args, hand):
    g = capture(fn, args)
    a = [g.node(n) for n in g.compute_nodes if g.node(n)["kind"] == "matmul"]
    assert len(a) == 1
    assert a[0]["flops"] == hand == real_flops(fn, *args)
    out = fn(*[torch.empty(x.shape) for x in args])
    assert a[0]["bytes_written"] == 4 * out.numel()


CONVS = [
    dict(stride=1, padding=1, dilation=1, groups=1),
    dict(stride=2, padding=0, dilation=1, groups=1),
    dict(stride=1, padding=2, dilation=2, groups=1),
    dict(stride=1, padding=1, dilation=1, groups=4),
    dict(stride=1, padding=1, dilation=1, groups=16),   # depthwise
]


@pytest.mark.parametrize("kw", CONVS)
def test_conv_flops_match_flopcounter(kw):
    x, w = t(2, 16, 20, 20), t(32, 16 // kw["groups"], 3, 3)
    fn = lambda x, w: F.conv2d(x, w, **kw)  # noqa: E731
    a = only(capture(fn, (x, w)))
    assert a["kind"] == "conv"
    assert a["flops"] == real_flops(fn, x, w)
    out = F.conv2d(torch.empty(x.shape), torch.empty(w.shape), **kw)
    ho, wo = out.shape[-2:]
    assert a["flops"] == 2 * 2 * 32 * ho * wo * (16 // kw["groups"]) * 9


def test_conv1d_and_transposed_match_flopcounter():
    f1 = lambda x, w: F.conv1d(x, w, padding=1)  # noqa: E731
    x, w = t(2, 8, 50), t(16, 8, 3)
    assert only(capture(f1, (x, w)))["flops"] == real_flops(f1, x, w)
    ft = lambda x, w: F.conv_transpose2d(x, w, stride=2)  # noqa: E731
    x, w = t(2, 8, 10, 10), t(8, 4, 3, 3)
    assert only(capture(ft, (x, w)))["flops"] == real_flops(ft, x, w)


@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_is_one_attention_node_and_matches_flopcounter(causal):
    q, k, v = t(2, 4, 128, 64), t(2, 4, 96, 64), t(2, 4, 96, 32)
    if causal:
        k, v = t(2, 4, 128, 64), t(2, 4, 128, 32)
    fn = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal)  # noqa: E731
    a = only(capture(fn, (q, k, v)))
    assert a["kind"] == "attention"
    sk = k.shape[2]
    assert a["flops"] == 2 * 8 * 128 * sk * (64 + 32)
    # FlopCounterMode on CPU sees the math decomposition; compare the products it counts
    assert a["flops"] == real_flops(fn, q, k, v)
    assert a["bytes_read"] == 4 * (q.numel() + k.numel() + v.numel())
    assert a["gemm"]["causal"] == causal


def test_embedding_reads_rows_not_table():
    table_, idx = t(50000, 256), torch.empty(8, 64, dtype=torch.long, device=M)
    a = only(capture(F.embedding, (idx, table_)))
    assert a["bytes_written"] == 4 * 8 * 64 * 256
    assert a["bytes_read"] == 4 * 8 * 64 * 256 + 8 * 8 * 64


def test_cat_and_free_views():
    g = capture(lambda a, b: torch.cat([a, b], 0), (t(10, 4), t(6, 4)))
    a = only(g)
    assert a["kind"] == "copy" and a["bytes_read"] == 4 * 64 and a["bytes_written"] == 4 * 64
    # chunk/split/transpose/permute/view/reshape/expand: no kernels, no bytes
    g = capture(lambda x: (x.chunk(2, 0)[0].reshape(-1), x.transpose(0, 1),
                           x.permute(1, 0).unsqueeze(0).expand(3, 4, 16),
                           x.split(4, 0)[1].view(-1)), (t(16, 4),))
    assert g.compute_nodes == []
    assert all(g.node(n)["bytes_read"] == 0 and g.node(n)["flops"] == 0 for n in g.view_nodes)


def test_materialised_transpose_is_paid():
    g = capture(lambda x: x.t().contiguous(), (t(64, 32),))
    a = only(g)
    assert a["kind"] == "copy" and a["bytes_read"] == a["bytes_written"] == 4 * 64 * 32
    g = capture(lambda x: x.t().reshape(-1), (t(64, 32),))
    assert only(g)["kind"] == "copy"
    g = capture(lambda x: x.contiguous(), (t(64, 32),))
    assert g.compute_nodes == []


def test_clone_and_dtype_cast_are_copies():
    a = only(capture(lambda x: x.clone(), (t(100),)))
    assert a["kind"] == "copy" and a["bytes_read"] == 400
    a = only(capture(lambda x: x.to(torch.float16), (t(100),)))
    assert a["kind"] == "copy" and a["bytes_read"] == 400 and a["bytes_written"] == 200


def test_dropout_eval_is_free_and_train_is_not():
    g = capture(lambda x: F.dropout(x, 0.5, training=False), (t(100),))
    assert g.compute_nodes == []


def test_unknown_op_is_listed_not_dropped():
    g = capture(lambda x: torch.cumprod(x, 0), (t(100),))
    a = only(g)
    assert a["unmodelled"] and a["kind"] == "other"
    assert a["bytes_read"] == 400 and a["bytes_written"] == 400
    assert g.unmodelled == g.compute_nodes


def test_data_dependent_control_flow_gives_clear_error():
    def bad(x):
        if x.sum() > 0:
            return x * 2
        return x
    with pytest.raises(CaptureError, match="data-dependent"):
        capture(bad, (t(10),))


def test_module_parameters_become_named_inputs():
    m = torch.nn.Linear(8, 4, device=M)
    g = capture(m, (t(3, 8),))
    inputs = [n for n in g.order if g.node(n)["kind"] == "input"]
    assert "weight" in inputs and "bias" in inputs and "in0" in inputs
    assert math.isclose(only(g)["flops"], 2 * 3 * 8 * 4)
