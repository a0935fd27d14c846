"""Held-out models (``gpusim.models.zoo.HOLDOUT``): architectures and sizes the zoo does not have.
They stay out of the zoo's listings and runs, build and capture on meta with every
kernel-launching op modelled, eager and along torch.compile's path, within the capture
time budget. Needs the zoo extra."""

import time

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")
pytest.importorskip("timm")
pytest.importorskip("transformers")

from gpusim.models import zoo  # noqa: E402
from gpusim.capture.tracing import capture  # noqa: E402
from gpusim.predict.pipeline import predict  # noqa: E402
from validation.measure import zoo_plan  # noqa: E402


def test_holdout_is_separate_from_the_zoo():
    assert len(zoo.HOLDOUT) >= 12
    assert not set(zoo.HOLDOUT) & set(zoo.ZOO)
    assert all(e.holdout for e in zoo.HOLDOUT.values())
    assert not any(e.holdout for e in zoo.ZOO.values())
    assert {e.family for e in zoo.HOLDOUT.values()} == set(zoo.FAMILIES)
    assert {e.library for e in zoo.HOLDOUT.values()} == {"torchvision", "timm", "transformers"}
    assert len(zoo.catalogue()) == len(zoo.ZOO)
    assert len(zoo.catalogue(holdout=True)) == len(zoo.HOLDOUT)
    usual = ({"batch": 1, "hw": 224}, {"batch": 32, "hw": 224}, {"batch": 1, "seq": 128},
             {"batch": 8, "seq": 512}, {"batch": 1, "seq": 128, "tgt": 32},
             {"batch": 8, "seq": 512, "tgt": 128})
    for name, e in zoo.HOLDOUT.items():
        assert zoo.get(name) is e
        assert e.defaults["batch"] == 1 < e.large["batch"]
        assert e.defaults not in usual and e.large not in usual      # held-out sizes
        assert set(e.dtypes) == {"float32", "bfloat16"}


def test_holdout_plan_runs_only_holdout_models():
    cases = zoo_plan.plan_cases(zoo.HOLDOUT, zoo_plan.HOLDOUT_COMPILED)
    assert {c.model for c in cases} == set(zoo.HOLDOUT)
    assert set(zoo_plan.HOLDOUT_COMPILED) <= set(zoo.HOLDOUT)
    eager = [c for c in cases if c.run == "eager"]
    assert len(eager) == len(zoo.HOLDOUT) * 2 * 2          # 2 sizes x 2 dtypes
    assert sum(c.run == "compiled" for c in cases) == len(zoo_plan.HOLDOUT_COMPILED)


@pytest.mark.parametrize("name", list(zoo.HOLDOUT))
def test_holdout_model_captures_and_predicts(name):
    e = zoo.HOLDOUT[name]
    for compiling in (False, True):
        module, args = zoo.build(name, dtype="bfloat16", **e.defaults)
        t0 = time.perf_counter()
        g = capture(module, args, name=name, compiling=compiling)
        p = predict(g, gpu="h100-sxm-calibrated", mode="compiled" if compiling else "eager")
        seconds = time.perf_counter() - t0
        assert g.unmodelled == [], [(n, g.node(n)["op"]) for n in g.unmodelled]
        assert p.device_us > 0 and p.peak_memory_bytes > 0 and len(p.kernels) > 20
        assert seconds < 30, f"{name} took {seconds:.1f} s to capture and predict"
