"""compiled_forward_factor: Inductor's wrapper inside a real forward against calibrate's compiled
chains, measured on gpusim's reference forwards under torch.compile and applied by the compiled
timeline like eager_forward_factor (scaled by program size). Fitted here from fake raw timings
(nothing is clocked on this machine)."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gpusim import capture, predict
from gpusim.hw.host import load_host
from gpusim.hw.spec import load_spec
from gpusim.sim.timeline import (COMPILED_FORWARD_KERNELS, LOOP_KERNELS, compiled_forward_factor,
                                 simulate, step_issue_us)
from validation.measure.host_bench import fastest_rounds
from validation.measure.reference_forwards import (_reference_graphs, fit_forward,
                                                   reference_predictions)

SPEC = load_spec("h100-sxm-calibrated")
HOST = load_host("h100-sxm-host")


def _block(x):
    for _ in range(4):
        x = torch.relu(x @ x) + 1
    return x


def _kernels(n: int, copies: int):
    g = capture(_block, (torch.empty(n, n, device="meta"),), compiling=True)
    return predict(g, gpu=SPEC, mode="compiled").kernels * copies


@settings(max_examples=20, deadline=None)
@given(st.floats(1.0, 3.0), st.sampled_from([64, 2048]), st.integers(1, 20), st.integers(0, 300))
def test_the_compiled_factor_scales_compiled_host_time_only(f, n, copies, inputs):
    """The whole compiled call's host time (call, inputs, every launch) times the factor's ramp
    at the program's size; device time, eager and CUDA-graph calls stay; no factor changes
    nothing, to the bit."""
    kernels = _kernels(n, copies)
    one, scaled = HOST.replace(compiled_forward_factor=None), HOST.replace(compiled_forward_factor=f)
    a = simulate(kernels, SPEC, "compiled", inputs=inputs, host=one)
    b = simulate(kernels, SPEC, "compiled", inputs=inputs, host=scaled)
    k = compiled_forward_factor(scaled, len(kernels))
    assert b.host_us == pytest.approx(k * a.host_us)
    assert b.device_us == a.device_us
    assert b.end_to_end_us >= a.end_to_end_us - 1e-6
    assert simulate(kernels, SPEC, "compiled", inputs=inputs, host=HOST).end_to_end_us == \
        a.end_to_end_us
    for mode in ("eager", "cudagraph"):
        assert simulate(kernels, SPEC, mode, host=scaled).end_to_end_us == \
            simulate(kernels, SPEC, mode, host=one).end_to_end_us


@settings(max_examples=30, deadline=None)
@given(st.floats(1.0, 3.0), st.integers(0, 400), st.integers(0, 400))
def test_the_compiled_factor_ramps_with_program_size(f, a, b):
    host = HOST.replace(compiled_forward_factor=f)
    lo, hi = sorted((a, b))
    assert 1.0 <= compiled_forward_factor(host, lo) <= compiled_forward_factor(host, hi) <= f + 1e-12
    assert compiled_forward_factor(host, min(lo, LOOP_KERNELS)) == 1.0
    assert compiled_forward_factor(host, max(hi, COMPILED_FORWARD_KERNELS)) == pytest.approx(f)


def test_compiled_forward_kernels_is_the_compiled_reference_gpt2s_kernel_count():
    g = _reference_graphs(True)["gpt2"]
    assert predict(g, gpu=SPEC, mode="compiled").kernel_count == COMPILED_FORWARD_KERNELS


def test_a_compiled_steps_graph_kernels_pay_the_factor_at_their_own_count():
    kernels = _kernels(64, 20)
    issuers = ["eager"] * 5 + ["fwd"] * (len(kernels) - 5)
    one = step_issue_us(kernels, issuers, HOST.replace(compiled_forward_factor=None))
    two = step_issue_us(kernels, issuers, HOST.replace(compiled_forward_factor=2.0))
    assert one[:5] == two[:5]
    k = compiled_forward_factor(HOST.replace(compiled_forward_factor=2.0), len(kernels) - 5)
    assert two[5:] == pytest.approx([k * x for x in one[5:]])


def test_fit_forward_fits_the_compiled_factor_from_raw_walls():
    """Walls k times gpusim's compiled prediction of the reference forwards (without the
    factor) fit k; a forward that failed to compile is left out; no compiled walls, no
    compiled factor; eager's fit is untouched."""
    pred = reference_predictions(SPEC, HOST, "compiled")
    assert set(pred) == {"gpt2", "resnet50"}
    # host-bound: the reference forwards measure the host
    assert all(dev < 0.5 * e2e for e2e, dev in pred.values())
    eager = {k: 2.0 * v[0] for k, v in reference_predictions(SPEC, HOST).items()}
    raw = {"reference_walls": eager,
           "compiled_reference_walls": {k: 1.7 * v[0] for k, v in pred.items()}}
    diag: dict = {}
    out = fit_forward(raw, SPEC, HOST.replace(compiled_forward_factor=5.0), diag)
    assert out["compiled_forward_factor"] == pytest.approx(1.7)
    assert out["eager_forward_factor"] == pytest.approx(2.0)
    assert set(diag["compiled_reference_forwards"]) == {"gpt2", "resnet50"}
    half = {"gpt2": 1.3 * pred["gpt2"][0], "failed": {"resnet50": "RuntimeError: boom"}}
    assert fit_forward({"compiled_reference_walls": half}, SPEC, HOST, {}) == {
        "compiled_forward_factor": pytest.approx(1.3)}
    only_eager = fit_forward({"reference_walls": eager}, SPEC, HOST, {})
    assert only_eager.keys() == {"eager_forward_factor", "eager_library_forward_factor"}
    # the same slowdown put on the library calls alone is larger than on everything
    assert only_eager["eager_library_forward_factor"] > only_eager["eager_forward_factor"] == pytest.approx(2.0)


