"""Where a torch.compile'd model's host time goes, unprofiled: the anatomy of one compiled call.

The profiled host events of the compiled zoo cases (``zoo_run --host-profile``) split a call's
self CPU by event, but the profiler slows the host 1.4-2x, lumps the generated wrapper's own
Python into one event and cannot say whether two models were timed in the same host state. So
this times, per model, in the same process and interleaved (two passes in the same order, the
most telling pairs first, each model compiled afresh), with gpusim's eager reference GPT-2 timed beside each model
as the host's state gauge:

- ``host_us``: the host's time to issue one compiled call while the GPU is held by a sleep
  kernel (the call's issue cost alone: nothing in it waits on the GPU), median of 15;
- ``inductor_us``: of that, the time inside Inductor's compiled graph (``CompiledFxGraph.__call__``
  timed by a wrapper: the generated ``call`` with its launches and library calls); the rest is
  Dynamo (frame, cache look-up, guards), AOTAutograd's runtime wrappers, the module call and the
  output's reconstruction;
- ``wall_us``: steady-state wall per call back to back (as the zoo times it), with the process's
  CPU time over that wall (``cpu_per_wall``: above 1, other threads burned CPU) and its threads;
- ``gc``: the garbage collector's passes and time during 15 blocked calls, and ``host_us`` with
  the collector off;
- ``eager_wall_us``: the eager model's wall per call (same state, for comparison; its blocked
  issue time would include the syncs of HF models' padding checks);
- ``cprofile``: the Python functions that took the most time over 5 blocked calls (tottime and
  calls per call; cProfile's own overhead inflates Python-heavy entries);
- ``wrapper``: counts in Inductor's generated source (launches ``.run(``, ``extern_kernels.``,
  ``reinterpret_tensor``, ``empty_strided``, ``del``, ``assert_size_stride``, lines) and the
  graph's inputs per call.

    python3 -m validation.measure.compiled_anatomy --out $OUT/anatomy.jsonl [--models A,B]
        [--deadline-s 270] [--cpu-dry-run]

One JSON line per (model, pass), appended as measured. ``--cpu-dry-run``: tiny sizes on the CPU
(Inductor's C++ backend; no sleep kernel), exercising every record path, no meaningful timings.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import os
import pstats
import re
import statistics
import sys
import threading
import time

#: the compiled cases (zoo_run's large size, main 16-bit dtype): the HF encoder-decoder that
#: misses (opus-mt) beside its same-structure zoo twin (bart-base), the zoo decoders that miss
#: (pythia, qwen2) beside one that does not (opt), an encoder and the held-out ConvNeXt-V2
DEFAULT_MODELS = ("hf:opus-mt-en-de", "hf:bart-base", "hf:pythia-410m", "hf:opt-350m",
                  "hf:xlm-roberta-base", "timm:convnextv2_nano", "hf:qwen2-0.5b")

#: GPU cycles of the sleep kernel that holds the GPU while one call is issued (~25 ms at
#: H200's 1.98 GHz: longer than any of these calls' host time, cProfiled ones included)
SLEEP_CYCLES = 50_000_000

WRAPPER_PATTERNS = {"launches": r"\.run\(", "extern": r"extern_kernels\.", "aten_ops": r"torch\.ops\.aten\.",
                    "reinterpret": r"reinterpret_tensor\(", "alloc": r"empty_strided", "del": r"^\s*del ",
                    "assert_size_stride": r"assert_size_stride\(", "assert_alignment": r"assert_alignment\("}


class InductorTimer:
    """Wraps ``CompiledFxGraph.__call__``: inclusive seconds inside Inductor's compiled graphs,
    their calls, the graphs' inputs per call and the graphs seen (for their source)."""

    def __init__(self):
        from torch._inductor.output_code import CompiledFxGraph
        self.cls, self.orig = CompiledFxGraph, CompiledFxGraph.__call__
        self.seconds, self.calls, self.inputs, self.graphs = 0.0, 0, 0, {}
        timer = self

        def timed(graph, inputs):
            timer.inputs = len(inputs)          # the generated call clears its input list
            t0 = time.perf_counter()
            try:
                return timer.orig(graph, inputs)
            finally:
                timer.seconds += time.perf_counter() - t0
                timer.calls += 1
                timer.graphs[id(graph)] = graph
        CompiledFxGraph.__call__ = timed

    def reset(self):
        self.seconds, self.calls = 0.0, 0

    def close(self):
        self.cls.__call__ = self.orig


