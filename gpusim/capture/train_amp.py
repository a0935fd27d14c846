"""Autocast in a training step: ``torch.autocast("cuda")`` and ``torch.amp.GradScaler`` as a
GPU runs them, in a trace on ``meta`` tensors.

A training step is traced below autograd (``make_fx`` without pre-dispatch,
:mod:`gpusim.capture.train`), so autograd runs for real and records the backward. Autocast's casts
must happen *above* autograd (eager's ``AutocastCUDA`` key is above the autograd key): the
backward of a bf16 ``mm`` is a bf16 ``mm``, and each cast's backward casts the gradient
back. Autocast fires only on CUDA tensors, and the autograd engine cannot run on fake CUDA
tensors on a machine without a GPU (``GraphTask::stash_current_streams`` asks the absent
device for its context), so the step is traced on ``meta`` tensors and
:class:`LiveAutocast` applies autocast at the level of torch functions, as the trace runs:

* inside an enabled ``torch.autocast("cuda")`` region (:class:`gpusim.capture.amp.GpuAutocast`
  lets it enable itself off the GPU), each torch function call (``F.linear``,
  ``Tensor.__matmul__``, ``F.layer_norm``, ``F.cross_entropy``...) asks PyTorch's own
  ``AutocastCUDA`` kernel which inputs it casts and to what
  (:func:`gpusim.capture.amp.autocast_casts`: the call runs once more on fresh fake CUDA tensors
  with autograd off), casts those inputs (``Tensor.to``: the ``_to_copy`` kernel, and in
  backward the gradient's cast back) and calls the function on them;
* autocast's weight cache (``cached_cast``): a fp32 parameter cast to the region's dtype
  is cast once and the copy reused until the outermost region exits: held to there
  (:attr:`LiveAutocast.deaths`, ``graph.meta["py_free"]``), and by autograd for the
  backward of the ops that saved it, as eager does.

The op lists are torch's own. What the probe sees is the casts of a call's *inputs*: a
Python-level composite called as one torch function whose inner ops autocast would cast
differently (an intermediate value) is cast at its inputs only.

:func:`scaler_patch`: a ``GradScaler("cuda")`` built on a machine without a GPU disables
itself; in the trace it is enabled, its scale and growth tracker are resident (created
untraced, as after the first step), ``scaler.step`` takes the normal, not-skipped path
(the ``found_inf`` read is a recorded device-to-host copy), and ``scaler.update()``'s
``_amp_update_scale_`` belongs to the optimizer phase.
"""

from __future__ import annotations

import contextlib

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

from torch.fx.experimental.proxy_tensor import disable_proxy_modes_tracing

from gpusim.capture.amp import _cacheable, autocast_casts

_SKIP = {torch.Tensor.backward, torch.autograd.backward, torch.Tensor.register_hook,
         torch.Tensor.__repr__, torch.Tensor.__format__}


