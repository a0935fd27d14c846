"""The decode host probe (validation.measure.decode_host_probe): it runs on CPU at tiny sizes, gives a figure for
every class, and scales the clocked figures to the unclocked wall (docs/eager_token.md §6)."""

import pytest

from gpusim.hw.host import load_host
from validation.measure.decode_host_probe import FIELD_OF, host_figures, probe_round


def test_the_probe_runs_and_gives_every_figure():
    r = probe_round("cpu", tiny=True, forwards=3)
    figs = host_figures(r)
    assert set(figs) == set(FIELD_OF.values()) and all(v > 0 for v in figs.values())


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
