"""Calibrate's probe of a whole decoder's compiled call (issue 34): a tiny Hugging Face Llama (two layers,
bf16) generating with a static cache, which ``generate()`` compiles (``mode="reduce-overhead"``: CUDA graph
trees), the host time of its compiled call per token stamped as validation/measure/generate_parts.py does.
A decoder's call runs more than calibrate's one-matmul reduce-overhead probe (``reduce_overhead``): Dynamo's
guards over a module tree, the keyword arguments and the output object, the tree's bookkeeping for a graph
that mutates its cache, the copy-in of the inputs it does not own; what it costs beyond that probe is
``compiled_model_call_us`` (:func:`model_call_figure`), which ``gpusim.generate`` adds to every compiled
token. Needs transformers; {} without it or on any failure (the host profile then lacks the figure)."""

from __future__ import annotations

import statistics

import torch

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
