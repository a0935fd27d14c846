"""The K-loop latency of mid-size 16-bit cuBLAS GEMMs, fitted on the dispatch sweep's products.

A 16-bit product of 128-2048 rows whose output tiles fit in one wave over the SMs runs each
tile's K loop once, with no second wave to hide it behind: the H100 sweep's 128 x 768 x 3072
linear takes 8.1 us where its tensor-core time is 1.7 us and its operands 3.4 us at the GEMM
stream rate (the roofline law: 4.7 us, -42%); 128 x 768 x 768 takes 4.5 us. The law
(:func:`gpusim.cost.laws.kloop_us`) adds ``gemm_kloop_us + K x gemm_kloop_ns`` to such a
product's compute time. Fitted here: the two figures minimising the squared log error of the
law's kernel time over the sweep's aligned 16-bit products with 33-4096 rows (``gemm`` points of
``validation/sweeps/<gpu>.json`` and ``gemm_mid`` of ``<gpu>-gemm-mid.json`` when there), on a
grid of 0.01 us x 0.01 ns; the law is evaluated with the figures off, then its compute term
raised where the law adds the K loop (a probe spec says where). Printed: the figures, the law's
error before and after on the products in its domain and on all the products, leave-one-shape-out
(each (M, N, K) predicted with the figures fitted on the others), every in-domain point.

    python3 -m validation.fit.fit_gemm_kloop [--gpu h100] [--write]

``--write`` puts the two figures, with the sweep's provenance, into the GPU's calibrated spec.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np

from gpusim.hw.spec import calibrated_name, load_spec
from validation.fit.fit_triton import emit_measured, spec_fit_parser

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SWEEPS = os.path.join(ROOT, "validation", "sweeps")
FIGURES = ("gemm_kloop_us", "gemm_kloop_ns")
T0_GRID = np.arange(0.0, 4.0001, 0.01)
C0_GRID = np.arange(0.0, 2.5001, 0.01)


def sweep_points(gpu: str) -> tuple[list[dict], list[str]]:
    """The sweep's aligned 16-bit products with 33-4096 rows, and the files read."""
    pts, files = [], []
    for name, key in ((f"{gpu}.json", "gemm"), (f"{gpu}-gemm-mid.json", "gemm_mid")):
        path = os.path.join(SWEEPS, name)
        if os.path.exists(path):
            with open(path) as f:
                pts += json.load(f)["sweeps"].get(key, [])
            files.append(os.path.relpath(path, ROOT))
    keep = [p for p in pts if p["dtype"] in ("bfloat16", "float16") and p["aligned_n"] and p["aligned_k"]
            and 32 < p["M"] <= 4096 and "failed" not in p]
    return keep, files


def point_graph(p: dict):
    import torch
    import torch.nn.functional as F
    from gpusim.capture.tracing import capture
    dt = getattr(torch, p["dtype"])
    x = torch.empty(p["M"], p["K"], device="meta", dtype=dt)
    if p["op"] == "linear":
        w, b = torch.empty(p["N"], p["K"], device="meta", dtype=dt), torch.empty(p["N"], device="meta", dtype=dt)
        return capture(lambda x, w, b: F.linear(x, w, b), (x, w, b))
    w = torch.empty(p["K"], p["N"], device="meta", dtype=dt)
    return capture(lambda x, w: torch.matmul(x, w), (x, w))


def law_terms(points: list[dict], spec) -> dict:
    """Per point, arrays of: measured µs, K, the main kernel's memory and compute time with the
    figures off, whether the law adds the K loop, and the other kernels' µs."""
    from gpusim.cost.kernel import estimate_kernel
    from gpusim.predict.pipeline import lower
    off = spec.replace(gemm_kloop_us=None, gemm_kloop_ns=None)
    probe = spec.replace(gemm_kloop_us=1.0, gemm_kloop_ns=1e-9)
    cols = {k: [] for k in ("meas", "k", "mem", "comp", "on", "rest")}
    for p in points:
        g = point_graph(p)
        ks = lower(g, "eager", spec=off).kernels
        e = estimate_kernel(g, ks[0], off)
        cols["meas"].append(p["kernel_sum_us"])
        cols["k"].append(p["K"])
        cols["mem"].append(e.mem_us)
        cols["comp"].append(e.compute_us)
        cols["on"].append(estimate_kernel(g, ks[0], probe).compute_us > e.compute_us + 0.5)
        cols["rest"].append(sum(estimate_kernel(g, k, off).us for k in ks[1:]))
    return {k: np.array(v, dtype=float) for k, v in cols.items()}


