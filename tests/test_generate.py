"""``gpusim.generate`` (issue 34, part 3): a whole Hugging Face generate() call composed of an
eager prefill, generate's per-token tail and decode steps at sampled contexts, interpolated.
Tiny Llama/Mistral configs keep every capture under a second."""

import json

import pytest
import torch
from hypothesis import given, settings, strategies as st

import gpusim
from gpusim.cli.commands import main
from gpusim.predict import decode
from gpusim.predict.generate import interpolate, sample_contexts

hf = pytest.importorskip("transformers")

LAYERS, KV_HEADS, HEAD_DIM, HEADS, HIDDEN = 2, 2, 64, 4, 256
BF16 = 2


def tiny_llama():
    cfg = hf.LlamaConfig(num_hidden_layers=LAYERS, hidden_size=HIDDEN, intermediate_size=512,
                         num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
                         vocab_size=1000, max_position_embeddings=8192, eos_token_id=2)
    with torch.device("meta"):
        return hf.LlamaForCausalLM(cfg).eval()


def kv_formula(tokens, batch, layers=LAYERS):
    """layers x 2 (K and V) x kv_heads x head_dim x tokens x batch x dtype bytes."""
    return layers * 2 * KV_HEADS * HEAD_DIM * tokens * batch * BF16


@pytest.fixture(scope="module")
def model():
    return tiny_llama()


@pytest.fixture(scope="module")
def dyn(model):
    return gpusim.generate(model, batch=2, prompt=256, new=1500, gpu="h100", samples=3)


@pytest.fixture(scope="module")
def static(model):
    return gpusim.generate(model, batch=2, prompt=256, new=1500, gpu="h100", cache="static",
                           mode="compiled", samples=3)


def test_kv_bytes_exact(dyn, static):
    # the dynamic cache holds prompt + new - 1 tokens when generate returns (the last token
    # is never fed back); the static one all max_cache_len = max_length - 1 positions (generate)
    assert dyn.kv_cache_bytes == kv_formula(256 + 1500 - 1, 2)
    assert static.kv_cache_bytes == kv_formula(256 + 1500 - 1, 2)


def test_kv_bytes_sliding_window_capped():
    cfg = hf.MistralConfig(num_hidden_layers=LAYERS, hidden_size=HIDDEN, intermediate_size=512,
                           num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM,
                           vocab_size=1000, sliding_window=128)
    with torch.device("meta"):
        m = hf.MistralForCausalLM(cfg).eval()
    assert decode.sliding_layers(cfg) == [128] * LAYERS
    full = decode.kv_cache_bytes(m, "static", 1, 1000, 1000, torch.bfloat16)
    assert full == kv_formula(128, 1)          # the window, not the context
    assert decode.kv_cache_bytes(m, "static", 1, 100, 100, torch.bfloat16) == kv_formula(100, 1)


def test_dynamic_tpot_grows_with_context(dyn):
    # DynamicCache's cat and the attention read the whole cache: device time grows
    assert dyn.sample_contexts == [256, 256 + 749, 256 + 1498]
    assert all(b > a for a, b in zip(dyn.sample_device_us, dyn.sample_device_us[1:]))
    assert all(b >= a for a, b in zip(dyn.token_us, dyn.token_us[1:]))
    assert len(dyn.token_us) == 1500 - 1


def test_static_step_independent_of_context(static):
    # a static cache attends over all max_cache_len positions whatever the context: only the
    # mask's few bytes move with it
    d = static.sample_device_us
    assert static.sample_contexts == [256, 256 + 1498]     # flat: the first and last step
    assert max(d) - min(d) < 0.01 * min(d)
    assert static.step_kernels < 0.6 * static.parts["steps"][256].kernel_count + 100  # CUDA graph of fused kernels


def test_compiled_static_beats_eager_dynamic(dyn, static):
    assert static.tpot_us < dyn.tpot_us
    # the prefill is eager in both (HF's _prefill calls the module itself)
    assert static.parts["prefill"].mode == "eager" and static.parts["steps"][256].mode == "cudagraph"


def test_curve_exact_at_samples(dyn):
    for c, us in zip(dyn.sample_contexts, dyn.sample_token_us):
        assert dyn.token_us[c - dyn.prompt] == pytest.approx(us, rel=1e-12)


def test_totals_compose(dyn):
    assert dyn.total_us == pytest.approx(dyn.ttft_us + sum(dyn.token_us))
    assert dyn.tokens_per_s == pytest.approx(2 * 1500 / dyn.total_us * 1e6)
    assert dyn.tail_kernels > 5 and dyn.tail_host_us > 0
    assert dyn.ttft_us > dyn.parts["prefill"].device_us


