"""validation/measure/generate_parts.py on the CPU: a real generate() of a one-layer Llama with every
piece of the token stamped; the records carry what the scorer reads, and the hooks leave nothing behind."""

import json

import pytest

pytest.importorskip("transformers")


def test_dry_run_records_every_piece_and_restores(tmp_path):
    from transformers.generation.logits_process import LogitsProcessorList
    from transformers.generation.stopping_criteria import StoppingCriteriaList
    from transformers.generation.utils import StopCheck

    from validation.measure import generate_parts
    from torch._inductor import cudagraph_trees as ct
    before = (LogitsProcessorList.__call__, StoppingCriteriaList.__call__, StopCheck.__call__,
              ct.CUDAGraphTreeManager.run, ct.CUDAGraphNode.run, ct.CUDAGraphNode.run_graph)
    out = tmp_path / "parts.jsonl"
    assert generate_parts.main(["--tiny", "--out", str(out), "--reps", "1", "--stamped", "1"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows[0]["kind"] == "environment"
    gen = [r for r in rows if r["kind"] == "generate"]
    assert {r["cache"] for r in gen} == {"static", "dynamic"}
    for r in gen:
        assert set(generate_parts.TOP) <= set(r["parts"]) and "loop" in r["parts"]
        # the token is its pieces plus the loop, by construction
        assert r["parts"]["token"] > 0 and r["statistic"] == "fastest rep"
        assert len(r["token_ms_reps"][0]) == r["new"] - 1 and len(r["forward_host_ms"]) == r["new"] - 1
    assert (LogitsProcessorList.__call__, StoppingCriteriaList.__call__, StopCheck.__call__,
            ct.CUDAGraphTreeManager.run, ct.CUDAGraphNode.run, ct.CUDAGraphNode.run_graph) == before


def test_per_token_splits_at_the_processors():
    from validation.measure.generate_parts import per_token
    ev = [("procs", 0.0, 1e-6), ("stop", 2e-6, 5e-6), ("prep", 6e-6, 8e-6), ("call", 8e-6, 18e-6),
          ("tree", 9e-6, 17e-6), ("procs", 20e-6, 21e-6)]
    (t,) = per_token(ev)
    assert t["token"] == pytest.approx(20.0) and t["call"] == pytest.approx(10.0) and t["tree"] == pytest.approx(8.0)
    assert t["loop"] == pytest.approx(20.0 - 1 - 3 - 2 - 10)


def test_token_parts_groups_the_pieces():
    from validation.score.token_parts import measured_parts
    r = {"parts": {"token": 1500, "prep": 400, "call": 340, "tree": 200, "node": 60, "replay": 30, "update": 50,
                   "procs": 200, "crit": 60, "loop": 150, "stop": 300}, "graph_device_us": 700}
    m = measured_parts(r)
    assert m["outside"] == 140 and m["tree"] == 170 and m["replay"] == 30 and m["graph"] == 700
    assert m["tail"] == 50 + 200 + 60 + 150
    assert m["prep"] + m["call"] + m["tail"] + m["stop"] == r["parts"]["token"]   # the loop closes the token
    assert "outside" not in measured_parts({"parts": {"call": 5}})                  # eager: no split


def test_model_call_figure_prices_beyond_the_reduce_overhead_probe():
    # calibrate's tiny-decoder probe: its call less the tree's call and per-input figures; a failed
    # probe (no transformers, no CUDA graph) gives no figure rather than a wrong one
    from validation.measure.model_call_probe import model_call_figure, model_call_probe
    fitted = {"cudagraph_tree_call_us": 80.0, "cudagraph_tree_input_us": 1.0}
    assert model_call_figure({"call_us": 300.0, "inputs": 21, "copied": 3}, fitted) == 200.0
    assert model_call_figure({"call_us": 50.0, "inputs": 21}, fitted) == 0.0
    assert model_call_figure({"error": "x"}, fitted) is None and model_call_figure({}, fitted) is None
    assert model_call_figure({"call_us": 300.0, "inputs": 21}, {"cudagraph_tree_call_us": None}) is None
    assert model_call_probe("cpu") == {}          # no compiled call on the CPU: no figure, no error


def test_dynamo_entry_adds_the_model_call_figure():
    import dataclasses

    import gpusim
    from gpusim.hw.host import load_host
    from gpusim.predict.generate import dynamo_entry_us
    from tests.test_generate import tiny_llama
    r = gpusim.generate(tiny_llama(), batch=1, prompt=32, new=3, gpu="h100", cache="static", mode="compiled")
    step = r.parts["steps"][r.sample_contexts[0]]
    h = load_host().replace(cudagraph_tree_call_us=50.0, cudagraph_tree_input_us=0.5, compiled_model_call_us=None)
    base = dynamo_entry_us(dataclasses.replace(step, host=h))
    h2 = h.replace(compiled_model_call_us=120.0)
    assert dynamo_entry_us(dataclasses.replace(step, host=h2)) == base + 120.0


def test_model_call_law_in_units_of_the_tree_call():
    # lease n measured a decoder's call beyond the reduce-overhead figures; another host gets it in units of
    # its own cudagraph_tree_call_us, derived, naming lease n; no tree figure, no law
    from gpusim.hw.host import load_host
    from validation.measure.host_bench import python_law
    from validation.measure.model_call_probe import LAW_HOST, model_call_law
    n = load_host(LAW_HOST)
    vals, prov = model_call_law(2 * n.cudagraph_tree_call_us)
    assert vals["compiled_model_call_us"] == pytest.approx(2 * n.compiled_model_call_us)
    assert prov["compiled_model_call_us"][0] == "derived" and "lease-n" in prov["compiled_model_call_us"][1]
    assert model_call_law(None) == ({}, {})
    law, _ = python_law(1.0, n.cudagraph_tree_call_us)      # calibrate derives it with the model's Python law
    assert law["compiled_model_call_us"] == pytest.approx(n.compiled_model_call_us)
    assert "compiled_model_call_us" not in python_law(1.0)[0]
