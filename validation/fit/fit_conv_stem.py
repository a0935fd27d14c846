"""Refit the stem-convolution class (:func:`gpusim.cost.laws.conv_stem`: ``conv_stem_us`` + FLOPs
at ``conv_stem_tflops``) on every stem point of a GPU's sweeps.

``python3 -m validation.fit.fit_conv_stem [--gpu h200] [--write]``

Why: :func:`validation.fit.fit_dispatch._fit_conv` fits the class by ordinary least squares on
the dispatch sweep's two stem shapes (7x7 to 64 channels and 16x16 patchify to 768, batch 1 and
32), where the batch-32 points set the line and its intercept comes out at 34 us: a 3x3 stride-2
stem to 24 channels at batch 1 (ShuffleNet's, EfficientNetV2's), which runs 6 us, is priced at
36. The cnn_convs sweep (:mod:`validation.measure.cnn_convs`) times stems 3x3/2, 4x4/4 and 7x7/2
to 16-96 channels on 160-256 px at batch 1, 8 and 32 in three dtypes; this fit uses them with
the dispatch sweeps' stems, by least squares on the relative error (each point weighted by 1 /
its time), on the main kernel's time (cuDNN's layout transforms and padding kernels are priced
apart). Reported: median / p90 error before and after, and each kernel size left out.
No held-out or published row is read.
"""

from __future__ import annotations

import sys

import numpy as np

from gpusim.cost.kernel import estimate_kernel
from gpusim.hw.spec import calibrated_name, load_spec
from gpusim.hw.spec_io import figure_line
from gpusim.predict.pipeline import lower
from validation.fit.fit_conv_gemm import abs_errs, leave_out, read_points, sources
from validation.fit.fit_dispatch import _main_us, conv_point_graph
from validation.fit.fit_triton import emit_figures, spec_fit_parser

FIGURES = ("conv_stem_us", "conv_stem_tflops")


def points(gpu: str, spec) -> list[dict]:
    """``{"src", "p", "us", "flops", "before"}`` of every stem point (fewer than 8 input channels)."""
    import os
    out = []
    for path in sources(gpu):
        for p in read_points(path):
            if p.get("failed") or not p.get("kernels") or p["Cin"] >= 8 or p.get("groups", 1) != 1:
                continue
            p = dict(p, groups=1, layout=p.get("layout", "nchw"))
            g = conv_point_graph(p)
            main = [k for k in lower(g, "eager", spec=spec).kernels if k.variant == "conv_stem"]
            if len(main) != 1:
                continue
            e = estimate_kernel(g, main[0], spec)
            out.append({"src": os.path.basename(path), "p": p, "us": _main_us(p), "flops": e.flops, "before": e.us})
    return out


def fit(pts: list[dict], spec) -> tuple[float, float]:
    """``(conv_stem_us, conv_stem_tflops)``: ``us - kernel_fixed_us = c0 + flops / rate`` in relative
    least squares."""
    t = np.array([p["us"] for p in pts])
    a = np.c_[np.ones(len(pts)), [p["flops"] for p in pts]]
    (c0, s), *_ = np.linalg.lstsq(a / t[:, None], (t - spec.kernel_fixed_us) / t, rcond=None)
    return max(float(c0), 0.0), float(1e-6 / s)


def law_us(p: dict, c0: float, tflops: float, spec) -> float:
    return max(spec.conv_min_us or spec.kernel_min_us, spec.kernel_fixed_us + c0 + p["flops"] / (tflops * 1e12) * 1e6)


def report(pts: list[dict], spec) -> tuple[tuple[float, float], list[str]]:
    c0, r = fit(pts, spec)
    lines = [f"{len(pts)} stem points: conv_stem_us = {c0:.3f} us, conv_stem_tflops = {r:.2f}",
             f"before (the spec's figures) median / p90 abs error: {abs_errs([p['before'] for p in pts], pts)}",
             f"after: {abs_errs([law_us(p, c0, r, spec) for p in pts], pts)}"]
    for k, own, (c, rr), errs in leave_out(pts, lambda p: p["p"]["k"], fit, law_us, "before", spec):
        lines.append(f"leave {k}x{k} out ({len(own)} points): {c:.3f} us / {rr:.2f} TFLOP/s; {errs}")
    return (c0, r), lines


def main(argv=None) -> int:
    a = spec_fit_parser("fit_conv_stem").parse_args(argv)
    spec = load_spec(calibrated_name(a.gpu))
    pts = points(a.gpu, spec)
    if len(pts) < 4:
        print(f"fit_conv_stem: {len(pts)} stem points for {a.gpu}", file=sys.stderr)
        return 2
    (c0, r), lines = report(pts, spec)
    print("\n".join(lines))
    files = " + ".join(sorted({p["src"] for p in pts}))
    ref = (f"{spec.measured_on or a.gpu}, {files}; fitted by python3 -m validation.fit.fit_conv_stem --gpu {a.gpu} "
           f"(relative least squares on the main kernel; {lines[0]}; {lines[1]}; {lines[2]})")
    emit_figures(spec.path, [figure_line("conv_stem_us", c0, "measured", ref, ".3f"),
                             figure_line("conv_stem_tflops", r, "measured", ref, ".3f")],
                 FIGURES, a.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
