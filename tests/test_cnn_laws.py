"""Issue 35's CNN law for 1x1 convolutions run by cuBLAS (gpusim.cost.laws.conv_gemm; figures
fitted by validation/fit/fit_conv_gemm.py on the cnn sweeps and the cnn_convs sweep) and the stem
refit (validation/fit/fit_conv_stem.py). Without its figures the conv_gemm law is the conv law."""

import pytest
import torch
import torch.nn.functional as F

from gpusim.capture.tracing import capture
from gpusim.cost.kernel import estimate_kernel
from gpusim.hw.spec import load_spec
from gpusim.predict.pipeline import lower
from validation.fit.fit_conv_gemm import fit, law_us, points
from validation.reports.cnn_kernels import fine_class

H200 = load_spec("h200-sxm-calibrated")
OFF = H200.replace(conv_gemm_us=None, conv_gemm_efficiency=None)


def _conv(n, cin, cout, hw, k=1, dtype=torch.bfloat16, cl=False):
    x = torch.empty(n, cin, hw, hw, device="meta", dtype=dtype)
    w = torch.empty(cout, cin, k, k, device="meta", dtype=dtype)
    if cl:
        x, w = (t.contiguous(memory_format=torch.channels_last) for t in (x, w))
    return capture(lambda x, w: F.conv2d(x, w, padding=k // 2), (x, w))


def _us(g, spec):
    return [estimate_kernel(g, k, spec).us for k in lower(g, "eager", spec=spec).kernels]


def test_cublas_1x1_convs_are_their_own_class():
    """1x1 NCHW convolutions cuDNN hands to cuBLAS (batch 1; past 8x8 maps) lower to ``conv_gemm``;
    a 7x7 map at batch 32 (cuDNN's implicit GEMM between layout transforms), a 3x3 and a
    channels-last 1x1 keep the conv class."""
    for g in (_conv(1, 256, 64, 56), _conv(32, 256, 64, 56), _conv(32, 120, 120, 28, dtype=torch.float32)):
        assert [k.variant for k in lower(g, "eager", spec=H200).kernels] == ["conv_gemm"]
    for g in (_conv(32, 512, 2048, 7), _conv(32, 64, 64, 56, k=3), _conv(32, 256, 64, 56, cl=True)):
        assert "conv_gemm" not in [k.variant for k in lower(g, "eager", spec=H200).kernels]


def test_conv_gemm_law_without_figures_is_the_conv_law():
    """A spec without conv_gemm figures prices the class exactly as the conv law did; with
    figures, conv_gemm_us + bytes at conv_gemm_efficiency of the bandwidth."""
    g = _conv(1, 256, 64, 56)
    k = lower(g, "eager", spec=OFF).kernels[0]
    conv_priced = estimate_kernel(g, k.__class__(k.ops, k.impl, variant="conv"), OFF).us
    assert estimate_kernel(g, k, OFF).us == conv_priced
    on = OFF.replace(conv_gemm_us=3.0, conv_gemm_efficiency=0.5)
    e = estimate_kernel(g, k, on)
    assert e.us == pytest.approx(3.0 + e.bytes / (0.5 * on.bandwidth) * 1e6)


def _median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def test_conv_gemm_law_predicts_the_cnn_convs_sweep_out_of_sample():
    """Figures fitted on the older H200 sweeps (cnn + dispatch: 67 points) predict the cnn_convs
    sweep's 200-odd cuBLAS-run 1x1 points (validation/results/h200/cnn_convs.jsonl, measured
    after the fit's form was fixed) at a median error below 20%, where the conv law is above 35%."""
    pts = points("h200", OFF)
    new = [p for p in pts if p["src"].endswith("cnn_convs.jsonl")]
    old = [p for p in pts if not p["src"].endswith("cnn_convs.jsonl")]
    assert len(new) >= 200 and len(old) >= 40
    c0, eff = fit(old, OFF)
    assert 1.0 < c0 < 6.0 and 0.2 < eff < 1.0
    assert _median(abs(p["conv_us"] - p["us"]) / p["us"] for p in new) > 0.35
    assert _median(abs(law_us(p, c0, eff, OFF) - p["us"]) / p["us"] for p in new) < 0.20


def test_stem_refit_beats_the_spec_figures_on_the_stem_sweep():
    """The stem class refitted on every H200 stem point (cnn_convs' 3x3/2, 4x4/4, 7x7/2 stems
    and the dispatch sweeps') halves the median error of the spec's figures (an intercept of
    34 us, fitted on two shapes), each kernel size left out included."""
    from validation.fit.fit_conv_stem import fit as stem_fit, law_us as stem_us, points as stem_points
    pts = stem_points("h200", H200)
    assert len(pts) >= 300
    before = _median(abs(p["before"] - p["us"]) / p["us"] for p in pts)
    for k in (3, 4, 7):
        own, rest = [p for p in pts if p["p"]["k"] == k], [p for p in pts if p["p"]["k"] != k]
        c0, r = stem_fit(rest, H200)
        assert _median(abs(stem_us(p, c0, r, H200) - p["us"]) / p["us"] for p in own) < \
            _median(abs(p["before"] - p["us"]) / p["us"] for p in own)
    c0, r = stem_fit(pts, H200)
    assert _median(abs(stem_us(p, c0, r, H200) - p["us"]) / p["us"] for p in pts) < before / 1.5


def test_fine_classes_of_profiled_kernels():
    assert fine_class("void cudnn::engines_precompiled::nchwToNhwcKernel<float>") == "layout"
    assert fine_class("nvjet_sm90_tst_64x8_64x16_1x1_h_bz_TNT") == "gemm_nvjet"
    assert fine_class("sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc") == "fprop_sm90"
    assert fine_class("void at::native::(anonymous namespace)::conv_depthwise2d_forward_kernel") == "dw_aten"
    assert fine_class("void cudnn::bn_fw_inf_1C11_kernel_NCHW<float>") == "bn_cudnn"
    assert fine_class("something else") == "other"


def test_row_walk_covers_trailing_spatial_means():
    """ATen's reduction over several trailing dims (a squeeze-excite ``x.mean((2, 3))``) walks
    one row of their product, as a last-dim reduction does (gpusim.cost.roofline.row_walk_us,
    ``reduction_col_ns`` from the prefill_classes sweep); on the cnn_convs sweep's 32 spatial
    means the H200's median error falls (it was -48%: every mean priced at the 2.3 us floor). The walk is the
    fallback of a spec without the aten_reduce figures (gpusim.cost.aten_reduce, which supersedes it: its own test,
    tests/test_aten_reduce.py), so it is checked on the H200's spec without them."""
    import json
    import os
    from gpusim.hw.schema import ATEN_REDUCE_FIGURES
    from validation.score.cnn_convs_report import _graph
    from gpusim.predict.pipeline import predict
    walk = H200.replace(**dict.fromkeys(ATEN_REDUCE_FIGURES))
    g = _graph({"op": "reduce", "red": "mean", "N": 1, "C": 64, "HW": 56, "dtype": "float32"})
    k = lower(g, "eager", spec=walk).kernels[0]
    assert estimate_kernel(g, k, walk).us >= 56 * 56 * walk.reduction_col_ns * 1e-3
    assert estimate_kernel(g, k, walk.replace(reduction_col_ns=None)).us < 3.0
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "validation", "results", "h200", "cnn_convs.jsonl")
    with open(path) as f:
        pts = [p for p in map(json.loads, f) if p.get("op") == "reduce" and p.get("red") == "mean"]
    assert len(pts) == 32
    err = {s: _median(abs(predict(_graph(p), gpu=spec, mode="eager").device_us / sum(x["us"] for x in p["kernels"]) - 1)
                      for p in pts) for s, spec in (("on", walk), ("off", walk.replace(reduction_col_ns=None)))}
    assert err["on"] < err["off"] - 0.05
