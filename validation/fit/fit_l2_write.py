"""Fit ``l2_write_gbs``: the rate at which a kernel's writes of an L2-resident-size output drain
(:func:`gpusim.cost.roofline.l2_write_rate`), on the cnn_convs sweep's warm points.

``python3 -m validation.fit.fit_l2_write [--gpu h200] [--write]``

Why: in the zoo and held-out CNN records, memory-bound kernels moving 0.5-32 MB (elementwise,
eval batch norm, cuDNN's layout transforms) run 1.01-1.08x faster on the H200 than on the H100,
where gpusim's memory term, which drains every write at the DRAM stream's rate (``mem_efficiency
x bandwidth``: 4.25 vs 3.03 TB/s), gives 1.16-1.27x. The two GPUs share the GH100 die (SMs,
clocks, L2); only HBM differs. The warm points (:mod:`validation.measure.cnn_convs`: a producer
``y = x0 * 1.0`` writes ``y``, then ``relu(y)``, ``y + b`` or eval ``batch_norm(y)`` reads it
from L2 and writes its output; (N, 64, 56, 56), N 1-64, fp32 and bf16) time exactly such
kernels. Each is re-captured on meta tensors, lowered and costed; its measured kernels are lined
up with the predicted ones in order. Fit: the one rate minimising the squared log error over
every kernel whose output is no larger than ``l2_resident_fraction x L2`` (grid, 1 GB/s steps).
Reported: median / p90 error of those kernels before (DRAM rate) and after, per op, and each op
left out (its kernels predicted with the rate fitted on the others'). No held-out row is read.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys

import numpy as np

from gpusim.cost.kernel import estimate_kernel
from gpusim.hw.spec import calibrated_name, load_spec
from gpusim.predict.pipeline import lower
from validation.fit.fit_triton import emit_figures

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def warm_graph(p: dict):
    """The OpGraph of one warm point, as :mod:`validation.measure.cnn_convs` ran it."""
    import torch
    import torch.nn.functional as F
    from gpusim.capture.tracing import capture
    dt = getattr(torch, p["dtype"])
    x0 = torch.empty(p["N"], p["C"], p["HW"], p["HW"], device="meta", dtype=dt)
    b = torch.empty(p["C"], device="meta", dtype=dt)
    ops = {"relu": lambda y, b, v: torch.relu(y), "bias": lambda y, b, v: y + b[None, :, None, None],
           "bn": lambda y, b, v: F.batch_norm(y, b, v, b, b, False, 0.1, 1e-5)}
    op = ops[p["warm_op"]]
    return capture(lambda x0, b, v: op(x0 * 1.0, b, v), (x0, b, b))


def kernels(path: str, spec) -> list[dict]:
    """Every measured kernel of the warm points lined up with its prediction: ``{"op", "dtype", "N",
    "which" (producer / op), "us", "graph", "kernel", "l2_sized"}``; points whose kernel counts
    differ are left out (printed)."""
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    out = []
    cap = spec.l2_resident_fraction * spec.l2_bytes
    for p in rows:
        if p.get("op") != "warm" or p.get("failed") or not p.get("kernels"):
            continue
        g = warm_graph(p)
        ks = lower(g, "eager", spec=spec).kernels
        if len(ks) != len(p["kernels"]):
            print(f"skipped {p['warm_op']} {p['dtype']} N{p['N']}: {len(p['kernels'])} kernels measured, "
                  f"{len(ks)} predicted", file=sys.stderr)
            continue
        for i, (k, m) in enumerate(zip(ks, p["kernels"])):
            e = estimate_kernel(g, k, spec)
            out.append({"op": p["warm_op"], "dtype": p["dtype"], "N": p["N"], "which": "producer" if i == 0 else "op",
                        "us": m["us"], "graph": g, "kernel": k, "l2_sized": e.bytes_written <= cap})
    return out


def predict(ks: list[dict], spec, gbs: float | None) -> np.ndarray:
    s = dataclasses.replace(spec, l2_write_gbs=gbs)
    return np.array([estimate_kernel(k["graph"], k["kernel"], s).us for k in ks])


def fit(ks: list[dict], spec) -> float:
    """The rate (GB/s, whole) minimising the squared log error of ``ks``: a coarse grid, then 1 GB/s."""
    meas = np.array([k["us"] for k in ks])

    def loss(g):
        return float(np.sum(np.log(predict(ks, spec, g) / meas) ** 2))
    best = min(range(500, 12001, 250), key=loss)
    return float(min(range(max(best - 250, 100), best + 251), key=loss))


def _errs(pred, ks) -> str:
    e = np.abs([(a - k["us"]) / k["us"] * 100 for a, k in zip(pred, ks)])
    return f"{np.median(e):.1f}% / {np.percentile(e, 90):.1f}%" if len(e) else "-"


def report(ks: list[dict], spec) -> tuple[float, list[str]]:
    dom = [k for k in ks if k["l2_sized"]]
    gbs = fit(dom, spec)
    lines = [f"{len(dom)} kernels with L2-resident-size outputs (of {len(ks)}): l2_write_gbs = {gbs:.0f} GB/s "
             f"(DRAM stream {spec.mem_efficiency * spec.bandwidth / 1e9:.0f} GB/s)",
             f"all: before {_errs(predict(dom, spec, None), dom)}, after {_errs(predict(dom, spec, gbs), dom)} (median / p90)"]
    for which in ("producer", "op"):
        for op in sorted({k["op"] for k in dom}):
            sel = [k for k in dom if k["op"] == op and k["which"] == which]
            if sel:
                lines.append(f"{which} of {op}: before {_errs(predict(sel, spec, None), sel)}, "
                             f"after {_errs(predict(sel, spec, gbs), sel)}")
    for op in sorted({k["op"] for k in dom}):
        rest, own = [k for k in dom if k["op"] != op], [k for k in dom if k["op"] == op]
        g = fit(rest, spec)
        lines.append(f"leave {op} out: {g:.0f} GB/s; its kernels before {_errs(predict(own, spec, None), own)}, "
                     f"after {_errs(predict(own, spec, g), own)}")
    big = [k for k in ks if not k["l2_sized"]]
    lines.append(f"outside the domain ({len(big)} kernels, unchanged by the law): {_errs(predict(big, spec, None), big)}")
    return gbs, lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m validation.fit.fit_l2_write")
    ap.add_argument("--gpu", default="h200")
    ap.add_argument("--sweep", default=None, help="default validation/results/<gpu>/cnn_convs.jsonl")
    ap.add_argument("--write", action="store_true", help="write the figure into the GPU's calibrated spec")
    a = ap.parse_args(argv)
    path = a.sweep or os.path.join(ROOT, "validation", "results", a.gpu, "cnn_convs.jsonl")
    if not os.path.exists(path):
        print(f"fit_l2_write: no {os.path.relpath(path, ROOT)}: run python3 -m validation.measure.cnn_convs "
              f"on the GPU", file=sys.stderr)
        return 2
    spec = dataclasses.replace(load_spec(calibrated_name(a.gpu)), l2_write_gbs=None)
    ks = kernels(path, spec)
    if len([k for k in ks if k["l2_sized"]]) < 4:
        print("fit_l2_write: fewer than 4 warm kernels with L2-resident-size outputs", file=sys.stderr)
        return 2
    gbs, lines = report(ks, spec)
    print("\n".join(lines))
    with open(path) as f:
        env = json.loads(f.readline())
    ref = (f"{env.get('gpu_name', a.gpu)}, {(env.get('utc') or '')[:10]}, {os.path.relpath(path, ROOT)} "
           f"({env.get('command', 'cnn_convs')}, warm points); fitted by python3 -m validation.fit.fit_l2_write "
           f"--gpu {a.gpu}: {lines[0]}; {lines[1]}")
    emit_figures(load_spec(calibrated_name(a.gpu)).path,
                 [f'l2_write_gbs = {{ value = {gbs:.0f}, source = "measured", ref = "{ref}" }}'],
                 ("l2_write_gbs",), a.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