class LiveAutocast(TorchFunctionMode):
    """While tracing a step on ``meta`` tensors: each torch function called inside an
    enabled CUDA autocast region gets its inputs cast as ``AutocastCUDA`` casts them (module
    docstring). ``casts``: how many casts were made (cached weight casts once)."""

    def __init__(self):
        super().__init__()
        self.cache: dict = {}
        self.casts = 0
        self.deaths: dict = {}      # FX node of a cached weight copy -> FX node it dies after

    def _record_deaths(self):
        """The cached copies are dropped here: after the last node traced so far."""
        from torch.fx.experimental.proxy_tensor import get_proxy_mode, get_proxy_slot
        mode = get_proxy_mode()
        if mode is None or not self.cache:
            return
        last = next(iter(reversed(mode.tracer.graph.nodes)), None)
        for _, copy in self.cache.values():
            try:
                node = get_proxy_slot(copy, mode.tracer).proxy.node
            except Exception:  # noqa: BLE001 - a copy the tracer does not know
                continue
            self.deaths[node.name] = last.name if last is not None else None

    def __enter__(self):
        self._clear = torch.clear_autocast_cache
        mode = self

        def clear():                # the outermost region exits: drop the weight copies
            mode._record_deaths()
            mode.cache = {}
            return mode._clear()
        torch.clear_autocast_cache = clear
        return super().__enter__()

    def __exit__(self, *exc):
        torch.clear_autocast_cache = self._clear
        self.cache = {}
        return super().__exit__(*exc)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _SKIP or not torch.is_autocast_enabled("cuda"):
            return func(*args, **kwargs)
        if func is torch.nn.functional.cross_entropy:
            parts = _cross_entropy_parts(args, kwargs)
            if parts is not None:
                return self._cross_entropy(*parts)
        if func in _COMPOSITES:     # the body's torch functions come to this mode again
            TorchFunctionMode.__enter__(self)        # pushed as is: no second cache hook
            try:
                with _own_check_passes(func):
                    return func(*args, **kwargs)
            finally:
                TorchFunctionMode.__exit__(self, None, None, None)
        flat, spec = tree_flatten((args, kwargs))
        if not any(isinstance(x, torch.Tensor) and x.is_floating_point() for x in flat):
            return func(*args, **kwargs)
        dtype = torch.get_autocast_dtype("cuda")
        try:
            # the probe sees autocast alone, and stays out of the trace
            with torch._C.DisableTorchFunction(), disable_proxy_modes_tracing():
                casts = autocast_casts(func, args, kwargs, dtype)
        except Exception:  # noqa: BLE001 - a call the probe cannot repeat: no casts
            casts = []
        if not casts:
            if _opt_dtype(func, args, kwargs, dtype):
                return func(*args, **{**kwargs, "dtype": torch.float32})
            return func(*args, **kwargs)
        for i, to in casts:
            src = flat[i]
            if not isinstance(src, torch.Tensor):
                continue
            if to == dtype and _cacheable(src):
                key = (id(src), to)
                if key not in self.cache:
                    self.cache[key] = (src, src.to(to))
                    self.casts += 1
                flat[i] = self.cache[key][1]
            else:
                flat[i] = src.to(to)
                self.casts += 1
        a, k = spec.unflatten(flat)
        return func(*a, **k)


    def _cross_entropy(self, x, target, weight, ignore_index, reduction):
        """ATen's ``cross_entropy_loss`` below the autocast key: ``log_softmax`` with the
        input's own dtype (so autocast leaves it in 16 bits), then ``nll_loss``, which
        autocast runs in fp32 (a cast of the log-probabilities). One torch function to the
        probe, so its inner cast would be missed (an H100 T5-small bf16 step launches the
        16-bit log-softmax and then the cast: 31 MiB of fp32 log-probabilities held for the
        backward)."""
        dim = 0 if x.dim() == 1 else 1
        logp = self.__torch_function__(torch.log_softmax, (), (x, dim), {"dtype": x.dtype})
        return self.__torch_function__(
            torch.nn.functional.nll_loss, (), (logp, target),
            {"weight": weight, "ignore_index": ignore_index, "reduction": reduction})


#: Python functions whose inner torch functions autocast casts one by one, unlike the inputs of
#: the whole: ``nn.MultiheadAttention``'s forward (torchvision's ViT, DETR, CLIP...) projects
#: q, k, v, runs attention and the output projection, each in 16 bits under autocast; cast at
#: its inputs only, its attention and output projection ran in fp32 (math attention: fp32
#: batched GEMMs, fp32 scores held for the backward)
_COMPOSITES = (torch.nn.functional.multi_head_attention_forward,)


@contextlib.contextmanager
def _own_check_passes(func):
    """``func``'s own first ``has_torch_function`` check answers False, so that ``func`` runs its
    body (under the modes now on) instead of handing itself to them again; its inner
    functions' checks are untouched."""
    g = func.__globals__
    orig = g["has_torch_function"]

    def once(*a):
        g["has_torch_function"] = orig
        return False
    g["has_torch_function"] = once
    try:
        yield
    finally:
        g["has_torch_function"] = orig


def _cross_entropy_parts(args, kwargs):
    """``(input, target, weight, ignore_index, reduction)`` of an ``F.cross_entropy`` call
    that is ``nll_loss(log_softmax(input))`` in ATen (class-index targets, no label
    smoothing, no legacy ``size_average``/``reduce``); None otherwise."""
    import inspect
    try:
        b = inspect.signature(torch.nn.functional.cross_entropy).bind(*args, **kwargs)
    except TypeError:
        return None
    a = b.arguments
    x, target = a.get("input"), a.get("target")
    if not isinstance(x, torch.Tensor) or not isinstance(target, torch.Tensor) \
            or target.is_floating_point() or a.get("label_smoothing", 0.0) \
            or a.get("size_average") is not None or a.get("reduce") is not None:
        return None
    return x, target, a.get("weight"), a.get("ignore_index", -100), a.get("reduction", "mean")


#: ``AT_FORALL_FP32_SET_OPT_DTYPE`` (ATen/autocast_mode.h): called without ``dtype`` on a
#: lower-precision input, autocast passes ``dtype=torch.float32`` (no cast kernel: CUDA's
#: softmax reads fp16 and writes fp32), which a probe of the casts cannot see
_SET_OPT_DTYPE = {"prod", "softmax", "log_softmax", "cumprod", "cumsum", "linalg_vector_norm",
                  "linalg_matrix_norm", "sum"}
