"""Lower: the one answer to "which kernels run" for a graph and a mode.

Every consumer — :func:`gpusim.predict`, :func:`gpusim.search` (its eager, torch.compile
and best-partition rows), :func:`gpusim.whatif`, the partition scorer, the memory model
and ``validation/accuracy`` — calls :func:`lower`; nothing re-derives the kernel list.

Modes (the runtime that issues the kernels):

``eager``      PyTorch's own dispatch, op by op: one ATen or library kernel per compute op
               (cuBLAS/cuDNN/attention for GEMM-like ops).
``compiled``   ``torch.compile`` in its default mode: Inductor's inlining, realisation and
               fusion rules (:mod:`gpusim.lower.inductor`) give its Triton kernels; GEMMs,
               convolutions and attention stay extern library kernels — it fuses no
               epilogue into cuBLAS or cuDNN and does not concatenate sibling matmuls
               (that takes ``max_autotune`` templates).
``cudagraph``  the compiled kernels replayed as one CUDA graph
               (``torch.compile(mode="reduce-overhead")``).

A ``partition`` (groups of compute nodes chosen by a user or the search) replaces the
runtime's own grouping; the runtime still realises it: under ``compiled``/``cudagraph``
a group's GEMM runs as its extern kernel and the rest as one generated kernel; under
``eager`` a group is one hand-fused kernel launched from eager PyTorch (a single op stays
ATen's own kernel).
"""

from __future__ import annotations

import dataclasses

from dataclasses import dataclass

from gpusim.lower.dispatch import MASK_CLASSES, attention_variant, eager_kernels, gemm_variant, library_epilogue
from gpusim.lower.conv import conv_info, conv_kernels, nhwc_conv_kernels
from gpusim.graph.opgraph import GEMM_KINDS, LIBRARY_KINDS, REDUCING_KINDS, OpGraph, group_io, kernel_order
from gpusim.graph.ops import packet_name
from gpusim.lower.inductor import (REGION_VIEWS, conv_has_bias, decompose_norms, inductor_groups,
                                   read_region, split_reduction)
from gpusim.lower.legality import check_partition, fusion_class
from gpusim.lower.partition import Partition
from gpusim.lower.modes import check_mode
from gpusim.lower.layout import inductor_layout_opt
from gpusim.lower.pad_mm import benchmark_pad_bytes, pad_mm_operands
from gpusim.lower.sdpa_bias import bias_kernels

#: kernel class of a GEMM Inductor leaves to cuBLAS (``extern_kernels.mm/addmm/bmm``)
EXTERN_MM = "extern_mm"

@dataclass(frozen=True)
class Kernel:
    """One kernel that runs: the compute nodes it computes and who wrote it.

    ``impl``: ``"aten"`` (eager PyTorch's own elementwise/reduction/norm kernels),
    ``"library"`` (cuBLAS, cuDNN, attention kernels), ``"generated"`` (Inductor's
    Triton kernels, or a hand-fused kernel of a partition). ``region_inputs``: set when
    the kernel opens a separately compiled region (how the validation harness executes
    a partition): the region's tensor inputs, each checked on entry.
    """

    ops: tuple[str, ...]
    impl: str
    region_inputs: int | None = None
    role: str = "main"        # "main" computes ops; "aux" is a library's helper kernel
    variant: str = ""         # kernel class of an eager library kernel (gpusim.lower.dispatch)
    bytes: float = 0.0        # for an aux kernel: bytes it reads plus writes


@dataclass(frozen=True)
class Lowering:
    """The kernels of one graph in one mode, in the order the GPU runs them."""

    graph: OpGraph
    mode: str
    kernels: tuple[Kernel, ...]
    partition: Partition | None = None

    @property
    def groups(self) -> list[list[str]]:
        """The member nodes of each main kernel (aux kernels compute no node)."""
        return [list(k.ops) for k in self.kernels if k.role == "main"]


