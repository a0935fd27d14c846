"""Capture counts what eager runs at decode: the nn.Module calls and top-level torch calls of a decode step
captured on meta tensors (what the host profile prices the model's Python by, gpusim.hw.host.python_us) against
the same step run for real on CPU under the same counting mode (transformers' own Python, its masks, its cache),
for decoders of the zoo's families (Llama: RMSNorm, rotary, GQA; Qwen2: the same with biased q/k/v projections;
Phi: LayerNorm, partial rotary, parallel block). docs/eager_token.md: the counts of the zoo's full decoders
(Qwen2-0.5B 318 modules / 1,659 torch calls captured, 318 / 1,664 real) agree the same way."""

import pytest
import torch

hf = pytest.importorskip("transformers")

from gpusim.capture.pycalls import TorchCalls  # noqa: E402
from gpusim.capture.tracing import capture  # noqa: E402
from gpusim.predict import decode  # noqa: E402

CONTEXT = 8


def _configs(layers=3):
    common = dict(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
                  num_attention_heads=4, max_position_embeddings=64)
    return {"llama": hf.LlamaConfig(num_key_value_heads=2, **common),
            "qwen2": hf.Qwen2Config(num_key_value_heads=2, **common),
            "phi": hf.PhiConfig(partial_rotary_factor=0.5, **common)}


def _model(cfg, device):
    torch.manual_seed(0)
    with torch.device(device):
        m = hf.AutoModelForCausalLM.from_config(cfg)
    m = m.eval()
    m.config.use_cache = True
    return m


def _real_counts(module):
    """One real eager decode step on CPU over a cache of CONTEXT tokens: (module calls, torch calls)."""
    cfg = module.config
    cache = hf.DynamicCache(config=cfg)
    pos = torch.arange(CONTEXT)
    for layer in range(cfg.num_hidden_layers):
        kv = torch.randn(1, decode.kv_heads(cfg), CONTEXT, decode.head_dim(cfg))
        cache.update(kv, kv.clone(), layer, {"cache_position": pos})
    ids = torch.tensor([[5]])
    mask = torch.ones(1, CONTEXT + 1, dtype=torch.long)
    position_ids = torch.tensor([[CONTEXT]])
    modules = [0]
    hook = torch.nn.modules.module.register_module_forward_pre_hook(
        lambda m, a: modules.__setitem__(0, modules[0] + 1))
    calls = TorchCalls()
    try:
        with torch.no_grad(), calls:
            decode.forward_fn(module)(ids, cache, mask, position_ids)
    finally:
        hook.remove()
    return modules[0], calls.calls


@pytest.mark.parametrize("family", ["llama", "qwen2", "phi"])
def test_captured_decode_step_counts_what_eager_runs(family):
    cfg = _configs()[family]
    real_modules, real_calls = _real_counts(_model(cfg, "cpu"))
    meta = _model(cfg, "meta")
    args = decode.forward_args(meta, "dynamic", 1, 1, CONTEXT, CONTEXT + 1, torch.float32)
    g = capture(decode.forward_fn(meta), args, name=f"{family} decode")
    # every module call is counted as eager makes it
    assert g.meta["module_calls"] == real_modules
    # the torch calls but a few once per step: the mask's host read (eager: ``Tensor.__bool__`` and six attribute
    # reads around it; capture: its own read, ``aten._local_scalar_dense``, and a ``numel``), the same at any depth
    assert abs(g.meta["torch_calls"] - real_calls) <= 8, (g.meta["torch_calls"], real_calls)
    # and the count grows with the layers as eager's does: a layer more, the same calls more in both
    more = _configs(cfg.num_hidden_layers + 1)[family]
    real_more = _real_counts(_model(more, "cpu"))
    meta_more = _model(more, "meta")
    g_more = capture(decode.forward_fn(meta_more),
                     decode.forward_args(meta_more, "dynamic", 1, 1, CONTEXT, CONTEXT + 1, torch.float32),
                     name=f"{family} decode +1")
    assert g_more.meta["module_calls"] - g.meta["module_calls"] == real_more[0] - real_modules
    assert g_more.meta["torch_calls"] - g.meta["torch_calls"] == real_more[1] - real_calls
