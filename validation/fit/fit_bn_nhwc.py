"""Fit channels-last training batch norm's per-kernel figures (:func:`gpusim.cost.classes.bn_nhwc_us`) on one
GPU's ``bn_train`` sweep.

``python3 -m validation.fit.fit_bn_nhwc [--gpu h100] [--sweep FILE]``

Reads ``validation/results/<gpu>/bn_train.json`` (``validation/measure/microbench_cnn.py``, sweep
``bn_train``: ``F.batch_norm`` in training, forward and backward, per-kernel profiler times, L2
flushed), takes its channels-last points, predicts each with gpusim (the op captured on meta
tensors, its input marked non-contiguous as a CUDA trace records it, lowered by
:func:`gpusim.lower.dispatch_train.batch_norm_nhwc_kernels`) and fits, per kernel class
(cuDNN's ``batchnorm_fwtr/bwtr_nhwc_semiPersist``; ATen's channels-last statistics, transform,
backward reduce and backward elementwise kernels), the time past ``kernel_fixed_us`` as
``us + bytes / (efficiency x bandwidth) + iter_us x rows a thread walks``: the efficiency on a
grid (at most 1), the other two by non-negative least squares on relative errors. Prints the
figures as spec lines with their provenance and the per-class median / p90 error before
(the roofline) and after."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys

import numpy as np
from scipy.optimize import nnls

from gpusim.cost.classes import BN_NHWC_CLASSES, bn_nhwc_iters
from gpusim.graph.opgraph import main_shape, numel
from gpusim.hw.schema import BN_NHWC_FIGURES
from gpusim.hw.spec import calibrated_name, load_spec
from gpusim.hw.spec_io import figure_line
from validation.records.stats import _stats, ape

RESULTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "results")

#: the profiler's kernel name of each class
KERNEL_NAMES = {"bn_nhwc_fw": "batchnorm_fwtr_nhwc", "bn_nhwc_bw": "batchnorm_bwtr_nhwc",
                "bn_nhwc_stats": "batch_norm_collect_statistics_channels_last",
                "bn_nhwc_transform": "batch_norm_transform_input_channels_last",
                "bn_nhwc_reduce": "batch_norm_backward_reduce_channels_last",
                "bn_nhwc_elemt": "batch_norm_backward_elemt_channels_last"}

EFFS = [round(0.05 + 0.01 * i, 2) for i in range(96)]


def point_lowering(p: dict, spec):
    """gpusim's kernels of one sweep point's training batch norm (forward and backward) with
    their estimates: [(kernel, estimate)]."""
    import torch
    import torch.nn.functional as F

    from gpusim.capture.tracing import capture
    from gpusim.cost.kernel import estimate_kernel
    from gpusim.predict.pipeline import lower
    dt, c = getattr(torch, p["dtype"]), p["shape"][1]
    x = torch.empty(*p["shape"], device="meta", dtype=dt).contiguous(memory_format=torch.channels_last)
    gy = torch.empty_like(x)
    w, b = (torch.empty(c, device="meta").requires_grad_(True) for _ in range(2))
    rm, rv = torch.empty(c, device="meta"), torch.empty(c, device="meta")

    def step(x, w, b, rm, rv, gy):
        F.batch_norm(x, rm, rv, w, b, True, 0.1, 1e-5).backward(gy)
    g = capture(step, (x.requires_grad_(True), w, b, rm, rv, gy))
    for _, a in g.g.nodes(data=True):
        if a.get("kind") == "norm":
            a["input_contiguous"] = False
    return [(k, estimate_kernel(g, k, spec)) for k in lower(g, "eager", spec=spec).kernels
            if k.variant in BN_NHWC_CLASSES]


def points(doc: dict, spec) -> dict:
    """Per class: [(bytes, rows a thread walks, measured us, predicted us with ``spec``)]."""
    out: dict = {}
    for p in doc["sweeps"]["bn_train"]:
        if p["layout"] != "channels_last":
            continue
        for k, est in point_lowering(p, spec):
            meas = [m["us"] for m in p["kernels"] if KERNEL_NAMES[k.variant] in m["name"]]
            if not meas:
                continue
            c = p["shape"][1]
            it = bn_nhwc_iters(numel(main_shape(p["shape"])) // c, c, k.variant)
            nbytes = k.bytes if k.role == "aux" else est.bytes
            out.setdefault(k.variant, []).append((nbytes, it, meas[0], est.us))
    return out


def fit_class(rows: list, spec, iters: bool) -> dict:
    """(us, efficiency, iter_us) of one class with the least mean relative error."""
    y = np.array([r[2] for r in rows]) - spec.kernel_fixed_us
    w = 1.0 / np.array([r[2] for r in rows])
    best = None
    for eff in EFFS:
        rest = y - np.array([r[0] for r in rows]) / (eff * spec.bandwidth) * 1e6
        A = np.array([[1.0, r[1]] if iters else [1.0] for r in rows])
        sol, _ = nnls(A * w[:, None], rest * w)
        err = float(np.mean(np.abs((A @ sol - rest) * w)))
        if best is None or err < best[0]:
            best = (err, eff, sol)
    _, eff, sol = best
    figs = {"us": round(float(sol[0]), 3), "efficiency": eff}
    if iters:
        figs["iter_us"] = round(float(sol[1]), 4)
    return figs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m validation.fit.fit_bn_nhwc")
    ap.add_argument("--gpu", default="h100")
    ap.add_argument("--sweep", default=None, help="default validation/results/<gpu>/bn_train.json")
    a = ap.parse_args(argv)
    path = a.sweep or os.path.join(RESULTS, a.gpu, "bn_train.json")
    if not os.path.exists(path):
        print(f"fit_bn_nhwc: no sweep {path}: run validation/measure/microbench_cnn.py's bn_train sweep "
              "on the GPU", file=sys.stderr)
        return 2
    with open(path) as f:
        doc = json.load(f)
    spec = load_spec(calibrated_name(a.gpu))
    spec = dataclasses.replace(spec, **{k: None for k in BN_NHWC_FIGURES})   # the roofline before
    rows = points(doc, spec)
    figs = {}
    for cls, rs in sorted(rows.items()):
        c = cls.removeprefix("bn_nhwc_")
        for k, v in fit_class(rs, spec, cls not in ("bn_nhwc_fw", "bn_nhwc_bw")).items():
            figs[f"bn_nhwc_{c}_{k}"] = v
    env = doc.get("env") or {}
    ref = (f"{env.get('gpu_name', a.gpu)}, {(env.get('utc') or '')[:10]}, validation/measure/microbench_cnn.py "
           f"sweep bn_train -> {os.path.relpath(path)}; fitted by python3 -m validation.fit.fit_bn_nhwc "
           f"--gpu {a.gpu} (gpusim.cost.classes.bn_nhwc_us, channels-last points)")
    for k, v in figs.items():
        print(figure_line(k, v, "measured", ref))
    after = points(doc, dataclasses.replace(spec, **figs))
    for cls in sorted(rows):
        b = _stats([ape(r[3], r[2]) for r in rows[cls]])
        f = _stats([ape(r[3], r[2]) for r in after[cls]])
        print(f"# {cls:<18} n={b['n']:3d}  median {b['median']:6.1f}% -> {f['median']:5.1f}%   "
              f"p90 {b['p90']:6.1f}% -> {f['p90']:5.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
