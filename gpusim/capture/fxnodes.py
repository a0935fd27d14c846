"""The FX-to-OpGraph node builders capture uses: tensor metadata, host syncs and copies,
views, conv layout and attention facts (:func:`gpusim.capture.tracing.fx_to_opgraph`)."""

from __future__ import annotations

import torch

from gpusim.graph import ops
from gpusim.graph.einsum import einsum_terms


def _dtype_name(dt) -> str:
    return str(dt).replace("torch.", "")


def _meta(t) -> ops.TensorMeta:
    return ops.TensorMeta(tuple(int(s) for s in t.shape), _dtype_name(t.dtype),
                          t.element_size(), tuple(int(s) for s in t.stride()))


class MetaMemo(dict):
    """:func:`_meta` of each tensor object once (``memo(t)``): a conversion reads the same
    node value as an input of every op that uses it. Keyed by ``id``: the caller keeps the
    tensors alive (the traced graph's values) while it uses the memo; a TensorMeta is frozen."""

    def __call__(self, t) -> ops.TensorMeta:
        m = self.get(id(t))
        if m is None:
            m = self[id(t)] = _meta(t)
        return m


class LayoutMemo(dict):
    """``memo(f, t, out)`` for :func:`_plain` and :func:`_permuted`, computed once per
    ``(f, t's and out's shapes and strides, out's device)``: both are functions of those alone
    (contiguity and density are facts of sizes and strides), and a decoder's layers repeat
    them op for op. Symbolic shapes (a compiled trace's) are not memoised."""

    def __call__(self, f, t, out) -> bool:
        try:
            shape, stride, oshape, ostride = tuple(t.shape), t.stride(), tuple(out.shape), out.stride()
        except Exception:  # noqa: BLE001 - sparse/odd tensors: as f takes them
            return f(t, out)
        if not all(type(x) is int for x in shape + stride + oshape + ostride):
            return f(t, out)
        key = (f, shape, stride, oshape, ostride, out.device.type)
        r = self.get(key)
        if r is None:
            r = self[key] = f(t, out)
        return r


def _storage_key(t):
    try:
        return t.untyped_storage()._cdata
    except Exception:  # noqa: BLE001 - sparse/odd tensors have no storage
        return None


def _add_sync(g, name, opname, src, vals, inplace_writer):
    """A host read of a device value (``.item()``, ``bool(t)``): a device-to-host copy of
    one element that the host waits for. Kind ``other``: it never fuses."""
    t = vals.get(src.name)
    if not isinstance(t, torch.Tensor):
        return
    m = _meta(t)
    est = ops.estimate(ops.OpCtx(opname, [m], [], (m,), {}))
    base = inplace_writer.get(_storage_key(t)) or g.nodes[src.name]["base"]
    reads_op = g.nodes[base]["op"]
    g.add_node(name, op=opname, kind=est["kind"], shape=(), dtype=_dtype_name(t.dtype),
               flops=est["flops"], bytes_read=float(m.itemsize),
               bytes_written=est["bytes_written"], inputs=[src.name], base=name,
               is_output=False, unmodelled=est["unmodelled"], reads={base: m.itemsize},
               gemm=None, contiguous=True, sync={"reads": base, "reads_op": reads_op})
    g.add_edge(src.name, name, bytes=m.itemsize)
    if base != src.name:
        g.add_edge(base, name, bytes=m.itemsize)


#: conversions that copy a host tensor to the device when their output lives there
_H2D_CONVERSIONS = ("to", "_to_copy", "type_as", "copy_", "copy")


