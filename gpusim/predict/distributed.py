"""Predict a training step across GPUs: ``gpusim.predict(builder, gpu=..., nproc_per_node=N, nnodes=M)``.

The user's builder runs under torch's fake process group (:mod:`gpusim.capture.distributed`); rank 0's
step is predicted as a single-GPU step (capture, eager lowering, cost, host/GPU timeline); the wrapper's
collectives and copies are added (:mod:`gpusim.lower.distributed`) and one rank's two streams simulated
(:mod:`gpusim.sim.ranks`) with its memory (:mod:`gpusim.sim.rank_memory`). Every rank runs the same step on
its own batch, so rank 0 stands for all of them (the slowest rank sets a real step's wall: run-to-run
spread is not modelled).

:class:`DistPrediction` holds plain numbers: step time, compute, communication in total / exposed /
hidden, the single-GPU step of the same builder (world 1) and the scaling over it, memory per rank, and
the two-stream timeline (:meth:`DistPrediction.trace` for Perfetto).

Two step times. ``step_us``: steps back to back with no host read between them, where the next step's
forward (Python, host-bound) is issued while this step's backward and optimizer still run on the GPU.
``synced_step_us``: one step from an idle GPU to its last kernel's end, what a loop that synchronises every
step runs (``loss.item()`` for logging, ``torch.cuda.synchronize()`` around a timed step, as the lab's distributed harness times it): the host's lead
before the GPU is busy and the GPU's drain after the host is done both count. They are close when a host read
early in the step drains the GPU anyway; a step whose forward is host-bound and whose backward is device-bound
(GPT-2, Llama-1B under DDP/FSDP2) is 10-15% longer synchronised.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpusim.capture.distributed import capture_distributed
from gpusim.cost.collectives import link_for
from gpusim.hw.host import at_ranks, load_host
from gpusim.lower.distributed import plan
from gpusim.predict.pipeline import as_spec, lower, predict_lowering
from gpusim.sim.memory import capacity_bytes
from gpusim.sim.rank_memory import rank_memory
from gpusim.sim.ranks import simulate_rank
from gpusim.util.errors import UserError


@dataclass
class DistPrediction:
    """One rank of a data-parallel step (all times µs, memory bytes)."""
    gpu: str
    strategy: str
    nproc_per_node: int
    nnodes: int
    step_us: float
    synced_step_us: float            # one step from an idle GPU to its last kernel's end (a loop that syncs each step)
    compute_us: float
    comm_us: float
    exposed_comm_us: float
    hidden_comm_us: float
    slowdown_us: float
    host_us: float
    single_step_us: float            # rank 0's step without the wrapper's work (its compute alone)
    world1_step_us: float | None     # the same builder on one GPU (None: not predicted)
    peak_bytes: int
    peak_phase: str
    fits: bool
    capacity_bytes: float
    n_collectives: int
    n_added_kernels: int
    link: str
    link_source: str
    overlap_factor: float
    config: dict = field(default_factory=dict)
    plan: object = field(default=None, repr=False)
    rank: object = field(default=None, repr=False)
    single: object = field(default=None, repr=False)

    @property
    def world(self) -> int:
        return self.nproc_per_node * self.nnodes

    @property
    def scaling(self) -> float | None:
        """Step time over the same builder's step on one GPU (1.0: perfect weak scaling)."""
        return self.step_us / self.world1_step_us if self.world1_step_us else None

    def to_dict(self) -> dict:
        keys = ("gpu", "strategy", "nproc_per_node", "nnodes", "step_us", "synced_step_us", "compute_us", "comm_us",
                "exposed_comm_us", "hidden_comm_us", "slowdown_us", "host_us", "single_step_us",
                "world1_step_us", "peak_bytes", "peak_phase", "fits", "capacity_bytes", "n_collectives",
                "n_added_kernels", "link", "link_source", "overlap_factor")
        d = {k: getattr(self, k) for k in keys}
        d.update(world=self.world, scaling=self.scaling, config=self.config)
        return d

    def trace(self) -> dict:
        """Chrome/Perfetto trace of rank 0's first step: the host lane, the compute stream and the
        communication stream (``chrome://tracing`` or ui.perfetto.dev)."""
        from gpusim.sim.ranks import RankEvent
        evs = [{"name": "process_name", "ph": "M", "pid": 0, "args": {"name": f"rank 0 ({self.gpu})"}}]
        tids = {"host": 0, "compute": 1, "comm": 2}
        for lane, tid in tids.items():
            evs.append({"name": "thread_name", "ph": "M", "pid": 0, "tid": tid,
                        "args": {"name": {"host": "host", "compute": "compute stream",
                                          "comm": "NCCL stream"}[lane]}})
        host = [RankEvent(e.name, "host", e.start_us, e.dur_us) for e in self.single.timeline.events
                if e.lane == "host" and e.call == 0]
        for e in host + list(self.rank.events):
            evs.append({"name": e.name, "ph": "X", "pid": 0, "tid": tids[e.stream], "ts": round(e.start_us, 3),
                        "dur": round(e.dur_us, 3), "cat": e.kind})
        return {"traceEvents": evs, "displayTimeUnit": "ms"}


