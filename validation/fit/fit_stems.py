"""Fit the law of channels-last 3x3 and 4x4 stem convolutions (``conv_stem_nhwc_{fp32,fp16,bf16,direct}_{us,tflops}``;
:func:`gpusim.cost.classes.stem_nhwc_us`).

``python3 -m validation.fit.fit_stems [--gpu h200] [--write]``

Reads the GPU's stem sweeps (``validation/results/<gpu>/cnn_stems.jsonl`` and ``cnn_stem_maps.jsonl``:
:mod:`validation.measure.cnn_stems`, ``--set grid`` and ``--set maps``) and keeps their eager channels-last points
with a 3x3 or 4x4 filter: the stems the lowering gives class
``conv_stem_nhwc`` (7x7 stems keep the stem law: cuDNN picks their kernel by map, batch and dtype, and one law
fits them badly, 11-23% on the sweep and 2x off the ResNet stem at batch 32; ViT patch embeddings keep theirs).
The time fitted is the point's kernel sum. The stems that run cuDNN's grouped direct kernel
(:func:`gpusim.cost.classes.stem_direct`: bf16 4x4/4 up to 160 px) are fitted apart (``direct``, true FLOPs). Per
dtype, ``t = us + FLOPs' / tflops`` (FLOPs' with the output
channels rounded up to :data:`gpusim.cost.classes.STEM_COUT_TILE`) is fitted by grid search on the median
relative error; printed: the figures, gpusim's error on each point's whole call without them (the conv
class) and with them, and each filter left out. No model record is read.
"""

from __future__ import annotations

import math
import os
import statistics
import sys

import numpy as np

from gpusim.cost.classes import STEM_COUT_TILE, STEM_DTYPES, stem_direct
from gpusim.hw.schema import STEM_NHWC_FIGURES
from gpusim.hw.spec import calibrated_name, load_spec
from validation.fit.fit_triton import emit_fitted, left_out, read_sweep, spec_fit_args

#: the map-size sweep beside the grid sweep (``cnn_stems --set maps``), read when present
MAPS = "cnn_stem_maps.jsonl"
TFLOPS = np.round(np.arange(1.0, 200.01, 0.5), 1)
FIXED = np.round(np.arange(0.0, 80.01, 0.5), 1)


def points(*paths: str) -> list[dict]:
    """The sweeps' eager channels-last stems of 3x3 and 4x4 filters, with FLOPs' and the fitted time; ``dtype``
    ``direct`` for those that run cuDNN's grouped direct kernel."""
    out = []
    for r in (row for path in paths for row in read_sweep(path, "cnn_stems")[1]):
        if r.get("mode", "eager") != "eager" or r["layout"] != "channels_last" or r["k"] >= 7:
            continue
        ho = (r["HW"] + 2 * r["padding"] - r["k"]) // r["stride"] + 1
        direct = stem_direct({"dtype": r["dtype"], "kh": r["k"], "Ho": ho, "H": r["HW"], "Cout": r["Cout"]})
        cout = r["Cout"] if direct else math.ceil(r["Cout"] / STEM_COUT_TILE) * STEM_COUT_TILE
        out.append({"dtype": "direct" if direct else STEM_DTYPES[r["dtype"]], "k": r["k"],
                    "flops": 2.0 * r["N"] * ho * ho * cout * r["Cin"] * r["k"] ** 2, "us": r["kernel_sum_us"], "p": r})
    return out


def fit(pts: list[dict]) -> tuple[float, float]:
    """``(us, tflops)`` of the least median relative error."""
    flops = np.array([p["flops"] for p in pts])
    us = np.array([p["us"] for p in pts])
    best = None
    for tf in TFLOPS:
        comp = flops / (tf * 1e12) * 1e6
        for c in FIXED:
            m = float(np.median(np.abs((c + comp) / us - 1)))
            if best is None or m < best[0]:
                best = (m, float(c), float(tf))
    return best[1], best[2]


def err(pts: list[dict], figs: tuple[float, float], signed: bool = False) -> float:
    e = [(figs[0] + p["flops"] / (figs[1] * 1e12) * 1e6) / p["us"] - 1 for p in pts]
    return float(statistics.median(e if signed else [abs(x) for x in e])) * 100


def call_graph(p: dict):
    """The point's call (a channels-last ``nn.Conv2d``) captured on fake tensors, once for every spec it is priced on."""
    import torch
    from gpusim.capture.tracing import capture
    r = p["p"]
    dt = getattr(torch, r["dtype"])
    conv = torch.nn.Conv2d(r["Cin"], r["Cout"], r["k"], r["stride"], r["padding"], bias=False, dtype=dt)
    x = torch.randn(r["N"], r["Cin"], r["HW"], r["HW"], dtype=dt).contiguous(memory_format=torch.channels_last)
    return capture(conv.to(memory_format=torch.channels_last), (x,))


def sweep_error(pts: list[dict], graphs: list, spec) -> float:
    """Median |error| of gpusim's device time for each point's call (``graphs``: :func:`call_graph`) on ``spec``
    against the point's kernel sum."""
    from gpusim.predict.api import predict
    return float(statistics.median(abs(predict(g, gpu=spec, mode="eager").device_us / p["p"]["kernel_sum_us"] - 1)
                                   for p, g in zip(pts, graphs))) * 100


def main(argv=None) -> int:
    a, path = spec_fit_args("fit_stems", "cnn_stems", argv)
    if path is None:
        return 2
    paths = [path] + [p for p in [os.path.join(os.path.dirname(path), MAPS)] if os.path.exists(p)]
    pts = points(*paths)
    spec = load_spec(calibrated_name(a.gpu))
    lines, summary = [], []
    for dt in ("fp32", "fp16", "bf16", "direct"):
        sub = [p for p in pts if p["dtype"] == dt]
        if len(sub) < 5:
            continue
        figs = fit(sub)
        keys = [f"conv_stem_nhwc_{dt}_{f}" for f in ("us", "tflops")]
        graphs = [call_graph(p) for p in sub]
        old = sweep_error(sub, graphs, spec.replace(**dict.fromkeys(STEM_NHWC_FIGURES)))     # the conv class
        new = sweep_error(sub, graphs, spec.replace(**dict(zip(keys, figs))))
        summary.append(f"{dt}: {len(sub)} points, {figs[0]:.1f} us + FLOPs at {figs[1]:.1f} TFLOPS; "
                       f"the calls' median error {old:.1f}% (before) -> {new:.1f}%")
        print(summary[-1])
        for k, own, f2 in left_out(sub, "k", fit):
            print(f"  leave {k}x{k} out ({len(own)} points): {f2[0]:.1f} us, {f2[1]:.1f} TFLOPS; their error "
                  f"{err(own, f2):.1f}% (signed {err(own, f2, True):+.1f}%)")
        lines += [(keys[0], figs[0], ".1f"), (keys[1], figs[1], ".1f")]
    ref = (f"{spec.name} sweeps {', '.join(os.path.relpath(p) for p in paths)} (python3 -m validation.measure.cnn_stems "
           f"[--set maps], 2026-11-29); fitted by "
           f"python3 -m validation.fit.fit_stems --gpu {a.gpu} ({'; '.join(summary)})")
    emit_fitted(spec.path, lines, ref, a.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
