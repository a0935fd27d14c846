"""Eager training steps' walls predicted on a host profile with and without its ``eager_backward_factor`` (the
autograd engine's figure, validation/fit/train_host.py), against the training zoo's records.

``python3 -m validation.score.train_host [--gpu h200] [--host h200-sxm-host] [--factor F] [--cases PATTERN ...]``

Each eager record of ``validation/results/<gpu>/train.jsonl.gz`` (one row per case) is captured once
(:func:`gpusim.predict.step.standard_step`, as :mod:`validation.score.train_accuracy` rebuilds it), lowered once
and simulated on: the reference host, ``--host`` as committed, and ``--host`` with its figure (or ``--factor F``)
switched off / on. Prints each case's wall error and the median absolute error per family and in all.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import statistics
import sys

from validation.records.store import read_records

RESULTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "results")


def hosts(name: str, factor: float | None) -> dict:
    from gpusim.hw.host import load_host
    h = load_host(name)
    f = factor if factor is not None else h.eager_backward_factor
    out = {"reference": load_host("reference"), f"{name} without": h.replace(eager_backward_factor=None)}
    if f is not None:
        out[f"{name} x{f:.2f}"] = h.replace(eager_backward_factor=f)
    return out


def score(gpu: str, host: str, factor: float | None, patterns=None, progress: bool = False) -> dict:
    from gpusim import capture
    from gpusim.hw.spec import spec_for
    from gpusim.predict.pipeline import lower, predict_lowering
    from gpusim.predict.step import standard_step
    from validation.score.train_accuracy import amp_supported, usable
    spec, hs, amp = spec_for(gpu), hosts(host, factor), amp_supported()
    rows = []
    for rec in read_records(os.path.join(RESULTS, gpu, "train.jsonl.gz")):
        if usable(rec, amp) is not None or not rec.get("wall_us"):
            continue
        if patterns and not any(fnmatch.fnmatch(rec["case_id"], p) for p in patterns):
            continue
        if progress:
            print(rec["case_id"], file=sys.stderr, flush=True)
        kw = {"amp": rec["amp"]} if rec.get("amp") else {}
        fn, args = standard_step(rec["model"], "float32", rec["sizes"], rec["optimizer"], **kw)
        low = lower(capture(fn, args), "eager", spec=spec)
        pred = {k: predict_lowering(low, spec, host=h).end_to_end_us for k, h in hs.items()}
        rows.append({"case": rec["case_id"], "family": rec.get("family"), "meas_us": rec["wall_us"],
                     "pred_us": pred, "err": {k: v / rec["wall_us"] - 1 for k, v in pred.items()}})
    return {"gpu": gpu, "hosts": list(hs), "rows": rows, "summary": summary(rows, list(hs))}


def summary(rows, names) -> dict:
    out = {}
    for fam in sorted({r["family"] for r in rows}) + ["all"]:
        sel = [r for r in rows if fam == "all" or r["family"] == fam]
        out[fam] = {"cases": len(sel), **{k: statistics.median(abs(r["err"][k]) for r in sel) for k in names}}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", default="h200")
    ap.add_argument("--host", default="h200-sxm-host")
    ap.add_argument("--factor", type=float, help="eager_backward_factor to try (default: the host's own)")
    ap.add_argument("--cases", nargs="*", help="fnmatch patterns of case ids")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    res = score(a.gpu, a.host, a.factor, a.cases, progress=True)
    if a.json:
        print(json.dumps(res, indent=1))
        return 0
    names = res["hosts"]
    print("| case | measured ms | " + " | ".join(names) + " |")
    print("|---|---|" + "---|" * len(names))
    for r in res["rows"]:
        print(f"| {r['case']} | {r['meas_us'] / 1e3:.1f} | "
              + " | ".join(f"{r['pred_us'][k] / 1e3:.1f} ({r['err'][k]:+.0%})" for k in names) + " |")
    print()
    print("| family | cases | " + " | ".join(f"{k}: median abs. error" for k in names) + " |")
    print("|---|---|" + "---|" * len(names))
    for fam, s in res["summary"].items():
        print(f"| {fam} | {s['cases']} | " + " | ".join(f"{s[k]:.1%}" for k in names) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
