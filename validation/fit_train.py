"""Fitting the training kernel classes on the training-step records.

``python3 -m validation.fit_train [--gpu h100] [--results validation/results]``

Lab code: reads ``<results>/<gpu>/train.jsonl.gz`` (written by ``validation.train_run``:
one row per measured step with the profiler's kernel list per phase), rebuilds each scored
eager step as :mod:`validation.train_accuracy` does, and fits each class as a fraction of a
datasheet figure, with leave-one-family-out (cnn, vit, encoder, decoder, encdec) scores:

* ``mta_efficiency``: ATen's ``multi_tensor_apply_kernel`` (foreach and fused optimizers)
  streams the op's bytes at this fraction of the DRAM bandwidth. gpusim's law per optimizer
  op: the first launch ``kernel_fixed_us + bytes / (eff x bandwidth)``, each further launch
  (:func:`gpusim.train_ops.mta_launches`) at ``kernel_min_us``; so per step
  ``eff = bytes / ((measured - ops x fixed - extra launches x min) x bandwidth)``, the median
  over steps. The records' optimizer phase holds only these kernels.

Prints each figure as a spec line (:func:`gpusim.hardware.figure_line`). The predictor never
imports this module.
"""

from __future__ import annotations

import argparse
import os
import sys

from gpusim.hardware import figure_line, spec_for
from validation.records import read_records
from validation.stats import _stats, ape
from validation.train_accuracy import RESULTS, amp_supported, usable

FAMILIES = ("cnn", "vit", "encoder", "decoder", "encdec")
DATE = "2026-11-25"


def _median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if xs else None


def predicted_kernels(rec: dict, gpu: str) -> list[dict]:
    """gpusim's kernels of record ``rec``'s step: phase, class, role and bytes of each."""
    from gpusim import predict
    from gpusim.step import standard_step
    kw = {"amp": rec.get("amp")} if rec.get("amp") else {}
    fn, args = standard_step(rec["model"], "float32", rec["sizes"], rec["optimizer"], **kw)
    p = predict(fn, args, gpu=gpu)
    g = p.graph.g
    return [{"phase": g.nodes[k.ops[0]].get("phase", "forward"), "variant": k.variant,
             "role": k.role, "bytes": float(e.bytes), "us": float(e.us)}
            for k, e in zip(p.lowering.kernels, p.kernels)]


def mta_point(rec: dict, kernels: list[dict]) -> dict | None:
    """One step's optimizer: its family, measured multi-tensor-apply time, and gpusim's
    ops (first launches), extra launches and bytes."""
    meas = sum(k["us"] for k in rec.get("kernels") or []
               if k.get("phase") == "optimizer" and "multi_tensor_apply" in k.get("name", ""))
    opt = [k for k in kernels if k["phase"] == "optimizer"]
    ops = [k for k in opt if k["variant"] == "mta"]
    if not meas or not ops:
        return None
    extra = sum(1 for k in opt if k["role"] == "aux" and not k["bytes"])
    return {"case_id": rec.get("case_id"), "family": rec.get("family"), "us": meas,
            "ops": len(ops), "extra": extra, "bytes": sum(k["bytes"] for k in ops)}


def mta_us(p: dict, eff: float, spec) -> float:
    """gpusim's multi-tensor-apply time of point ``p`` at fraction ``eff``."""
    return (p["ops"] * spec.kernel_fixed_us + p["extra"] * spec.kernel_min_us
            + p["bytes"] / (eff * spec.bandwidth) * 1e6)


def fit_mta(points: list[dict], spec) -> float | None:
    effs = []
    for p in points:
        body = p["us"] - p["ops"] * spec.kernel_fixed_us - p["extra"] * spec.kernel_min_us
        if body > 0:
            effs.append(min(1.0, p["bytes"] / (body * spec.bandwidth) * 1e6))
    m = _median(effs)
    return None if m is None else round(m, 4)


def leave_family_out(points: list[dict], spec, fit, law) -> dict:
    """Per held-out family: the figure fitted on the other families and the median / p90
    absolute % error of ``law`` on the held-out steps; ``all``: in-sample."""
    out = {}
    for fam in FAMILIES + ("all",):
        train = [p for p in points if fam == "all" or p["family"] != fam]
        test = [p for p in points if fam == "all" or p["family"] == fam]
        fig = fit(train, spec)
        if not test or fig is None:
            continue
        out[fam] = {"figure": fig, **_stats([ape(law(p, fig, spec), p["us"]) for p in test])}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", default=RESULTS)
    ap.add_argument("--gpu", default="h100")
    a = ap.parse_args(argv)
    spec = spec_for(a.gpu)
    amp = amp_supported()
    path = os.path.join(a.results, a.gpu, "train.jsonl.gz")
    points, gpu_name = [], None
    for rec in read_records(path):
        if usable(rec, amp) is None:
            p = mta_point(rec, predicted_kernels(rec, a.gpu))
            if p:
                points.append(p)
                gpu_name = gpu_name or (rec.get("env") or {}).get("gpu_name")
                print(p["case_id"], file=sys.stderr, flush=True)
    lofo = leave_family_out(points, spec, fit_mta, mta_us)
    for fam, s in lofo.items():
        print(f"# mta_efficiency held out {fam:<8} figure {s['figure']:.4f}  median {s['median']:5.1f}%"
              f"  p90 {s['p90']:5.1f}%  (n={s['n']})")
    ref = (f"{gpu_name}, {DATE}, validation/fit_train.py on "
           f"validation/results/{a.gpu}/train.jsonl.gz")
    print(figure_line("mta_efficiency", lofo["all"]["figure"], "measured", ref))
    return 0


if __name__ == "__main__":
    sys.exit(main())