def _add_h2d(g, const: str, t) -> None:
    """A tensor constant on the compute device (``torch.tensor(x, device=...)`` inside
    the forward, traced as a constant): eager builds it on the host and copies it over
    with a stream sync every call (GPT-Neo's per-layer ``torch.tensor(finfo.min)``: 13
    of its 14 syncs in the H100 profile). A sync node after the constant, where the
    program first uses it; torch.compile makes it a graph constant (no node). The node has
    the tensor's shape: an empty one (DynamicCache's ``torch.tensor([])``) is ``(0,)``, zero
    bytes, and launches nothing (:func:`gpusim.lower.dispatch.launches_nothing`)."""
    b = float(t.numel() * t.element_size())
    g.add_node(f"{const}_h2d", op=ops.H2D_COPY, kind="other", shape=tuple(int(s) for s in t.shape),
               dtype=_dtype_name(t.dtype), flops=0.0, bytes_read=b, bytes_written=b,
               inputs=[const], base=f"{const}_h2d", is_output=False, unmodelled=False,
               reads={const: b}, gemm=None, contiguous=True,
               sync={"reads": const, "reads_op": "a tensor copied from the host"})
    g.add_edge(const, f"{const}_h2d", bytes=b)


def _conv_layout(in_tensors) -> str:
    """``"nhwc"`` when cuDNN runs the conv channels-last (PyTorch's rule: the input or the
    weight suggests channels_last), else ``"nchw"``."""
    def cl(t):
        if t.dim() not in (4, 5):
            return False
        try:
            from torch._prims_common import suggest_memory_format
            return suggest_memory_format(t) in (torch.channels_last, torch.channels_last_3d)
        except Exception:  # noqa: BLE001 - older torch: stride test
            fmt = torch.channels_last if t.dim() == 4 else torch.channels_last_3d
            return t.is_contiguous(memory_format=fmt) and not t.is_contiguous()
    return "nhwc" if any(cl(t) for t in in_tensors[:2]) else "nchw"


def _sdpa_facts(ctx) -> dict:
    """What chooses an attention kernel: mask given (and its dtype), causal, dropout,
    head dims, sequence lengths, heads (grouped-query heads when K/V have fewer)."""
    bwd = ops.packet_name(ctx.name).endswith("_backward")    # (grad_out, q, k, v, ...)
    q, k, v = ctx.ins[bwd], ctx.ins[bwd + 1], ctx.ins[bwd + 2]
    fused = ops.packet_name(ctx.name) == "scaled_dot_product_attention"
    mask = ctx.arg(3, "attn_mask") if fused else ctx.kwargs.get("attn_bias")
    mask = mask if isinstance(mask, ops.TensorMeta) else None
    return {"mask": mask is not None, "mask_dtype": mask.dtype if mask else None,
            "mask_shape": tuple(mask.shape) if mask else None,
            "is_causal": bool(ctx.arg(5, "is_causal", False)) if fused
            else bool(ctx.arg(11, "is_causal", False)) if bwd else bool(ctx.kwargs.get("is_causal", False)),
            "dropout": float(ctx.arg(4, "dropout_p", 0.0) or 0.0) if fused else 0.0,
            "scale": ctx.kwargs.get("scale"),
            "enable_gqa": bool(ctx.kwargs.get("enable_gqa", False)),
            "head_dim": int(q.shape[-1]), "head_dim_v": int(v.shape[-1]),
            "q_len": int(q.shape[-2]), "kv_len": int(k.shape[-2]),
            "heads": int(q.shape[-3]) if len(q.shape) >= 3 else 1,
            "kv_heads": int(k.shape[-3]) if len(k.shape) >= 3 else 1, "dtype": q.dtype,
            "out_bshd": _fused_out_bshd(q), "out_stride": _fused_out_stride(q, int(v.shape[-1]))}


def _attention_heads_swap(g, name: str, dims=None) -> bool:
    """Whether node ``name`` is a transpose/permute (``dims``: its output's dims as dims of
    the input, :func:`_view_dims`) of an attention output that the fused kernel already laid
    out so: the view is contiguous in the output's layout (:func:`_fused_out_stride`), and
    the usual ``.contiguous()``/reshape after it copies nothing. Hugging Face swaps heads
    and sequence (``transpose(1, 2)``); ``F.multi_head_attention_forward`` (torchvision's
    ViT) permutes [B, H, L, D] to [L, B, H, D], free when its query came [L, B, H, D]."""
    a = g.nodes.get(name)
    if a is None or a["kind"] != "view" or ops.packet_name(a["op"]) not in ("transpose", "permute"):
        return False
    base = g.nodes.get(a["base"])
    if base is None or base["kind"] != "attention":
        return False
    sdpa = base.get("sdpa") or {}
    stride = sdpa.get("out_stride")
    shape = (base.get("shape") or ())[:4]
    if dims is None or stride is None or shape is None or len(shape) != len(stride):
        return sdpa.get("out_bshd", True)
    return _dense_rowmajor([shape[d] for d in dims], [stride[d] for d in dims])