def predict_distributed(builder, gpu="h100", nproc_per_node: int = 1, nnodes: int = 1, host=None,
                        link=None, world1: bool = True, name: str | None = None) -> DistPrediction:
    """Predict rank 0 of ``builder()``'s step on ``nproc_per_node x nnodes`` GPUs of kind ``gpu``
    (module docstring). ``link``: how the GPUs of a host are connected (default: the link spec naming the
    GPU, e.g. NVLink 4 for H100/H200 SXM); across hosts, InfiniBand NDR per GPU. ``world1``: also predict
    the builder on one GPU (the scaling)."""
    if not callable(builder):
        raise UserError("nproc_per_node/nnodes need a builder: a function of no arguments returning (step, args)")
    for label, v in (("nproc_per_node", nproc_per_node), ("nnodes", nnodes)):
        if not isinstance(v, int) or v < 1:
            raise UserError(f"{label} must be a whole number >= 1, got {v!r}")
    spec = as_spec(gpu)
    base_host = load_host(host)
    host = at_ranks(base_host, nproc_per_node)      # the host with nproc_per_node ranks on it
    lk = link_for(spec, link)
    cap, cfg = capture_distributed(builder, nproc_per_node, nnodes, name=name)
    low = lower(cap.graph, "eager", spec=spec)
    single = predict_lowering(low, spec, host=host)
    dplan = plan(low, cfg)
    rank = simulate_rank(single, dplan, lk, spec, host)
    mem = rank_memory(single, dplan, cfg)
    w1 = None
    if world1:
        w1 = single.end_to_end_us if nproc_per_node * nnodes == 1 else predict_distributed(
            builder, spec, 1, 1, base_host, lk, world1=False, name=name).step_us
    from gpusim.cost.collectives import regimes, sm_share_factor
    # a compute-bound kernel beside a collective on all of NCCL's ring channels (gpusim.sim.ranks)
    factor = sm_share_factor(lk.nccl_coll.get("coll_channels"), spec.sm_count)
    fsrc = (f"law: {spec.sm_count} SMs / ({spec.sm_count} - {lk.nccl_coll['coll_channels']} NCCL channels)"
            if lk.nccl_coll else "no NCCL channels in the link file: none")
    _, lsrc = regimes(lk, "all_reduce", spec.name)
    config = {"ddp": dict(cfg.ddp), "buckets": [{"params": len(k), "bytes": int(s), "dtype": d}
                                                for k, s, d in dplan.buckets],
              "units": [{k: v for k, v in u.items()} for u in dplan.units],
              "overlap_source": fsrc}
    return DistPrediction(
        gpu=spec.name, strategy=dplan.strategy, nproc_per_node=nproc_per_node, nnodes=nnodes,
        step_us=float(rank.step_us), synced_step_us=float(rank.span_us), compute_us=float(rank.compute_us), comm_us=float(rank.comm_us),
        exposed_comm_us=float(rank.exposed_comm_us), hidden_comm_us=float(rank.hidden_comm_us),
        slowdown_us=float(rank.slowdown_us), host_us=float(single.timeline.host_us),
        single_step_us=float(single.end_to_end_us), world1_step_us=None if w1 is None else float(w1),
        peak_bytes=mem["peak_bytes"], peak_phase=mem["peak_phase"], fits=mem["fits"],
        capacity_bytes=mem["capacity_bytes"],
        n_collectives=sum(1 for op in dplan.ops if op.kind != "copy"),
        n_added_kernels=len(dplan.ops), link=lk.name, link_source=lsrc, overlap_factor=float(factor),
        config=config, plan=dplan, rank=rank, single=single)


