"""Measurement primitives on a CUDA GPU: events, L2 flushes, wall clocks, the profiler.

Method (device/METHOD.md): warm up first, time with CUDA events, repeat and take
medians, use random inputs, flush L2 where cold caches are meant.
"""

from __future__ import annotations

import platform
import statistics
import subprocess
import time
from datetime import datetime, timezone


def require_cuda():
    import torch
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


def env_info() -> dict:
    import torch
    p = torch.cuda.get_device_properties(0)
    try:
        import triton
        tv = triton.__version__
    except Exception:  # noqa: BLE001
        tv = None
    return {
        "gpu_name": p.name, "sm_count": p.multi_processor_count,
        "l2_bytes": getattr(p, "L2_cache_size", None), "total_memory": p.total_memory,
        "capability": f"{p.major}.{p.minor}", "driver": _smi("driver_version"),
        "clocks": _smi("clocks.sm,clocks.mem,clocks.max.sm"), "cuda": torch.version.cuda,
        "torch": torch.__version__, "triton": tv, "python": platform.python_version(),
        "hostname": platform.node(), "utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


class L2Flusher:
    """Writes a buffer twice the L2 size: evicts whatever a kernel left in L2."""

    def __init__(self):
        import torch
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
    import torch
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
    import torch
    for _ in range(warmup):
        fn(*args)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn(*args)
    torch.cuda.synchronize()
    one = max(time.perf_counter() - t0, 1e-6)
    n = int(min(max(min_time_s / one, 3), 2000))
    per = []
    for _ in range(batches):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            fn(*args)
        torch.cuda.synchronize()
        per.append((time.perf_counter() - t0) / n * 1e6)
    out = _stats(per)
    out["calls_per_batch"] = n
    return out


def profile_kernels(fn, args=(), flush=True, reps=5) -> dict:
    """Per-kernel device times in launch order (median over ``reps`` calls, L2 flushed
    before each call; the flush kernels are excluded by profiling only the call)."""
    import torch
    from torch.profiler import ProfilerActivity, profile
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
    import torch
    name = torch.cuda.get_device_name(0).lower()
    for k in ("h200", "h100", "a100", "v100", "a6000", "3090"):
        if k in name:
            return k
    return name.replace(" ", "-")

