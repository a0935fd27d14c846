"""A decoder of identical layers captured at 2, 3 and 4 layers and extended
(gpusim.predict.repeated): the same graph as capturing every layer, node for node, edge for
edge, meta included; anything that is not one rule's repeats falls back to the whole capture."""

import re

import pytest
import torch
from hypothesis import given, settings, strategies as st

from gpusim.capture.tracing import capture
from gpusim.predict import decode, repeated
from gpusim.predict import generate as gen
from gpusim.predict.repeated import NotPeriodic, Series, decode as dec, encode, extend, layer_list

hf = pytest.importorskip("transformers")

LAYERS = 6          # MIN_LAYERS lowered to 5 here: the rule is the same, the tests faster


@pytest.fixture(autouse=True)
def _few_layers(monkeypatch):
    monkeypatch.setattr(repeated, "MIN_LAYERS", 5)


def _lm(cls, cfg_cls, layers=LAYERS, **extra):
    cfg = cfg_cls(num_hidden_layers=layers, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=300, max_position_embeddings=4096,
                  eos_token_id=2, **extra)
    with torch.device("meta"):
        return decode.load_lm(cls(cfg), torch.bfloat16)[0]


@pytest.fixture(scope="module")
def mistral():
    return _lm(hf.MistralForCausalLM, hf.MistralConfig, sliding_window=4096)


@pytest.fixture(scope="module")
def llama():
    return _lm(hf.LlamaForCausalLM, hf.LlamaConfig)


def _small(model, fn, args):
    where = layer_list(model)
    assert where is not None
    out = []
    for k in repeated.SMALL:
        with repeated.truncated(model, where, k):
            out.append(capture(fn, args(), name="g"))
    return out


@pytest.mark.parametrize("family,kind,tokens,context", [
    ("mistral", "dynamic", 1, 24), ("mistral", "static", 12, 0), ("llama", "dynamic", 12, 0),
    ("llama", "static", 1, 24)])
def test_extended_graph_is_the_whole_capture(family, kind, tokens, context, request):
    model = request.getfixturevalue(family)
    fn = decode.forward_fn(model, keep_cache=tokens > 1, build_mask=kind == "static" and tokens > 1)

    def args():
        return decode.forward_args(model, kind, 2, tokens, context, 40, torch.bfloat16)
    whole = capture(fn, args(), name="g")
    assert model.config.num_hidden_layers == LAYERS and len(model.model.layers) == LAYERS   # restored
    assert repeated.same_graph(extend(_small(model, fn, args), LAYERS, "g"), whole)


def test_a_rule_the_third_capture_contradicts_is_refused(llama):
    fn = decode.forward_fn(llama)

    def args(context=24):
        return decode.forward_args(llama, "dynamic", 2, 1, context, 40, torch.bfloat16)
    two, three, _ = _small(llama, fn, args)
    wrong = _small(llama, fn, lambda: args(25))[2]      # another context's 4 layers
    with pytest.raises(NotPeriodic):
        extend([two, three, wrong], LAYERS, "g")


def test_a_checked_rule_extends_another_context_from_one_capture(mistral):
    fn = decode.forward_fn(mistral)

    def args(context):
        return lambda: decode.forward_args(mistral, "dynamic", 2, 1, context, 40, torch.bfloat16)
    keep = {}
    extend(_small(mistral, fn, args(20)), LAYERS, "g", keep)
    three = _small(mistral, fn, args(30))[1]
    whole = capture(fn, args(30)(), name="g")
    assert repeated.same_graph(repeated.extend_like(keep["rule"], three, LAYERS, "g"), whole)
    prefill = decode.forward_fn(mistral, keep_cache=True)      # another function: other names
    other = _small(mistral, prefill, lambda: decode.forward_args(mistral, "dynamic", 2, 12, 0, 40,
                                                                 torch.bfloat16))[1]
    with pytest.raises(NotPeriodic):
        repeated.extend_like(keep["rule"], other, LAYERS, "g")


