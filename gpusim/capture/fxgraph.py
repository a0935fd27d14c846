"""FX to OpGraph: each aten node of a traced ``GraphModule`` becomes an operator with its kind,
FLOPs and bytes (the op registry, :mod:`gpusim.graph.ops`); views share storage, host reads become
sync nodes and the optimizers' multi-tensor ops their own nodes (:func:`gpusim.capture.train_fx.add_foreach`)."""

from __future__ import annotations

import operator

import networkx as nx
import torch

from gpusim.graph import ops
from gpusim.graph.opgraph import OpGraph
from gpusim.capture.fakes import _flatten_tensors, plain
from gpusim.graph.ops import SYNC_OPS   # host reads: capture records them as sync nodes
from gpusim.capture.fxnodes import (_H2D_CONVERSIONS, _add_h2d, _add_input_like, _add_sync, _add_view,  # noqa: F401
                      _attention_heads_swap, _view_dims, _conv_layout, _dtype_name, _flatten_nodes, _meta,
                      _casts, _cat_copies, _einsum_copies, _permuted, _plain, _sdpa_facts, _storage_key,
                      _strided_fold, LayoutMemo, MetaMemo)
from gpusim.graph.ops import WINDOW_POOLS


def _to_meta_arg(a, vals, meta=_meta):
    """Replace FX nodes in args by TensorMeta (tensors) or their python values."""
    if isinstance(a, torch.fx.Node):
        v = vals.get(a.name)
        return meta(v) if isinstance(v, torch.Tensor) else v
    if isinstance(a, (list, tuple)):
        return type(a)(_to_meta_arg(x, vals, meta) for x in a)
    return a


#: Ops returning no tensor that launch no kernel (asserts, profiler marks, shape guards)
_NO_KERNEL = ("_assert_async", "_assert_scalar", "_assert_tensor_metadata", "record_stream",
              "sym_constrain_range", "sym_constrain_range_for_size", "_record_function_enter",
              "_record_function_enter_new", "_record_function_exit")

#: Ops that allocate an uninitialised buffer: no kernel, no bytes, and not a view of
#: their tensor argument (which gives only dtype and device).
_ALLOCATIONS = ("empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided")

def _mark_tied(flat: list, pnames: list[str], graph: OpGraph) -> None:
    """Parameters bound under several names (tied weights: a language model's output
    projection sharing its input embedding, BART's shared embedding) are one tensor:
    every input after the first gets ``tied_to`` = the first one's node, so memory counts
    the storage once. ``flat`` starts with the tensors named by ``pnames``."""
    first: dict[int, str] = {}
    for label, t in zip(pnames, flat):
        name = label[2:]
        if name not in graph.g:
            continue
        if id(t) in first:
            graph.g.nodes[name]["tied_to"] = first[id(t)]
        else:
            first[id(t)] = name


