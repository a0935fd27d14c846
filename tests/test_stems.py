"""Channels-last 3x3 / 4x4 stems (class conv_stem_nhwc, gpusim.cost.classes.stem_nhwc_us) against the H200
cnn_stems sweep (validation/results/h200/cnn_stems.jsonl), and the lowering that picks the class."""

import json
import os

import pytest
import torch

from gpusim.hw.spec import load_spec
from gpusim.predict.api import predict
from validation.fit.fit_stems import err, points

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SWEEP = os.path.join(ROOT, "validation", "results", "h200", "cnn_stems.jsonl")
MAPS = os.path.join(ROOT, "validation", "results", "h200", "cnn_stem_maps.jsonl")


def _stem(k, s, pad, cout, n, hw, dtype, channels_last=True):
    dt = getattr(torch, dtype)
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    conv = torch.nn.Conv2d(3, cout, k, s, pad, bias=False, dtype=dt).to(memory_format=fmt)
    return conv, (torch.randn(n, 3, hw, hw, dtype=dt).contiguous(memory_format=fmt),)


@pytest.mark.parametrize("k,s,pad,cls", [(3, 2, 1, "conv_stem_nhwc"), (4, 4, 0, "conv_stem_nhwc"), (7, 2, 3, "conv_stem")])
def test_channels_last_stem_class(k, s, pad, cls):
    p = predict(*_stem(k, s, pad, 32, 8, 224, "bfloat16"), gpu=load_spec("h200-sxm-calibrated"))
    assert [x.variant for x in p.kernels if x.role == "main"] == [cls]


def test_nchw_stem_keeps_its_class():
    p = predict(*_stem(3, 2, 1, 32, 8, 224, "bfloat16", channels_last=False), gpu=load_spec("h200-sxm-calibrated"))
    assert "conv_stem_nhwc" not in {x.variant for x in p.kernels}


@pytest.mark.parametrize("dtype,count", [("fp32", 240), ("fp16", 240), ("bf16", 207), ("direct", 33)])
def test_h200_figures_fit_the_sweeps(dtype, count):
    # fitted medians 7.5 / 7.1 / 8.0 / 8.4% (fit_stems); the guard sits 4 points above the largest
    spec = load_spec("h200-sxm-calibrated")
    figs = (getattr(spec, f"conv_stem_nhwc_{dtype}_us"), getattr(spec, f"conv_stem_nhwc_{dtype}_tflops"))
    pts = [p for p in points(SWEEP, MAPS) if p["dtype"] == dtype]
    assert len(pts) == count
    assert err(pts, figs) < 12.5


def test_convnext_v2_stem_runs_the_direct_kernel():
    # ConvNeXt-V2-nano's bf16 4x4/4 stem to 80 channels at 160 px, batch 16 (held-out compiled record: 122.6 us;
    # the maps sweep: 123.4 us, cuDNN's grouped direct kernel)
    p = predict(*_stem(4, 4, 0, 80, 16, 160, "bfloat16"), gpu=load_spec("h200-sxm-calibrated"))
    assert abs(p.device_us / 123.4 - 1) < 0.15
    # the same stem at 192 px runs an implicit GEMM at ~11 TFLOP/s: far faster per FLOP
    q = predict(*_stem(4, 4, 0, 80, 16, 192, "bfloat16"), gpu=load_spec("h200-sxm-calibrated"))
    assert q.device_us < p.device_us


def test_batch32_fp16_3x3_stem_as_measured():
    # the sweep's channels-last fp16 3x3/2 stem to 32 channels at 224 px, batch 32: 30.6 us
    with open(SWEEP) as f:
        rows = [json.loads(line) for line in f]
    (meas,) = [r["kernel_sum_us"] for r in rows if r.get("kind") == "cnn_stems" and r["layout"] == "channels_last"
               and r.get("mode", "eager") == "eager" and r["dtype"] == "float16" and r["k"] == 3 and r["N"] == 32
               and r["HW"] == 224 and r["Cout"] == 32]
    p = predict(*_stem(3, 2, 1, 32, 32, 224, "float16"), gpu=load_spec("h200-sxm-calibrated"))
    assert abs(p.device_us / meas - 1) < 0.15


def test_gpu_without_figures_keeps_the_conv_class_time():
    spec = load_spec("h100-sxm-calibrated")
    assert spec.conv_stem_nhwc_bf16_tflops is None
    p = predict(*_stem(3, 2, 1, 32, 8, 224, "bfloat16"), gpu=spec)
    assert p.device_us > 0