def realize(graph: OpGraph, group, mode: str, spec=None, layout_opt: bool | None = None,
            price=None) -> list[Kernel]:
    """The kernels one group of compute nodes becomes under ``mode``'s runtime. A single
    op in eager mode is what ATen dispatches (:func:`gpusim.lower.dispatch.eager_kernels`:
    library kernels and their helpers, which depend on the GPU ``spec``)."""
    group = list(group)
    if mode == "eager":
        if len(group) == 1:
            if spec is None:
                kind = graph.g.nodes[group[0]]["kind"]
                return [Kernel((group[0],), "library" if kind in LIBRARY_KINDS else "aten")]
            return eager_kernels(graph, group[0], spec, Kernel)
        return [Kernel(tuple(group), "generated")]
    gemms = [n for n in group if graph.g.nodes[n]["kind"] in GEMM_KINDS]
    rest = [n for n in group if n not in gemms]
    if layout_opt is None:              # a group compiled on its own decides for itself
        layout_opt = inductor_layout_opt(graph, group)
    out = []
    for n in gemms:
        # Convolutions and attention keep their eager kernel classes (the same cuDNN
        # kernels run; compiled ResNet records). Inductor's mm calls stream skinny weights
        # faster than eager's linear (llama7b-small records: 2.8 vs 2.2 TB/s): the plain
        # calibrated model prices them, padded or not (see padding()), at cuBLAS's floor
        # (class EXTERN_MM, gpusim.cost.laws.extern_mm)
        a = graph.g.nodes[n]
        pads = padding(graph, n, spec, price)
        out += (inductor_layout_copies(graph, n) if layout_opt else []) + pads
        if a["kind"] == "conv" and spec is not None:
            # cuDNN runs the conv as eager would on the layout Inductor chose
            c = conv_info(graph, n)
            out += (conv_kernels(graph, n, spec, Kernel) if c is None or not layout_opt
                    else nhwc_conv_kernels(c, n, Kernel))
        else:
            variant = attention_variant(graph, n, spec) if a["kind"] == "attention" else ""
            if variant == MASK_CLASSES["bcast_q"]:
                # Inductor realises a query-broadcast mask densely, (B, 1, Sq, Skv)
                # (sdpa_constraint; the H200 sdpa_mask sweep's compiled_hf points)
                variant = MASK_CLASSES["dense"]
            if a["kind"] == "matmul" and not pads:
                # an unpadded misaligned 16-bit GEMM is the same cuBLAS align1/align2
                # kernel eager runs (Swin's 49-token window bmm: 46 us in both records);
                # fp32 extern addmm/mm calls take eager's gemv and cuBLASLt classes,
                # without the split-K helper kernels (GPT-2 fp32 compiled has none; the
                # H200 qkv, linear_relu_layernorm and transformer_block fp32 records run
                # eager's kernels at eager's times, also where Inductor unfuses the bias)
                v = gemm_variant(graph, n)
                variant = v if v in ("align1", "align2", "gemv", "gemm_lt") else EXTERN_MM
            elif a["kind"] == "matmul":
                variant = EXTERN_MM
            out.append(Kernel((n,), "library", variant=variant))
            out += library_epilogue(graph, n, spec, Kernel)
        users = [graph.g.nodes[s]["kind"] in GEMM_KINDS for s in graph.dataflow.successors(n)]
        if conv_has_bias(graph, n) and (not users or any(users)):
            # the bias Inductor peels off cuDNN: a kernel of its own where no Triton
            # kernel reads the conv, or where a library call reads it (the biased output
            # is realised for it: ConvNeXt's downsampling conv feeding the depthwise conv,
            # H100 records, ``triton_poi_fused_..._convolution`` between the two)
            out.append(Kernel((n,), "generated", role="aux", bytes=3.0 * a["bytes_written"]))
    if rest:
        out.append(Kernel(tuple(rest), "generated"))
        if mode != "eager":      # a view-picked copy: one more kernel per view (bytes: its share)
            out += [Kernel((rest[-1],), "generated", role="aux", bytes=0.0)
                    for _ in range(region_copies(graph, rest[-1]) - 1)]
        red = [n for n in rest if graph.g.nodes[n]["kind"] in REDUCING_KINDS
               and split_reduction(graph, n, spec, True if layout_opt else None)]
        if red:      # the split reduction's second kernel: reduce the partials
            out.append(Kernel((red[0],), "generated", role="aux", bytes=2.0 * graph.g.nodes[red[0]]["bytes_written"]))
    return out


def region_copies(graph: OpGraph, n: str) -> int:
    """How many kernels compute pointwise node ``n`` when library calls read it only
    through part-picking views (``qkv[0]``, ``qkv[1]``, ``qkv[2]`` of a ``contiguous()``
    copy): Inductor never realises ``n`` whole; each call's ``realize_input`` copies its
    view into a buffer of its own, one kernel per distinct view (H100 torchvision ViT-B/16
    records: three ``triton_poi_fused__scaled_dot_product_cudnn_attention_..`` kernels
    per layer, where ``nn.MultiheadAttention`` picks q, k and v of its packed projection).
    1 otherwise."""
    a = graph.g.nodes[n]
    if a["is_output"] or fusion_class(graph, n) != "pointwise":
        return 1
    nodes = graph.g.nodes
    regions = set()
    for u in graph.dataflow.successors(n):
        if nodes[u]["kind"] not in GEMM_KINDS:
            return 1
        for i in nodes[u]["inputs"]:
            if i in nodes and nodes[i]["base"] == n:
                r = read_region(graph, u, n) if i == n else _view_region(graph, i, n)
                if not r:
                    return 1
                regions.add(r)
    return max(1, len(regions))


