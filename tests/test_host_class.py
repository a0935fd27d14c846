"""The in-forward host figures by op class (gpusim.sim.host_class, validation.measure.decode_host_probe): the probe's
classes are gpusim's, a host without the figures is priced as before, and a host with them prices each eager kernel
and view at its class's figure with no factor (ramped from the tight-loop figure in small programs)."""

import collections

import pytest
import torch

from gpusim.capture.tracing import capture
from gpusim.hw.host import INFORWARD, load_host
from gpusim.hw.spec import load_spec
from gpusim.predict.pipeline import lower, predict_lowering
from gpusim.sim.host_class import has_inforward, host_class, kernel_classes
from gpusim.sim.timeline import FORWARD_KERNELS, _eager_issue_us, is_sync
from validation.measure.decode_host_probe import TINY, ClassClock, Stack, call_class, host_figures, probe_round

H200 = load_spec("h200")
FIGS = dict(zip(INFORWARD, (9.0, 17.0, 14.0, 10.0, 12.0, 31.0, 36.0, 70.0, 25.0, 1.5)))


def _stack(kind):
    layers, h, heads, kv, inter, ctx = TINY[kind]
    return Stack(kind, layers, h, heads, kv, inter, ctx, torch.float32, "cpu").eval(), torch.randn(1, 1, h)


def test_the_probes_classes_are_gpusims_classes():
    # the Phi-style stack (no GQA): every call the probe files under a kernel class is captured under the same one
    m, x = _stack("ln")
    clock = ClassClock()
    with torch.no_grad(), clock:
        m(x)
    g = capture(m, (x,))
    got = collections.Counter(kernel_classes(g, lower(g, "eager").kernels))
    for c in ("pointwise", "cat", "linear_bias", "attention", "norm"):
        assert clock.n[c] == got[c] > 0, c


def test_call_class_separates_python_numbers_and_biases():
    x, w, b = torch.randn(1, 1, 4), torch.randn(4, 4), torch.randn(4)
    assert call_class(torch.Tensor.__add__, (x, 1e-6), {}) == "scalar"
    assert call_class(torch.Tensor.__add__, (x, x), {}) == "pointwise"
    assert call_class(torch.nn.functional.linear, (x, w, b), {}) == "linear_bias"
    assert call_class(torch.nn.functional.linear, (x, w), {"bias": None}) == "linear"
    assert call_class(torch.Tensor.transpose, (x, 1, 2), {}) == "view"


def test_host_class_reads_the_captured_op():
    assert host_class({"op": "aten.add.Tensor", "kind": "pointwise", "inputs": ["a"]}) == "scalar"
    assert host_class({"op": "aten.add.Tensor", "kind": "pointwise", "inputs": ["a", "b"]}) == "pointwise"
    assert host_class({"op": "aten.pow.Tensor_Scalar", "kind": "pointwise", "inputs": ["a"]}) == "scalar"
    assert host_class({"op": "aten.linear.default", "kind": "matmul", "inputs": ["x", "w", "b"]}) == "linear_bias"
    assert host_class({"op": "aten.to.dtype", "kind": "copy", "inputs": ["x"]}) == "cast"
    assert host_class({"op": "aten.mean.dim", "kind": "reduction", "inputs": ["x"]}) == "reduction"
    assert host_class({"op": "aten.convolution.default", "kind": "conv", "inputs": ["x", "w"]}) == "other"


def _pred(host, kind="rms"):
    m, x = _stack(kind)
    g = capture(m, (x,))
    low = lower(g, "eager")
    return g, low, predict_lowering(low, H200, host=host)


def test_a_host_without_the_figures_is_priced_as_before():
    host = load_host()
    assert not has_inforward(host) and not has_inforward(host.replace(**dict(FIGS, inforward_view_us=None)))
    g, low, p = _pred(host)
    from gpusim.sim.timeline import simulate
    from gpusim.hw.host import python_us
    args = (p.kernels, p.spec, "eager", *_views(g, low))
    plain = simulate(*args, python_us=python_us(g.meta, host), host=host)
    classed = simulate(*args, python_us=python_us(g.meta, host), host=host, classes=kernel_classes(g, low.kernels))
    assert p.timeline.host_us == plain.host_us == classed.host_us


def _views(g, low):
    from gpusim.predict.pipeline import views_per_kernel
    return views_per_kernel(g, low.kernels)


def test_a_host_with_the_figures_prices_each_kernel_and_view_by_class():
    host = load_host().replace(**FIGS)
    g, low, p = _pred(host)
    n = len(p.kernels)
    assert n >= FORWARD_KERNELS        # the whole in-forward figure, no ramp
    vb, trailing = _views(g, low)
    cls = kernel_classes(g, low.kernels)
    want = p.timeline.python_us        # the model's Python at the law's figures, no factor
    for k, c, v in zip(p.kernels, cls, vb):
        if is_sync(k) or k.role == "aux":
            want += _eager_issue_us(k, host)
        elif c == "other":
            want += FIGS["inforward_pointwise_us"]
        else:
            want += FIGS[f"inforward_{c}_us"]
        want += v * FIGS["inforward_view_us"]
    want += trailing * FIGS["inforward_view_us"]
    assert p.timeline.host_us == pytest.approx(want, rel=1e-6)
    # the factors of the tight-loop pricing do not apply
    assert predict_lowering(low, H200, host=host.replace(eager_forward_factor=3.0)).timeline.host_us == \
        pytest.approx(p.timeline.host_us)


def test_a_small_program_keeps_the_tight_loop_figures():
    def f(x):
        return (x * 2.0 + x).relu()
    x = torch.randn(8)
    g = capture(f, (x,))
    low = lower(g, "eager")
    base = load_host()
    assert predict_lowering(low, H200, host=base.replace(**FIGS)).timeline.host_us == \
        pytest.approx(predict_lowering(low, H200, host=base).timeline.host_us)


def test_the_probe_runs_and_gives_every_figure():
    r = probe_round("cpu", tiny=True, forwards=3)
    figs = host_figures(r)
    assert set(figs) == set(INFORWARD) and all(v > 0 for v in figs.values())


def test_the_clocked_figures_are_scaled_to_the_unclocked_wall():
    from validation.measure.decode_host_probe import inforward_figures, module_calls, stack_scale
    r = probe_round("cpu", tiny=True, forwards=3)
    host = load_host()
    law = (host.python_module_call_us, host.python_torch_call_us)
    for kind, s in r["stacks"].items():
        py = module_calls(kind, s["layers"]) * law[0] + s["calls"] * law[1]
        assert stack_scale(s, kind, law) == pytest.approx(max(s["wall_us"] - py, 0) / s["clocked_inside_us"])
        assert stack_scale(s, kind, None) == 1.0
    assert module_calls("rms", 2) == 1 + 2 * 10 + 1     # the stack, 10 a layer (itself, 4 projections, 2 norms, 3 MLP), the norm
    one = dict(r, stacks={"ln": r["stacks"]["ln"]})
    raw, scaled = host_figures(one), inforward_figures({"decode_host": one}, host)
    k = stack_scale(one["stacks"]["ln"], "ln", law)
    assert scaled["inforward_linear_bias_us"] == pytest.approx(raw["inforward_linear_bias_us"] * k)
    assert inforward_figures({}, host) == {}
