"""Held-out records' kernels lined up by class: measured (the profiler's kernel names) against
predicted (gpusim's eager lowering, calibrated spec), count and time per class, per case and
summed: which kernels are missing or extra and which are mispriced (issue 35).

``python3 -m validation.score.holdout_kernels [--gpu h100] [--family vit] [--case SUBSTR]``

Classes are coarse and name-based on the measured side; on the predicted side they come from a
kernel's kind, variant and op. A library's helper kernels (cuDNN's layout transforms, a copy
before a GEMM or a norm, a bias added apart) are ``aux`` on the predicted side, whatever the
profiler calls them, and 1x1 convolutions that cuDNN hands to cuBLAS are ``gemm`` when
measured and ``conv`` when predicted: compare the sum of related classes, not each alone.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import sys

from gpusim.hw.spec import calibrated_name, load_spec
from gpusim.predict.api import predict
from validation.records.store import load_zoo_records, record_graph

#: measured kernel name -> class, the first pattern that matches
MEASURED_CLASSES = (
    ("layout", r"nchwToNhwc|nhwcToNchw"),
    ("attention", r"fmha|flash|sdpa|attention|Attention"),
    ("conv", r"fprop|conv|implicit|winograd|depthwise"),
    ("gemm", r"gemm|nvjet|cutlass|xmma|Kernel2|splitK"),
    ("layernorm", r"layer_norm|LayerNorm"),
    ("batchnorm", r"batch_norm|bn_fw"),
    ("softmax", r"softmax|Softmax"),
    ("index", r"index|gather|scatter"),
    ("cat", r"CatArray"),
    ("copy", r"direct_copy|copy_kernel|transpose"),
    ("reduce", r"reduce_kernel|Reduce"),
    ("elementwise", r"elementwise|vectorized|unrolled"),
)


def measured_class(name: str) -> str:
    """The class of a profiled kernel (:data:`MEASURED_CLASSES`; else ``other``)."""
    return next((c for c, p in MEASURED_CLASSES if re.search(p, name)), "other")


def predicted_class(k) -> str:
    """The class of a predicted :class:`~gpusim.cost.roofline.KernelEstimate`."""
    op = k.op_types[0] if k.op_types else k.name
    if k.role == "aux":
        return "aux"
    if k.kind == "attention":
        return "attention"
    if k.kind in ("conv", "matmul"):
        return "conv" if k.kind == "conv" else "gemm"
    for cls, ops in (("layernorm", ("layer_norm",)), ("batchnorm", ("batch_norm",)),
                     ("softmax", ("softmax",)), ("index", ("index", "gather")),
                     ("cat", ("cat", "stack"))):
        if any(o in op for o in ops):
            return cls
    return {"copy": "copy", "reduction": "reduce", "pointwise": "elementwise"}.get(k.kind, "other")


def lineup(rec: dict, spec) -> dict:
    """``{class: {"meas": [count, us], "pred": [count, us]}}`` for one record."""
    out = collections.defaultdict(lambda: {"meas": [0, 0.0], "pred": [0, 0.0]})
    for k in rec["kernels"]:
        c = out[measured_class(k["name"])]["meas"]
        c[0] += 1
        c[1] += k["us"]
    for k in predict(record_graph(rec), gpu=spec, mode=rec["run"]).kernels:
        c = out[predicted_class(k)]["pred"]
        c[0] += 1
        c[1] += k.us
    return dict(out)


def main(argv=None) -> int:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap = argparse.ArgumentParser(prog="python3 -m validation.score.holdout_kernels")
    ap.add_argument("--results", default=os.path.join(root, "validation", "results"))
    ap.add_argument("--gpu", default="h100")
    ap.add_argument("--family", default="vit")
    ap.add_argument("--case", default="", help="only cases whose id contains this")
    ap.add_argument("--run", default="eager")
    a = ap.parse_args(argv)
    spec = load_spec(calibrated_name(a.gpu))
    total = collections.defaultdict(float)
    for r in load_zoo_records(a.results, a.gpu, "holdout"):
        if r["family"] != a.family or a.case not in r["case_id"] or r["run"] != a.run:
            continue
        rows = lineup(r, spec)
        meas = sum(v["meas"][1] for v in rows.values())
        pred = sum(v["pred"][1] for v in rows.values())
        print(f"\n{r['case_id']}: measured {meas:.0f} us, predicted {pred:.0f} us "
              f"({(pred - meas) / meas * 100:+.0f}%)")
        print("| class | kernels meas / pred | us meas / pred | pred - meas |\n|---|---|---|---|")
        for cls in sorted(rows):
            m, p = rows[cls]["meas"], rows[cls]["pred"]
            total[cls] += p[1] - m[1]
            print(f"| {cls} | {m[0]} / {p[0]} | {m[1]:.1f} / {p[1]:.1f} | {p[1] - m[1]:+.1f} |")
    print("\npredicted - measured by class, summed (us): "
          + ", ".join(f"{c} {v:+.0f}" for c, v in sorted(total.items(), key=lambda x: x[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
