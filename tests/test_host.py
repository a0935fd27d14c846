"""The host side of the simulation: host reads drain the stream, a library op's helper
kernels cost a launch, `predict` names the fastest of eager / torch.compile / CUDA
graphs, and the model's own Python is priced from capture's counts by the host profile
(gpusim.hw.host.python_us), in eager only."""

import dataclasses

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gpusim import capture, predict
from gpusim.cli.commands import main
from gpusim.hw.spec import load_spec
from gpusim.hw.host import load_host
from gpusim.predict.pipeline import MODE_LABELS, modes_by_speed
from gpusim.sim.timeline import (COMPILED_FORWARD_KERNELS, FORWARD_KERNELS, LOOP_KERNELS, eager_forward_factor, is_sync,
                             kernel_overhead_us, simulate)

SPEC = load_spec("h100-sxm-calibrated")
HOST = load_host("h100-sxm-host")


def _checked(x):
    y = (x @ x) + 1
    if (y > 0).all():           # a host read of a device value: eager syncs here
        y = y * 2
    return y.relu()


def _unchecked(x):
    y = (x @ x) + 1
    y = y * 2
    return y.relu()


def _graph(fn, n):
    return capture(fn, (torch.empty(n, n, device="meta"),))


@settings(max_examples=6, deadline=None)
@given(st.sampled_from([64, 512, 2048, 4096]))
def test_sync_waits_for_the_stream_to_drain(n):
    p = predict(_graph(_checked, n), gpu=SPEC, mode="eager")
    syncs = [k for k in p.kernels if is_sync(k)]
    assert len(syncs) == 1 and len(p.timeline.syncs) == 1
    i = p.kernels.index(syncs[0])
    gpu_done = max(e.end_us for e in p.timeline.events if e.lane == "gpu" and e.kernel == i)
    # after the read, the host issues nothing before the GPU has finished the read's copy
    later = [e for e in p.timeline.events if e.lane == "host" and e.kernel is not None and e.kernel > i]
    assert min(e.start_us for e in later) >= gpu_done - 1e-6
    name, wait = p.timeline.syncs[0]
    assert wait >= 0
    if n >= 2048:   # a long GEMM before the read: the host really waits for it
        assert wait > 0.5 * p.kernels[0].us
        assert any(e.name.startswith("sync wait") for e in p.timeline.events)


def test_a_sync_never_makes_a_call_faster():
    for n in (64, 1024, 4096):
        with_sync = predict(_graph(_checked, n), gpu=SPEC, mode="eager")
        without = predict(_graph(_unchecked, n), gpu=SPEC, mode="eager")
        assert with_sync.end_to_end_us >= without.end_to_end_us


def test_helper_kernels_cost_a_launch_not_a_dispatch():
    g = capture(lambda x, w: torch.nn.functional.conv2d(x, w, padding=1),
                (torch.empty(8, 64, 56, 56, device="meta", dtype=torch.float16),
                 torch.empty(64, 64, 3, 3, device="meta", dtype=torch.float16)))
    p = predict(g, gpu=SPEC, mode="eager")
    aux = [k for k in p.kernels if k.role == "aux"]
    assert aux, "a half-precision NCHW conv runs cuDNN's layout transforms"
    for k in aux:
        assert kernel_overhead_us(k, HOST, "eager") == pytest.approx(
            HOST.kernel_launch_us * HOST.eager_forward_factor)    # a whole forward's program
    main_k = [k for k in p.kernels if k.role == "main"][0]
    assert kernel_overhead_us(main_k, HOST, "eager") > kernel_overhead_us(aux[0], HOST, "eager")



@pytest.mark.parametrize("mode, n", [("eager", FORWARD_KERNELS), ("compiled", COMPILED_FORWARD_KERNELS),
                                     ("cudagraph", 1)])
def test_a_kernel_of_unnamed_program_is_priced_in_its_modes_reference_forward(mode, n):
    k = predict(_graph(_unchecked, 256), gpu=SPEC, mode="eager").kernels[0]
    # both forward factors set, so the program size matters
    host = dataclasses.replace(HOST, eager_forward_factor=1.5, compiled_forward_factor=1.5)
    assert kernel_overhead_us(k, host, mode) == kernel_overhead_us(k, host, mode, n)
    if mode != "cudagraph":
        assert kernel_overhead_us(k, host, mode) != kernel_overhead_us(k, host, mode, LOOP_KERNELS)

