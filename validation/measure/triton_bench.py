"""Inductor's Triton kernels over a size sweep: the data the compiled-kernel cost law is fitted on.

``python3 -m validation.measure.triton_bench --out FILE.jsonl [--budget-s 220] [--reps 10] [--only CLS,..]``

Each case of :func:`validation.measure.triton_cases.cases` (pointwise, many-input pointwise,
16-bit transcendental math, persistent, looped and outer reductions) is compiled with
``torch.compile(dynamic=False)`` after ``torch._dynamo.reset()``, warmed up (the compile and
autotuning happen there), then profiled: ``reps`` calls in one profiler session, L2 flushed (a 2x
L2 write) and the GPU synchronised before each call, median device time per kernel over the calls
that launched the modal number of kernels (:func:`validation.measure.timing.profile_call`, as the
zoo's compiled records). Output: JSONL, an environment line (``kind: environment``) then one line
per case (``kind: triton_case``: case, class, function, shapes, dtype, kernels [{name, us}]),
flushed after each case; cases stop starting once ``--budget-s`` seconds have passed (the rest are
listed as ``not_reached`` in a last ``kind: summary`` line), so a run cut short still returns data.
"""

from __future__ import annotations

import argparse
import sys

import torch

from validation.measure import timing as measure
from validation.measure.bench_common import budgeted_sweep
from validation.measure.triton_cases import FUNCS, cases, make_inputs


def run_case(case: dict, reps: int, device: str = "cuda") -> dict:
    """Compile, warm up and profile one case; the record (``failed``: the error, one line)."""
    torch._dynamo.reset()
    return measure.profiled_record(dict(case, kind="triton_case"),
                                   lambda: (torch.compile(FUNCS[case["fn"]], dynamic=False), make_inputs(case, device)),
                                   reps, device, first_key="compile_s")

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="JSONL file to write")
    ap.add_argument("--budget-s", type=float, default=220.0, help="start no case after this many seconds")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--only", default="", help="comma-separated classes (poi,poi_inputs,poi_math,per,red,red_outer)")
    ap.add_argument("--device", default="cuda", help="cpu: a dry run of the sweep's code (no kernels recorded)")
    a = ap.parse_args(argv)
    if a.device == "cuda":
        measure.require_cuda()
    todo = [c for c in cases() if not a.only or c["cls"] in a.only.split(",")]
    env = {"kind": "environment", **(measure.env_info() if a.device == "cuda" else {"device": a.device}),
           "command": "python3 -m validation.measure.triton_bench "
           + " ".join(sys.argv[1:] if argv is None else argv), "method": __doc__.split("\n\n")[2].strip()}
    budgeted_sweep(a.out, env, todo, lambda c: run_case(c, a.reps, a.device), lambda c: f"{c['case']:<40}",
                   "triton_bench", a.budget_s, name=lambda c: c["case"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
