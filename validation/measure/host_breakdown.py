"""Where eager host time goes in real models (device machine): one JSON line per case.

    python validation/measure/host_breakdown.py [--walls] OUT.jsonl [MODEL ...]

For each zoo model (bf16, default and large sizes), on CUDA: steady-state wall per call
(GC on, as users run, and GC off), the profiler's top-level aten ops and their summed
CPU time in one call, the model's own Python outside torch calls (a clock around every
top-level torch call; the forward's wall time minus the clocked time, minus the clock's
own cost per call), and host probes taken right before and after the case
(``validation.measure.host_bench.host_probe``: an eager add and one nn.Module call, measured as
calibrate measures them) so each case carries the host speed it ran at, plus the walls
of gpusim's reference forwards right before the case (``reference_forwards.reference_walls``: what
``eager_forward_factor`` is fitted on). ``--walls``: only the walls, kernel sums, the
eager-add probe and the reference walls (no GC-off wall, profiled top-level ops, Python
clock or module probe), every model's default size first, then large.
"""

from __future__ import annotations

import gc
import json
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

from gpusim.models import zoo
from validation.measure.host_bench import host_probe
from validation.measure.reference_forwards import reference_walls
from validation.measure import timing as measure
from validation.measure.decode_host_probe import OpClock


def clock_overhead_us() -> float:
    """The clock's own cost per top-level call that falls outside its timing."""
    x = torch.ones(4, device="cuda")

    def once():
        clock = OpClock()
        t = time.perf_counter()
        with clock:
            for _ in range(500):
                x.add(1)
        torch.cuda.synchronize()
        return (time.perf_counter() - t - clock.inside_s) / 500 * 1e6
    return max(min(once() for _ in range(7)), 0.0)


def python_us(m, args, repeats=3) -> float:
    """Python of ``m``'s forward outside torch calls: best of the timed repeats."""
    over, best = clock_overhead_us(), None
    for _ in range(repeats):
        clock = OpClock()
        t = time.perf_counter()
        with clock, torch.no_grad():
            m(*args)
        us = (time.perf_counter() - t - clock.inside_s) * 1e6 - clock.calls * over
        best = us if best is None else min(best, us)
    return best


def top_level_time(m, args) -> dict:
    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU]) as prof:
        t0 = time.perf_counter()
        m(*args)
        torch.cuda.synchronize()
        span = time.perf_counter() - t0
    evs = [(e.name, e.thread, e.time_range.start, e.time_range.end) for e in prof.events()]
    top, stack, tot = [], [], 0.0
    for name, _, s, e in sorted(evs, key=lambda v: (v[2], -v[3])):
        while stack and stack[-1] <= s:
            stack.pop()
        if not name.startswith("aten::"):
            continue
        if not stack:
            top.append(name)
            tot += e - s
        stack.append(e)
    return {"profiled_call_us": span * 1e6, "top_aten": len(top), "top_aten_us": tot}


def case(name: str, sizes: dict, walls_only: bool = False) -> dict:
    m, args = zoo.build(name, device="cuda", dtype=torch.bfloat16, **sizes)
    with torch.no_grad():
        for _ in range(3):
            m(*args)
        torch.cuda.synchronize()
        rec = {"model": name, "sizes": sizes, "probe_before": host_probe(not walls_only),
               "reference_walls": reference_walls()}
        rec["wall_us"] = measure.time_wall(m, args)["median_us"]
        if not walls_only:
            gc.disable()
            try:
                rec["wall_nogc_us"] = measure.time_wall(m, args)["median_us"]
            finally:
                gc.enable()
        prof = measure.profile_kernels(m, args, flush=False, reps=3)
        rec["kernel_sum_us"] = sum(k["us"] for k in prof["kernels"]) if prof.get("kernels") else None
        rec["kernel_count"] = len(prof.get("kernels") or [])
        if not walls_only:
            rec.update(top_level_time(m, args))
    if not walls_only:
        rec["python_us"] = python_us(m, args)
        rec["probe_after"] = host_probe()
    del m, args
    gc.collect()
    torch.cuda.empty_cache()
    return rec


def main(argv):
    walls_only = "--walls" in argv
    argv = [a for a in argv if a != "--walls"]
    out = argv[0]
    names = argv[1:] or sorted(zoo.ZOO)
    with open(out, "a") as f:      # every model at its default size first, then large
        for label in ("default", "large"):
            for name in names:
                sizes = getattr(zoo.get(name), "defaults" if label == "default" else "large")
                try:
                    rec = dict(case(name, dict(sizes), walls_only), size=label)
                except Exception as ex:  # noqa: BLE001 - record and go on
                    rec = {"model": name, "size": label, "error": f"{type(ex).__name__}: {ex}"[:300]}
                f.write(json.dumps(rec) + "\n")
                f.flush()
                print(json.dumps({k: (round(v, 1) if isinstance(v, float) else v)
                                  for k, v in rec.items()
                                  if k not in ("probe_before", "probe_after", "reference_walls")}),
                      flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
