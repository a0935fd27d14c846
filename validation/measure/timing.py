"""Measurement primitives on a CUDA GPU: events, L2 flushes, wall clocks, the profiler.

Method (device/METHOD.md): warm up first, time with CUDA events, repeat and take
medians, use random inputs, flush L2 where cold caches are meant.
"""

from __future__ import annotations

import platform
import statistics
import subprocess
import time
from collections import Counter
from datetime import datetime, timezone

import torch
from torch.autograd.profiler import record_function
from torch.profiler import ProfilerActivity, profile


def require_cuda():
    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA GPU is visible: gpusim validate/calibrate must run on a "
                           "machine with an NVIDIA GPU")


def _smi(query: str):
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 else None
    except Exception:  # noqa: BLE001
        return None


_DRIVER = []


def _driver():
    """The driver's version (asked once: it cannot change under a running process)."""
    if not _DRIVER:
        _DRIVER.append(_smi("driver_version"))
    return _DRIVER[0]


def env_info() -> dict:
    p = torch.cuda.get_device_properties(0)
    try:
        import triton
        tv = triton.__version__
    except Exception:  # noqa: BLE001
        tv = None
    return {
        "gpu_name": p.name, "sm_count": p.multi_processor_count,
        "l2_bytes": getattr(p, "L2_cache_size", None), "total_memory": p.total_memory,
        "capability": f"{p.major}.{p.minor}", "driver": _driver(),
        "clocks": _smi("clocks.sm,clocks.mem,clocks.max.sm"), "cuda": torch.version.cuda,
        "torch": torch.__version__, "triton": tv, "python": platform.python_version(),
        "hostname": platform.node(), "host": host_info(), "utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def host_info() -> dict:
    """The host machine: CPU model and count, hostname, Python and PyTorch builds."""
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    except OSError:
        pass
    import os
    out = {"cpu": cpu, "cpus": os.cpu_count(), "hostname": platform.node(),
           "python": platform.python_version(), "torch": torch.__version__}
    out["summary"] = f"{cpu or 'unknown CPU'} x{out['cpus']} ({out['hostname']}, torch {out['torch']})"
    return out


class L2Flusher:
    """Writes a buffer twice the L2 size: evicts whatever a kernel left in L2."""

    def __init__(self):
        p = torch.cuda.get_device_properties(0)
        n = max(2 * getattr(p, "L2_cache_size", 50 << 20), 256 << 20)
        self.buf = torch.empty(n // 4, dtype=torch.float32, device="cuda")

    def flush(self):
        self.buf.zero_()


_FLUSHER = None


def flusher():
    global _FLUSHER
    if _FLUSHER is None:
        _FLUSHER = L2Flusher()
    return _FLUSHER


def _stats(xs):
    xs = sorted(xs)
    n = len(xs)
    return {"median_us": statistics.median(xs), "p10_us": xs[int(0.1 * (n - 1))],
            "p90_us": xs[int(0.9 * (n - 1))], "n": n}


def time_device(fn, args=(), flush=True, reps=30, warmup=5) -> dict:
    """Device time per call (CUDA events around each call), L2 flushed before each."""
    for _ in range(warmup):
        fn(*args)
    torch.cuda.synchronize()
    fl = flusher() if flush else None
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        # keep the GPU busy while the host enqueues the call, so the events time the
        # device work and not the host's dispatch
        if fl:
            fl.flush()
        torch.cuda._sleep(200_000)
        starts[i].record()
        fn(*args)
        ends[i].record()
    torch.cuda.synchronize()
    return _stats([s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends)])


def time_wall(fn, args=(), min_time_s=0.2, warmup=5, batches=5) -> dict:
    """Steady-state wall time per call: back-to-back calls, one sync per batch."""
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    for _ in range(warmup):
        fn(*args)
    sync()
    t0 = time.perf_counter()
    fn(*args)
    sync()
    one = max(time.perf_counter() - t0, 1e-6)
    n = int(min(max(min_time_s / one, 3), 2000))
    per = []
    for _ in range(batches):
        sync()
        t0 = time.perf_counter()
        for _ in range(n):
            fn(*args)
        sync()
        per.append((time.perf_counter() - t0) / n * 1e6)
    out = _stats(per)
    out["calls_per_batch"] = n
    return out


def profile_kernels(fn, args=(), flush=True, reps=5) -> dict:
    """Per-kernel device times in launch order (median over ``reps`` calls, L2 flushed
    before each call; the flush kernels are excluded by profiling only the call)."""
    for _ in range(3):
        fn(*args)
    torch.cuda.synchronize()
    fl = flusher() if flush else None
    per_call = []
    for _ in range(reps):
        if fl:
            fl.flush()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
            fn(*args)
            torch.cuda.synchronize()
        ks = []
        for e in prof.events():
            dt = getattr(e, "device_type", None)
            if dt is not None and "CUDA" in str(dt):
                name = e.name
                if name.startswith("gpusim:"):      # our own profiler ranges, not kernels
                    continue
                if name.startswith(("Memcpy", "Memset")) and "DtoD" not in name:
                    continue
                ks.append((e.time_range.start, name, float(e.time_range.elapsed_us())))
        ks.sort()
        per_call.append(ks)
    counts = [len(k) for k in per_call]
    n = statistics.mode(counts)
    same = [k for k in per_call if len(k) == n]
    kernels = []
    for i in range(n):
        kernels.append({"name": same[0][i][1],
                        "us": statistics.median(k[i][2] for k in same)})
    return {"kernels": kernels, "per_call_kernel_count": counts}


def gpu_name_short() -> str:
    name = torch.cuda.get_device_name(0).lower()
    for k in ("h200", "h100", "a100", "v100", "a6000", "3090"):
        if k in name:
            return k
    return name.replace(" ", "-")



# --------------------------------------------------------------------------------------
# One profiled session over several calls: kernels per call plus what the host did
# (aten ops dispatched, CUDA launches, synchronisations). Used by the zoo runner and the
# microbenchmark sweeps; the classic runner keeps ``profile_kernels``.

SYNC_RUNTIME = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize",
                "cuStreamSynchronize", "cuCtxSynchronize", "cuEventSynchronize")
