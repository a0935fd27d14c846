"""Exact eager kernel counts of LLM prefills and decode steps (issue 34): the fused attention
kernel writes its output in the query's layout, so ``transpose(1, 2).contiguous()`` after it
copies when the query was [B, H, S, D] in memory (Phi's concatenated rotary halves) and not when
it was [B, S, H, D] (Llama's rotated projection); the host copy of an empty constant carries its
true shape (0,) and launches nothing."""

import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from gpusim.capture.fxnodes import _fused_out_bshd, _meta
from gpusim.capture.tracing import capture
from gpusim.graph.ops import packet_name
from gpusim.hw.spec import load_spec
from gpusim.predict.pipeline import lower

H200 = load_spec("h200-sxm-calibrated")
BF16 = torch.bfloat16


def _ops(fn, *args):
    g = capture(fn, args)
    low = lower(g, "eager", spec=H200)
    return g, [packet_name(g.g.nodes[k.ops[0]]["op"]) for k in low.kernels]


def _attention_block(q_from_cat: bool, dtype=BF16):
    """Projections of x into heads, attention, heads back into the hidden dim, then a
    Linear: Llama's shape of it (the query a transposed view of its projection) or Phi's
    (the query concatenated from two halves: contiguous [B, H, S, D])."""
    heads, hd = 4, 16

    def block(x, wq, wk, wv, wo):
        b, s, _ = x.shape
        q, k, v = ((x @ w).view(b, s, heads, hd).transpose(1, 2) for w in (wq, wk, wv))
        if q_from_cat:
            q = torch.cat((q[..., :hd // 2] * 2, q[..., hd // 2:]), dim=-1)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return o.transpose(1, 2).contiguous().reshape(b, s, heads * hd) @ wo
    w = torch.empty(64, 64, dtype=dtype, device="meta")
    return block, w


def _after_attention(ops):
    i = ops.index("scaled_dot_product_attention")
    return ops[i + 1:]


def test_query_in_heads_layout_copies_the_attention_output():
    block, w = _attention_block(q_from_cat=True)
    x = torch.empty(2, 32, 64, dtype=BF16, device="meta")
    _, ops = _ops(block, x, w, w, w, w)
    assert _after_attention(ops)[0] == "contiguous", ops


def test_query_in_sequence_layout_copies_nothing():
    block, w = _attention_block(q_from_cat=False)
    x = torch.empty(2, 32, 64, dtype=BF16, device="meta")
    _, ops = _ops(block, x, w, w, w, w)
    assert "contiguous" not in _after_attention(ops), ops


def _sequence_first_block(back):
    """``F.multi_head_attention_forward``'s shape of it (torchvision's ViT): the projection
    of a sequence-first [L, B, E] input viewed as [B, H, L, D] (the query laid out
    [L, B, H, D]); ``back``: the output's way back to [L, B, H, D] or [B, L, H, D]."""
    heads, hd = 4, 16

    def block(x, wq, wk, wv, wo):
        ln, b, _ = x.shape
        q, k, v = ((x @ w).view(ln, b * heads, hd).transpose(0, 1).view(b, heads, ln, hd)
                   for w in (wq, wk, wv))
        o = F.scaled_dot_product_attention(q, k, v)
        return back(o).contiguous().reshape(-1, heads * hd) @ wo
    return block, torch.empty(64, 64, dtype=BF16, device="meta")


def test_sequence_first_query_permute_back_copies_nothing():
    """The output has the query's [L, B, H, D] layout: MHA's ``permute(2, 0, 1, 3)`` is
    contiguous (H100 zoo ViT-B/16 at batch 32: no kernel between attention and out_proj),
    while the heads swap ``transpose(1, 2)`` of the same output copies."""
    x = torch.empty(32, 2, 64, dtype=BF16, device="meta")
    block, w = _sequence_first_block(lambda o: o.permute(2, 0, 1, 3))
    _, ops = _ops(block, x, w, w, w, w)
    assert "contiguous" not in _after_attention(ops), ops
    block, w = _sequence_first_block(lambda o: o.transpose(1, 2))
    _, ops = _ops(block, x, w, w, w, w)
    assert _after_attention(ops)[0] == "contiguous", ops


def test_fp32_and_one_query_row_copy_nothing():
    """fp32 runs the memory-efficient kernel ([B, S, H, D] always); at one query row (a decode
    step) the transposed output is contiguous whatever the layout."""
    block, w = _attention_block(q_from_cat=True, dtype=torch.float32)
    _, ops = _ops(block, torch.empty(2, 32, 64, device="meta"), w, w, w, w)
    assert "contiguous" not in _after_attention(ops), ops
    block, w = _attention_block(q_from_cat=True)
    _, ops = _ops(block, torch.empty(2, 1, 64, dtype=BF16, device="meta"), w, w, w, w)
    assert "contiguous" not in _after_attention(ops), ops


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 5), min_size=4, max_size=4), st.permutations(range(4)),
       st.integers(0, 3), st.booleans())