def _view_region(graph: OpGraph, v: str, p: str) -> tuple:
    """The part-picking views on the chain from view ``v`` down to its base ``p``."""
    nodes, out = graph.g.nodes, []
    while v != p and nodes[v]["kind"] == "view" and nodes[v]["inputs"]:
        if packet_name(nodes[v]["op"]) in REGION_VIEWS:
            out.append(v)
        v = nodes[v]["inputs"][0]
    return tuple(out)


def padding(graph: OpGraph, n: str, spec, price=None) -> list[Kernel]:
    """``pad_mm``'s copy kernels for matmul ``n``, when padding pays: Inductor keeps the padded GEMM
    only if its benchmark finds it 1.1x faster than the unpadded one, the eager padding of the operands
    it cannot plan away included (:func:`gpusim.lower.pad_mm.benchmark_pad_bytes`).

    Inductor benchmarks the two on the GPU; the lowering asks the cost model instead, through
    ``price(graph, kernel, spec) -> µs`` (:func:`gpusim.cost.kernel.kernel_us`), passed in so
    that lowering never imports the stage after it."""
    pads = [Kernel((n,), "generated", role="aux", bytes=b) for b in pad_mm_operands(graph, n, spec)]
    if not pads:
        return []
    if price is None:
        raise ValueError(f"node {n}: pad_mm's choice needs the cost model; pass price= "
                         "(gpusim.cost.kernel.kernel_us) with spec=")
    v = gemm_variant(graph, n)
    unpadded = price(graph, Kernel((n,), "library", variant=v if v in ("align1", "align2") else EXTERN_MM), spec)
    timed = [Kernel((n,), "aten", role="aux", bytes=b, variant="sector_copy") for b in benchmark_pad_bytes(graph, n)]
    padded = price(graph, Kernel((n,), "library", variant=EXTERN_MM), spec) + sum(price(graph, k, spec) for k in timed)
    return pads if unpadded > 1.1 * padded else []


def inductor_layout_copies(graph: OpGraph, n: str) -> list[Kernel]:
    """Inductor's layout optimisation: it runs convolutions channels-last, so a generated
    kernel copies each conv's NCHW weight (every call: parameters are not frozen by
    default) and, where an NCHW conv reads a graph input, that input to NHWC; its own
    kernels then produce and consume NHWC, and cuDNN launches no transform. Measured:
    conv_bn_relu records (H200), ``triton_poi_fused_convolution_0/1`` before the conv. A
    conv whose input is channels-last already (ConvNeXt's downsampling conv after a
    permuted layer norm) still has its weight copied, unless the user converted the model
    (its image conv reads a channels-last input): H100 ConvNeXt-V2 and ConvNeXt records,
    one ``triton_poi_fused_convolution`` before each downsampling conv."""
    if graph.g.nodes[n]["kind"] != "conv":
        return []
    c = conv_info(graph, n)
    if c is None or c.get("backward") or (c["layout"] != "nchw" and user_channels_last(graph)):
        # a backward conv reads what the forward graph converted and saved (the NHWC weight
        # and image): H100 compiled ResNet-50 steps launch no copy kernel in backward
        return []
    x = next(iter(graph.g.nodes[n]["reads"]))
    out = []
    if graph.g.nodes[x]["kind"] == "input" and c["layout"] == "nchw":
        # a transpose into fewer than 16 bytes of channels: each write uses a fraction of
        # its 32-byte sector (ResNet's 3-channel image: 35 us for 19 MB on the H100)
        size = c["x_bytes"] / max(1, c["N"] * c["Cin"] * c["H"] * c["W"])
        sector = min(1.0, c["Cin"] * size / 32.0)
        out.append(Kernel((n,), "generated", role="aux", bytes=c["x_bytes"] * (1 + 1 / sector)))
    w = list(graph.g.nodes[n].get("inputs") or graph.g.nodes[n]["reads"])[1:2]
    if w and w[0] in graph.g and graph.g.nodes[w[0]]["kind"] in ("copy", "pointwise"):
        # a weight Inductor computes (autocast's cast) is written channels-last by the kernel
        # that computes it: H100 compiled bf16 ResNet-50 steps, 56 ``triton_poi_fused__to_copy``
        # and no ``triton_poi_fused_convolution`` copy in forward (fp32: 18 such copies)
        return out
    if c["kh"] * c["kw"] > 1 and c["Cin"] // c["groups"] > 1:
        # a 1x1 or depthwise weight is already channels-last contiguous: no copy
        out.append(Kernel((n,), "generated", role="aux", bytes=2.0 * c["w_bytes"]))
    return out


