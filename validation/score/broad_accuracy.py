"""Accuracy on the broad sample: 127 hash-sampled models run once on an H100 under AMP.

``python3 -m validation.score.broad_accuracy [--gpu h100] [--results validation/results]
[--cached] [--json] [--rows]``

Scores ``<results>/<gpu>/broad.jsonl.gz`` (written on a GPU by :mod:`validation.measure.broad_run`:
timm models sampled by a name hash and Hugging Face models built from transformers' config
classes, one batch each, eager, fp32 weights under ``torch.autocast("cuda", float16)``).
Each row is re-captured as it ran (:func:`validation.records.store.record_graph`: ``amp``, the
row's ``sizes`` after any batch halving, ``hfcfg:`` models from the row's own
``hf_config``) and predicted on the GPU's calibrated spec and on its datasheet spec:
device time (predicted ``device_us`` against the measured kernel sum), kernel count and
the activation peak above the pre-call baseline, by family; a model gpusim cannot capture
is listed with its one-line reason.

The sample is split by a stable hash of the model name (:func:`half`) into a *dev* half
(the rows looked at to find missing rules) and a *held* half (reported only): a rule
found on the dev half that helps the held half is a general rule, not a fit.

Capturing 127 models takes minutes, so a run writes its predictions next to the records
(``<results>/<gpu>/broad_predictions.json``, :func:`write_predictions`); the docs and the
guard test (``tests/test_broad_accuracy.py``) score that file (``--cached``), and the
test re-captures a few rows to prove the file is current.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys

from gpusim.hw.spec import calibrated_name, datasheet_name, load_spec
from validation.records.store import read_records, run_set
from validation.records.stats import FAMILIES, _cell, _stats, ape

RUN_SET = "broad"
RESULTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "results")
HALVES = ("dev", "held")
BROAD_FAMILIES = FAMILIES + ("other",)


def half(model: str) -> str:
    """``"dev"`` or ``"held"``: the last bit of the sha1 of ``"split:" + model`` (not the
    sampling hash, :func:`validation.measure.broad_run.name_hash`, whose lowest values chose the
    sample)."""
    return HALVES[int(hashlib.sha1(f"split:{model}".encode()).hexdigest(), 16) & 1]


def predictions_path(results_dir: str, gpu: str) -> str:
    return os.path.join(results_dir, gpu, "broad_predictions.json")


def _one_line(e: BaseException) -> str:
    msg = str(e).strip().splitlines()
    return f"{type(e).__name__}: {msg[0][:160] if msg else ''}"


def predict_row(rec: dict, specs: dict) -> dict:
    """One record's predictions: ``{"case", "model", "family", "half", measured figures,
    "pred": {spec label: {"device_us", "kernels"}}, "pred_peak"}``, or with ``"failed"``
    (the capture's or prediction's one-line reason)."""
    from gpusim.predict.pipeline import lower
    from gpusim.sim.memory import simulate_memory
    from gpusim.predict.pipeline import predict
    from validation.records.store import record_graph
    mem = rec.get("memory") or {}
    row = {"case": rec["case_id"], "model": rec["model"],
           "family": rec["family"] if rec["family"] in BROAD_FAMILIES else "other",
           "half": half(rec["model"]), "meas_us": rec["kernel_sum_us"],
           "meas_kernels": rec["kernel_count"],
           "meas_peak": mem.get("peak_allocated_above_pre_call")}
    try:
        g = record_graph(rec)
        row["pred"] = {}
        for label, spec in specs.items():
            p = predict(g, gpu=spec, mode="eager")
            row["pred"][label] = {"device_us": round(p.device_us, 3), "kernels": p.kernel_count}
        low = lower(g, "eager", spec=next(iter(specs.values())))
        row["pred_peak"] = simulate_memory(low, spec=next(iter(specs.values()))).peak_bytes
    except Exception as e:  # noqa: BLE001 - one model gpusim cannot take is a listed failure
        row.pop("pred", None)
        row["failed"] = _one_line(e)
    return row


def spec_names(gpu: str) -> dict:
    """``{"calibrated": name, "datasheet": name}`` (the calibrated one where it exists)."""
    out = {}
    if calibrated_name(gpu):
        out["calibrated"] = calibrated_name(gpu)
    out["datasheet"] = datasheet_name(gpu)
    return out


def predict_records(results_dir: str, gpu: str, progress=None) -> dict:
    """``{"gpu", "specs", "rows"}``: every measured broad row of ``gpu`` predicted."""
    recs = [r for r in read_records(run_set(results_dir, gpu, RUN_SET))
            if not r.get("failed") and r.get("kernel_sum_us")]
    names = spec_names(gpu)
    specs = {label: load_spec(n) for label, n in names.items()}
    rows = []
    for i, r in enumerate(recs):
        rows.append(predict_row(r, specs))
        if progress:
            progress(i + 1, len(recs), rows[-1])
    return {"gpu": gpu, "specs": names, "rows": rows}


def write_predictions(path: str, preds: dict) -> str:
    from gpusim.util.atomic import atomic_write
    atomic_write(path, json.dumps(preds, indent=0, sort_keys=True) + "\n")
    return path


def load_predictions(results_dir: str, gpu: str) -> dict | None:
    p = predictions_path(results_dir, gpu)
    if not os.path.exists(p):
        return None
    with open(p) as f:
        return json.load(f)


def _signed_median(xs: list[float]) -> float | None:
    import numpy as np
    return float(np.median(xs)) if xs else None


def summary(rows: list[dict], label: str) -> dict:
    """``{"device", "kernels", "peak"}`` stats (:func:`validation.records.stats._stats`) of the
    predicted rows on spec ``label``, and ``signed_device`` (median of (pred - meas) /
    meas, percent: > 0 predicts slower)."""
    ok = [r for r in rows if "pred" in r]
    return {"device": _stats([ape(r["pred"][label]["device_us"], r["meas_us"]) for r in ok]),
            "kernels": _stats([ape(r["pred"][label]["kernels"], r["meas_kernels"]) for r in ok]),
            "peak": _stats([ape(r["pred_peak"], r["meas_peak"]) for r in ok
                            if r.get("meas_peak")]),
            "signed_device": _signed_median([100 * (r["pred"][label]["device_us"] / r["meas_us"]
                                                    - 1) for r in ok])}


def broad_report(preds: dict) -> dict:
    """``{"records", "failed": [(case, reason)], spec label: {half|"all": {family|"all":
    summary}}}``."""
    rows = preds["rows"]
    rep = {"records": len(rows), "specs": preds["specs"],
           "failed": [(r["case"], r["failed"]) for r in rows if r.get("failed")]}
    for label in preds["specs"]:
        rep[label] = {}
        for h in HALVES + ("all",):
            sel = [r for r in rows if h in ("all", r["half"])]
            fams = [f for f in BROAD_FAMILIES if any(r["family"] == f for r in sel)] + ["all"]
            rep[label][h] = {f: summary([r for r in sel if f in ("all", r["family"])], label)
                             for f in fams}
    return rep


def broad_markdown(rep: dict) -> str:
    """The docs' table: per spec, half and family: cases, device time, kernel count and
    peak (median / p90 absolute error) and the signed device median; then failures."""
    lines = ["| spec | half | family | cases | device time med / p90 | signed device med | "
             "kernel count med / p90 | activation peak med / p90 |",
             "|---|---|---|---|---|---|---|---|"]
    for label in rep["specs"]:
        for h, fams in rep[label].items():
            for fam, s in fams.items():
                n = (s["device"] or {}).get("n", 0)
                sd = "-" if s["signed_device"] is None else f"{s['signed_device']:+.1f}%"
                lines.append(f"| {label} | {h} | {fam} | {n} | {_cell(s['device'])} | {sd} | "
                             f"{_cell(s['kernels'])} | {_cell(s['peak'])} |")
    if rep["failed"]:
        lines += ["", f"Not predicted ({len(rep['failed'])}):", ""]
        lines += [f"- `{c}`: {why}" for c, why in rep["failed"]]
    return "\n".join(lines)


def _line(label: str, s: dict) -> str:
    d, k, p = s["device"], s["kernels"], s["peak"]
    if not d:
        return f"  {label:30s} -"
    return (f"  {label:30s} n={d['n']:3d} device {d['median']:5.1f}% / {d['p90']:5.1f}% "
            f"(signed {s['signed_device']:+5.1f}%)  kernels {_cell(k):>15s}  peak {_cell(p)}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m validation.score.broad_accuracy")
    ap.add_argument("--gpu", default="h100")
    ap.add_argument("--results", default=RESULTS)
    ap.add_argument("--cached", action="store_true",
                    help="score the stored predictions (broad_predictions.json) instead of "
                         "re-capturing every model and rewriting them")
    ap.add_argument("--json", action="store_true", help="print the report as JSON")
    ap.add_argument("--rows", action="store_true", help="also print every model's figures")
    a = ap.parse_args(argv)
    if not os.path.exists(run_set(a.results, a.gpu, RUN_SET)):
        print(f"no broad records for {a.gpu} ({run_set(a.results, a.gpu, RUN_SET)}): "
              f"measure them with python3 -m validation.measure.broad_run", file=sys.stderr)
        return 1
    if a.cached:
        preds = load_predictions(a.results, a.gpu)
        if preds is None:
            print(f"no stored predictions ({predictions_path(a.results, a.gpu)}): run "
                  f"python3 -m validation.score.broad_accuracy without --cached", file=sys.stderr)
            return 1
    else:
        def progress(i, n, row):
            print(f"[{i}/{n}] {row['case']}{' FAILED' if row.get('failed') else ''}",
                  file=sys.stderr, flush=True)
        preds = predict_records(a.results, a.gpu, progress)
        write_predictions(predictions_path(a.results, a.gpu), preds)
    rep = broad_report(preds)
    if a.json:
        print(json.dumps(rep, indent=1))
        return 0
    print(f"{a.gpu} broad sample (AMP fp16, eager): {rep['records']} records, "
          f"{len(rep['failed'])} not predicted")
    for label in rep["specs"]:
        for h, fams in rep[label].items():
            for fam, s in fams.items():
                print(_line(f"{label} {h} {fam}", s))
    for c, why in rep["failed"]:
        print(f"  failed {c}: {why}")
    if a.rows:
        lab = next(iter(rep["specs"]))
        for r in sorted(preds["rows"], key=lambda r: r["case"]):
            if "pred" in r:
                p = r["pred"][lab]
                print(f"  {r['half']:4s} {r['family']:7s} {r['model']:42s} pred {p['device_us']:9.0f}"
                      f" meas {r['meas_us']:9.0f} us ({100 * (p['device_us'] / r['meas_us'] - 1):+6.1f}%)"
                      f"  kernels {p['kernels']:5d}/{r['meas_kernels']:5d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