def test_modes_ranked_fastest_first():
    g = _graph(_unchecked, 256)
    ranked = modes_by_speed(g, SPEC)
    assert sorted(m for m, _ in ranked) == sorted(MODE_LABELS)
    e2e = [p.end_to_end_us for _, p in ranked]
    assert e2e == sorted(e2e)
    eager = predict(g, gpu=SPEC, mode="eager")
    again = dict(modes_by_speed(g, SPEC, have=eager))
    assert again["eager"] is eager
    assert [p.end_to_end_us for _, p in modes_by_speed(g, SPEC, have=eager)] == e2e


def test_predict_prints_syncs_and_the_fastest_mode(capsys):
    assert main(["predict", "gelu_tanh", "--gpu", "h100-sxm-calibrated"]) == 0
    out = capsys.readouterr().out
    assert "fastest " in out and "host profile reference" in out


# --- the model's own Python, priced from capture's counts ---------------------------

class _Busy(torch.nn.Module):
    """``work`` iterations of pure Python, ``calls`` extra torch calls, and a host read."""

    def __init__(self, work: int, calls: int = 0):
        super().__init__()
        self.work, self.calls = work, calls
        self.lin = torch.nn.Linear(16, 16)

    def forward(self, x):
        s = 0
        for i in range(self.work):
            s += i % 7
        y = self.lin(x)
        for _ in range(self.calls):
            y = y.view(4, 16)           # a torch call (and a view op), no kernel
        if (y > 0).all():       # on meta: answered True, as eager typically takes it
            y = y + 1
        return y.relu()


def _meta_busy(work, calls=0):
    return _Busy(work, calls).to("meta"), (torch.empty(4, 16, device="meta"),)


def test_capture_counts_the_models_module_and_torch_calls():
    g0, g5 = capture(*_meta_busy(0)), capture(*_meta_busy(0, calls=5))
    assert g0.meta["module_calls"] == g5.meta["module_calls"] == 2   # _Busy and its Linear
    assert g5.meta["torch_calls"] == g0.meta["torch_calls"] + 5
    assert g0.meta["torch_calls"] >= 4        # linear, gt, all, add, relu (one inside Linear)
    # counts, not clocks: pure Python that makes no torch call is the same forward
    assert capture(*_meta_busy(20000)).meta["torch_calls"] == g0.meta["torch_calls"]


def test_eager_prices_the_counts_with_the_host_law():
    m, args = _meta_busy(0, calls=5)
    g = capture(m, args)
    p = predict(g, gpu=SPEC, mode="eager", host=HOST)
    f = eager_forward_factor(HOST, len(p.kernels))     # a small program: little or none of it
    law = (g.meta["module_calls"] * HOST.python_module_call_us
           + g.meta["torch_calls"] * HOST.python_torch_call_us)
    assert p.timeline.python_us == pytest.approx(law * f)
    # torch.compile runs guards, not the model's Python
    assert predict(g, gpu=SPEC, mode="compiled", host=HOST).timeline.python_us == 0.0
    # a host without the law prices a bare module call per nn.Module call
    bare = HOST.replace(python_module_call_us=None, python_torch_call_us=None)
    assert predict(g, gpu=SPEC, mode="eager", host=bare).timeline.python_us == pytest.approx(
        g.meta["module_calls"] * HOST.eager_module_us * f)


@settings(max_examples=25, deadline=None)
@given(st.floats(0.0, 5e4), st.floats(0.0, 5e4), st.sampled_from([64, 2048]))
def test_more_python_never_makes_eager_faster(a, b, n):
    g = _graph(_unchecked, n)
    lo, hi = sorted((a, b))
    base = predict(g, gpu=SPEC, mode="eager")
    kernels = base.kernels
    from gpusim.sim.timeline import simulate
    t_lo = simulate(kernels, SPEC, "eager", python_us=lo, host=HOST)
    t_hi = simulate(kernels, SPEC, "eager", python_us=hi, host=HOST)
    assert t_hi.end_to_end_us >= t_lo.end_to_end_us - 1e-6
    assert t_hi.host_us - t_lo.host_us == pytest.approx(
        (hi - lo) * eager_forward_factor(HOST, len(kernels)), abs=1e-6)
    assert t_hi.end_to_end_us >= t_hi.python_us - 1e-6
    # compiled and CUDA graph replays ignore it
    for mode in ("compiled", "cudagraph"):
        assert simulate(kernels, SPEC, mode, python_us=hi, host=HOST).end_to_end_us == \
            pytest.approx(simulate(kernels, SPEC, mode, host=HOST).end_to_end_us)


def test_predict_prints_the_models_python(capsys):
    assert main(["predict", "gelu_tanh", "--gpu", "h100-sxm-calibrated"]) == 0
    out = capsys.readouterr().out
    assert "model's Python" in out and "nn.Module calls x" in out and "torch calls x" in out