def _view_dims(node) -> tuple | None:
    """The dims of a 4-D ``transpose``/``permute`` FX node's output, as dims of its input."""
    name = ops.packet_name(str(node.target))
    try:
        if name == "permute":
            return tuple(int(d) % 4 for d in node.args[1])
        if name == "transpose":
            d0, d1 = int(node.args[1]) % 4, int(node.args[2]) % 4
            dims = list(range(4))
            dims[d0], dims[d1] = d1, d0
            return tuple(dims)
    except (IndexError, TypeError, ValueError):
        return None
    return None


def _dense_rowmajor(shape, stride) -> bool:
    """Contiguous (size-1 dims' strides ignored): the dims view as one (:func:`_merge`) of
    unit stride."""
    merged = _merge(list(zip(shape, stride)))
    return merged is not None and merged[1] == 1


def _fused_out_bshd(q: ops.TensorMeta) -> bool:
    """Whether the fused attention output's heads swap ``transpose(1, 2)`` is contiguous
    (the output laid out [B, S, H, D]; :func:`_fused_out_stride`)."""
    st = _fused_out_stride(q)
    return st is None or _dense_rowmajor((q.shape[0], q.shape[2], q.shape[1], q.shape[3]),
                                         (st[0], st[2], st[1], st[3]))


def _fused_out_stride(q: ops.TensorMeta, dv: int | None = None) -> tuple | None:
    """The strides of the fused attention kernel's [B, H, S, Dv] output (``dv``: the value's
    head dim, default the query's; None: not a 4-D query). 16-bit SDPA runs cuDNN (Hopper) or flash
    (sm80-sm89), and both lay the output out as the query: cuDNN allocates it with
    ``alloc_with_matching_layout(q, o, ...)`` (aten/src/ATen/native/cudnn/MHA.cpp: the
    query's dims in the order of their strides, stable, densely), flash with
    ``empty_like(q)`` of the transposed query (transformers/cuda/flash_attn/flash_api.cpp
    ``mha_fwd``: a dense query keeps its strides, a strided one, a slice of a fused QKV
    projection, comes out [B, S, H, D]). fp32 runs the memory-efficient kernel, which
    always allocates ``at::empty({B, M, num_heads, Kv})`` (attention.cu
    ``_efficient_attention_forward``). So Llama's query, rotated in the projection's
    transposed layout, gives a [B, S, H, D] output, while Phi's, concatenated from its
    rotated and pass-through halves (``torch.cat``: a contiguous [B, H, S, D]), gives a
    [B, H, S, D] one that ``transpose(1, 2).contiguous()`` copies (H200 prefill records,
    validation/results/generate/h200-2026-11-28k-prefill.jsonl: one direct_copy kernel
    after every cuDNN attention kernel of Phi-1.5, none after Llama's or Qwen's)."""
    if len(q.shape) != 4 or len(q.stride) != 4 or 0 in q.shape:
        return None
    b, h, m, d = (int(x) for x in q.shape)
    d = int(dv) if dv else d
    shape = (b, h, m, d)
    if q.dtype == "float32":
        # memory-efficient: [B, M, H, K] always, so Hugging Face's transpose(1, 2) is free;
        # left None (no copy after any view), as torchvision's ViT runs the fast path
        # (_native_multi_head_attention: transpose(1, 2), free) where capture traces
        # F.multi_head_attention_forward's permute (H100 zoo fp32 ViT-B/16: no copy)
        return None
    far = 1 << 62
    order = sorted(range(4), key=lambda i: q.stride[i] if q.stride[i] else far)   # innermost first
    stride, cur = [0] * 4, 1
    for i in order:
        stride[i], cur = cur, cur * shape[i]
    return tuple(stride)


