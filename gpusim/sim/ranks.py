"""Simulate one rank: a compute stream and a communication stream, with their dependencies.

The rank runs the step's compute kernels (the single-GPU prediction's, in its order) and what the
wrapper adds (:class:`~gpusim.lower.distributed.DistPlan`): copies on the compute stream, NCCL's
collectives (and FSDP's copies on its own streams) on the communication stream. Each stream runs in
order; an operation starts once

- its stream is free,
- the host has issued it (plus the launch latency): a step kernel when the single-GPU host lane issued
  it, an added operation when the host issued the compute kernel it follows; each added operation (a
  copy, a collective) costs the host one eager op (the host profile's ``eager_op_us``; DDP's Reducer
  launches from C++: one kernel launch, ``kernel_launch_us``), which later issues pay too, and a host read (a sync) that now ends later delays every later issue by as much,
- the operations it waits for are done (a bucket's gradients before its all-reduce; FSDP's gather
  before its unit; the optimizer after the last reduction).

The wrapper's own Python (FSDP2's hooks: :attr:`~gpusim.lower.distributed.DistPlan.host_calls`, torch calls
counted at capture, and one sync per unit and step across ranks) delays the issue of the kernels after it, priced
by the host's fitted FSDP2 law (:func:`fsdp_host_law`, fitted on a per-unit microbenchmark by
``validation/fit/fsdp_law.py``); a host without it: ``python_torch_call_us`` plus ``eager_view_us`` per call, a
lower bound.

NCCL's kernels hold SMs while they run, one CTA a channel: a compute-bound kernel overlapping a collective runs its
waves on the SMs the call's channels leave, over the overlapped part (:func:`gpusim.cost.collectives.sm_share_factor`
of :func:`~gpusim.cost.collectives.kernel_channels`: 132 / 108 = 1.22x on an H200 beside a 24-channel all-reduce); a
memory-bound kernel or added copy shares memory bandwidth with NCCL's transfer instead, by the link's measured copy
factor (``[measured."<gpu>".overlap].copy_slowdown`` in ``hwspecs/links/``,
:func:`gpusim.cost.collectives.concurrent_compute_slowdown`; 1.0 where unmeasured). Measured on 2 H200s
(``validation/measure/sm_share.py``): beside a waiting 24-channel all-reduce, bf16 GEMMs and convolutions 1.02-1.86x
(median 1.21x: waves, a grid of about one wave on 132 SMs takes two on 108), fp32 adds 1.00x; beside a busy one the
adds 1.13-1.18x (bandwidth).

:func:`simulate_rank` returns a :class:`RankTimeline`: per-operation events on both streams, the step
time (the single-GPU step's steady-state time plus how much later this rank's first step ends than the
single GPU's), and communication in total, exposed (the communication stream busy while the compute
stream is idle) and hidden.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from gpusim.cost import collectives as coll
from gpusim.sim.timeline import is_sync


@dataclass(frozen=True)
class RankEvent:
    name: str
    stream: str        # "compute" | "comm" | "host"
    start_us: float
    dur_us: float
    kind: str = "kernel"
    kernel: int | None = None

    @property
    def end_us(self) -> float:
        return self.start_us + self.dur_us


@dataclass
class RankTimeline:
    events: list
    step_us: float
    span_us: float                # first step: host start to the last operation's end
    compute_us: float             # compute stream busy (step kernels + added copies, slowed)
    comm_us: float                # communication stream busy
    exposed_comm_us: float        # comm busy while compute idle
    slowdown_us: float            # compute time added by concurrent NCCL kernels
    collectives: list = field(default_factory=list)   # CollectiveTime of each comm op, in order

    @property
    def hidden_comm_us(self) -> float:
        return self.comm_us - self.exposed_comm_us


def _issues(timeline, n: int) -> tuple[list, list]:
    """Per step kernel: when the single-GPU host lane enqueued it, and when it ended there."""
    enq, end = [0.0] * n, [0.0] * n
    last = 0.0
    host_end = {}
    for e in timeline.events:
        if e.call == 0 and e.lane == "host" and e.kernel is not None and e.name.startswith("launch"):
            host_end[e.kernel] = e.start_us + e.dur_us
        if e.call == 0 and e.lane == "gpu" and e.kernel is not None:
            end[e.kernel] = e.start_us + e.dur_us
    for i in range(n):
        last = host_end.get(i, last)
        enq[i] = last
    return enq, end


def fsdp_host_law(host, world: int) -> tuple[float, float]:
    """FSDP2's host cost on ``host`` across ``world`` ranks: (µs per torch call its hooks make, µs per unit per step
    beyond those calls). Per call: the host's fitted ``fsdp_hook_call_us``, else the floor, the Python around a torch
    call plus the cheapest dispatch (``python_torch_call_us + eager_view_us``). Per unit: ``fsdp_unit_us`` (0 where
    not fitted), and across >= 2 ranks ``fsdp_unit_sync_us`` at 4 ranks plus ``fsdp_unit_sync_doubling_us`` per
    doubling (linear in log2 of the ranks, below and past the worlds fitted too)."""
    per_call = host.fsdp_hook_call_us
    if per_call is None:
        per_call = (host.python_torch_call_us or 0.0) + host.eager_view_us
    per_unit = host.fsdp_unit_us or 0.0
    if world >= 2 and host.fsdp_unit_sync_us is not None:
        per_unit += host.fsdp_unit_sync_us + (math.log2(world) - 2.0) * (host.fsdp_unit_sync_doubling_us or 0.0)
    return per_call, per_unit


def _overlap(intervals, s: float, e: float) -> float:
    return sum(max(0.0, min(e, b) - max(s, a)) for a, b in intervals)


def simulate_rank(pred, dplan, link, spec, host) -> RankTimeline:
    """Schedule rank 0 of ``dplan`` around ``pred`` (the step's single-GPU
    :class:`~gpusim.predict.pipeline.Prediction`) on ``link`` (module docstring)."""
    ks = pred.kernels
    n = len(ks)
    enq, old_end = _issues(pred.timeline, n)
    # host work the wrapper's Python does before given kernels (FSDP2's hooks and per-unit syncs)
    per_call, per_unit = fsdp_host_law(host, dplan.world)
    hook, hook_at = 0.0, [0.0] * n
    for i in range(n):
        hook += dplan.host_calls.get(i, 0.0) * per_call + dplan.host_units.get(i, 0.0) * per_unit
        hook_at[i] = hook
        enq[i] += hook
    lat = host.launch_latency_us
    gpu = spec.name
    slow_m = coll.concurrent_compute_slowdown(link, gpu, "memory")[0]
    busy = spec.stream_busy_factor or 1.0
    # the compute stream's queue: step kernels with the added compute ops after their anchor
    after: dict[int, list] = {}
    for op in dplan.ops:
        if op.stream == "compute":
            after.setdefault(op.after, []).append(op)
    queue = [("op", op) for op in after.get(-1, [])]
    for i in range(n):
        queue.append(("k", i))
        queue += [("op", op) for op in after.get(i, [])]
    comm = [op for op in dplan.ops if op.stream == "comm"]
    done: dict[str, float] = {}
    events, colls = [], []
    comm_iv: list = []
    comm_sm: list = []       # per comm interval: the SM-share factor of its NCCL kernel (1.0: a copy)
    comp_iv: list = []
    shift = 0.0              # host delay carried to later issues
    host_extra = 0.0         # host time of added compute kernels so far
    extra_at: dict[int, float] = {}
    # the host time of one added op: DDP's Reducer launches from C++ (one kernel launch), FSDP2 from Python
    op_host = (host.kernel_launch_us or host.eager_op_us) if dplan.issued_from == "c++" else host.eager_op_us
    cf = mf = 0.0
    ci = mi = 0
    slowed = 0.0
    issued_k = -1            # the last step kernel whose issue time is known

    def issue_of(anchor: int) -> float:
        return (enq[anchor] if anchor >= 0 else 0.0) + shift + extra_at.get(anchor, host_extra)

    def deps_done(deps) -> bool:
        return all(d in done for d in deps)

    while ci < len(queue) or mi < len(comm):
        cand = []
        if ci < len(queue):
            kind, x = queue[ci]
            if kind == "k":
                deps = dplan.waits.get(x, ())
                t0 = enq[x] + shift + host_extra + lat
            else:
                deps = x.deps
                t0 = issue_of(x.after) + op_host + lat
            if deps_done(deps):
                cand.append((max(cf, t0, max((done[d] for d in deps), default=0.0)), 0))
        if mi < len(comm):
            op = comm[mi]
            if deps_done(op.deps) and (op.after < 0 or op.after <= issued_k):
                t0 = issue_of(op.after) + lat
                cand.append((max(mf, t0, max((done[d] for d in op.deps), default=0.0)), 1))
        if not cand:
            raise RuntimeError("rank schedule stuck: an operation waits for one that never runs "
                               f"(compute {queue[ci] if ci < len(queue) else None}, "
                               f"comm {comm[mi].name if mi < len(comm) else None})")
        start, which = min(cand)
        if which == 0:
            kind, x = queue[ci]
            if kind == "k":
                k = ks[x]
                dur = k.us * busy * dplan.scale.get(x, 1.0)
                if x in dplan.scale:
                    dur = max(dur, spec.kernel_min_us)
                compute_bound = k.bound == "compute"
                name = k.name
                issued_k = max(issued_k, x)
            else:
                dur = coll.copy_us(x.bytes, spec)
                compute_bound = False
                name = x.name
                host_extra += op_host
                extra_at[x.after] = host_extra
            # over each overlapped interval: a compute-bound kernel loses the SMs NCCL's CTAs hold, a memory-bound one
            # the bandwidth NCCL's transfer takes (its SMs it does not miss: validation/results/dist/*-sm_share.jsonl)
            add = sum(((f if compute_bound else slow_m) - 1.0) * _overlap([iv], start, start + dur)
                      for iv, f in zip(comm_iv, comm_sm))
            slowed += add
            dur += add
            events.append(RankEvent(name, "compute", start, dur, "kernel" if kind == "k" else x.kind,
                                    x if kind == "k" else None))
            comp_iv.append((start, start + dur))
            cf = start + dur
            if kind == "k":
                extra_at.setdefault(x, host_extra)
                # a host read: the host resumes when the value is there; the delay carried on is the larger of
                # the one it had (shift, added ops, hooks) and how much later the read's kernel ends now
                late = cf - old_end[x] - host_extra - hook_at[x]
                if is_sync(ks[x]) and late > shift:
                    shift = late
            else:
                done[x.name] = cf
            ci += 1
        else:
            op = comm[mi]
            sm = 1.0
            if op.kind == "copy":
                dur = coll.copy_us(op.bytes, spec)
            else:
                ct = coll.hierarchical(op.kind, op.bytes, dplan.nproc_per_node, dplan.nnodes, link,
                                       _inter(dplan), gpu) if dplan.nnodes > 1 else \
                    coll.ring(op.kind, op.bytes, dplan.world, link, gpu)
                colls.append(ct)
                dur = ct.us
                sm = coll.sm_share_factor(ct.channels, spec.sm_count)
            events.append(RankEvent(op.name, "comm", start, dur, op.kind))
            host_extra += op_host          # the host launched it too (ProcessGroupNCCL, a side-stream copy)
            comm_iv.append((start, start + dur))
            comm_sm.append(sm)
            mf = start + dur
            done[op.name] = mf
            mi += 1
    end = max(cf, mf, pred.timeline.latency_us + shift + host_extra + hook)
    comm_us = sum(b - a for a, b in comm_iv)
    exposed = comm_us - sum(_overlap(comp_iv, a, b) for a, b in comm_iv)
    delay = end - pred.timeline.latency_us
    return RankTimeline(events, pred.timeline.end_to_end_us + max(0.0, delay), end,
                        sum(b - a for a, b in comp_iv), comm_us, max(0.0, exposed), slowed, colls)


_INTER = {}


def _inter(dplan):
    """The link between hosts (``nnodes > 1``): InfiniBand NDR per GPU unless the plan names another."""
    from gpusim.hw.links import link_spec
    name = getattr(dplan, "inter_link", None) or "ib-ndr400"
    if name not in _INTER:
        _INTER[name] = link_spec(name)
    return _INTER[name]
