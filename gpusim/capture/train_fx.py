"""Tracing a training step as CUDA runs it, FX passes over the trace, and the graph nodes
of multi-tensor ops.

:class:`TrainDispatch` makes composite ops take their CUDA path on the traced ``meta``
device; :func:`drop_host_ops` removes the host's own work (a non-capturable optimizer's step
counters), :func:`split_conv_backward` gives each gradient of a convolution its own node (one
cuDNN kernel each), and :func:`add_foreach` turns a ``_foreach_*``/``_fused_*`` op into one
OpGraph node over its tensor lists (called by :func:`gpusim.capture.tracing.fx_to_opgraph`).
"""

from __future__ import annotations

import operator

import torch

from gpusim.graph.ops import packet_name
from gpusim.graph.train_ops import foreach_flops

from gpusim.capture.fakes import _flatten_tensors
from gpusim.capture.fxnodes import _dtype_name, _meta, _storage_key


# ------------------------------------------------------------------ CUDA's kernels off the GPU


class TrainDispatch:
    """Context for tracing a step: the composite ops whose CUDA path differs from the one a
    ``meta`` trace takes run as on CUDA. ``F.dropout`` in training is ``native_dropout`` (one
    fused kernel, ``is_fused_kernel_acceptable`` in Dropout.cpp; off CUDA it decomposes to
    ``bernoulli_``, ``div_``, ``mul``); ``scaled_dot_product_attention`` that a fused
    backend accepts (:func:`gpusim.capture.sdpa.fused_backend_possible`) is the memory-efficient
    kernel (fp32, or a mask) or flash (16-bit, no mask), whose autograd formulas give their
    fused backward ops. Grouped-query heads (``enable_gqa``) take flash (or cuDNN, which
    dispatch prices) in 16-bit without a mask: the one fused backend that accepts them
    (``check_batch_size_and_num_heads_dense<true>`` in sdp_utils.cpp; an H200 bf16 Llama
    step, torch 2.11: cuDNN's fprop/bprop and ``fmha_reduce_head``). Other grouped-query
    inputs and inputs no fused backend takes run the math fallback
    (:class:`gpusim.capture.sdpa.MathAttention`), differentiated op by op."""

    def __init__(self):
        from gpusim.capture.sdpa import MathAttention, _SDPA, _additive, _arg, fused_backend_possible

        class Mode(MathAttention):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                if func is torch.nn.functional.dropout:
                    p = _arg(args, kwargs, 1, "p", 0.5)
                    if _arg(args, kwargs, 2, "training", True) and p > 0 and \
                            not _arg(args, kwargs, 3, "inplace", False):
                        return torch.native_dropout(args[0], p, True)[0]
                if func in _SDPA:
                    q, k, v = args[0], args[1], args[2]
                    mask = _arg(args, kwargs, 3, "attn_mask")
                    gqa = k.dim() >= 3 and k.size(-3) != q.size(-3)
                    if fused_backend_possible(q, k, v, mask) and (
                            not gqa or (q.dtype != torch.float32 and mask is None)):
                        dropout = _arg(args, kwargs, 4, "dropout_p", 0.0)
                        causal = _arg(args, kwargs, 5, "is_causal", False)
                        scale = _arg(args, kwargs, 6, "scale")
                        if q.dtype != torch.float32 and mask is None:
                            return torch.ops.aten._scaled_dot_product_flash_attention(
                                q, k, v, dropout_p=dropout, is_causal=causal, scale=scale)[0]
                        if mask is not None and mask.dtype == torch.bool:
                            mask = _additive(mask, q.dtype)
                        if mask is not None:
                            mask = mask.expand(q.size(0), q.size(1), q.size(2), k.size(2))
                        return torch.ops.aten._scaled_dot_product_efficient_attention(
                            q, k, v, attn_bias=mask, compute_log_sumexp=q.requires_grad,
                            dropout_p=dropout, is_causal=causal, scale=scale)[0]
                return super().__torch_function__(func, types, args, kwargs)
        self.mode = Mode()

    def __enter__(self):
        return self.mode.__enter__()

    def __exit__(self, *exc):
        return self.mode.__exit__(*exc)


