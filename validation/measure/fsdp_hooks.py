"""What FSDP2's wrapping adds to a step, per unit, where compute and transfers are negligible: the
hooks' Python, the casts and copies, the small collectives and their waits. One JSONL line per
(units, wrapped or plain), rank 0 writes; every rank's median is kept (the skew between ranks).

    for w in 1 2 4; do NCCL_NVLS_ENABLE=0 torchrun --standalone --nproc-per-node $w \\
        -m validation.measure.fsdp_hooks --out OUT.jsonl; done

A model of ``units`` Linear(256, 256) layers (fp32 parameters, batch 32), plain or with
``fully_shard`` on each layer and the root (``MixedPrecisionPolicy(param_dtype=bf16,
reduce_dtype=fp32)`` with ``--mp``, the default; none with ``--no-mp``), SGD; 5 warm-up steps, then
``--steps`` steps each timed on the host from a synchronised start to ``cuda.synchronize()``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

from validation.measure.dist_run import environment


def build(units: int, wrapped: bool, mp: bool):
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    model = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(units)]).cuda()
    if wrapped:
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if mp \
            else MixedPrecisionPolicy()
        for layer in model:
            fully_shard(layer, mp_policy=policy)
        fully_shard(model, mp_policy=policy)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(32, 256, device="cuda")

    def step():
        model(x).float().sum().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


def timed(step, steps: int) -> list[float]:
    for _ in range(5):
        step()
    walls = []
    for _ in range(steps):
        dist.barrier()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        walls.append((time.perf_counter() - t0) * 1e3)
    return walls


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--units", default="4,16,64")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--no-mp", action="store_true")
    a = ap.parse_args(argv)
    local = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    world, rank = dist.get_world_size(), dist.get_rank()
    if rank == 0:
        with open(a.out, "a") as f:
            f.write(json.dumps(environment(world)) + "\n")
    for units in (int(u) for u in a.units.split(",")):
        for wrapped in (False, True):
            walls = timed(build(units, wrapped, not a.no_mp), a.steps)
            med = torch.tensor([statistics.median(walls)], device="cuda")
            every = [torch.zeros_like(med) for _ in range(world)]
            dist.all_gather(every, med)
            if rank == 0:
                row = {"kind": "fsdp_hooks", "world": world, "units": units, "wrapped": wrapped,
                       "mixed_precision": not a.no_mp, "layer": "Linear(256, 256), batch 32, SGD",
                       "rank0_step_ms": {"median": round(statistics.median(walls), 4), "min": round(min(walls), 4),
                                         "max": round(max(walls), 4), "n": len(walls)},
                       "rank_medians_ms": [round(float(t.item()), 4) for t in every]}
                with open(a.out, "a") as f:
                    f.write(json.dumps(row) + "\n")
                print(f"world {world} units {units} wrapped {wrapped}: {row['rank_medians_ms']}", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
