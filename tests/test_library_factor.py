"""eager_library_forward_factor: a host's in-forward slowdown put on the library calls' own dispatch alone
(gpusim.sim.timeline.eager_factors), fitted on the reference forwards (reference_forwards.library_forward_factor)."""

import pytest
import torch

from gpusim import capture, predict
from gpusim.hw.host import load_host
from gpusim.sim.timeline import eager_factors, is_library_call


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Dropout(0.0))
                                 for _ in range(24)]).eval()


def _host(**kw):
    return load_host().replace(**{"eager_forward_factor": 1.4, **kw})


def test_without_the_figure_the_forward_factor_prices_everything():
    h = _host()
    assert eager_factors(h, 200) == (1.4, 1.4)
    assert eager_factors(h, 5) == (1.0, 1.0)          # a loop of a few ops pays none of it


def test_the_library_factor_lands_on_library_calls_only():
    g = capture(_mlp(), (torch.randn(4, 64),))
    base = predict(g, gpu="h100", mode="eager", host=_host(eager_forward_factor=None))
    lib = predict(g, gpu="h100", mode="eager", host=_host(eager_library_forward_factor=2.0))
    calls = [k for k in base.kernels if is_library_call(k)]
    others = [k for k in base.kernels if not is_library_call(k)]
    assert calls and others
    h = load_host()
    own = sum(h.eager_library_op_us or h.eager_op_us for _ in calls)
    rest, f = eager_factors(lib.host, len(base.kernels))      # ramped: 48 kernels pay 2/3 of it
    assert rest == 1.0 and 1.0 < f < 2.0
    # the library calls pay their dispatch f times, the rest (relus, the model's Python, views) as in a tight loop
    assert lib.timeline.host_us == pytest.approx(base.timeline.host_us + (f - 1) * own, rel=1e-6)
    assert lib.timeline.python_us == pytest.approx(base.timeline.python_us, rel=1e-9)


def test_the_fit_recovers_the_factor_the_walls_were_made_with():
    from gpusim.predict.pipeline import as_spec
    from validation.measure.reference_forwards import _reference_graphs, library_forward_factor
    h = _host(eager_forward_factor=None)
    made = h.replace(eager_library_forward_factor=1.7)
    # walls as a host with the factor would run the reference forwards (host-bound: the wall is the host's)
    walls = {k: predict(g, gpu="h100", mode="eager", host=made).end_to_end_us
             for k, g in _reference_graphs(False).items()}
    f, diag = library_forward_factor(walls, as_spec("h100"), h)
    assert f == pytest.approx(1.7, rel=0.02)
    assert set(diag) == set(walls) and all(d["library_calls_us"] > 0 for d in diag.values())
    # walls at the tight-loop price: no slowdown to put anywhere
    plain = {k: predict(g, gpu="h100", mode="eager", host=h).end_to_end_us for k, g in _reference_graphs(False).items()}
    assert library_forward_factor(plain, as_spec("h100"), h)[0] == pytest.approx(1.0, abs=0.01)
