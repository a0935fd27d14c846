"""A decode step with its Hugging Face cache as an argument (issue 34, part 1): the cache
passes through capture as the object it is, its tensors are graph inputs held resident
(as weights are), and its update is in the graph with its bytes: DynamicCache's ``cat``
copies the whole cache every step, StaticCache's ``index_copy_`` writes one position."""

import pytest
import torch

import gpusim

hf = pytest.importorskip("transformers")

LAYERS, KV_HEADS, HEAD_DIM, HEADS, HIDDEN = 2, 2, 64, 4, 256
F32 = 4


def meta(*shape, dtype=torch.float32):
    return torch.empty(*shape, device="meta", dtype=dtype)


@pytest.fixture(scope="module")
def llama():
    cfg = hf.LlamaConfig(num_hidden_layers=LAYERS, hidden_size=HIDDEN, intermediate_size=512,
                         num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
                         vocab_size=1000, max_position_embeddings=4096)
    with torch.device("meta"):
        return cfg, hf.LlamaForCausalLM(cfg).eval()


def dynamic_cache(cfg, context, batch=1):
    """A DynamicCache holding ``context`` positions, filled without running the model."""
    cache = hf.DynamicCache(config=cfg)
    for layer in range(LAYERS):
        cache.update(meta(batch, KV_HEADS, context, HEAD_DIM),
                     meta(batch, KV_HEADS, context, HEAD_DIM), layer)
    return cache


def static_cache(cfg, context, max_len=2048, batch=1):
    cache = hf.StaticCache(config=cfg, max_cache_len=max_len)
    for layer in range(LAYERS):
        cache.update(meta(batch, KV_HEADS, context, HEAD_DIM),
                     meta(batch, KV_HEADS, context, HEAD_DIM), layer)
    return cache


def decode(model, cache, batch=1):
    ids = torch.zeros(batch, 1, dtype=torch.long, device="meta")
    return gpusim.predict(lambda ids, cache: model(ids, past_key_values=cache, use_cache=True),
                          (ids, cache), gpu="h100")


def cache_inputs(g, n_cache):
    """The graph inputs that are the cache's tensors: the last call arguments."""
    ins = [n for n in g.g.nodes if g.node(n)["kind"] == "input"
           and not str(g.node(n).get("label", "")).startswith(("model.", "lm_head."))]
    return ins[-n_cache:]


def cache_cats(g, n_cache):
    """The ``cat`` nodes that append to the cache (one input is a cached tensor)."""
    cached = set(cache_inputs(g, n_cache))
    return [g.node(n) for n in g.compute_nodes
            if g.node(n)["op"] == "aten.cat.default" and cached & set(g.node(n)["inputs"])]


def test_decode_step_with_a_dynamic_cache_argument_predicts(llama):
    cfg, model = llama
    cache = dynamic_cache(cfg, 128)
    p = decode(model, cache)
    d = p.to_dict()
    for k in ("device_us", "end_to_end_us", "flops", "bytes", "n_kernels"):
        assert type(d[k]) in (int, float) and d[k] > 0, k
    mem = {k: v for k, v in d["memory"].items() if k.endswith("_bytes")}
    assert mem and all(type(v) in (int, float) for v in mem.values()), mem
    assert cache.get_seq_length() == 128      # the caller's cache is not touched by capture
    assert isinstance(cache.layers[0].keys, torch.Tensor) and cache.layers[0].keys.shape[2] == 128


@pytest.mark.parametrize("batch", [1, 3])
def test_dynamic_cache_cat_copies_the_whole_cache(llama, batch):
    cfg, model = llama
    seen = {}
    for n in (128, 1024):
        g = decode(model, dynamic_cache(cfg, n, batch), batch).graph
        cats = cache_cats(g, 2 * LAYERS)
        assert len(cats) == 2 * LAYERS                                 # K and V per layer
        assert all(tuple(a["shape"]) == (batch, KV_HEADS, n + 1, HEAD_DIM) for a in cats)
        want = 2 * LAYERS * batch * KV_HEADS * (n + 1) * HEAD_DIM * F32
        assert sum(a["bytes_written"] for a in cats) == want
        assert sum(a["bytes_read"] for a in cats) == want            # old cache + new row
        seen[n] = g
    assert len(seen[128].compute_nodes) == len(seen[1024].compute_nodes)   # same ops
    def total(g):
        return sum(g.node(k)["bytes_read"] + g.node(k)["bytes_written"] for k in g.compute_nodes)
    grown = total(seen[1024]) - total(seen[128])
    cat_growth = 2 * 2 * LAYERS * batch * KV_HEADS * (1024 - 128) * HEAD_DIM * F32
    assert grown >= cat_growth      # the cats' copy, plus attention reading the longer cache


def test_dynamic_cache_step_time_grows_with_context(llama):
    cfg, model = llama
    short, long = decode(model, dynamic_cache(cfg, 128)), decode(model, dynamic_cache(cfg, 8192))
    assert long.kernel_count == short.kernel_count
    assert long.bytes > short.bytes and long.device_us > short.device_us


