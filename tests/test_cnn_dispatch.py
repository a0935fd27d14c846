"""CNN/ViT eager dispatch (issue #10): conv bias kernels, 1x1 convs as GEMMs at batch 1,
channels-last propagation between convs, cuDNN depthwise and grouped-conv weight
transforms, eval batch norm over small planes, layer norm over narrow rows; each rule
checked against the committed cnn/norms sweeps (validation/sweeps/<gpu>-cnn.json)."""

import json
import os

import pytest
import torch
import torch.nn.functional as F

from gpusim.capture.tracing import capture
from gpusim.cost.kernel import estimate_kernel
from gpusim.lower.conv import conv_info, conv_layout
from validation.fit.fit_dispatch import fit_dispatch
from gpusim.hw.spec import load_spec
from gpusim.predict.pipeline import lower

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
H100 = load_spec("h100-sxm-calibrated")
H200 = load_spec("h200-sxm-calibrated")
DT = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def _sweeps(gpu):
    out = {}
    for name in (f"{gpu}.json", f"{gpu}-cnn.json"):
        with open(os.path.join(ROOT, "validation", "sweeps", name)) as f:
            out.update(json.load(f)["sweeps"])
    return out


@pytest.fixture(scope="module")
def cnn():
    return _sweeps("h100")


