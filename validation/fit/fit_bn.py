"""Fit eval batch norm's parallelism figures (:func:`gpusim.cost.classes.bn_eval_law`) on one GPU's
``bn`` sweep.

``python3 -m validation.fit.fit_bn [--gpu h100] [--sweep FILE] [--check]``

Reads ``validation/sweeps/<gpu>-bn.json`` (``python3 -m validation.measure.microbench --only bn``:
180 points, batch 1/8/32 over 7x7 to 112x112 planes, fp32 and 16-bit, NCHW and
channels-last; profiled kernels, L2 flushed) and prints the figures as spec lines with
their provenance, for the GPU's calibrated spec file:

* ``bn_plane_cycles``: NCHW points of many small planes (at most 14x14, at least 8192
  planes): the time past the fixed cost over the planes, in SM-cycles (x SMs x clock);
* ``bn_plane_element_cycles``: NCHW points of fewer planes than SMs: the time past the
  fixed cost over one plane's elements, in cycles of one block;
* ``bn_nhwc_image_cycles``: cuDNN's channels-last fp32 kernel at batch 1 and 8 on images
  of at least 200k elements: the time past the fixed cost over one image's elements;
* ``bn_nhwc_min_us`` / ``bn_cl_min_us``: the shortest channels-last fp32 (cuDNN) and
  16-bit (ATen) kernel.

Each is the median over its points. ``--check`` predicts every point of the sweep with the
spec as it is and with the fitted figures (the op captured on meta tensors, its input's
layout set as a CUDA trace records it) and prints the median / p90 error of the batch-norm
kernel by layout and dtype. The figures describe the kernels' parallelism on the GPU they
were measured on; nothing else is fitted here.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
from datetime import date

from gpusim.hw.spec import calibrated_name, load_spec
from gpusim.hw.spec_io import figure_line
from validation.records.stats import ape

SWEEPS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "sweeps")
FIGURES = ("bn_plane_cycles", "bn_plane_element_cycles", "bn_nhwc_image_cycles",
           "bn_nhwc_min_us", "bn_cl_min_us")


def bn_kernel_us(p: dict) -> float | None:
    """The batch-norm kernel's time of one point (cuDNN's ``bn_fw_inf`` or ATen's
    ``batch_norm_transform_input``; not the casts of the weights before it)."""
    ks = [k["us"] for k in p.get("kernels", [])
          if "bn_fw_inf" in k["name"] or "batch_norm_transform_input" in k["name"]]
    return ks[0] if len(ks) == 1 else None


def _family(p: dict) -> str:
    if p["layout"] == "nchw":
        return "nchw"
    return "nhwc_fp32" if p["dtype"] == "float32" else "cl_16bit"


def fit(points: list[dict], spec) -> dict:
    """``{figure: value}`` (a figure whose points are missing is left out)."""
    clock = spec.boost_clock_mhz * 1e-3          # cycles per ns
    fixed = spec.kernel_fixed_us
    plane, elem, image, nhwc, cl = [], [], [], [], []
    for p in points:
        us = bn_kernel_us(p)
        if us is None:
            continue
        n, c, h, w = p["shape"]
        fam = _family(p)
        if fam == "nchw" and h * w <= 196 and n * c >= 8192:
            plane.append((us - fixed) * 1e3 * spec.sm_count * clock / (n * c))
        if fam == "nchw" and n * c <= spec.sm_count:
            elem.append((us - fixed) * 1e3 * clock / (h * w))
        if fam == "nhwc_fp32":
            nhwc.append(us)
            if n <= 8 and c * h * w >= 200_000:
                image.append((us - fixed) * 1e3 * clock / (c * h * w))
        if fam == "cl_16bit":
            cl.append(us)
    out = {"bn_plane_cycles": statistics.median(plane) if plane else None,
           "bn_plane_element_cycles": statistics.median(elem) if elem else None,
           "bn_nhwc_image_cycles": statistics.median(image) if image else None,
           "bn_nhwc_min_us": min(nhwc) if nhwc else None,
           "bn_cl_min_us": min(cl) if cl else None}
    return {k: round(v, 4) for k, v in out.items() if v is not None}


def point_graph(p: dict):
    """The OpGraph of one sweep point, its input layout recorded as a CUDA trace would."""
    import torch
    import torch.nn.functional as F

    from gpusim.capture.tracing import capture
    dt = getattr(torch, p["dtype"])
    x = torch.empty(*p["shape"], device="meta", dtype=dt)
    if p["layout"] != "nchw":
        x = x.contiguous(memory_format=torch.channels_last)
    c = p["shape"][1]
    stats = [torch.empty(c, device="meta", dtype=dt) for _ in range(4)]
    g = capture(lambda x, rm, rv, w, b: F.batch_norm(x, rm, rv, w, b, False, 0.1, 1e-5), (x, *stats))
    for _, a in g.g.nodes(data=True):
        if a.get("kind") == "norm":
            a["input_contiguous"] = p["layout"] == "nchw"
    return g


def predicted_bn_us(g, spec) -> float:
    """The batch-norm kernel as the sweep runs it: alone, its parameters L2-resident, so without
    the in-model cold-parameter term ``bn_cold_us`` (validation/fit/fit_chain.py)."""
    from gpusim.cost.kernel import estimate_kernel
    from gpusim.predict.pipeline import lower
    spec = dataclasses.replace(spec, bn_cold_us=None)
    ks = [k for k in lower(g, "eager", spec=spec).kernels if k.variant == "bn_eval"]
    return estimate_kernel(g, ks[0], spec).us


def check(points: list[dict], spec, figs: dict) -> str:
    """Median / p90 error of the batch-norm kernel per family, before and after."""
    after = dataclasses.replace(spec, **figs)
    rows: dict = {}
    for p in points:
        us = bn_kernel_us(p)
        if us is None:
            continue
        g = point_graph(p)
        key = (_family(p), "16-bit" if p["dtype"] != "float32" else "fp32")
        rows.setdefault(key, []).append((ape(predicted_bn_us(g, spec), us),
                                         ape(predicted_bn_us(g, after), us)))
    lines = []
    for key, v in sorted(rows.items()) + [(("all", ""), [x for vs in rows.values() for x in vs])]:
        b, a = sorted(x[0] for x in v), sorted(x[1] for x in v)
        q = lambda xs, f: xs[min(len(xs) - 1, int(f * len(xs)))]   # noqa: E731
        lines.append(f"# {key[0]:<10} {key[1]:<7} n={len(v):3d}  median {q(b, .5):5.1f}% -> "
                     f"{q(a, .5):5.1f}%   p90 {q(b, .9):5.1f}% -> {q(a, .9):5.1f}%")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m validation.fit.fit_bn")
    ap.add_argument("--gpu", default="h100")
    ap.add_argument("--sweep", default=None, help="default validation/sweeps/<gpu>-bn.json")
    ap.add_argument("--check", action="store_true", help="errors on the sweep before and after")
    a = ap.parse_args(argv)
    path = a.sweep or os.path.join(SWEEPS, f"{a.gpu}-bn.json")
    if not os.path.exists(path):
        print(f"fit_bn: no sweep {path}: run python3 -m validation.measure.microbench --only bn on the GPU",
              file=sys.stderr)
        return 2
    with open(path) as f:
        doc = json.load(f)
    spec = load_spec(calibrated_name(a.gpu))
    spec = dataclasses.replace(spec, **{k: None for k in FIGURES})    # fit on the old law
    figs = fit(doc["sweeps"]["bn"], spec)
    gpu = (doc.get("env") or {}).get("gpu_name") or a.gpu
    when = ((doc.get("env") or {}).get("utc") or date.today().isoformat())[:10]
    ref = (f"{gpu}, {when}, python3 -m validation.measure.microbench --only bn --reps 5 -> "
           f"{os.path.relpath(path)}; fitted by python3 -m validation.fit.fit_bn --gpu {a.gpu} "
           f"(median over the law's points, gpusim.cost.classes.bn_eval_law)")
    for k, v in figs.items():
        print(figure_line(k, v, "measured", ref))
    if a.check:
        print(check(doc["sweeps"]["bn"], spec, figs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
