"""Capture: a PyTorch callable or ``nn.Module`` becomes an :class:`OpGraph`.

Tracing uses ``make_fx`` in pre-dispatch mode on fake tensors: nothing is allocated
(example args may live on the ``meta`` device, so a 7B model costs no memory), and the
graph keeps the ops eager PyTorch dispatches to kernels (``linear``, ``layer_norm``,
``scaled_dot_product_attention``) rather than their CPU decompositions. Module
parameters and buffers become graph inputs, so the captured FX graph is a pure function
that can also be run for real (the validation harness does that).

Host reads of device values (``if mask.all():``, ``.item()``) are answered as eager
typically takes them and recorded as ``sync`` nodes (``graph.meta["syncs"]``), so models
whose Python checks tensor values still capture, along eager's code path (see
:class:`gpusim.capture.pycalls.HostReads`). Conv nodes carry ``layout`` (``"nhwc"``/``"nchw"``), attention nodes
``sdpa`` (mask, causal, dropout, head dims): what eager's kernel choice depends on.
"""

from __future__ import annotations

import time

import torch

from gpusim.graph.opgraph import OpGraph
from gpusim.capture.lifetimes import PythonLifetimes, python_frees
from gpusim.capture.scopes import tag_opgraph
from gpusim.capture.pycalls import Compiling, HostReads, TorchCalls
from gpusim.capture.fakes import (CaptureError, Captured, _explain_trace_failure, _flatten_tensors,  # noqa: F401
                                  _quiet_fake_tensor_logger)
from gpusim.capture.fxgraph import _mark_tied, fx_to_opgraph  # noqa: F401


def _wrap(fn_or_module, args):
    """A pure function of (params, buffers, *args) and the flat list of its inputs.
    Arguments make_fx cannot take apart (a Hugging Face cache) go in as their tensors,
    and the model's outputs come back as pytrees (:mod:`gpusim.capture.pytrees`)."""
    from torch.utils import _pytree as pytree
    from gpusim.capture.pytrees import plain_outputs, released, split_inputs
    args, rebuild = split_inputs(args)
    pure, full_args, names = _wrap_plain(fn_or_module, args, rebuild)

    def traced(*a):
        out = plain_outputs(pure(*a))
        if rebuild is not None:     # placeholders of the inputs an argument object let go
            gone = {id(t) for t in released(rebuild)}
            traced.released = [k for k, x in enumerate(pytree.tree_leaves(a)) if id(x) in gone]
        return out
    traced.released = []
    return traced, full_args, names


def _wrap_plain(fn_or_module, args, rebuild=None):
    rebuild = rebuild or (lambda *a: a)
    if isinstance(fn_or_module, torch.nn.Module):
        module = fn_or_module
        params = dict(module.named_parameters(remove_duplicate=False))
        buffers = dict(module.named_buffers(remove_duplicate=False))

        def pure(p, b, *a):
            return torch.func.functional_call(module, (p, b), rebuild(*a), tie_weights=True)
        names = ([f"p:{k}" for k in params] + [f"b:{k}" for k in buffers])
        return pure, (params, buffers, *args), names
    if not callable(fn_or_module):
        raise CaptureError(f"cannot capture a {type(fn_or_module).__name__}: pass a function "
                           "or an nn.Module")
    from gpusim.capture.closures import closure_wrap
    wrapped = closure_wrap(fn_or_module, args, rebuild)   # modules it reaches are weights, not constants
    if wrapped is not None:
        return wrapped
    fn = fn_or_module

    def call(*a):   # make_fx binds every parameter; hide defaults such as inplace=False
        return fn(*rebuild(*a))
    return call, tuple(args), []


