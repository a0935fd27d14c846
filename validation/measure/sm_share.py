"""How much compute slows while an NCCL kernel holds SMs beside it, on 2 GPUs (issue 33, item 3).

Run on a 2-GPU host (NVLink multicast off), one process a GPU::

    NCCL_NVLS_ENABLE=0 torchrun --standalone --nproc-per-node 2 -m validation.measure.sm_share --out OUT.jsonl

Per compute case (bf16 GEMMs 1024-8192, bf16 NHWC convolutions, fp32 adds of 1 Mi-128 Mi elements, a bf16 layer
norm), rank 0 times a loop of the kernel between CUDA events after a warm-up (median of 5 samples, random inputs,
PyTorch's default flags):

- ``alone``: no NCCL kernel on the GPU;
- ``waiting``: one all-reduce of ``comm_bytes`` launched first on a side stream, whose peer joins only after rank 0's
  loop is done (rank 1 sleeps on the host): NCCL's kernel is resident on its channels' SMs (one CTA a channel) and
  moves nothing. Sizes 8 KiB (LL, 1 channel at 2 ranks), 256 KiB (LL, some channels) and 32 MiB (Simple, all
  channels): the slowdown by the SMs NCCL holds, with no memory traffic of its own;
- ``busy``: both ranks run the loop while a loop of 256 MiB all-reduces runs on a side stream: SMs and memory
  bandwidth shared.

Each record: ``alone_us`` and ``with_us`` per kernel (median), their ratio, NCCL's kernel time on the side stream
(``nccl_us``, events), the GPU's SM count. Written as measured (one JSON line each, flushed). ~2 minutes on 2 H200s.
``--dry-run``: no GPU, no process group: the case list and the record format (timings null), for a CPU check.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

GEMMS = (1024, 2048, 4096, 8192)
#: (batch, channels in, channels out, spatial, kernel size): ResNet-50-like convolutions
CONVS = ((32, 64, 64, 56, 3), (32, 256, 256, 14, 3), (32, 256, 1024, 14, 1))
ADDS = (1 << 20, 1 << 24, 1 << 27)
WAIT_BYTES = (8 << 10, 256 << 10, 32 << 20)
BUSY_BYTES = 256 << 20
SAMPLES = 5


def cases() -> list[tuple[str, tuple]]:
    return ([("gemm_bf16", (m,)) for m in GEMMS] + [("conv_bf16_nhwc", c) for c in CONVS]
            + [("add_fp32", (n,)) for n in ADDS] + [("layer_norm_bf16", (8192, 768))])


def make(name: str, shape: tuple, dev):
    import torch
    import torch.nn.functional as F
    if name == "gemm_bf16":
        m = shape[0]
        a, b = (torch.randn(m, m, device=dev, dtype=torch.bfloat16) for _ in range(2))
        return lambda: torch.mm(a, b)
    if name == "conv_bf16_nhwc":
        n, ci, co, hw, k = shape
        x = torch.randn(n, ci, hw, hw, device=dev, dtype=torch.bfloat16).contiguous(memory_format=torch.channels_last)
        w = torch.randn(co, ci, k, k, device=dev, dtype=torch.bfloat16).contiguous(memory_format=torch.channels_last)
        return lambda: F.conv2d(x, w, padding=k // 2)
    if name == "add_fp32":
        x, y = (torch.randn(shape[0], device=dev) for _ in range(2))
        return lambda: torch.add(x, y)
    if name == "layer_norm_bf16":
        x = torch.randn(*shape, device=dev, dtype=torch.bfloat16)
        return lambda: F.layer_norm(x, shape[-1:])
    raise ValueError(name)


def loop_us(fn, reps: int) -> float:
    """One sample: ``reps`` calls between CUDA events on the current stream, per call (us)."""
    import torch
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(200_000)          # the host enqueues ahead of the GPU: launch cost stays out
    e0.record()
    for _ in range(reps):
        fn()
    e1.record()
    e1.synchronize()
    return e0.elapsed_time(e1) * 1e3 / reps


def calibrate_reps(fn, target_us: float = 5000.0) -> int:
    import torch
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    one = loop_us(fn, 5)
    return max(5, min(2000, int(target_us / max(one, 1.0))))


def measure_waiting(fn, reps: int, nbytes: int, rank: int, dev, comm) -> tuple[list, list]:
    """Rank 0's loop while its all-reduce of ``nbytes`` waits for rank 1, which joins after the loop."""
    import torch
    import torch.distributed as dist
    x = torch.ones(nbytes // 2, device=dev, dtype=torch.bfloat16)
    dist.all_reduce(x)                  # warm the communicator for this size
    torch.cuda.synchronize()
    got, nccl = [], []
    for _ in range(SAMPLES):
        dist.barrier()
        torch.cuda.synchronize()
        if rank == 0:
            c0, c1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            with torch.cuda.stream(comm):
                c0.record()
                work = dist.all_reduce(x, async_op=True)   # c10d's own NCCL stream waits for `comm`
            time.sleep(0.002)           # NCCL's kernel is resident before the loop starts
            got.append(loop_us(fn, reps))
            with torch.cuda.stream(comm):
                work.wait()             # `comm` waits for the all-reduce: c1 marks its end
                c1.record()
            c1.synchronize()
            nccl.append(c0.elapsed_time(c1) * 1e3)
        else:
            # rank 1 joins once rank 0's loop (~5 ms) is surely done: NCCL's kernel on rank 0 waited all along
            time.sleep(max(0.05, 3 * reps * 50e-6))
            dist.all_reduce(x)
        torch.cuda.synchronize()
    return got, nccl


def measure_busy(fn, reps: int, dev, comm) -> tuple[list, list]:
    """Both ranks' loops while a loop of 256 MiB all-reduces runs on a side stream (it outlasts the loop)."""
    import torch
    import torch.distributed as dist
    x = torch.ones(BUSY_BYTES // 2, device=dev, dtype=torch.bfloat16)
    dist.all_reduce(x)
    torch.cuda.synchronize()
    c0, c1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = time.perf_counter()
    dist.all_reduce(x)
    torch.cuda.synchronize()
    one_comm = (time.perf_counter() - t0) * 1e6      # wall of one 256 MiB all-reduce: sizes the side loop
    got, nccl = [], []
    for _ in range(SAMPLES):
        dist.barrier()
        torch.cuda.synchronize()
        probe = loop_us(fn, 3)
        n = torch.tensor([int(2.0 * reps * probe / max(one_comm, 1.0)) + 3], device=dev)
        dist.all_reduce(n, op=dist.ReduceOp.MAX)     # every rank issues the same number of all-reduces
        n_comm = int(n.item())
        with torch.cuda.stream(comm):
            c0.record()
            works = [dist.all_reduce(x, async_op=True) for _ in range(n_comm)]
        got.append(loop_us(fn, reps))
        with torch.cuda.stream(comm):
            works[-1].wait()
            c1.record()
        torch.cuda.synchronize()
        nccl.append(c0.elapsed_time(c1) * 1e3 / n_comm)
    return got, nccl


def run(args) -> int:
    import torch
    import torch.distributed as dist
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    dist.init_process_group("nccl", device_id=dev)
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(rank)
    comm = torch.cuda.Stream()
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    out = open(args.out, "a") if rank == 0 else None  # noqa: SIM115 - rank 0 appends as it measures, closed at the end
    if out:
        v = torch.cuda.nccl.version()
        out.write(json.dumps({"kind": "environment", "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                              "gpu": torch.cuda.get_device_name(dev), "sm_count": sms, "world": world,
                              "torch": torch.__version__, "nccl": ".".join(map(str, v)) if isinstance(v, tuple)
                              else str(v), "nccl_env": {k: x for k, x in os.environ.items() if k.startswith("NCCL_")},
                              "command": " ".join(sys.argv)}) + "\n")
        out.flush()
    t_start = time.time()
    for name, shape in cases():
        if time.time() - t_start > args.budget_s:
            break
        fn = make(name, shape, dev)
        reps = calibrate_reps(fn)
        t = torch.tensor([reps], device=dev)
        dist.all_reduce(t, op=dist.ReduceOp.MIN)
        reps = int(t.item())
        alone = []
        for _ in range(SAMPLES):
            dist.barrier()
            alone.append(loop_us(fn, reps))
        a = statistics.median(alone)
        modes = [("waiting", b) for b in WAIT_BYTES] + [("busy", BUSY_BYTES)]
        for mode, nbytes in modes:
            try:
                got, nccl = (measure_waiting(fn, reps, nbytes, rank, dev, comm) if mode == "waiting"
                             else measure_busy(fn, reps, dev, comm))
                rec = {"kind": "sm_share", "mode": mode, "compute": name, "shape": list(shape), "reps": reps,
                       "comm": "all_reduce", "comm_bytes": nbytes, "comm_dtype": "bfloat16", "sm_count": sms,
                       "alone_us": round(a, 3), "with_us": round(statistics.median(got), 3),
                       "ratio": round(statistics.median(got) / a, 4) if got else None,
                       "nccl_us": round(statistics.median(nccl), 1) if nccl else None,
                       "samples_alone_us": [round(v, 3) for v in alone], "samples_with_us": [round(v, 3) for v in got]}
            except Exception as e:  # noqa: BLE001 - one failed point is a record, not the end of the run
                rec = {"kind": "sm_share", "mode": mode, "compute": name, "shape": list(shape), "comm_bytes": nbytes,
                       "error": f"{type(e).__name__}: {e}"[:300]}
            if out:
                out.write(json.dumps(rec) + "\n")
                out.flush()
                print(f"{name} {shape} {mode} {nbytes}: {rec.get('ratio')} ({time.time() - t_start:.0f}s)", flush=True)
        del fn
        torch.cuda.empty_cache()
    if out:
        out.close()
    dist.barrier()
    dist.destroy_process_group()
    return 0


def dry_run(out: str) -> int:
    """The case list and the record format without a GPU (timings null): a CPU check of the plumbing."""
    with open(out, "a") as f:
        f.write(json.dumps({"kind": "environment", "dry_run": True, "command": " ".join(sys.argv)}) + "\n")
        f.writelines(json.dumps({"kind": "sm_share", "mode": mode, "compute": name, "shape": list(shape),
                                 "comm": "all_reduce", "comm_bytes": nbytes, "alone_us": None, "with_us": None,
                                 "ratio": None, "dry_run": True}) + "\n"
                     for name, shape in cases()
                     for mode, nbytes in [("waiting", b) for b in WAIT_BYTES] + [("busy", BUSY_BYTES)])
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--budget-s", type=float, default=150.0, help="start no case after this many seconds")
    ap.add_argument("--dry-run", action="store_true", help="no GPU: write the case list as records, timings null")
    a = ap.parse_args(argv)
    return dry_run(a.out) if a.dry_run else run(a)


if __name__ == "__main__":
    sys.exit(main())
