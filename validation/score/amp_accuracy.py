"""Accuracy on the zoo run under automatic mixed precision (``torch.autocast``).

``python3 -m validation.score.amp_accuracy [--gpu h100] [--results validation/results] [--json]``

Scores ``<results>/<gpu>/zoo_amp.jsonl.gz``, written on a GPU by
``python3 -m validation.measure.zoo_run --amp main --out .../zoo_amp.jsonl.gz``: fp32 models run
under ``torch.autocast("cuda", dtype)``. Each row is re-captured with ``amp=`` (the
record's ``amp`` field, :func:`validation.records.store.record_graph`) and scored as the fp32
and 16-bit zoo rows are (:func:`validation.score.zoo_accuracy.case_rows` and
:func:`~validation.score.zoo_accuracy.memory_rows`): device time, kernel count and the
activation peak, whose cached weight casts AMP adds (:mod:`gpusim.capture.amp`).
"""

from __future__ import annotations

import argparse
import json
import sys

from gpusim.hw.spec import calibrated_name, datasheet_name, load_spec
from validation.records.store import load_zoo_records
from validation.score.zoo_accuracy import case_rows, memory_rows, memory_summary
from validation.score.zoo_accuracy import _by_family

RUN_SET = "zoo_amp"


def amp_report(results_dir: str, gpu: str) -> dict | None:
    """``{"records", "spec", "device": by family, "memory": by family}`` for ``gpu``'s AMP
    rows (None when it has none)."""
    recs = load_zoo_records(results_dir, gpu, RUN_SET)
    if not recs:
        return None
    name = calibrated_name(gpu) or datasheet_name(gpu)
    spec = load_spec(name)
    rows = case_rows(recs, spec)
    for row, r in zip(rows, recs):
        row["amp"] = r.get("amp")
    return {"records": len(recs), "spec": name, "device": _by_family(rows),
            "memory": memory_summary(memory_rows(recs, spec))}


def _line(label: str, s: dict | None) -> str:
    if not s:
        return f"  {label:24s} -"
    return f"  {label:24s} n={s['n']:3d} median {s['median']:5.1f}%  p90 {s['p90']:5.1f}%"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m validation.score.amp_accuracy")
    ap.add_argument("--gpu", default="h100")
    ap.add_argument("--results", default="validation/results")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    rep = amp_report(a.results, a.gpu)
    if rep is None:
        print(f"no AMP records for {a.gpu} ({a.results}/{a.gpu}/{RUN_SET}.jsonl.gz)",
              file=sys.stderr)
        return 1
    if a.json:
        print(json.dumps(rep, indent=1, default=str))
        return 0
    print(f"{a.gpu} AMP zoo: {rep['records']} records, spec {rep['spec']}")
    for run, fams in rep["device"].items():
        if run == "rows":
            continue
        for fam, s in fams.items():
            print(_line(f"{run} {fam} device", s["device"]))
            print(_line(f"{run} {fam} kernels", s["kernels"]))
    for run, fams in rep["memory"].items():
        for fam, s in fams.items():
            print(_line(f"{run} {fam} peak", s["peak"]))
    for r in rep["device"]["rows"]:
        print(f"  {r['case']:48s} pred {r['pred_us']:9.1f} us  meas {r['meas_us']:9.1f} us  "
              f"kernels {r['pred_kernels']}/{r['meas_kernels']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
