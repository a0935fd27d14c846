"""A whole decoder's compiled call beyond calibrate's reduce-overhead probe (issue 34): ``compiled_model_call_us``.

A decoder's ``generate()`` call (``mode="reduce-overhead"``: CUDA graph trees) runs more than calibrate's
one-matmul probe (``reduce_overhead``: ``cudagraph_tree_call_us`` and ``cudagraph_tree_input_us``):
Dynamo's guards over a module tree, the keyword arguments and the output object, the tree manager's
bookkeeping (its run outside the node: 200-400 µs on lease n), the copy-in of the inputs it does not own.
Lease n stamped that call for three decoders (validation/measure/generate_parts.py,
validation/fit/fit_model_call.py): beyond what the probe's figures price it costs 294-455 µs, little of it per
input, which that lease's host profile holds as measured. :func:`model_call_law` carries it to other hosts in
units of their own ``cudagraph_tree_call_us`` (the probe of the same kind of call: Python and C++ of Dynamo,
AOTAutograd and the tree), as calibrate derives the model's Python law (:func:`validation.measure.host_bench.python_law`).

:func:`model_call_probe` (a tiny Hugging Face Llama's static-cache generate, its call stamped) measures the
figure on every host directly: calibrate's host microbenchmarks run it (``host_bench``, the fastest of the rounds)
and write the measured figure, which then replaces the law's (the law stays for hosts where the probe fails). On
the H200 hosts of validation/results/h200/graph_gap/ it gave 265-281 and 336-384 µs; two real decoders' calls
stamped on the second host read 277 (Llama-3.2-1B) and 353 µs (Qwen2-0.5B) beyond the same host's reduce-overhead
figures, where the law gave 168-355 µs there (it inherits the one-matmul probe's 2x swings)."""

from __future__ import annotations

import os
import statistics

import torch

#: the host profile whose measured ``compiled_model_call_us`` the law carries to other hosts
LAW_HOST = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                        "validation", "results", "generate", "lease-n", "host.toml")


def model_call_law(tree_call_us: float | None) -> tuple[dict, dict]:
    """``compiled_model_call_us`` for a host whose ``cudagraph_tree_call_us`` is ``tree_call_us``: lease n's
    measured figure in units of lease n's ``cudagraph_tree_call_us``. ``({}, {})`` without either."""
    from gpusim.hw.host import load_host
    if not tree_call_us or not os.path.exists(LAW_HOST):
        return {}, {}
    ref = load_host(LAW_HOST)
    if not ref.compiled_model_call_us or not ref.cudagraph_tree_call_us:
        return {}, {}
    units = ref.compiled_model_call_us / ref.cudagraph_tree_call_us
    return ({"compiled_model_call_us": units * tree_call_us},
            {"compiled_model_call_us": ("derived", f"{units:.4f} x this host's cudagraph_tree_call_us {tree_call_us:.2f}: "
                                        f"lease n's compiled_model_call_us in units of its cudagraph_tree_call_us "
                                        f"(validation/results/generate/lease-n/host.toml: "
                                        f"{ref.provenance['compiled_model_call_us'][1]})")})

_MODEL: dict = {}


def _tiny(dev: str):
    if dev not in _MODEL:       # one model a process: every round reuses its compiled call
        import transformers
        cfg = transformers.LlamaConfig(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                                       eos_token_id=2)
        torch.manual_seed(0)
        _MODEL[dev] = transformers.LlamaForCausalLM(cfg).to(dev, torch.bfloat16).eval()
    return _MODEL[dev]


def model_call_probe(dev: str = "cuda", prompt: int = 16, new: int = 24) -> dict:
    """``call_us``: the median host time of the tiny decoder's compiled call over a generate's tokens (the
    fastest of 2 calls); ``inputs`` (tensors its CUDA-graph node receives) and ``copied`` (those it copies in)."""
    try:
        from validation.measure.generate_parts import Stamps, per_token
        model = _tiny(dev)
        ids = torch.randint(3, 256, (1, prompt), device=dev)
        kw = dict(attention_mask=torch.ones_like(ids), max_new_tokens=new, min_new_tokens=new, do_sample=False,
                  pad_token_id=0, use_cache=True, cache_implementation="static")
        s = Stamps()
        try:
            with torch.no_grad():
                for _ in range(3):      # compile, warm up, record the graph
                    model.generate(ids, **kw)
                calls = []
                for _ in range(2):
                    s.arm(model)
                    try:
                        model.generate(ids, **kw)
                    finally:
                        s.disarm()
                    calls.append(statistics.median(t.get("call", 0.0) for t in per_token(s.ev)))
        finally:
            s.undo()
        if "tree_inputs" not in s.info:
            return {}
        return {"call_us": min(calls), "inputs": s.info["tree_inputs"], "copied": s.info.get("tree_non_static")}
    except Exception as e:  # noqa: BLE001 - a probe must not cost the calibration
        return {"error": f"{type(e).__name__}: {str(e)[:200]}"}


def model_call_figure(probe: dict | None, fitted: dict) -> float | None:
    """``compiled_model_call_us``: the probe's call less what the reduce-overhead figures already price
    (``cudagraph_tree_call_us`` + ``cudagraph_tree_input_us`` per further input; its ~30 graph nodes at
    ``cudagraph_launch_node_us`` are left in, < 10 µs), never below 0. None without a probe or those figures."""
    if not probe or "call_us" not in probe or fitted.get("cudagraph_tree_call_us") is None:
        return None
    priced = fitted["cudagraph_tree_call_us"] + max(probe["inputs"] - 1, 0) * (fitted.get("cudagraph_tree_input_us") or 0.0)
    return float(max(0.0, probe["call_us"] - priced))