SYNC_ATEN = ("aten::_local_scalar_dense", "aten::item", "aten::nonzero",
             "aten::is_nonzero", "aten::equal")
REP_RANGE = "gpusim:rep"
FLUSH_RANGE = "gpusim:flush"


def is_launch(name: str) -> bool:
    """A CUDA runtime/driver call that launches a kernel (graph launches excluded)."""
    return name.startswith(("cudaLaunch", "cuLaunch")) and "Host" not in name


def launch_api_us(fn, reps: int = 3) -> float:
    """Median host time of one kernel-launch runtime call (``cudaLaunchKernel``,
    ``cuLaunchKernelEx``) while ``fn`` runs, from the profiler's CPU events."""
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    d = [e.time_range.elapsed_us() for e in prof.events() if is_launch(e.name)]
    return float(statistics.median(d)) if d else float("nan")


def top_level_aten(cpu_events) -> list:
    """Names of the aten ops that no other aten op encloses (what the Python code
    dispatched), in start order. ``cpu_events``: (name, thread, start, end) tuples."""
    out = []
    by_thread = {}
    for ev in cpu_events:
        by_thread.setdefault(ev[1], []).append(ev)
    for evs in by_thread.values():
        evs.sort(key=lambda e: (e[2], -e[3]))
        stack = []                                   # enclosing aten ops (ends)
        for name, _, s, e in evs:
            while stack and stack[-1][1] <= s:
                stack.pop()
            if not name.startswith("aten::"):
                continue
            if not stack:
                out.append((s, name))
            stack.append((s, e))
    return [n for _, n in sorted(out)]


