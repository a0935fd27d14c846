"""The host of a compiled call: Inductor's wrapper pays per kernel by how it launches it
(a Triton kernel, an extern library call, a library's helper kernel: one launch), and per
tensor input by what the input is (gpusim.sim.timeline.compiled_launch_us,
compiled_inputs_us); the figures come from calibrate's split microbenchmarks
(validation.fit.calibrate.split_launch_figures)."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gpusim import capture, predict
from gpusim.graph.opgraph import GEMM_KINDS
from gpusim.hw.host import load_host
from gpusim.hw.spec import load_spec
from gpusim.sim.timeline import compiled_inputs_us, compiled_launch_us, simulate
from validation.fit.calibrate import split_launch_figures

SPEC = load_spec("h200-sxm-calibrated")
HOST = load_host("h200-sxm-host")
SPLIT = HOST.replace(compiled_triton_us=7.0, compiled_extern_us=31.0, compiled_param_us=0.25)


class _Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(16, 16, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(16)
        self.fc = torch.nn.Linear(16, 10)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv(x)))
        return self.fc(y.mean((2, 3)))


def _graph():
    return capture(_Block().to("meta").eval(), (torch.empty(4, 16, 32, 32, device="meta"),))


def _kernels():
    return predict(_graph(), gpu=SPEC, mode="compiled", host=HOST).kernels


def test_without_the_split_every_kernel_pays_the_chain_mean():
    for k in _kernels():
        assert compiled_launch_us(k, HOST) == HOST.compiled_kernel_us


def test_the_split_prices_each_kernel_by_its_launch():
    ks = _kernels()
    assert any(k.kind in GEMM_KINDS for k in ks) and any(k.kind not in GEMM_KINDS for k in ks)
    for k in ks:
        want = (SPLIT.kernel_launch_us if k.role == "aux" else
                SPLIT.compiled_extern_us if k.kind in GEMM_KINDS else SPLIT.compiled_triton_us)
        assert compiled_launch_us(k, SPLIT) == want


def test_a_compiled_calls_host_time_is_its_parts():
    g = _graph()
    p = predict(g, gpu=SPEC, mode="compiled", host=SPLIT)
    params = len(g.meta["params"])
    assert 0 < params < g.meta["inputs"]         # weights lifted into the inputs, and x
    want = (SPLIT.compiled_call_us + compiled_inputs_us(SPLIT, g.meta["inputs"], params)
            + sum(compiled_launch_us(k, SPLIT) for k in p.kernels))
    assert p.timeline.host_us == pytest.approx(want)


def test_parameters_pay_the_input_figure_unless_measured_apart():
    assert compiled_inputs_us(HOST, 10, 6) == pytest.approx(10 * HOST.compiled_input_us)
    assert compiled_inputs_us(SPLIT, 10, 6) == pytest.approx(4 * SPLIT.compiled_input_us + 6 * 0.25)
    assert compiled_inputs_us(SPLIT.replace(compiled_param_us=0.0), 10, 6) == pytest.approx(
        4 * SPLIT.compiled_input_us)


@settings(max_examples=20, deadline=None)
@given(st.sampled_from(["compiled_triton_us", "compiled_extern_us", "compiled_param_us",
                        "compiled_matmul_us", "compiled_conv_us"]),   # _Block: no attention
       st.floats(0.0, 50.0), st.floats(0.1, 50.0))
def test_a_dearer_launch_never_makes_a_compiled_call_faster(field, lo, extra):
    ks = _KS
    a = simulate(ks, SPEC, "compiled", inputs=20, params=12, host=SPLIT.replace(**{field: lo}))
    b = simulate(ks, SPEC, "compiled", inputs=20, params=12, host=SPLIT.replace(**{field: lo + extra}))
    assert b.host_us > a.host_us and b.end_to_end_us >= a.end_to_end_us - 1e-9


_KS = _kernels()


def _runs(w1, k1, w16, k16):
    return {1: {"wall_us": w1, "kernels": k1}, 16: {"wall_us": w16, "kernels": k16}}


def test_the_fit_reads_slopes_per_kernel_the_profiler_saw():
    sp = {"triton": _runs(40.0, 1, 130.0, 16), "extern": _runs(60.0, 1, 510.0, 16),
          "params": _runs(45.0, 1, 60.0, 1)}
    f = split_launch_figures(sp)
    assert f["compiled_triton_us"] == pytest.approx(6.0)
    assert f["compiled_extern_us"] == pytest.approx(30.0)
    assert f["compiled_param_us"] == pytest.approx(1.0)
    # the fusion limit did not hold: one kernel at both k, no Triton figure, nothing split
    sp["triton"] = _runs(40.0, 1, 45.0, 1)
    assert split_launch_figures(sp) == {}


def test_the_records_check_recovers_known_launch_costs():
    from validation.score.compiled_host import implied_costs, launch_rows
    recs = []
    for i, (tri, ext) in enumerate([(38, 85), (68, 54), (123, 82), (40, 62), (216, 141), (19, 42)]):
        wall = 30.0 + 12.0 * tri + 33.0 * ext
        recs.append({"case_id": str(i), "model": str(i), "run": "compiled", "wall_us": wall,
                     "kernel_sum_us": 0.3 * wall, "host": {"aten_ops_top": ext, "cuda_launches": tri + ext,
                                                           "launch_calls": {"cuLaunchKernel": tri}}})
    recs.append(dict(recs[0], run="eager"))
    rows = launch_rows(recs)
    assert len(rows) == 6
    fit = implied_costs(rows)
    assert fit["triton_us"] == pytest.approx(12.0) and fit["extern_us"] == pytest.approx(33.0)
    assert fit["median_err"] < 1e-6
    # device-bound records say nothing of the host
    assert implied_costs([dict(r, kernel_sum_us=r["wall_us"]) for r in rows]) is None


def test_calibrate_writes_the_split_into_the_host_profile():
    import json

    from gpusim.hw.host import FIELDS
    from validation.fit.calibrate import fit_host
    with open("validation/results/h200/host/2026-11-24-lease5.toml.raw.json") as f:
        raw = json.load(f)["host"]                       # a real lease's host timings
    out, _ = fit_host(raw, 1.28)
    assert "compiled_triton_us" not in out              # measured before the split existed
    sp = {"triton": _runs(40.0, 1, 130.0, 16), "extern": _runs(60.0, 1, 510.0, 16),
          "params": _runs(45.0, 1, 45.0, 1)}
    out, diag = fit_host(dict(raw, compiled_split=sp), 1.28)
    assert set(out) <= set(FIELDS) and diag["compiled_split"] == sp
    assert (out["compiled_triton_us"], out["compiled_extern_us"], out["compiled_param_us"]) == (
        pytest.approx(6.0), pytest.approx(30.0), 0.0)


def test_cudagraph_launch_costs_the_host_per_node():
    # a CUDA graph launch's host time grows with its nodes where calibrate measured it, and
    # the graph's kernels start after it (the first kernel of a profiled 314-kernel decode
    # graph started ~20 us before cudaGraphLaunch returned); a host without it: unchanged
    m = _Block().eval()
    x = torch.randn(2, 16, 8, 8)
    bare = predict(m, (x,), gpu=SPEC, mode="cudagraph", host=HOST)
    node = predict(m, (x,), gpu=SPEC, mode="cudagraph", host=HOST.replace(cudagraph_launch_node_us=2.0))
    n = bare.kernel_count
    assert node.timeline.host_us == pytest.approx(bare.timeline.host_us + 2.0 * n)
    assert node.timeline.latency_us == pytest.approx(bare.timeline.latency_us + 2.0 * n)
    assert predict(m, (x,), gpu=SPEC, mode="cudagraph", host=HOST.replace(
        cudagraph_launch_node_us=0.0)).timeline.host_us == pytest.approx(bare.timeline.host_us)


def test_calibrate_fits_the_graph_launch_per_node():
    import json

    from gpusim.hw.host import FIELDS
    from validation.fit.calibrate import fit_host
    with open("validation/results/h200/host/2026-11-24-lease5.toml.raw.json") as f:
        raw = json.load(f)["host"]                       # a real lease's host timings
    out, _ = fit_host(raw, 1.28)
    assert "cudagraph_launch_node_us" not in out        # measured before the probe existed
    out, diag = fit_host(dict(raw, cudagraph_launch={"1": 6.0, "256": 261.0}), 1.28)
    assert set(out) <= set(FIELDS) and out["cudagraph_launch_node_us"] == pytest.approx(1.0)
    out, _ = fit_host(dict(raw, cudagraph_launch={"1": 6.0, "256": 5.0}), 1.28)
    assert out["cudagraph_launch_node_us"] == 0.0      # no slope the timer can see
