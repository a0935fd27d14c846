"""Predict: a graph (or a model to capture) -> lower -> cost -> simulate, on a GPU spec
and a host profile (default the reference host, the same for every GPU)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from gpusim.capture.tracing import capture
from gpusim.util.errors import UserError
from gpusim.cost.kernel import estimate_kernel, kernel_us
from gpusim.cost.roofline import CostOptions, KernelEstimate
from gpusim.graph.opgraph import OpGraph
from gpusim.hw.spec import GPUSpec, load_spec
from gpusim.hw.host import HostProfile, load_host, python_us
from gpusim.lower import lowering
from gpusim.lower.lowering import Lowering, step_issuers, step_region_inputs
from gpusim.sim.memory import MemoryEstimate, capacity_bytes, simulate_memory
from gpusim.sim.timeline import Timeline, is_sync, region_entry_us, simulate, step_entry_us
from gpusim.lower.modes import MODES, ModeError, check_mode



def lower(graph: OpGraph, mode: str = "eager", partition=None, regions: bool = False,
          spec=None) -> Lowering:
    """Which kernels run for ``graph`` in ``mode`` on ``spec`` (:func:`gpusim.lower.lowering.lower`),
    with the cost model answering what Inductor decides by benchmarking (``pad_mm``). This is
    ``gpusim.lower``: the lowering every prediction, memory estimate and search uses."""
    return lowering.lower(graph, mode, partition, regions, spec, price=kernel_us)

@dataclass
class Prediction:
    """A predicted run: per-kernel estimates and the simulated timing (all in µs)."""

    gpu: str
    mode: str
    graph: OpGraph
    kernels: list[KernelEstimate]
    timeline: Timeline
    spec: GPUSpec
    lowering: Lowering | None = None
    host: HostProfile | None = None

    @property
    def device_us(self) -> float:
        return self.timeline.device_us

    @property
    def end_to_end_us(self) -> float:
        return self.timeline.end_to_end_us

    @property
    def latency_us(self) -> float:
        return self.timeline.latency_us

    @property
    def idle_us(self) -> float:
        return self.timeline.idle_us

    @property
    def unmodelled_ops(self) -> list[str]:
        return [f"{n} ({self.graph.node(n)['op']})" for n in self.graph.unmodelled]

    @property
    def unmodelled_counts(self) -> dict[str, int]:
        """``{aten op: times}`` for every op outside the cost model: those priced as
        memory-bound copies and those that returned no tensor and are not priced
        (``graph.meta["unpriced_ops"]``), most frequent first."""
        from collections import Counter
        c = Counter(self.graph.node(n)["op"] for n in self.graph.unmodelled)
        c.update(self.graph.meta.get("unpriced_ops", []))
        return dict(sorted(c.items(), key=lambda kv: (-kv[1], kv[0])))

    @cached_property
    def memory(self) -> MemoryEstimate:
        """Memory of one call (:mod:`gpusim.sim.memory`): weights, inputs, activation peak
        (allocated and reserved), the kernel where it peaks, bytes per kernel."""
        return simulate_memory(self.lowering or lower(self.graph, self.mode, spec=self.spec),
                               spec=self.spec)

    @property
    def peak_memory_bytes(self) -> int:
        """Activation peak above the weights and inputs (allocated, allocator-rounded)."""
        return self.memory.peak_bytes

    @property
    def memory_timeline(self) -> tuple[int, ...]:
        """Activation bytes allocated while each kernel runs (same order as ``kernels``)."""
        return self.memory.timeline

    @property
    def fits(self) -> bool:
        """Whether weights, inputs and the activation peak fit in the GPU's memory."""
        return self.memory.fits(capacity_bytes(self.spec))

    @property
    def kernel_count(self) -> int:
        """Kernels the profiler would list: host<->device copies (syncs) are memcpys, not
        kernels."""
        return sum(1 for k in self.kernels if not is_sync(k))

    @property
    def flops(self) -> float:
        return sum(k.flops for k in self.kernels)

    @property
    def bytes(self) -> float:
        return sum(k.bytes for k in self.kernels)

    @property
    def train(self) -> dict | None:
        """A training step's time and memory by phase (:func:`gpusim.predict.phases.step_summary`);
        None for a forward."""
        if "train" not in self.graph.meta:
            return None
        from gpusim.predict.phases import step_summary
        return step_summary(self)

    def to_dict(self, kernels: bool = True) -> dict:
        """What ``gpusim predict --json`` prints; ``kernels=False`` leaves out the
        per-kernel list (a sweep's row keeps the totals)."""
        d = {
            "gpu": self.gpu, "mode": self.mode, "graph": self.graph.name,
            "device_us": self.device_us, "end_to_end_us": self.end_to_end_us,
            "latency_us": self.latency_us, "idle_us": self.idle_us,
            "host_us": self.timeline.host_us, "host": self.host.name if self.host else None,
            "python_us": self.timeline.python_us, "n_kernels": len(self.kernels),
            "flops": self.flops, "bytes": self.bytes,
            "amp": self.graph.meta.get("amp"),
        }
        if kernels:
            d["kernels"] = [k.to_dict() for k in self.kernels]
        d["unmodelled_ops"] = self.unmodelled_ops
        d["unmodelled"] = self.unmodelled_counts
        d["memory"] = dict(self.memory.to_dict(), fits=self.fits,
                           capacity_bytes=capacity_bytes(self.spec))
        d["train"] = self.train
        return d