def user_channels_last(graph: OpGraph) -> bool:
    """Whether the user ran the model channels-last (``model.to(memory_format=...)``): a
    convolution reading a graph input runs NHWC. Its weights are then channels-last too."""
    for n in graph.compute_nodes:
        if graph.g.nodes[n]["kind"] == "conv":
            x = next(iter(graph.g.nodes[n]["reads"]), None)
            if x is not None and graph.g.nodes[x]["kind"] == "input":
                c = conv_info(graph, n)
                if c is not None and c["layout"] != "nchw":
                    return True
    return False


def lower(graph: OpGraph, mode: str = "eager", partition=None,
          regions: bool = False, spec=None, price=None) -> Lowering:
    """Which kernels run for ``graph`` in ``mode``.

    Parameters
    ----------
    graph : OpGraph
    mode : "eager" | "compiled" | "cudagraph"
    partition : optional :class:`Partition` or list of node-name groups; checked for
        legality (raises :class:`~gpusim.lower.legality.FusionError`)
    regions : each group of ``partition`` runs as its own compiled region (the
        validation harness's way of executing a partition)
    spec : the GPU (:class:`~gpusim.hw.spec.GPUSpec`); eager dispatch depends on it
        (TF32 convolutions, say). Without it, one kernel per op.
    price : ``price(graph, kernel, spec) -> µs``, the cost model for the choices Inductor
        makes by benchmarking (``pad_mm``; :func:`padding`); needed in compiled mode with ``spec``

    >>> from gpusim.graph.opgraph import GraphBuilder
    >>> b = GraphBuilder(); x = b.input("x", (1024,))
    >>> _ = b.op("a", "pointwise", [x]); _ = b.op("r", "pointwise", ["a"]); b.output("r")
    >>> g = b.build()
    >>> [k.ops for k in lower(g, "eager").kernels], [k.ops for k in lower(g, "compiled").kernels]
    ([('a',), ('r',)], [('a', 'r')])
    """
    check_mode(mode)
    if partition is not None:
        part = partition if isinstance(partition, Partition) else Partition.of(partition)
        groups = [list(g) for g in part.groups]
        check_partition(graph, groups)
    elif mode == "eager":
        part, groups = None, [[n] for n in graph.compute_nodes]
    elif "train" in graph.meta:
        return _lower_step(graph, mode, spec, price)
    else:
        part, groups = None, inductor_groups(graph, spec)
    kernels: list[Kernel] = []
    # one compiled graph decides its layout once; separately compiled regions each decide
    whole = None if (regions or mode == "eager") else inductor_layout_opt(graph)
    ordered = kernel_order(graph, groups)
    # Inductor's attention-bias kernels (sdpa_bias): the whole graph compiled, one bias per run
    biases = bias_kernels(graph, ordered, spec, Kernel) if part is None and mode != "eager" else {}
    for g in ordered:
        ks = biases.get(g[0], []) + realize(graph, g, mode, spec, whole, price)
        if regions:            # the region is entered before its first kernel runs
            # the region's entry checks its tensor inputs; the kernel keeps its role,
            # class and bytes (a region that opens with a layout copy is still a copy)
            first = min(range(len(ks)), key=lambda i: graph.position[ks[i].ops[0]])
            ks[first] = dataclasses.replace(ks[first],
                                            region_inputs=len(group_io(graph, g)[0]))
        kernels += ks
    return Lowering(graph, mode, tuple(kernels), part)


def step_regions(graph: OpGraph) -> dict[str, list[str]]:
    """The compute nodes of a training step that ``torch.compile(model)`` compiles, as
    AOTAutograd splits them: ``forward`` (the ops inside the model's call) and ``backward``
    (the model's backward, once its outputs' gradients exist); the rest of the step (the
    loss outside the model and its backward, the optimizer, ``zero_grad``) stays eager
    (``graph.node(n)["region"]``, labelled at capture by :mod:`gpusim.capture.train`)."""
    out: dict[str, list[str]] = {"forward": [], "backward": []}
    for n in graph.compute_nodes:
        a = graph.g.nodes[n]
        if a.get("region") == "model" and a.get("phase") in out:
            out[a["phase"]].append(n)
    return out