@settings(max_examples=20, deadline=None)
@given(st.floats(1.0, 3.0), st.sampled_from([64, 2048]), st.integers(1, 12))
def test_the_forward_factor_scales_eager_host_time_only(f, n, copies):
    """eager_forward_factor multiplies every eager host cost (dispatch, views, syncs, the
    model's Python) by its ramp at the program's size, and nothing else: device time and
    compiled / CUDA-graph calls stay."""
    kernels = predict(_graph(_checked, n), gpu=SPEC, mode="eager").kernels * copies
    one, scaled = HOST.replace(eager_forward_factor=None), HOST.replace(eager_forward_factor=f)
    a = simulate(kernels, SPEC, "eager", views_before=[1] * len(kernels), python_us=300.0, host=one)
    b = simulate(kernels, SPEC, "eager", views_before=[1] * len(kernels), python_us=300.0,
                 host=scaled)
    k = eager_forward_factor(scaled, len(kernels))
    assert b.host_us == pytest.approx(k * a.host_us)
    assert b.python_us == pytest.approx(k * a.python_us)
    assert b.device_us == a.device_us
    assert b.end_to_end_us >= a.end_to_end_us - 1e-6
    for mode in ("compiled", "cudagraph"):
        assert simulate(kernels, SPEC, mode, host=scaled).end_to_end_us == pytest.approx(
            simulate(kernels, SPEC, mode, host=one).end_to_end_us)


@settings(max_examples=30, deadline=None)
@given(st.floats(1.0, 3.0), st.integers(0, 400), st.integers(0, 400))
def test_the_forward_factor_ramps_with_program_size(f, a, b):
    """None of it up to a loop's few kernels, all of it from a reference forward's size,
    never decreasing in between."""
    spec = HOST.replace(eager_forward_factor=f)
    lo, hi = sorted((a, b))
    assert 1.0 <= eager_forward_factor(spec, lo) <= eager_forward_factor(spec, hi) <= f + 1e-12
    assert eager_forward_factor(spec, min(lo, LOOP_KERNELS)) == 1.0
    assert eager_forward_factor(spec, max(hi, FORWARD_KERNELS)) == pytest.approx(f)


def test_forward_kernels_is_the_reference_gpt2s_kernel_count():
    from validation.measure.reference_forwards import _reference_graphs
    g = _reference_graphs()["gpt2"]
    assert predict(g, gpu=SPEC, mode="eager").kernel_count == FORWARD_KERNELS


def test_forward_factor_refits_from_the_recorded_reference_walls():
    """The committed H100 lease's eager_forward_factor is its reference forwards' walls
    over gpusim's prediction of them, re-fitted here from the raw record exactly (nothing
    is clocked on this machine), and the H100 host profile carries a factor."""
    import json
    import os
    from validation.measure.reference_forwards import forward_factor
    here = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "validation", "results", "h100", "host", "2026-11-24-lease7.toml")
    with open(here + ".raw.json") as fh:
        raw = json.load(fh)
    lease = load_host(here)
    f, diag = forward_factor(raw["host"]["reference_walls"], SPEC, lease)
    assert f == pytest.approx(lease.eager_forward_factor, rel=1e-9)
    assert lease.provenance["eager_forward_factor"][0] == "derived"
    assert set(diag) == {"gpt2", "resnet50"}
    assert all(d["predicted_device_us"] < 0.5 * d["wall_us"] for d in diag.values())  # host-bound
    assert 1.0 < HOST.eager_forward_factor < 3.0
    # twice the walls, twice the factor
    f2, _ = forward_factor({k: 2 * v for k, v in raw["host"]["reference_walls"].items()},
                           SPEC, lease)
    assert f2 == pytest.approx(2 * f)


def test_every_committed_host_calibration_loads(tmp_path):
    """Every lease's host calibration loads as a host profile, including per-input costs
    measured as zero (16 inputs cost no more than 1 on the timer); a negative per-input
    cost, a zero per-op cost or a figure without provenance is refused."""
    import glob
    import os
    from gpusim.hw.host import HostError
    root = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "validation", "results")
    paths = glob.glob(os.path.join(root, "*", "host", "*.toml"))
    assert len(paths) >= 9
    zero = [p for p in paths if load_host(p).cudagraph_tree_input_us == 0.0]
    assert zero, "the 2026-11-24 leases measured a zero per-input cost"
    with open(zero[0]) as f:
        text = f.read()
    for old, new in (("cudagraph_tree_input_us = { value = 0.0", "cudagraph_tree_input_us = { value = -1.0"),
                     ("eager_op_us = { value = ", "eager_op_us = { value = 0.0, x = "),
                     ("eager_op_us = { value = ", "eager_op_us = { value = 0.0 } # "),
                     ('source = "measured"', 'source = "guessed"')):
        p = tmp_path / "lease.toml"
        p.write_text(text.replace(old, new, 1))
        with pytest.raises(HostError, match=r"lease.toml: field \[host\]"):
            load_host(str(p))


