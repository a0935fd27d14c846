"""The buffers of a lowering, for the liveness simulation (:mod:`gpusim.sim.memory`): which storage each
node writes (views share it, in-place ops write their input's), when each is allocated and last used, and the
extra buffers libraries and Inductor add or save (workspaces, autograd's accumulation, reuse of dying inputs)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpusim.graph.opgraph import DTYPE_BYTES, OpGraph, numel
from gpusim.graph.ops import packet_name
from gpusim.sim.allocator import blas_workspace_bytes

_INPUT_LABEL = re.compile(r"^in\d+$")



# ------------------------------------------------------------------ storages
def is_inplace(attrs: dict) -> bool:
    """An op that writes its first argument (``relu_``, ``add_``, ``copy_``; the grad
    scaler's ``_amp_foreach_non_finite_check_and_unscale_`` and ``_amp_update_scale_``)."""
    p = packet_name(attrs["op"])
    return attrs["kind"] not in ("input", "view") and p.endswith("_") and (
        not p.startswith("_") or p.startswith(("_foreach_", "_fused_", "_amp_")))


def node_bytes(attrs: dict) -> int:
    """Bytes of a node's output storage."""
    shape = attrs.get("shape")
    if shape and isinstance(shape[0], tuple):       # several outputs: what it writes
        return int(attrs.get("bytes_written") or 0)
    return numel(shape or ()) * DTYPE_BYTES.get(attrs.get("dtype"), 4)


def storage_roots(graph: OpGraph, eager: bool = False, split: dict | None = None) -> dict[str, str]:
    """Each node -> the node whose storage holds its tensor (views and in-place ops
    resolve to the storage they alias; with ``eager``, also ATen's own out= reuse:
    :func:`safe_softmax_out`, and each result of a multi-output op is its own storage:
    :func:`split_outputs`; ``split``: the ops split, None: all of them with ``eager``)."""
    g = graph.g
    root: dict[str, str] = {}
    if split is None:
        split = split_outputs(graph) if eager else {}
    own = {s for kids in split.values() for s in kids}
    for n in graph.order:
        a = g.nodes[n]
        src = safe_softmax_out(graph, n) if eager else None
        if n in own:
            root[n] = n
        elif a["kind"] == "view":
            b = a.get("base", n)
            up = (a.get("inputs") or [None])[0]
            if own and root.get(up) in own:         # a view of one result of a split op
                root[n] = root[up]
            else:
                root[n] = root.get(b, b) if b != n else n
        elif is_inplace(a) and a["inputs"]:
            src = a["inputs"][0]
            root[n] = root.get(src, src)
        elif src is not None:
            root[n] = root.get(src, src)
        else:
            root[n] = n
    return root


def split_outputs(graph: OpGraph) -> dict[str, list[str]]:
    """Multi-output ATen ops (``native_layer_norm`` and its backward, ``native_dropout``,
    batch norm, the attention kernels) -> the ``getitem`` views of their results. Each
    result is a tensor of its own storage in eager PyTorch: a layer norm backward's input
    gradient dies at the next op while its weight gradient lives to the step's end, and a
    result nobody reads dies with the op. An optimizer's out-of-place ``_foreach_*`` op is
    left whole: its results are one Python list, dropped together."""
    g = graph.g
    out: dict[str, list[str]] = {}
    for n in g.nodes:
        a = g.nodes[n]
        if a.get("op") == "getitem" and a["kind"] == "view":
            src = (a.get("inputs") or [None])[0]
            if src is None or src not in g:
                continue
            s = g.nodes[src]
            shape = s.get("shape")
            if s["kind"] in ("input", "view") or not shape or not isinstance(shape[0], tuple) \
                    or s.get("foreach") or is_inplace(s):
                continue
            out.setdefault(src, []).append(n)
    return out


#: multi-output ops whose results a compiled training step holds apart (:func:`compiled_splits`)
COMPILED_SPLIT = ("cudnn_batch_norm", "native_batch_norm", "_native_batch_norm_legit",
                  "_native_batch_norm_legit_functional", "max_pool2d_with_indices",
                  "max_pool3d_with_indices", "native_batch_norm_backward",
                  "cudnn_batch_norm_backward")


def compiled_splits(low) -> dict[str, list[str]]:
    """The multi-output ops of a compiled training step whose results are separate buffers
    (:func:`split_outputs`): batch norm's output, mean and rstd, max pooling's values and
    indices, batch norm backward's input gradient and its weight and bias gradients (held
    to the step's end). Inductor realises each on its own and AOTAutograd saves for the
    backward only those it reads (H100 ResNet-50 bf16 compiled step: held whole, the saved
    mean and rstd of the batch norms ahead of a residual add kept their output alive, 21 MB;
    the record's forward ends 11 MB under eager's). Other ops (dropout, attention, layer
    norm) stay whole: split, the H100 BERT-base step's forward grew 100 MB past its record,
    a rule not yet understood, and layer norm's backward alone moved its peak 16 MB further."""
    if low.partition is not None or "train" not in low.graph.meta:
        return {}
    g = low.graph.g
    return {k: v for k, v in split_outputs(low.graph).items()
            if packet_name(g.nodes[k]["op"]) in COMPILED_SPLIT}


def pool_indices(graph: OpGraph, n: str) -> bool:
    """Whether ``n`` is the indices result of ``max_pool2d/3d_with_indices``. Inductor
    lowers that op to ``_low_memory_max_pool_with_offsets``: the kernel (still named
    ``triton_poi_fused_max_pool2d_with_indices``, its ``out_ptr1`` an ``*i8``) writes each
    output's int8 offset inside its window, and the backward rebuilds the indices from
    them, so a compiled graph saves one byte per output where eager saves eight."""
    a = graph.g.nodes[n]
    src = (a.get("inputs") or [None])[0]
    return (a.get("dtype") == "int64" and src in graph.g and packet_name(graph.g.nodes[src]["op"])
            in ("max_pool2d_with_indices", "max_pool3d_with_indices"))


def safe_softmax_out(graph: OpGraph, n: str) -> str | None:
    """The softmax node whose storage node ``n`` writes, when ``n`` is the ``where`` that
    ends ATen's ``_safe_softmax`` (the math attention path: ``out = softmax(x)``, rows of
    ``x`` that are all ``-inf`` zeroed by ``where(all(isneginf(x)), 0, out)``): ATen
    writes it into ``out`` (``at::where_out(out, masked_rows, zero, out)``, "reuse storage
    for out", SDPA's ``attention.cpp``), so it allocates nothing. None otherwise."""
    g = graph.g
    a = g.nodes[n]
    if packet_name(a["op"]) != "where" or len(a.get("inputs") or ()) != 3:
        return None
    cond, _, out = a["inputs"]
    if packet_name(g.nodes[out]["op"]) not in ("softmax", "_softmax", "_safe_softmax"):
        return None
    c = g.nodes[cond]
    if packet_name(c["op"]) != "all" or not c.get("inputs"):
        return None
    neg = g.nodes[c["inputs"][0]]
    if packet_name(neg["op"]) != "isneginf" or neg.get("inputs") != g.nodes[out].get("inputs"):
        return None
    return out


def input_role(attrs: dict) -> str:
    """``"weight"`` (parameter, buffer, constant), ``"input"`` (a call argument) or
    ``"alloc"`` (a buffer the call itself allocates: ``torch.empty``)."""
    label = attrs.get("label")
    if label is None or _INPUT_LABEL.match(str(label)):
        return "input"
    if str(label).startswith("alloc:"):
        return "alloc"
    return "weight"


def _temp_bytes(graph: OpGraph, n: str, mode: str) -> int:
    """Bytes an eager op allocates for itself and frees when it returns."""
    a = graph.g.nodes[n]
    if mode == "eager" and packet_name(a["op"]) == "max_pool2d":
        return numel(a["shape"]) * 8          # int64 indices of max_pool2d_with_indices
    return 0


@dataclass
class _Buf:
    size: int
    first: int
    last: int
    keep: bool = False
    alias_of: str | None = None
    resident: bool = False      # a resident input the call lets go (freed at ``last``)


def _buffers(low) -> tuple[dict, list]:
    """Storages the call allocates: name -> _Buf (kernel span), and per-kernel
    temporaries ``[(kernel index, bytes, last kernel)]``."""
    graph, g = low.graph, low.graph.g
    eager = low.mode == "eager" and low.partition is None
    split = split_outputs(graph) if eager else compiled_splits(low)
    root = storage_roots(graph, eager=eager, split=split)
    results = {r for kids in split.values() for r in kids}
    kernels = low.kernels
    kid: dict[str, int] = {}
    for i, k in enumerate(kernels):
        if k.role == "main":
            for n in k.ops:
                kid[n] = i
    # compiled: a value Inductor inlines is recomputed by every kernel that reads it,
    # never stored; those kernels load what it loads, which lives until the last of them
    loads = _inlined_loads(graph) if low.mode != "eager" and low.partition is None else {}
    touch: dict[str, list[int]] = {}       # storage -> kernels that write or read it
    for n, i in kid.items():
        a = g.nodes[n]
        if a.get("sync"):
            continue                        # a host read allocates no device memory
        if n not in loads:
            touch.setdefault(root[n], []).append(i)
        for s in split.get(n, ()):          # each result of a multi-output op
            touch.setdefault(s, []).append(i)
        for p in _reads(a, loads):
            if p not in split:              # read through its results' views (below)
                touch.setdefault(root.get(p, p), []).append(i)
        for p in a.get("inputs") or ():
            if root.get(p) in results:      # a result of a split op, maybe through a view
                touch.setdefault(root[p], []).append(i)
    outputs = {root.get(n, n) for n in g.nodes if g.nodes[n].get("is_output") and n not in split}
    outputs |= _split_returned(graph, split, root)
    end = len(kernels)
    if eager:
        _python_holds(graph, kid, root, touch, end)
    bufs: dict[str, _Buf] = {}
    released = set(graph.meta.get("released_inputs") or ()) if eager else set()
    for r, ks in touch.items():
        a = g.nodes[r]
        if r in released:                   # resident, dropped by the model (a cache's old layer)
            bufs[r] = _Buf(node_bytes(a), min(ks), max(ks), resident=True)
            continue
        if a["kind"] == "input" and input_role(a) != "alloc":
            continue                        # baseline: resident before the call
        first, last = min(ks), max(ks)
        if r not in outputs and first == last and kernels[first].impl == "generated":
            continue                        # lives and dies inside one fused kernel
        if r in outputs:
            last = end
        size = node_bytes(a)
        if r in split:                      # results nobody reads: die with the op
            size = max(0, size - sum(node_bytes(g.nodes[s]) for s in split[r]))
            if not size:
                continue
        if not eager and r in results and pool_indices(graph, r):
            size = numel(a.get("shape") or ())     # Inductor's int8 offsets, not int64 indices
        bufs[r] = _Buf(size, first, last, r in outputs)
    temps = []
    if low.mode == "eager" and low.partition is None:
        temps += _library_workspaces(graph, kernels)
    for i, k in enumerate(kernels):
        if k.role == "main" and len(k.ops) == 1:
            t = _temp_bytes(graph, k.ops[0], low.mode)
            if t:
                temps.append((i, t, i))
        elif k.role == "aux" and low.mode != "eager" and k.bytes:
            # Inductor's copy of a GEMM operand (pad_mm) or of a conv input/weight to
            # NHWC: a buffer held until that GEMM or conv ends
            main = next((j for j in range(i + 1, end) if kernels[j].role == "main"
                         and kernels[j].ops == k.ops), None)
            if main is not None:
                temps.append((i, _copy_bytes(graph, k), main))
    if low.mode != "eager":
        _inductor_inplace(low, bufs, root, loads)
        _inductor_reuse(low, bufs)
    elif eager:
        _autograd_accumulate(low, bufs, root)
    return bufs, temps


def _autograd_accumulate(low, bufs: dict, root: dict) -> None:
    """The autograd engine sums the gradients that reach one tensor from several uses
    (a residual stream, a tied weight) in its input buffer: ``old_var.add_(var)`` in place
    when it holds the only reference to the gradient already there, a dense tensor that is
    nobody's view, else ``old_var + var`` (``InputBuffer::accumulate``,
    ``can_accumulate_inplace``; the incoming ``var`` is never reused). A trace on fake
    tensors records an out-of-place ``add(old_var, var)`` there (a tensor subclass is
    never reused), so: a backward ``add`` of two tensors of its own size and dtype whose
    first operand is not a view and dies at it writes into that operand's storage. An H100
    T5-small step shows both (2026-11-25, allocator trace): its tied embedding's gradient
    first arrives as the LM head's transposed view (the first sum allocates a new
    buffer), then as a plain tensor (the second sum allocates nothing)."""
    g = low.graph.g
    for i, k in enumerate(low.kernels):
        if k.role != "main" or len(k.ops) != 1:
            continue
        n = k.ops[0]
        a = g.nodes[n]
        if a.get("phase") != "backward" or packet_name(a["op"]) != "add" or n not in bufs \
                or bufs[n].alias_of is not None or len(a.get("inputs") or ()) != 2:
            continue
        p = a["inputs"][0]
        d = root.get(p, p)
        b = bufs.get(d)
        if g.nodes[p]["kind"] == "view" and d != p:
            continue                        # a view holds its base: not the last reference
        if b is None or b.alias_of is not None or b.keep or b.last != i or b.first >= i \
                or b.size != bufs[n].size or g.nodes[p].get("dtype") != a.get("dtype") \
                or node_bytes(g.nodes[p]) != b.size:
            continue
        bufs[n].alias_of = d
        b.last, b.keep = bufs[n].last, bufs[n].keep


def _split_returned(graph: OpGraph, split: dict, root: dict) -> set:
    """The results of split multi-output ops that leave the graph: those a ``returned``
    node aliases (a graph captured before nodes said so: every result of an op marked
    ``is_output``)."""
    g = graph.g
    if not split:
        return set()
    marked = [n for n in g.nodes if g.nodes[n].get("returned")]
    if marked:
        return {root.get(n, n) for n in marked if g.nodes[root.get(n, n)]["kind"] == "view"}
    return {s for m, kids in split.items() if g.nodes[m].get("is_output") for s in kids}


def _library_workspaces(graph: OpGraph, kernels) -> list[tuple]:
    """Eager cuDNN convolutions whose lowering has layout kernels around the conv
    (``nchwToNhwc`` of the input and weight, ``nhwcToNchw`` of the output, or the
    channels-last stem's ``nhwcAddPadding``): cuDNN runs them inside one execution plan
    whose workspace holds every transformed tensor, and PyTorch allocates that workspace
    through the caching allocator for the call (``Conv_v8.cpp``: ``run_conv_plan``) and
    frees it when the conv returns. One temporary ``(first kernel, bytes, last kernel)``
    per such conv, sized by the tensors its layout kernels write
    (:func:`_aux_written`)."""
    from gpusim.lower.conv import conv_info
    spans: dict[str, list] = {}            # conv node -> [first, last, bytes]
    for i, k in enumerate(kernels):
        n = k.ops[0] if len(k.ops) == 1 else None
        if n is None or k.impl != "library" or graph.g.nodes[n]["kind"] != "conv":
            continue
        s = spans.setdefault(n, [i, i, 0])
        s[1] = i
        if k.role == "aux":
            c = conv_info(graph, n)
            s[2] += _aux_written(c, k.bytes) if c else int(k.bytes // 2)
    return [(first, size, last) for first, last, size in spans.values() if size]


def _aux_written(c: dict, moved: float) -> int:
    """Bytes a conv's layout kernel writes: it reads one of the conv's tensors (input,
    weight, output: the one it moves nearest twice over, at least twice) and writes the
    rest of what it moves (a transpose: the same size; a channel pad: more)."""
    sizes = [t for t in (c["x_bytes"], c["w_bytes"], c["out_bytes"]) if t and moved >= 1.98 * t]
    if not sizes:
        return int(moved // 2)
    read = min(sizes, key=lambda t: moved / t)
    return int(moved - read)


def _copy_bytes(graph: OpGraph, k) -> int:
    """Size of the buffer an aux copy kernel before a GEMM or conv writes: a conv's
    weight or input (:func:`gpusim.lower.lowering.inductor_layout_copies` prices the input's
    transpose above its size), else half the bytes the copy moves."""
    n = k.ops[0]
    if graph.g.nodes[n]["kind"] == "conv":
        from gpusim.lower.conv import conv_info
        c = conv_info(graph, n)
        if c is not None:
            return int(c["w_bytes"] if k.bytes == 2.0 * c["w_bytes"] else c["x_bytes"])
    return int(k.bytes // 2)


def _inductor_reuse(low, bufs: dict) -> None:
    """Inductor's wrapper memory planning (``AllocateLine`` / ``FreeIfNotReusedLine`` /
    ``ReuseLine`` of ``codegen/wrapper.py``): a buffer freed after its last use goes to a
    pool keyed by dtype and exact size; a later buffer the wrapper allocates itself (a
    generated kernel's, or a GEMM's ``out=``) takes the most recently freed one of its key
    instead of a new allocation. A freed buffer is deleted only if nothing reuses it, so a
    reused one stays allocated from its last use until its new owner dies. Outputs of
    library calls that allocate for themselves (convolutions, attention) never reuse."""
    g = low.graph.g
    owners = {r: b for r, b in bufs.items() if b.alias_of is None}
    pool: dict[tuple, list[str]] = {}
    freeing: dict[int, list[str]] = {}
    for r in sorted(owners, key=lambda r: owners[r].first):
        b = owners[r]
        # buffers freed after kernels before this one are in the pool
        for i in sorted(k for k in freeing if k < b.first):
            for d in freeing.pop(i):
                pool.setdefault((g.nodes[d].get("dtype"), bufs[d].size), []).append(d)
        k = low.kernels[b.first]
        wrapper_alloc = k.impl == "generated" or g.nodes[r]["kind"] == "matmul"
        cands = pool.get((g.nodes[r].get("dtype"), b.size)) if wrapper_alloc else None
        if cands:
            old = cands.pop()
            b.alias_of = old
            bufs[old].last, bufs[old].keep = b.last, b.keep
            r = old
        if not bufs[r].keep:
            freeing.setdefault(bufs[r].last, []).append(r)


def _inlined_loads(graph: OpGraph) -> dict[str, set]:
    """Pointwise values Inductor inlines (not stored: :func:`gpusim.lower.inductor.stored_nodes`)
    -> the nodes whose storages their expression loads."""
    from gpusim.lower.inductor import node_class, stored_nodes
    cls = {n: node_class(graph, n) for n in graph.compute_nodes}
    stored = stored_nodes(graph, cls)
    g = graph.g
    loads: dict[str, set] = {}
    for n in graph.compute_nodes:
        a = g.nodes[n]
        if cls[n] != "pointwise" or n in stored or a["is_output"] or is_inplace(a):
            continue
        loads[n] = set(_reads(a, loads))
    return loads


def _reads(attrs: dict, loads: dict) -> list[str]:
    """The nodes whose storages a node reads, inlined values replaced by their loads."""
    out = []
    for p in attrs["reads"]:
        out += loads[p] if p in loads else [p]
    return out


def _python_holds(graph: OpGraph, kid: dict, root: dict, touch: dict, end: int) -> None:
    """Eager frees a storage when Python drops its last tensor on it, which can be well
    after its last use (``graph.meta["py_free"]``, :mod:`gpusim.capture.lifetimes`): extend each
    storage's span to the kernel after which its last tensor object died."""
    frees = graph.meta.get("py_free")
    if not frees:
        return
    reached: dict[str, int] = {}       # node -> last kernel issued at or before it
    k = -1
    for n in graph.g.nodes:            # capture order: eager issues kernels in it
        k = max(k, kid.get(n, -1))
        reached[n] = k
    for n, after in frees.items():
        r = root.get(n, n)
        if r not in touch:
            continue
        last = end - 1 if after is None else reached.get(after, -1)
        if last > max(touch[r]):
            touch[r].append(last)


PADDING_STRIDE_THRESHOLD, PADDING_ALIGNMENT_BYTES = 1024, 128   # Inductor's config.padding_*


def padded_rows(attrs: dict) -> bool:
    """Whether Inductor's comprehensive padding (``Layout._pad_strides``) pads this node's row
    stride: above the threshold and not a multiple of the alignment (58101 -> 58112)."""
    shape, align = attrs.get("shape") or (), PADDING_ALIGNMENT_BYTES // DTYPE_BYTES.get(attrs.get("dtype"), 4)
    return len(shape) >= 2 and isinstance(shape[-1], int) and shape[-1] > PADDING_STRIDE_THRESHOLD \
        and shape[-1] % align != 0


def _inductor_inplace(low, bufs: dict, root: dict, loads: dict) -> None:
    """Inductor writes a generated kernel's output into an input buffer that dies in that
    kernel, when size and dtype match: the output then owns that buffer. Not a graph output with
    padded rows (:func:`padded_rows`: eager's row stride, not its input's padded one): H100 OPUS-MT's
    and BART's logits + ``final_logits_bias`` keep their own block (OPUS-MT measured 87 MiB: both)."""
    g = low.graph.g
    by_first: dict[int, list[str]] = {}
    for r, b in bufs.items():
        by_first.setdefault(b.first, []).append(r)
    for i, k in enumerate(low.kernels):
        if k.impl != "generated" or k.role != "main" or i not in by_first:
            continue
        dying = [root.get(p, p) for n in k.ops for p in _reads(g.nodes[n], loads)]
        dying = [r for r in dict.fromkeys(dying) if r in bufs and bufs[r].last == i
                 and not bufs[r].keep and bufs[r].first < i and bufs[r].alias_of is None]
        for out in by_first[i]:
            b = bufs[out]
            if b.keep and padded_rows(g.nodes[out]):
                continue
            for d in dying:
                if bufs[d].size == b.size and g.nodes[d].get("dtype") == g.nodes[out].get("dtype"):
                    b.alias_of = d          # reuses d's block: no new allocation
                    bufs[d].last = b.last
                    bufs[d].keep = b.keep
                    dying.remove(d)
                    break


def _workspace_allocs(low, spec) -> dict[int, list[int]]:
    """``{kernel index: [bytes]}``: the BLAS workspaces a fresh process's first call
    allocates and keeps (:func:`blas_workspace_bytes`). PyTorch keeps one cuBLAS workspace
    per (handle, stream) and hands each thread its own handle
    (``CublasHandlePool.cpp``: ``cublas_handle_stream_to_workspace``), so each thread
    that runs GEMMs holds one: cuBLAS's at its first GEMM, cuBLASLt's at its first GEMM
    with a bias. A training step runs two such threads: its forward and optimizer on the
    caller's thread, its backward on autograd's device thread (:func:`blas_thread`)."""
    from gpusim.lower.dispatch import has_bias
    g = low.graph.g
    blas, lt = blas_workspace_bytes(spec)
    gemms = [(i, k.ops[0]) for i, k in enumerate(low.kernels)
             if k.role == "main" and k.impl == "library" and len(k.ops) == 1
             and g.nodes[k.ops[0]]["kind"] == "matmul"]
    out: dict[int, list[int]] = {}
    seen: set = set()
    for i, n in gemms:
        t = blas_thread(g.nodes[n])
        if t not in seen:
            seen.add(t)
            out.setdefault(i, []).append(blas)
        if (t, "lt") not in seen and has_bias(low.graph, n):
            seen.add((t, "lt"))
            out.setdefault(i, []).append(lt)
    return out


def blas_thread(attrs: dict) -> str:
    """The host thread that issues a node's kernel: ``"autograd"`` for a training step's
    backward (the autograd engine runs it on its own thread per device), else
    ``"caller"``."""
    return "autograd" if attrs.get("phase") == "backward" else "caller"
