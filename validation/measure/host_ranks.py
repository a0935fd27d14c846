"""The host's speed with N ranks on it: each of N processes (one a GPU) runs the host probes at once (issue 33).

The distributed step records (``validation/measure/dist_run.py``) read host_drift's pure-Python probe at ~1.4k us
with one rank and 2.3-3.2k us with 2 or 4 ranks on the same x4 leases. This measures what that does to the work a
step's host issues, on any multi-GPU host, at each process count N::

    for n in 1 2 4; do NCCL_NVLS_ENABLE=0 torchrun --standalone --nproc-per-node $n \\
        -m validation.measure.host_ranks --out OUT.jsonl; done

Every rank, in two states: ``no_comm`` (the process group not yet made: N processes, no NCCL) and ``nccl_live``
(after ``init_process_group("nccl")``, a barrier and an all-reduce: NCCL's communicator and its threads alive, as in
a DDP/FSDP step), each after a barrier of its own so the ranks probe at once, ``--samples`` times:

- ``python_us``: host_drift's fixed pure-Python workload (best of 3);
- ``eager_op_us``: wall per eager ``torch.add`` on a small CUDA tensor in a loop of 100, synchronised (calibrate's
  ``eager_op_us``);
- ``eager_module_us``: wall per extra ``nn.Identity`` call, ``nn.Sequential`` of 64 vs 1 (calibrate's
  ``eager_module_us``).

Rank 0 writes one record per state with every rank's median of each figure and the slowest rank's; the ratio of the
N-rank record to the 1-rank one is the host figure ``ranks_host_factor`` (``hosts/*.toml``; gpusim.sim.ranks). On a
machine without CUDA (``--device cpu``, gloo) the same loops run on CPU tensors: a smoke test, never data.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

FIGURES = ("python_us", "eager_op_us", "eager_module_us")


def eager_op_us(dev, loop: int = 100) -> float:
    import torch
    x = torch.ones(8, device=dev)
    for _ in range(10):
        x.add(1)
    _sync(dev)
    t0 = time.perf_counter()
    for _ in range(loop):
        x.add(1)
    _sync(dev)
    return (time.perf_counter() - t0) / loop * 1e6


def eager_module_us(loop: int = 50) -> float:
    import torch
    one, many = torch.nn.Sequential(torch.nn.Identity()), torch.nn.Sequential(*[torch.nn.Identity()] * 64)
    x = torch.ones(1)

    def wall(m):
        t0 = time.perf_counter()
        for _ in range(loop):
            m(x)
        return (time.perf_counter() - t0) / loop * 1e6
    return (min(wall(many) for _ in range(3)) - min(wall(one) for _ in range(3))) / 63


def _sync(dev):
    import torch
    if getattr(dev, "type", str(dev)) == "cuda":
        torch.cuda.synchronize(dev)


def probe(dev) -> dict:
    from validation.measure.host_drift import python_us
    return {"python_us": python_us(), "eager_op_us": eager_op_us(dev), "eager_module_us": eager_module_us()}


def sample(dev, samples: int, barrier) -> dict:
    """``samples`` probes, each after ``barrier()`` (the ranks probe at once): figure -> list."""
    got = {k: [] for k in FIGURES}
    for _ in range(samples):
        barrier()
        for k, v in probe(dev).items():
            got[k].append(v)
    return got


def summary(per_rank: list[dict]) -> dict:
    """Every rank's medians, and over ranks the median and the slowest rank's."""
    med = [{k: statistics.median(r[k]) for k in FIGURES} for r in per_rank]
    return {"rank_median": [{k: round(m[k], 3) for k in FIGURES} for m in med],
            "median": {k: round(statistics.median(m[k] for m in med), 3) for k in FIGURES},
            "slowest": {k: round(max(m[k] for m in med), 3) for k in FIGURES}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--samples", type=int, default=15)
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                    help="cpu: gloo and CPU tensors, a smoke test of the plumbing (never data)")
    a = ap.parse_args(argv)
    import torch
    import torch.distributed as dist
    local, world = int(os.environ.get("LOCAL_RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    if a.device == "cuda":
        torch.cuda.set_device(local)
        dev = torch.device("cuda", local)
    else:
        dev = torch.device("cpu")
    # no_comm: N processes, no communicator; a file barrier would need a shared path, so the ranks line up by the
    # wall clock instead (each starts its samples at the next whole second after all have started)
    start = time.time()
    time.sleep(max(0.0, (int(start) + 2) - start))
    no_comm = sample(dev, a.samples, lambda: None)
    if "RANK" in os.environ:
        backend = "nccl" if a.device == "cuda" else "gloo"
        dist.init_process_group(backend, **({"device_id": dev} if a.device == "cuda" else {}))
        t = torch.ones(1, device=dev)
        dist.all_reduce(t)
        live = sample(dev, a.samples, dist.barrier)
        gathered = [None] * world
        dist.all_gather_object(gathered, {"no_comm": no_comm, "nccl_live": live})
        rank = dist.get_rank()
    else:
        gathered, rank = [{"no_comm": no_comm, "nccl_live": None}], 0
    if rank == 0:
        env = {"utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "world": world,
               "device": torch.cuda.get_device_name(dev) if a.device == "cuda" else "cpu (smoke test)",
               "torch": torch.__version__, "cpus": os.cpu_count(),
               "affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
               "command": " ".join(sys.argv)}
        with open(a.out, "a") as f:
            for state in ("no_comm", "nccl_live"):
                per = [g[state] for g in gathered if g[state] is not None]
                if per:
                    rec = {"kind": "host_ranks", "state": state, "samples": a.samples, **env, **summary(per)}
                    f.write(json.dumps(rec) + "\n")
                    f.flush()
                    print(f"world {world} {state}: {rec['median']} (slowest {rec['slowest']})", flush=True)
    if "RANK" in os.environ:
        dist.barrier()
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