def test_host_fit_reproduces_a_recorded_lease():
    """fit_host + fit_forward on a lease's raw timings give back what its host profile
    holds: the tight-loop figures and the factor exactly, fitted on the medians of the
    three reference rounds."""
    import json
    import os
    from validation.fit.calibrate import fit_host
    from validation.measure.reference_forwards import fit_forward, median_walls
    here = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "validation", "results", "h100", "host", "2026-11-24-lease8.toml")
    with open(here + ".raw.json") as fh:
        raw = json.load(fh)
    lease = load_host(here)
    assert raw["host"]["reference_walls"] == median_walls(raw["host"]["reference_walls_rounds"])
    changes, diag = fit_host(raw["host"], SPEC.kernel_min_us)
    assert changes["eager_op_us"] == pytest.approx(lease.eager_op_us, rel=1e-9)
    fitted = fit_forward(raw["host"], SPEC, lease.replace(**changes), diag)
    assert fitted["eager_forward_factor"] == pytest.approx(lease.eager_forward_factor, rel=1e-9)
    assert set(diag["reference_forwards"]) == {"gpt2", "resnet50"}
    assert fit_forward({}, SPEC, HOST, {}) == {}


def test_calibrate_host_only_writes_a_loadable_host_profile(tmp_path):
    """What calibrate --host-only writes from a lease's raw timings is a host profile
    (not a GPU spec): the measured figures with their benchmark as provenance, the model's
    Python law scaled to this host's module-call probe, and it loads back unchanged."""
    import json
    import os
    from gpusim.hw.host import dump_host
    from validation.fit.calibrate import fit_forward, fit_host, host_profile
    here = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "validation", "results", "h100", "host", "2026-11-24-lease8.toml")
    with open(here + ".raw.json") as fh:
        raw = json.load(fh)
    changes, diag = fit_host(raw["host"], SPEC.kernel_min_us)
    cmd = "gpusim calibrate --host-only"
    changes.update(fit_forward(raw["host"], SPEC, host_profile(changes, "lease", diag, cmd), diag))
    host = host_profile(changes, "lease", diag, cmd)
    dump_host(host, tmp_path / "lease.toml")
    back = load_host(str(tmp_path / "lease.toml"))
    lease = load_host(here)
    for k in ("eager_op_us", "eager_module_us", "eager_forward_factor", "python_torch_call_us"):
        assert getattr(back, k) == pytest.approx(getattr(lease, k), rel=1e-9), k
    assert back.provenance["eager_op_us"][0] == "measured"
    assert cmd in back.provenance["eager_op_us"][1]
    assert back.provenance["python_module_call_us"][0] == "derived"
    assert back.python_module_call_us / back.eager_module_us == pytest.approx(
        HOST.python_module_call_us / HOST.eager_module_us)


def test_fastest_rounds_keeps_each_timing_fastest_and_counts_as_they_are():
    """Calibration rounds merged: every timing leaf is the fastest round's, counts (kernels,
    inputs) and the machine are the first round's, and the reference forwards are the fastest
    of all rounds' pooled timings; a single slow figure in one round changes nothing."""
    import copy
    import json
    import os
    from validation.measure.host_bench import fastest_rounds
    here = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "validation", "results", "h100", "host", "2026-11-24-lease8.toml")
    with open(here + ".raw.json") as fh:
        fast = json.load(fh)["host"]
    slow = copy.deepcopy(fast)
    slow["eager_1_op_us"] *= 2.0
    slow["compiled"]["8"]["wall_us"] *= 1.7
    slow["reference_walls_rounds"] = [{k: 2 * v for k, v in r.items()} for r in slow["reference_walls_rounds"]]
    slow["compiled"]["8"]["kernels"] += 99          # a count is never "fastest"
    merged = fastest_rounds([slow, fast])
    assert merged["eager_1_op_us"] == fast["eager_1_op_us"]
    assert merged["compiled"]["8"]["wall_us"] == fast["compiled"]["8"]["wall_us"]
    assert merged["compiled"]["8"]["kernels"] == slow["compiled"]["8"]["kernels"]
    assert merged["machine"] == slow["machine"]
    assert len(merged["reference_walls_rounds"]) == 2 * len(fast["reference_walls_rounds"])
    assert merged["reference_walls"] == {k: min(r[k] for r in fast["reference_walls_rounds"])
                                         for k in fast["reference_walls"]}
    assert merged["statistic"] == "fastest of 2 rounds"
    assert fastest_rounds([fast, fast])["eager_1_op_us"] == fast["eager_1_op_us"]
