"""Fitting the eager kernel classes of :mod:`gpusim.lower.dispatch` on microbenchmark sweeps.

Lab code: reads ``validation/sweeps/<gpu>.json`` (made by :mod:`validation.measure.microbench`)
and returns the figures ``calibrate`` writes into a spec file. The predictor never imports
this module.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from gpusim.capture.tracing import capture
from gpusim.cost.classes import NORM_CALIBRATION_COLS, narrow_row_fraction
from gpusim.cost.roofline import CostOptions, estimate_group
from gpusim.lower.conv import aten_depthwise, is_depthwise, is_pow2
from gpusim.graph.opgraph import DTYPE_BYTES, HALF_DTYPES, numel

# ----------------------------------------------------------------------- fitting
def _median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if xs else None


def conv_point_graph(p):
    """The OpGraph of one conv2d point of a sweep (shapes, dtype, layout as measured)."""
    dt = getattr(torch, p["dtype"])
    x = torch.empty(p["N"], p["Cin"], p["HW"], p["HW"], device="meta", dtype=dt)
    w = torch.empty(p["Cout"], p["Cin"] // p["groups"], p["k"], p["k"], device="meta", dtype=dt)
    if p["layout"] != "nchw":
        x = x.contiguous(memory_format=torch.channels_last)
        w = w.contiguous(memory_format=torch.channels_last)
    return capture(lambda x, w: F.conv2d(x, w, stride=p["stride"], padding=p["padding"],
                                         groups=p["groups"]), (x, w))


def _main_us(p) -> float:
    return sum(k["us"] for k in p["kernels"] if not any(
        s in k["name"] for s in ("nchwToNhwc", "nhwcToNchw", "AddPadding")))


def _fit_conv(points, spec) -> dict:
    """Conv kernel classes: the scale on a GEMM's compute time and the floor of cuDNN's
    implicit-GEMM kernels, and the stem class's fixed time and rate (least squares)."""
    scale, floor, stem = [], [], []
    for p in points:
        if is_depthwise(p):
            continue                                  # depthwise: its own class
        meas = _main_us(p)
        if p["Cin"] < 8:
            flops = 2 * p["N"] * p["Cout"] * ((p["HW"] + 2 * p["padding"] - p["k"])
                                             // p["stride"] + 1) ** 2 * p["Cin"] * p["k"] ** 2
            stem.append((flops, meas))
            continue
        if p["N"] == 1:
            floor.append(meas)
            continue
        g = conv_point_graph(p)
        est = estimate_group(g, g.compute_nodes, spec, CostOptions(aten=True))
        if est.bound == "compute":
            scale.append(meas / (est.us - spec.kernel_fixed_us))
    out = {"conv_efficiency_scale": _median(scale), "conv_min_us": _median(floor)}
    if len(stem) >= 2:
        f = [a for a, _ in stem]
        t = [b for _, b in stem]
        slope, icpt = np.polyfit(f, t, 1)
        out["conv_stem_us"] = max(float(icpt), 0.0)
        out["conv_stem_tflops"] = 1e-6 / float(slope) if slope > 0 else None
    return out


def _fit_depthwise(points, spec) -> dict:
    """cuDNN's depthwise kernels (every channels-last point, NCHW fp16 up to 5x5): time =
    fixed + per filter tap + multiply-adds at a fraction of the fp32 CUDA-core peak,
    weighted least squares (relative error) per precision, the bias kernel left out."""
    out = {}
    for suffix, dts in (("", ("float32",)), ("_16bit", HALF_DTYPES)):
        rows, ys = [], []
        for p in points:
            if not is_depthwise(p) or p["dtype"] not in dts or "failed" in p:
                continue
            if aten_depthwise(dict(p, kh=p["k"])):
                continue
            ho = (p["HW"] + 2 * p["padding"] - p["k"]) // p["stride"] + 1
            flops = 2 * p["N"] * p["Cin"] * ho * ho * p["k"] ** 2
            t = sum(k["us"] for k in p["kernels"] if "elementwise" not in k["name"])
            rows.append([1.0, p["k"] ** 2, flops / spec.peak_flops("fp32") * 1e6])
            ys.append(t)
        if len(rows) < 4:
            continue
        a, y = np.array(rows), np.array(ys)
        c, *_ = np.linalg.lstsq(a / y[:, None], np.ones_like(y), rcond=None)
        if c[2] > 0:
            out.update({"depthwise_us" + suffix: float(c[0]), "depthwise_tap_us" + suffix: float(c[1]),
                        "depthwise_efficiency" + suffix: 1.0 / float(c[2])})
    return out


def _fit_weight_transform(points) -> dict:
    """cuDNN's generic weight transform of NCHW grouped convs whose channels per group are
    not a power of two: the median of its ``tensorTransformGeneric`` kernel."""
    ts = []
    for p in points:
        if p.get("layout") != "nchw" or p["groups"] <= 1 or is_depthwise(p) or "failed" in p:
            continue
        if is_pow2(p["Cin"] // p["groups"]) or len(p["kernels"]) != 4 + int(bool(p.get("bias"))):
            continue
        if "tensorTransformGeneric" in p["kernels"][1]["name"]:
            ts.append(p["kernels"][1]["us"])
    return {"weight_transform_us": _median(ts)} if ts else {}


def _fit_layer_norm(points, spec) -> dict:
    """ATen's layer norm: the time a row costs beyond the calibrated stream, per
    precision. Calibrate's stream efficiency is measured at 1,024-wide rows, so it holds
    their per-row cost already; a row of width w pays ``row_ns * narrow_row_fraction(w)``
    more (:func:`gpusim.cost.classes.narrow_row_fraction`). ``row_ns``: the median over the
    sweeps' layer norms of at least 1,000 rows of at most 512 columns (where the term
    dominates) of (measured - streamed) / rows / narrow_row_fraction."""
    out = {}
    for suffix, dts in (("", ("float32",)), ("_16bit", HALF_DTYPES)):
        per_row = []
        for p in points:
            if p.get("op") != "layer_norm" or p["dtype"] not in dts or "failed" in p:
                continue
            shape = tuple(p["shape"])
            rows = numel(shape) // shape[-1]
            if rows < 1000 or shape[-1] > NORM_CALIBRATION_COLS // 2:
                continue
            x = torch.empty(shape, device="meta", dtype=getattr(torch, p["dtype"]))
            w = torch.empty(shape[-1], device="meta", dtype=x.dtype)
            g = capture(lambda x, w, b: F.layer_norm(x, (shape[-1],), w, b), (x, w, w))
            est = estimate_group(g, g.compute_nodes, spec, CostOptions(aten=True))
            main = max(k["us"] for k in p["kernels"])
            per_row.append((main - est.us) / rows * 1e3 / narrow_row_fraction(shape[-1]))
        if per_row:
            out["layer_norm_row_ns" + suffix] = max(0.0, _median(per_row))
    return out


def _out_hw(p: dict) -> int:
    return (p["HW"] + 2 * p["padding"] - p["k"]) // p["stride"] + 1


def fit_dispatch(sweeps: dict, spec) -> dict:
    """Kernel-class efficiencies from a sweep file (``validation.measure.microbench``), as
    fractions of ``spec``'s datasheet peaks, so that they transfer across GPUs:

    * ``layout_transform_efficiency``: bandwidth of cuDNN's NCHW<->NHWC kernels (bytes
      read + written over time, large transforms only);
    * ``bn_eval_efficiency`` (fp32, cuDNN) and ``_16bit`` (ATen): eval batch norm's
      bandwidth;
    * ``depthwise_aten_efficiency``: ATen's NCHW depthwise kernel, multiply-adds as
      FLOPs over the fp32 CUDA-core peak;
    * ``conv_simt_efficiency``: dense fp32 convolutions with TF32 off (the ``conv_simt``
      sweep), nominal FLOPs over the fp32 CUDA-core peak;
    * ``matmul_align1_efficiency``: misaligned 16-bit GEMMs over the tensor-core peak;
    * ``gemv_fp32_efficiency``: fp32 one-row products (cuBLAS gemv), weight bytes over
      time, of DRAM bandwidth;
    * ``attention_fp32_efficiency``: fp32 attention FLOPs over the fp32 CUDA-core peak;
    * ``attention_efficiency`` / ``attention_mask_efficiency`` / ``attention_min_us``:
      16-bit attention (cuDNN) without and with an additive mask, and its floor;
    * ``conv_efficiency_scale``, ``conv_min_us``, ``conv_stem_us``, ``conv_stem_tflops``:
      the convolution classes (:func:`_fit_conv`);
    * ``depthwise_us``/``_tap_us``/``_efficiency`` (and ``_16bit``): cuDNN's depthwise
      kernels (:func:`_fit_depthwise`); ``weight_transform_us``: cuDNN's generic weight
      transform of grouped convs (:func:`_fit_weight_transform`); ``layer_norm_row_ns``
      (and ``_16bit``): ATen's layer norm per row (:func:`_fit_layer_norm`).
    """
    sw = sweeps["sweeps"]
    bw = spec.bandwidth
    out = {}
    tr = []
    for p in sw.get("conv2d", []):
        if p.get("layout") != "nchw":
            continue
        size = DTYPE_BYTES[p["dtype"]]
        x = p["N"] * p["Cin"] * p["HW"] ** 2 * size
        first = next((k for k in p["kernels"] if "nchwToNhwc" in k["name"]), None)
        if first and x >= 8e6:
            tr.append(2 * x / (first["us"] * 1e-6) / bw)
    out["layout_transform_efficiency"] = _median(tr)
    for suffix, dts in (("", ("float32",)), ("_16bit", HALF_DTYPES)):
        bn = []
        for p in sw.get("misc", []):
            if p.get("op") == "batch_norm_eval" and numel(p["shape"]) >= 1e6 and p["dtype"] in dts:
                main = max(p["kernels"], key=lambda k: k["us"])
                bn.append(2 * numel(p["shape"]) * DTYPE_BYTES[p["dtype"]] / (main["us"] * 1e-6) / bw)
        out["bn_eval_efficiency" + suffix] = _median(bn)
    dw = []
    for p in sw.get("conv2d", []):
        if (p.get("layout") == "nchw" and p["groups"] == p["Cin"] and p["dtype"] != "float16"
                and p["N"] > 1):
            ho = (p["HW"] + 2 * p["padding"] - p["k"]) // p["stride"] + 1
            flops = 2 * p["N"] * p["Cin"] * ho * ho * p["k"] ** 2
            dw.append(flops / (p["kernel_sum_us"] * 1e-6) / spec.peak_flops("fp32"))
    out["depthwise_aten_efficiency"] = _median(dw)
    # fp32 CUDA-core convolutions (cudnn.allow_tf32 off), dense, cuDNN's heuristics: all
    # nominal FLOPs over all time, so the big layers weigh as in a network
    simt = [p for p in sw.get("conv_simt", []) if p["groups"] == 1 and not p["cudnn_benchmark"]
            and "failed" not in p]
    if simt:
        flops = sum(2 * p["N"] * p["Cout"] * _out_hw(p) ** 2 * p["Cin"] * p["k"] ** 2 for p in simt)
        secs = sum(p["kernel_sum_us"] for p in simt) * 1e-6
        out["conv_simt_efficiency"] = flops / secs / spec.peak_flops("fp32")
    for name, odd in (("matmul_align1_efficiency", True), ("matmul_align2_efficiency", False)):
        al = []
        for p in sw.get("gemm", []):
            if p["dtype"] not in HALF_DTYPES or (p["aligned_n"] and p["aligned_k"]) or p["M"] < 512:
                continue
            if (p["N"] % 2 == 1 or p["K"] % 2 == 1) != odd:
                continue
            flops = 2 * p["M"] * p["N"] * p["K"]
            al.append(flops / (p["kernel_sum_us"] * 1e-6) / spec.peak_flops("fp16_tc"))
        out[name] = _median(al)
    # eager cuBLAS GEMMs: their floor (tiny aligned products) and, for skinny products
    # (M <= 16), the bandwidth at which they stream the weight
    tiny, skinny = [], []
    for p in sw.get("gemm", []):
        if not (p["aligned_n"] and p["aligned_k"]):
            continue
        size = DTYPE_BYTES[p["dtype"]]
        if p["M"] <= 128 and p["N"] * p["K"] <= 1024 * 1024 and p["dtype"] in HALF_DTYPES:
            tiny.append(p["kernel_sum_us"])
        wbytes = p["N"] * p["K"] * size
        if p["M"] <= 16 and wbytes >= 8e6 and p["dtype"] in HALF_DTYPES:   # fp32 runs gemv kernels
            skinny.append(wbytes / (p["kernel_sum_us"] * 1e-6) / bw)
    out["gemm_eager_min_us"] = _median(tiny)
    out["gemm_mem_efficiency"] = _median(skinny)
    # fp32 one-row products run cuBLAS gemv kernels: their weight-stream bandwidth
    gemv = [p["N"] * p["K"] * 4 / (p["kernel_sum_us"] * 1e-6) / bw for p in sw.get("gemm", [])
            if p["dtype"] == "float32" and p["M"] == 1 and p["N"] * p["K"] * 4 >= 8e6]
    out["gemv_fp32_efficiency"] = _median(gemv)
    at = []
    for p in sw.get("sdpa", []):
        if p["dtype"] == "float32" and p["mask"] == "none" and p["S"] >= 256:
            flops = 4 * p["B"] * p["H"] * p["S"] ** 2 * p["D"]
            at.append(flops / (p["kernel_sum_us"] * 1e-6) / spec.peak_flops("fp32"))
    out["attention_fp32_efficiency"] = _median(at)
    # 16-bit attention (cuDNN): FLOPs over the tensor-core peak, without and with an
    # additive mask; and its floor (the smallest problems)
    for name, masks in (("attention_efficiency", ("none", "causal")),
                        ("attention_mask_efficiency", ("float", "float_pad"))):
        eff = [4 * p["B"] * p["H"] * p["S"] ** 2 * p["D"] / (p["kernel_sum_us"] * 1e-6)
               / spec.peak_flops("fp16_tc") for p in sw.get("sdpa", [])
               if p["dtype"] in HALF_DTYPES and p["mask"] in masks and p["S"] >= 256]
        out[name] = _median(eff)
    small = [p["kernel_sum_us"] for p in sw.get("sdpa", [])
             if p["dtype"] in HALF_DTYPES and p["mask"] == "none" and p["B"] * p["H"] * p["S"] <= 2048]
    out["attention_min_us"] = min(small) if small else None
    out.update(_fit_conv(sw.get("conv2d", []), spec))
    if sw.get("cnn"):           # the CNN/ViT classes need the cnn and norms sweeps
        out.update(_fit_depthwise(sw.get("conv2d", []) + sw["cnn"], spec))
        out.update(_fit_weight_transform(sw["cnn"]))
    if sw.get("norms"):
        out.update(_fit_layer_norm(sw.get("misc", []) + sw["norms"], spec))
    return {k: round(v, 4) for k, v in out.items() if v is not None and math.isfinite(v)}



__all__ = ["conv_point_graph", "fit_dispatch"]
