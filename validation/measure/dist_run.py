"""Time the training steps of ``validation/measure/dist_steps.py`` on real GPUs at one world size;
append one JSONL record a case (rank 0 writes). What gpusim's DDP/FSDP prediction is scored against.

Run with torchrun, one process a GPU, once per world size (NVLink multicast stays off)::

    for w in 1 2 4; do NCCL_NVLS_ENABLE=0 torchrun --standalone --nproc-per-node $w \\
        -m validation.measure.dist_run --out OUT.jsonl; done

Per case: build (the builder wraps the model in DDP or fully_shard), ``--warmup`` steps, then
``--steps`` steps each timed on the host from a synchronised start to ``cuda.synchronize()``; each
step's wall is the MAX over ranks (all-reduced), so a record's ``step_ms`` is the step of the
slowest rank (``rank_step_ms_median``: each rank's own median; ``python_us``: the host's speed before each
step, host_drift's fixed pure-Python workload, slowest rank, ~1,350 us on a quiet H200 host). Then the peak memory
of rank 0 (allocated and reserved, over the timed steps), and one
more step under the profiler on every rank, whose rank-0 GPU activities (kernels, copies, sets) are
written with their stream, start and duration, and that step's host side by phase (``profiled_host``: the
forward's and the backward's host span and kernel launches, autograd's node count; :func:`host_phases`). Profiled
NCCL kernel durations include the time spent waiting for peers: the step wall is the truth, the kernel list says
what ran.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.distributed as dist

from validation.measure.host_drift import python_us


def _sh(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


def environment(world: int) -> dict:
    v = torch.cuda.nccl.version()
    return {"kind": "environment", "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "gpu": torch.cuda.get_device_name(0), "gpus_on_host": torch.cuda.device_count(), "world": world,
            "torch": torch.__version__, "cuda": torch.version.cuda,
            "nccl": ".".join(map(str, v)) if isinstance(v, tuple) else str(v),
            "driver": _sh(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]).splitlines()[:1],
            "topology": _sh(["nvidia-smi", "topo", "-m"]),
            "nccl_env": {k: v for k, v in os.environ.items() if k.startswith("NCCL_")},
            "python": sys.version.split()[0], "command": " ".join(sys.argv)}


def chrome_trace(prof) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        path = f.name
    prof.export_chrome_trace(path)
    with open(path) as f:
        trace = json.load(f)
    os.unlink(path)
    return trace


#: autograd's engine runs one of these per backward node, from C++ (no Python between them)
BACKWARD_NODE = "autograd::engine::evaluate_function"
LAUNCHES = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx")


def host_phases(trace: dict) -> dict:
    """The profiled step's host side, split at autograd's first backward node: the forward (first CPU event to it)
    and the backward (its first node to its last node's end) as the host lived them, with the kernel launches each
    made (the CUDA runtime's launch calls on the host) and the backward's node count. Profiled spans run slower than
    unprofiled ones (compare ``step_ms``): a host cost per backward launch is the span over the launches, scaled by
    the step's unprofiled over profiled wall."""
    evs = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X" and "ts" in e and "dur" in e]
    cpu = [e for e in evs if e.get("cat") in ("cpu_op", "user_annotation", "python_function")]
    nodes = [e for e in cpu if str(e.get("name", "")).startswith(BACKWARD_NODE)]
    launches = sorted(e["ts"] for e in evs if e.get("cat") == "cuda_runtime" and e.get("name") in LAUNCHES)
    if not cpu or not nodes:
        return {}
    t0, b0 = min(e["ts"] for e in cpu), min(e["ts"] for e in nodes)
    b1 = max(e["ts"] + e["dur"] for e in nodes)
    return {"forward_host_us": round(b0 - t0, 1), "forward_launches": sum(t0 <= t < b0 for t in launches),
            "backward_host_us": round(b1 - b0, 1), "backward_launches": sum(b0 <= t < b1 for t in launches),
            "backward_nodes": len(nodes), "step_host_us": round(max(e["ts"] + e["dur"] for e in cpu) - t0, 1)}


def gpu_activities(prof, trace: dict | None = None) -> list[dict]:
    trace = chrome_trace(prof) if trace is None else trace
    out = []
    for e in trace.get("traceEvents", []):
        if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            out.append({"name": e["name"][:160], "cat": e["cat"], "stream": e.get("args", {}).get("stream", e.get("tid")),
                        "ts_us": e["ts"], "dur_us": e["dur"]})
    if out:
        t0 = min(k["ts_us"] for k in out)
        for k in out:
            k["ts_us"] = round(k["ts_us"] - t0, 3)
    return sorted(out, key=lambda k: k["ts_us"])


def run_case(name: str, builder, warmup: int, steps: int, world: int) -> dict:
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    step, args = builder()
    params = sum(p.numel() for p in _params(step))
    for _ in range(warmup):
        step(*args)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    walls, own, probe = [], [], []
    for _ in range(steps):
        dist.barrier()
        torch.cuda.synchronize()
        probe.append(python_us())     # the host's speed right before the step (host_drift's fixed workload)
        t0 = time.perf_counter()
        step(*args)
        torch.cuda.synchronize()
        own.append((time.perf_counter() - t0) * 1e3)
        t = torch.tensor([own[-1]], device="cuda")
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        walls.append(float(t.item()))
    every = [torch.zeros(len(own), device="cuda") for _ in range(dist.get_world_size())]
    dist.all_gather(every, torch.tensor(own, device="cuda"))
    per_rank = [round(statistics.median(t.tolist()), 3) for t in every]
    slowest_probe = torch.tensor(probe, device="cuda")
    dist.all_reduce(slowest_probe, op=dist.ReduceOp.MAX)
    peak, reserved = torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()
    dist.barrier()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        step(*args)
        torch.cuda.synchronize()
    trace = chrome_trace(prof) if dist.get_rank() == 0 else {}
    kernels = gpu_activities(prof, trace) if trace else []
    profiled_host = host_phases(trace) if trace else {}
    del step, args
    gc.collect()
    torch.cuda.empty_cache()
    return {"kind": "step", "case": name, "world": world, "params": params,
            "step_ms": {"median": round(statistics.median(walls), 3), "min": round(min(walls), 3),
                        "max": round(max(walls), 3), "n": len(walls), "all": [round(w, 3) for w in walls]},
            "rank_step_ms_median": per_rank, "python_us": [round(x, 1) for x in slowest_probe.tolist()],
            "peak_allocated_bytes": peak, "peak_reserved_bytes": reserved,
            "kernel_count": sum(k["cat"] == "kernel" for k in kernels), "profiled_host": profiled_host,
            "kernels": kernels}


def _params(step):
    """The parameters the step's optimizer holds (the step closes over it)."""
    seen = []
    for cell in getattr(step, "__closure__", None) or ():
        obj = cell.cell_contents
        if isinstance(obj, torch.optim.Optimizer):
            for g in obj.param_groups:
                seen.extend(g["params"])
    return seen


def main(argv=None) -> int:
    from validation.measure.dist_steps import BUILDERS
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--cases", default=",".join(BUILDERS))
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--steps", type=int, default=15)
    a = ap.parse_args(argv)
    local = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    world, rank = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(rank)
    if rank == 0:
        with open(a.out, "a") as f:
            f.write(json.dumps(environment(world)) + "\n")
    for name in a.cases.split(","):
        try:
            row = run_case(name, BUILDERS[name], a.warmup, a.steps, world)
        except torch.cuda.OutOfMemoryError as e:
            row = {"kind": "step", "case": name, "world": world, "error": f"OutOfMemoryError: {str(e)[:200]}"}
            gc.collect()
            torch.cuda.empty_cache()
        if rank == 0:
            with open(a.out, "a") as f:
                f.write(json.dumps(row) + "\n")
            print(f"world {world} {name}: step {row.get('step_ms', {}).get('median')} ms, peak "
                  f"{row.get('peak_allocated_bytes', 0) / 2**30:.2f} GiB, {row.get('kernel_count')} kernels "
                  f"{row.get('error', '')}", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