def law_us(t: dict, spec, t0, c0) -> np.ndarray:
    """The law's time of every point (broadcast over grids of ``t0`` µs and ``c0`` ns)."""
    comp = t["comp"] + t["on"] * (t0 + t["k"] * c0 * 1e-3)
    return np.maximum(spec.kernel_fixed_us + np.maximum(t["mem"], comp), spec.gemm_eager_min_us or 0.0) + t["rest"]


def fit(t: dict, spec, mask=None) -> tuple[float, float]:
    """``(gemm_kloop_us, gemm_kloop_ns)`` minimising the squared log error on the in-domain points."""
    m = t["on"].astype(bool) if mask is None else mask & t["on"].astype(bool)
    sub = {k: v[m] for k, v in t.items()}
    t0, c0 = T0_GRID[:, None, None], C0_GRID[None, :, None]
    err = (np.log(law_us(sub, spec, t0, c0) / sub["meas"]) ** 2).sum(axis=-1)
    i, j = np.unravel_index(np.argmin(err), err.shape)
    return float(T0_GRID[i]), float(C0_GRID[j])


def _stats(pred, meas) -> str:
    e = (pred / meas - 1) * 100
    return (f"|err| median {np.median(abs(e)):.1f}%, p90 {np.percentile(abs(e), 90):.1f}%, "
            f"signed median {np.median(e):+.1f}% ({len(e)} points)")


def report(points: list[dict], t: dict, spec) -> tuple[tuple[float, float], list[str]]:
    t0, c0 = fit(t, spec)
    on = t["on"].astype(bool)
    before, after = law_us(t, spec, 0.0, 0.0), law_us(t, spec, t0, c0)
    shapes = [(p["M"], p["N"], p["K"]) for p in points]
    loo = after.copy()
    for s in set(shapes):
        m = np.array([x == s for x in shapes])
        if (m & on).any():
            a, b = fit(t, spec, ~m)
            loo[m] = law_us({k: v[m] for k, v in t.items()}, spec, a, b)
    lines = [f"gemm_kloop_us = {t0:.2f}, gemm_kloop_ns = {c0:.2f}",
             f"in the law's domain, before: {_stats(before[on], t['meas'][on])}",
             f"in the law's domain, after:  {_stats(after[on], t['meas'][on])}",
             f"in the law's domain, leave one shape out: {_stats(loo[on], t['meas'][on])}",
             f"all 16-bit products, before: {_stats(before, t['meas'])}",
             f"all 16-bit products, after:  {_stats(after, t['meas'])}"]
    for p, b, a, x in zip(points, before, after, on):
        if x:
            lines.append(f"  {p['op']:<6} {p['M']:>5} x {p['N']:>5} x {p['K']:>5} {p['dtype']:<8} "
                         f"{p['kernel_sum_us']:7.2f} us: law {b:7.2f} -> {a:7.2f}")
    return (t0, c0), lines


def main(argv=None) -> int:
    a = spec_fit_parser("fit_gemm_kloop", gpu="h100").parse_args(argv)
    points, files = sweep_points(a.gpu)
    if not points:
        print(f"fit_gemm_kloop: no 16-bit GEMM points in validation/sweeps/{a.gpu}.json: run "
              f"python3 -m validation.measure.microbench on the GPU", file=sys.stderr)
        return 2
    spec = load_spec(calibrated_name(a.gpu))
    t = law_terms(points, spec)
    (t0, c0), lines = report(points, t, spec)
    print("\n".join(lines))
    with open(os.path.join(SWEEPS, f"{a.gpu}.json")) as f:
        env = json.load(f).get("env") or {}
    ref = (f"{env.get('gpu_name', a.gpu)}, {' + '.join(files)} (python3 -m validation.measure.microbench); "
           f"fitted by python3 -m validation.fit.fit_gemm_kloop --gpu {a.gpu} ({int(t['on'].sum())} aligned "
           f"16-bit products whose tiles fit one wave, 128-2048 rows)")
    emit_measured(spec.path, FIGURES, {"gemm_kloop_us": t0, "gemm_kloop_ns": c0}, ref, ".2f", a.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