def test_static_cache_update_writes_one_position(llama):
    cfg, model = llama
    seen = []
    for n in (128, 1024):
        g = decode(model, static_cache(cfg, n)).graph
        upd = [g.node(k) for k in g.compute_nodes if g.node(k)["op"] == "aten.index_copy_.default"]
        assert len(upd) == 2 * LAYERS
        assert all(tuple(a["shape"]) == (1, KV_HEADS, 2048, HEAD_DIM) for a in upd)
        row = KV_HEADS * HEAD_DIM * F32
        assert [a["bytes_written"] for a in upd] == [row] * len(upd)
        assert [a["bytes_read"] for a in upd] == [row + 8] * len(upd)   # the row, its index
        assert not cache_cats(g, 2 * LAYERS)                  # nothing copies the cache
        seen.append(sum(a["bytes_read"] + a["bytes_written"] for a in upd))
    assert seen[0] == seen[1]            # independent of the context


def test_cache_tensors_are_resident_inputs_not_activations(llama):
    cfg, model = llama
    n, batch = 1024, 2
    p = decode(model, dynamic_cache(cfg, n, batch), batch)
    cache_bytes = 2 * LAYERS * batch * KV_HEADS * n * HEAD_DIM * F32
    params = sum(t.numel() * t.element_size() for t in model.parameters())
    assert p.memory.inputs_bytes == cache_bytes + batch * 8           # the cache and the ids
    assert p.memory.weights_bytes < params + cache_bytes // 2         # cache is not a weight
    resident = set(cache_inputs(p.graph, 2 * LAYERS))
    assert resident and not resident & set(p.memory.storages)        # never allocated by the call
    # eager frees each layer's old tensors once its cat has replaced them (the cache object
    # was their only holder): when the step returns, the grown cache (an output) has taken
    # the old one's place, not joined it
    assert set(p.graph.meta["released_inputs"]) == resident
    assert p.memory.timeline[-1] < cache_bytes / (2 * LAYERS)
    # the static cache: its tensors resident, the step's peak well below them
    s = decode(model, static_cache(cfg, n, max_len=4096, batch=batch), batch)
    static_bytes = 2 * LAYERS * batch * KV_HEADS * 4096 * HEAD_DIM * F32
    assert s.memory.inputs_bytes >= static_bytes
    assert s.memory.output_bytes == batch * 1 * 1000 * F32          # the logits only


def test_closure_form_still_works(llama):
    cfg, model = llama
    cache = dynamic_cache(cfg, 128)
    ids = torch.zeros(1, 1, dtype=torch.long, device="meta")
    p = gpusim.predict(lambda ids: model(ids, past_key_values=cache, use_cache=True), (ids,),
                       gpu="h100")
    cats = [p.graph.node(k) for k in p.graph.compute_nodes
            if p.graph.node(k)["op"] == "aten.cat.default"
            and tuple(p.graph.node(k)["shape"]) == (1, KV_HEADS, 129, HEAD_DIM)]
    assert len(cats) == 2 * LAYERS and p.device_us > 0


def test_other_decoders_take_their_cache(llama):
    cfg = hf.GPT2Config(n_layer=LAYERS, n_embd=HIDDEN, n_head=HEADS, vocab_size=1000,
                        bos_token_id=0, eos_token_id=0)
    with torch.device("meta"):
        gpt2 = hf.GPT2LMHeadModel(cfg).eval()
    cache = hf.DynamicCache(config=cfg)
    for layer in range(LAYERS):
        cache.update(meta(1, HEADS, 64, HEAD_DIM), meta(1, HEADS, 64, HEAD_DIM), layer)
    g = decode(gpt2, cache).graph
    assert len(cache_cats(g, 2 * LAYERS)) == 2 * LAYERS


def test_decode_prediction_is_deterministic(llama):
    cfg, model = llama
    a = decode(model, dynamic_cache(cfg, 256)).to_dict()
    b = decode(model, dynamic_cache(cfg, 256)).to_dict()
    assert a == b


def test_docs_llm_snippet_runs():
    import pathlib
    import re
    text = (pathlib.Path(__file__).parent.parent / "docs" / "llm.md").read_text()
    code = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert code
    for c in code:
        exec(compile(c, "docs/llm.md", "exec"), {"__name__": "__docs__"})


@pytest.mark.parametrize("kind", ["dynamic", "static"])
def test_sliding_window_cache_update_is_bounded_by_the_window(kind):
    window = 64
    cfg = hf.MistralConfig(num_hidden_layers=LAYERS, hidden_size=HIDDEN, intermediate_size=512,
                           num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
                           vocab_size=1000, sliding_window=window)
    with torch.device("meta"):
        model = hf.MistralForCausalLM(cfg).eval()
    seen = []
    for n in (128, 1024):
        cache = hf.DynamicCache(config=cfg) if kind == "dynamic" else \
            hf.StaticCache(config=cfg, max_cache_len=2048)
        for layer in range(LAYERS):
            cache.update(meta(1, KV_HEADS, n, HEAD_DIM), meta(1, KV_HEADS, n, HEAD_DIM), layer)
        g = decode(model, cache).graph
        win = [g.node(k) for k in g.compute_nodes
               if tuple(g.node(k)["shape"]) == (1, KV_HEADS, window, HEAD_DIM)
               and g.node(k)["kind"] == "copy"]
        # DynamicSlidingWindowLayer: cat of the window - 1 kept plus the new one (K and V);
        # StaticSlidingWindowLayer: roll and copy_ of the window (K and V)
        assert len(win) == (2 if kind == "dynamic" else 4) * LAYERS
        assert all(a["bytes_written"] == window * KV_HEADS * HEAD_DIM * F32 for a in win)
        seen.append(len(g.compute_nodes))
    assert seen[0] == seen[1]            # the same step at either context