def host_stats(cpu_events, device_events=()) -> dict:
    """What the host did in one call, from CPU-side profiler events (name, thread,
    start, end) and device-side events (name, start, dur) of that call."""
    names = Counter(ev[0] for ev in cpu_events)
    top = top_level_aten(cpu_events)
    syncs = {k: names[k] for k in SYNC_RUNTIME if names.get(k)}
    sync_aten = {k: names[k] for k in SYNC_ATEN if names.get(k)}
    memcpy_rt = {k: v for k, v in names.items() if k.startswith(("cudaMemcpy", "cuMemcpy"))}
    dtoh = sum(1 for ev in device_events if ev[0].startswith("Memcpy DtoH"))
    launches = {k: v for k, v in names.items() if is_launch(k)}
    return {
        "host_syncs": sum(syncs.values()),
        "sync_calls": syncs,
        "sync_aten_ops": sync_aten,
        "memcpy_runtime_calls": memcpy_rt,
        "memcpy_dtoh": dtoh,
        "aten_ops_top": len(top),
        "aten_ops_top_counts": dict(Counter(top).most_common()),
        "aten_ops_all": sum(v for k, v in names.items() if k.startswith("aten::")),
        "cuda_launches": sum(launches.values()),
        "launch_calls": launches,
        "graph_launches": names.get("cudaGraphLaunch", 0),
    }


def split_reps(cpu, dev, ranges, flush_starts, corr_time=None):
    """Assign events to calls. ``cpu``: (name, thread, start, end, corr); ``dev``:
    (name, start, dur, corr); ``ranges``: [(start, end)] of each call's CPU range in
    order; ``flush_starts``: CPU start of the flush before each call (the next call's
    flush bounds this call's kernels in time). A device event belongs to the call whose
    range holds the CPU start of its launch (same correlation id), else to the call
    whose window holds its device start. Returns ([cpu events per call], [device events
    per call], method)."""
    launch_t = corr_time or {}
    if not launch_t:
        for name, _t, s, _e, corr in cpu:
            if corr and (name.startswith(("cuda", "cu")) and not name.startswith("cutlass")):
                launch_t.setdefault(corr, s)
    n = len(ranges)
    cpu_per = [[] for _ in range(n)]
    dev_per = [[] for _ in range(n)]
    for ev in cpu:
        for i, (s, e) in enumerate(ranges):
            if s <= ev[2] <= e:
                cpu_per[i].append(ev[:4])
                break
    bounds = []
    for i, (s, _e) in enumerate(ranges):
        nxt = flush_starts[i + 1] if i + 1 < len(flush_starts) else float("inf")
        bounds.append((s, nxt))
    used_corr = used_time = 0
    for ev in dev:
        t = launch_t.get(ev[3]) if ev[3] else None
        placed = False
        if t is not None:
            for i, (s, e) in enumerate(ranges):
                if s <= t <= e:
                    dev_per[i].append(ev[:3])
                    placed = True
                    used_corr += 1
                    break
            if not placed:
                continue                          # launched outside any call: the flush
        if not placed:
            for i, (s, nxt) in enumerate(bounds):
                if s <= ev[1] < nxt:
                    dev_per[i].append(ev[:3])
                    used_time += 1
                    break
    for d in dev_per:
        d.sort(key=lambda x: x[1])
    method = "correlation" if used_corr and not used_time else ("time" if used_time and not used_corr
                                                                 else "mixed" if used_corr else "none")
    return cpu_per, dev_per, method


def _kernel_like(name: str) -> bool:
    if name.startswith("gpusim:"):
        return False
    if name.startswith(("Memcpy", "Memset")) and "DtoD" not in name:
        return False
    return True


def median_kernels(per_call):
    """Median per-kernel time over the calls that launched the modal number of kernels.
    ``per_call``: [[(name, start, dur)]]. Returns (kernels, counts)."""
    counts = [len(k) for k in per_call]
    if not counts:
        return [], counts
    n = statistics.mode(counts)
    same = [k for k in per_call if len(k) == n]
    kernels = [{"name": same[0][i][0], "us": round(statistics.median(k[i][2] for k in same), 3)}
               for i in range(n)]
    return kernels, counts


