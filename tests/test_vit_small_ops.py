"""ViT's small ATen kernels (gpusim.cost.small_ops) on the H200 vit_small_ops sweep
(validation/results/h200/vit_small_ops.jsonl): the fit reproduces the spec, each law prices the
sweep's points it covers (and the common stream did not), and the H100, with no sweep, keeps its
law."""

import dataclasses
import os

import pytest
import torch
import torch.nn.functional as F

from gpusim.capture.tracing import capture
from gpusim.cost.kernel import kernel_us
from gpusim.hw.spec import load_spec
from gpusim.predict.pipeline import lower
from validation.fit.fit_vit_small_ops import FIGURES, fit, read

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SWEEP = os.path.join(ROOT, "validation", "results", "h200", "vit_small_ops.jsonl")
H200 = load_spec("h200-sxm-calibrated")
BEFORE = dataclasses.replace(H200, **{f: None for f in FIGURES})
DT = {"float32": torch.float32, "bfloat16": torch.bfloat16}


@pytest.fixture(scope="module")
def rows():
    return read(SWEEP)[1]


def graph(r):
    dt = DT[r["dtype"]]
    if r["op"] == "gather":
        t = torch.empty((2 * r["W"] - 1) ** 2 + 3, r["H"], device="meta", dtype=dt)
        i = torch.empty(r["S"] * r["S"], device="meta", dtype=torch.long)
        return capture(lambda t, i: t[i], (t, i))
    x = torch.empty(r["B"], r["S"], r["C"], device="meta", dtype=dt)
    if r["op"] == "layer_scale":
        g = torch.empty(r["C"], device="meta", dtype=dt)
        return capture(lambda x, g: g * x, (x, g))
    return capture(lambda x: F.layer_norm(x, (r["C"],)), (x,))


def priced(r, spec):
    g = graph(r)
    ks = [k for k in lower(g, "eager", spec=spec).kernels if k.role == "main"]
    return kernel_us(g, ks[0], spec), ks[0].variant


def test_fit_reproduces_the_spec(rows):
    figs, _ = fit(rows)
    for f in FIGURES:
        assert getattr(H200, f) == pytest.approx(figs[f], rel=1e-3, abs=1e-4)


@pytest.mark.parametrize("op,variant,law_max,before_min", [
    ("gather", "gather", 26.0, 60.0),           # the common stream priced them 2-15x too fast
    ("layer_scale", "bcast_mul", 10.0, 25.0),
    ("layer_norm", "layer_norm", 7.0, 15.0)])
def test_laws_on_the_sweep(rows, op, variant, law_max, before_min):
    """Each law within ``law_max`` % of every sweep point in its domain; the spec without the
    figures misses the median point by more than ``before_min`` % (fails without the law)."""
    pts = [r for r in rows if r["op"] == op and (op != "layer_norm" or r["B"] * r["S"] <= 257)
           and (op != "layer_scale" or r["B"] * r["S"] > 1)]
    law, before = [], []
    for r in pts:
        us, v = priced(r, H200)
        assert v == variant
        meas = r["kernels"][0]["us"]
        law.append(abs(us / meas - 1) * 100)
        before.append(abs(priced(r, BEFORE)[0] / meas - 1) * 100)
    assert max(law) < law_max
    assert sorted(before)[len(before) // 2] > before_min


def test_gather_kernel_by_row_bytes(rows):
    """ATen's vectorized gather runs when a row is a multiple of 16 bytes (fp32 x 12 heads, bf16
    x 16), its elementwise index kernel otherwise (fp32 x 6, bf16 x 12): the sweep's kernel names."""
    for r in rows:
        if r["op"] != "gather":
            continue
        vec = r["H"] * (4 if r["dtype"] == "float32" else 2) % 16 == 0
        assert ("vectorized_gather" in r["kernels"][0]["name"]) == vec


def test_h100_carries_the_h200_law():
    """No sweep on the H100: it carries the H200's figures by the same-architecture rule (validation/fit/
    carry_decode.py, issue 35), each ``derived``, so the gather prices as on the H200, not as the common estimate."""
    h100, h200 = load_spec("h100-sxm-calibrated"), load_spec("h200-sxm-calibrated")
    for f in FIGURES:
        assert h100.provenance[f][0] == "derived" and getattr(h100, f) == pytest.approx(getattr(h200, f), abs=1e-4), f
    r = {"op": "gather", "W": 14, "S": 197, "H": 12, "dtype": "float32"}
    g = graph(r)
    k = next(k for k in lower(g, "eager", spec=h100).kernels if k.role == "main")
    assert kernel_us(g, k, h100) != kernel_us(g, dataclasses.replace(k, variant=""), h100)


def test_out_of_domain_falls_back():
    """A layer norm of 96 channels (below the sweep's 384) keeps the reduction floor."""
    x = torch.empty(1, 64, 96, device="meta")
    g = capture(lambda x: F.layer_norm(x, (96,)), (x,))
    k = next(k for k in lower(g, "eager", spec=H200).kernels if k.role == "main")
    assert kernel_us(g, k, H200) == kernel_us(g, k, BEFORE)
