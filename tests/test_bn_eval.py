"""Eval batch norm's parallelism law (gpusim.cost.classes.bn_eval_law), on the recorded ``bn``
sweeps of the H100 and the H200, and the bandwidth-latency rule that carries the
memory-bound classes between GPUs (gpusim.hw.arch.carried_fractions)."""

import dataclasses
import json
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpusim.hw.arch import BANDWIDTH_FIELDS, bandwidth_fraction, bandwidth_k, carried_fractions
from gpusim.cost.classes import bn_eval_law
from gpusim.hw.spec import load_spec, transfer_spec
from validation.fit import fit_bn

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SWEEPS = os.path.join(ROOT, "validation", "sweeps")
GPUS = ("h100", "h200")


def _sweep(gpu: str, flush: bool) -> list[dict]:
    name = f"{gpu}-bn.json" if flush else f"{gpu}-bn-noflush.json"
    with open(os.path.join(SWEEPS, name)) as f:
        return json.load(f)["sweeps"]["bn"]


@pytest.mark.parametrize("gpu", GPUS)
def test_spec_figures_are_what_the_sweep_gives(gpu):
    spec = load_spec(f"{gpu}-sxm-calibrated")
    old = dataclasses.replace(spec, **{k: None for k in fit_bn.FIGURES})
    fitted = fit_bn.fit(_sweep(gpu, flush=False), old)
    assert set(fitted) == set(fit_bn.FIGURES)
    for k, v in fitted.items():
        assert getattr(spec, k) == pytest.approx(v, rel=1e-6), k
        assert spec.provenance[k][0] == "measured" and "bn-noflush" in spec.provenance[k][1]


@pytest.mark.parametrize("gpu", GPUS)
def test_law_predicts_the_sweep_better_than_the_stream(gpu):
    """Per kernel, L2 as the previous call left it: the law's median error on the 180
    points against the old law's (the stream with small-plane padding). Deterministic:
    the limits sit 1 point above the figures measured on 2026-11-25 (H100 27.6% -> 8.1%,
    H200 32.3% -> 11.0%)."""
    spec = load_spec(f"{gpu}-sxm-calibrated")
    old = dataclasses.replace(spec, **{k: None for k in fit_bn.FIGURES})
    errs = {"old": [], "law": []}
    for p in _sweep(gpu, flush=False):
        us = fit_bn.bn_kernel_us(p)
        g = fit_bn.point_graph(p)
        errs["old"].append(abs(fit_bn.predicted_bn_us(g, old) - us) / us * 100)
        errs["law"].append(abs(fit_bn.predicted_bn_us(g, spec) - us) / us * 100)
    med = {k: sorted(v)[len(v) // 2] for k, v in errs.items()}
    assert med["law"] <= {"h100": 9.1, "h200": 12.0}[gpu]
    assert med["law"] < med["old"] / 2


def test_the_two_gpus_measure_the_same_cycles():
    """Same SMs, same clock, 1.43x the bandwidth: the cycle figures agree within 6%
    (what lets them carry by the SM-cycle rule)."""
    a, b = (load_spec(f"{g}-sxm-calibrated") for g in GPUS)
    for k in ("bn_plane_cycles", "bn_plane_element_cycles", "bn_nhwc_image_cycles"):
        assert getattr(a, k) == pytest.approx(getattr(b, k), rel=0.06), k


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 64), c=st.sampled_from([16, 64, 256, 1024, 2048]),
       hw=st.sampled_from([7, 14, 28, 56, 112]), more=st.integers(1, 8))
def test_nchw_law_grows_with_the_planes(n, c, hw, more):
    spec = load_spec("h100-sxm-calibrated")
    a = {"shape": (n, c, hw, hw), "dtype": "float16"}
    b = {"shape": (n * more, c, hw, hw), "dtype": "float16"}
    assert bn_eval_law(b, True, spec)[0] >= bn_eval_law(a, True, spec)[0]


def test_no_figure_no_law():
    spec = load_spec("a100-sxm4-80gb")
    assert bn_eval_law({"shape": (8, 64, 56, 56), "dtype": "float32"}, True, spec) is None
    assert bn_eval_law({"shape": (8, 64, 56, 56), "dtype": "float32"}, None,
                       load_spec("h100-sxm-calibrated")) is None


@pytest.mark.parametrize("gpu", GPUS)
def test_carrying_a_gpu_to_itself_keeps_its_fractions(gpu):
    spec = load_spec(f"{gpu}-sxm-calibrated")
    for f, v in carried_fractions(spec, spec).items():
        assert v == pytest.approx(getattr(spec, f), rel=1e-9), f


@settings(max_examples=50, deadline=None)
@given(frac=st.floats(0.05, 0.85), bw=st.floats(300, 8000))
def test_rule_round_trip_and_more_bandwidth_never_a_higher_fraction(frac, bw):
    spec = dataclasses.replace(load_spec("h100-sxm-calibrated"), aten_norm_efficiency=frac)
    k = bandwidth_k(spec, "aten_norm_efficiency")
    assert bandwidth_fraction(spec, k) == pytest.approx(frac, rel=1e-9)
    wider = dataclasses.replace(spec, bandwidth_gbs=max(bw, spec.bandwidth_gbs))
    assert bandwidth_fraction(wider, k) <= frac + 1e-12


def test_transfer_spec_carries_the_memory_bound_classes_by_the_rule():
    src = load_spec("h100-sxm-calibrated")
    t = transfer_spec(src, "h200")
    for f in BANDWIDTH_FIELDS:
        if getattr(src, f, None):
            # the H200's 1.43x bandwidth on the same SMs: a lower fraction than the H100's
            assert getattr(t, f) < getattr(src, f), f
            assert t.provenance[f][0] == "derived"
