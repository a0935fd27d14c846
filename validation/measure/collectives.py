"""Sweep NCCL collectives over message sizes at any world size; write JSONL records.

Run with torchrun, one process a GPU:

    NCCL_NVLS_ENABLE=0 torchrun --nproc-per-node 4 validation/measure/collectives.py --out OUT.jsonl

What it measures (nccl-tests' conventions, so one figure compares collectives and world sizes):
- all_reduce, all_gather_into_tensor, reduce_scatter_tensor, broadcast, and send/recv between ranks 0 and 1;
  bf16, sizes --min-bytes .. --max-bytes by powers of 2. `bytes` is nccl-tests' "size": the larger buffer
  (all-gather: the gathered output; reduce-scatter: the full input).
- Each sample is a loop of k back-to-back calls between CUDA events (a sleep kernel queued first so the host
  enqueues ahead of the GPU and launch cost stays out), divided by k. Per sample the ranks' times are
  all-reduced with MAX; the record holds the median, min and max of those samples.
- algbw = bytes / time; busbw = algbw x factor (all-reduce 2(n-1)/n; all-gather, reduce-scatter (n-1)/n; else 1).
- Concurrency: a bf16 GEMM loop and a copy loop timed alone and while an all-reduce loop runs on another stream.
- The environment (GPU, count, driver, torch, NCCL, `nvidia-smi topo -m`, NCCL_* variables) is the first line.

`--graph` (method "graph": the collective's DEVICE time; records without a "method" are "eager"): per collective
and size, k calls are warmed up eagerly on a side stream, captured into one CUDA graph (thread-local capture mode, so
c10d's watchdog may query its events), and per sample replayed once to line the ranks up, then r times between CUDA
events: per call = elapsed / (r x k), MAX over ranks, median/min/max over samples (`us`). Each record also holds the
same run's `eager_us` and the host's issue cost of k eager calls without a lead: `host_call_us` (wall to completion
/ k) and `host_issue_us` (time to return / k). No overlap measurement. On CPU (gloo) a Python loop replaces the graph
(method "cpu-dry-run": a smoke test, never data). `--align-bytes A` makes each rank's shard a multiple of A bytes.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone

import torch
import torch.distributed as dist

BUSBW_FACTOR = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "send_recv": lambda n: 1.0,
}


def _sh(cmd: list[str]) -> str | None:
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
        return r.stdout.strip() if r.returncode == 0 else (r.stdout + r.stderr).strip()
    except Exception as e:  # noqa: BLE001
        return f"unavailable: {e}"


def environment(world: int, args) -> dict:
    cuda = torch.cuda.is_available()
    p = torch.cuda.get_device_properties(0) if cuda else None
    nccl = None
    if cuda:
        try:
            v = torch.cuda.nccl.version()
            nccl = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
        except Exception as e:  # noqa: BLE001
            nccl = f"unavailable: {e}"
    return {
        "kind": "environment", "utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "world_size": world, "gpu_name": p.name if p else None, "sm_count": p.multi_processor_count if p else None,
        "gpu_count_visible": torch.cuda.device_count() if cuda else 0,
        "driver": _sh(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]) if cuda else None,
        "gpus": _sh(["nvidia-smi", "--query-gpu=index,name,memory.total,clocks.max.sm", "--format=csv,noheader"])
        if cuda else None,
        "torch": torch.__version__, "cuda": torch.version.cuda, "nccl": nccl,
        "topo": _sh(["nvidia-smi", "topo", "-m"]) if cuda else None,
        "nvlink": _sh(["nvidia-smi", "nvlink", "-s"]) if cuda else None,
        "env": {k: v for k, v in sorted(os.environ.items())
                if k.startswith(("NCCL_", "TORCH_NCCL", "CUDA_VISIBLE", "TORCH_SYMM", "NVSHMEM_"))},
        "hostname": platform.node(), "python": platform.python_version(),
        "command": " ".join([os.path.basename(sys.executable)] + sys.argv), "args": vars(args),
    }


class Clock:
    """CUDA events on a GPU; perf_counter on CPU (gloo smoke runs only)."""

    def __init__(self, dev):
        self.cuda = dev.type == "cuda"

    def start(self, lead_us: float = 0.0):
        if self.cuda:
            if lead_us > 0:  # let the host enqueue ahead of the GPU
                torch.cuda._sleep(int(lead_us * 1500))
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            return e
        return time.perf_counter()

    def stop(self, t0) -> float:
        """Microseconds since t0 (synchronises)."""
        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            e.synchronize()
            return t0.elapsed_time(e) * 1e3
        return (time.perf_counter() - t0) * 1e6


def op_numel(nbytes: int, world: int, esz: int, align_bytes: int = 0) -> int:
    """Elements of a collective of nccl-tests size ``nbytes``: a multiple of ``world``, and with ``align_bytes``, each
    rank's shard a multiple of that many bytes (at 3 ranks power-of-two sizes leave shards 4 bytes off 16)."""
    unit = world * max(1, align_bytes // esz)
    numel = max(nbytes // esz, unit)
    return numel - numel % unit


def make_op(name: str, nbytes: int, world: int, rank: int, dev, dtype, align_bytes: int = 0):
    """A zero-argument callable doing one collective of nccl-tests size `nbytes`, or None if not applicable."""
    numel = op_numel(nbytes, world, dtype.itemsize, align_bytes)

    def rand(n):
        return torch.randn(n, device=dev).to(dtype)
    if name == "all_reduce":
        x = rand(numel)
        return lambda: dist.all_reduce(x)
    if name == "all_gather":
        inp, out = rand(numel // world), torch.empty(numel, device=dev, dtype=dtype)
        return lambda: dist.all_gather_into_tensor(out, inp)
    if name == "reduce_scatter":
        inp, out = rand(numel), torch.empty(numel // world, device=dev, dtype=dtype)
        return lambda: dist.reduce_scatter_tensor(out, inp)
    if name == "broadcast":
        x = rand(numel)
        return lambda: dist.broadcast(x, src=0)
    if name == "send_recv":
        if world < 2:
            return None
        x = rand(numel)
        if rank == 0:
            return lambda: dist.send(x, dst=1)
        if rank == 1:
            return lambda: dist.recv(x, src=0)
        return _idle
    raise ValueError(name)


def plan(nbytes: int) -> tuple[int, int]:
    """(calls per sample, samples) by size: many short calls amortise skew; few long ones save device time."""
    if nbytes <= 1 << 20:
        return 40, 15
    if nbytes <= 64 << 20:
        return 10, 12
    if nbytes <= 256 << 20:
        return 5, 9
    return 3, 7


def max_over_ranks(us: float, dev) -> float:
    t = torch.tensor([us], device=dev, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def time_op(op, k: int, samples: int, clock: Clock, dev, lead_per_call_us: float = 30.0) -> list[float]:
    for _ in range(2):  # warm-up: communicator set-up, buffer registration, first-touch
        op()
    if clock.cuda:
        torch.cuda.synchronize()
    out = []
    for _ in range(samples):
        dist.barrier()
        t0 = clock.start(lead_us=200 + lead_per_call_us * k)
        for _ in range(k):
            op()
        us = clock.stop(t0) / k
        out.append(max_over_ranks(us, dev))
    return out


def graph_plan(nbytes: int) -> tuple[int, int, int]:
    """(calls captured in the graph k, timed replays per sample r, samples) by size: a graph of at most ~100 ms
    at 1 GiB on H200s, and at least 40 timed calls a sample at 1 MiB and below (as the eager plan)."""
    if nbytes <= 1 << 20:
        return 20, 2, 15
    if nbytes <= 64 << 20:
        return 20, 1, 12
    if nbytes <= 256 << 20:
        return 10, 1, 9
    return 5, 1, 7


def graph_lead_us(k: int, replays: int) -> float:
    """GPU sleep before a sample's line-up replay: time for the host to enqueue it and the r timed replays."""
    return 300.0 + (1 + replays) * (40.0 + 2.0 * k)


def summarise(samples: list[float]) -> dict:
    """median / fastest / slowest of a point's per-call samples (us)."""
    return {"us": statistics.median(samples), "us_min": min(samples), "us_max": max(samples)}


def _idle():
    """A rank that takes no part (send/recv beyond ranks 0 and 1)."""


def host_cost(op, k: int, samples: int, dev) -> tuple[float, float]:
    """(host_call_us, host_issue_us): k eager calls back to back with no lead, wall to completion / k and the
    host's time to return from the k calls / k; MAX over ranks per sample, median over samples."""
    cuda = dev.type == "cuda"
    walls, issues = [], []
    for _ in range(samples):
        dist.barrier()
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(k):
            op()
        t1 = time.perf_counter()
        if cuda:
            torch.cuda.synchronize()
        t2 = time.perf_counter()
        walls.append(max_over_ranks((t2 - t0) * 1e6 / k, dev))
        issues.append(max_over_ranks((t1 - t0) * 1e6 / k, dev))
    return statistics.median(walls), statistics.median(issues)


def capture(op, k: int, dev):
    """A zero-argument replay of k calls of `op`: a CUDA graph on a GPU (eager warm-up on a side stream first, as
    torch's CUDA-graph notes ask), a Python loop on CPU."""
    def loop():
        for _ in range(k):
            op()
    if dev.type != "cuda":
        return loop
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            op()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    dist.barrier()  # every rank, the idle ones of send/recv too
    torch.cuda.synchronize()
    if op is _idle:
        return loop
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, capture_error_mode="thread_local"):
        for _ in range(k):
            op()
    torch.cuda.synchronize()
    return g.replay


def time_graph(replay, k: int, replays: int, samples: int, dev) -> list[float]:
    """Per-call device time of each sample: sleep lead, one line-up replay, r replays between CUDA events."""
    cuda = dev.type == "cuda"
    for _ in range(2):
        replay()
    if cuda:
        torch.cuda.synchronize()
    out = []
    for _ in range(samples):
        dist.barrier()
        if cuda:
            torch.cuda._sleep(int(graph_lead_us(k, replays) * 1500))
        replay()
        if cuda:
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
        else:
            t0 = time.perf_counter()
        for _ in range(replays):
            replay()
        if cuda:
            e1.record()
            e1.synchronize()
            us = e0.elapsed_time(e1) * 1e3
        else:
            us = (time.perf_counter() - t0) * 1e6
        out.append(max_over_ranks(us / (replays * k), dev))
    return out


class GraphCaptureError(RuntimeError):
    """A CUDA-graph capture failed on some rank (every rank raises it together)."""


def agree(ok: bool, dev) -> bool:
    """True where every rank's ``ok`` is."""
    t = torch.tensor([1 if ok else 0], device=dev, dtype=torch.int32)
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return bool(t.item())


def measure_graph(op, nbytes: int, clock: Clock, dev, lead_per_call_us: float) -> dict:
    """The --graph record's figures for one collective and size."""
    k, replays, n = graph_plan(nbytes)
    eager = time_op(op, k, n, clock, dev, lead_per_call_us)
    host_call, host_issue = host_cost(op, k, 5, dev)
    try:
        replay, err = capture(op, k, dev), None
    except Exception as e:  # noqa: BLE001
        replay, err = None, f"{type(e).__name__}: {e}"
    if not agree(err is None, dev):  # every rank skips the timing together, or none does
        raise GraphCaptureError(err or "graph capture failed on another rank")
    ts = time_graph(replay, k, replays, n, dev)
    del replay
    e = summarise(eager)
    return {"method": "graph" if dev.type == "cuda" else "cpu-dry-run", **summarise(ts), "samples": n,
            "calls_per_sample": k * replays, "calls_per_graph": k, "replays_per_sample": replays,
            "eager_us": e["us"], "eager_us_min": e["us_min"], "eager_us_max": e["us_max"],
            "eager_calls_per_sample": k, "host_call_us": host_call, "host_issue_us": host_issue}


def sweep(args, world, rank, dev, clock, emit):
    dtype = getattr(torch, args.dtype)
    sizes, s = [], args.min_bytes
    while s <= args.max_bytes:
        sizes.append(s)
        s *= args.step
    for name in args.collectives:
        failed = None   # a capture that failed once fails at every size: skip the rest of the collective
        for nbytes in sizes:
            esz = dtype.itemsize
            rec = {"kind": "collective", "collective": name, "world_size": world, "bytes": nbytes, "dtype": args.dtype,
                   "run": args.repeat_index, "align_bytes": args.align_bytes,
                   "shard_bytes": op_numel(nbytes, world, esz, args.align_bytes) // world * esz}
            if failed:
                emit({**rec, "error": f"skipped: graph capture failed at a smaller size ({failed})"[:500]})
                continue
            try:
                op = make_op(name, nbytes, world, rank, dev, dtype, args.align_bytes)
                if op is None:
                    continue
                if args.graph:
                    rec.update(measure_graph(op, nbytes, clock, dev, args.lead_per_call_us))
                else:
                    k, n = plan(nbytes)
                    ts = time_op(op, k, n, clock, dev, args.lead_per_call_us)
                    rec.update(summarise(ts), samples=n, calls_per_sample=k)
                algbw = nbytes / (rec["us"] * 1e-6) / 1e9
                rec.update(algbw_gbs=algbw, busbw_gbs=algbw * BUSBW_FACTOR[name](world),
                           busbw_factor=BUSBW_FACTOR[name](world))
                del op
            except Exception as e:  # noqa: BLE001
                rec["error"] = f"{type(e).__name__}: {e}"[:500]
                failed = rec["error"] if isinstance(e, GraphCaptureError) else None
            emit(rec)
        if clock.cuda:
            torch.cuda.empty_cache()


def concurrency(args, world, rank, dev, clock, emit):
    """How much a compute loop slows while an all-reduce loop runs on another stream, and vice versa."""
    if not clock.cuda:
        return
    comm_bytes = args.overlap_bytes
    x = torch.randn(comm_bytes // 2, device=dev).to(torch.bfloat16)
    comm = torch.cuda.Stream()
    m = args.gemm
    a = torch.randn(m, m, device=dev, dtype=torch.bfloat16)
    b = torch.randn(m, m, device=dev, dtype=torch.bfloat16)
    src = torch.randn(256 << 20, device=dev)  # 1 GiB fp32 copy: read 1 GiB + write 1 GiB
    dst = torch.empty_like(src)
    kernels = {
        "gemm_bf16": (lambda: torch.mm(a, b), 2.0 * m ** 3, "flop"),
        "copy_fp32_1GiB": (lambda: dst.copy_(src), 2.0 * src.numel() * 4, "byte"),
    }

    def loop_comm(n):
        with torch.cuda.stream(comm):
            for _ in range(n):
                dist.all_reduce(x)

    # all-reduce alone
    loop_comm(3)
    torch.cuda.synchronize()
    comm_alone = []
    for _ in range(5):
        dist.barrier()
        with torch.cuda.stream(comm):
            t0 = clock.start(lead_us=500)
            for _ in range(10):
                dist.all_reduce(x)
            comm_alone.append(max_over_ranks(clock.stop(t0) / 10, dev))
    c_us = statistics.median(comm_alone)
    for kname, (fn, work, unit) in kernels.items():
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        t0 = clock.start(lead_us=500)
        for _ in range(5):
            fn()
        one = clock.stop(t0) / 5
        reps = max(5, int(args.overlap_ms * 1e3 / max(one, 1.0)))
        alone, together, comm_under = [], [], []
        for _ in range(5):
            dist.barrier()
            t0 = clock.start(lead_us=500)
            for _ in range(reps):
                fn()
            alone.append(clock.stop(t0) / reps)
        n_comm = int(1.5 * reps * one / c_us) + 4  # the comm loop outlasts the compute loop
        for _ in range(5):
            dist.barrier()
            torch.cuda.synchronize()
            torch.cuda._sleep(int(500 * 1500))
            ev0 = torch.cuda.Event(enable_timing=True)
            ev0.record()
            with torch.cuda.stream(comm):
                comm.wait_stream(torch.cuda.current_stream())
                c0 = torch.cuda.Event(enable_timing=True)
                c0.record()
                for _ in range(n_comm):
                    dist.all_reduce(x)
                c1 = torch.cuda.Event(enable_timing=True)
                c1.record()
            for _ in range(reps):
                fn()
            ev1 = torch.cuda.Event(enable_timing=True)
            ev1.record()
            torch.cuda.synchronize()
            together.append(ev0.elapsed_time(ev1) * 1e3 / reps)
            comm_under.append(c0.elapsed_time(c1) * 1e3 / n_comm)
        a_us, t_us = statistics.median(alone), statistics.median(together)
        a_max, t_max = max_over_ranks(a_us, dev), max_over_ranks(t_us, dev)
        emit({"kind": "overlap", "world_size": world, "compute": kname, "run": args.repeat_index,
              "compute_work": work, "compute_unit": unit, "gemm_m": m if unit == "flop" else None,
              "comm": "all_reduce", "comm_bytes": comm_bytes, "comm_dtype": "bfloat16",
              "compute_us_alone": a_max, "compute_us_with_comm": t_max, "compute_slowdown": t_max / a_max,
              "compute_rate_alone": work / (a_max * 1e-6), "compute_rate_with_comm": work / (t_max * 1e-6),
              "comm_us_alone": c_us, "comm_us_with_compute": max_over_ranks(statistics.median(comm_under), dev),
              "comm_calls": n_comm, "compute_calls": reps,
              "samples_alone_us": alone, "samples_with_comm_us": together})


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="JSONL file (rank 0 appends)")
    ap.add_argument("--min-bytes", type=int, default=1 << 10)
    ap.add_argument("--max-bytes", type=int, default=1 << 30)
    ap.add_argument("--step", type=int, default=2, help="size multiplier (2 or 4)")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--collectives", nargs="+",
                    default=["all_reduce", "all_gather", "reduce_scatter", "broadcast", "send_recv"])
    ap.add_argument("--align-bytes", type=int, default=0, help="each rank's shard a multiple of this (0: nccl-tests')")
    ap.add_argument("--repeat-index", type=int, default=0, help="run index (repeat runs measure run-to-run noise)")
    ap.add_argument("--gemm", type=int, default=8192)
    ap.add_argument("--overlap-bytes", type=int, default=256 << 20)
    ap.add_argument("--overlap-ms", type=float, default=30.0)
    ap.add_argument("--no-overlap", action="store_true")
    ap.add_argument("--graph", action="store_true",
                    help="time each collective's device time by CUDA-graph replay, with the eager loop and the host's "
                         "issue cost of back-to-back eager calls in the same record (method 'graph'); no overlap run")
    ap.add_argument("--lead-per-call-us", type=float, default=30.0,
                    help="GPU sleep queued ahead of each sample, per call (us of 1500 cycles): larger leads tell a "
                         "host-bound floor (it falls) from NCCL's time (it stays); runs with other leads are not fitted")
    args = ap.parse_args(argv)

    cuda = torch.cuda.is_available()
    dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(dev)
    dist.init_process_group("nccl" if cuda else "gloo", device_id=dev if cuda else None)
    world, rank = dist.get_world_size(), dist.get_rank()
    clock = Clock(dev)
    t_start = time.time()

    def emit(rec):  # rank 0 writes and prints
        if rank == 0:
            rec["elapsed_s"] = round(time.time() - t_start, 2)
            with open(args.out, "a") as f:
                f.write(json.dumps(rec) + "\n")
            if rec.get("kind") == "collective":
                err = rec.get("error")
                extra = (f"  eager {rec['eager_us']:9.1f}  host {rec['host_call_us']:7.1f} us"
                         if "eager_us" in rec else "")
                print(f"[n={world}] {rec['collective']:>14} {rec['bytes']:>11} B  "
                      + (f"ERROR {err}" if err else
                         f"{rec['us']:10.1f} us  busbw {rec['busbw_gbs']:7.1f} GB/s{extra}"), flush=True)
            elif rec.get("kind") == "overlap":
                print(f"[n={world}] overlap {rec['compute']}: slowdown {rec['compute_slowdown']:.3f}  "
                      f"comm {rec['comm_us_alone']:.0f} -> {rec['comm_us_with_compute']:.0f} us", flush=True)

    emit(environment(world, args))
    sweep(args, world, rank, dev, clock, emit)
    if not (args.no_overlap or args.graph):
        try:
            concurrency(args, world, rank, dev, clock, emit)
        except Exception as e:  # noqa: BLE001
            emit({"kind": "overlap", "world_size": world, "error": f"{type(e).__name__}: {e}"[:500]})
    emit({"kind": "done", "world_size": world, "run": args.repeat_index})
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
