"""What the microbenchmark sweeps share: their dtypes and the timing of one point."""

from __future__ import annotations

import json
import time

import torch


DTYPES = ("float32", "float16", "bfloat16")


def _t(shape, dtype, cl=False, dev="cuda"):
    x = torch.randn(*shape, device=dev, dtype=getattr(torch, dtype))
    if cl and x.dim() == 4:
        x = x.contiguous(memory_format=torch.channels_last)
    return x


def budgeted_sweep(out: str, env: dict, todo, run, describe, label: str, budget_s: float) -> int:
    """Write ``env``, then ``run(point)``'s record for each point, flushed one by one, starting no
    point after ``budget_s`` seconds (those listed as ``not_reached`` in a closing ``summary`` line);
    prints each point's kernels as ``describe(point)``. Returns the points measured."""
    t_start, done, not_reached = time.time(), 0, []
    with open(out, "w") as f:
        f.write(json.dumps(env) + "\n")
        f.flush()
        for p in todo:
            if time.time() - t_start > budget_s:
                not_reached.append(p)
                continue
            rec = run(p)
            f.write(json.dumps(rec) + "\n")
            f.flush()
            done += 1
            ks = " ".join("%s=%.1f" % (k["name"][:40], k["us"]) for k in rec.get("kernels") or [])
            print(f"{describe(p)} {rec.get('failed') or ks}  ({time.time() - t_start:.0f}s)", flush=True)
        f.write(json.dumps({"kind": "summary", "done": done, "not_reached": not_reached,
                            "elapsed_s": round(time.time() - t_start, 1)}) + "\n")
    print(f"{label}: {done} points, {len(not_reached)} not reached, {time.time() - t_start:.0f} s", flush=True)
    return done
