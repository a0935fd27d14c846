"""Fit the launch-configuration law of ATen's reduction kernel (``aten_reduce_*``; :mod:`gpusim.cost.aten_reduce`).

``python3 -m validation.fit.fit_aten_reduce [--gpu h200] [--write]``

Reads the GPU's aten_reduce sweep (``validation/results/<gpu>/aten_reduce.jsonl``:
:mod:`validation.measure.aten_reduce`): each point's call is captured on fake tensors as it ran, lowered for eager,
and its ``aten_reduce`` kernel's launch configuration (:func:`gpusim.cost.aten_reduce.node_config`) and roofline
bytes (DRAM and L2-credited: a warm point's input was written by the kernel before) are taken; the time fitted is
the point's ``reduce_kernel``. The six figures are fitted by least squares on the log of predicted over measured
time. Printed: gpusim's error on those kernels before (without the figures) and after, by family, each family left out
of the fit in turn, and the cnn_convs sweep's reductions (``validation/results/<gpu>/cnn_convs.jsonl``:
squeeze-excite means and ConvNeXt-V2 norms, measured a day earlier), which the fit never reads. No model record is
read.
"""

from __future__ import annotations

import os
import sys
from types import SimpleNamespace

import numpy as np
from scipy.optimize import least_squares

from gpusim.cost.aten_reduce import node_config, reduce_time_us
from gpusim.cost.kernel import estimate_kernel
from gpusim.cost.roofline import CostOptions, estimate_group
from gpusim.hw.schema import ATEN_REDUCE_FIGURES
from gpusim.hw.spec import calibrated_name, load_spec
from validation.fit.fit_triton import emit_fitted, read_sweep, spec_fit_args

#: the earlier sweep whose reductions check the fit (never fitted)
CHECK = "cnn_convs.jsonl"
#: starting point and bounds of the figures, in ATEN_REDUCE_FIGURES' order
START = (1.0, 0.85, 500.0, 250.0, 1.0, 3.0)
LOW, HIGH = (0.0, 0.2, 50.0, 20.0, 0.0, 0.0), (10.0, 1.0, 2000.0, 2000.0, 10.0, 20.0)


def sweep_call(p: dict):
    """``(fn, x)`` of a point: an aten_reduce point's reduction (after ``x * 1.0`` when warm), or a cnn_convs
    ``reduce`` point's (``mean`` over an NCHW map, ``grn``: the norm over a channels-last one)."""
    import torch
    from validation.measure.aten_reduce import reducer
    dt = getattr(torch, p["dtype"])
    if p.get("kind") == "cnn_convs":
        if p["red"] == "mean":
            return (lambda x: x.mean((2, 3), keepdim=True)), torch.randn(p["N"], p["C"], p["HW"], p["HW"], dtype=dt)
        return (lambda x: torch.norm(x, p=2, dim=(1, 2), keepdim=True)), torch.randn(p["N"], p["HW"], p["HW"], p["C"],
                                                                                       dtype=dt)
    red = reducer(p)
    return ((lambda x: red(x * 1.0)) if p["warm"] else red), torch.randn(*p["shape"], dtype=dt)


def points(path: str, spec, family=None) -> list[dict]:
    """Each point with its reduce kernel's measured time, launch configuration, roofline bytes and time before (the
    spec without the figures: the roofline's reduction stream)."""
    import torch
    from gpusim.capture.tracing import capture
    from gpusim.predict.pipeline import lower
    kind = "cnn_convs" if os.path.basename(path) == CHECK else "aten_reduce"
    stream = spec.replace(**dict.fromkeys(ATEN_REDUCE_FIGURES))     # the spec without the law's figures
    out = []
    for r in read_sweep(path, kind)[1]:
        if kind == "cnn_convs" and r["op"] != "reduce":
            continue
        meas = [k["us"] for k in r["kernels"] if "reduce_kernel" in k["name"]]
        fn, x = sweep_call(r)
        g = capture(type("Call", (torch.nn.Module,), {"forward": lambda self, x: fn(x)})(), (x,))
        ks = [k for k in lower(g, "eager", spec=spec).kernels if k.variant == "aten_reduce"]
        if len(meas) != 1 or len(ks) != 1:
            continue
        est = estimate_group(g, ks[0].ops, spec, CostOptions(aten=True))
        out.append({"family": family or r["op"], "us": meas[0], "cfg": node_config(g, ks[0].ops[0], spec),
                    "dram": est.bytes - est.bytes_read_l2, "l2": est.bytes_read_l2,
                    "before": estimate_kernel(g, ks[0], stream).us, "p": r})
    return out


def law_spec(spec, figs) -> SimpleNamespace:
    """What :func:`gpusim.cost.aten_reduce.reduce_time_us` reads, with figures ``figs``."""
    return SimpleNamespace(bandwidth=spec.bandwidth, l2_bandwidth=spec.l2_bandwidth, **dict(zip(ATEN_REDUCE_FIGURES, figs)))


def predicted(pts: list[dict], spec, figs) -> np.ndarray:
    s = law_spec(spec, figs)
    return np.array([max(reduce_time_us(p["cfg"], p["dram"], p["l2"], s), spec.kernel_min_us) for p in pts])


def fit(pts: list[dict], spec) -> tuple:
    """The figures of the least squared log error."""
    us = np.array([p["us"] for p in pts])
    r = least_squares(lambda f: np.log(predicted(pts, spec, f) / us), START, bounds=(LOW, HIGH))
    return tuple(float(v) for v in r.x)


def errors(pts: list[dict], pred) -> str:
    e = np.asarray(pred) / np.array([p["us"] for p in pts]) - 1
    return f"{np.median(np.abs(e)) * 100:.1f}% / p90 {np.percentile(np.abs(e), 90) * 100:.1f}% (signed {np.median(e) * 100:+.1f}%)"


def main(argv=None) -> int:
    a, path = spec_fit_args("fit_aten_reduce", "aten_reduce", argv)
    if path is None:
        return 2
    spec = load_spec(calibrated_name(a.gpu))
    pts = points(path, spec)
    check_path = os.path.join(os.path.dirname(path), CHECK)
    check = points(check_path, spec, "cnn_convs") if os.path.exists(check_path) else []
    figs = fit(pts, spec)
    summary = (f"{len(pts)} reduce kernels: before {errors(pts, [p['before'] for p in pts])}, "
               f"after {errors(pts, predicted(pts, spec, figs))}")
    print(summary)
    print("figures:", ", ".join(f"{k} {v:.3f}" for k, v in zip(ATEN_REDUCE_FIGURES, figs)))
    for fam in sorted({p["family"] for p in pts}):
        own = [p for p in pts if p["family"] == fam]
        rest = fit([p for p in pts if p["family"] != fam], spec)
        print(f"  {fam} ({len(own)}): before {errors(own, [p['before'] for p in own])}; "
              f"after {errors(own, predicted(own, spec, figs))}; left out of the fit {errors(own, predicted(own, spec, rest))}")
    if check:
        print(f"cnn_convs reductions ({len(check)}, not fitted): before {errors(check, [p['before'] for p in check])}; "
              f"after {errors(check, predicted(check, spec, figs))}")
    ref = (f"{spec.name} sweep {os.path.relpath(path)} (python3 -m validation.measure.aten_reduce, 2026-11-29); fitted "
           f"by python3 -m validation.fit.fit_aten_reduce --gpu {a.gpu} ({summary})")
    fmts = (".3f", ".4f", ".1f", ".1f", ".3f", ".3f")
    emit_fitted(spec.path, list(zip(ATEN_REDUCE_FIGURES, figs, fmts)), ref, a.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