def wrapper_counts(graphs) -> dict:
    """Counts of :data:`WRAPPER_PATTERNS` in the graphs' generated source, summed."""
    out = {k: 0 for k in WRAPPER_PATTERNS}
    out["lines"], out["graphs"] = 0, 0
    for g in graphs:
        src = getattr(g, "source_code", None) or ""
        i = src.find("def call(")
        body = src[i:] if i >= 0 else src
        for k, pat in WRAPPER_PATTERNS.items():
            out[k] += len(re.findall(pat, body, flags=re.M))
        out["lines"] += body.count("\n")
        out["graphs"] += 1
    return out


def guard_counts() -> dict:
    """Dynamo's compiled frames alive (after a reset and one compile: this model's) and their
    guards: leaf guards in each cache entry's guard tree, summed ({} where this torch lacks
    the debugging hooks)."""
    import types

    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    def count(mgr) -> int:
        return len(mgr.get_leaf_guards()) + sum(count(c) for c in mgr.get_child_managers())
    out = {"frames": 0, "entries": 0, "leaf_guards": 0}
    seen = set()                  # one code object (a decorator's wrapper) serves many functions
    for o in gc.get_objects():
        try:
            if not isinstance(o, types.FunctionType) or id(o.__code__) in seen:
                continue
            entries = _debug_get_cache_entry_list(o.__code__)
        except Exception:  # noqa: BLE001 - a dead weak proxy, a frame Dynamo does not know
            continue
        if entries:
            seen.add(id(o.__code__))
            out["frames"] += 1
            out["entries"] += len(entries)
            out["leaf_guards"] += sum(count(e.guard_manager.root) for e in entries)
    return out


def blocked_calls(fn, args, reps: int, cuda: bool, timer=None, profile=None) -> list:
    """Per call: (host seconds, seconds inside Inductor) of ``fn(*args)`` issued while a sleep
    kernel holds the GPU (CUDA), so the host's issue cost alone is timed."""
    import torch
    out = []
    for _ in range(reps):
        if cuda:
            torch.cuda.synchronize()
            torch.cuda._sleep(SLEEP_CYCLES)
        if timer:
            timer.reset()
        if profile:
            profile.enable()
        t0 = time.perf_counter()
        r = fn(*args)
        t1 = time.perf_counter()
        if profile:
            profile.disable()
        del r
        out.append((t1 - t0, timer.seconds if timer else 0.0))
    if cuda:
        torch.cuda.synchronize()
    return out


def gc_watch():
    """(start, stop) of a watch on the collector: stop() gives its passes and seconds."""
    state = {"n": 0, "s": 0.0, "t": None}

    def cb(phase, info):
        if phase == "start":
            state["t"] = time.perf_counter()
        elif state["t"] is not None:
            state["n"] += 1
            state["s"] += time.perf_counter() - state["t"]
            state["t"] = None
    gc.callbacks.append(cb)

    def stop():
        gc.callbacks.remove(cb)
        return {"passes": state["n"], "us": round(state["s"] * 1e6, 1)}
    return stop


def threads() -> int:
    try:
        with open("/proc/self/status") as f:
            return int(next(ln.split()[1] for ln in f if ln.startswith("Threads:")))
    except (OSError, StopIteration, ValueError):
        return threading.active_count()


