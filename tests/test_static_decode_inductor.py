"""The compiled static-cache decode step's Triton kernels (issue 34): what Inductor generates
for a Llama layer over a StaticCache, as the H100 generate records (2026-11-28c) list them,
per layer: the input and post-attention RMSNorms, q's rotary embedding (copied for cuDNN),
k's rotary embedding scattered into the key cache, v scattered into the value cache,
repeat_kv's key and value copies (cuDNN reads 32 heads), the cache's position counter
(``add_`` written back), SiLU*up; per graph, one bias kernel per four layers for the bool mask
(:mod:`gpusim.lower.sdpa_bias`)."""

import pytest
import torch

from gpusim.graph.ops import packet_name
from gpusim.hw.spec import load_spec
from gpusim.lower.inductor import inductor_groups, scatters_input
from gpusim.lower.lowering import lower
from gpusim.lower.sdpa_bias import bias_kernels, needs_bias_copy
from gpusim.predict import decode

hf = pytest.importorskip("transformers")

LAYERS, MAX_LEN = 4, 639


@pytest.fixture(scope="module")
def step():
    """The decode step graph generate compiles: one token over a StaticCache of 639
    positions, the 4D bool mask built outside (Llama-3.2-1B's heads, four layers)."""
    from gpusim.capture.tracing import capture
    cfg = hf.LlamaConfig(num_hidden_layers=LAYERS, hidden_size=256, intermediate_size=512,
                         num_attention_heads=32, num_key_value_heads=8, head_dim=64,
                         vocab_size=1024, tie_word_embeddings=True)
    with torch.device("meta"):
        module = hf.LlamaForCausalLM(cfg).to(torch.bfloat16).eval()
    args = decode.forward_args(module, "static", 1, 1, 512, MAX_LEN, torch.bfloat16,
                               ((1, 1, 1, MAX_LEN), torch.bool))
    return capture(decode.forward_fn(module), args, name="static decode")


def generated(low):
    return [k for k in low.kernels if k.impl == "generated"]


def test_kernels_per_layer_as_measured(step):
    spec = load_spec("h100")
    low = lower(step, "cudagraph", spec=spec)
    main = [k for k in generated(low) if k.role == "main"]
    bias = [k for k in generated(low) if k.role == "aux"]
    # 2 norms + q rotary + k scatter + v scatter + 2 repeat_kv copies + counter + silu*up
    # per layer; per graph: the first norm, the final norm, the rotary tables (2)
    assert len(main) == 9 * LAYERS + 1 + 2
    assert len(bias) == 1                                  # four layers' biases, one kernel


def test_each_cache_update_is_a_kernel_of_its_own(step):
    groups = inductor_groups(step, load_spec("h100"))
    scat = [g for g in groups if any(scatters_input(step, n) for n in g)]
    assert len(scat) == 2 * LAYERS
    for g in scat:
        assert sum(scatters_input(step, n) for n in g) == 1
        # nothing that reads the cache after the update joins the scatter
        assert not any(packet_name(step.g.nodes[n]["op"]) == "reshape" for n in g)
    keys = [g for g in scat if any(packet_name(step.g.nodes[n]["op"]) == "cat" for n in g)]
    assert len(keys) == LAYERS                             # the key's rotary inlines into it


def test_bias_runs_span_at_most_the_proximity_window(step):
    from gpusim.graph.opgraph import kernel_order
    from gpusim.lower.lowering import Kernel
    spec = load_spec("h100")
    order = kernel_order(step, inductor_groups(step, spec))
    attn = [g[0] for g in order if step.g.nodes[g[0]]["kind"] == "attention"]
    assert len(attn) == LAYERS and all(needs_bias_copy(step, n, spec) for n in attn)
    heads = bias_kernels(step, order, spec, Kernel)
    assert list(heads) == [attn[0]]
    (k,) = heads[attn[0]]
    assert k.bytes == MAX_LEN * (1 + 2 * LAYERS)           # bool mask read once, bf16 bias per call
    # eager dispatch is untouched: no Inductor bias kernel there
    assert not [k for k in lower(step, "eager", spec=spec).kernels
                if k.impl == "generated"]


def test_float_mask_computed_in_graph_needs_no_extra_kernel(step):
    # only a bool mask or an unaligned graph-input mask gets one (BEiT's computed bias: none)
    spec = load_spec("h100")
    n = next(n for n in step.compute_nodes if step.g.nodes[n]["kind"] == "attention")
    a = dict(step.g.nodes[n])
    step.g.nodes[n]["sdpa"] = {**a["sdpa"], "mask_dtype": "torch.bfloat16", "mask_shape": (1, 1, 1, 640)}
    try:
        assert not needs_bias_copy(step, n, spec)
    finally:
        step.g.nodes[n]["sdpa"] = a["sdpa"]
