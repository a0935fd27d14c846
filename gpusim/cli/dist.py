"""The CLI across GPUs: ``gpusim predict FILE.py:NAME --nproc-per-node N [--nnodes M]`` (the user's builder) and
``gpusim predict MODEL --train --ddp|--fsdp --nproc-per-node N`` (a zoo model's standard step, wrapped)."""

from __future__ import annotations

import sys

from gpusim.util.errors import UserError


def add_dist_args(p) -> None:
    p.add_argument("--nproc-per-node", type=int, default=None, metavar="N",
                   help="GPUs per host: predict one rank of a data-parallel step (MODEL is then FILE.py:NAME, a "
                        "builder returning (step, args) written for torchrun, or a zoo model with --train "
                        "--ddp/--fsdp)")
    p.add_argument("--nnodes", type=int, default=None, metavar="M",
                   help="hosts (with --nproc-per-node; collectives across hosts over InfiniBand NDR, simulated)")
    p.add_argument("--ddp", action="store_true", help="wrap the zoo model's step in DistributedDataParallel")
    p.add_argument("--fsdp", action="store_true", help="fully_shard each block of the zoo model and its root "
                   "(with --amp bf16: MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32))")
    p.add_argument("--link", default=None, metavar="NAME|PATH",
                   help="how the GPUs of a host are connected (default: the link spec naming the GPU)")


def is_dist(a) -> bool:
    return a.nproc_per_node is not None or a.nnodes is not None or a.ddp or a.fsdp


def _check(a) -> None:
    if (a.ddp or a.fsdp) and not a.train:
        raise UserError("--ddp/--fsdp wrap a training step; add --train")
    if a.ddp and a.fsdp:
        raise UserError("--ddp and --fsdp: choose one")
    n = 1 if a.nproc_per_node is None else a.nproc_per_node
    m = 1 if a.nnodes is None else a.nnodes
    if n < 1 or m < 1:
        raise UserError(f"--nproc-per-node and --nnodes must be >= 1, got {n} and {m}")
    if a.mode != "eager" or "," in a.gpu:
        raise UserError("across GPUs gpusim predicts one GPU kind in eager mode (drop --mode, the GPU list)")
    if a.max_batch and not (a.ddp or a.fsdp):
        raise UserError("--max-batch across GPUs searches a zoo model's batch per rank (--train --ddp/--fsdp); "
                        "your builder fixes its own batch")
    if a.max_batch and any(k.split("=")[0].strip() == "batch" for k in a.size or []):
        raise UserError("--max-batch searches the batch size itself; drop --size batch=...")
    if getattr(a, "plot", None) or getattr(a, "dot", None):
        raise UserError("across GPUs only --trace is drawn (both streams of rank 0)")


def _builder(a, batch=None):
    from gpusim.models.resolve import load_builder, parse_sizes
    if a.model.endswith(".py") or ".py:" in a.model:
        if a.ddp or a.fsdp or a.train:
            raise UserError("your builder wraps its own model: drop --train/--ddp/--fsdp for FILE.py:NAME")
        return load_builder(a.model)
    if not (a.ddp or a.fsdp):
        raise UserError(f"{a.model}: a zoo model across GPUs needs --train and --ddp or --fsdp "
                        "(or pass your own builder, FILE.py:NAME)")
    from gpusim.predict.distributed import zoo_builder
    sizes = parse_sizes(a.size)
    if batch is not None:
        sizes = {**sizes, "batch": batch}
    return zoo_builder(a.model, "ddp" if a.ddp else "fsdp", a.dtype, sizes, a.optimizer, getattr(a, "amp", None))


def cmd_predict_dist(a) -> int:
    from gpusim.predict.distributed import predict_distributed
    from gpusim.report.text import dumps
    _check(a)
    n = 1 if a.nproc_per_node is None else a.nproc_per_node
    m = 1 if a.nnodes is None else a.nnodes
    p = predict_distributed(_builder(a), a.gpu, n, m, host=a.host, link=a.link)
    r = _max_batch(a, n, m) if a.max_batch else None
    if a.json:
        doc = p.to_dict()
        if r is not None:
            doc.update(max_batch_per_rank=r["batch"], limit_reached=r["limit_reached"],
                       tried={str(k): v for k, v in sorted(r["tried"].items())})
        print(dumps(doc))
    else:
        print(dist_text(p, a.model))
        if r is not None:
            print(_max_batch_text(a, n, m, r))
    if getattr(a, "trace", None):
        import json

        from gpusim.util.atomic import atomic_write
        atomic_write(a.trace, json.dumps(p.trace()))
        print(f"wrote {a.trace}", file=sys.stderr)
    return 0


def _max_batch(a, n: int, m: int) -> dict:
    """The largest batch per rank of the zoo model's step (:func:`max_batch_per_rank`)."""
    from gpusim.predict.distributed import max_batch_per_rank
    return max_batch_per_rank(lambda b: _builder(a, b), a.gpu, n, m, host=a.host, link=a.link)


def _max_batch_text(a, n: int, m: int, r: dict) -> str:
    from gpusim.sim.memory import fmt_bytes
    what = f"{'DDP' if a.ddp else 'FSDP'} step on {n} GPU{'s' if n > 1 else ''}" + (f" x {m} hosts" if m > 1 else "")
    tried = ", ".join(f"{b}: {fmt_bytes(v)}" for b, v in sorted(r["tried"].items()))
    if r["batch"] == 0:
        return f"max batch        none: a {what} at batch 1 per rank does not fit ({tried})"
    return (f"max batch        {r['batch']} per rank whose {what} fits"
            + (" (the search's limit)" if r["limit_reached"] else "")
            + f"\n  searched       batch: peak per rank {tried}")


def dist_text(p, label: str) -> str:
    from gpusim.sim.memory import fmt_bytes
    ms = 1e3
    where = f"{p.nproc_per_node} GPU{'s' if p.nproc_per_node > 1 else ''}" + (
        f" x {p.nnodes} hosts" if p.nnodes > 1 else "")
    lines = [f"{label}: {p.strategy.upper() if p.strategy != 'none' else 'no wrapper'} on {where} of {p.gpu} "
             f"({p.link}, collectives {p.link_source})",
             f"step time        {p.step_us / ms:9.3f} ms per rank (back to back; {p.synced_step_us / ms:.3f} ms "
             "synchronised each step, e.g. by loss.item())",
             f"  compute        {p.compute_us / ms:9.3f} ms on the compute stream (NCCL's SM share adds "
             f"{p.slowdown_us / ms:.3f} ms; factor {p.overlap_factor:.3f})",
             f"  communication  {p.comm_us / ms:9.3f} ms: exposed {p.exposed_comm_us / ms:.3f} ms, hidden "
             f"{p.hidden_comm_us / ms:.3f} ms ({p.n_collectives} collectives)",
             f"  host           {p.host_us / ms:9.3f} ms issuing the step's kernels"]
    if p.world1_step_us:
        lines.append(f"scaling          {p.scaling:.3f}x the same step on 1 GPU ({p.world1_step_us / ms:.3f} ms)")
    lines.append(f"memory per rank  {fmt_bytes(p.peak_bytes)} peak in the {p.peak_phase} phase; "
                 f"{'fits' if p.fits else 'does NOT fit'} in {fmt_bytes(p.capacity_bytes)}")
    if p.nnodes > 1:
        lines.append("across hosts: hierarchical collectives (NVLink inside a host, InfiniBand NDR between), "
                     "simulated, not validated")
    return "\n".join(lines)