def as_spec(gpu) -> GPUSpec:
    return gpu if isinstance(gpu, GPUSpec) else load_spec(gpu)


def as_graph(target, args=None, amp=None) -> OpGraph:
    """An OpGraph as is, or capture a callable/module on ``args`` (``amp``: under
    ``torch.autocast("cuda")``, :func:`gpusim.capture`)."""
    if isinstance(target, OpGraph):
        if amp is not None:
            raise UserError("amp= applies when gpusim captures the model; pass the model "
                            "and its args, or capture(model, args, amp=...) yourself")
        return target
    return capture(target, () if args is None else args, amp=amp)


def views_per_kernel(graph: OpGraph, kernels) -> tuple[list[int], int]:
    """For eager dispatch: how many view ops the host dispatches before each kernel
    (counted on an op's first kernel)."""
    kid = {}
    for i, k in enumerate(kernels):
        if len(k.ops) == 1:
            kid.setdefault(k.ops[0], i)
    counts = [0] * len(kernels)
    pending = 0
    for n in graph.order:
        k = graph.g.nodes[n]["kind"]
        if k == "view":
            pending += 1
        elif n in kid:
            counts[kid[n]] += pending
            pending = 0
    return counts, pending


def predict_lowering(low: Lowering, spec: GPUSpec, opts: CostOptions = CostOptions(),
                     host=None) -> Prediction:
    """Cost and simulate the kernels of a lowering on ``spec``, issued by ``host``
    (a host profile, name or path; None: the reference host)."""
    host = load_host(host)
    graph, mode = low.graph, low.mode
    kernels = [estimate_kernel(graph, k, spec, opts) for k in low.kernels]
    if mode == "eager":
        vb, trailing = views_per_kernel(graph, low.kernels)
    else:
        vb, trailing = None, 0
    regions = any(k.region_inputs is not None for k in low.kernels)
    hb = [region_entry_us(host, k.region_inputs) if k.region_inputs is not None else 0.0
          for k in low.kernels] if regions else None
    issuers = step_issuers(low)
    py = python_us(graph.meta, host)
    if issuers is not None:     # torch.compile(model) in a training step: the step's Python stays
        hb = step_entry_us(issuers, step_region_inputs(low), host)
        py = python_us(graph.meta.get("step_calls") or {}, host)
    phases = [graph.g.nodes[k.ops[0]].get("phase", "forward")
              if k.ops and k.ops[0] in graph.g else "forward"
              for k in low.kernels] if mode == "eager" else None
    tl = simulate(kernels, spec, mode, vb, trailing, host_before=hb,
                  inputs=0 if regions else graph.meta.get("inputs", 0),
                  python_us=py, host=host,
                  call_overhead=not regions, params=len(graph.meta.get("params") or ()),
                  issuers=issuers, phases=phases)
    return Prediction(spec.name, mode, graph, kernels, tl, spec, low, host)


#: How users run each mode.
MODE_LABELS = {"eager": "eager", "compiled": "torch.compile",
               "cudagraph": "torch.compile(mode=\"reduce-overhead\")"}


def modes_by_speed(graph: OpGraph, gpu="h100", have: "Prediction | None" = None,
                   host=None) -> list[tuple[str, "Prediction"]]:
    """Eager, torch.compile and torch.compile with CUDA graphs on ``graph``, fastest end
    to end first. ``have``: a prediction of one of the modes already made (reused)."""
    spec = as_spec(gpu)
    preds = [(m, have if have is not None and have.mode == m
              else predict_lowering(lower(graph, m, spec=spec), spec, host=host)) for m in MODES]
    return sorted(preds, key=lambda mp: mp[1].end_to_end_us)


def predict(target, args=None, gpu="h100", mode: str = "eager", partition=None,
            opts: CostOptions = CostOptions(), regions: bool = False, host=None,
            amp=None) -> Prediction:
    """Predict how long ``target`` takes on ``gpu``.

    Parameters
    ----------
    target : callable, nn.Module or OpGraph
    args : example inputs for a callable/module (meta tensors are fine)
    gpu : spec name, alias, path to a .toml spec, or a GPUSpec
    mode : "eager" | "compiled" | "cudagraph" (see :mod:`gpusim.lower`)
    partition : optional :class:`~gpusim.lower.partition.Partition` or list of node-name
        groups, realised by ``mode``'s runtime; default: the runtime's own kernels
    regions : run each group of ``partition`` as its own compiled region
    host : host profile name, path to a host .toml, or a HostProfile (default the
        reference host, :mod:`gpusim.hw.host`): who issues the kernels, the same for every
        GPU so that a comparison of GPUs compares GPUs
    amp : ``"bf16"`` | ``"fp16"``: run the forward under ``torch.autocast("cuda")`` (fp32
        weights and inputs; :mod:`gpusim.capture.amp`)

    >>> import torch
    >>> p = predict(lambda x: x + 2, (torch.empty(2**26, device="meta"),), gpu="rtx3090ti")
    >>> round(2**26 / p.device_us / 1e3)   # G elements/s
    113
    """
    check_mode(mode)
    spec = as_spec(gpu)
    graph = as_graph(target, args, amp)
    if "train" in graph.meta and partition is not None:
        raise ModeError(f"{graph.name} is a training step: fusion partitions of a step are not "
                        "modelled yet (drop partition=)")
    return predict_lowering(lower(graph, mode, partition, regions, spec), spec, opts, host)
