"""The weight-streaming law of skinny 16-bit GEMMs, fitted on the skinny sweep
(``validation.measure.skinny_gemm``): ``t = kernel_fixed_us + gemm_stream_us + bytes /
(gemm_stream_efficiency x bandwidth)`` for cuBLAS's main kernel, at least ``gemm_stream_k_us + K x
gemm_stream_k_ns`` where cuBLAS does not split K (its split-K reduce is a kernel of
its own, priced by :func:`gpusim.lower.dispatch.library_epilogue`'s class).

Fitted by least squares on the aligned, unbiased products of at most 32 rows whose weight is at
least 8 MB; the K-loop floor on the unsplit ones under 8 MB (where each output tile's serial
stream of its K columns, not the DRAM, sets the time). Printed: the fit,
its error on the fitted points, leave-one-shape-out (each weight shape's points predicted by the
law fitted without them), and the points not fitted (128 rows, biased products, small weights).

    python3 -m validation.fit.fit_skinny [--gpu h200] [--write]

``--write`` puts the two figures, with the sweep's provenance, into the GPU's calibrated spec.
"""

from __future__ import annotations

import os
import statistics
import sys

import numpy as np

from gpusim.cost.laws import STREAM_ROWS
from gpusim.hw.spec import calibrated_name, load_spec
from gpusim.hw.spec_io import figure_line
from validation.fit.fit_triton import emit_figures, read_sweep, spec_fit_args

FIGURES = ("gemm_stream_us", "gemm_stream_efficiency", "gemm_stream_k_us", "gemm_stream_k_ns")
MIN_WEIGHT = 8e6
#: the rows the law is fitted on and applies to: the predictor's own bound, one definition
MAX_ROWS = STREAM_ROWS


def read(path: str) -> tuple[dict, list[dict]]:
    """The sweep's environment line and its measured cases (:func:`fit_triton.read_sweep`)."""
    return read_sweep(path, "skinny_gemm", need=())


def point(r: dict) -> dict | None:
    """The case's main kernel time and bytes; None for a misaligned product (cuBLAS's gemv and
    align classes, not this law's)."""
    if r["N"] % 8 or r["K"] % 8:
        return None
    main = [k["us"] for k in r["kernels"] if "splitkreduce" not in k["name"].lower()]
    nbytes = 2 * (r["M"] * r["K"] + r["N"] * r["K"] + r["M"] * r["N"] + (r["N"] if r["bias"] else 0))
    split = any("splitkreduce" in k["name"].lower() for k in r["kernels"])
    return {"shape": (r["N"], r["K"]), "M": r["M"], "bias": r["bias"], "weight": r["weight_bytes"],
            "bytes": nbytes, "us": sum(main), "K": r["K"], "split": split}


def fitted(p: dict) -> bool:
    return p["M"] <= MAX_ROWS and not p["bias"] and p["weight"] >= MIN_WEIGHT


def k_points(points: list[dict]) -> list[dict]:
    """The K-loop floor's points: unsplit products of at most 32 rows whose weight is under 8 MB."""
    return [p for p in points if p["M"] <= MAX_ROWS and not p["bias"] and not p["split"] and p["weight"] < MIN_WEIGHT]


def fit_k(points: list[dict]) -> tuple[float, float]:
    """``(µs, ns per K)`` of ``us = a + K x c``, least squares."""
    k = np.array([p["K"] for p in points], dtype=float)
    y = np.array([p["us"] for p in points], dtype=float)
    c, a = np.polyfit(k, y, 1)
    return float(a), float(c * 1e3)


def fit(points: list[dict]) -> tuple[float, float]:
    """``(intercept µs, rate bytes/µs)`` of ``us = intercept + bytes / rate``."""
    x = np.array([p["bytes"] for p in points], dtype=float)
    y = np.array([p["us"] for p in points], dtype=float)
    slope, intercept = np.polyfit(x, y, 1)
    return float(intercept), float(1.0 / slope)


def predict(p: dict, intercept: float, rate: float, floor: float, kf=None) -> float:
    t = intercept + p["bytes"] / rate
    if kf is not None and not p["split"]:
        t = max(t, kf[0] + p["K"] * kf[1] * 1e-3)
    return max(t, floor)


def err(ps, intercept, rate, floor, kf=None) -> list[float]:
    return [abs(predict(p, intercept, rate, floor, kf) / p["us"] - 1) * 100 for p in ps]