def profile_call(fn, args=(), flush=True, reps=5, warmup=2, host=True) -> dict:
    """Profile ``reps`` calls of ``fn(*args)`` in one profiler session, L2 flushed (and
    the GPU synchronised) before each call. Per call: kernels in launch order (device
    side; memcpy/memset other than DtoD listed apart), and what the host did (aten ops
    dispatched at top level, CUDA launches, synchronisations). Falls back to one session
    per call if the events cannot be split by call."""
    cuda = torch.cuda.is_available()               # CPU: host statistics only (dry runs)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    for _ in range(warmup):
        fn(*args)
    sync()
    fl = flusher() if flush and cuda else None
    acts = [ProfilerActivity.CUDA, ProfilerActivity.CPU] if cuda else [ProfilerActivity.CPU]
    with profile(activities=acts) as prof:
        for _ in range(reps):
            with record_function(FLUSH_RANGE):
                if fl:
                    fl.flush()
                sync()
            with record_function(REP_RANGE):
                fn(*args)
            sync()
    cpu, dev, ranges, flushes = [], [], [], []
    for e in prof.events():
        dt = str(getattr(e, "device_type", ""))
        s, d = e.time_range.start, float(e.time_range.elapsed_us())
        corr = getattr(e, "id", None)
        if "CUDA" in dt:
            if not e.name.startswith("gpusim:"):
                dev.append((e.name, s, d, corr))
        else:
            if e.name == REP_RANGE:
                ranges.append((s, e.time_range.end))
            elif e.name == FLUSH_RANGE:
                flushes.append(s)
            else:
                cpu.append((e.name, getattr(e, "thread", 0), s, e.time_range.end, corr))
    ranges.sort()
    flushes.sort()
    cpu_per, dev_per, method = split_reps(cpu, dev, ranges, flushes)
    kern_per = [[k for k in d if _kernel_like(k[0])] for d in dev_per]
    kernels, counts = median_kernels(kern_per)
    if cuda and (len(ranges) != reps or (dev and not any(counts))):
        # could not split: one session per call (kernels only)
        pk = profile_kernels(fn, args, flush=flush, reps=reps)
        kernels, counts, method = pk["kernels"], pk["per_call_kernel_count"], "sessions"
    other = sorted({k[0] for d in dev_per for k in d if not _kernel_like(k[0])})
    out = {"kernels": kernels, "per_call_kernel_count": counts, "split": method,
           "memcpy_memset": other,
           "kernel_count": len(kernels), "kernel_sum_us": round(sum(k["us"] for k in kernels), 3)}
    if host and cpu_per:
        # the call with the modal kernel count, first such
        i = counts.index(len(kernels)) if len(kernels) in counts else 0
        out["host"] = host_stats(cpu_per[i], dev_per[i])
    return out


# --------------------------------------------------------------------------------------
# A call made of named phases (a training step: forward, backward, optimizer): kernels
# per phase, attributed by the phase whose CPU range holds each kernel's launch.

PHASE_PREFIX = "gpusim:phase:"