def fx_to_opgraph(gm, name: str = "graph", param_names: list[str] | None = None) -> OpGraph:
    """Convert a traced GraphModule (nodes carry ``meta['val']``) to an OpGraph."""
    g = nx.DiGraph()
    vals: dict = {}
    meta = MetaMemo()          # each value's TensorMeta once (vals keeps the tensors alive)
    layout = LayoutMemo()      # _plain/_permuted once per shapes and strides
    inplace_writer: dict = {}  # storage key -> last in-place op that wrote it
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    dropped: list[str] = []    # ops that became no node but may run a kernel
    labels = {}
    n_params = len(param_names or [])
    for i, n in enumerate(placeholders):
        labels[n.name] = (param_names[i][2:] if i < n_params else f"in{i - n_params}")

    for n in gm.graph.nodes:
        val = n.meta.get("val")
        if n.op == "output":
            outs = _flatten_nodes(n.args[0])
            for o in outs:
                if o.name in g:
                    g.nodes[g.nodes[o.name]["base"]]["is_output"] = True
                    # which tensor leaves: a view's base may be a multi-output op whose
                    # other outputs die (gpusim.sim.buffers.split_outputs)
                    g.nodes[o.name]["returned"] = True
            continue
        vals[n.name] = val
        if n.op == "placeholder":
            if not isinstance(val, torch.Tensor):
                continue
            g.add_node(n.name, op="input", kind="input", shape=tuple(val.shape),
                       dtype=_dtype_name(val.dtype), flops=0, bytes_read=0,
                       bytes_written=0, inputs=[], base=n.name, is_output=False,
                       unmodelled=False, reads={}, label=labels.get(n.name))
            if not _contiguous(val):
                # a strided argument (a sliding-window cache's keys: a slice of the last step's cat), which an
                # eager op reads on ATen's strided paths (gpusim.cost.roofline.cat_path)
                g.nodes[n.name]["strided_input"] = True
            continue
        if n.op == "get_attr":
            t = getattr(gm, n.target, None)
            if isinstance(t, torch.Tensor):
                g.add_node(n.name, op="input", kind="input", shape=tuple(t.shape),
                           dtype=_dtype_name(t.dtype), flops=0, bytes_read=0,
                           bytes_written=0, inputs=[], base=n.name, is_output=False,
                           unmodelled=False, reads={}, label=f"const:{n.target}")
                vals[n.name] = t
                if t.device.type != "cpu":
                    _add_h2d(g, n.name, t)
            continue
        if n.op != "call_function":
            continue
        in_nodes = [a for a in _flatten_nodes((n.args, n.kwargs)) if a.name in g]
        if n.target is operator.getitem:
            src = n.args[0]
            if src.name not in g:
                continue
            _add_view(g, n.name, "getitem", val, src.name, g.nodes[src.name]["base"])
            continue
        if not hasattr(n.target, "_schema") and not hasattr(n.target, "overloadpacket"):
            if isinstance(n.target, torch._ops.HigherOrderOperator):
                dropped.append(f"higher_order.{n.target.name()}")   # a subgraph: not priced
            # python-level helpers (e.g. sym size ops) carry no kernel
            if isinstance(val, torch.Tensor) and in_nodes:
                _add_view(g, n.name, str(n.target), val, in_nodes[0].name,
                          g.nodes[in_nodes[0].name]["base"])
            continue
        opname = str(n.target)
        outs = _flatten_tensors(val, [])
        if ops.packet_name(opname) in SYNC_OPS and in_nodes:
            _add_sync(g, n.name, opname, in_nodes[0], vals, inplace_writer)
            continue
        if ops.packet_name(opname).startswith(("_foreach_", "_fused_", "_amp_foreach_")):
            from gpusim.capture.train_fx import add_foreach   # the optimizers' multi-tensor ops
            add_foreach(g, n, opname, vals, inplace_writer)
            continue
        if not outs:    # an op returning no tensor (``_foreach_add_``): not priced, said so
            if ops.packet_name(opname) not in _NO_KERNEL and in_nodes:
                dropped.append(opname)
            continue
        in_tensors = [vals[a.name] for a in in_nodes if isinstance(vals.get(a.name), torch.Tensor)]
        tensor_nodes = [a for a in in_nodes if isinstance(vals.get(a.name), torch.Tensor)]
        ctx = ops.OpCtx(opname, [meta(t) for t in in_tensors], [meta(t) for t in outs],
                        _to_meta_arg(tuple(n.args), vals, meta),
                        {k: _to_meta_arg(v, vals, meta) for k, v in n.kwargs.items()})
        est = ops.estimate(ctx)
        pname = ops.packet_name(opname)
        inplace = pname.endswith("_") and (not pname.startswith("_")
                                           or pname == "_amp_update_scale_")
        # Aliasing decides views generically: an op whose output shares an input's
        # storage moved no bytes (unless it is an in-place compute op).
        alias_of = None
        out_key = _storage_key(outs[0])
        for a, t in zip(tensor_nodes, in_tensors):
            if _storage_key(t) == out_key and out_key is not None:
                alias_of = a
                break
        if alias_of is not None and not inplace and est["kind"] not in ("view",) \
                and len(outs) == 1:
            est = dict(est, kind="view", unmodelled=False)
        if pname in ("dropout", "feature_dropout", "alpha_dropout") and \
                not ctx.arg(2, "train", False) and tensor_nodes:
            alias_of = tensor_nodes[0]      # eval-mode dropout returns its input
        alloc = pname in _ALLOCATIONS
        if est["kind"] == "view" and alias_of is None and tensor_nodes and not alloc \
                and _attention_heads_swap(g, tensor_nodes[0].name, _view_dims(tensor_nodes[0])):
            # fused attention kernels (flash, memory-efficient, cuDNN) write their output
            # as [batch, seq, heads, dim]: the usual transpose(1, 2).contiguous()/reshape
            # after them is already contiguous (profiles: no copy kernel after attention)
            alias_of = tensor_nodes[0]
        if est["kind"] == "view" and alias_of is None and tensor_nodes and not alloc:
            # a "view" op that had to materialise (reshape of a strided tensor,
            # .contiguous() of a transpose, .to() a new dtype): a paid copy
            rd, wr = ops.default_bytes(ctx)
            est = dict(est, kind="copy", bytes_read=rd, bytes_written=wr)
        if est["kind"] == "view":
            src = alias_of or (tensor_nodes[0] if tensor_nodes and not alloc else None)
            if src is None:     # a fresh buffer (x.new_empty(...)), not a view of x
                _add_input_like(g, n.name, opname, val)
            else:
                _add_view(g, n.name, opname, outs[0], src.name, g.nodes[src.name]["base"])
            continue
        reads: dict = {}
        for a, t in zip(tensor_nodes, in_tensors):
            if pname in ops.LIKE_FACTORIES and a is tensor_nodes[0]:
                continue    # new_zeros/ones_like take only dtype and device from it
            if pname == "index_copy_" and a is tensor_nodes[0]:
                continue    # a static KV cache's update writes rows of it, reads none
            # a tensor mutated in place earlier is read from the op that mutated it
            base = inplace_writer.get(_storage_key(t)) or g.nodes[a.name]["base"]
            b = meta(t).ubytes
            reads[base] = max(reads.get(base, 0), b)
        if est["kind"] in ("copy",) and pname in ("embedding", "index_select", "gather",
                                                   "index", "take"):
            # a gather reads the fetched rows of its table, not the whole table
            for a, t in zip(tensor_nodes, in_tensors):
                if _dtype_name(t.dtype) not in ("int64", "int32"):
                    base = inplace_writer.get(_storage_key(t)) or g.nodes[a.name]["base"]
                    reads[base] = min(reads[base], sum(int(o.numel()) * o.element_size() for o in outs))
        shape = tuple(outs[0].shape) if len(outs) == 1 else tuple(tuple(o.shape) for o in outs)
        # ATen's elementwise kernels take their vectorised path only when every operand
        # is contiguous at the output's shape (0-dim scalars aside); a broadcast or strided
        # operand drops them to a per-element path that moves bytes far slower (measured:
        # calibrate's broadcast-add benchmark). Fused (generated) kernels do not care.
        contiguous = all(layout(_plain, t, outs[0]) for t in in_tensors) and \
            all(layout(_plain, o, outs[0]) for o in outs)
        g.add_node(n.name, op=opname, kind=est["kind"], shape=tuple(int(s) for s in outs[0].shape)
                   if len(outs) == 1 else shape, dtype=_dtype_name(outs[0].dtype),
                   flops=est["flops"], bytes_read=float(sum(reads.values())),
                   bytes_written=est["bytes_written"], inputs=[a.name for a in in_nodes],
                   base=n.name, is_output=False, unmodelled=est["unmodelled"], reads=reads,
                   gemm=est["gemm"], contiguous=contiguous)
        if pname in ("cat", "stack") and in_tensors and in_tensors[0].device.type == "cuda":
            g.nodes[n.name]["cat_copies"] = _cat_copies(in_tensors, outs[0])
        if pname == "einsum" and est["kind"] == "matmul":
            g.nodes[n.name]["einsum_copies"] = _einsum_copies(ctx.args[0], in_tensors)
        if est["kind"] in ("pointwise", "copy") and len(outs) == 1:
            # which of ATen's elementwise paths runs (gpusim.cost.roofline.aten_fraction)
            g.nodes[n.name]["casts"] = _casts(in_tensors, outs[0])
            g.nodes[n.name]["permuted"] = any(layout(_permuted, t, outs[0]) for t in in_tensors)
        if pname in ("cat", "stack") and in_tensors and not all(_contiguous(t) for t in in_tensors):
            # ATen's vectorised CatArrayBatchedCopy needs every input contiguous (GPT-2's new key, a slice of
            # the fused qkv projection at batch > 1, is not): gpusim.cost.roofline.cat_path
            g.nodes[n.name]["strided_inputs"] = True
        if pname == "linear" and in_tensors and _strided_fold(in_tensors[0]):
            g.nodes[n.name]["fold_view"] = True     # (gpusim.lower.dispatch.folded_linear)
        if est["kind"] == "reduction" and in_tensors and all(type(x) is int for x in in_tensors[0].stride()):
            # the reduced input's layout: ATen's reduce_kernel sizes its grid from it (gpusim.cost.aten_reduce)
            g.nodes[n.name]["in_strides"] = tuple(in_tensors[0].stride())
        if est["kind"] in ("norm", "matmul") and in_tensors and in_tensors[0].device.type == "cuda":
            # CUDA traces only, as _plain: meta traces keep NCHW where cuDNN returns NHWC
            g.nodes[n.name]["input_contiguous"] = bool(in_tensors[0].is_contiguous())
        if est["kind"] == "conv" or (pname in WINDOW_POOLS and in_tensors):
            # (a pooling op's input layout picks ATen's NCHW or NHWC kernel)
            # convolution_backward(grad_out, input, weight): cuDNN's layout is the forward's,
            # suggested by input and weight (determine_backend_memory_format), not grad_out
            g.nodes[n.name]["layout"] = _conv_layout(
                in_tensors[:1] if pname in WINDOW_POOLS
                else in_tensors[1:3] if pname == "convolution_backward" else in_tensors)
        elif est["kind"] == "attention":
            g.nodes[n.name]["sdpa"] = _sdpa_facts(ctx)
        for a, t in zip(tensor_nodes, in_tensors):
            g.add_edge(a.name, n.name, bytes=meta(t).ubytes)
        for p in reads:
            if not g.has_edge(p, n.name):
                g.add_edge(p, n.name, bytes=reads[p])
        if inplace and alias_of is not None:
            # later readers of the mutated storage see this op's result
            inplace_writer[out_key] = n.name
        if (pname in _H2D_CONVERSIONS and in_tensors and in_tensors[0].device.type == "cpu"
                and outs[0].device.type != "cpu"):
            _add_h2d(g, n.name, outs[0])     # a host tensor moved to the device (type_as)
    mapping = {old: lab for old, lab in labels.items() if old in g and lab not in g}
    g = nx.relabel_nodes(g, mapping, copy=True)
    for old, new in mapping.items():
        g.nodes[new]["fx_name"] = old
    for n in g.nodes:
        a = g.nodes[n]
        a["base"] = mapping.get(a["base"], a["base"])
        a["inputs"] = [mapping.get(i, i) for i in a["inputs"]]
        a["reads"] = {mapping.get(k, k): v for k, v in a["reads"].items()}
        if a.get("sync"):
            a["sync"]["reads"] = mapping.get(a["sync"]["reads"], a["sync"]["reads"])
    # host syncs (``.item()``, ``bool(t)``), in program order: ``syncs`` names the aten op
    # whose value the host reads, ``sync_nodes`` the graph nodes that read it
    sync_nodes = [n for n in g.nodes if g.nodes[n].get("sync")]
    for _, a in g.nodes(data=True):         # plain numbers, not a compiled trace's SymInts
        a.update(plain(dict(a)))
    for _, _, e in g.edges(data=True):
        e.update(plain(dict(e)))
    return OpGraph(g, name, meta={"syncs": [g.nodes[n]["sync"]["reads_op"] for n in sync_nodes],
                                  "sync_nodes": sync_nodes, "unpriced_ops": dropped})


def _contiguous(t) -> bool:
    """Whether a traced argument is contiguous (an odd tensor subclass counts as contiguous)."""
    try:
        return bool(t.is_contiguous())
    except Exception:  # noqa: BLE001 - subclasses without strides
        return True

