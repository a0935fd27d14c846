"""Memory: a liveness simulation over the lowered kernels, through PyTorch's caching allocator.

Reads a :class:`~gpusim.lower.lowering.Lowering` (which kernels run, in order) and its graph; it
re-derives nothing about kernels. The model, per call:

* **Storages.** Every compute node's output is a storage, except an in-place op's
  (``relu_``, ``add_``, ``copy_``): that writes its first argument's storage. A view
  shares its base's storage. Eager ATen reuses a storage of its own in one place: the
  ``where`` that ends ``_safe_softmax`` (math attention) writes into the softmax output.
  Graph inputs split into weights (parameters, buffers, constants) and inputs; both are
  the pre-call baseline. An input the call lets go (``graph.meta["released_inputs"]``: a
  ``DynamicCache`` layer's old keys once its ``cat`` has replaced them, the cache object
  being their only holder) is freed after its last use in eager, and what replaced it is
  the next call's input. ``torch.empty``-style nodes are fresh storages the call allocates.
* **Liveness.** A storage is allocated when the first kernel that writes it starts and freed
  after the last kernel that touches it (reads it, through any view, or writes it in
  place); a graph output is never freed (the measured peak includes the result).
* **Fusion.** A kernel that computes several nodes (an Inductor kernel, a partition's
  group) allocates only the storages that leave it: read by another kernel or returned.
  A storage that lives and dies inside one kernel is never materialised. A single-op
  kernel of eager PyTorch always materialises its output, read or not.
* **Inductor's in-place reuse** (compiled modes, generated kernels): a kernel whose input
  buffer dies in it writes its output into that buffer when size and dtype match
  (Inductor's ``can_inplace`` / wrapper ``ReuseLine``), so the output costs nothing new.
  Its cross-kernel reuse of freed buffers of the same size changes no allocated byte
  (the caching allocator hands back the same block), so it is not modelled apart.
* **Temporaries.** ``max_pool2d`` on CUDA runs ``max_pool2d_with_indices`` and drops the
  int64 indices after the kernel (ATen ``Pooling.cpp``); Inductor's NHWC copies of a
  convolution's input and weight (aux kernels of :mod:`gpusim.lower`) live until that
  convolution ends. An eager cuDNN convolution with layout kernels (16-bit and TF32 NCHW
  convs: ``nchwToNhwc`` of input and weight, ``nhwcToNchw`` of the output) allocates its
  execution plan's workspace, which holds those transformed tensors, for the call
  (:func:`_library_workspaces`). cuBLAS workspaces are allocated once at warm-up and
  held (one per thread that runs GEMMs: a training step's backward runs on autograd's
  thread): not part of a call's peak, part of what it needs resident (``total_bytes``).
* **Multi-output ops.** Each result of ``native_layer_norm_backward``, ``native_dropout``,
  batch norm or an attention kernel is a tensor of its own (:func:`split_outputs`): the
  input gradient dies at the next op while the weight gradient is held to the step's end.

The caching allocator itself is :mod:`gpusim.sim.allocator`. Peaks are above the pre-call baseline (weights and inputs resident), as
``torch.cuda.max_memory_allocated()`` minus ``memory_allocated()`` before the call.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpusim.graph.opgraph import OpGraph
from gpusim.sim.allocator import CachingAllocator, round_size
from gpusim.sim.buffers import _buffers, _workspace_allocs, input_role, node_bytes


@dataclass(frozen=True)
class MemoryEstimate:
    """Memory of one call (bytes). ``peak_bytes`` / ``peak_reserved_bytes``: activation
    peak above the pre-call baseline, allocated and reserved, of a call made after a first
    one and ``torch.cuda.empty_cache()`` (the weights and inputs resident, the BLAS
    workspaces kept: activations fill the free parts of their segments,
    ``cached_free_bytes``, before reserving more); ``first_call_reserved_bytes``: the
    reserved growth of a fresh process's first call above ``baseline_reserved_bytes``
    (the weights' and inputs' segments); ``steady_reserved_bytes``: reserved above the
    baseline while later calls run with the cache kept. ``timeline[i]`` /
    ``reserved_timeline[i]``: bytes allocated / reserved above the allocated baseline
    while kernel ``i`` runs; ``peak_kernel``: the first kernel at the peak.

    ``peak_reserved_bytes`` is the reserved *growth* (what ``max_memory_reserved()`` minus
    ``memory_reserved()`` measures) and may be below ``peak_bytes``: activations first fill
    the cache left free in the baseline's segments (95 of the 386 fresh-process records of
    ``validation/results/*/fresh`` measure so). :attr:`reserved_for_peak_bytes` is the
    reserved peak over ``peak_bytes``'s own baseline, never below it, as an allocator's
    reserved bytes never are below its allocated ones."""

    weights_bytes: int
    inputs_bytes: int
    peak_bytes: int
    peak_reserved_bytes: int
    steady_reserved_bytes: int
    peak_kernel: int
    peak_ops: tuple[str, ...]
    output_bytes: int
    timeline: tuple[int, ...]
    reserved_timeline: tuple[int, ...]
    live_bytes: int = 0           # unrounded peak of live tensors (no allocator)
    cached_free_bytes: int = 0    # free cache before the call (tails of the baseline's segments)
    first_call_reserved_bytes: int = 0  # a fresh process's first call: reserved growth, BLAS workspaces included
    baseline_reserved_bytes: int = 0    # reserved once the weights and inputs are allocated
    workspace_bytes: int = 0      # BLAS workspaces the first call allocated and the process keeps
    resident_overhead_bytes: int = 0  # the allocator's rounding and whole blocks of the resident tensors
    storages: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def baseline_bytes(self) -> int:
        return self.weights_bytes + self.inputs_bytes

    @property
    def reserved_for_peak_bytes(self) -> int:
        """The reserved bytes that hold the call's activations at their peak, above the
        allocated baseline (weights, inputs, workspaces) as ``peak_bytes`` is: the call's
        reserved growth plus the free cache its activations could fill first."""
        return self.peak_reserved_bytes + self.cached_free_bytes

    @property
    def total_bytes(self) -> int:
        """Weights + inputs + the BLAS workspaces + the activation peak: what the call
        needs resident (``torch.cuda.max_memory_allocated()`` of a process that runs it)."""
        return self.baseline_bytes + self.workspace_bytes + self.resident_overhead_bytes \
            + self.peak_bytes

    @property
    def total_reserved_bytes(self) -> int:
        """What a fresh process has reserved at the peak of its first call."""
        return self.baseline_reserved_bytes + self.first_call_reserved_bytes

    def fits(self, capacity_bytes: float) -> bool:
        """Whether weights, inputs, workspaces and the allocated activation peak fit in
        ``capacity_bytes``."""
        return self.total_bytes <= capacity_bytes

    def to_dict(self) -> dict:
        return {"weights_bytes": self.weights_bytes, "inputs_bytes": self.inputs_bytes,
                "peak_bytes": self.peak_bytes, "peak_reserved_bytes": self.peak_reserved_bytes,
                "reserved_for_peak_bytes": self.reserved_for_peak_bytes,
                "steady_reserved_bytes": self.steady_reserved_bytes,
                "first_call_reserved_bytes": self.first_call_reserved_bytes,
                "total_reserved_bytes": self.total_reserved_bytes,
                "workspace_bytes": self.workspace_bytes,
                "peak_kernel": self.peak_kernel, "peak_ops": list(self.peak_ops),
                "output_bytes": self.output_bytes, "total_bytes": self.total_bytes,
                "timeline": list(self.timeline), "reserved_timeline": list(self.reserved_timeline)}


#: steps before the measured one in a training step's simulation (the first creates the states)
TRAIN_WARMUP_STEPS = 3


def optimizer_states(graph: OpGraph) -> set[str]:
    """Resident inputs only the optimizer reads or writes (Adam's moments, SGD's momentum
    buffers): created by the first step's update, not before it."""
    g = graph.g
    out = set()
    for v in g.nodes:
        a = g.nodes[v]
        if a["kind"] != "input" or input_role(a) != "weight":
            continue
        users = list(g.successors(v))
        if users and all(g.nodes[u].get("phase") == "optimizer" for u in users):
            out.add(v)
    return out


def module_to_order(labels: list[str]) -> list[str]:
    """Parameter and buffer names in the order ``module.to(device)`` allocates them:
    ``nn.Module._apply`` converts every child first (registration order), then the
    module's own parameters, then its buffers. ``labels`` come in ``named_parameters()``
    then ``named_buffers()`` order (a child's place is where it first appears).

    >>> module_to_order(["pos", "blocks.0.w", "blocks.1.w", "head.w", "blocks.0.mean"])
    ['blocks.0.w', 'blocks.0.mean', 'blocks.1.w', 'head.w', 'pos']
    """
    tree: dict = {"children": {}, "own": []}
    for lab in labels:
        *path, _ = lab.split(".")
        node = tree
        for part in path:
            node = node["children"].setdefault(part, {"children": {}, "own": []})
        node["own"].append(lab)
    out: list[str] = []

    def visit(node):
        for child in node["children"].values():
            visit(child)
        out.extend(node["own"])
    visit(tree)
    return out


def resident_inputs(graph: OpGraph) -> list[str]:
    """The graph inputs resident before a call, in the order they were allocated: the
    weights as ``module.to("cuda")`` moves them (:func:`module_to_order`; a tied
    parameter once), then the call's inputs."""
    g = graph.g
    weights, inputs = {}, []
    for v in g.nodes:
        a = g.nodes[v]
        if a["kind"] != "input" or a.get("tied_to"):
            continue
        role = input_role(a)
        if role == "weight":
            weights[str(a.get("label") or v)] = v
        elif role == "input":
            inputs.append(v)
    return [weights[lab] for lab in module_to_order(list(weights))] + inputs


def simulate_memory(low, calls: int = 2, spec=None) -> MemoryEstimate:
    """Peak memory of one call of ``low`` (a :class:`~gpusim.lower.lowering.Lowering`).

    Follows what a fresh process does, through one :class:`CachingAllocator`: the
    weights (as ``module.to("cuda")`` moves them) and inputs are allocated; a first call
    runs, allocating cuBLAS's workspaces at its first GEMM and keeping them
    (:func:`blas_workspace_bytes`; ``spec`` gives the GPU's compute capability): its
    reserved growth is ``first_call_reserved_bytes``; ``torch.cuda.empty_cache()``; the
    measured call (``peak_bytes``, ``peak_reserved_bytes``, the timelines: what the zoo
    records measure); then ``calls - 1`` more calls keeping the cache
    (``steady_reserved_bytes``: reserved above the baseline at their peak). A call's
    outputs are dropped before the next.

    >>> from gpusim.graph.opgraph import GraphBuilder
    >>> from gpusim.lower.lowering import lower
    >>> b = GraphBuilder(); x = b.input("x", (1 << 20,))
    >>> _ = b.op("a", "pointwise", [x]); _ = b.op("r", "pointwise", ["a"]); b.output("r")
    >>> g = b.build()
    >>> simulate_memory(lower(g, "eager")).peak_bytes >> 20, simulate_memory(lower(g, "compiled")).peak_bytes >> 20
    (8, 4)
    """
    g = low.graph.g
    bufs, temps = _buffers(low)
    n = len(low.kernels)
    allocs: list[list] = [[] for _ in range(n + 1)]
    frees: list[list] = [[] for _ in range(n + 1)]
    for r, b in bufs.items():
        if b.alias_of is None and not b.resident:
            allocs[b.first].append(("b", r, b.size))
    for r, b in bufs.items():
        owner = r
        while bufs[owner].alias_of is not None:
            owner = bufs[owner].alias_of
        if r == owner and not b.keep:
            frees[b.last].append(("r" if b.resident else "b", r))
    for j, (i, size, last) in enumerate(temps):
        allocs[i].append(("t", j, size))
        frees[last].append(("t", j))
    workspaces = _workspace_allocs(low, spec)
    alloc = CachingAllocator()
    resident = resident_inputs(low.graph)
    train = "train" in low.graph.meta
    states = optimizer_states(low.graph) if train else set()
    first_keep = {i: list(b) for i, b in workspaces.items()}
    if states:
        # the first step creates the optimizer's states when its update begins, from the
        # cache its forward and backward left (zeros_like / clone of the gradient)
        at = next((i for i, k in enumerate(low.kernels)
                   if g.nodes[k.ops[0]].get("phase") == "optimizer"), 0)
        first_keep.setdefault(at, []).extend(node_bytes(g.nodes[v]) for v in resident if v in states)
    let_go: dict = {}       # resident inputs the call frees (:func:`_buffers`): their handles
    for v in resident:
        if v not in states:
            h = alloc.malloc(node_bytes(g.nodes[v]))
            if v in bufs and bufs[v].resident:
                let_go[v] = h
    base0_res = alloc.reserved
    timeline: list[int] = []
    reserved: list[int] = []
    live = [0, 0]                                   # raw live bytes now, their peak

    def one_call(record: bool, keep: dict | None = None) -> None:
        """One call; ``keep``: kernel index -> bytes allocated there and never freed."""
        handles = {}
        base = alloc.allocated
        for i in range(n):
            for b in (keep or {}).get(i, ()):
                alloc.malloc(b)
            for kind, key, size in allocs[i]:
                handles[(kind, key)] = alloc.malloc(size)
                live[0] += size if record else 0
            if record:
                timeline.append(alloc.allocated - base)
                reserved.append(alloc.reserved - base)     # same baseline as timeline
                live[1] = max(live[1], live[0])
            for kind, key in frees[i]:
                alloc.free(let_go.pop(key) if kind == "r" else handles.pop((kind, key)))
                if record:
                    live[0] -= bufs[key].size if kind != "t" else temps[key][1]
        for h in handles.values():         # the caller drops the outputs
            alloc.free(h)
        for r, b in bufs.items():          # what replaced a let-go input is the next call's
            if b.resident and r not in let_go:
                let_go[r] = alloc.malloc(b.size)

    # a fresh process's first call: it also allocates the BLAS workspaces, and keeps them
    alloc.reset_peak()
    one_call(record=False, keep=first_keep)
    first_call_reserved = alloc.peak_reserved - base0_res
    if train:
        # training runs step after step: no empty_cache, the measured step follows
        # warm-up steps (the training zoo: a first step, three more, then the measured)
        for _ in range(TRAIN_WARMUP_STEPS):
            one_call(record=False)
    else:
        alloc.empty_cache()
    base, base_res = alloc.allocated, alloc.reserved
    alloc.reset_peak()
    one_call(record=True)
    peak, peak_reserved = alloc.peak_allocated - base, alloc.peak_reserved - base_res
    alloc.reset_peak()
    for _ in range(max(0, calls - 1)):
        one_call(record=False)
    steady = max(peak_reserved, alloc.peak_reserved - base_res)
    peak_kernel = max(range(n), key=lambda i: (timeline[i], -i)) if n else 0
    kept = [r for r, b in bufs.items() if b.keep and b.alias_of is None]
    ws_bytes = sum(round_size(b) for bs in workspaces.values() for b in bs)
    weights = sum(node_bytes(g.nodes[v]) for v in resident if input_role(g.nodes[v]) == "weight")
    inputs = sum(node_bytes(g.nodes[v]) for v in resident) - weights
    return MemoryEstimate(
        weights_bytes=weights, inputs_bytes=inputs, peak_bytes=peak,
        peak_reserved_bytes=peak_reserved, steady_reserved_bytes=steady,
        peak_kernel=peak_kernel, peak_ops=tuple(low.kernels[peak_kernel].ops) if n else (),
        output_bytes=sum(bufs[r].size for r in kept), timeline=tuple(timeline),
        reserved_timeline=tuple(reserved), live_bytes=live[1],
        cached_free_bytes=base_res - base,
        storages={r: b for r, b in bufs.items() if not b.resident},
        first_call_reserved_bytes=first_call_reserved,
        baseline_reserved_bytes=base0_res,
        workspace_bytes=ws_bytes,
        resident_overhead_bytes=max(0, base - weights - inputs - ws_bytes))


def capacity_bytes(spec) -> float:
    """The GPU's memory in bytes (``capacity_gib`` of its spec file)."""
    return float(spec.capacity_gib) * (1 << 30)


def fit_line(mem: MemoryEstimate, spec) -> str:
    """One line: fits, or ``does not fit on <GPU> (needs X of Y GiB)``."""
    cap = capacity_bytes(spec)
    need = f"{mem.total_bytes / (1 << 30):.2f} of {cap / (1 << 30):.0f} GiB"
    if mem.fits(cap):
        return f"fits on {spec.display_name} (needs {need})"
    return f"does not fit on {spec.display_name} (needs {need})"


def fmt_bytes(b: float) -> str:
    """``1.5 GiB``, ``12.0 MiB``, ``512 B``."""
    for unit, s in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(b) >= s:
            return f"{b / s:.2f} {unit}" if unit == "GiB" else f"{b / s:.1f} {unit}"
    return f"{int(b)} B"
