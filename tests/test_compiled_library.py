"""A compiled call's extern library calls priced by class (gpusim.sim.timeline.compiled_launch_us:
compiled_matmul_us, compiled_attention_us, compiled_conv_us, each None until calibrate's
compiled_library_split measures it, then compiled_extern_us as before), the fit of those figures
(validation.fit.calibrate.library_call_figures), the benchmark's programs dry-run on the CPU, and
the records' check by class (validation.score.compiled_host.implied_class_costs)."""

import json

import pytest
import torch

from gpusim import predict
from gpusim.hw.host import FIELDS, load_host
from gpusim.hw.spec import load_spec
from gpusim.sim.timeline import EXTERN_CLASS_FIELDS, compiled_launch_us
from validation.fit.calibrate import fit_host, library_call_figures

SPEC = load_spec("h200-sxm-calibrated")
SPLIT = load_host("h200-sxm-host").replace(compiled_triton_us=7.0, compiled_extern_us=12.0,
                                           kernel_launch_us=4.0)


class _Net(torch.nn.Module):
    """A conv, a linear and an attention: one extern call of each class."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.fc = torch.nn.Linear(64, 64)

    def forward(self, x):
        y = torch.relu(self.conv(x)).flatten(2)            # (2, 8, 64)
        q = self.fc(y).unsqueeze(1)
        return torch.nn.functional.scaled_dot_product_attention(q, q, q).sum()


def _kernels():
    return predict(_Net().eval(), (torch.randn(2, 8, 8, 8),), gpu=SPEC, mode="compiled", host=SPLIT).kernels


def test_each_extern_class_pays_its_own_figure_else_the_extern_one():
    ks = [k for k in _kernels() if k.role != "aux"]
    assert {"matmul", "conv", "attention"} <= {k.kind for k in ks}
    figs = {"compiled_matmul_us": 30.0, "compiled_attention_us": 40.0, "compiled_conv_us": 50.0}
    both = SPLIT.replace(**figs)
    for k in ks:
        if k.kind in EXTERN_CLASS_FIELDS:
            assert compiled_launch_us(k, SPLIT) == 12.0                # not measured: as before
            assert compiled_launch_us(k, both) == figs[EXTERN_CLASS_FIELDS[k.kind]]
            # one class measured leaves the others at the extern figure
            only = SPLIT.replace(compiled_conv_us=50.0)
            assert compiled_launch_us(k, only) == (50.0 if k.kind == "conv" else 12.0)
        else:
            assert compiled_launch_us(k, both) == 7.0                  # Triton: unchanged


def _runs(w1, k1, t1, w16, k16, t16):
    return {"1": {"wall_us": w1, "kernels": k1, "triton": t1},
            "16": {"wall_us": w16, "kernels": k16, "triton": t16}}


def test_the_fit_takes_out_triton_kernels_and_library_helpers():
    lib = {"linear": _runs(50.0, 1, 0, 50.0 + 15 * 30.0, 16, 0),
           # two extra Triton copies (7 us each) beside the 15 extra calls
           "attention": _runs(60.0, 1, 0, 60.0 + 15 * 40.0 + 2 * 7.0, 18, 2),
           # cuDNN's layout transform per call: 15 extra helper launches (4 us each)
           "conv": _runs(70.0, 2, 0, 70.0 + 15 * (50.0 + 4.0), 32, 0)}
    f = library_call_figures(lib, 7.0, 4.0)
    assert f == {"compiled_matmul_us": pytest.approx(30.0), "compiled_attention_us": pytest.approx(40.0),
                 "compiled_conv_us": pytest.approx(50.0)}
    # a chain that failed (no cuDNN attention), or one whose library calls Inductor replaced
    # by Triton templates (fewer library kernels than calls), gives no figure
    lib["attention"] = {"error": "no cuDNN attention"}
    lib["linear"] = _runs(50.0, 1, 0, 400.0, 16, 15)
    assert set(library_call_figures(lib, 7.0, 4.0)) == {"compiled_conv_us"}
    # Triton kernels to take out and no Triton figure: no figure
    assert "compiled_attention_us" not in library_call_figures(
        {"attention": _runs(60.0, 1, 0, 700.0, 18, 2)}, None, 4.0)


def test_calibrate_writes_the_class_figures_beside_the_split():
    with open("validation/results/h200/host/2026-11-28-lease-ho.toml.raw.json") as f:
        raw = json.load(f)["host"]                       # a real lease's host timings
    out, _ = fit_host(raw, 1.28)
    assert not set(EXTERN_CLASS_FIELDS.values()) & set(out)   # measured before the benchmark existed
    t, launch = out["compiled_triton_us"], out["kernel_launch_us"]
    lib = {"linear": _runs(50.0, 1, 0, 50.0 + 15 * 30.0, 16, 0),
           "conv": _runs(70.0, 1, 1, 70.0 + 15 * 50.0 + 15 * t + 15 * launch, 46, 16)}
    out, diag = fit_host(dict(raw, compiled_library=lib), 1.28)
    assert set(out) <= set(FIELDS) and diag["compiled_library"] == lib
    assert out["compiled_matmul_us"] == pytest.approx(30.0)
    assert out["compiled_conv_us"] == pytest.approx(50.0)
    assert "compiled_attention_us" not in out


def test_the_benchmarks_programs_run_on_a_cpu(monkeypatch):
    # a dry run: the eager backend on the CPU, the timers replaced (no GPU here); each chain
    # runs at both lengths and reports wall, kernels and Triton kernels
    from validation.measure import host_bench
    calls = []

    def wall(fn, args=()):
        out = fn(*args)
        calls.append(out.shape)
        return {"median_us": 1.0}
    monkeypatch.setattr(host_bench.measure, "time_wall", wall)
    monkeypatch.setattr(host_bench.measure, "profile_kernels",
                        lambda fn, args=(), flush=True, reps=5: {"kernels": [{"name": "triton_x", "us": 1.0}]})
    out = host_bench.compiled_library_split("cpu", ks=(1, 3), backend="eager")
    assert set(out) == {"linear", "attention", "conv"}
    for runs in out.values():
        one = {"wall_us": 1.0, "kernels": 1, "triton": 1, "library_kernels": []}
        assert runs == {1: one, 3: one}
    assert calls == [(256, 256)] * 2 + [(2, 4, 128, 64)] * 2 + [(1, 32, 16, 16)] * 2


def test_the_records_check_recovers_known_costs_by_class():
    from validation.score.compiled_host import implied_class_costs, launch_rows
    recs = []
    for i, (tri, mm, att, conv) in enumerate([(38, 73, 12, 0), (68, 1, 0, 53), (123, 1, 0, 81), (40, 49, 12, 1),
                                              (216, 1, 0, 140), (98, 121, 6, 0), (52, 97, 18, 0)]):
        wall = 30.0 + 10.0 * tri + 35.0 * mm + 60.0 * att + 40.0 * conv
        counts = {"aten::addmm": mm, "aten::_scaled_dot_product_cudnn_attention": att, "aten::convolution": conv}
        recs.append({"case_id": str(i), "model": str(i), "run": "compiled", "wall_us": wall,
                     "kernel_sum_us": 0.3 * wall, "host": {"aten_ops_top": mm + att + conv,
                                                           "aten_ops_top_counts": counts,
                                                           "launch_calls": {"cuLaunchKernel": tri}}})
    fit = implied_class_costs(launch_rows(recs))
    assert (fit["triton_us"], fit["matmul_us"], fit["attention_us"], fit["conv_us"]) == (
        pytest.approx(10.0), pytest.approx(35.0), pytest.approx(60.0), pytest.approx(40.0))
    assert fit["median_err"] < 1e-6


def test_a_host_with_class_figures_only_launches_helpers_at_one_launch():
    ks = predict(_Net().eval(), (torch.randn(2, 8, 8, 8),), gpu=SPEC, mode="compiled", host=SPLIT).kernels
    aux = [k for k in ks if k.role == "aux"]
    if not aux:
        pytest.skip("no library helper kernel in this program on this spec")
    bare = SPLIT.replace(compiled_triton_us=None, compiled_extern_us=None)
    assert compiled_launch_us(aux[0], bare) == bare.compiled_kernel_us        # no split: as before
    assert compiled_launch_us(aux[0], bare.replace(compiled_conv_us=50.0)) == bare.kernel_launch_us
