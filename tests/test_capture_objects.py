"""Capture takes models whose inputs or outputs are objects torch's pytrees do not know (a
Hugging Face cache, a plain dataclass of tensors), and reports every op it cannot price
by name and count instead of dropping it."""

import dataclasses

import pytest
import torch

import gpusim
from gpusim.capture.tracing import capture
from gpusim.report.text import prediction_text


def meta(*shape, dtype=torch.float32):
    return torch.empty(*shape, device="meta", dtype=dtype)


@dataclasses.dataclass
class State:                     # not a registered pytree: make_fx alone rejects it
    h: torch.Tensor
    c: torch.Tensor
    step: int = 0


def test_dataclass_state_in_and_out():
    def cell(x, w, s: State):
        h = torch.tanh(x @ w + s.h)
        return State(h, s.c + h, s.step + 1)

    g = capture(cell, (meta(4, 32), meta(32, 32), State(meta(4, 32), meta(4, 32))))
    ops = [g.node(n)["op"] for n in g.compute_nodes]
    assert ops == ["aten.matmul.default", "aten.add.Tensor", "aten.tanh.default",
                   "aten.add.Tensor"]
    assert g.meta["inputs"] == 4          # x, w and the state's two tensors
    outs = [n for n in g.g.nodes if g.node(n).get("is_output")]
    assert len(outs) == 2                 # the new state's h and c stay alive


def _tiny_t5():
    hf = pytest.importorskip("transformers")
    cfg = hf.T5Config(vocab_size=512, d_model=64, d_kv=16, d_ff=128, num_layers=1,
                      num_decoder_layers=1, num_heads=4)
    with torch.device("meta"):
        return hf.T5ForConditionalGeneration(cfg).eval()


def test_t5_with_decoder_input_ids_returns_its_cache():
    m = _tiny_t5()
    ids = torch.randint(3, 500, (2, 16), device="meta")
    dec = torch.randint(3, 500, (2, 8), device="meta")
    # use_cache (the default) builds an EncoderDecoderCache inside the Seq2SeqLMOutput
    g = capture(lambda i, d: m(input_ids=i, decoder_input_ids=d), (ids, dec))
    shapes = {tuple(g.node(n)["shape"]) for n in g.g.nodes if g.node(n).get("is_output")}
    assert (2, 8, 512) in shapes              # the logits
    assert (2, 4, 8, 16) in shapes and (2, 4, 16, 16) in shapes   # self and cross K/V


def test_gpt2_step_with_a_dynamic_cache_input():
    hf = pytest.importorskip("transformers")
    cfg = hf.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=512, n_positions=128)
    with torch.device("meta"):
        m = hf.GPT2LMHeadModel(cfg).eval()
    cache = hf.DynamicCache(config=cfg)
    for layer in range(2):
        cache.update(meta(1, 4, 32, 16), meta(1, 4, 32, 16), layer)

    class Step(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = m

        def forward(self, ids, past):
            return self.m(input_ids=ids, past_key_values=past).logits

    ids = torch.randint(3, 500, (1, 1), device="meta")
    p = gpusim.predict(Step(), (ids, cache), gpu="h100")
    g = p.graph
    assert g.meta["inputs"] > 2 * 2 + 1     # ids and four cached K/V tensors, then weights
    cats = [g.node(n) for n in g.compute_nodes if g.node(n)["op"] == "aten.cat.default"]
    assert sorted(tuple(a["shape"]) for a in cats) == [(1, 4, 33, 16)] * 4   # cache grows by 1
    assert p.memory.inputs_bytes == 4 * 32 * 64 * 4 + 8


def test_unmodelled_ops_are_named_and_counted():
    def f(x, y):
        torch._foreach_add_([x, y], 1.0)      # returns nothing: a multi-tensor kernel, priced
        return torch.cumprod(x, 0) + torch.cumprod(y, 0)

    x = meta(1000)
    p = gpusim.predict(f, (x, meta(1000)))
    assert p.unmodelled_counts == {"aten.cumprod.default": 2}
    assert any("_foreach_add_" in op for k in p.kernels for op in k.op_types)
    assert p.to_dict()["unmodelled"] == p.unmodelled_counts
    line = [ln for ln in prediction_text(p).splitlines() if ln.startswith("unmodelled ops")]
    assert line and "aten.cumprod.default x2" in line[0]
    assert gpusim.predict(lambda x: x * 2, (x,)).unmodelled_counts == {}