# ------------------------------------------------------------------ FX passes


def _vals(x):
    out = []
    for v in (x if isinstance(x, (list, tuple)) else [x]):
        if isinstance(v, torch.Tensor):
            out.append(v)
        elif isinstance(v, (list, tuple)):
            out += _vals(v)
    return out


def _tensors_of(gm, node) -> list:
    ts = []
    for a in _flat_args((node.args, node.kwargs)):
        if a.op == "get_attr":
            t = getattr(gm, a.target, None)
            ts += [t] if isinstance(t, torch.Tensor) else []
        else:
            ts += _vals(a.meta.get("val"))
    return ts + _vals(node.meta.get("val"))


def _flat_args(x, out=None):
    out = [] if out is None else out
    if isinstance(x, torch.fx.Node):
        out.append(x)
    elif isinstance(x, (list, tuple)):
        for y in x:
            _flat_args(y, out)
    elif isinstance(x, dict):
        for y in x.values():
            _flat_args(y, out)
    return out


def drop_host_ops(gm) -> int:
    """Erase ops whose every tensor is a host (CPU) tensor and whose results no device op
    uses: the optimizer's step counters (``_foreach_add_(state_steps, 1)``) and the bias
    corrections computed from them run on the host (the traced device is ``meta``).
    Returns how many were erased."""
    erased = 0
    for node in reversed(list(gm.graph.nodes)):
        if node.op != "call_function" or node.users:
            continue
        ts = _tensors_of(gm, node)
        if ts and all(t.device.type == "cpu" for t in ts):
            gm.graph.erase_node(node)
            erased += 1
    for node in list(gm.graph.nodes):       # host constants nothing reads any more
        if node.op == "get_attr" and not node.users:
            gm.graph.erase_node(node)
    return erased


def cuda_batch_norm(gm) -> None:
    """A training-mode ``native_batch_norm`` is ``cudnn_batch_norm`` on CUDA (its training
    kernel computes the batch statistics: not the eval kernel class ``bn_eval``); the
    arguments and the first three outputs are the same."""
    aten = torch.ops.aten
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target is aten.native_batch_norm.default \
                and len(node.args) > 5 and node.args[5]:
            node.target = aten.cudnn_batch_norm.default


def split_conv_backward(gm) -> None:
    """One ``convolution_backward`` that computes grad_input, grad_weight and grad_bias
    becomes one call per gradient, as cuDNN runs them: backward-data and backward-filter
    kernels (the same op with a one-hot ``output_mask``) and the bias gradient as the
    ``sum`` over batch and space that ATen computes it with (Convolution.cpp)."""
    aten = torch.ops.aten
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target is not aten.convolution_backward.default:
            continue
        args = list(node.args)
        mask = list(args[10])
        users = {u.args[1]: u for u in node.users if u.target is operator.getitem}
        val = node.meta.get("val")
        with gm.graph.inserting_after(node):
            for i in (2, 1, 0):
                if not mask[i] or i not in users:
                    continue
                if i == 2:
                    go = args[0]
                    dims = [0] + list(range(2, len(go.meta["val"].shape)))
                    new = gm.graph.call_function(aten.sum.dim_IntList, (go, dims))
                    new.meta.update(val=val[2], phase=node.meta.get("phase"), region=node.meta.get("region"))
                    users[i].replace_all_uses_with(new)
                else:
                    one = [j == i for j in range(3)]
                    new = gm.graph.call_function(aten.convolution_backward.default,
                                                 tuple(args[:10]) + (one,))
                    new.meta.update(val=tuple(v if j == i else None for j, v in enumerate(val)),
                                    phase=node.meta.get("phase"), region=node.meta.get("region"))
                    users[i].args = (new, i)
        for u in list(node.users):
            if not u.users:
                gm.graph.erase_node(u)
        if not node.users:
            gm.graph.erase_node(node)
    gm.graph.lint()


