"""Peak memory of a whole generate() call (issue 34): gpusim's liveness simulation against a real
generate() of a tiny Llama on the CPU, tensor storages tracked op by op
(validation/measure/cpu_liveness.py), and the measurement loop's held previous result."""

import pytest
import torch

import gpusim

hf = pytest.importorskip("transformers")

from validation.measure.cpu_liveness import run_loop  # noqa: E402
from validation.score.generate_accuracy import held_bytes  # noqa: E402

BATCH, PROMPT, NEW = 2, 48, 4


def tiny_llama(device):
    cfg = hf.LlamaConfig(num_hidden_layers=2, hidden_size=128, intermediate_size=512, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=512, max_position_embeddings=1024, eos_token_id=2)
    torch.manual_seed(0)
    with torch.device(device):
        m = hf.LlamaForCausalLM(cfg).to(torch.bfloat16).eval()
    m.generation_config.use_cache = True
    return m


@pytest.fixture(scope="module")
def runs():
    cpu = tiny_llama("cpu")
    recorded = run_loop(cpu, BATCH, PROMPT, NEW, reps=2, keep_out=True, warmups=0)
    clean = run_loop(cpu, BATCH, PROMPT, NEW, reps=2, keep_out=False, warmups=0)
    return recorded, clean, gpusim.generate(tiny_llama("meta"), batch=BATCH, prompt=PROMPT, new=NEW, gpu="h100")


def test_simulated_live_bytes_are_the_real_peak(runs):
    # the real call's peak of live tensors (weights aside; its ids and mask in) is the simulation's
    # unrounded live peak of the part that reaches it, plus at most generate's tail, which the
    # prediction stacks on top
    _, clean, r = runs
    parts = [r.parts["prefill"], r.parts["steps"][r.sample_contexts[-1]]]
    live = max(p.memory.inputs_bytes + p.memory.live_bytes for p in parts)
    assert live <= clean["peak_bytes"] <= live + r.parts["tail"].memory.live_bytes
    assert clean["peak_phase"] == "prefill"


def test_predicted_peak_is_the_real_peak(runs):
    # the prediction's activation peak (weights and cuBLAS's workspace aside) is the real call's
    # within 1%: generate's tail runs after the forward has freed its activations, and stacking
    # it on the prefill's peak (as before) read 3.5% high here
    _, clean, r = runs
    pm = r.parts["prefill"].memory      # weights, cuBLAS's workspace and the allocator's blocks aside
    act = r.peak_bytes - r.weights_bytes - pm.workspace_bytes - pm.resident_overhead_bytes
    assert act == pytest.approx(clean["peak_bytes"], rel=0.01)


def test_peak_counts_the_allocators_blocks_of_the_weights(runs):
    # at the prefill's peak (the call's) the prediction is what gpusim predict's memory says the
    # prefill needs resident: weights and inputs through the caching allocator (rounding, whole
    # blocks), cuBLAS's workspace, activations; max_memory_allocated counts those blocks
    r = runs[2]
    pm = r.parts["prefill"].memory
    assert pm.resident_overhead_bytes > 0
    assert r.peak_bytes == pm.total_bytes


def test_loop_as_recorded_holds_the_previous_result(runs):
    # generate_run.py's loop before the fix (``w, out = call(new)``): the previous call's result,
    # its sequences and whole cache, is allocated through the next call: output_bytes exactly
    recorded, clean, r = runs
    assert recorded["held_bytes"] - clean["held_bytes"] == r.output_bytes
    assert recorded["peak_bytes"] - clean["peak_bytes"] == r.output_bytes
    assert recorded["returned_cache_bytes"] == r.kv_cache_bytes


def test_score_adds_what_the_harness_held(runs):
    r = runs[2]
    old = {"wall_ms": {"median": 1.0, "n": 2}}
    assert held_bytes(old, r) == r.output_bytes > r.kv_cache_bytes
    assert held_bytes({**old, "holds_previous_output": False}, r) == 0
    assert held_bytes({"wall_ms": {"median": 1.0, "n": 1}}, r) == 0