def busy_jiffies() -> int | None:
    """The machine's busy CPU time so far (``/proc/stat``: all CPUs, idle and iowait left out),
    in clock ticks; None where there is no /proc."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return sum(v) - v[3] - (v[4] if len(v) > 4 else 0)
    except (OSError, ValueError, IndexError):
        return None


def wall_cpu(fn, args, cuda: bool, min_time_s: float = 0.1, batches: int = 3) -> dict:
    """Back-to-back wall per call (median of ``batches``), the process CPU over that wall and the
    whole machine's busy CPUs over it (``machine_busy_cpus``: other processes' spinning shows)."""
    import torch
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    fn(*args)
    sync()
    t0 = time.perf_counter()
    fn(*args)
    sync()
    n = int(min(max(min_time_s / max(time.perf_counter() - t0, 1e-6), 3), 2000))
    walls, ratios, busy = [], [], []
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    for _ in range(batches):
        sync()
        j0, c0, t0 = busy_jiffies(), time.process_time(), time.perf_counter()
        for _ in range(n):
            fn(*args)
        sync()
        dt = time.perf_counter() - t0
        j1 = busy_jiffies()
        walls.append(dt / n * 1e6)
        ratios.append((time.process_time() - c0) / dt)
        if j0 is not None and j1 is not None:
            busy.append((j1 - j0) / tick / dt)
    return {"wall_us": round(statistics.median(walls), 1), "walls_us": [round(w, 1) for w in walls],
            "calls_per_batch": n, "cpu_per_wall": round(statistics.median(ratios), 3),
            "machine_busy_cpus": round(statistics.median(busy), 2) if busy else None,
            "threads": threads()}


def top_functions(prof, calls: int, n: int = 40) -> list:
    """cProfile's top ``n`` functions by own time: per call µs own and cumulative, calls per call."""
    st = pstats.Stats(prof)
    rows = []
    for (file, line, name), (cc, nc, tt, ct, _) in st.stats.items():
        rows.append({"fn": f"{os.path.basename(file)}:{line}:{name}", "calls": round(nc / calls, 1),
                     "tottime_us": round(tt / calls * 1e6, 1), "cumtime_us": round(ct / calls * 1e6, 1)})
    rows.sort(key=lambda r: -r["tottime_us"])
    return rows[:n]


def med_us(xs) -> float:
    return round(statistics.median(xs) * 1e6, 1)


def anatomy(fn, args, cuda: bool, timer: InductorTimer, reps: int = 15) -> dict:
    """The measurements of one compiled model (module docstring), already warm."""
    out = {}
    calls = blocked_calls(fn, args, reps, cuda, timer)
    out["host_us"] = med_us([c[0] for c in calls])
    out["inductor_us"] = med_us([c[1] for c in calls])
    out["outside_us"] = med_us([c[0] - c[1] for c in calls])
    out["host_us_all"] = [round(c[0] * 1e6, 1) for c in calls]
    out["graph_calls_per_call"] = timer.calls
    stop = gc_watch()
    gc_calls = blocked_calls(fn, args, reps, cuda, timer)
    out["gc"] = stop()
    out["gc"]["host_us_gc_on"] = med_us([c[0] for c in gc_calls])
    gc.disable()
    try:
        out["gc"]["host_us_gc_off"] = med_us([c[0] for c in blocked_calls(fn, args, reps, cuda, timer)])
    finally:
        gc.enable()
    out.update(wall_cpu(fn, args, cuda))
    prof = cProfile.Profile()
    blocked_calls(fn, args, 5, cuda, None, prof)
    out["cprofile"] = top_functions(prof, 5)
    out["wrapper"] = wrapper_counts(timer.graphs.values())
    out["wrapper"]["inputs"] = timer.inputs
    try:
        out["guards"] = guard_counts()
    except Exception as e:  # noqa: BLE001 - a diagnostic; the timings stand without it
        out["guards"] = {"failed": f"{type(e).__name__}: {str(e)[:200]}"}
    return out


def reference_gauge(cuda: bool):
    """gpusim's eager reference GPT-2 (``reference_forwards``) and a function timing its
    blocked host time and wall: the host's state beside each model."""
    import torch

    from validation.measure.reference_forwards import reference_forwards
    name, m, args = reference_forwards("cuda" if cuda else "cpu")[0]

    def gauge() -> dict:
        with torch.no_grad():
            calls = blocked_calls(m, args, 15, cuda)
            return {name + "_host_us": med_us([c[0] for c in calls]),
                    name + "_wall_us": wall_cpu(m, args, cuda, 0.05)["wall_us"]}
    return gauge


