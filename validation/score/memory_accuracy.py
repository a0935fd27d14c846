"""Memory accuracy against fresh-process records (``validation/measure/fresh_memory.py``).

The zoo harness measures many models in one process: its allocated peaks are exact
measurements, but what the caching allocator *reserves* there depends on the free parts of
other cached models' segments. ``<gpu>/fresh/<kind>.jsonl`` measures each case in a new
process (model built on the CPU, moved with ``module.to("cuda", dtype)``), so every
figure is a property of the model alone. Per case, predicted (:mod:`gpusim.sim.memory`) against
measured, absolute % error:

- ``moved``: reserved once the weights and inputs are on the GPU;
- ``first``: a fresh process's first call, reserved growth (BLAS workspaces included);
- ``allocated`` / ``reserved``: a later call after ``torch.cuda.empty_cache()``, peak
  above the pre-call figures (the zoo records' protocol without other models cached).

Compiled records skip ``first`` (compilation allocates during it).
"""

from __future__ import annotations

import os

from gpusim.hw.spec import calibrated_name, load_spec
from validation.records.store import read_records
from validation.records.stats import _cell, _stats, ape, by_run_family

#: record files of ``<gpu>/fresh/``: (file stem, run kind)
FRESH_FILES = {"eager": "eager", "compiled": "compiled", "holdout_eager": "eager"}
METRICS = ("allocated", "reserved", "first", "moved")


def load_fresh(results_dir: str, gpu: str, stem: str) -> list[dict]:
    """The measured cases of ``<results_dir>/<gpu>/fresh/<stem>.jsonl[.gz]`` (failed ones
    left out; the records are stored gzipped)."""
    path = os.path.join(results_dir, gpu, "fresh", f"{stem}.jsonl")
    rows = read_records(path) or read_records(path + ".gz")
    return [r for r in rows if "error" not in r]


def fresh_rows(records: list[dict], spec) -> list[dict]:
    """One row per fresh record: predicted and measured bytes of each metric."""
    from validation.score.lowered import record_memory
    rows = []
    for r in records:
        est = record_memory(r, r["run"], spec)
        row = {"case": r["case_id"], "model": r["model"], "family": r["family"], "run": r["run"],
               "allocated": (est.peak_bytes, r["clean"]["peak_allocated"]),
               "reserved": (est.peak_reserved_bytes, r["clean"]["peak_reserved"]),
               "moved": (est.baseline_reserved_bytes, r["build"]["reserved"])}
        if r["run"] == "eager":
            row["first"] = (est.first_call_reserved_bytes, r["first"]["peak_reserved"])
        rows.append(row)
    return rows


def fresh_summary(rows: list[dict]) -> dict:
    """``{run: {family|"all": {metric: stats}}}`` (a zero measurement has no percentage)."""
    return by_run_family(rows, lambda sel: {m: _stats([ape(*r[m]) for r in sel
                                                       if m in r and r[m][1]])
                                            for m in METRICS})


def fresh_report(results_dir: str, gpus) -> dict:
    """``{gpu: {"zoo": summary, "holdout": summary, "rows": rows}}`` for every GPU with
    fresh-process records (the GPU's calibrated spec)."""
    out = {}
    for gpu in gpus:
        name = calibrated_name(gpu)
        spec = load_spec(name) if name else None
        zoo = load_fresh(results_dir, gpu, "eager") + load_fresh(results_dir, gpu, "compiled")
        held = load_fresh(results_dir, gpu, "holdout_eager")
        if not zoo and not held:
            continue
        zr, hr = fresh_rows(zoo, spec), fresh_rows(held, spec)
        out[gpu] = {"zoo": fresh_summary(zr), "holdout": fresh_summary(hr), "rows": zr + hr}
    return out


def fresh_markdown(rep: dict) -> str:
    lines = ["| GPU | models | run | family | cases | allocated peak | reserved peak | "
             "first call, reserved | reserved after the move |",
             "|---|---|---|---|---|---|---|---|---|"]
    for gpu, e in rep.items():
        for which in ("zoo", "holdout"):
            for run, fams in e[which].items():
                for fam, s in fams.items():
                    if which == "holdout" and fam != "all":
                        continue
                    n = (s["allocated"] or {}).get("n", 0)
                    lines.append(f"| {gpu} | {which} | {run} | {fam} | {n} | "
                                 + " | ".join(_cell(s[m]) for m in METRICS) + " |")
    return "\n".join(lines)
