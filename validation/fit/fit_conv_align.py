"""Fit the law of 16-bit 1x1 convolutions that cuBLAS runs with its misaligned CUTLASS kernels
(``conv_align{2,1}_efficiency``, ``conv_align{2,1}_us``, ``conv_align{2,1}_k_us``; :func:`gpusim.cost.laws.conv_align`).

``python3 -m validation.fit.fit_conv_align [--gpu h200] [--write]``

Reads the GPU's conv dispatch sweeps (``validation/results/<gpu>/cnn_dispatch.jsonl`` and
``cnn_dispatch_mis.jsonl``: :mod:`validation.measure.cnn_dispatch`, :mod:`validation.measure.cnn_dispatch_mis`)
and keeps their 16-bit 1x1 stride-1 points on maps past 8x8 at batch 2 and more (batch 1 keeps the conv
class, ``gpusim.lower.conv.pointwise_gemm_variant``) whose one kernel is an ``align2`` or ``align1`` CUTLASS GEMM. Per class, ``t = us + max(FLOPs / (peak x efficiency), Cin x k_us)`` is fitted by grid
search on the median relative error; printed: the figures, the error against the misaligned GEMM law of
a linear that priced them before (``matmul_align{2,1}_efficiency``, floor ``conv_min_us``), and each map
size left out. No model record is read.
"""

from __future__ import annotations

import os
import statistics
import sys

import numpy as np

from gpusim.hw.spec import calibrated_name, load_spec
from validation.fit.fit_triton import RESULTS, emit_fitted, left_out, read_sweep, spec_fit_parser

SWEEPS = ("cnn_dispatch.jsonl", "cnn_dispatch_mis.jsonl")
CLASSES = ("align2", "align1")
EFFS = np.round(np.arange(0.04, 0.401, 0.005), 3)
FIXED = np.round(np.arange(0.0, 10.01, 0.25), 2)
K_US = np.round(np.arange(0.0, 0.0801, 0.0005), 4)


def points(gpu: str) -> tuple[list[dict], list[str]]:
    pts, used = [], []
    for name in SWEEPS:
        path = os.path.join(RESULTS, gpu, name)
        if not os.path.exists(path):
            continue
        used.append(path)
        for r in read_sweep(path, "cnn_dispatch")[1]:
            if (r.get("k") != 1 or r.get("stride") != 1 or r.get("dtype") == "float32" or r["HW"] ** 2 <= 64
                    or len(r["kernels"]) != 1 or r["N"] == 1):
                continue
            cls = next((c for c in CLASSES if c in r["kernels"][0]["name"]), None)
            if cls:
                pts.append({"cls": cls, "flops": 2.0 * r["N"] * r["HW"] ** 2 * r["Cin"] * r["Cout"],
                            "cin": r["Cin"], "hw": r["HW"], "us": r["kernels"][0]["us"], "p": r})
    return pts, used


def law_us(p: dict, peak: float, eff: float, fixed: float, k_us: float) -> float:
    return fixed + max(p["flops"] / (peak * eff) * 1e6, p["cin"] * k_us)


def err(pts: list[dict], peak: float, figs) -> float:
    return float(statistics.median(abs(law_us(p, peak, *figs) / p["us"] - 1) for p in pts)) * 100


def fit(pts: list[dict], peak: float) -> tuple[float, float, float]:
    flops = np.array([p["flops"] for p in pts])
    cin = np.array([p["cin"] for p in pts])
    us = np.array([p["us"] for p in pts])
    best = None
    for e in EFFS:
        comp = flops / (peak * e) * 1e6
        for k in K_US:
            body = np.maximum(comp, cin * k)
            for c in FIXED:
                m = float(np.median(np.abs((c + body) / us - 1)))
                if best is None or m < best[0]:
                    best = (m, float(e), float(c), float(k))
    return best[1], best[2], best[3]


def main(argv=None) -> int:
    a = spec_fit_parser("fit_conv_align").parse_args(argv)
    pts, used = points(a.gpu)
    if not pts:
        print(f"fit_conv_align: no align-kernel 1x1 point in {a.gpu}'s cnn_dispatch sweeps: run python3 -m "
              f"validation.measure.cnn_dispatch_mis on the GPU", file=sys.stderr)
        return 2
    spec = load_spec(calibrated_name(a.gpu))
    peak = spec.peak_flops("bf16_tc")
    lines, summary = [], []
    for cls in CLASSES:
        sub = [p for p in pts if p["cls"] == cls]
        if len(sub) < 5:
            continue
        figs = fit(sub, peak)
        old_eff = getattr(spec, f"matmul_{cls}_efficiency") or 1.0
        before = statistics.median(abs(max(spec.conv_min_us or spec.kernel_min_us,
                                           spec.kernel_fixed_us + p["flops"] / (peak * old_eff) * 1e6) / p["us"] - 1)
                                   for p in sub) * 100
        summary.append(f"{cls}: {len(sub)} points, efficiency {figs[0]:.3f}, fixed {figs[1]:.2f} us, "
                       f"{figs[2]:.4f} us per input channel; median error {before:.1f}% (the linear's law) -> "
                       f"{err(sub, peak, figs):.1f}%")
        print(summary[-1])
        for hw, own, f2 in left_out(sub, "hw", lambda rest: fit(rest, peak)):
            print(f"  leave {hw}x{hw} maps out ({len(own)} points): figures "
                  f"{', '.join(f'{x:g}' for x in f2)}; their error {err(own, peak, f2):.1f}%")
        lines += [(f"conv_{cls}_efficiency", figs[0], ".3f"), (f"conv_{cls}_us", figs[1], ".2f"),
                  (f"conv_{cls}_k_us", figs[2], ".4f")]
    ref = (f"{spec.name} sweeps {', '.join(os.path.relpath(u) for u in used)} (python3 -m validation.measure.cnn_dispatch, "
           f"cnn_dispatch_mis; 2026-11-29); fitted by python3 -m validation.fit.fit_conv_align --gpu {a.gpu} "
           f"({'; '.join(summary)})")
    emit_fitted(spec.path, lines, ref, a.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