def phase_kernels(cpu, dev, ranges):
    """Kernels and host statistics per phase from one profiler session. ``cpu``: (name,
    thread, start, end, corr); ``dev``: (name, start, dur, corr); ``ranges``: [(start,
    end, phase)] of every phase of every profiled call, in time order. A kernel belongs
    to the phase whose range holds the CPU start of its launch (correlation id: a
    backward kernel is launched by autograd's device thread while the main thread waits
    inside ``backward()``'s range). Per phase, the median per kernel over the calls
    that launched the modal number (:func:`median_kernels`). Returns ``({phase:
    {"kernels", "per_call_kernel_count", "host"}}, split method)``."""
    ranges = sorted(ranges)
    cpu_per, dev_per, method = split_reps(cpu, dev, [(s, e) for s, e, _ in ranges],
                                          [s for s, _, _ in ranges])
    out = {}
    for phase in dict.fromkeys(p for _, _, p in ranges):       # first-seen order
        idx = [i for i, r in enumerate(ranges) if r[2] == phase]
        kern = [[k for k in dev_per[i] if _kernel_like(k[0])] for i in idx]
        kernels, counts = median_kernels(kern)
        j = counts.index(len(kernels)) if len(kernels) in counts else 0
        out[phase] = {"kernels": kernels, "per_call_kernel_count": counts,
                      "host": host_stats(cpu_per[idx[j]], dev_per[idx[j]]) if idx else {},
                      "memcpy_memset": sorted({k[0] for i in idx for k in dev_per[i]
                                               if not _kernel_like(k[0])})}
    return out, method


def profile_phases(step, reps=1, flush=True) -> dict:
    """Profile ``reps`` calls of ``step(mark)`` in one profiler session, L2 flushed (and
    the GPU synchronised) before each call; ``step`` wraps each of its phases in ``with
    mark(name):``. Returns :func:`phase_kernels`'s phases and ``split``."""
    cuda = torch.cuda.is_available()
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    fl = flusher() if flush and cuda else None
    acts = [ProfilerActivity.CUDA, ProfilerActivity.CPU] if cuda else [ProfilerActivity.CPU]

    def mark(name):
        return record_function(PHASE_PREFIX + name)
    with profile(activities=acts) as prof:
        for _ in range(reps):
            with record_function(FLUSH_RANGE):
                if fl:
                    fl.flush()
                sync()
            step(mark)
            sync()
    cpu, dev, ranges, annotations = [], [], [], set()
    for e in prof.events():
        dt = str(getattr(e, "device_type", ""))
        s, d = e.time_range.start, float(e.time_range.elapsed_us())
        corr = getattr(e, "id", None)
        if "CUDA" in dt:
            # a record_function range drawn on the GPU's timeline (the optimizer's
            # "Optimizer.step#AdamW.step", torch.compile's regions) is no kernel
            if getattr(e, "is_user_annotation", False):
                annotations.add(e.name)
            elif not e.name.startswith("gpusim:"):
                dev.append((e.name, s, d, corr))
        elif e.name.startswith(PHASE_PREFIX):
            ranges.append((s, e.time_range.end, e.name[len(PHASE_PREFIX):]))
        elif e.name != FLUSH_RANGE:
            cpu.append((e.name, getattr(e, "thread", 0), s, e.time_range.end, corr))
    phases, method = phase_kernels(cpu, dev, ranges)
    return {"phases": phases, "split": method,
            "gpu_annotations": sorted(a for a in annotations if not a.startswith("gpusim:"))}


def profiled_record(rec: dict, build, reps: int, device: str = "cuda", first_key: str = "warmup_s",
                    flush: bool = True) -> dict:
    """``rec`` with one microbenchmark point measured: ``build()`` gives ``(fn, args)``; the first
    call's seconds land in ``rec[first_key]`` (where a compile or autotuning happens), then
    :func:`profile_call` (L2 flushed on CUDA unless ``flush`` is False, 3 warm-up calls, ``reps``
    profiled) adds the kernels.
    A point that fails gets ``failed`` (the error, one line) instead: it must not end the sweep."""
    try:
        fn, args = build()
        t0 = time.time()
        fn(*args)
        if device == "cuda":
            torch.cuda.synchronize()
        rec[first_key] = round(time.time() - t0, 2)
        prof = profile_call(fn, args, flush=flush and device == "cuda", reps=reps, warmup=3, host=False)
        rec.update({k: prof[k] for k in ("kernels", "per_call_kernel_count", "kernel_count", "kernel_sum_us",
                                          "split")})
    except Exception as e:  # noqa: BLE001 - one failed point must not end the sweep
        rec["failed"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
    return rec