def fsdp_blocks(model) -> list:
    """The blocks ``--fsdp`` shards one by one: the children of the model's largest ``ModuleList`` or
    ``Sequential`` of repeated blocks (a decoder's layers, a ViT's blocks); else (a CNN's stages) the direct
    children that hold parameters, but never the whole model."""
    import torch
    best = None
    for _, m in model.named_modules():
        if isinstance(m, (torch.nn.ModuleList, torch.nn.Sequential)) and m is not model and len(m) > 1:
            if best is None or len(m) > len(best):
                best = m
    if best is not None and len(best) >= 4:
        return [b for b in best if any(True for _ in b.parameters())]
    return [c for c in model.children() if any(True for _ in c.parameters())]


def wrap_model(strategy: str):
    """``wrap`` for :func:`gpusim.predict.step.standard_step`: ``"ddp"`` wraps the model in
    ``DistributedDataParallel`` (PyTorch's defaults); ``"fsdp"`` calls ``fully_shard`` on each block
    (:func:`fsdp_blocks`) and the root, with bf16 parameters and fp32 reductions
    (``MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32)``) when ``bf16`` is asked."""
    def ddp(model):
        from torch.nn.parallel import DistributedDataParallel
        return DistributedDataParallel(model)

    def fsdp(model, mp=None):
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
        policy = mp or MixedPrecisionPolicy()
        for b in fsdp_blocks(model):
            fully_shard(b, mp_policy=policy)
        fully_shard(model, mp_policy=policy)
        return model
    if strategy == "ddp":
        return ddp
    if strategy in ("fsdp", "fsdp_bf16"):
        if strategy == "fsdp":
            return fsdp
        import torch
        from torch.distributed.fsdp import MixedPrecisionPolicy
        return lambda m: fsdp(m, MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32))
    raise UserError(f"unknown data-parallel strategy {strategy!r}; use ddp or fsdp")


def zoo_builder(model_name: str, strategy: str, dtype="float32", sizes=None, optimizer="adamw", amp=None):
    """A builder of the standard training step (:func:`gpusim.predict.step.standard_step`) of a zoo model
    wrapped by ``strategy`` (:func:`wrap_model`; FSDP with ``amp="bf16"`` shards with bf16 parameters)."""
    from gpusim.predict.step import standard_step
    wrap = wrap_model("fsdp_bf16" if strategy == "fsdp" and amp == "bf16" else strategy)

    def builder():
        return standard_step(model_name, dtype, sizes, optimizer, None if strategy == "fsdp" else amp, wrap)
    builder.__name__ = f"{model_name} {strategy} step ({optimizer})"
    return builder


def max_batch_per_rank(make_builder, gpu="h100", nproc_per_node: int = 1, nnodes: int = 1, host=None, link=None,
                       start: int = 1, limit: int = 1 << 16) -> dict:
    """The largest batch per rank whose step fits on ``gpu``: ``make_builder(batch)`` returns a builder;
    :func:`gpusim.predict.step.largest_batch` over rank 0's predicted peak (``"tried"``: batch -> peak bytes)."""
    from gpusim.predict.step import largest_batch

    def probe(b: int):
        p = predict_distributed(make_builder(b), gpu, nproc_per_node, nnodes, host=host, link=link, world1=False)
        return p.peak_bytes, p.fits
    return largest_batch(probe, capacity_bytes(as_spec(gpu)), start, limit)