def test_peak_holds_weights_and_cache(dyn, static, model):
    w = sum(t.numel() * t.element_size() for t in [*model.parameters(), *model.buffers()])
    assert dyn.weights_bytes == w
    for r in (dyn, static):
        assert r.peak_bytes >= r.weights_bytes + r.kv_cache_bytes
        assert r.fits and r.max_batch > r.batch


def test_dynamic_step_peak_not_a_second_cache(dyn):
    # eager frees each layer's old tensors as its cat replaces them (capture records them as
    # released inputs): the step's peak above the resident cache is about one layer's
    # tensor, not a second cache
    last = dyn.parts["steps"][dyn.sample_contexts[-1]]
    old = kv_formula(dyn.sample_contexts[-1], 2)
    assert len(last.graph.meta["released_inputs"]) == 2 * LAYERS        # K and V per layer
    assert old / (2 * LAYERS) <= last.memory.peak_bytes < old / LAYERS
    # the prefill keeps the cache it fills: its peak holds the whole prompt's cache
    assert dyn.parts["prefill"].memory.peak_bytes >= kv_formula(256, 2)


def test_static_step_releases_nothing(static):
    last = static.parts["steps"][static.sample_contexts[-1]]
    assert last.graph.meta["released_inputs"] == []     # index_copy_ writes in place


def test_plain_numbers(dyn):
    d = dyn.to_dict()
    json.dumps(d)
    for k, v in d.items():
        assert isinstance(v, (int, float, str, bool, list)), k


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0, 1e6), min_size=2, max_size=6), st.integers(0, 10**4),
       st.integers(1, 10**4), st.integers(2, 6))
