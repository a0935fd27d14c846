"""Score gpusim's training-step predictions against the training zoo's records.

``python3 -m validation.score.train_accuracy [--results validation/results] [--gpu h100 ...]
[--cases PATTERN] [--json]``

Reads ``<results>/<gpu>/train.jsonl.gz`` (written by ``validation.measure.train_run``: one row per
measured step, ``kind == "train_step"``), rebuilds each eager case's step with
:func:`gpusim.predict.step.standard_step` (the same model, sizes, optimizer and loss as
``validation/measure/train_step.py``) on ``meta`` tensors, predicts it on that GPU's spec, and
compares per phase (forward, backward, optimizer): kernel count and the sum of kernel times
(``phases[ph].kernel_count`` / ``kernel_sum_us``), the whole step's kernel time
(``kernel_sum_us``) and wall time (``wall_us``), and memory: the step's peak
(``memory.peak_step_case_bytes``: weights, optimizer states and inputs included, as
gpusim's ``memory.total_bytes``) and the phase that holds it (``memory.peak_phase``), and
the count of cuDNN layout-transform kernels per phase (gpusim assumes none around backward
convolutions: the records say whether cuDNN runs them).
Rows with autocast (``amp``) are scored only when this gpusim traces autocast. ``--run
compiled`` scores ``<gpu>/train_compiled.jsonl.gz`` instead: steps with ``torch.compile(model)``
inside, predicted with ``mode="compiled"``. Errors are absolute percentages;
medians and p90 by :func:`validation.records.stats._stats`.
"""

from __future__ import annotations

import argparse
import fnmatch
import inspect
import json
import os
import re
import sys

from validation.records.store import read_records
from validation.records.stats import _stats, ape

PHASES = ("forward", "backward", "optimizer")
#: cuDNN's layout transform kernels (nchwToNhwcKernel, nhwcToNchwKernel, tensorTransform)
LAYOUT = re.compile(r"nchwToNhwc|nhwcToNchw|tensorTransform|nhwcAddPadding")
RESULTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "results")


def amp_supported() -> bool:
    """Whether this gpusim's standard step takes an autocast dtype."""
    from gpusim.predict.step import standard_step
    return "amp" in inspect.signature(standard_step).parameters


def predict_row(rec: dict, gpu: str) -> dict:
    """gpusim's figures for the case of record ``rec`` on ``gpu``."""
    from gpusim import predict
    from gpusim.hw.spec import spec_for
    from gpusim.predict.step import standard_step
    kw = {"amp": rec.get("amp")} if rec.get("amp") else {}
    fn, args = standard_step(rec["model"], "float32", rec["sizes"], rec["optimizer"], **kw)
    # the GPU's calibrated spec where one exists (the training classes' figures live there:
    # a bare name would load the datasheet spec)
    p = predict(fn, args, gpu=spec_for(gpu), mode=rec.get("run", "eager"))
    s = p.train
    g = p.graph.g
    transforms = {ph: 0 for ph in PHASES}
    for k in p.lowering.kernels:       # cuDNN's layout kernels around convolutions
        a = g.nodes[k.ops[0]]
        # cuDNN's own (library) kernels only: Inductor's generated weight copies and
        # AccumulateGrad's permuting copies are no cuDNN transform
        if k.role == "aux" and a["kind"] == "conv" and k.impl == "library" and k.variant != "conv_bias":
            transforms[a.get("phase", "forward")] += 1
    return {"phases": {ph: {"kernel_count": s["phases"][ph]["kernels"],
                            "kernel_sum_us": s["phases"][ph]["device_us"],
                            "layout_transforms": transforms[ph]} for ph in PHASES},
            "kernel_sum_us": p.device_us, "wall_us": p.end_to_end_us,
            "peak_bytes": p.memory.total_bytes, "peak_phase": s["peak_phase"]}


def _num(x):
    """A plain float (a symbolic value left by a host read in the trace: None)."""
    try:
        return float(x)
    except Exception:  # noqa: BLE001 - torch.SymFloat without a hint
        return None