def trace_fx(fn_or_module, args=(), tracing_mode: str = "fake", compiling: bool = False,
             amp=None):
    """Trace to an FX GraphModule of aten ops (pre-dispatch). Returns (gm, flat_inputs, names).
    ``compiling``: trace the code path ``torch.compile`` takes (:class:`Compiling`).
    ``amp`` (``"bf16"``/``"fp16"``): run the forward under ``torch.autocast("cuda")``.
    Autocast regions (``amp`` or the model's own) trace as on a GPU (:mod:`gpusim.capture.amp`)."""
    from gpusim.capture import amp as amp_mod

    if not isinstance(args, (tuple, list)):
        args = (args,)
    fn, full_args, pnames = _wrap(fn_or_module, args)
    wrapped = fn
    if amp is not None:
        fn = amp_mod.under_autocast(fn, amp)
        full_args = amp_mod.to_fake_cuda(full_args)
    gm, flat = _trace(fn, full_args, tracing_mode, compiling, fn_or_module)
    if amp is None and amp_mod.uses_cuda_autocast(gm):
        # the model enters torch.autocast("cuda") itself: trace again on CUDA tensors,
        # where autocast's dispatch key fires
        full_args = amp_mod.to_fake_cuda(full_args)
        gm, flat = _trace(fn, full_args, tracing_mode, compiling, fn_or_module)
    gm.meta["autocast_casts"] = amp_mod.make_casts_explicit(gm, full_args)
    gm.meta["released"] = list(getattr(wrapped, "released", []))
    return gm, flat, pnames


def _trace(fn, full_args, tracing_mode: str, compiling: bool, root=None):
    """``make_fx`` of ``fn(*full_args)``, host reads answered (see :func:`trace_fx`);
    ``root``: the module whose submodule paths tag the nodes (:class:`ModuleScopes`)."""
    import contextlib
    from torch.fx.experimental.proxy_tensor import make_fx

    from gpusim.capture.amp import GpuAutocast
    from gpusim.capture.scopes import ModuleScopes
    from gpusim.capture.sdpa import MathAttention

    flat = _flatten_tensors(full_args, [])
    calls = [0]
    torch_calls = TorchCalls()

    def counted(*a):    # inside the traced function: the tracer's own calls are not counted
        with torch_calls:
            return fn(*a)

    def count(module, inputs):      # eager pays Python's nn.Module.__call__ per call
        calls[0] += 1
    # A host read of a device value (``if mask.all():``) has no answer on fake tensors.
    # Trace with the typical answer first; if the model then fails, retry with the most
    # recent reads flipped (a check such as ``if bad.any(): raise`` wants the other one).
    tries: list[dict] = [{}]
    first_error = None
    for forced in tries:
        calls[0] = torch_calls.calls = 0
        reads = HostReads(forced)
        hook = torch.nn.modules.module.register_module_forward_pre_hook(count)
        quiet = _quiet_fake_tensor_logger()
        try:
            lives = PythonLifetimes()       # when Python really drops each tensor
            scopes = ModuleScopes(root)     # which module made each node
            # MathAttention: attention no fused CUDA kernel takes is traced as its math ops
            with torch.no_grad(), reads, lives, scopes, MathAttention(), GpuAutocast(), \
                    (Compiling() if compiling else contextlib.nullcontext()):
                gm = make_fx(counted, tracing_mode=tracing_mode, pre_dispatch=True,
                             _allow_non_fake_inputs=True)(*full_args)
            scopes.tag(gm)
            break
        except CaptureError:
            raise
        except Exception as e:  # noqa: BLE001 - turn tracer failures into one clear line
            first_error = first_error or e
            if len(tries) == 1 and reads.sites:
                answers = [s["answer"] for s in reads.sites]
                tries += [{i: not answers[i]} for i in reversed(range(len(answers)))][:3]
        finally:
            hook.remove()
            quiet()
    else:
        raise CaptureError(_explain_trace_failure(first_error)) from None
    gm.meta["module_calls"] = calls[0]
    gm.meta["torch_calls"] = torch_calls.calls
    gm.meta["host_reads"] = reads.sites
    gm.meta["py_deaths"] = lives.deaths
    return gm, flat


