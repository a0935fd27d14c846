"""Eager end-to-end accuracy on the host-breakdown leases (validation/results/h100/host/).

    python validation/host_accuracy.py [LEASE_TAG ...]     # default: every breakdown file

For each case of ``<lease>-breakdown.jsonl``: gpusim's eager end-to-end prediction with the
calibrated H100 spec and that lease's own host figures (``<lease>.toml``), against the
measured steady-state wall; the same with the per-module Python term replaced by the
Python the case really ran outside torch calls (``python_us``, measured on the device):
how much of the error the model's own Python explains; the same with the lease's host
figures scaled by the case's own eager-add probe (how much is the host's speed drifting
within the lease); and both. Then gpusim's own estimate of the model's Python
(``capture(..., python=True)``, :mod:`gpusim.pytime`: clocked on this machine, in
module-call equivalents x the lease's ``eager_module_us``): its error against the
measured ``python_us``, and the eager end to end it gives. Prints absolute % error,
median / p90, by family and overall.

``--loco``: the Python estimate's held-out error: ``pytime.PY_SCALE`` refitted on the
other families (both leases), and on the other lease only.
"""

from __future__ import annotations

import glob
import json
import os
import sys

import torch

import math
import statistics

from gpusim import capture, predict, pytime, zoo
from gpusim.hardware import calibrated_name, load_spec, with_host
from validation.stats import _cell, _stats, ape

#: host figures that scale with the host's speed (per-op dispatch, views, launches, modules)
SCALED = ("eager_op_us", "eager_library_op_us", "eager_view_us", "kernel_launch_us",
          "eager_module_us", "sync_us")
HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "h100", "host")


def lease_spec(tag: str):
    return with_host(load_spec(calibrated_name("h100")), load_spec(os.path.join(HERE, f"{tag}.toml")))


def rows(tag: str) -> list[dict]:
    spec = lease_spec(tag)
    out = []
    for line in open(os.path.join(HERE, f"{tag}-breakdown.jsonl")):
        r = json.loads(line)
        if "error" in r:
            continue
        m, args = zoo.build(r["model"], device="meta", dtype=torch.bfloat16, **r["sizes"])
        g = capture(m, args, name=r["model"], python=True)
        p = predict(g, gpu=spec, mode="eager")
        est_py = p.timeline.python_us
        del g.meta["python_calls"]          # the flat per-module-call pricing, as before
        clocked, p = p, predict(g, gpu=spec, mode="eager")
        with_py = max(p.device_us, p.timeline.host_us
                      - g.meta.get("module_calls", 0) * (spec.eager_module_us or 0.0) + r["python_us"])
        # the host's speed when the case ran: its eager-add probe against the calibration's
        ratio = r["probe_before"]["eager_op_us"] / spec.eager_op_us
        scaled = spec.replace(**{k: getattr(spec, k) * ratio for k in SCALED if getattr(spec, k)})
        ps = predict(g, gpu=scaled, mode="eager")
        both = max(ps.device_us, ps.timeline.host_us
                   - g.meta.get("module_calls", 0) * (scaled.eager_module_us or 0.0) + r["python_us"])
        out.append({"model": r["model"], "family": zoo.get(r["model"]).family, "size": r["size"],
                    "wall": r["wall_us"], "pred": p.end_to_end_us, "pred_with_python": with_py,
                    "pred_probe": ps.end_to_end_us, "pred_probe_python": both,
                    "pred_clocked": clocked.end_to_end_us, "python": r["python_us"],
                    "est_python": est_py, "module_us": spec.eager_module_us})
    return out


def summary(rs: list[dict]) -> list[str]:
    lines = ["| family | cases | gpusim eager e2e (flat per module call) | with gpusim's clocked "
             "Python | with the measured Python | host figures scaled by the case's probe | both "
             "| clocked Python vs measured |", "|---|---|---|---|---|---|---|---|"]
    for fam in sorted({r["family"] for r in rs}) + ["all"]:
        sel = [r for r in rs if fam in ("all", r["family"])]
        cells = [_cell(_stats([ape(r[key], r["wall"]) for r in sel]))
                 for key in ("pred", "pred_clocked", "pred_with_python", "pred_probe",
                             "pred_probe_python")]
        cells.append(_cell(_stats([ape(r["est_python"], r["python"]) for r in sel])))
        lines.append(f"| {fam} | {len(sel)} | " + " | ".join(cells) + " |")
    return lines


def held_out(by_tag: dict[str, list[dict]]) -> list[str]:
    """The Python estimate with PY_SCALE refitted without the case's family (on both
    leases), and on the other lease alone: median / p90 absolute error per lease."""
    def units(r):   # the clocked Python before PY_SCALE, in module-call equivalents
        return r["est_python"] / r["module_us"] / pytime.PY_SCALE

    def fit(rows):
        return math.exp(statistics.median(math.log(r["python"] / units(r) / r["module_us"])
                                          for r in rows))
    every = [r for rs in by_tag.values() for r in rs]
    lines = [f"PY_SCALE fitted on every case: {fit(every):.3f} (gpusim.pytime.PY_SCALE = "
             f"{pytime.PY_SCALE})", "",
             "| lease | PY_SCALE fitted on | cases | clocked Python vs measured |", "|---|---|---|---|"]
    for tag, rs in by_tag.items():
        scales = {f: fit([r for r in every if r["family"] != f]) for f in {r["family"] for r in rs}}
        errs = [ape(scales[r["family"]] * units(r) * r["module_us"], r["python"]) for r in rs]
        lines.append(f"| {tag} | the other families | {len(rs)} | {_cell(_stats(errs))} |")
        others = [r for t, rr in by_tag.items() if t != tag for r in rr]
        if others:
            k = fit(others)
            errs = [ape(k * units(r) * r["module_us"], r["python"]) for r in rs]
            lines.append(f"| {tag} | the other lease ({k:.2f}) | {len(rs)} | {_cell(_stats(errs))} |")
    return lines


def main(args):
    loco = "--loco" in args
    tags = [a for a in args if not a.startswith("--")] or sorted(
        os.path.basename(f)[:-len("-breakdown.jsonl")]
        for f in glob.glob(os.path.join(HERE, "*-breakdown.jsonl")))
    by_tag = {}
    for tag in tags:
        by_tag[tag] = rs = rows(tag)
        print(f"\n{tag} (median / p90 absolute error of eager wall per call)")
        print("\n".join(summary(rs)), flush=True)
    if loco:
        print("\nthe clocked Python held out (median / p90 absolute error against python_us)")
        print("\n".join(held_out(by_tag)))


if __name__ == "__main__":
    main(sys.argv[1:])