def compare(rec: dict, pred: dict) -> dict:
    """Per-metric (predicted, measured, absolute % error) of one case."""
    out = {}
    pred = dict(pred, phases={ph: {k: (_num(v) if k != "layout_transforms" else v) for k, v in d.items()}
                              for ph, d in pred["phases"].items()},
                kernel_sum_us=_num(pred["kernel_sum_us"]), wall_us=_num(pred["wall_us"]),
                peak_bytes=_num(pred["peak_bytes"]))
    for ph in PHASES:
        m = (rec.get("phases") or {}).get(ph) or {}
        for key in ("kernel_count", "kernel_sum_us"):
            if m.get(key) and pred["phases"][ph][key] is not None:
                out[f"{ph}.{key}"] = (pred["phases"][ph][key], m[key], ape(pred["phases"][ph][key], m[key]))
    for ph in PHASES:       # the backward's layout kernels: an assumption the records test
        names = [k.get("name", "") for k in rec.get("kernels") or [] if k.get("phase") == ph]
        n = sum(1 for x in names if LAYOUT.search(x))
        if names:
            got = pred["phases"][ph]["layout_transforms"]
            out[f"{ph}.layout_transforms"] = (got, n, got == n)
    for key in ("kernel_sum_us", "wall_us"):
        if rec.get(key) and pred[key] is not None:
            out[key] = (pred[key], rec[key], ape(pred[key], rec[key]))
    mem = rec.get("memory") or {}
    if mem.get("peak_step_case_bytes") and pred["peak_bytes"] is not None:
        out["peak_bytes"] = (pred["peak_bytes"], mem["peak_step_case_bytes"],
                             ape(pred["peak_bytes"], mem["peak_step_case_bytes"]))
    if mem.get("peak_phase"):
        out["peak_phase"] = (pred["peak_phase"], mem["peak_phase"], pred["peak_phase"] == mem["peak_phase"])
    return out


def usable(rec: dict, amp: bool, run: str = "eager") -> str | None:
    """Why a record is not scored (None: scored): failed, or not of the ``run`` scored."""
    if rec.get("kind") != "train_step" or rec.get("failed"):
        return "failed or not a training step"
    if rec.get("run") != run:
        return f"not {run}"
    if rec.get("amp") and not amp:
        return "autocast not traced by this gpusim"
    return None


#: the records of each run: eager steps, and steps with ``torch.compile(model)`` inside
RECORDS = {"eager": "train.jsonl.gz", "compiled": "train_compiled.jsonl.gz"}


def score(results: str, gpus, patterns=None, progress: bool = False, run: str = "eager") -> dict:
    amp = amp_supported()
    report = {}
    for gpu in gpus:
        path = os.path.join(results, gpu, RECORDS[run])
        if not os.path.exists(path):
            continue
        rows = read_records(path)
        cases, skipped = [], {}
        for rec in rows:
            why = usable(rec, amp, run)
            if why is None and patterns and not any(fnmatch.fnmatch(rec.get("case_id", ""), p)
                                                    for p in patterns):
                why = "not selected"
            if why:
                skipped[why] = skipped.get(why, 0) + 1
                continue
            try:
                cmp = compare(rec, predict_row(rec, gpu))
            except Exception as e:  # noqa: BLE001 - a case gpusim cannot predict is reported
                cases.append({"case_id": rec.get("case_id"), "error": f"{type(e).__name__}: {e}"[:200]})
                continue
            cases.append({"case_id": rec.get("case_id"), "metrics": cmp})
            if progress:
                print(rec.get("case_id"), {k: (round(v[0], 1) if isinstance(v[0], float) else v[0], v[1])
                                           for k, v in cmp.items()}, file=sys.stderr, flush=True)
        metrics = sorted({k for c in cases for k in c.get("metrics", {})
                          if k != "peak_phase" and not k.endswith("layout_transforms")})
        summary = {k: _stats([c["metrics"][k][2] for c in cases if k in c.get("metrics", {})])
                   for k in metrics}
        phase_hits = [c["metrics"]["peak_phase"][2] for c in cases if "peak_phase" in c.get("metrics", {})]
        layout = {ph: [sum(c["metrics"][f"{ph}.layout_transforms"][k] for c in cases
                           if f"{ph}.layout_transforms" in c.get("metrics", {})) for k in (0, 1)]
                  for ph in PHASES}
        report[gpu] = {"cases": cases, "summary": summary, "skipped": skipped,
                       "peak_phase_right": [sum(phase_hits), len(phase_hits)],
                       "layout_transforms": layout}
    return report


