"""CNN records' kernels matched one to one, attributed by kernel class (issue 35): which class
makes a convolutional model's device-time error, on which GPU.

``python3 -m validation.reports.cnn_kernels [--gpu h200] [--set holdout|zoo] [--run eager]
[--case SUBSTR] [--json OUT]``

Each eager cnn record (``<results>/<gpu>/<set>.jsonl.gz``) is re-captured as it ran
(:func:`validation.records.store.record_graph`), lowered and costed with the GPU's calibrated spec,
and its profiled kernels are lined up with the predicted ones in launch order by the broad fit's
matcher (difflib over coarse classes, :func:`validation.fit.fit_broad.measured_class` /
:func:`~validation.fit.fit_broad.kernel_class`). Matched pairs are attributed by a finer class:
the measured kernel's library family (:func:`fine_class`: cuDNN/CUTLASS fprop by architecture and
math, cuDNN's 1x1 runtime kernels, ATen or cuDNN depthwise, cuDNN or ATen batch norm, ...) and
the predicted kernel's law (``Kernel.variant``). Unmatched kernels on either side are their own
rows. Records are only read here: this is a diagnosis, nothing is fitted on them.
"""

from __future__ import annotations

import argparse
import collections
import difflib
import json
import os
import re
import sys

from gpusim.cost.kernel import estimate_kernel
from gpusim.hw.spec import calibrated_name, load_spec
from gpusim.predict.pipeline import lower
from validation.fit.fit_broad import kernel_class, measured_class
from validation.records.store import load_zoo_records, record_graph

RESULTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "results")

#: measured kernel name -> fine class, the first pattern that matches
FINE = (
    ("layout", r"nchwToNhwc|nhwcToNchw"),
    ("conv_1x1_rtc", r"conv2d_c1_k1"),
    ("dw_aten", r"conv_depthwise2d"),
    ("dw_cudnn", r"grouped_direct|depthwise"),
    ("fprop_sm90", r"sm90_xmma_fprop"),
    ("fprop_sm80_tc", r"sm80_xmma_fprop.*(tf32|bf16|f16f16)"),
    ("fprop_ffma", r"xmma_fprop.*ffma|implicit_convolve_sgemm|fprop_ffma"),
    ("fprop_other", r"fprop|convolve|winograd"),
    ("gemm_xmma", r"xmma_gemm"),
    ("gemm_nvjet", r"nvjet"),
    ("gemm_cutlass", r"cutlass"),
    ("splitk", r"splitK"),
    ("bn_cudnn", r"bn_fw"),
    ("bn_aten", r"batch_norm"),
    ("layer_norm", r"layer_norm"),
    ("pool", r"pool"),
    ("reduce", r"reduce_kernel"),
    ("cat", r"CatArray"),
    ("elementwise", r"elementwise|copy"),
)


def fine_class(name: str) -> str:
    """The fine class of a profiled kernel name (:data:`FINE`; else ``other``)."""
    return next((c for c, p in FINE if re.search(p, name)), "other")


def matched_indices(rec: dict, g, ks) -> dict:
    """``{measured index: predicted index}`` of one record's kernels lined up in launch order
    (difflib over the broad fit's coarse classes)."""
    pc = [kernel_class(g, k) for k in ks]
    mc = [measured_class(k["name"]) for k in rec["kernels"]]
    sm = difflib.SequenceMatcher(None, mc, pc, autojunk=False)
    return {b.a + j: b.b + j for b in sm.get_matching_blocks() for j in range(b.size)}


def pairs(rec: dict, spec) -> tuple[list, list, list]:
    """``(matched, meas_only, pred_only)`` for one record: matched ``(meas_kernel, variant, pred_us)``
    triples; measured kernels no predicted one matched; ``(variant, us)`` of unmatched predictions."""
    g = record_graph(rec)
    ks = lower(g, "eager", spec=spec).kernels
    est = [estimate_kernel(g, k, spec) for k in ks]
    matched, mi, pi = [], set(), set()
    for a, b in sorted(matched_indices(rec, g, ks).items()):
        m, k = rec["kernels"][a], ks[b]
        matched.append((m, f"{k.role}:{k.variant}", est[b].us))
        mi.add(a)
        pi.add(b)
    meas_only = [m for i, m in enumerate(rec["kernels"]) if i not in mi]
    pred_only = [(f"{k.role}:{k.variant}", est[i].us) for i, k in enumerate(ks) if i not in pi]
    return matched, meas_only, pred_only


