"""Sweeps across GPU counts: a zoo model's training step under DDP and/or FSDP2 on 1, 2, 4, 8 ... GPUs (x hosts)
of each GPU kind, one row per (model, sizes, GPU, strategy, GPUs per host, hosts), and the answers: which GPU
count and strategy meets a target step time, what each costs per 1,000 samples.

Each row is :func:`gpusim.predict.distributed.predict_distributed` of the model's standard step
(:func:`gpusim.predict.distributed.zoo_builder`) wrapped by the strategy: rank 0's step, its communication, its
peak memory per rank and whether it fits. The batch is per rank (``--size batch=``): the global batch is
``batch x GPUs``, so samples per second grow with the GPUs at a constant step time (weak scaling, as torchrun runs).
Rows run in this process, one after the other (each capture takes seconds; no Dask).
"""

from __future__ import annotations

import itertools
import math

from gpusim.util.errors import GpusimError, UserError

STRATEGIES = ("ddp", "fsdp")
COLUMNS = ("model", "sizes", "gpu", "strategy", "nproc_per_node", "nnodes", "gpus", "batch_per_rank", "step_ms",
           "samples_per_s", "peak_gib", "fits", "comm_ms", "exposed_comm_ms", "error")


def parse_counts(text: str) -> list[int]:
    """``"1,2,4,8"`` -> ``[1, 2, 4, 8]``; anything but whole numbers >= 1 is one clear error."""
    out = []
    for w in str(text).split(","):
        try:
            n = int(w.strip())
        except ValueError:
            n = 0
        if n < 1:
            raise UserError(f"--nproc-per-node {text!r}: give whole numbers >= 1, comma-separated (1,2,4,8)")
        out.append(n)
    return sorted(set(out))


def sweep_dist(models, gpus, nprocs, strategies=STRATEGIES, sizes=None, nnodes: int = 1, dtype: str = "float32",
               amp=None, optimizer: str = "adamw", host=None, progress=None) -> list[dict]:
    """One row per model x size combination x GPU x strategy x GPUs per host (module docstring). ``sizes``:
    ``{key: [values]}`` (every combination). A prediction that fails is a row with ``error`` set."""
    from gpusim.predict.distributed import predict_distributed, zoo_builder
    bad = [s for s in strategies if s not in STRATEGIES]
    if bad or not strategies:
        raise UserError(f"strategy {bad[0] if bad else '(none)'!r}: choose ddp and/or fsdp (--ddp, --fsdp)")
    if nnodes < 1:
        raise UserError(f"--nnodes must be >= 1, got {nnodes}")
    keys = sorted(sizes or {})
    combos = [dict(zip(keys, vals)) for vals in itertools.product(*(sizes[k] for k in keys))] or [{}]
    rows = []
    for model, size, gpu, strategy, n in itertools.product(models, combos, gpus, strategies, nprocs):
        if progress:
            progress(f"{model} {size} {gpu} {strategy} x{n}")
        row = {"model": model, "sizes": ",".join(f"{k}={v}" for k, v in size.items()), "gpu": str(gpu),
               "strategy": strategy, "nproc_per_node": n, "nnodes": nnodes, "gpus": n * nnodes,
               "batch_per_rank": int(size.get("batch", 0)) or None, "error": ""}
        try:
            p = predict_distributed(zoo_builder(model, strategy, dtype, size, optimizer, amp), gpu, n, nnodes,
                                    host=host, world1=False)
        except GpusimError as e:
            rows.append({**row, "step_ms": None, "samples_per_s": None, "peak_gib": None, "fits": None,
                         "comm_ms": None, "exposed_comm_ms": None, "error": str(e).splitlines()[0][:300]})
            continue
        step_ms = p.step_us / 1e3
        per_rank = row["batch_per_rank"]
        rows.append({**row, "gpu": p.gpu, "step_ms": step_ms,
                     "samples_per_s": per_rank * row["gpus"] / (step_ms / 1e3) if per_rank else None,
                     "peak_gib": p.peak_bytes / 2**30, "fits": bool(p.fits), "comm_ms": p.comm_us / 1e3,
                     "exposed_comm_ms": p.exposed_comm_us / 1e3})
    return rows


def answers(rows, target_step_ms=None, prices=None, target_samples_per_s=None) -> list[dict]:
    """Per model and sizes: every configuration that fits, cheapest first where ``prices`` (GPU name or alias ->
    USD per GPU-hour) are given, else fewest GPUs then fastest; each with ``meets`` (its step time at most
    ``target_step_ms`` and its throughput at least ``target_samples_per_s``, those given) and ``usd_per_1k_samples``
    (priced GPUs, a batch given). The first row of each model with ``meets`` true is the answer."""
    prices = {str(k).lower(): float(v) for k, v in (prices or {}).items()}
    out = []
    for (model, sizes), group in itertools.groupby(sorted((r for r in rows if not r["error"] and r["fits"]),
                                                          key=lambda r: (r["model"], r["sizes"])),
                                                   key=lambda r: (r["model"], r["sizes"])):
        cands = []
        for r in group:
            price = _price(prices, r["gpu"])
            usd = (price * r["gpus"] / 3600.0 / r["samples_per_s"] * 1000.0
                   if price is not None and r["samples_per_s"] else None)
            meets = ((target_step_ms is None or r["step_ms"] <= target_step_ms)
                     and (target_samples_per_s is None or (r["samples_per_s"] or 0.0) >= target_samples_per_s))
            cands.append({**r, "usd_per_1k_samples": usd, "meets": meets})
        cands.sort(key=lambda r: (not r["meets"], math.inf if r["usd_per_1k_samples"] is None
                                  else r["usd_per_1k_samples"], r["gpus"], r["step_ms"]))
        out += cands
    return out


def _price(prices: dict, gpu: str):
    g = str(gpu).lower()
    for k, v in prices.items():
        if k == g or g.startswith(k):
            return v
    return None


def answer_table(ans: list[dict]) -> str:
    """The answers as a text table (first row of each model: the answer)."""
    lines = [f"{'model':<22} {'sizes':<14} {'gpu':<12} {'strategy':<8} {'GPUs':>4} {'step ms':>9} {'samples/s':>10} "
             f"{'GiB/rank':>8} {'$/1k samples':>12}  meets"]
    seen = set()
    for r in ans:
        first = (r["model"], r["sizes"]) not in seen
        seen.add((r["model"], r["sizes"]))
        usd = "—" if r["usd_per_1k_samples"] is None else f"{r['usd_per_1k_samples']:.4f}"
        sps = "—" if r["samples_per_s"] is None else f"{r['samples_per_s']:.0f}"
        lines.append(f"{r['model'][:22]:<22} {r['sizes'][:14]:<14} {r['gpu'][:12]:<12} {r['strategy']:<8} "
                     f"{r['gpus']:>4} {r['step_ms']:>9.1f} {sps:>10} {r['peak_gib']:>8.2f} {usd:>12}  "
                     f"{'yes' if r['meets'] else 'no'}{'  <- answer' if first and r['meets'] else ''}")
    return "\n".join(lines)