_OPT: dict = {}


def _opt_dtype(func, args, kwargs, dtype) -> bool:
    """Whether autocast runs ``func`` with ``dtype=torch.float32`` added: its name is one
    of :data:`_SET_OPT_DTYPE`, no ``dtype`` is given, and (checked on fake CUDA tensors)
    the output is fp32 with autocast on but not off."""
    from gpusim.capture.amp import _probe_mode, _sig
    if getattr(func, "__name__", "") not in _SET_OPT_DTYPE or "dtype" in kwargs:
        return False
    flat, spec = tree_flatten((args, kwargs))
    key = (func, dtype, tuple(_sig(x) for x in flat))
    if key not in _OPT:
        mode = _probe_mode()
        with torch._C.DisableTorchFunction(), disable_proxy_modes_tracing():
            with mode:
                fakes = [torch.empty_strided(tuple(int(v) for v in x.shape),
                                             tuple(int(v) for v in x.stride()), dtype=x.dtype,
                                             device="cuda")
                         if isinstance(x, torch.Tensor) else x for x in flat]
            a, k = spec.unflatten(fakes)
            outs = []
            for on in (True, False):
                prev = torch.is_autocast_enabled("cuda")
                torch.set_autocast_enabled("cuda", on)
                try:
                    with torch.no_grad(), mode:
                        out = func(*a, **k)
                    outs.append(getattr(out, "dtype", None))
                except Exception:  # noqa: BLE001 - not a call the probe can repeat
                    outs.append(None)
                finally:
                    torch.set_autocast_enabled("cuda", prev)
        _OPT[key] = outs[0] == torch.float32 and outs[1] not in (None, torch.float32)
    return _OPT[key]


def half_to_float(gm) -> int:
    """CUDA's softmax of a 16-bit input with ``dtype=torch.float32`` reads it as is and
    writes fp32 (``_softmax(x, dim, half_to_float=True)``); traced off the GPU it is a
    ``_to_copy`` to fp32 and a fp32 ``_softmax``. Rewrites those pairs in place; returns
    how many."""
    aten = torch.ops.aten
    n_done = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target not in (aten._softmax.default,
                                                             aten._log_softmax.default):
            continue
        src = node.args[0]
        if not (isinstance(src, torch.fx.Node) and src.target is aten._to_copy.default
                and src.kwargs.get("dtype") == torch.float32 and len(src.users) == 1
                and set(src.kwargs) <= {"dtype"}):
            continue
        x = src.args[0]
        v = x.meta.get("val") if isinstance(x, torch.fx.Node) else None
        if not isinstance(v, torch.Tensor) or v.dtype not in (torch.float16, torch.bfloat16):
            continue
        node.args = (x, node.args[1], True)
        gm.graph.erase_node(src)
        n_done += 1
    if n_done:
        gm.graph.lint()
        gm.recompile()
    return n_done


@contextlib.contextmanager
def scaler_patch(mark):
    """``torch.amp.GradScaler`` as on a GPU while tracing (module docstring); ``mark(phase)``
    labels the trace's phases (:class:`gpusim.capture.train._Phases`)."""
    from torch.amp.grad_scaler import GradScaler
    saved = {name: getattr(GradScaler, name) for name in ("scale", "_maybe_opt_step", "update")}
    touched: dict = {}

    def enable(s):
        if id(s) not in touched:
            touched[id(s)] = (s, s._enabled, s._scale, s._growth_tracker)
        if s._device == "cuda":
            s._enabled = True

    def scale(self, outputs):
        enable(self)
        if self._enabled and self._scale is None and isinstance(outputs, torch.Tensor):
            with disable_proxy_modes_tracing():     # resident, as after the first step
                self._lazy_init_scale_growth_tracker(outputs.device)
        return saved["scale"](self, outputs)

    def maybe_opt_step(self, optimizer, optimizer_state, *a, **k):
        for v in optimizer_state["found_inf_per_device"].values():
            torch.ops.aten._local_scalar_dense.default(v)   # the host reads found_inf
        return optimizer.step(*a, **k)                       # not skipped: no inf

    def update(self, new_scale=None):
        enable(self)
        mark("optimizer")
        try:
            return saved["update"](self, new_scale)
        finally:
            mark("forward")
    GradScaler.scale, GradScaler._maybe_opt_step, GradScaler.update = scale, maybe_opt_step, update
    try:
        yield
    finally:
        for name, f in saved.items():
            setattr(GradScaler, name, f)
        for s, en, sc, gt in touched.values():
            s._enabled, s._scale, s._growth_tracker = en, sc, gt
            s._per_optimizer_states = type(s._per_optimizer_states)(
                s._per_optimizer_states.default_factory)
