"""The host cost of a training step's backward as autograd's engine issues it (``eager_backward_factor``,
gpusim.sim.timeline.backward_issue_us), its fit (validation/fit/train_host.py) and its measurement's records
(validation/measure/train_host.py)."""

import json

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gpusim import capture, predict
from gpusim.hw.host import list_hosts, load_host, parse_host
from gpusim.hw.spec import load_spec
from gpusim.sim.timeline import _eager_issue_us, eager_forward_factor, simulate

SPEC = load_spec("h100-sxm-calibrated")
HOST = load_host("h100-sxm-host")


def _kernels(n: int = 256):
    p = predict(capture(lambda x: ((x @ x) + 1).relu() * 2, (torch.empty(n, n, device="meta"),)),
                gpu=SPEC, mode="eager")
    return p.kernels


def _phases(kernels, n_bwd):
    """The first kernels forward, the next ``n_bwd`` backward, the last optimizer."""
    n = len(kernels)
    return ["forward"] * (n - n_bwd - 1) + ["backward"] * n_bwd + ["optimizer"]


@settings(max_examples=15, deadline=None)
@given(st.integers(2, 12), st.floats(0.0, 500.0))
def test_without_the_figure_phases_change_nothing(copies, py):
    """A host without eager_backward_factor (every committed host today): the phases are ignored, byte for byte."""
    ks = _kernels() * copies
    ph = _phases(ks, len(ks) // 2)
    a = simulate(ks, SPEC, "eager", views_before=[1] * len(ks), python_us=py, host=HOST)
    b = simulate(ks, SPEC, "eager", views_before=[1] * len(ks), python_us=py, host=HOST, phases=ph)
    assert (a.end_to_end_us, a.host_us, a.latency_us) == (b.end_to_end_us, b.host_us, b.latency_us)
    assert [(e.start_us, e.dur_us) for e in a.events] == [(e.start_us, e.dur_us) for e in b.events]


def test_no_committed_host_has_the_figure_unmeasured():
    """The reference host has no measurement of its backward: the goldens keep today's law."""
    assert load_host("reference").eager_backward_factor is None
    for h in list_hosts():
        if h.eager_backward_factor is not None:
            assert h.provenance["eager_backward_factor"][0] in ("measured", "derived")


@settings(max_examples=20, deadline=None)
@given(st.integers(2, 12), st.floats(0.5, 5.0), st.floats(0.0, 800.0), st.data())
def test_the_engine_prices_backward_kernels_and_python_stays_in_the_rest(copies, fb, py, data):
    ks = _kernels() * copies
    n_bwd = data.draw(st.integers(1, len(ks) - 2))
    ph = _phases(ks, n_bwd)
    host = HOST.replace(eager_backward_factor=fb)
    views = [1] * len(ks)
    t = simulate(ks, SPEC, "eager", views_before=views, python_us=py, host=host, phases=ph)
    base = simulate(ks, SPEC, "eager", views_before=views, python_us=py, host=HOST)
    launch = {e.kernel: e.dur_us for e in t.events if e.lane == "host" and e.kernel is not None}
    for i, (k, p) in enumerate(zip(ks, ph)):
        if p == "backward":       # factor x the tight-loop figures, none of the model's Python
            assert launch[i] == pytest.approx(fb * (_eager_issue_us(k, HOST) + HOST.eager_view_us))
    f = eager_forward_factor(HOST, len(ks))
    # the model's Python is all still paid, on the forward's and the optimizer's kernels
    fwd_b = sum(d for i, d in launch.items() if ph[i] != "backward")
    fwd_a = sum(e.dur_us for e in base.events if e.lane == "host" and e.kernel is not None and ph[e.kernel] != "backward")
    moved = f * py * n_bwd / len(ks)
    assert fwd_b == pytest.approx(fwd_a + moved)
    assert t.python_us == pytest.approx(base.python_us)
    assert t.device_us == base.device_us


@settings(max_examples=15, deadline=None)
@given(st.floats(0.5, 4.0), st.floats(0.5, 4.0))
def test_a_slower_engine_never_makes_a_step_faster(a, b):
    ks = _kernels(64) * 6
    ph = _phases(ks, 9)
    lo, hi = sorted((a, b))
    t_lo = simulate(ks, SPEC, "eager", python_us=100.0, host=HOST.replace(eager_backward_factor=lo), phases=ph)
    t_hi = simulate(ks, SPEC, "eager", python_us=100.0, host=HOST.replace(eager_backward_factor=hi), phases=ph)
    assert t_hi.end_to_end_us >= t_lo.end_to_end_us - 1e-6


def test_a_step_of_nothing_but_backward_keeps_todays_law():
    ks = _kernels()
    host = HOST.replace(eager_backward_factor=3.0)
    a = simulate(ks, SPEC, "eager", python_us=50.0, host=HOST)
    b = simulate(ks, SPEC, "eager", python_us=50.0, host=host, phases=["backward"] * len(ks))
    assert a.end_to_end_us == b.end_to_end_us


def test_a_host_file_takes_the_figure_and_rejects_a_bad_one():
    base = {"name": "x", "description": "d", "host": {
        k: {"value": 1.0, "source": "assumed", "ref": "test"} for k in
        ("eager_op_us", "eager_view_us", "compiled_call_us", "compiled_kernel_us", "cudagraph_call_us",
         "cudagraph_kernel_us", "launch_latency_us")}}
    base["host"]["eager_backward_factor"] = {"value": 2.5, "source": "measured", "ref": "a lease"}
    assert parse_host(base, "x.toml").eager_backward_factor == 2.5
    base["host"]["eager_backward_factor"]["value"] = 0
    with pytest.raises(Exception, match="eager_backward_factor"):
        parse_host(base, "x.toml")


def test_a_training_step_passes_its_phases_to_the_timeline():
    """predict() of a captured step: with the figure, its backward kernels cost factor x their tight-loop issue."""
    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step(x):
        opt.zero_grad(set_to_none=True)
        model(x).sum().backward()
        opt.step()
    args = (torch.randn(8, 32),)
    a = predict(step, args, gpu=SPEC, host=HOST)
    b = predict(step, args, gpu=SPEC, host=HOST.replace(eager_backward_factor=4.0))
    g = a.graph.g
    ph = [g.nodes[k.ops[0]].get("phase") for k in a.kernels]
    assert "backward" in ph and "forward" in ph
    assert b.timeline.host_us > a.timeline.host_us
    assert b.device_us == a.device_us


def test_chain_records_and_slopes():
    from validation.fit.train_host import chain_slopes
    from validation.measure.train_host import chain_case
    recs = [chain_case("mul", n, "cpu", warmup=1, steps=3) for n in (4, 16)]
    for r in recs:
        assert r["kind"] == "chain_host" and r["forward_us"] > 0 and r["backward_us"] > 0
        json.dumps(r)
    s = chain_slopes(recs)
    assert set(s["mul"]) == {"forward_op_us", "backward_node_us"}


def test_the_fit_divides_by_what_the_timeline_multiplies():
    """validation.fit.train_host's tight-loop backward sum, times a factor, is what the timeline then prices the
    backward's kernels at: the fitted figure reproduces the measured backward wall it was fitted on."""
    from validation.fit.train_host import phase_host
    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)

    def step(x):
        opt.zero_grad(set_to_none=True)
        model(x).sum().backward()
        opt.step()
    args = (torch.randn(8, 32),)
    tight = phase_host(predict(step, args, gpu=SPEC, host=HOST))["backward"]["tight_us"]
    b = predict(step, args, gpu=SPEC, host=HOST.replace(eager_backward_factor=2.5))
    ph = [b.graph.g.nodes[k.ops[0]].get("phase") for k in b.kernels]
    priced = sum(e.dur_us for e in b.timeline.events
                 if e.call == 0 and e.lane == "host" and e.kernel is not None and ph[e.kernel] == "backward")
    assert tight > 0 and priced == pytest.approx(2.5 * tight)
