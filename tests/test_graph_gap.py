"""The device's gap between a replayed CUDA graph's kernels (issue 34): a GPU figure, ``graph_kernel_gap_us``,
fitted on validation/measure/graph_gap.py's microbenchmark (validation/fit/fit_graph_gap.py), read by the
timeline before the host profile's ``cudagraph_kernel_us``; and the compiled model-call probe wired into
calibrate's host figures."""

import json
import os

import pytest

from gpusim.hw.host import FIELDS, load_host
from gpusim.hw.spec import load_spec

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LEASE_N = os.path.join(ROOT, "validation", "results", "generate", "lease-n", "host.toml")
TRACE = os.path.join(ROOT, "validation", "results", "generate", "traces", "hf_llama-3.2-1b-b1-static.json.gz")


def _chain():
    import torch

    import gpusim

    def f(x):
        for _ in range(12):
            x = torch.relu(x @ x) + 1.0
        return x
    return gpusim.capture(f, (torch.randn(64, 64),))


def test_a_replay_spends_the_specs_gap_between_kernels():
    import gpusim
    g = _chain()
    spec = load_spec("h200-sxm-calibrated")
    host = load_host()
    assert spec.graph_kernel_gap_us is not None            # measured on the H200 (fit_graph_gap)
    off = gpusim.predict(g, gpu=spec.replace(graph_kernel_gap_us=None), mode="cudagraph", host=host)
    on = gpusim.predict(g, gpu=spec.replace(graph_kernel_gap_us=1.0), mode="cudagraph", host=host)
    k = off.kernel_count
    assert k > 10
    # the replay's span on the device (first kernel's start to last kernel's end), not the kernel sum
    assert on.timeline.span_us - off.timeline.span_us == pytest.approx((k - 1) * (1.0 - host.cudagraph_kernel_us), rel=1e-6)
    assert on.device_us == off.device_us
    # eager and compiled streams are not replays: the figure leaves them alone
    for mode in ("eager", "compiled"):
        a = gpusim.predict(g, gpu=spec.replace(graph_kernel_gap_us=None), mode=mode, host=host)
        b = gpusim.predict(g, gpu=spec.replace(graph_kernel_gap_us=1.0), mode=mode, host=host)
        assert a.end_to_end_us == b.end_to_end_us
    # a GPU without the microbenchmark keeps the host's figure: nothing measured on the H200 moves to it
    assert load_spec("h100-sxm-calibrated").graph_kernel_gap_us is None


def test_the_spec_figure_is_the_fit_of_the_committed_microbenchmark():
    from validation.fit.fit_graph_gap import fit, gap, model_like, read, span_error
    env, micro, dec, files = read("h200")
    assert env["gpu"] == "NVIDIA H200" and micro and dec
    g = fit(micro)
    assert round(g, 4) == round(load_spec("h200-sxm-calibrated").graph_kernel_gap_us, 4)
    like = [r for r in micro if model_like(r)]
    assert len(like) >= 5 and len({r["lease"] for r in like}) == 2
    # the figure prices the decoder-layer graphs' spans within 1%, where the host's 0.05 us missed by ~9%
    assert max(abs(span_error(r, g)) for r in like) < 1.0
    assert min(abs(span_error(r, 0.05)) for r in like) > 5.0
    # graphs of one kernel repeated, two alternating or 16 elementwise kernels cycled run tighter than a
    # decoder layer's: the figure is not their median
    few = sorted(gap(r) for r in micro if not model_like(r))
    assert few[len(few) // 2] < 0.75 * g


def test_gap_figure_from_calibrates_probe():
    from validation.measure.graph_gap import gap_figure
    assert gap_figure({"gap_us": 0.47}) == {"graph_kernel_gap_us": 0.47}
    assert gap_figure({"gap_us": -0.1}) == {"graph_kernel_gap_us": 0.0}
    assert gap_figure(None) == {} and gap_figure({"gap_us": None}) == {}


def test_pair_gaps_and_a_traces_graph_kernels():
    from validation.measure.graph_gap import pair_gaps, trace_graph_kernels
    r = [[(0.0, 1.0, "a"), (1.5, 1.0, "b"), (3.0, 1.0, "a")], [(0.0, 1.0, "a"), (1.7, 1.0, "b"), (3.1, 1.0, "a")]]
    assert pair_gaps(r) == {"a -> b": pytest.approx(0.6), "b -> a": pytest.approx(0.45)}
    graphs = trace_graph_kernels(TRACE)         # lease m's Llama-3.2-1B static trace: one replay a token
    assert len(graphs) == 5 and {len(ks) for ks in graphs} == {314}
    assert all(ks == sorted(ks) for ks in graphs)


def test_fastest_rounds_keeps_the_fastest_model_call_whole():
    from validation.measure.host_bench import fastest_rounds
    rounds = [{"x": 2.0, "model_call": {"call_us": 450.0, "inputs": 31, "copied": 3}},
              {"x": 1.0, "model_call": {"call_us": 430.0, "inputs": 31, "copied": 3}},
              {"x": 3.0, "model_call": {"error": "RuntimeError: no"}}]
    out = fastest_rounds(rounds)
    assert out["x"] == 1.0 and out["model_call"] == {"call_us": 430.0, "inputs": 31, "copied": 3}
    assert fastest_rounds([{"model_call": {"error": "e"}}, {"model_call": {"error": "f"}}])["model_call"] == {"error": "e"}


def test_calibrate_measures_the_model_call_and_the_law_steps_aside():
    from validation.fit.calibrate import fit_host, host_profile
    with open(LEASE_N + ".raw.json") as f:
        raw = json.load(f)["host"]                 # a real lease's host timings, with the reduce-overhead probe
    out, diag = fit_host(raw, 1.12)
    assert "compiled_model_call_us" not in out     # lease n ran no model-call probe
    derived = host_profile(out, "x", diag, "test")
    assert derived.provenance["compiled_model_call_us"][0] == "derived"
    probe = {"call_us": 450.0, "inputs": 31, "copied": 3}
    out, diag = fit_host(dict(raw, model_call=probe), 1.12)
    want = 450.0 - out["cudagraph_tree_call_us"] - 30 * out["cudagraph_tree_input_us"]
    assert out["compiled_model_call_us"] == pytest.approx(want) and diag["model_call"] == probe
    assert set(out) <= set(FIELDS)
    measured = host_profile(out, "x", diag, "test")
    assert measured.compiled_model_call_us == pytest.approx(want)
    assert measured.provenance["compiled_model_call_us"][0] == "measured"
    assert "model_call_probe" in measured.provenance["compiled_model_call_us"][1]
    out, diag = fit_host(dict(raw, model_call={"error": "x"}), 1.12)
    assert "compiled_model_call_us" not in out     # a failed probe: the law, not a wrong figure
