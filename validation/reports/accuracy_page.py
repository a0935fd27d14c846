"""``gpusim accuracy``: the accuracy tables printed from the records (classic cases, the zoo, end to end, compile speed-ups) and, with ``--update-readme``, the README's summary and docs/accuracy.md rewritten."""

from __future__ import annotations
import json
import os
import sys
from gpusim.util.errors import UserError
from validation.score.zoo_accuracy import zoo_available, zoo_report
from validation.score.zoo_tables import e2e_markdown, lease_walls_markdown, speedup_markdown, zoo_markdown
from validation.score.accuracy import RESULTS_DIR, accuracy_report, markdown


def main(a) -> int:
    rep = accuracy_report(a.results, a.gpu)
    if not rep:
        raise UserError("no validation records found; run `gpusim validate --out "
                        "validation/results/<gpu>` on a GPU machine first")
    zoo = None
    if not getattr(a, "no_zoo", False) and zoo_available():
        root = a.results or RESULTS_DIR
        zoo = zoo_report(root, a.gpu or sorted(  # every GPU with zoo records, classic or not
            d for d in os.listdir(root) if os.path.exists(os.path.join(root, d, "zoo.jsonl.gz"))))
    if a.json:
        if zoo:
            for gpu, e in zoo.items():
                rep.setdefault(gpu, {})["zoo"] = e
        print(json.dumps(rep, indent=2, default=float))
    else:
        print(full_markdown(rep, zoo))
    if getattr(a, "update_readme", None):
        from validation.reports.docs import (accuracy_page, broad_markdown, published_markdown,
                                     summary_markdown, update_docs)
        holdout = None
        if zoo is not None:
            from validation.score.holdout_accuracy import holdout_sections
            holdout = holdout_sections(a.results or RESULTS_DIR, [g for g in ("h100", "h200") if g in zoo])
        page = update_docs(a.update_readme, summary_markdown(zoo, rep),
                           accuracy_page(full_markdown(rep, zoo), holdout, published_markdown(),
                                         broad_markdown()))
        print(f"updated the accuracy summary in {a.update_readme} and the tables in {page}",
              file=sys.stderr)
    return 0


def full_markdown(rep: dict, zoo: dict | None) -> str:
    """The README block: real models by family first (what users run), then the
    classic fusion cases."""
    parts = []
    if zoo:
        parts += ["**Real models** (torchvision, timm, Hugging Face; whole-model device time = "
                  "kernel sum, and kernel count; no zoo record is used for fitting):", "",
                  zoo_markdown(zoo), "",
                  "**End to end** (steady-state wall per call, calibrated spec with the host "
                  "figures of the lease that measured the records, `gpusim calibrate --host-only` "
                  "in `validation/results/<gpu>/host/`; eager = the eager run beside each "
                  "compiled one, priced with the model's Python counted at capture; the records "
                  "of leases without a host calibration are left out):", "",
                  e2e_markdown(zoo), "",
                  "**Eager end to end on the host leases** (every zoo model in bf16 at its "
                  "default and large size, measured right after that lease's `gpusim calibrate "
                  "--host-only`, `validation/device_host.sh`; calibrated spec with that "
                  "lease's host figures and `eager_forward_factor`; median / p90 absolute "
                  "error):", "", lease_walls_markdown(zoo), "",
                  "**torch.compile's speed-up over eager** (eager measured on the same lease; "
                  "verdict = whether compile helps or hurts):", "", speedup_markdown(zoo), ""]
    parts += ["**Classic fusion cases and small models** (eager, torch.compile, executed "
              "partitions):", "", markdown(rep)]
    return "\n".join(parts)