def _step_gemm(graph: OpGraph, k: Kernel) -> Kernel:
    """A training step's aligned extern GEMM is eager's cuBLAS kernel class at eager's times
    (H100 records, Llama-3.2-1B bf16 backward: 227 GEMMs, 3,371 us compiled, 3,362 us
    eager); a padded or misaligned one keeps what :func:`realize` chose."""
    if k.impl != "library" or k.variant or graph.g.nodes[k.ops[0]]["kind"] != "matmul":
        return k
    v = gemm_variant(graph, k.ops[0])
    return k if v in ("align1", "align2") else dataclasses.replace(k, variant=v)


def _lower_step(graph: OpGraph, mode: str, spec, price=None) -> Lowering:
    """A training step with ``torch.compile(model)`` inside it: Inductor's kernels for the
    model's forward graph and for its backward graph (each grouped on its own: a tensor the
    backward reads is a forward graph output, the saved activations), eager kernels for the
    rest of the step. Each compiled graph decides its convolutions' layout; the backward's
    convolutions run in the layout the forward chose."""
    graph = decompose_norms(graph, [n for ns in step_regions(graph).values() for n in ns])
    regions = step_regions(graph)
    compiled = {n for ns in regions.values() for n in ns}
    fwd_layout = inductor_layout_opt(graph, regions["forward"])
    groups = [g for ns in regions.values() for g in inductor_groups(graph, spec, ns)]
    groups += [[n] for n in graph.compute_nodes if n not in compiled]
    kernels: list[Kernel] = []
    for g in kernel_order(graph, groups):
        if g[0] not in compiled:
            kernels += realize(graph, g, "eager", spec)
            continue
        kernels += [_step_gemm(graph, k) for k in realize(graph, g, mode, spec, fwd_layout, price)]
        if fwd_layout and len(g) == 1:
            kernels += _grad_layout_copy(graph, g[0])
    return Lowering(graph, mode, tuple(kernels), None)


def _grad_layout_copy(graph: OpGraph, n: str) -> list[Kernel]:
    """A weight Inductor runs channels-last (:func:`inductor_layout_copies`: a filter wider
    than 1x1) gets its gradient channels-last from the compiled backward; autograd's
    ``AccumulateGrad`` copies it to the parameter's layout, an eager permuting copy of the
    fp32 gradient (H100 ResNet-50 compiled steps: 17 ``direct_copy_kernel_cuda`` kernels in
    backward, one per 3x3 and 7x7 filter)."""
    a = graph.g.nodes[n]
    c = conv_info(graph, n) if a["kind"] == "conv" else None
    if not c or c.get("backward") != "filter" or c["kh"] * c["kw"] == 1:
        return []
    numel = c["Cout"] * (c["Cin"] // c["groups"]) * c["kh"] * c["kw"]
    return [Kernel((n,), "aten", role="aux", variant="strided_copy", bytes=2.0 * 4 * numel)]


def step_issuers(low: Lowering) -> list[str] | None:
    """Who issues each kernel of a training step with ``torch.compile(model)`` inside it:
    ``"forward"`` / ``"backward"``, the wrapper Inductor generated for that compiled graph
    (AOTAutograd's forward, run by the compiled model's call; its backward, run by
    autograd's engine through ``CompiledFunction.backward``), or ``"eager"``: the rest of the
    step (``zero_grad``, the loss and its backward, the optimizer) and the helper kernels
    autograd launches itself (``AccumulateGrad``'s layout copies, :func:`_grad_layout_copy`).
    None for anything else (an eager step, a forward)."""
    if low.mode == "eager" or low.partition is not None or "train" not in low.graph.meta:
        return None
    g = low.graph.g
    out = []
    for k in low.kernels:
        a = g.nodes[k.ops[0]] if k.ops and k.ops[0] in g else {}   # a collective: no node
        compiled = a.get("region") == "model" and a.get("phase") in ("forward", "backward")
        out.append(a["phase"] if compiled and k.impl != "aten" else "eager")
    return out


def step_region_inputs(low: Lowering) -> dict[str, int]:
    """Tensors each compiled graph of a training step takes per call (views resolved to
    their storage's producer): the forward graph the parameters, buffers and batch it
    reads; the backward graph what it reads from outside itself (the activations and
    weights the forward saved, the gradients of the model's outputs)."""
    g = low.graph.g
    out = {}
    for ph, nodes in step_regions(low.graph).items():
        inside = set(nodes)
        out[ph] = len({p for n in nodes for p in g.nodes[n]["reads"] if p not in inside})
    return out
