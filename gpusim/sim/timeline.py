"""Simulate: the host issuing kernels and one GPU stream executing them.

Two lanes. The host spends a dispatch cost per kernel (depending on the runtime mode)
and then enqueues it; the GPU starts a kernel when it is enqueued (plus a launch
latency after it is enqueued) and the previous kernel has finished. When the host is
slower than the GPU, the GPU waits: those idle gaps are why fusion can lose at small
sizes (a compiled call's wrapper costs more than the bytes it saves) and win big at
large ones.

A host read of a device value (``.item()``, ``if mask.all():``; capture records them)
is a sync: the host issues the copy, then waits until the GPU has run everything queued
before it (a "sync wait" event); the GPU then idles until the host issues more.

Host figures come from a host profile (:mod:`gpusim.hw.host`, default the reference host),
GPU figures from the GPU spec: the same host for every GPU a comparison compares.

Modes
    ``eager``     every non-view aten op is a kernel; ``eager_op_us`` of host time each,
                  plus ``eager_view_us`` for each view op dispatched on the way, plus
                  the model's own Python between its torch calls (``python_us``: what
                  capture counted priced by the host, :func:`gpusim.hw.host.python_us`),
                  spread over the kernels. All of it times the
                  host's ``eager_forward_factor``: inside a real forward the host
                  issues ops 1.4-1.6x slower than in calibrate's tight loops (the H100
                  and H200 hosts' figures, measured on gpusim's reference forwards by the
                  lab's ``validation.measure.reference_forwards.forward_factor``;
                  less for programs of fewer kernels, :func:`eager_forward_factor`).
    ``compiled``  ``compiled_call_us`` per call (guards, wrapper), then per kernel what
                  Inductor's generated wrapper pays to launch it
                  (:func:`compiled_launch_us`: a Triton launch, an extern library call,
                  or nothing more than a launch for a library's helper kernel). All of it
                  times the host's ``compiled_forward_factor`` (the same measurement as
                  eager's, on the reference forwards compiled;
                  :func:`compiled_forward_factor`).
                  The model's Python does not run: Dynamo traced it once, and a call
                  runs only the guards (``compiled_call_us``, ``compiled_input_us``).
    ``cudagraph`` one replay: ``cudagraph_call_us`` of host time, and the GPU spends
                  :func:`graph_gap_us` between consecutive kernels (the spec's
                  ``graph_kernel_gap_us``, measured on the GPU; else the host
                  profile's ``cudagraph_kernel_us``).

End-to-end time is the steady-state time per call when calls run back to back (what a
wall clock around a loop of calls measures): the simulation runs several calls and
takes the spacing of their completions. A single call's latency is reported too. On the
GPU lane a kernel lasts its estimate times the spec's ``stream_busy_factor`` (1 when
unset; no committed spec sets it): room for a stream kept full running slower than the
sum of its profiled kernels. The zoo's hand-captured CUDA graphs replay 4-6% over their
kernel sums, but the H100 microbenchmark (``calibrate.stream_busy``) measured no such
slowdown (``validation/results/h100/host/2026-11-24-stream-busy.json``). Device time
stays the kernel sum, as the profiler reports it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpusim.cost.roofline import KernelEstimate
from gpusim.graph.opgraph import GEMM_KINDS, LIBRARY_KINDS
from gpusim.graph.ops import SYNC_OPS
from gpusim.lower.modes import check_mode


@dataclass(frozen=True)
class Event:
    name: str
    lane: str          # "host" or "gpu"
    start_us: float
    dur_us: float
    call: int = 0
    kernel: int | None = None   # index into Timeline.kernels for GPU events

    @property
    def end_us(self) -> float:
        return self.start_us + self.dur_us


@dataclass
class Timeline:
    mode: str
    kernels: list[KernelEstimate]
    events: list[Event]             # host and GPU events of the first call
    device_us: float                # sum of kernel times (GPU busy time)
    end_to_end_us: float            # steady-state wall time per call
    latency_us: float               # one call, host start to last kernel end
    span_us: float                  # one call, first kernel start to last kernel end
    host_us: float                  # host time per call
    python_us: float = 0.0          # of which the model's own Python (eager)
    gaps: list[tuple[float, float]] = field(default_factory=list)  # GPU idle in call 1
    syncs: list[tuple[str, float]] = field(default_factory=list)   # (kernel, host wait) in call 1

    @property
    def idle_us(self) -> float:
        return sum(b - a for a, b in self.gaps)


def is_sync(kernel: KernelEstimate) -> bool:
    """A copy of a device value to the host that the host waits for (``.item()``,
    ``if mask.all():``): the stream drains before the host goes on."""
    return any(t in SYNC_OPS for t in kernel.op_types)


def eager_dispatch_us(kernel: KernelEstimate, host) -> float:
    """Host time eager PyTorch spends issuing one op: library ops (cuBLAS, cuDNN, fused
    norm and attention kernels) pass through more dispatch layers and are measured
    separately by `gpusim calibrate`."""
    if kernel.kind in LIBRARY_KINDS and host.eager_library_op_us:
        return host.eager_library_op_us
    return host.eager_op_us


#: Eager kernels of the smaller of gpusim's reference forwards (the tiny GPT-2 of
#: ``calibrate.reference_forwards``): a program this large or larger pays the whole
#: ``eager_forward_factor``.
FORWARD_KERNELS = 66
#: Programs of at most this many kernels pay none of it: the classic fusion cases (2-13
#: kernels, a few ops called in a loop; the largest is the manual LSTM cell) are priced
#: right by the tight-loop figures alone on the H200 records.
LOOP_KERNELS = 13


def eager_forward_factor(host, kernels: int | None = None) -> float:
    """How much slower the host issues eager work inside a forward of ``kernels``
    kernels (None: :data:`FORWARD_KERNELS`, the reference forward's; eager's one default
    program size) than the tight-loop figures say. ``eager_forward_factor`` (measured by
    ``gpusim calibrate`` on gpusim's reference forwards; 1 when the host has none)
    applies in full from :data:`FORWARD_KERNELS` kernels up, not at all up to
    :data:`LOOP_KERNELS`, linearly between: the slowdown comes from a forward's code
    footprint (many different ops and modules between two calls of one op), which a
    loop over a few ops does not have (the classic H200 cases, 2-13 kernels each, are
    priced right without it and up to 175% too slow with all of it; the linear ramp
    between is an assumption no record tests closely). It scales every eager host cost:
    dispatch, views, syncs, the model's Python."""
    return _ramp(host.eager_forward_factor, kernels, FORWARD_KERNELS)


def eager_factors(host, kernels: int | None = None) -> tuple[float, float]:
    """``(rest, library)``: the in-forward factors of an eager program of ``kernels`` kernels on every cost
    but the library calls' own dispatch (other ops, helper launches, views, syncs, the model's Python) and on
    that dispatch. A host with ``eager_library_forward_factor`` puts the whole in-forward slowdown on the
    library calls (GEMMs, convolutions, norms, attention through cuBLAS and cuDNN, whose host work inside a
    model, at its shapes, exceeds the tight loop's on tiny tensors: a recorded Llama-3.2-1B decode token
    shows ``aten::linear`` at 3x an ``aten::mul`` and SDPA at 7x, where calibrate's loops price them alike,
    docs/eager_token.md) and none on the rest, both ramped as :func:`eager_forward_factor`; a host without
    it has ``eager_forward_factor`` on everything."""
    if host is None or host.eager_library_forward_factor is None:
        f = eager_forward_factor(host, kernels) if host is not None else 1.0
        return f, f
    return 1.0, _ramp(host.eager_library_forward_factor, kernels, FORWARD_KERNELS)


def is_library_call(kernel: KernelEstimate) -> bool:
    """A library call's own kernel (its dispatch priced at ``eager_library_op_us``): not a helper the call
    launches inside (``aux``), not a sync."""
    return kernel.kind in LIBRARY_KINDS and kernel.role != "aux" and not is_sync(kernel)


#: Kernels of the smaller of gpusim's reference forwards compiled (the tiny GPT-2 under
#: ``torch.compile``, as lowered for Inductor): a compiled program this large or larger pays
#: the whole ``compiled_forward_factor``.
COMPILED_FORWARD_KERNELS = 50


def compiled_forward_factor(host, kernels: int | None = None) -> float:
    """How much slower Inductor's wrapper issues a compiled forward of ``kernels`` kernels
    (None: :data:`COMPILED_FORWARD_KERNELS`, the reference forward's; compiled's one default
    program size) than calibrate's chains price it (``compiled_call_us``, the inputs' and each launch's
    figure). ``compiled_forward_factor`` is measured as eager's is, on gpusim's reference
    forwards under ``torch.compile`` (1 when the host has none), and ramps the same way: in
    full from :data:`COMPILED_FORWARD_KERNELS` kernels, none up to :data:`LOOP_KERNELS`
    (a chain of a few kernels is what the figures were timed on), linearly between. It
    scales a compiled call's whole host cost: the call, its inputs, every launch, syncs."""
    return _ramp(host.compiled_forward_factor, kernels, COMPILED_FORWARD_KERNELS)


def _ramp(factor: float | None, kernels: int | None, full: int) -> float:
    """``factor`` (None: 1) in full from ``full`` kernels up, 1 up to :data:`LOOP_KERNELS`,
    linear between; a program of unnamed size (``kernels`` None) is the reference forward, ``full``."""
    f = factor or 1.0
    kernels = full if kernels is None else kernels
    ramp = (kernels - LOOP_KERNELS) / (full - LOOP_KERNELS)
    return 1.0 + (f - 1.0) * min(1.0, max(0.0, ramp))


def graph_gap_us(host, spec=None) -> float:
    """The GPU's time between consecutive kernels of a replayed CUDA graph: the spec's
    ``graph_kernel_gap_us`` where its GPU was measured (a device figure: no host issues a
    graph's kernels), else the host profile's ``cudagraph_kernel_us``."""
    gap = getattr(spec, "graph_kernel_gap_us", None)
    return host.cudagraph_kernel_us if gap is None else gap


def kernel_overhead_us(kernel: KernelEstimate, host, mode: str,
                       program_kernels: int | None = None, spec=None) -> float:
    """The one per-kernel overhead table: host time to issue a kernel (eager, compiled)
    or, inside a CUDA graph, the GPU's gap between consecutive kernels
    (:func:`graph_gap_us`), in a program of
    ``program_kernels`` kernels (eager: :func:`eager_forward_factor`; compiled:
    :func:`compiled_forward_factor`; None: each mode's reference forward, defined there).
    The simulation and the partition scorer both read it."""
    if mode == "eager":
        rest, library = eager_factors(host, program_kernels)
        return (library if is_library_call(kernel) else rest) * _eager_issue_us(kernel, host)
    if mode == "cudagraph":
        return graph_gap_us(host, spec)
    f = compiled_forward_factor(host, program_kernels)
    if is_sync(kernel) and host.sync_us:
        return f * host.sync_us
    return f * compiled_launch_us(kernel, host)


#: the host figure of an extern library call of each GEMM kind (None in a host: compiled_extern_us)
EXTERN_CLASS_FIELDS = {"matmul": "compiled_matmul_us", "attention": "compiled_attention_us",
                       "conv": "compiled_conv_us"}


def compiled_launch_us(kernel: KernelEstimate, host) -> float:
    """Host time Inductor's generated wrapper spends on one kernel of a compiled call.

    The wrapper launches its own Triton kernels (``compiled_triton_us``) and calls the
    libraries for GEMMs, convolutions and attention (``extern_kernels.mm``,
    ``aten.convolution``: ``compiled_extern_us``, an aten dispatch and the library's own
    host work); a helper kernel a library launches inside that call (cuDNN's layout
    transforms, a split-K reduction) costs one launch (``kernel_launch_us``), as in
    eager. An extern call costs its class's figure where the host measured it
    (:data:`EXTERN_CLASS_FIELDS`: a bf16 GEMM with a bias through cuBLASLt, cuDNN attention,
    a cuDNN convolution, each called as a model calls it), else ``compiled_extern_us`` (a
    tiny fp32 matmul: the zoo's compiled records imply ~3x that per extern call inside a
    real model, ``validation.score.compiled_host``). A host without the split figures
    prices every kernel at ``compiled_kernel_us``, calibrate's chain of extern matmuls and
    Triton relus (their mean)."""
    split = host.compiled_extern_us is not None or any(
        getattr(host, f) is not None for f in EXTERN_CLASS_FIELDS.values())
    if kernel.role == "aux" and split:
        return host.kernel_launch_us or host.compiled_kernel_us
    if kernel.kind not in GEMM_KINDS:
        fig = host.compiled_triton_us
    else:
        fig = getattr(host, EXTERN_CLASS_FIELDS[kernel.kind])
        fig = host.compiled_extern_us if fig is None else fig
    return host.compiled_kernel_us if fig is None else fig


def _eager_issue_us(kernel: KernelEstimate, host) -> float:
    """An eager kernel's host cost at the tight-loop figures: a sync, a helper kernel
    launched inside its op's dispatch, or the op's own dispatch."""
    if is_sync(kernel) and host.sync_us:
        return host.sync_us
    if kernel.role == "aux":        # launched inside the op's dispatch: a launch only
        return host.kernel_launch_us or host.compiled_kernel_us
    return eager_dispatch_us(kernel, host)


def engine_issued(phases: list[str] | None, host, n: int) -> list[bool]:
    """Which of ``n`` eager kernels autograd's engine issues: those of a training step's backward, where the
    host measured the engine's own figure (``eager_backward_factor``); else none (the backward priced like the
    forward, today's law). The engine runs its nodes from C++, so no Python of the model runs between
    them: the model's Python goes to the other kernels (a step of nothing but backward keeps today's law)."""
    if phases is None or host.eager_backward_factor is None:
        return [False] * n
    bwd = [p == "backward" for p in phases]
    return bwd if not all(bwd) else [False] * n


def backward_issue_us(kernel: KernelEstimate, views: int, host) -> float:
    """Host time autograd's engine spends issuing one backward kernel and the ``views`` view ops dispatched
    before it: the tight-loop figures (:func:`_eager_issue_us`, ``eager_view_us``) times the host's
    ``eager_backward_factor`` (measured on real steps' backward walls, ``validation/fit/train_host.py``);
    a sync costs ``sync_us`` as anywhere."""
    if is_sync(kernel) and host.sync_us:
        return host.sync_us
    return host.eager_backward_factor * (_eager_issue_us(kernel, host) + views * host.eager_view_us)


def compiled_inputs_us(host, inputs: int, params: int = 0) -> float:
    """A compiled call's host cost for its ``inputs`` tensor inputs, ``params`` of them
    ``nn.Parameter``s: Dynamo's guards and the wrapper's handling of each. A parameter
    costs ``compiled_param_us`` where the host measured it (a module's parameters are
    lifted into the graph's inputs, but guarded apart from the call's arguments), else
    ``compiled_input_us`` like any input."""
    per_in = host.compiled_input_us or 0.0
    if host.compiled_param_us is None:
        return inputs * per_in
    params = min(params, inputs)
    return (inputs - params) * per_in + params * host.compiled_param_us


def region_entry_us(host, inputs: int) -> float:
    """Host time to enter one separately compiled region with ``inputs`` tensor inputs."""
    return (host.compiled_region_us or host.compiled_call_us) + inputs * (host.compiled_input_us or 0.0)


def step_issue_us(kernels: list[KernelEstimate], issuers: list[str], host) -> list[float]:
    """Host time to issue each kernel of a compiled training step (issuers:
    :func:`gpusim.lower.lowering.step_issuers`): a compiled graph's kernel what Inductor's
    wrapper pays (:func:`compiled_launch_us`); the rest of the step, eager PyTorch's law in a
    program of the step's eager kernels (:func:`kernel_overhead_us`)."""
    n_eager = sum(1 for w in issuers if w == "eager")
    n_comp = len(issuers) - n_eager
    return [kernel_overhead_us(k, host, "eager", n_eager) if w == "eager"
            else kernel_overhead_us(k, host, "compiled", n_comp) for k, w in zip(kernels, issuers)]


def step_entry_us(issuers: list[str], region_inputs: dict, host) -> list[float]:
    """Host time before each kernel of a compiled training step for entering a compiled graph,
    paid before its first kernel: one compiled call (``compiled_call_us``: Dynamo's guards and
    AOTAutograd's wrapper in the forward; the engine's call of ``CompiledFunction.backward``
    in the backward, assumed to cost the same) and ``compiled_input_us`` per tensor the graph
    takes (``region_inputs``: parameters, buffers, batch; saved activations and output
    gradients), as calibrate measured them on an inference call."""
    out, seen = [0.0] * len(issuers), set()
    for i, w in enumerate(issuers):
        if w != "eager" and w not in seen:
            seen.add(w)
            out[i] = host.compiled_call_us + compiled_inputs_us(host, region_inputs.get(w, 0))
    return out


def simulate(kernels: list[KernelEstimate], spec, mode: str = "eager",
             views_before: list[int] | None = None, trailing_views: int = 0,
             calls: int = 6, host_before: list[float] | None = None,
             inputs: int = 0, python_us: float = 0.0, host=None,
             call_overhead: bool = True, params: int = 0,
             issuers: list[str] | None = None, phases: list[str] | None = None) -> Timeline:
    """Run ``calls`` back-to-back calls of ``kernels`` through the host/GPU model.

    ``views_before[i]``: view ops dispatched (eager) before kernel ``i``; only eager mode
    pays for them. ``host_before[i]``: further host time before launching kernel ``i``
    (entering a separately compiled region, in the validation harness).
    ``python_us``: the model's own Python per forward on ``host`` (eager only; spread
    over the kernels; :func:`gpusim.hp.python_us`). ``inputs``: tensor inputs of the
    program, each costing ``compiled_input_us`` per compiled call (Dynamo's guards and
    input handling); ``params`` of them ``nn.Parameter``s (:func:`compiled_inputs_us`). ``host``: a :class:`~gpusim.hw.host.HostProfile` (None: the reference
    host); ``spec`` gives the GPU's figures. ``call_overhead=False``: no compiled call
    cost (the program's regions pay their own entry through ``host_before``).
    ``issuers`` (compiled mode; a training step with ``torch.compile(model)`` inside,
    :func:`gpusim.lower.lowering.step_issuers`): each kernel's issuer, a compiled graph or
    eager PyTorch (:func:`step_issue_us`); ``python_us`` is then the step's own Python
    outside the model, spread over its eager kernels at the eager factor, and the graphs'
    entries come through ``host_before`` (:func:`step_entry_us`).
    ``phases`` (eager; a training step): each kernel's phase; on a host with ``eager_backward_factor`` the
    backward's kernels are priced as autograd's engine issues them (:func:`backward_issue_us`) and the
    model's Python is spread over the other kernels only (:func:`engine_issued`).
    Returns the first call's events and the steady-state timing.
    """
    check_mode(mode)
    if host is None:
        from gpusim.hw.host import load_host
        host = load_host()
    hp = host           # the profile: below, ``host`` is the host's clock
    n = len(kernels)
    views_before = views_before or [0] * n
    host_before = host_before or [0.0] * n
    python = 0.0
    if mode == "eager":
        call_us = 0.0
        f = eager_factors(hp, n)[0]
        python = f * python_us
        bwd = engine_issued(phases, hp, n)
        spread = python / max(n - sum(bwd), 1)
        per_k = [backward_issue_us(k, v, hp) if b
                 else kernel_overhead_us(k, hp, mode, n) + f * v * hp.eager_view_us + spread
                 for k, v, b in zip(kernels, views_before, bwd)]
        tail = f * trailing_views * hp.eager_view_us
        gpu_gap = 0.0
    elif mode == "compiled" and issuers is not None:
        call_us, tail, gpu_gap = 0.0, 0.0, 0.0
        per_k = step_issue_us(kernels, issuers, hp)
        eager = [i for i, w in enumerate(issuers) if w == "eager"]
        python = eager_factors(hp, len(eager))[0] * python_us if eager else 0.0
        for i in eager:
            per_k[i] += python / len(eager)
    elif mode == "compiled":
        call_us = (compiled_forward_factor(hp, n)
                   * (hp.compiled_call_us + compiled_inputs_us(hp, inputs, params))
                   if call_overhead else 0.0)
        per_k, tail, gpu_gap = [kernel_overhead_us(k, hp, mode, n) for k in kernels], 0.0, 0.0
    else:
        # torch.compile(mode="reduce-overhead") replays through CUDA graph trees, whose
        # Python bookkeeping per call calibrate measures; a bare replay costs far less. The
        # launch itself costs the host per node where calibrate measured it, and the graph's
        # first kernel starts only as the launch returns (a profiled 314-kernel decode graph)
        call = hp.cudagraph_tree_call_us or hp.cudagraph_call_us
        call += n * (hp.cudagraph_launch_node_us or 0.0)
        call_us, per_k, tail, gpu_gap = call, [0.0] * n, 0.0, graph_gap_us(hp, spec)
    if mode != "cudagraph":
        per_k = [p + h for p, h in zip(per_k, host_before)]

    busy = spec.stream_busy_factor or 1.0
    host = 0.0
    gpu_free = 0.0
    ends = []
    events: list[Event] = []
    gaps: list[tuple[float, float]] = []
    syncs: list[tuple[str, float]] = []
    reads = [mode != "cudagraph" and is_sync(k) for k in kernels]   # host reads: syncs
    first_start = None
    end0 = 0.0
    for c in range(calls):
        call_start = host
        host += call_us
        if c == 0 and call_us:
            events.append(Event("call overhead", "host", call_start, call_us, c))
        enqueue = host       # cudagraph: the whole graph is enqueued by the replay
        prev_end = None
        for i, k in enumerate(kernels):
            if mode != "cudagraph":
                if c == 0 and per_k[i]:
                    events.append(Event(f"launch {k.name}", "host", host, per_k[i], c, i))
                host += per_k[i]
                enqueue = host
            # a kernel starts once the stream is free and its launch has reached the GPU
            start = max(gpu_free + (gpu_gap if prev_end is not None else 0.0),
                        enqueue + hp.launch_latency_us)
            if c == 0:
                if first_start is None:
                    first_start = start
                if prev_end is not None and start > prev_end + 1e-9:
                    gaps.append((prev_end, start))
                events.append(Event(k.name, "gpu", start, k.us * busy, c, i))
            gpu_free = start + k.us * busy
            prev_end = gpu_free
            if reads[i]:
                # the host reads the value: it waits until the stream has drained
                wait = max(0.0, gpu_free - host)
                if c == 0:
                    syncs.append((k.name, wait))
                    if wait:
                        events.append(Event(f"sync wait ({k.name})", "host", host, wait, c, i))
                host += wait
        host += tail
        if c == 0:
            end0 = gpu_free
        ends.append(max(gpu_free, host))
    device = sum(k.us for k in kernels)
    host_per_call = call_us + sum(per_k) + tail
    # steady state: skip the first call's start-up transient
    e2e = (ends[-1] - ends[1]) / (calls - 2) if calls > 2 else ends[0]
    return Timeline(mode=mode, kernels=list(kernels), events=events, device_us=device,
                    end_to_end_us=e2e, latency_us=ends[0],
                    span_us=(end0 - first_start) if first_start is not None else 0.0,
                    host_us=host_per_call, python_us=python, gaps=gaps, syncs=syncs)