def test_layers_that_differ_are_not_repeats():
    model = _lm(hf.LlamaForCausalLM, hf.LlamaConfig)
    model.model.layers[5].mlp.up_proj = torch.nn.Linear(64, 64, bias=False, device="meta")
    assert layer_list(model) is None
    assert layer_list(_lm(hf.LlamaForCausalLM, hf.LlamaConfig, layers=4)) is None    # too few to gain
    types = ["sliding_attention", "full_attention"] * (LAYERS // 2) + ["full_attention"] * (LAYERS % 2)
    mixed = _lm(hf.MistralForCausalLM, hf.MistralConfig, sliding_window=64, layer_types=types)
    assert layer_list(mixed) is None


def _generate(model, on: bool):
    names = []
    real = gen.capture

    def counted(*a, **k):
        names.append(k.get("name"))
        return real(*a, **k)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(gen, "capture", counted)
        m.setattr(repeated, "MIN_LAYERS", 5)
        if not on:
            m.setattr(repeated, "capture_repeated", lambda *a, **k: None)
        res = gen.generate_runs(model, [("dynamic", "eager"), ("static", "compiled")], 2, 24, 8,
                                gpu="h100")
    return [r.to_dict() for r in res], names


def test_generate_answers_the_same_with_layers_extended(mistral):
    whole, n_whole = _generate(mistral, False)
    ext, n_ext = _generate(mistral, True)
    assert ext == whole                                   # every figure, exactly
    # 3 small captures for each prefill and first step; the second context's step: one, at 3
    # layers, extended by the rule its first context checked
    assert len(n_ext) == len(n_whole) + 2 * 4


def test_anything_but_repeats_answers_none(llama, monkeypatch):
    fn = decode.forward_fn(llama)

    def args():
        return decode.forward_args(llama, "dynamic", 2, 1, 24, 40, torch.bfloat16)

    def refuse(*a, **k):
        raise NotPeriodic("test")
    with monkeypatch.context() as m:
        m.setattr(repeated, "extend", refuse)
        assert repeated.capture_repeated(llama, fn, args, "g", capture) is None

    def broken(*a, **k):
        raise RuntimeError("a truncated model that does not run")
    assert repeated.capture_repeated(llama, fn, args, "g", broken) is None
    assert llama.config.num_hidden_layers == LAYERS and len(llama.model.layers) == LAYERS


def test_a_series_inserts_one_run_per_layer():
    one = [encode(x) for x in ["emb", "layers.0.w", "layers.1.w", "norm", "out_3"]]
    two = [encode(x) for x in ["emb", "layers.0.w", "layers.1.w", "layers.2.w", "norm", "out_4"]]
    s = Series(one, two)
    s.step(2)
    assert [dec(r) for r in s.seq] == ["emb", "layers.0.w", "layers.1.w", "layers.2.w", "layers.3.w",
                                       "layers.4.w", "norm", "out_6"]


_leaf = st.one_of(st.integers(-5, 5), st.booleans(), st.none(),
                  st.from_regex(r"[a-z_.]{0,6}[0-9]{0,3}[a-z_]{0,3}", fullmatch=True))


@settings(max_examples=200, deadline=None)
@given(st.recursive(_leaf, lambda c: st.one_of(st.lists(c, max_size=3), st.tuples(c, c),
                                               st.dictionaries(st.text("abc", max_size=3), c, max_size=3)),
                    max_leaves=12))
def test_records_round_trip(x):
    def has_zero_suffix(v):      # "w_0" reads as "w" counted 0: the one text that does not come back
        if isinstance(v, str):
            return bool(re.search(r"_0$", v))
        if isinstance(v, dict):
            return any(has_zero_suffix(k) or has_zero_suffix(w) for k, w in v.items())
        return isinstance(v, (list, tuple)) and any(has_zero_suffix(w) for w in v)
    if not has_zero_suffix(x):
        assert dec(encode(x)) == x


@settings(max_examples=300, deadline=None)
@given(st.lists(st.from_regex(r"[a-z_.]{0,4}[0-9]{0,2}[a-z_]{0,2}", fullmatch=True), min_size=1, max_size=4),
       st.lists(st.sampled_from([0, 0, 1, 2, 10, 37]), min_size=12, max_size=12))
def test_a_record_decodes_as_its_texts_render_at_any_integers(strings, ints):
    """The compiled decoder (strings rendered inline) equals :func:`repeated._render` text by
    text, the cut of a counter-less name's ``_0`` included, whatever the integers moved to."""
    r = encode(strings)
    nums = tuple(ints[:len(r.nums)])
    want, k = [], 0
    for t in r.key[1]:
        want.append(repeated._render(t, nums[k:k + len(t) - 1]))
        k += len(t) - 1
    assert dec(repeated._Rec(r.key, nums)) == want