def case_for(name: str, tiny: bool):
    """zoo_run's compiled case of ``name`` (large size, main 16-bit dtype)."""
    from gpusim.models import zoo as zoo_mod
    from validation.measure.zoo_plan import plan_cases
    e = zoo_mod.get(name)
    sizes = None
    if tiny:
        sizes = {"batch": 1, **({"hw": 64} if "hw" in e.defaults else {}),
                 **{k: 16 for k in ("seq", "tgt") if k in e.defaults}}
    return plan_cases({name: e}, compiled=(name,), runs=("compiled",), tiny=sizes)[0]


def measure_model(name: str, built: dict, cuda: bool, tiny: bool, gauge, timer) -> dict:
    import torch
    import torch._dynamo

    from gpusim.models import zoo as zoo_mod
    from validation.measure import timing as measure
    c = case_for(name, tiny)
    dev = "cuda" if cuda else "cpu"
    dt = getattr(torch, c.dtype) if cuda else torch.float32
    rec = {"model": name, "case_id": c.case_id, "sizes": c.sizes, "dtype": str(dt).split(".")[-1],
           "env": measure.env_info() if cuda else {"device": "cpu", "torch": torch.__version__}}
    if name not in built:
        t0 = time.perf_counter()
        built[name] = zoo_mod.build(name, device=dev, dtype=dt, channels_last=False, **c.sizes)
        rec["build_s"] = round(time.perf_counter() - t0, 2)
    mod, args = built[name]
    rec["state_before"] = gauge()
    with torch.no_grad():
        # eager's wall, not its blocked issue time: HF models read a device value (a sync)
        rec["eager_wall_us"] = wall_cpu(mod, args, cuda, 0.05)["wall_us"]
        torch._dynamo.reset()
        timer.graphs.clear()
        fn = torch.compile(mod)
        t0 = time.perf_counter()
        fn(*args)
        rec["compile_s"] = round(time.perf_counter() - t0, 2)
        for _ in range(3):
            fn(*args)
        if cuda:
            torch.cuda.synchronize()
        rec.update(anatomy(fn, args, cuda, timer))
    rec["state_after"] = gauge()
    del fn
    torch._dynamo.reset()
    return rec


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m validation.measure.compiled_anatomy")
    ap.add_argument("--out", required=True, help="JSON lines, one per (model, pass), appended")
    ap.add_argument("--models", default=",".join(DEFAULT_MODELS))
    ap.add_argument("--passes", type=int, default=2, help="passes over the models, in the same order")
    ap.add_argument("--deadline-s", type=float, default=270.0, help="start no model after this")
    ap.add_argument("--cpu-dry-run", action="store_true", help="tiny sizes on the CPU, no timings")
    a = ap.parse_args(argv)
    import torch
    cuda = not a.cpu_dry_run
    if cuda:
        from validation.measure import timing as measure
        measure.require_cuda()
    t_start = time.time()
    models = [m for m in a.models.split(",") if m]
    gauge = reference_gauge(cuda)
    timer = InductorTimer()
    built: dict = {}
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    for p in range(a.passes):
        for name in models:
            if time.time() - t_start > a.deadline_s:
                print(f"deadline: {name} pass {p} not reached", flush=True)
                continue
            t0 = time.time()
            try:
                rec = measure_model(name, built, cuda, a.cpu_dry_run, gauge, timer)
            except Exception as e:  # noqa: BLE001 - one model's failure must not cost the rest
                rec = {"model": name, "failed": f"{type(e).__name__}: {str(e)[:300]}"}
                torch._dynamo.reset()
            rec["pass"] = p
            rec["elapsed_s"] = round(time.time() - t0, 2)
            with open(a.out, "a") as f:
                f.write(json.dumps(rec) + "\n")
            print(f"[{time.time() - t_start:5.0f}s] {name} pass {p}: " + (rec.get("failed") or
                  f"host {rec['host_us']:.0f} us (inductor {rec['inductor_us']:.0f}), wall "
                  f"{rec['wall_us']:.0f} us, eager wall {rec['eager_wall_us']:.0f} us, "
                  f"gc {rec['gc']['passes']}, cpu/wall {rec['cpu_per_wall']:.2f}, gauge "
                  f"{rec['state_before']}"), flush=True)
    timer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