def _point_graph(p):
    dt = DT[p["dtype"]]
    x = torch.empty(p["N"], p["Cin"], p["HW"], p["HW"], device="meta", dtype=dt)
    w = torch.empty(p["Cout"], p["Cin"] // p["groups"], p["k"], p["k"], device="meta", dtype=dt)
    b = torch.empty(p["Cout"], device="meta", dtype=dt) if p.get("bias") else None
    if p["layout"] != "nchw":
        x, w = (t.contiguous(memory_format=torch.channels_last) for t in (x, w))
    return capture(lambda x, w, b: F.conv2d(x, w, b, p["stride"], p["padding"], 1, p["groups"]), (x, w, b))


def test_kernel_counts_match_the_cnn_sweep(cnn):
    """Kernels per conv (bias add, transforms, the conv) equal the profiler's on at least
    80% of the cnn sweep's points that launch one main kernel."""
    right, wrong = 0, []
    for p in cnn["cnn"]:
        if sum("elementwise" not in k["name"] and "Transform" not in k["name"] and "Transpose" not in k["name"]
               and "nchwTo" not in k["name"] and "nhwcTo" not in k["name"] and "splitK" not in k["name"]
               for k in p["kernels"]) != 1:
            continue                     # per-group and split kernels: not modelled
        n = len(lower(_point_graph(p), "eager", spec=H100).kernels)
        if n == p["kernel_count"]:
            right += 1
        else:
            wrong.append((p["kind"], p["N"], p["HW"], p["dtype"], p["layout"], n, p["kernel_count"]))
    assert right / (right + len(wrong)) >= 0.8, wrong


def test_bias_is_its_own_kernel_except_in_aten_depthwise():
    x = torch.empty(1, 96, 56, 56, device="meta")
    b = torch.empty(96, device="meta")
    for dt, layout, k, want in ((torch.float16, "nchw", 3, 1), (torch.float32, "nchw", 7, 0),
                                (torch.float32, "cl", 7, 1), (torch.float16, "nchw", 7, 0)):
        xx = x.to(dt)
        xx = xx.contiguous(memory_format=torch.channels_last) if layout == "cl" else xx
        w = torch.empty(96, 1, k, k, device="meta", dtype=dt)
        g = capture(lambda x, w, b: F.conv2d(x, w, b, padding=k // 2, groups=96), (xx, w, b.to(dt)))
        ks = lower(g, "eager", spec=H100).kernels
        assert sum(kk.variant == "conv_bias" for kk in ks) == want, (dt, layout, k)
        # torch.compile peels the bias into its own Triton kernel: no ATen bias kernel
        assert not any(kk.variant == "conv_bias" for kk in lower(g, "compiled", spec=H100).kernels)


def test_pointwise_conv_is_a_gemm_at_batch_1_and_on_1x1_maps():
    for n, hw, want in ((1, 7, 1), (32, 1, 1), (32, 7, 3), (32, 14, 1)):
        x = torch.empty(n, 512, hw, hw, device="meta", dtype=torch.float16)
        w = torch.empty(2048, 512, 1, 1, device="meta", dtype=torch.float16)
        g = capture(lambda x, w: F.conv2d(x, w), (x, w))
        assert len(lower(g, "eager", spec=H100).kernels) == want, (n, hw)


def test_conv_after_a_channels_last_conv_runs_channels_last():
    """ConvNeXt: LayerNorm2d's permute makes the downsampling conv NHWC; cuDNN writes its
    output channels-last, so the depthwise conv after it runs NHWC too; conv_info reads
    the permuted view's shape (N, C, H, W), not its storage's."""
    x = torch.empty(1, 56, 56, 96, device="meta", dtype=torch.float16)
    w1 = torch.empty(192, 96, 2, 2, device="meta", dtype=torch.float16)
    w2 = torch.empty(192, 1, 7, 7, device="meta", dtype=torch.float16)
    g = capture(lambda x, w1, w2: F.conv2d(F.conv2d(x.permute(0, 3, 1, 2), w1, stride=2), w2,
                                            padding=3, groups=192), (x, w1, w2))
    convs = [n for n in g.compute_nodes if g.g.nodes[n]["kind"] == "conv"]
    assert [conv_layout(g, n) for n in convs] == ["nhwc", "nhwc"]
    assert conv_info(g, convs[0])["Cin"] == 96
    assert lower(g, "eager", spec=H100).kernels[-1].variant == "depthwise"


def test_grouped_weight_transform_follows_channels_per_group(cnn):
    for cpg, want in ((24, "weight_transform"), (32, "weight_to_nhwc")):
        x = torch.empty(32, cpg * 5, 28, 28, device="meta", dtype=torch.float16)
        w = torch.empty(cpg * 5, cpg, 3, 3, device="meta", dtype=torch.float16)
        g = capture(lambda x, w: F.conv2d(x, w, padding=1, groups=5), (x, w))
        ks = lower(g, "eager", spec=H100).kernels
        assert ks[1].role == "aux" and ks[1].variant == want
        assert estimate_kernel(g, ks[1], H100).us >= (H100.weight_transform_us if want == "weight_transform" else 0)
    # the sweep: tensorTransformGeneric for 24 per group, nchwToNhwc for 8..64
    for p in cnn["cnn"]:
        if p["kind"] == "grouped3x3" and p["layout"] == "nchw" and p["N"] == 32 and len(p["kernels"]) == 4:
            generic = "tensorTransformGeneric" in p["kernels"][1]["name"]
            cpg = p["Cin"] // p["groups"]
            assert generic == (cpg & (cpg - 1) != 0), p


def _time(g, spec):
    return sum(estimate_kernel(g, k, spec).us for k in lower(g, "eager", spec=spec).kernels)


def test_depthwise_and_norm_classes_track_the_sweep(cnn):
    """Predicted cuDNN depthwise, eval batch norm and layer norm times are within 35% of
    the measured ones at the median over the sweep's points (the plain roofline was 2-4x
    off on 7x7 depthwise, 7x7-plane batch norms and 96-wide layer norms)."""
    import numpy as np
    errs = {"dw": [], "bn": [], "ln": []}
    for p in cnn["cnn"]:
        if p["kind"] == "dw7x7" and p["layout"] != "nchw":
            g = _point_graph(p)
            (k,) = [k for k in lower(g, "eager", spec=H100).kernels if k.role == "main"]
            meas = sum(x["us"] for x in p["kernels"] if "elementwise" not in x["name"])
            errs["dw"].append(abs(estimate_kernel(g, k, H100).us / meas - 1))
    for p in cnn["norms"]:
        dt = DT[p["dtype"]]
        x = torch.empty(p["shape"], device="meta", dtype=dt)
        if p["op"] == "batch_norm_eval" and p["shape"][0] == 32:
            c = torch.empty(p["shape"][1], device="meta", dtype=dt)
            g = capture(lambda x, c: F.batch_norm(x, c, c, c, c, False, 0.1, 1e-5), (x, c))
            errs["bn"].append(abs(_time(g, H100) / p["kernel_sum_us"] - 1))
        elif p["op"] == "layer_norm" and p["shape"][0] >= 1000:
            c = torch.empty(p["shape"][-1], device="meta", dtype=dt)
            g = capture(lambda x, c: F.layer_norm(x, (p["shape"][-1],), c, c), (x, c))
            errs["ln"].append(abs(_time(g, H100) / p["kernel_sum_us"] - 1))
    for name, e in errs.items():
        assert e and float(np.median(e)) < 0.35, (name, sorted(e))


@pytest.mark.parametrize("gpu,spec", [("h100", H100), ("h200", H200)])
def test_fit_reproduces_the_calibrated_cnn_figures(gpu, spec):
    fitted = fit_dispatch({"sweeps": _sweeps(gpu)}, spec)
    for k in ("depthwise_us", "depthwise_tap_us", "depthwise_efficiency", "depthwise_us_16bit",
              "depthwise_tap_us_16bit", "depthwise_efficiency_16bit", "weight_transform_us",
              "layer_norm_row_ns", "layer_norm_row_ns_16bit"):
        assert getattr(spec, k) == pytest.approx(fitted[k], rel=1e-3), k


def test_fp16_depthwise_takes_pytorchs_cudnn_rule():
    """PyTorch's use_cudnn_depthwise: NCHW fp16 stride-2 depthwise convs run ATen's kernel
    unless wide enough (>= 512 channels, or >= 256 on maps >= 28), as do convs of fewer
    than 32 channels and 7x7 filters; stride 1 with 1/3/5 filters runs cuDNN; channels-last
    always cuDNN (broad H100 AMP records: ``conv_depthwise2d_forward_kernel`` vs cuDNN's)."""
    from gpusim.lower.conv import aten_depthwise
    base = {"layout": "nchw", "dtype": "float16", "kw": 3}
    cases = (({"N": 32, "Cin": 48, "H": 112, "W": 112, "Ho": 56, "kh": 3}, True),
             ({"N": 256, "Cin": 512, "H": 14, "W": 14, "Ho": 7, "kh": 3}, False),
             ({"N": 256, "Cin": 256, "H": 28, "W": 28, "Ho": 14, "kh": 3}, False),
             ({"N": 256, "Cin": 256, "H": 14, "W": 14, "Ho": 7, "kh": 3}, True),
             ({"N": 256, "Cin": 16, "H": 56, "W": 56, "Ho": 56, "kh": 3}, True),
             ({"N": 256, "Cin": 96, "H": 56, "W": 56, "Ho": 56, "kh": 3}, False),
             ({"N": 32, "Cin": 320, "H": 4, "W": 4, "Ho": 4, "kh": 3}, True),
             ({"N": 32, "Cin": 96, "H": 56, "W": 56, "Ho": 56, "kh": 7, "kw": 7}, True),
             ({"N": 1, "Cin": 96, "H": 56, "W": 56, "Ho": 28, "kh": 3}, False))
    for c, want in cases:
        assert aten_depthwise(dict(base, **c)) is want, c
    assert not aten_depthwise(dict(base, layout="nhwc", N=32, Cin=48, H=112, W=112, Ho=56, kh=3))
    assert aten_depthwise(dict(base, dtype="bfloat16", N=32, Cin=96, H=56, W=56, Ho=56, kh=3))


def test_depthwise_fp16_laws_follow_outputs_and_taps():
    """ATen's fp16 depthwise kernel: the per-output cost below 25 taps, the per-tap one
    above; cuDNN's NCHW fp16 kernels: per plane-tap and per output; a spec without the
    broad figures keeps the old laws."""
    import dataclasses

    from gpusim.hw.schema import BROAD_FIGURES
    old = dataclasses.replace(H100, **{k: None for k in BROAD_FIGURES})
    x = torch.empty(32, 96, 56, 56, device="meta", dtype=torch.float16)
    for k, stride, variant in ((3, 2, "depthwise_aten"), (7, 1, "depthwise_aten"), (3, 1, "depthwise")):
        w = torch.empty(96, 1, k, k, device="meta", dtype=torch.float16)
        g = capture(lambda x, w: F.conv2d(x, w, stride=stride, padding=k // 2, groups=96), (x, w))
        kern = next(kk for kk in lower(g, "eager", spec=H100).kernels if kk.role == "main")
        assert kern.variant == variant
        out = 32 * 96 * (56 // stride) ** 2
        us = estimate_kernel(g, kern, H100).us - H100.kernel_fixed_us
        if variant == "depthwise_aten":
            want = max(out / H100.depthwise_aten_output_rate_fp16, out * k * k / H100.depthwise_aten_tap_rate_fp16) / 1e3
        else:
            want = (32 * 96 * k * k * H100.depthwise_nchw_plane_tap_ps_fp16
                    + out * (H100.depthwise_nchw_output_ps_fp16 + k * k * H100.depthwise_nchw_output_tap_ps_fp16)) * 1e-6
        assert us == pytest.approx(want, rel=1e-6), (k, stride)
        assert estimate_kernel(g, kern, old).us != pytest.approx(us + H100.kernel_fixed_us, rel=1e-3)


def test_eval_batch_norm_on_a_meta_trace_walks_its_planes_after_an_nchw_conv():
    """A meta trace records no input_contiguous: the producer conv's layout stands in, so
    a 7x7 fp16 batch norm after an NCHW conv pays its (n, c) planes as a CUDA trace's does
    (gpusim.cost.classes.bn_eval_law), and after a channels-last conv ATen's channels-last floor."""
    from gpusim.cost.classes import bn_eval_law, bn_input_contiguous

    m = torch.nn.Sequential(torch.nn.Conv2d(64, 64, 3, padding=1), torch.nn.BatchNorm2d(64)).eval()
    m = m.to(device="meta", dtype=torch.float16)
    x = torch.empty(32, 64, 7, 7, device="meta", dtype=torch.float16)
    g = capture(m, (x,))
    bn = next(kk for kk in lower(g, "eager", spec=H100).kernels if kk.variant == "bn_eval")
    assert bn_input_contiguous(g, bn.ops[0]) is True
    xcl = x.contiguous(memory_format=torch.channels_last)
    gcl = capture(m.to(memory_format=torch.channels_last), (xcl,))
    bncl = next(kk for kk in lower(gcl, "eager", spec=H100).kernels if kk.variant == "bn_eval")
    assert bn_input_contiguous(gcl, bncl.ops[0]) is False
    planes_us = 32 * 64 * H100.bn_plane_cycles / (H100.sm_count * H100.boost_clock_mhz * 1e-3) * 1e-3
    assert bn_eval_law(g.g.nodes[bn.ops[0]], True, H100)[0] == pytest.approx(planes_us)
    assert estimate_kernel(g, bn, H100).us >= H100.kernel_fixed_us + planes_us
    assert estimate_kernel(gcl, bncl, H100).us == pytest.approx(H100.bn_cl_min_us)