def attribute(records: list, spec) -> dict:
    """Per record and summed: ``{"cases": [...], "by_class": {cls: [n, meas_us, pred_us]},
    "by_law": {...}}`` (matched pairs by measured fine class and by predicted law; unmatched
    kernels under ``unmatched-meas:<cls>`` / ``unmatched-pred:<law>``)."""
    by_class = collections.defaultdict(lambda: [0, 0.0, 0.0])
    by_law = collections.defaultdict(lambda: [0, 0.0, 0.0])
    cases = []
    for r in records:
        matched, mo, po = pairs(r, spec)
        case = collections.defaultdict(lambda: [0, 0.0, 0.0])
        for m, law, us in matched:
            for d, key in ((by_class, fine_class(m["name"])), (by_law, law), (case, fine_class(m["name"]))):
                d[key][0] += 1
                d[key][1] += m["us"]
                d[key][2] += us
        for m in mo:
            for d in (by_class, case):
                e = d["unmatched-meas:" + fine_class(m["name"])]
                e[0] += 1
                e[1] += m["us"]
        for law, us in po:
            for d, key in ((by_law, "unmatched-pred:" + law), (case, "unmatched-pred:" + law)):
                d[key][0] += 1
                d[key][2] += us
        meas = sum(k["us"] for k in r["kernels"])
        pred = sum(v[2] for v in case.values())
        cases.append({"case": r["case_id"], "meas_us": meas, "pred_us": pred, "classes": dict(case)})
    return {"cases": cases, "by_class": dict(by_class), "by_law": dict(by_law)}


def table(d: dict, total_meas: float) -> str:
    """A markdown table of ``{cls: [n, meas, pred]}``, largest |pred - meas| first."""
    lines = ["| class | kernels | us meas | us pred | pred - meas | % of measured total |", "|---|---|---|---|---|---|"]
    for c, (n, m, p) in sorted(d.items(), key=lambda x: -abs(x[1][2] - x[1][1])):
        lines.append(f"| {c} | {n} | {m:.0f} | {p:.0f} | {p - m:+.0f} | {(p - m) / total_meas * 100:+.1f}% |")
    return "\n".join(lines)


def record_args(prog: str, set_default: str = "holdout") -> argparse.ArgumentParser:
    """The arguments the CNN record reports share (this one, ``cnn_transforms``, ``cnn_predecessor``):
    ``--results``, ``--gpu``, ``--set``, ``--family``, ``--case``."""
    ap = argparse.ArgumentParser(prog=f"python3 -m validation.reports.{prog}")
    ap.add_argument("--results", default=RESULTS)
    ap.add_argument("--gpu", default="h200")
    ap.add_argument("--set", default=set_default, choices=("holdout", "zoo"))
    ap.add_argument("--family", default="cnn")
    ap.add_argument("--case", default="", help="only cases whose id contains this")
    return ap


def selected_records(a, run: str = "eager") -> tuple:
    """``(the GPU's calibrated spec, the set's records of the family and run whose id contains
    --case)`` for the parsed :func:`record_args`."""
    return load_spec(calibrated_name(a.gpu)), [r for r in load_zoo_records(a.results, a.gpu, a.set)
                                               if r["family"] == a.family and r["run"] == run and a.case in r["case_id"]]


def main(argv=None) -> int:
    ap = record_args("cnn_kernels")
    ap.add_argument("--run", default="eager")
    ap.add_argument("--json", help="write the attribution here")
    a = ap.parse_args(argv)
    spec, recs = selected_records(a, a.run)
    rep = attribute(recs, spec)
    total = sum(c["meas_us"] for c in rep["cases"])
    for c in rep["cases"]:
        print(f"{c['case']}: measured {c['meas_us']:.0f} us, predicted {c['pred_us']:.0f} us "
              f"({(c['pred_us'] - c['meas_us']) / c['meas_us'] * 100:+.1f}%)")
    print(f"\n{a.gpu} {a.set} {a.family} {a.run}: {len(recs)} records, measured {total:.0f} us\n")
    print("By measured kernel class (matched pairs; unmatched measured kernels apart):\n")
    print(table(rep["by_class"], total))
    print("\nBy predicted law (matched pairs; unmatched predicted kernels apart):\n")
    print(table(rep["by_law"], total))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rep, f, indent=1, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