def test_fastest_rounds_pools_the_compiled_reference_walls():
    r = [{"x": 3.0, "reference_walls_rounds": [{"gpt2": 5.0}], "reference_walls": {"gpt2": 5.0},
          "compiled_reference_walls_rounds": [{"gpt2": 9.0, "resnet50": 4.0}],
          "compiled_reference_walls": {"gpt2": 9.0, "resnet50": 4.0}},
         {"x": 2.0, "reference_walls_rounds": [{"gpt2": 6.0}], "reference_walls": {"gpt2": 6.0},
          "compiled_reference_walls_rounds": [{"gpt2": 7.0, "failed": {"resnet50": "boom"}}],
          "compiled_reference_walls": {"gpt2": 7.0}}]
    out = fastest_rounds(r)
    assert out["x"] == 2.0 and out["reference_walls"] == {"gpt2": 5.0}
    assert len(out["compiled_reference_walls_rounds"]) == 2
    assert out["compiled_reference_walls"] == {"gpt2": 7.0}


def test_the_host_state_beside_a_case_is_its_reference_walls_over_the_calibrations():
    from validation.score.compiled_forward import host_state, summary
    cal = {"gpt2": 1000.0, "resnet50": 3000.0}
    assert host_state({"reference_walls": {"gpt2": 1500.0, "resnet50": 4500.0}}, cal) == 1.5
    assert host_state({"reference_walls": {"gpt2": 2000.0, "failed": "x"}}, cal) == 2.0
    assert host_state({}, cal) is None
    rows = [{"meas_us": 100.0, "plain": 50.0, "factor": 90.0, "state": None},
            {"meas_us": 200.0, "plain": 100.0, "factor": 220.0, "state": 210.0}]
    s = summary(rows)
    assert s["plain"]["median_signed"] == -50.0 and s["factor"]["median_abs"] == 10.0
    assert s["state"]["n"] == 1


def test_the_text_report_names_the_compiled_factor_it_applied():
    from gpusim.report.text import host_factor_note
    g = capture(_block, (torch.empty(64, 64, device="meta"),), compiling=True)
    plain = predict(g, gpu=SPEC, mode="compiled", host=HOST.replace(compiled_forward_factor=None))
    scaled = predict(g, gpu=SPEC, mode="compiled", host=HOST.replace(compiled_forward_factor=2.0))
    assert host_factor_note(plain) == ""
    k = compiled_forward_factor(scaled.host, scaled.kernel_count)
    assert host_factor_note(scaled) == f"; compiled_forward_factor x{k:.2f}"


def test_the_committed_h200_lease_cf_factor_refits_from_its_raw_walls():
    """Lease cf's compiled_forward_factor is its compiled reference forwards' fastest walls over
    gpusim's compiled prediction of them on that lease's own figures, re-fitted here from the
    raw record (nothing clocked on this machine); its programs are the ones gpusim predicts
    (kernels per call within 2), and host-bound."""
    import json
    import os
    from validation.measure.reference_forwards import forward_factor
    here = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "validation", "results", "h200", "host", "2026-11-28-lease-cf.toml")
    with open(here + ".raw.json") as fh:
        raw = json.load(fh)
    lease, spec = load_host(here), load_spec("h200-sxm-calibrated")
    walls = raw["host"]["compiled_reference_walls"]
    f, diag = forward_factor(walls, spec, lease, mode="compiled")
    assert f == pytest.approx(lease.compiled_forward_factor, rel=1e-6)
    assert lease.provenance["compiled_forward_factor"][0] == "measured"
    pred = {n: predict(g, gpu=spec, mode="compiled", host=lease).kernel_count
            for n, g in _reference_graphs(True).items()}
    for r in raw["host"]["compiled_reference_walls_rounds"]:
        for n, p in r["profile"].items():
            assert abs(p["kernels_per_call"] - pred[n]) <= 2
    assert all(d["predicted_device_us"] < 0.5 * d["wall_us"] for d in diag.values())
