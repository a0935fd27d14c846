"""The cnn_convs sweep's ``bench`` and ``reduce`` points against gpusim (issue 35).

``python3 -m validation.score.cnn_convs_report [--gpu h200] [--sweep FILE]``

``bench``: each convolution timed with ``cudnn.benchmark`` off and on (fp16 NCHW, batch 64 and
256): the kernels each mode ran, the main kernel's and the whole call's time, the ratio on / off,
and gpusim's prediction (which follows PyTorch's default heuristics, benchmark off). timm's
benchmark script, the source of the published RTX 3090 / 4090 rows, runs with the flag on.
``reduce``: squeeze-excite spatial means and ConvNeXtV2 GRN norms, measured against predicted.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

from gpusim.hw.spec import calibrated_name, load_spec
from gpusim.predict.pipeline import predict

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LAYOUT = ("nchwToNhwc", "nhwcToNchw", "AddPadding", "tensorTransform")


def _graph(p: dict):
    import torch
    import torch.nn.functional as F
    from gpusim.capture.tracing import capture
    dt = getattr(torch, p["dtype"])
    if p["op"] == "reduce":
        if p["red"] == "mean":
            return capture(lambda x: x.mean((2, 3), keepdim=True),
                           (torch.empty(p["N"], p["C"], p["HW"], p["HW"], device="meta", dtype=dt),))
        return capture(lambda x: torch.norm(x, p=2, dim=(1, 2), keepdim=True),
                       (torch.empty(p["N"], p["HW"], p["HW"], p["C"], device="meta", dtype=dt),))
    g = p.get("groups", 1)
    x = torch.empty(p["N"], p["Cin"], p["HW"], p["HW"], device="meta", dtype=dt)
    w = torch.empty(p["Cout"], p["Cin"] // g, p["k"], p["k"], device="meta", dtype=dt)
    s, pad = p["stride"], p["padding"]
    return capture(lambda x, w: F.conv2d(x, w, None, s, pad, 1, g), (x, w))


def bench_rows(rows: list[dict], spec) -> list[str]:
    key = lambda p: (p["label"], p["Cin"], p["Cout"], p["HW"], p["k"], p["groups"], p["N"])  # noqa: E731
    pairs: dict = {}
    for p in rows:
        if p.get("op") == "bench" and not p.get("failed") and p.get("kernels"):
            pairs.setdefault(key(p), {})[bool(p["benchmark"])] = p
    out = ["| conv | N | off: kernels, µs (transforms) | on: kernels, µs (transforms) | on / off | gpusim µs |",
           "|---|---|---|---|---|---|"]
    ratios = []
    for k, d in pairs.items():
        if set(d) != {False, True}:
            continue
        cells = []
        for on in (False, True):
            ks = d[on]["kernels"]
            tr = sum(x["us"] for x in ks if any(s in x["name"] for s in LAYOUT))
            cells.append((len(ks), sum(x["us"] for x in ks), tr))
        ratios.append(cells[1][1] / cells[0][1])
        pred = predict(_graph(d[False]), gpu=spec, mode="eager").device_us
        out.append(f"| {k[0]} {k[1]}->{k[2]} {k[3]}px k{k[4]} g{k[5]} | {k[6]} | {cells[0][0]}, {cells[0][1]:.1f} ({cells[0][2]:.1f}) | "
                   f"{cells[1][0]}, {cells[1][1]:.1f} ({cells[1][2]:.1f}) | {ratios[-1]:.2f} | {pred:.1f} |")
    if ratios:
        out.append(f"\nbenchmark on / off, whole call: median {np.median(ratios):.2f}, "
                   f"range {min(ratios):.2f}-{max(ratios):.2f} ({len(ratios)} convolutions)")
    return out


def reduce_rows(rows: list[dict], spec) -> list[str]:
    out = ["| reduce | N | C | HW | dtype | measured µs | gpusim µs | pred / meas |", "|---|---|---|---|---|---|---|---|"]
    r = []
    for p in rows:
        if p.get("op") != "reduce" or p.get("failed") or not p.get("kernels"):
            continue
        meas = sum(k["us"] for k in p["kernels"])
        pred = predict(_graph(p), gpu=spec, mode="eager").device_us
        r.append(pred / meas)
        out.append(f"| {p['red']} | {p['N']} | {p['C']} | {p['HW']} | {p['dtype']} | {meas:.1f} | {pred:.1f} | {pred / meas:.2f} |")
    if r:
        out.append(f"\npred / meas: median {np.median(r):.2f}, range {min(r):.2f}-{max(r):.2f} ({len(r)} points)")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m validation.score.cnn_convs_report")
    ap.add_argument("--gpu", default="h200")
    ap.add_argument("--sweep", default=None, help="default validation/results/<gpu>/cnn_convs.jsonl")
    a = ap.parse_args(argv)
    path = a.sweep or os.path.join(ROOT, "validation", "results", a.gpu, "cnn_convs.jsonl")
    if not os.path.exists(path):
        print(f"cnn_convs_report: no {path}", file=sys.stderr)
        return 2
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    spec = load_spec(calibrated_name(a.gpu))
    print("\n".join(bench_rows(rows, spec) + [""] + reduce_rows(rows, spec)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