def competitors(results: str, gpu: str) -> dict:
    """gpusim beside PyTorch's estimators on the steps ``train_run --competitors`` ran them
    on (``<gpu>/train_competitors.jsonl.gz``): per case, the absolute % error of MemTracker's
    step peak and of gpusim's against the record's ``memory.peak_step_case_bytes``, and of
    RuntimeEstimator's step time (roofline and benchmark modes) and gpusim's against the
    record's kernel time (``kernel_sum_us``); None where an estimator failed."""
    path = os.path.join(results, gpu, "train_competitors.jsonl.gz")
    if not os.path.exists(path):
        return {}
    recs = {r["case_id"]: r for r in read_records(os.path.join(results, gpu, RECORDS["eager"]))
            if usable(r, True) is None}
    rows = []
    for c in read_records(path):
        rec = recs.get(c.get("case_id"))
        if rec is None or not (rec.get("memory") or {}).get("peak_step_case_bytes"):
            continue
        pred = predict_row(rec, gpu)
        peak, us = rec["memory"]["peak_step_case_bytes"], rec["kernel_sum_us"]
        re_ms = {m: (c.get(f"runtime_estimator_{m}") or {}).get("total_ms")
                 for m in ("roofline", "benchmark")}
        rows.append({"case_id": c["case_id"],
                     "memtracker": ape((c.get("memtracker") or {}).get("peak") or 0, peak)
                     if (c.get("memtracker") or {}).get("peak") else None,
                     "gpusim_peak": ape(_num(pred["peak_bytes"]), peak),
                     "re_roofline": ape(re_ms["roofline"] * 1e3, us) if re_ms["roofline"] else None,
                     "re_benchmark": ape(re_ms["benchmark"] * 1e3, us) if re_ms["benchmark"] else None,
                     "gpusim_time": ape(_num(pred["kernel_sum_us"]), us)})
    summary = {}
    for k in ("memtracker", "gpusim_peak", "re_roofline", "re_benchmark", "gpusim_time"):
        vals = [r[k] for r in rows if r[k] is not None]
        summary[k] = dict(_stats(vals) or {}, runs=len(vals))
    same = {k: _stats([r[g] for r in rows if r[k] is not None])
            for k, g in (("memtracker", "gpusim_peak"), ("re_roofline", "gpusim_time"),
                         ("re_benchmark", "gpusim_time"))}
    return {"rows": rows, "summary": summary, "gpusim_on_the_same_cases": same}


def text(report: dict) -> str:
    lines = []
    for gpu, r in report.items():
        n = len(r["cases"])
        lines.append(f"{gpu}: {n} training steps scored" + (
            "; skipped " + ", ".join(f"{v} ({k})" for k, v in r["skipped"].items()) if r["skipped"] else ""))
        for k, s in r["summary"].items():
            if s:
                lines.append(f"  {k:<28} median {s['median']:6.1f}%  p90 {s['p90']:6.1f}%  (n={s['n']})")
        hit, tot = r["peak_phase_right"]
        if tot:
            lines.append(f"  peak phase right             {hit} of {tot}")
        for ph, (pred, meas) in r["layout_transforms"].items():
            if meas or pred:
                lines.append(f"  {ph} layout kernels        predicted {pred}, measured {meas}")
        for c in r["cases"]:
            if "error" in c:
                lines.append(f"  {c['case_id']}: {c['error']}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", default=RESULTS)
    ap.add_argument("--gpu", action="append", default=None, help="h100, h200 (default: both)")
    ap.add_argument("--cases", action="append", default=None, help="case_id glob (repeatable)")
    ap.add_argument("--run", choices=tuple(RECORDS), default="eager",
                    help="eager steps, or steps with torch.compile(model) inside (default: eager)")
    ap.add_argument("--competitors", action="store_true",
                    help="gpusim beside MemTracker and RuntimeEstimator on the steps they ran on")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    if a.competitors:
        out = {g: competitors(a.results, g) for g in a.gpu or ["h100", "h200"]}
        print(json.dumps({g: v for g, v in out.items() if v}, indent=1))
        return 0
    report = score(a.results, a.gpu or ["h100", "h200"], a.cases, progress=True, run=a.run)
    print(json.dumps(report, indent=1) if a.json else text(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
