"""Issue 35's CNN laws: 1x1 convolutions run by cuBLAS (gpusim.cost.laws.conv_gemm; figures
fitted by validation/fit/fit_conv_gemm.py on the cnn sweeps) and writes of L2-resident-size
outputs (gpusim.cost.roofline.l2_write_rate; validation/fit/fit_l2_write.py on the cnn_convs
sweep's warm points). Without their figures both laws price as before."""

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
OFF = H200.replace(conv_gemm_us=None, conv_gemm_efficiency=None, l2_write_gbs=None)


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


def test_conv_gemm_fit_beats_the_conv_law_on_its_sweep():
    """On the H200 cnn and dispatch sweeps' cuBLAS-run 1x1 points the fitted law's median error
    is below the conv law's (which prices batch-1 kernels of 2-4 us at the 6.8 us conv floor)."""
    pts = points("h200", OFF)
    assert len(pts) >= 40
    c0, eff = fit(pts, OFF)
    assert 1.0 < c0 < 6.0 and 0.2 < eff < 1.0
    before = sorted(abs(p["conv_us"] - p["us"]) / p["us"] for p in pts)
    after = sorted(abs(law_us(p, c0, eff, OFF) - p["us"]) / p["us"] for p in pts)
    assert after[len(after) // 2] < before[len(before) // 2]


def test_l2_write_rate_applies_to_l2_sized_outputs_only():
    """With ``l2_write_gbs``, a relu whose output fits ``l2_resident_fraction x L2`` drains its
    write at that rate (slower than the DRAM stream here); one whose output does not is
    priced as before; without the figure nothing changes."""
    slow = OFF.replace(l2_write_gbs=2000.0)
    x = torch.empty(8, 64, 56, 56, device="meta")
    small = capture(lambda x: torch.relu(x * 1.0), (x,))
    a, b = _us(small, OFF), _us(small, slow)
    assert b[0] > a[0] and b[1] > a[1]
    big = capture(lambda x: torch.relu(x * 1.0), (torch.empty(256, 64, 56, 56, device="meta"),))
    assert _us(big, OFF) == _us(big, slow)
    assert _us(small, OFF.replace(l2_write_gbs=None)) == a


def test_fine_classes_of_profiled_kernels():
    assert fine_class("void cudnn::engines_precompiled::nchwToNhwcKernel<float>") == "layout"
    assert fine_class("nvjet_sm90_tst_64x8_64x16_1x1_h_bz_TNT") == "gemm_nvjet"
    assert fine_class("sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc") == "fprop_sm90"
    assert fine_class("void at::native::(anonymous namespace)::conv_depthwise2d_forward_kernel") == "dw_aten"
    assert fine_class("void cudnn::bn_fw_inf_1C11_kernel_NCHW<float>") == "bn_cudnn"
    assert fine_class("something else") == "other"