def report(points: list[dict], spec) -> tuple[float, float, tuple, list[str]]:
    fit_on = [p for p in points if fitted(p)]
    intercept, rate = fit(fit_on)
    kf = fit_k(k_points(points))
    floor = spec.gemm_eager_min_us or 0.0
    lines = [f"fit on {len(fit_on)} points: {intercept:.2f} us + bytes at {rate / 1e3:.0f} GB/s "
             f"({rate * 1e6 / spec.bandwidth:.3f} of {spec.bandwidth / 1e9:.0f} GB/s)",
             f"  error on the fitted points: median {statistics.median(err(fit_on, intercept, rate, floor)):.1f}%"]
    loo = []
    for shape in sorted({p["shape"] for p in fit_on}):
        rest = [p for p in fit_on if p["shape"] != shape]
        i2, r2 = fit(rest)
        loo += err([p for p in fit_on if p["shape"] == shape], i2, r2, floor)
    lines.append(f"  leave one weight shape out: median {statistics.median(loo):.1f}%, max {max(loo):.1f}%")
    small = k_points(points)
    lines.append(f"K-loop floor of unsplit products, fit on {len(small)} points under 8 MB: {kf[0]:.2f} us + K x "
                 f"{kf[1]:.3f} ns; their error {statistics.median(err(small, intercept, rate, floor, kf)):.1f}% "
                 f"median (stream law and cuBLAS floor alone: {statistics.median(err(small, intercept, rate, floor)):.1f}%)")
    kloo = []
    for k in sorted({p["K"] for p in small}):
        kloo += err([p for p in small if p["K"] == k], intercept, rate, floor, fit_k([p for p in small if p["K"] != k]))
    lines.append(f"  leave one K out: median {statistics.median(kloo):.1f}%, max {max(kloo):.1f}%")
    old = spec.gemm_mem_efficiency
    for name, sel in (("128 rows", lambda p: p["M"] == 128 and p["weight"] >= MIN_WEIGHT),
                      ("biased", lambda p: p["bias"]),
                      ("weights under 8 MB", lambda p: p["weight"] < MIN_WEIGHT and p["M"] <= MAX_ROWS)):
        ps = [p for p in points if sel(p)]
        if ps:
            e = err(ps, intercept, rate, floor, kf)
            lines.append(f"  not fitted, {name} ({len(ps)}): median {statistics.median(e):.1f}%, max {max(e):.1f}%")
    if old:
        e_old = [abs(max(spec.kernel_fixed_us + p["bytes"] / (old * spec.bandwidth) * 1e6, floor) / p["us"] - 1) * 100
                 for p in fit_on]
        lines.append(f"  the dispatch sweep's gemm_mem_efficiency {old} (L2 flushed) on the same points: "
                     f"median {statistics.median(e_old):.1f}%")
    return intercept, rate, kf, lines


def main(argv=None) -> int:
    a, path = spec_fit_args("fit_skinny", "skinny_gemm", argv)
    if path is None:
        return 2
    env, rows = read(path)
    points = [p for p in map(point, rows) if p is not None]
    name = calibrated_name(a.gpu)
    spec = load_spec(name)
    intercept, rate, kf, lines = report(points, spec)
    print("\n".join(lines))
    stream_us = max(0.0, intercept - spec.kernel_fixed_us)
    eff = rate * 1e6 / spec.bandwidth
    ref = (f"{env.get('gpu', a.gpu)}, {(env.get('utc') or '')[:10]}, python3 -m validation.measure.skinny_gemm "
           f"-> {os.path.relpath(path)}; fitted by python3 -m validation.fit.fit_skinny --gpu {a.gpu} "
           f"({sum(fitted(p) for p in points)} products, <= {MAX_ROWS} rows, weights >= 8 MB; "
           f"intercept {intercept:.2f} us less kernel_fixed_us)")
    ref_k = ref.split("(")[0] + f"(the K-loop floor: {len(k_points(points))} unsplit products, <= {MAX_ROWS} rows, weights under 8 MB)"
    figs = [figure_line("gemm_stream_us", stream_us, "measured", ref, ".3f"),
            figure_line("gemm_stream_efficiency", eff, "measured", ref, ".4f"),
            figure_line("gemm_stream_k_us", kf[0], "measured", ref_k, ".3f"),
            figure_line("gemm_stream_k_ns", kf[1], "measured", ref_k, ".4f")]
    emit_figures(spec.path, figs, FIGURES, a.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
