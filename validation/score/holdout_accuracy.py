"""Accuracy on the held-out models (``gpusim.models.zoo.HOLDOUT``): the zoo's scoring on models
and sizes gpusim was never developed or fitted on.

Records: ``validation/results/<gpu>/holdout.jsonl.gz``, written by
``python3 -m validation.measure.zoo_run --holdout`` on a real GPU. Each case is re-captured
on meta tensors from its held-out entry and scored exactly as the zoo is
(:mod:`validation.score.zoo_accuracy`: ``case_rows``, ``summarise``, ``memory_rows``,
``speedup_rows``) with the GPU's calibrated spec. These records are the test set: nothing
may be tuned on them; a change made for them stops them being held out.

``python3 -m validation.score.holdout_accuracy [--results DIR] [--gpu h100]`` prints the
per-case table and the summary.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

from gpusim.hw.spec import calibrated_name, load_spec
from validation.records.store import load_zoo_records
from validation.records.stats import _cell, _stats
from validation.score.zoo_accuracy import (case_rows, kind_host, lease_host, lease_setup, memory_rows, memory_summary,
    speedup_rows, speedup_summary)
from validation.score.zoo_accuracy import _by_family


def holdout_report(results_dir: str, gpu: str = "h100") -> dict:
    """``{"records", "spec", "calibrated": {run: {family|"all": {"device", "kernels"}},
    "rows"}, "memory": {"summary", "rows"}, "speedup": {"rows", "summary"}}`` for the
    held-out records of ``gpu``, predicted with its calibrated spec."""
    recs = load_zoo_records(results_dir, gpu, "holdout")
    name = calibrated_name(gpu)
    spec = load_spec(name)
    # end to end on the records' own host: the lease's host calibration where it ran one
    # beside them (lease_host, lease_setup), else the machine kind's profile
    # (hosts/<datasheet>-host.toml), never the reference host
    rows, by_lease = [], {}
    for r in recs:
        by_lease.setdefault(lease_host(results_dir, gpu, r), []).append(r)
    for path, group in by_lease.items():
        s, host = lease_setup(spec, path) if path else (spec, kind_host(gpu))
        rows += case_rows(group, s, host)
    order = {r["case_id"]: i for i, r in enumerate(recs)}
    rows.sort(key=lambda row: order[row["case"]])
    rep = {"records": len(recs), "spec": name, "calibrated": _by_family(rows)}
    mrows = memory_rows(recs, spec)
    rep["memory"] = {"summary": memory_summary(mrows), "rows": mrows}
    sp = speedup_rows(recs, spec)
    rep["speedup"] = {"rows": sp, "summary": speedup_summary(sp)}
    return rep


def e2e_errors(rows: list[dict]) -> list[float]:
    """Signed % errors of end-to-end time per call (predicted end to end against the
    measured steady-state wall per call), for rows that measured it."""
    return [(r["pred_e2e_us"] - r["meas_wall_us"]) / r["meas_wall_us"] * 100.0
            for r in rows if r.get("meas_wall_us")]


def holdout_markdown(rep: dict) -> str:
    """Summary by run and family, then one line per case (signed errors)."""
    cal = rep["calibrated"]
    lines = ["| run | family | cases | device time med / p90 | kernel count med / p90 |",
             "|---|---|---|---|---|"]
    for run, fams in cal.items():
        if run == "rows":
            continue
        for fam, s in fams.items():
            lines.append(f"| {run} | {fam} | {s['device']['n']} | {_cell(s['device'])} | "
                         f"{_cell(s['kernels'])} |")
    lines += ["", "| run | cases | end to end (wall per call) med / p90 | signed median |",
              "|---|---|---|---|"]
    for run in [k for k in cal if k != "rows"]:
        e = e2e_errors([r for r in cal["rows"] if r["run"] == run])
        if e:
            lines.append(f"| {run} | {len(e)} | {_cell(_stats([abs(x) for x in e]))} | "
                         f"{float(np.median(e)):+.1f}% |")
    mem = rep["memory"]["summary"]
    # (reserved memory: fresh-process records, validation.score.memory_accuracy)
    lines += ["", "| run | peak allocated med / p90 (cases) |", "|---|---|"]
    for run, fams in mem.items():
        s = fams["all"]
        lines.append(f"| {run} | {_cell(s['peak'])} ({(s['peak'] or {}).get('n', 0)}) |")
    sp = rep["speedup"]["summary"]
    if sp:
        lines += ["", "| torch.compile speed-up | cases | error med / p90 | helps-or-hurts right |",
                  "|---|---|---|---|"]
        for key, label in (("device", "device (kernel sums)"), ("e2e", "end to end (wall)")):
            if key in sp:
                s = sp[key]
                lines.append(f"| {label} | {s['n']} | {_cell(s)} | {s['verdict_right']}/{s['n']} |")
    peaks = {r["case"]: r for r in rep["memory"]["rows"]}
    lines += ["", "| case | device us meas / pred | error | kernels meas / pred | peak MiB meas / pred |",
              "|---|---|---|---|---|"]
    for r in cal["rows"]:
        m = peaks.get(r["case"])
        peak = (f"{m['meas_peak'] / 2**20:.0f} / {m['pred_peak'] / 2**20:.0f}" if m else "-")
        lines.append(f"| {r['case']} | {r['meas_us']:.0f} / {r['pred_us']:.0f} | "
                     f"{(r['pred_us'] - r['meas_us']) / r['meas_us'] * 100:+.0f}% | "
                     f"{r['meas_kernels']} / {r['pred_kernels']} | {peak} |")
    return "\n".join(lines)


def holdout_sections(results_dir: str, gpus: list[str]) -> str | None:
    """The held-out tables of every GPU in ``gpus`` that has held-out records, each under its
    own heading (``### H100``), for docs/accuracy.md; None when no GPU has any."""
    parts = []
    for gpu in gpus:
        if not os.path.exists(os.path.join(results_dir, gpu, "holdout.jsonl.gz")):
            continue
        rep = holdout_report(results_dir, gpu)
        parts += [f"### {gpu.upper()} ({rep['records']} records, spec `{rep['spec']}`)", "",
                  holdout_markdown(rep), ""]
    return "\n".join(parts).rstrip() or None


def main(argv=None) -> int:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap = argparse.ArgumentParser(prog="python3 -m validation.score.holdout_accuracy")
    ap.add_argument("--results", default=os.path.join(root, "validation", "results"))
    ap.add_argument("--gpu", default="h100")
    ap.add_argument("--json", default=None, help="also write the report's summaries here")
    a = ap.parse_args(argv)
    rep = holdout_report(a.results, a.gpu)
    print(f"{a.gpu}: {rep['records']} held-out records, spec {rep['spec']}\n")
    print(holdout_markdown(rep))
    if a.json:
        keep = {"records": rep["records"], "spec": rep["spec"],
                "calibrated": {k: v for k, v in rep["calibrated"].items() if k != "rows"},
                "memory": rep["memory"]["summary"], "speedup": rep["speedup"]["summary"]}
        with open(a.json, "w") as f:
            json.dump(keep, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