# ------------------------------------------------------------------ multi-tensor ops

#: the tensor lists a fused optimizer writes in place (params, exp_avg, exp_avg_sq, max_exp_avg_sq;
#: SGD's momentum buffers), by position; grads (1) and state_steps are read
_FUSED_WRITES = {"_fused_adam_": (0, 2, 3, 4), "_fused_adamw_": (0, 2, 3, 4), "_fused_sgd_": (0, 2),
                 "_fused_adagrad_": (0, 2)}


def add_foreach(g, n, opname, vals, inplace_writer):
    """A ``_foreach_*`` or ``_fused_*`` optimizer op: one node over its tensor lists, with
    ``foreach`` = the first list's element counts and the launch ``depth`` (its tensor lists,
    the output list of an out-of-place op included; a fused optimizer's ``state_steps`` are
    read through a side table, not a list), which :func:`gpusim.graph.train_ops.mta_launches`
    turns into launches. An in-place op writes its first list's storages (and a fused
    optimizer its state lists): later readers see this node."""
    pname = packet_name(opname)
    args = list(n.args) + list(n.kwargs.values())
    lists = [a for a in args if isinstance(a, (list, tuple)) and a
             and all(isinstance(x, torch.fx.Node) and isinstance(vals.get(x.name), torch.Tensor)
                     for x in a)]
    if not lists or lists[0][0].name not in g:
        return
    fused = pname.startswith("_fused_")
    width = len(lists[0])
    tensor_lists = [lst for lst in lists if len(lst) == width]
    steps = [lst for lst in tensor_lists[1:] if all(vals[x.name].dim() == 0 for x in lst)] if fused else []
    tensor_lists = [lst for lst in tensor_lists if not any(lst is s for s in steps)]
    inplace = pname.endswith("_")
    outs = _flatten_tensors(n.meta.get("val"), [])
    writes = [i for i in _FUSED_WRITES.get(pname, (0,)) if i < len(tensor_lists)] if inplace else []
    depth = len(tensor_lists) + (0 if inplace else 1)
    reads: dict = {}
    for lst in lists:
        for x in lst:
            t = vals[x.name]
            base = inplace_writer.get(_storage_key(t)) or g.nodes[x.name]["base"]
            reads[base] = reads.get(base, 0) + _meta(t).ubytes
    written = (sum(_meta(vals[x.name]).nbytes for i in writes for x in tensor_lists[i]) if inplace
               else sum(_meta(t).nbytes for t in outs))
    numels = [int(vals[x.name].numel()) for x in lists[0]]
    first = vals[lists[0][0].name]
    shape = tuple(int(s) for s in first.shape) if inplace else tuple(tuple(int(s) for s in t.shape) for t in outs)
    in_nodes = [x.name for lst in lists for x in lst]
    g.add_node(n.name, op=opname, kind="pointwise", shape=shape, dtype=_dtype_name(first.dtype),
               flops=foreach_flops(pname, sum(numels)), bytes_read=float(sum(reads.values())),
               bytes_written=float(written), inputs=in_nodes, base=n.name, is_output=False,
               unmodelled=False, reads=reads, gemm=None, contiguous=True,
               foreach={"numels": numels, "depth": depth, "fused": fused,
                        "scalarlist": "ScalarList" in opname})
    for x in set(in_nodes):
        g.add_edge(x, n.name, bytes=_meta(vals[x]).ubytes)
    for p, b in reads.items():
        if not g.has_edge(p, n.name):
            g.add_edge(p, n.name, bytes=b)
    for i in writes:
        for x in tensor_lists[i]:
            inplace_writer[_storage_key(vals[x.name])] = n.name
