"""generate's capture reuse (gpusim.predict.reuse): a decode step whose arguments have one
signature at two contexts is captured once, and the answer is the same, figure by figure, as
capturing each context afresh."""

import pytest
import torch

from gpusim.predict import generate as gen
from gpusim.predict import reuse
from gpusim.predict.reuse import signature

hf = pytest.importorskip("transformers")

META = dict(device="meta")


def test_signature_sees_shapes_aliasing_and_python_state():
    x, y = torch.empty(2, 3, **META), torch.empty(2, 3, **META)
    assert signature((x, 1)) == signature((y, 1))
    assert signature((x, 1)) != signature((x, 2))                      # a Python int
    assert signature((x, x)) != signature((x, y))                      # the same object
    assert signature((x, x[1:])) != signature((x, y[1:]))              # the same storage
    assert signature((x,)) != signature((torch.empty(3, 2, **META),))  # a shape
    assert signature((x,)) != signature((x.t(),))                      # strides
    assert signature((x,)) != signature((x.to(torch.bfloat16),))       # a dtype


class _Holder:
    def __init__(self, n, t):
        self.n, self.t = n, t


class _Slotted:
    __slots__ = ("n",)

    def __init__(self, n):
        self.n = n


class _Mixed(_Slotted):      # a __dict__ of its own, and its base's slot
    def __init__(self, n):
        super().__init__(n)
        self.m = 0


def test_signature_walks_objects_and_slots_and_gives_up_on_the_unknown():
    x = torch.empty(4, **META)
    assert signature((_Holder(3, x),)) == signature((_Holder(3, torch.empty(4, **META)),))
    assert signature((_Holder(3, x),)) != signature((_Holder(4, x),))
    assert signature((_Mixed(1),)) == signature((_Mixed(1),))
    assert signature((_Mixed(1),)) != signature((_Mixed(2),))      # the slot is state too
    assert signature((_Slotted(1),)) is None         # slots only: not walked, never reused
    assert signature((object(),)) is None            # nothing to describe it by
    assert signature((float("nan"),)) != signature((float("nan"),))   # never equal: no reuse


def _lm(cls, cfg_cls, **extra):
    cfg = cfg_cls(num_hidden_layers=2, hidden_size=128, intermediate_size=256, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=500, max_position_embeddings=4096,
                  eos_token_id=2, **extra)
    with torch.device("meta"):
        return cls(cfg).eval()


def _run(model, monkeypatch, reuse_on: bool, lowered=None):
    calls = []
    real, real_lower = gen.capture, gen.lower

    def counted(*a, **k):
        calls.append(k.get("name"))
        return real(*a, **k)

    def counted_lower(g, *a, **k):
        if lowered is not None:
            lowered.append(g.name)
        return real_lower(g, *a, **k)
    with monkeypatch.context() as m:
        m.setattr(gen, "capture", counted)
        m.setattr(gen, "lower", counted_lower)
        if not reuse_on:
            m.setattr(reuse, "signature", lambda args: None)
        res = gen.generate_runs(model, [("dynamic", "eager"), ("static", "compiled")], 2, 48, 24,
                                gpu="h100", samples=3)
    return [r.to_dict() for r in res], calls, res


def test_full_attention_static_step_captured_once_and_unchanged(monkeypatch):
    model = _lm(hf.LlamaForCausalLM, hf.LlamaConfig)
    low_fresh, low_reused = [], []
    fresh, n_fresh, _ = _run(model, monkeypatch, False, low_fresh)
    reused, n_reused, res = _run(model, monkeypatch, True, low_reused)
    assert reused == fresh                               # every figure, exactly
    assert len(n_reused) == len(n_fresh) - 1             # the static step's second context
    assert sum("decode static" in n for n in n_reused) == 1
    # the shared graph is lowered, costed and simulated once; its other name keeps its own name
    assert len(low_reused) == len(low_fresh) - 1             # (a static step: 2 contexts)
    steps = res[1].parts["steps"]
    (c0, first), *rest = steps.items()
    assert rest and all(s.graph.g is first.graph.g and str(c) in s.graph.name and s.kernels == first.kernels
                        and s.memory.to_dict() == first.memory.to_dict() for c, s in rest)


def test_sliding_window_static_step_keeps_both_captures(monkeypatch):
    # StaticSlidingWindowLayer keeps the context in a Python int (its update path): two graphs
    model = _lm(hf.MistralForCausalLM, hf.MistralConfig, sliding_window=4096)
    fresh, n_fresh, _ = _run(model, monkeypatch, False)
    reused, n_reused, _ = _run(model, monkeypatch, True)
    assert reused == fresh
    assert n_reused == n_fresh
