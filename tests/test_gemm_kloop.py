"""The K-loop latency of mid-size 16-bit GEMMs (gpusim.cost.laws.kloop_us; figures fitted by
validation/fit/fit_gemm_kloop.py on the dispatch sweeps)."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from gpusim.capture.tracing import capture
from gpusim.cost.kernel import estimate_kernel
from gpusim.hw.spec import load_spec
from gpusim.predict.pipeline import lower, predict
from validation.fit.fit_gemm_kloop import fit, law_terms, sweep_points

H100 = load_spec("h100-sxm-calibrated")
OFF = H100.replace(gemm_kloop_us=None, gemm_kloop_ns=None)


def _linear(m, n, k, dtype=torch.bfloat16, bias=True):
    x = torch.empty(1, m, k, device="meta", dtype=dtype)
    w = torch.empty(n, k, device="meta", dtype=dtype)
    if not bias:
        return capture(lambda x, w: x @ w.t(), (x, w))
    b = torch.empty(n, device="meta", dtype=dtype)
    return capture(lambda x, w, b: F.linear(x, w, b), (x, w, b))


def _main(g, spec):
    return estimate_kernel(g, lower(g, "eager", spec=spec).kernels[0], spec)


def test_kloop_adds_to_one_wave_products_only():
    """BEiT's fc2 at batch 1 (257 x 768 x 3072, 18 tiles of 128x128): its compute time grows
    by exactly gemm_kloop_us + K x gemm_kloop_ns; a decode-sized product (8 rows), a product of
    more than one wave (4096 x 4096 output), an fp32 product and a GPU without the figures are
    priced as before."""
    assert H100.gemm_kloop_us and H100.gemm_kloop_ns
    g = _linear(257, 768, 3072)
    on, off = _main(g, H100), _main(g, OFF)
    assert on.compute_us - off.compute_us == pytest.approx(H100.gemm_kloop_us + 3072 * H100.gemm_kloop_ns * 1e-3)
    assert on.us > off.us
    for g in (_linear(8, 768, 3072), _linear(4096, 4096, 1024), _linear(257, 768, 3072, torch.float32)):
        assert _main(g, H100).us == _main(g, OFF).us
    sheet = load_spec("h100")
    assert sheet.gemm_kloop_ns is None


def test_kloop_law_matches_its_sweep():
    """On the H100 dispatch sweep's bf16 products in the law's domain (128-2048 rows, one wave):
    without the figures the law is one-sided low (signed median about -17%); with them, median
    error <= 6% and p90 <= 17%, and refitting the bf16 points alone gives figures within
    0.3 us / 0.3 ns of the spec's (fitted on fp16 and bf16)."""
    pts, _ = sweep_points("h100")
    pts = [p for p in pts if p["dtype"] == "bfloat16"]
    t = law_terms(pts, H100)
    on = t["on"].astype(bool)
    assert on.sum() >= 25
    meas = t["meas"][on]
    before = np.array([predict(_pt(p), gpu=OFF, mode="eager").device_us for p, x in zip(pts, on) if x])
    after = np.array([predict(_pt(p), gpu=H100, mode="eager").device_us for p, x in zip(pts, on) if x])
    assert np.median(before / meas - 1) < -0.10
    e = np.abs(after / meas - 1)
    assert np.median(e) <= 0.06 and np.percentile(e, 90) <= 0.17, (np.median(e), np.percentile(e, 90))
    t0, c0 = fit(t, H100)
    assert abs(t0 - H100.gemm_kloop_us) <= 0.3 and abs(c0 - H100.gemm_kloop_ns) <= 0.3, (t0, c0)


def _pt(p):
    from validation.fit.fit_gemm_kloop import point_graph
    return point_graph(p)
