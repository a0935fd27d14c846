"""Memory of zoo models in a fresh process each: what a user's own script sees.

The zoo harness measures many models in one process, keeping other models' weights cached,
so the caching allocator's *reserved* memory there depends on the run's history (the free
tails of other models' segments). This script measures each case in a new Python process
that builds the model on the CPU (fp32, as a checkpoint would be loaded), moves it to the
GPU with ``module.to("cuda", dtype)`` and makes its inputs there, so the allocator holds
only this model's weights and inputs. Per case it records (bytes):

- ``build``: allocated / reserved after the move and the inputs, and the segments;
- ``first``: the first call's peak allocated / reserved above ``build`` (lazy library
  workspaces included) and what it leaves allocated (cuBLAS workspaces);
- ``steady``: a second call's peak reserved above what the first left (the cache kept);
- ``clean``: after ``gc.collect(); torch.cuda.empty_cache()``, one more call's peak
  allocated / reserved above the pre-call figures: the zoo records' protocol, without
  other models in the cache; with the pre-call segments (size, allocated bytes, free
  blocks) for diagnosis.

``--run compiled`` does the same for ``torch.compile(model)`` after three warm-up calls
(compile-time allocations are in ``first`` then; ``clean`` is the steady call).

Usage (on the GPU machine; one JSON line per case, written as each finishes):

    python3 validation/measure/fresh_memory.py --run eager --jobs 8 --deadline 240 OUT.jsonl.gz
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def cases(run: str, gpu: str = "h100", sub: str = "zoo") -> list[dict]:
    """The cases of the ``gpu``'s records (``sub``: zoo or holdout) of this run kind (model,
    sizes, dtype, layout)."""
    from validation.records.store import read_records, run_set
    out = []
    for r in read_records(run_set(os.path.join(ROOT, "validation", "results"), gpu, sub)):
        if r.get("run") == run:
            out.append({k: r[k] for k in ("case_id", "model", "family", "sizes", "dtype",
                                           "channels_last", "run")})
    return out


def _segments() -> list[list]:
    import torch
    segs = []
    for s in torch.cuda.memory_snapshot():
        free = [b["size"] for b in s["blocks"] if b["state"] == "inactive"]
        segs.append([s["segment_type"][0], s["total_size"], s["allocated_size"], free])
    return segs


def build(case: dict):
    """The case's model and inputs on the GPU, as a user's script makes them: built on the
    CPU in fp32 (a loaded checkpoint), moved with ``module.to("cuda", dtype)``."""
    import torch

    from gpusim.models import zoo
    dt = getattr(torch, case["dtype"])
    torch.manual_seed(0)
    torch.cuda.init()
    mod, _ = zoo.build(case["model"], device="cpu", dtype=torch.float32,
                       channels_last=case["channels_last"], **case["sizes"])
    torch.cuda.synchronize()
    mod = mod.to(device="cuda", dtype=dt)
    args = zoo.inputs(case["model"], mod, device="cuda", dtype=dt,
                      channels_last=case["channels_last"], **case["sizes"])
    torch.cuda.synchronize()
    return mod, args


def one(case: dict) -> dict:
    """Measure one case in this (fresh) process."""
    import gc

    import torch

    from validation.measure import timing as measure
    mod, args = build(case)
    rec = dict(case)
    rec["env"] = measure.env_info()
    a0, r0 = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
    rec["build"] = {"allocated": a0, "reserved": r0, "segments": _segments()}
    fn = mod
    with torch.no_grad():
        if case["run"] == "compiled":
            fn = torch.compile(mod)
        torch.cuda.reset_peak_memory_stats()
        out = fn(*args)
        torch.cuda.synchronize()
        del out
        a1, r1 = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
        rec["first"] = {"peak_allocated": torch.cuda.max_memory_allocated() - a0,
                        "peak_reserved": torch.cuda.max_memory_reserved() - r0,
                        "left_allocated": a1 - a0, "left_reserved": r1 - r0}
        for _ in range(2):
            out = fn(*args)
        torch.cuda.synchronize()
        del out
        a1, r1 = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
        torch.cuda.reset_peak_memory_stats()
        out = fn(*args)
        torch.cuda.synchronize()
        del out
        rec["steady"] = {"peak_allocated": torch.cuda.max_memory_allocated() - a1,
                         "peak_reserved": torch.cuda.max_memory_reserved() - r1}
        gc.collect()
        torch.cuda.empty_cache()
        a2, r2 = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
        segs = _segments()
        torch.cuda.reset_peak_memory_stats()
        out = fn(*args)
        torch.cuda.synchronize()
        del out
        rec["clean"] = {"pre_allocated": a2, "pre_reserved": r2, "segments": segs,
                        "peak_allocated": torch.cuda.max_memory_allocated() - a2,
                        "peak_reserved": torch.cuda.max_memory_reserved() - r2}
    return rec


def _child(case_json: str) -> int:
    case = json.loads(case_json)
    try:
        rec = one(case)
    except Exception as e:  # noqa: BLE001  (one line per failed case, the run goes on)
        rec = dict(case, error=f"{type(e).__name__}: {str(e).splitlines()[0][:300]}")
    print("RECORD " + json.dumps(rec))
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--run", default="eager", choices=("eager", "compiled"))
    p.add_argument("--gpu", default="h100", help="whose zoo records give the cases")
    p.add_argument("--jobs", type=int, default=8)
    p.add_argument("--deadline", type=float, default=240.0, help="seconds; cases not started by then are skipped")
    p.add_argument("--sub", default="zoo", help="records folder: zoo or holdout")
    p.add_argument("--skip", help="a JSON list of case ids already measured")
    p.add_argument("--child", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        return _child(a.child)
    todo = cases(a.run, a.gpu, a.sub)
    if a.skip:
        with open(a.skip) as fh:
            done = set(json.load(fh))
        todo = [c for c in todo if c["case_id"] not in done]
    t0 = time.time()
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))

    def run(case):
        if time.time() - t0 > a.deadline:
            return dict(case, error="skipped: deadline")
        left = max(30.0, a.deadline + 120 - (time.time() - t0))
        try:
            cp = subprocess.run([sys.executable, __file__, "x", "--child", json.dumps(case)],
                                capture_output=True, text=True, env=env, timeout=left)
        except subprocess.TimeoutExpired:
            return dict(case, error="timeout")
        line = next((ln for ln in cp.stdout.splitlines() if ln.startswith("RECORD ")), None)
        if line is None:
            return dict(case, error=f"no record (rc {cp.returncode}): {cp.stderr.strip()[-300:]}")
        return json.loads(line[7:])

    from validation.records.store import append_record, write_records
    n_ok = 0
    write_records(a.out, [])            # OUT.jsonl.gz: the records format; a row per case as it ends
    with cf.ThreadPoolExecutor(a.jobs) as ex:
        for rec in ex.map(run, todo):
            append_record(a.out, rec)
            n_ok += "error" not in rec
            print(f"{rec['case_id']}: {rec.get('error') or 'ok'} ({time.time() - t0:.0f} s)", flush=True)
    print(f"{n_ok} of {len(todo)} cases measured in {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