def capture(fn_or_module, args=(), name: str | None = None, compiling: bool = False,
            amp=None) -> OpGraph:
    """Trace ``fn_or_module(*args)`` on fake tensors into an :class:`OpGraph`.

    Parameters
    ----------
    fn_or_module : callable or torch.nn.Module
    args : tuple of example inputs (real, ``meta`` or fake tensors; Python scalars allowed)
    compiling : trace the code path the model takes under ``torch.compile`` (library
        code that asks ``torch.compiler.is_compiling()`` answers differently)
    amp : ``"bf16"`` or ``"fp16"``: run the forward under ``torch.autocast("cuda")``
        (fp32 weights and inputs, mixed-precision ops; :mod:`gpusim.capture.amp`). Autocast
        regions in the model's own code trace as on a GPU either way.

    ``graph.meta`` carries what the host profile prices the model's own Python by
    (:func:`gpusim.hw.host.python_us`): ``module_calls`` (nn.Module calls per forward) and
    ``torch_calls`` (top-level torch calls per forward, :class:`gpusim.capture.pycalls.TorchCalls`).

    Raises
    ------
    CaptureError
        when tracing fails (data-dependent control flow, bad example args).

    >>> import torch
    >>> g = capture(lambda x: torch.relu(x + 1), (torch.empty(1024, device="meta"),))
    >>> [g.node(n)["op"] for n in g.compute_nodes]
    ['aten.add.Tensor', 'aten.relu.default']
    """
    return capture_full(fn_or_module, args, name, compiling=compiling, amp=amp).graph


def released_labels(gm, graph: OpGraph, pnames: list[str]) -> list[str]:
    """The graph inputs (node names) an argument object let go during the call
    (:func:`gpusim.capture.pytrees.released`), from their placeholder positions."""
    n = len(pnames)
    names = [pnames[k][2:] if k < n else f"in{k - n}" for k in gm.meta.get("released", [])]
    return [x for x in names if x in graph.g]


def capture_full(fn_or_module, args=(), name: str | None = None,
                 tracing_mode: str = "fake", compiling: bool = False, amp=None) -> Captured:
    from gpusim.capture.amp import amp_name
    from gpusim.capture.train import capture_step
    from gpusim.capture.closures import is_training_step
    if is_training_step(fn_or_module):      # backward, an optimizer: a whole training step
        if amp is not None:
            raise CaptureError("amp= does not apply to a training step (it would autocast the "
                               "backward too): put torch.autocast(\"cuda\") around the step's "
                               "forward and loss, as on a GPU")
        return capture_step(fn_or_module, args, name)
    t0 = time.perf_counter()
    gm, flat, pnames = trace_fx(fn_or_module, args, tracing_mode, compiling, amp)
    label = name or getattr(fn_or_module, "__name__", type(fn_or_module).__name__)
    try:
        graph = fx_to_opgraph(gm, label, pnames)
    except Exception as e:  # noqa: BLE001 - a shape that depends on data (x[x > 0])
        if "data-dependent" not in str(e) and "DataDependent" not in type(e).__name__:
            raise
        raise CaptureError(_explain_trace_failure(e)) from None
    _mark_tied(flat, pnames or [], graph)
    tag_opgraph(gm, graph, pnames or [])     # each node's module, for the per-module roll-up
    graph.meta["module_calls"] = gm.meta.get("module_calls", 0)
    graph.meta["torch_calls"] = gm.meta.get("torch_calls", 0)
    graph.meta["py_free"] = python_frees(gm, graph, gm.meta.get("py_deaths", {}))
    graph.meta["inputs"] = len(flat)       # tensors a compiled wrapper checks per call
    graph.meta["released_inputs"] = released_labels(gm, graph, pnames or [])
    graph.meta["compiling"] = compiling
    graph.meta["amp"] = amp_name(amp)
    graph.meta["autocast_casts"] = gm.meta.get("autocast_casts", 0)
    return Captured(gm, flat, pnames, graph, time.perf_counter() - t0)