def test_interpolation_exact_and_monotone(ys, first, span, samples):
    xs = sample_contexts(first, first + span, samples)
    ys = sorted(ys)[:len(xs)] + [max(ys)] * (len(xs) - len(ys))
    assert xs[0] == first and xs[-1] == first + span and xs == sorted(set(xs))
    for x, y in zip(xs, ys):
        assert interpolate(xs, ys, x) == y
    vals = [interpolate(xs, ys, x) for x in range(first, first + span + 1, max(1, span // 50))]
    assert all(b >= a for a, b in zip(vals, vals[1:]))


@pytest.mark.parametrize("args, words", [
    (["--new", "0"], "--new must be at least 1"),
    (["--batch", "two"], "--batch 'two' is not a whole number"),
    (["--cache", "paged"], "unknown --cache 'paged'"),
    (["--mode", "cudagraph"], "unknown --mode 'cudagraph'"),
    (["--cache", "dynamic", "--mode", "compiled"], "only with a static cache"),
    (["--gpu", "nosuchgpu"], "nosuchgpu"),
])
def test_cli_errors_one_line(args, words, capsys):
    assert main(["generate", "hf:llama-3.2-1b"] + args) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and words in err and err.startswith("gpusim: error:")


def test_cli_not_a_causal_lm(capsys):
    assert main(["generate", "mlp"]) == 2
    assert "Hugging Face causal LM" in capsys.readouterr().err


def test_cli_file_model_side_by_side(tmp_path, capsys):
    f = tmp_path / "lm.py"
    f.write_text("import transformers\n"
                 "def tiny():\n"
                 f"    cfg = transformers.LlamaConfig(num_hidden_layers=1, hidden_size={HIDDEN}, "
                 "intermediate_size=512, num_attention_heads=4, num_key_value_heads=2, vocab_size=1000)\n"
                 "    return transformers.LlamaForCausalLM(cfg)\n")
    assert main(["generate", f"{f}:tiny", "--batch", "2", "--prompt", "64", "--new", "8"]) == 0
    out = capsys.readouterr().out
    assert "dynamic cache, eager" in out and "static cache, compiled" in out
    assert "time to first token" in out and "KV cache" in out
    assert main(["generate", f"{f}:tiny", "--prompt", "64", "--new", "1", "--cache", "static",
                 "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (run,) = doc["runs"]
    assert run["mode"] == "compiled" and run["token_us"] == [] and run["ttft_us"] > 0


def _row(gpu, batch, tpot_ms, fits=True, prompt=512):
    return {"gpu": gpu, "batch": batch, "prompt": prompt, "tpot_ms": tpot_ms,
            "tokens_per_s": batch / tpot_ms * 1e3, "fits": fits}


def test_serving_cheapest_gpu():
    from gpusim.sweep.serving import cheapest
    rows = [_row("a", 8, 10), _row("a", 64, 40), _row("a", 256, 90, fits=False),
            _row("b", 8, 20), _row("b", 64, 60)]
    ranked = cheapest(rows, {"a": 3.0, "b": 1.0}, target_tps=10000, max_tpot_ms=50)
    a = next(x for x in ranked if x["gpu"] == "a")
    b = next(x for x in ranked if x["gpu"] == "b")
    assert a["batch"] == 64 and a["gpus_needed"] == 7          # 1600 tokens/s each under 50 ms
    assert b["batch"] == 8 and b["gpus_needed"] == 25          # 400 tokens/s: batch 64 misses the bound
    assert ranked[0]["gpu"] == "a" and a["usd_per_hour"] == 21.0 and b["usd_per_hour"] == 25.0
    assert cheapest(rows, {}, None, 5) == []                   # nothing meets 5 ms


@pytest.mark.parametrize("args, words", [
    (["--batch", "1,x"], "--batch 'x' is not a whole number"),
    (["--batch", "0"], "at least 1"),
    (["--target-tps", "-5"], "--target-tps must be a positive number"),
    (["--price", "h100=free"], "is not a number of dollars"),
])
def test_sweep_serve_errors_one_line(args, words, capsys):
    assert main(["sweep", "serve", "hf:llama-3.2-1b", "--gpu", "h100"] + args) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and words in err


def test_cold_call_builds_attention_plans(model):
    # bf16 attention on an H100 runs on cuDNN, which builds a plan at every new shape: a
    # first call at these lengths pays the host's cudnn_attention_plan_us per layer and step
    from gpusim.hw.host import load_host
    from gpusim.predict.generate import plan_build_us
    warm, cold = (gpusim.generate(model, batch=1, prompt=64, new=4, gpu="h100", warm=w) for w in (True, False))
    per = load_host(None).cudnn_attention_plan_us
    assert plan_build_us(warm.parts["steps"][64]) == pytest.approx(LAYERS * per)
    assert cold.tpot_us == pytest.approx(warm.tpot_us + LAYERS * per, rel=0.05)
    assert cold.ttft_us > warm.ttft_us
    st = gpusim.generate(model, batch=1, prompt=64, new=4, gpu="h100", cache="static", mode="compiled")
    assert plan_build_us(st.parts["steps"][64]) == 0.0          # a CUDA graph replay builds nothing


def test_prep_part_is_prepare_inputs_for_generation(dyn, static):
    # before each forward generate runs prepare_inputs_for_generation: the last token's ids and
    # position slices cloned (both caches); for a static cache also the 4D mask over all
    # max_cache_len positions, which the compiled step then takes as its input
    dp, sp = dyn.parts["prep"], static.parts["prep"]
    assert decode.mask_of(dp.graph) is None
    shape, dtype = decode.mask_of(sp.graph)
    assert shape == (2, 1, 1, 256 + 1500 - 1) and dtype == torch.bool
    assert sp.kernel_count > dp.kernel_count >= 2
    # transformers' Python runs more frames building the mask than slicing alone, each counted
    assert sp.graph.meta["library_frames"] > dp.graph.meta["library_frames"] > 0
    assert dyn.parts["tail"].graph.meta["library_frames"] > 0


def test_library_python_priced_per_frame(static):
    from dataclasses import replace
    from gpusim.predict.generate import library_python_us, part_host_us
    p = static.parts["prep"]
    per = p.host.python_torch_call_us
    assert library_python_us(p) == pytest.approx(p.graph.meta["library_frames"] * per)
    assert part_host_us(p) == pytest.approx(p.timeline.host_us + library_python_us(p))
    bare = replace(p, host=replace(p.host, python_torch_call_us=None))
    assert library_python_us(bare) == 0.0 and part_host_us(None) == 0.0
    assert static.tail_host_us == pytest.approx(part_host_us(static.parts["tail"]) + part_host_us(p))


def test_library_frames_count_only_transformers_code():
    from transformers.generation.stopping_criteria import MaxLengthCriteria

    def mine(x):
        return [abs(x) for _ in range(50)]
    counted = decode.LibraryFrames(mine)
    counted(3)
    assert counted.frames == 0                   # gpusim's own Python is not the library's
    crit = MaxLengthCriteria(max_length=4)
    counted = decode.LibraryFrames(lambda ids: crit(ids, None))
    counted(torch.zeros(1, 3, dtype=torch.long))
    assert counted.frames >= 1
    import sys
    assert sys.getprofile() is None              # the counter leaves no profiler behind


def test_dynamo_entry_prices_every_tensor_input(static):
    # generate's compiled call is a reduce-overhead call: the tree's call figure (the timeline's
    # replay) covers one input, each further tensor input (weights and cache too) costs the tree's
    # per-input figure; a host without those figures keeps the default mode's call and per-input
    from dataclasses import replace
    from gpusim.predict.generate import dynamo_entry_us
    step = static.parts["steps"][256]
    n_in = step.graph.meta["inputs"]
    assert len(step.graph.meta["params"]) > 0 and n_in > len(step.graph.meta["params"])
    h = step.host.replace(compiled_call_us=10.0, compiled_input_us=3.0, cudagraph_tree_call_us=50.0,
                          cudagraph_tree_input_us=0.5)
    assert dynamo_entry_us(replace(step, host=h)) == pytest.approx((n_in - 1) * 0.5)
    h0 = h.replace(cudagraph_tree_input_us=None)
    assert dynamo_entry_us(replace(step, host=h0)) == pytest.approx(10.0 + n_in * 3.0)
    assert dynamo_entry_us(static.parts["prep"]) == 0.0      # eager: no Dynamo


def test_harness_times_prepare_inputs_and_restores():
    # generate_run.py stamps each prepare_inputs_for_generation call (prep_host_ms) besides the
    # compiled forward's, and leaves the model as it found it
    from validation.measure.generate_run import _timed_forward

    class Model:
        def get_compiled_call(self, *a):
            return lambda x: x + 1

        def __call__(self, x):
            return x

        def prepare_inputs_for_generation(self, ids, **kw):
            return {"input_ids": ids, **kw}
    m = Model()
    sink, prep = [], []
    undo = _timed_forward(m, sink, prep)
    assert m.prepare_inputs_for_generation(3, use_cache=True) == {"input_ids": 3, "use_cache": True}
    assert m.get_compiled_call()(1) == 2
    assert len(prep) == 1 and len(sink) == 1 and all(b >= a for a, b in prep + sink)
    undo()
    assert "prepare_inputs_for_generation" not in vars(m) and "get_compiled_call" not in vars(m)


def test_harness_wrap_keeps_a_real_generate_working():
    # HF's generate checks its kwargs (attention_mask) against prepare_inputs_for_generation's
    # signature: the stamped wrapper must show the original's (an H200 lease lost its records to this)
    transformers = pytest.importorskip("transformers")
    import torch
    from validation.measure.generate_run import _timed_forward
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                   num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64)
    torch.manual_seed(0)
    m = transformers.LlamaForCausalLM(cfg).eval()
    ids = torch.randint(1, 64, (1, 5))
    sink, prep = [], []
    from validation.measure.host_drift import token_stamp
    stamp = token_stamp()         # the harness's clock a token (time per output token)
    undo = _timed_forward(m, sink, prep)
    try:
        with torch.no_grad():
            out = m.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=3, min_new_tokens=3,
                             do_sample=False, pad_token_id=0,
                             logits_processor=transformers.LogitsProcessorList([stamp]))
    finally:
        undo()
    assert out.shape[1] == 8 and len(prep) == 3 and len(sink) >= 2
    assert len(stamp.t) == 3 and stamp.t == sorted(stamp.t)


def test_tail_runs_generates_logits_processors():
    # min_new_tokens also sets min_length: generate masks EOS twice a token (MinLength and MinNewTokensLength
    # processors, each an isin over the vocabulary) and the EOS criterion checks once: three isin a token in a
    # real CPU generate (and in the H200 traces), as many in the captured tail
    from torch.utils._python_dispatch import TorchDispatchMode

    from gpusim.capture.tracing import capture
    cfg = hf.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64)
    torch.manual_seed(0)
    real = hf.LlamaForCausalLM(cfg).eval()

    class Isin(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.n += func.overloadpacket is torch.ops.aten.isin
            return func(*args, **(kwargs or {}))
    ids = torch.randint(3, 64, (1, 5))

    def isin_calls(new):
        with torch.no_grad(), Isin() as c:
            real.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new, min_new_tokens=new,
                          do_sample=False, pad_token_id=0)
        return c.n
    per_token = isin_calls(3) - isin_calls(2)
    with torch.device("meta"):
        meta = hf.LlamaForCausalLM(cfg).eval()
    g = capture(decode.tail_fn(5, 3, True, meta), decode.tail_args(meta, 1, 5))
    assert per_token == 3
    assert sum("isin" in str(d.get("op")) for _, d in g.g.nodes(data=True)) == per_token
