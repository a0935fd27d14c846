"""What the microbenchmark sweeps share: their dtypes and the timing of one point."""

from __future__ import annotations

import json
import time

import torch


DTYPES = ("float32", "float16", "bfloat16")


def _t(shape, dtype, cl=False, dev="cuda"):
    x = torch.randn(*shape, device=dev, dtype=getattr(torch, dtype))
    if cl and x.dim() == 4:
        x = x.contiguous(memory_format=torch.channels_last)
    return x


def budgeted_sweep(out: str, env: dict, todo, run, describe, label: str, budget_s: float,
                   name=None) -> int:
    """Write ``env``, then ``run(point)``'s record for each point, flushed one by one, starting no
    point after ``budget_s`` seconds (those listed as ``not_reached`` in a closing ``summary`` line,
    each as ``name(point)``, else the point itself); prints each point's kernels as
    ``describe(point)``. Returns the points measured."""
    t_start, done, not_reached = time.time(), 0, []
    with open(out, "w") as f:
        f.write(json.dumps(env) + "\n")
        f.flush()
        for p in todo:
            if time.time() - t_start > budget_s:
                not_reached.append(name(p) if name else p)
                continue
            rec = run(p)
            f.write(json.dumps(rec) + "\n")
            f.flush()
            done += 1
            ks = " ".join("%s=%.1f" % (k["name"][:40], k["us"]) for k in rec.get("kernels") or [])
            print(f"{describe(p)} {rec.get('failed') or ks}  ({time.time() - t_start:.0f}s)", flush=True)
        f.write(json.dumps({"kind": "summary", "done": done, "not_reached": not_reached,
                            "elapsed_s": round(time.time() - t_start, 1)}) + "\n")
    print(f"{label}: {done} points, {len(not_reached)} not reached, {time.time() - t_start:.0f} s", flush=True)
    return done


def profiled_run(kind: str, make):
    """``run(point, reps, device)`` for :func:`sweep_main`: the point's record (``kind``, eager) with
    the kernels of ``make(point, device)``'s ``(fn, args)`` profiled ``reps`` times."""
    from validation.measure import timing as measure
    return lambda p, reps, device: measure.profiled_record(dict(p, kind=kind, mode="eager"),
                                                           lambda: make(p, device), reps, device)


def sweep_main(argv, doc: str, name: str, points, run, describe, budget_s: float) -> int:
    """The command line every budgeted profiler sweep shares (``python3 -m validation.measure.<name>
    --out FILE.jsonl [--budget-s N] [--reps N] [--device cpu]``; ``cpu``: a dry run of the sweep's code
    at ``points(small=True)``): the environment line carries the command and the method (``doc``'s
    fourth paragraph), then :func:`budgeted_sweep` over ``points`` with ``run(point, reps, device)``."""
    import argparse
    import sys
    from validation.measure import timing as measure
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="JSONL file to write")
    ap.add_argument("--budget-s", type=float, default=budget_s, help="start no point after this many seconds")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--device", default="cuda", help="cpu: a dry run of the sweep's code (tiny shapes)")
    a = ap.parse_args(argv)
    if a.device == "cuda":
        measure.require_cuda()
    env = {"kind": "environment", **(measure.env_info() if a.device == "cuda" else {"device": a.device}),
           "command": f"python3 -m validation.measure.{name} " + " ".join(sys.argv[1:] if argv is None else argv),
           "method": doc.split("\n\n")[3].strip()}
    budgeted_sweep(a.out, env, points(small=a.device != "cuda"), lambda p: run(p, a.reps, a.device), describe,
                   name, a.budget_s)
    return 0
