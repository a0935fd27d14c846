"""The caching allocator's event trace of one steady call, per case, in a fresh process.

For diagnosing gpusim's memory model: which allocations a call really makes, in order,
with their sizes and the Python line that made them (for torch.compile, the line of
Inductor's generated wrapper, e.g. ``buf3 = empty_strided_cuda(...)``). The case is set
up as ``validation/measure/fresh_memory.py`` does (built on the CPU, ``module.to("cuda", dtype)``),
warmed up with three calls, then ``gc.collect(); torch.cuda.empty_cache()`` and one call
under ``torch.cuda.memory._record_memory_history``. One JSON line per case:
``{"case_id", "run", "env", "events": [[action, size, where], ...]}`` (action: alloc,
free_requested, segment_alloc, ...; ``where``: ``file:line: source`` of the innermost
frame outside torch itself).

    python3 validation/measure/memory_trace.py OUT.jsonl CASE_ID [CASE_ID ...]
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import linecache
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from validation.measure.fresh_memory import ROOT, build, cases  # noqa: E402


def _where(frames: list[dict]) -> str:
    for fr in frames:
        fn = fr.get("filename", "")
        if "/torch/" in fn and "torchinductor" not in fn:
            continue
        src = linecache.getline(fn, fr.get("line", 0)).strip()
        return f"{os.path.basename(fn)}:{fr.get('line')}: {src[:160]}"
    return ""


def one(case: dict) -> dict:
    import gc

    import torch

    from validation.measure import timing as measure
    mod, args = build(case)
    fn = torch.compile(mod) if case["run"] == "compiled" else mod
    with torch.no_grad():
        for _ in range(3):
            out = fn(*args)
        torch.cuda.synchronize()
        del out
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.memory._record_memory_history(max_entries=200000, stacks="python")
        out = fn(*args)
        torch.cuda.synchronize()
        del out
        snap = torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(enabled=None)
    events = [[e["action"], e["size"], _where(e.get("frames", []))]
              for e in snap["device_traces"][0]]
    return dict(case, env=measure.env_info(), events=events)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--child":
        case = json.loads(argv[1])
        try:
            rec = one(case)
        except Exception as e:  # noqa: BLE001
            rec = dict(case, error=f"{type(e).__name__}: {str(e).splitlines()[0][:300]}")
        print("RECORD " + json.dumps(rec))
        return 0
    out, ids = argv[0], set(argv[1:])
    todo = [c for sub in ("zoo", "holdout") for run in ("eager", "compiled")
            for c in cases(run, "h100", sub) if c["case_id"] in ids]
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    t0 = time.time()

    def run(case):
        try:
            cp = subprocess.run([sys.executable, __file__, "--child", json.dumps(case)],
                                capture_output=True, text=True, env=env, timeout=400)
        except subprocess.TimeoutExpired:
            return dict(case, error="timeout")
        line = next((ln for ln in cp.stdout.splitlines() if ln.startswith("RECORD ")), None)
        return json.loads(line[7:]) if line else dict(case, error=cp.stderr.strip()[-300:])

    with open(out, "w") as fh, cf.ThreadPoolExecutor(8) as ex:
        for rec in ex.map(run, todo):
            fh.write(json.dumps(rec) + "\n")
            fh.flush()
            print(f"{rec['case_id']}: {rec.get('error') or len(rec['events'])} ({time.time() - t0:.0f} s)",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