def test_output_layout_is_the_query_layout(shape, perm, sliced, slice_it):
    """The rule against PyTorch's own allocation of the flash/cuDNN output (``empty_like`` of
    the query keeps its dims' order, a strided query densely): the heads swap is contiguous
    exactly when the rule says [B, S, H, D]."""
    base = torch.empty([shape[p] for p in perm], dtype=BF16)
    q = base.permute([perm.index(d) for d in range(4)])
    if slice_it and q.shape[sliced] > 1:
        q = q.narrow(sliced, 0, q.shape[sliced] - 1)
    want = torch.empty_like(q).transpose(1, 2).is_contiguous()
    assert _fused_out_bshd(_meta(q)) == want


def test_tiny_phi_prefill_has_one_attention_copy_per_layer():
    """Hugging Face's Phi (partial rotary: the query is ``cat``'d) against Llama, two layers
    each, a prefill into an empty DynamicCache: a ``contiguous`` copy after each of Phi's
    attention kernels (the H200 Phi-1.5 prefill records: a direct_copy kernel there, 24 per
    call), none after Llama's; and the cache's empty tensors launch nothing."""
    from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM, PhiConfig, PhiForCausalLM
    small = dict(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                 num_attention_heads=4)
    rope = {"rope_type": "default", "rope_theta": 10000.0}
    cases = ((PhiForCausalLM, PhiConfig(**small, rope_parameters={**rope, "partial_rotary_factor": 0.5}), 2),
             (LlamaForCausalLM, LlamaConfig(**small, num_key_value_heads=2, rope_parameters=rope), 0))
    for cls, cfg, copies in cases:
        with torch.device("meta"):
            m = cls(cfg).to(BF16).eval()
        ids = torch.zeros(1, 16, dtype=torch.long, device="meta")
        g, ops = _ops(lambda ids, cache: m(ids, past_key_values=cache, use_cache=True, logits_to_keep=1),
                      ids, DynamicCache(config=cfg))
        assert ops.count("contiguous") == copies, (cls.__name__, ops)
        h2d = [a for _, a in g.g.nodes(data=True) if a["op"] == "gpusim.h2d_copy"]
        assert len(h2d) == 2 * cfg.num_hidden_layers
        assert all(a["shape"] == (0,) and a["bytes_written"] == 0 for a in h2d)
        assert "h2d_copy" not in " ".join(ops)


def test_h2d_of_a_scalar_constant_keeps_its_kernel():
    """A 0-dim constant on the device (GPT-Neo's ``torch.tensor(finfo.min)``) still copies
    one element over with a sync: the general rule leaves non-empty tensors alone."""
    def f(x):
        return torch.maximum(x, torch.tensor(-1.0, device=x.device, dtype=x.dtype))
    g, ops = _ops(f, torch.empty(8, 8, device="meta"))
    h2d = [a for _, a in g.g.nodes(data=True) if a["op"] == "gpusim.h2d_copy"]
    assert [a["shape"] for a in h2d] == [()]
    assert "h2d_copy" in ops


def test_sum_of_a_bool_mask_casts_first():
    """``sum`` builds its iterator in the output dtype (``make_reduction_from_out_ty``): a bool
    mask is copied to int64 first, one more kernel; a bf16 -> fp32 sum and an fp32 sum read
    their input as it is (the H100 decode steps with generate's mask: one direct_copy more
    than the graph's casts)."""
    m = torch.empty(2, 513, dtype=torch.bool, device="meta")
    _, ops = _ops(lambda m: m.sum(), m)
    assert ops == ["sum", "sum"]
    for x, kw in ((torch.empty(4, 64, dtype=BF16, device="meta"), {"dtype": torch.float32}),
                  (torch.empty(4, 64, device="meta"), {})):
        _, ops = _ops(lambda x: x.sum(-1, **kw), x)
        assert ops == ["sum"], (x.dtype, ops)
    _, ops = _ops(lambda m: m.to(torch.int32).sum(), m)
    assert ops == ["to", "sum", "sum"]


def test_biased_linear_over_a_last_token_slice_adds_its_bias_after():
    """``logits_to_keep=1`` at batch 8: the LM head reads ``hidden[:, -1:, :]``, strided rows
    that fold into a matrix as a view. at::linear fuses the bias only for a contiguous input,
    so a GEMM then a bias add run (the H200 Phi-1.5 prefills at batch 8: 808 kernels, 807 at
    batch 1); at batch 1 the slice is contiguous (one GEMM with the bias), and a strided input
    that cannot fold (a permuted one) keeps its own rule."""
    w, b = torch.empty(256, 64, dtype=BF16, device="meta"), torch.empty(256, dtype=BF16, device="meta")
    for batch, want in ((8, ["linear", "linear"]), (1, ["linear"])):
        h = torch.empty(batch, 16, 64, dtype=BF16, device="meta")
        g, ops = _ops(lambda h, w, b: F.linear(h[:, -1:, :], w, b), h, w, b)
        assert ops == want, (batch, ops)
    g, ops = _ops(lambda h, w: F.linear(h[:, -1:, :], w), torch.empty(8, 16, 64, dtype=BF16, device="meta"), w)
    assert ops == ["linear"]
    g, _ = _ops(lambda h, w, b: F.linear(h.transpose(0, 1), w, b), torch.empty(8, 16, 64, dtype=BF16, device="meta"), w, b)
    assert not any(a.get("fold_view") for _, a in g.g.nodes(data=True))
