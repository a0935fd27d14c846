"""Fit the 1x1-convolution-as-GEMM class (:func:`gpusim.cost.laws.conv_gemm`) on microbenchmarks.

``python3 -m validation.fit.fit_conv_gemm [--gpu h200] [--write]``

A 1x1 convolution over NCHW that cuDNN hands to cuBLAS (at batch 1, on 1x1 maps, and past 8x8
maps: :func:`gpusim.lower.conv.conv_kernels`) runs cuBLAS's kernels (``nvjet_*``,
``cutlass::Kernel2``, ``sm80_xmma_gemm``, a split-K reduce), not cuDNN's implicit GEMM: at batch 1
they take 2-4 us where the conv law's floor ``conv_min_us`` (the implicit-GEMM kernels' batch-1
median) prices 6.8-7.0, and at 32 x 256 -> 64 x 56 x 56 they stream their bytes at ~0.6 of the
bandwidth where the conv law's roofline is 30% short. The law: ``conv_gemm_us`` + bytes at
``conv_gemm_efficiency`` of the datasheet bandwidth (or the tensor-core time if longer).

Points: every 1x1, ungrouped, NCHW convolution of the GPU's microbenchmark sweeps that gpusim
lowers to this class and whose measured kernels are all cuBLAS's (the bias add apart):
``validation/sweeps/<gpu>-cnn.json`` and ``<gpu>.json`` (:mod:`validation.measure.microbench`)
and ``validation/results/<gpu>/cnn_convs.jsonl`` (:mod:`validation.measure.cnn_convs`) where
present. Fit: least squares on the relative error (each point weighted by 1 / its time).
Reported: median / p90 absolute error of the conv law and of the fitted law on the points, and
leave-one-source-out (each file's points predicted by figures fitted on the others').
No held-out or published row is read.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys

import numpy as np

from gpusim.cost.kernel import estimate_kernel
from gpusim.hw.spec import calibrated_name, load_spec
from gpusim.hw.spec_io import figure_line
from gpusim.predict.pipeline import lower
from validation.fit.fit_dispatch import conv_point_graph
from validation.fit.fit_triton import emit_figures, spec_fit_parser

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIGURES = ("conv_gemm_us", "conv_gemm_efficiency")
#: measured kernel names of cuBLAS's GEMMs (and its split-K reduce)
CUBLAS = ("nvjet", "cutlass::Kernel2", "xmma_gemm", "gemv", "splitKreduce")


def sources(gpu: str) -> list[str]:
    """The sweep files of ``gpu`` that exist."""
    out = [os.path.join(ROOT, "validation", "sweeps", f"{gpu}{s}.json") for s in ("-cnn", "")]
    out.append(os.path.join(ROOT, "validation", "results", gpu, "cnn_convs.jsonl"))
    return [p for p in out if os.path.exists(p)]


def read_points(path: str) -> list[dict]:
    """The convolution points of one sweep file (JSON sweeps or a JSONL sweep)."""
    if path.endswith(".jsonl"):
        with open(path) as f:
            rows = [json.loads(line) for line in f if line.strip()]
        return [r for r in rows if r.get("op") in ("pw", "stem")]
    with open(path) as f:
        d = json.load(f)
    return [p for v in d["sweeps"].values() for p in v if p.get("op") == "conv2d"]


def points(gpu: str, spec) -> list[dict]:
    """``{"src", "p", "us", "bytes", "comp_us"}`` of every point of the class."""
    out = []
    for path in sources(gpu):
        for p in read_points(path):
            if p.get("failed") or p.get("k") != 1 or p.get("groups", 1) != 1 or p.get("layout", "nchw") != "nchw":
                continue
            ks = [k for k in p.get("kernels") or [] if "elementwise" not in k["name"]]
            if not ks or not all(any(c in k["name"] for c in CUBLAS) for k in ks):
                continue
            p = dict(p, groups=1, layout="nchw")
            g = conv_point_graph(p)
            low = [k for k in lower(g, "eager", spec=spec).kernels]
            if len(low) != 1 or low[0].variant != "conv_gemm":
                continue
            e = estimate_kernel(g, low[0], dataclasses.replace(spec, conv_gemm_efficiency=None))
            out.append({"src": os.path.relpath(path, ROOT), "p": p, "us": sum(k["us"] for k in ks),
                        "bytes": e.bytes, "conv_us": e.us, "comp_us": e.compute_us})
    return out


def fit(pts: list[dict], spec) -> tuple[float, float]:
    """``(conv_gemm_us, conv_gemm_efficiency)``: least squares of ``us = c0 + bytes x s`` in
    relative error."""
    t = np.array([p["us"] for p in pts])
    a = np.c_[np.ones(len(pts)), [p["bytes"] / spec.bandwidth * 1e6 for p in pts]]
    (c0, s), *_ = np.linalg.lstsq(a / t[:, None], np.ones(len(pts)), rcond=None)
    return float(c0), float(1.0 / s)


def law_us(p: dict, c0: float, eff: float, spec) -> float:
    """The fitted law's time of one point (:func:`gpusim.cost.laws.conv_gemm`'s formula)."""
    mem = c0 - spec.kernel_fixed_us + p["bytes"] / (eff * spec.bandwidth) * 1e6
    return max(spec.kernel_min_us, spec.kernel_fixed_us + max(mem, p["comp_us"]))


def abs_errs(pred, pts) -> str:
    e = np.abs([(a - p["us"]) / p["us"] * 100 for a, p in zip(pred, pts)])
    return f"{np.median(e):.1f}% / {np.percentile(e, 90):.1f}%"


def leave_out(pts: list[dict], group, refit, law, before: str, spec) -> list[tuple]:
    """Each group of ``pts`` (by ``group(p)``) left out in turn, where 4 or more points remain:
    ``(key, its points, refit(rest, spec), "its points before X, after Y")``, the errors of
    ``p[before]`` (the spec's price) and of ``law(p, *figures, spec)`` (the figures fitted on
    the rest). The one leave-out loop of this fit and :mod:`validation.fit.fit_conv_stem`."""
    out = []
    for key in sorted({group(p) for p in pts}):
        rest, own = [p for p in pts if group(p) != key], [p for p in pts if group(p) == key]
        if len(rest) >= 4:
            figs = refit(rest, spec)
            out.append((key, own, figs, f"its points before {abs_errs([p[before] for p in own], own)}, "
                                        f"after {abs_errs([law(p, *figs, spec) for p in own], own)}"))
    return out


def report(pts: list[dict], spec) -> tuple[tuple[float, float], list[str]]:
    c0, eff = fit(pts, spec)
    lines = [f"{len(pts)} points: conv_gemm_us = {c0:.3f} us, conv_gemm_efficiency = {eff:.4f}",
             f"conv law (before) median / p90 abs error: {abs_errs([p['conv_us'] for p in pts], pts)}",
             f"conv_gemm law (after): {abs_errs([law_us(p, c0, eff, spec) for p in pts], pts)}"]
    for src, own, (c, e), errs in leave_out(pts, lambda p: p["src"], fit, law_us, "conv_us", spec):
        lines.append(f"leave {src} out ({len(own)} points): figures {c:.3f} us / {e:.4f}; {errs}")
    return (c0, eff), lines


def main(argv=None) -> int:
    a = spec_fit_parser("fit_conv_gemm").parse_args(argv)
    spec = load_spec(calibrated_name(a.gpu))
    pts = points(a.gpu, spec)
    if len(pts) < 4:
        print(f"fit_conv_gemm: {len(pts)} cuBLAS-run 1x1 convolution points for {a.gpu}: run "
              f"python3 -m validation.measure.cnn_convs on the GPU", file=sys.stderr)
        return 2
    (c0, eff), lines = report(pts, spec)
    print("\n".join(lines))
    files = " + ".join(sorted({p["src"] for p in pts}))
    ref = (f"{spec.measured_on or a.gpu}, {files}; fitted by python3 -m validation.fit.fit_conv_gemm --gpu {a.gpu} "
           f"({len(pts)} cuBLAS-run 1x1 NCHW convolutions, batch 1-32, fp32/fp16/bf16; {lines[1]}; {lines[2]})")
    figs = [figure_line("conv_gemm_us", c0, "measured", ref, ".3f"),
            figure_line("conv_gemm_efficiency", eff, "measured", ref, ".4f")]
    emit_figures(spec.path, figs, FIGURES, a.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