def _plain(t, out) -> bool:
    """An operand ATen can stream with vector loads: a 0-dim scalar, contiguous at the output's
    shape, or on CUDA traces (:mod:`gpusim.capture.amp`) dense with its strides (TensorIterator permutes
    cuDNN's channels-last outputs; meta traces keep the rule the zoo figures are scored with)."""
    if t.dim() == 0:
        return True
    try:
        from torch._prims_common import is_non_overlapping_and_dense_or_false as dense
        return tuple(t.shape) == tuple(out.shape) and (
            bool(t.is_contiguous() and out.is_contiguous()) or (out.device.type == "cuda" and
            tuple(t.stride()) == tuple(out.stride()) and dense(t)))
    except Exception:  # noqa: BLE001 - odd tensor subclasses: assume the slow path
        return False


def _permuted(t, out) -> bool:
    """An operand ATen reads across the output's layout: a dense tensor of the output's
    elements whose unit-stride dim is not the output's, so one side of every warp's
    accesses is uncoalesced (a ViT's transposed residual stream added to a contiguous
    branch; ``.contiguous()`` or a reshape of a transpose). Permutations that keep the
    innermost dim (heads and tokens swapped over a contiguous head dim) coalesce."""
    if t.dim() == 0 or t.numel() != out.numel() or t.numel() < 2:
        return False
    try:
        from torch._prims_common import is_non_overlapping_and_dense_or_false as dense
        if not dense(t):
            return False
        if tuple(t.shape) != tuple(out.shape):
            # a reshape that had to copy: the input read in its own order, written contiguous
            return out.is_contiguous() and _unit_dim(t) != t.dim() - 1
        return _unit_dim(t) != _unit_dim(out)
    except Exception:  # noqa: BLE001 - odd tensor subclasses: not known to permute
        return False


def _strided_fold(t) -> bool:
    """A strided (not contiguous) input of 3 or more dims whose leading dims fold into one as a
    view: ``at::matmul``'s ``t1.reshape({folded, k})`` then copies nothing and cuBLAS reads the
    rows at their stride (a last-token slice ``hidden[:, -1:, :]`` of a batch). Strides, sizes
    of 1 aside, must nest (:func:`_merge`): each leading dim's stride is the next one's times its size."""
    try:
        if t.dim() < 3 or t.is_contiguous():
            return False
        dims = [(int(s), int(st)) for s, st in zip(t.shape[:-1], t.stride()[:-1])]
    except Exception:  # noqa: BLE001 - odd tensor subclasses: not known to fold
        return False
    return _merge(dims) is not None


def _unit_dim(t) -> int | None:
    """The dim of size > 1 whose stride is 1 (None: none)."""
    return next((d for d in range(t.dim()) if t.shape[d] > 1 and t.stride(d) == 1), None)


def _cat_copies(in_tensors, out) -> list:
    """ATen's ``cat`` runs one batched kernel over contiguous inputs of the output's dtype;
    otherwise it copies each input into its slice of the output (``cat_out_cuda``: a strided
    ``copy_`` per input; RoPE's ``stack`` of two strided halves, a class token concatenated
    to the rotated tokens): the bytes each such copy reads and writes, or [] for the one
    kernel."""
    if all(t.is_contiguous() and t.dtype == out.dtype for t in in_tensors):
        return []
    return [float(t.numel() * (t.element_size() + out.element_size())) for t in in_tensors
            if t.numel()]


def _einsum_copies(eq: str, in_tensors) -> list:
    """The operand copies ATen's two-operand einsum makes before its bmm: the bytes each
    such copy reads and writes, or [] when both operands go to cuBLAS as views.

    ``sumproduct_pair`` (aten/src/ATen/native/Linear.cpp) permutes the left operand to
    (batch, own, contracted) and the right to (batch, contracted, own) indices, in einsum's
    label order (the output's, then the contracted ones), and ``reshape``s each to 3 dims: a
    copy when the permuted strides do not merge. ``bmm`` then copies a 3-dim operand with
    neither of its matrix dims unit-stride (``prepare_batch_matrix_for_cublas``). A head
    split of a fused qkv projection (tv:maxvit_t's window attention) copies q and k, and v."""
    if len(in_tensors) != 2 or not isinstance(eq, str):
        return []
    terms, out = einsum_terms(eq, in_tensors)
    left, right = terms
    lone = [c for c in left if c not in right] + [c for c in right if c not in left]
    if len(set(left)) != len(left) or len(set(right)) != len(right) or \
            any(c not in out for c in lone):
        return []           # diagonals and pre-summed indices: other paths, left as they were
    order = list(out) + [c for c in left if c not in out]
    batch = [c for c in order if c in left and c in right and c in out]
    summed = [c for c in order if c in left and c in right and c not in out]
    copies = []
    for term, t, own_first in ((left, in_tensors[0], True), (right, in_tensors[1], False)):
        own = [c for c in order if c in term and c in out and c not in batch]
        groups = [batch, own, summed] if own_first else [batch, summed, own]
        dims = {c: (int(n), int(st)) for c, n, st in zip(term, t.shape, t.stride())}
        merged = [_merge([dims[c] for c in gr]) for gr in groups]
        if any(m is None for m in merged):
            copies.append(float(2 * t.numel() * t.element_size()))     # reshape copies
            continue
        (_, _), (r, s1), (c, s2) = merged
        if not ((s2 == 1 or c == 1) and s1 >= max(1, c) or (s1 == 1 or r == 1) and s2 >= max(1, r)):
            copies.append(float(2 * t.numel() * t.element_size()))     # bmm copies
    return copies


def _merge(dims: list) -> tuple | None:
    """``(size, stride)`` of dims ``[(size, stride), ...]`` viewed as one (a reshape's
    view), or None when their strides do not nest (the reshape must copy). Size-1 dims
    are ignored; no dims at all is ``(1, 1)``."""
    dims = [d for d in dims if d[0] != 1]
    for (n0, s0), (n1, s1) in zip(dims, dims[1:]):
        if s0 != s1 * n1:
            return None
    return (ops.numel(n for n, _ in dims), dims[-1][1]) if dims else (1, 1)


def _casts(in_tensors, out) -> bool:
    """Whether ATen's elementwise kernel casts on the fly (TensorIterator's dynamic
    casting): a tensor operand of another dtype than the output (an fp16 branch added to
    an fp32 residual under autocast); 0-dim operands are scalars and a ``where``'s boolean
    condition is read as it is, not cast (broad records: ``where`` runs the no-cast kernel)."""
    return any(t.dim() > 0 and t.dtype != out.dtype and t.dtype != torch.bool for t in in_tensors)


def _add_view(g, name, opname, val, src, base):
    shape = tuple(int(s) for s in val.shape) if isinstance(val, torch.Tensor) else None
    dtype = _dtype_name(val.dtype) if isinstance(val, torch.Tensor) else g.nodes[src]["dtype"]
    g.add_node(name, op=opname, kind="view", shape=shape, dtype=dtype, flops=0,
               bytes_read=0, bytes_written=0, inputs=[src], base=base, is_output=False,
               unmodelled=False, reads={})
    g.add_edge(src, name, bytes=0)


def _add_input_like(g, name, opname, val):
    """A free op with no tensor input (``empty``): a fresh buffer, no kernel."""
    g.add_node(name, op=opname, kind="input", shape=tuple(int(s) for s in val.shape),
               dtype=_dtype_name(val.dtype), flops=0, bytes_read=0, bytes_written=0,
               inputs=[], base=name, is_output=False, unmodelled=False, reads={},
               label=f"alloc:{opname}")


def _flatten_nodes(x, out=None):
    out = [] if out is None else out
    if isinstance(x, torch.fx.Node):
        out.append(x)
    elif isinstance(x, (list, tuple)):
        for y in x:
            _flatten_nodes(y, out)
    elif isinstance(x, dict):
        for y in x.values():
            _flatten_nodes(y, out)
    return out
