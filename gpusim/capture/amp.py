"""Automatic mixed precision: ``torch.autocast("cuda", ...)`` traced as it runs on a GPU.

Autocast is a dispatcher key (``AutocastCUDA``) that fires only for CUDA tensors, and the
``torch.autocast`` context disables itself on a machine without a GPU. Traced as is on
``meta``/CPU fake tensors, an AMP forward would be predicted in fp32. Capture therefore:

1. traces on *fake CUDA tensors* (a ``FakeTensorMode`` carries ``device="cuda"`` on a
   CPU-only machine) with :class:`GpuAutocast` letting ``torch.autocast("cuda")`` enable
   itself, so PyTorch's own ``AutocastCUDA`` kernels run during ``make_fx`` and every
   traced value has the dtype eager gives it on a GPU (a ``linear`` returns fp16, a
   ``softmax`` of fp16 returns fp32, ...);
2. makes autocast's casts explicit (:func:`make_casts_explicit`): pre-dispatch tracing
   records ops *above* the autocast key (``linear`` of two fp32 tensors that returns
   fp16), so the ``_to_copy`` kernels eager launches are not in the graph. For each op
   inside an enabled CUDA region, the pass asks the real ``AutocastCUDA`` kernel which of
   the op's inputs it casts, and to what (:func:`autocast_casts`: the op runs once more on
   fresh fake CUDA tensors under a dispatch mode that sees the ``_to_copy`` calls), and
   inserts those casts before the op.

So the op lists (lower-precision: ``mm``, ``linear``, ``conv2d``, ``scaled_dot_product_attention``...;
fp32: ``layer_norm``, ``exp``, ``mse_loss``...; fp32-unless-dtype-given: ``softmax``,
``sum``...; promote) are torch's own, from the installed torch's
``aten/src/ATen/autocast_mode.cpp``, never a copy that could go stale.

The one rule the probe cannot see is autocast's *weight cache* (``cached_cast`` in
``autocast_mode.cpp``): a fp32 CUDA tensor that is a leaf and requires grad (a
parameter), cast to the region's lower-precision dtype, is cast once and the copy is kept
until the outermost autocast region exits (``clear_autocast_cache``). The pass applies
it: one cast node per parameter and region, reused by every later use (tied weights, a
training step's backward), held live to the region's end (``graph.meta["py_free"]``).
"""

from __future__ import annotations

import contextlib

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

from gpusim.util.errors import UserError

#: ``--amp`` names -> the autocast dtype
AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}

_ENTER = "_enter_autocast"
_EXIT = "_exit_autocast"
_aten = torch.ops.aten


def amp_dtype(amp) -> "torch.dtype | None":
    """The autocast dtype for ``amp`` (``"bf16"``, ``"fp16"``, a torch dtype or None)."""
    if amp is None or isinstance(amp, torch.dtype):
        return amp
    key = str(amp).lower().replace("bfloat16", "bf16").replace("float16", "fp16")
    if key not in AMP_DTYPES:
        raise UserError(f"unknown --amp {amp!r}; use one of: {', '.join(AMP_DTYPES)}")
    return AMP_DTYPES[key]


def amp_name(amp) -> "str | None":
    """``"bf16"``/``"fp16"`` for an ``amp`` value (None: no autocast)."""
    dt = amp_dtype(amp)
    return None if dt is None else next(k for k, v in AMP_DTYPES.items() if v == dt)


def under_autocast(fn, amp):
    """``fn`` whose every call runs under ``torch.autocast("cuda", dtype=amp)``: fp32
    weights and inputs, the forward in mixed precision (how timm's benchmark and AMP
    training run a model)."""
    dtype = amp_dtype(amp)

    def autocast_call(*a, **k):
        with torch.autocast("cuda", dtype=dtype):
            return fn(*a, **k)
    return autocast_call


class GpuAutocast(contextlib.ContextDecorator):
    """While tracing: ``torch.autocast("cuda", ...)`` enables itself as on a GPU (torch
    disables it, with a warning, when ``torch.cuda.is_available()`` is False, and asks the
    device whether it supports bf16). Nothing runs on a device: the tensors are fake. On a
    CPU-only build of torch, the Python entry points that need a CUDA device guard
    (indexing, ``.to("cuda")``) run on fake CUDA tensors as their ATen ops
    (:class:`gpusim.capture.fake_cuda.FakeCudaEntryPoints`)."""

    def __enter__(self):
        import torch.cuda.amp.common as common

        from gpusim.capture.fake_cuda import FakeCudaEntryPoints, cuda_guard_missing
        self._saved = (common.amp_definitely_not_available, torch.cuda.is_bf16_supported)
        common.amp_definitely_not_available = lambda: False
        torch.cuda.is_bf16_supported = lambda *a, **k: True
        self._entry = FakeCudaEntryPoints() if cuda_guard_missing() else None
        if self._entry is not None:
            self._entry.__enter__()
        return self

    def __exit__(self, *exc):
        import torch.cuda.amp.common as common
        if self._entry is not None:
            self._entry.__exit__(*exc)
        common.amp_definitely_not_available, torch.cuda.is_bf16_supported = self._saved
        return False


def uses_cuda_autocast(gm) -> bool:
    """Whether a pre-dispatch trace entered an enabled ``torch.autocast("cuda")`` region
    (under :class:`GpuAutocast`, as on a GPU)."""
    return any(_is(n, _ENTER) and len(n.args) > 2 and n.args[0] == "cuda" and n.args[2]
               for n in gm.graph.nodes)


def to_fake_cuda(args):
    """``args`` with every tensor replaced by a fake CUDA tensor of the same shape,
    strides, dtype and ``requires_grad`` (one ``FakeTensorMode``, which ``make_fx`` then
    reuses; set up as ``make_fx(tracing_mode="fake")`` sets up its own, with a shape
    environment for host reads). Parameters stay leaves that require grad, as
    autocast's cache asks."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv
    mode = FakeTensorMode(allow_fallback_kernels=True, allow_non_fake_inputs=True,
                          shape_env=ShapeEnv(), static_shapes=True)
    memo: dict[int, torch.Tensor] = {}

    def conv(t):
        if not isinstance(t, torch.Tensor):
            return t
        if id(t) not in memo:       # tied weights stay one tensor
            with mode:
                f = torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=t.dtype,
                                        device="cuda")
            if t.requires_grad and t.dtype.is_floating_point:
                f.requires_grad_(True)
            memo[id(t)] = f
        return memo[id(t)]
    return tree_map(conv, args)


class _CastProbe(TorchDispatchMode):
    """Records the ``_to_copy`` calls (source tensor object, dtype) below autocast."""

    def __init__(self):
        super().__init__()
        self.casts: list[tuple[int, torch.dtype]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is _aten._to_copy.default and args and isinstance(args[0], torch.Tensor):
            self.casts.append((id(args[0]), kwargs.get("dtype")))
        return func(*args, **kwargs)


_PROBE_MODE = None
_PROBED: dict = {}


def _probe_mode():
    global _PROBE_MODE
    if _PROBE_MODE is None:
        from torch._subclasses.fake_tensor import FakeTensorMode
        _PROBE_MODE = FakeTensorMode(allow_non_fake_inputs=True)
    return _PROBE_MODE


def _ints(xs) -> tuple:
    """Sizes or strides as ints (a training trace's are SymInts with static hints)."""
    return tuple(int(v) for v in xs)


def _sig(x):
    if isinstance(x, torch.Tensor):
        return ("T", _ints(x.shape), _ints(x.stride()), x.dtype, x.device.type)
    return repr(x)


def autocast_casts(op, args, kwargs, dtype) -> list[tuple[int, torch.dtype]]:
    """Which tensor inputs PyTorch's ``AutocastCUDA`` kernel of ``op`` casts, in the order
    it casts them: ``[(position in the flattened (args, kwargs), dtype)]``. ``args`` and
    ``kwargs`` hold tensors (any device; the probe uses fake CUDA copies) and constants.
    Memoized by op, the inputs' metadata and ``dtype``."""
    flat, spec = tree_flatten((args, kwargs))
    key = (op, dtype, tuple(_sig(x) for x in flat))
    if key in _PROBED:
        return _PROBED[key]
    mode = _probe_mode()
    fakes = []
    with mode:
        for x in flat:
            if isinstance(x, torch.Tensor):
                dev = "cuda" if x.device.type in ("cuda", "meta") else x.device
                x = torch.empty_strided(_ints(x.shape), _ints(x.stride()), dtype=x.dtype,
                                        device=dev)
            fakes.append(x)
    pos = {id(f): i for i, f in enumerate(fakes) if isinstance(f, torch.Tensor)}
    a, k = spec.unflatten(fakes)
    from gpusim.capture.fakes import _quiet_fake_tensor_logger
    restore = _quiet_fake_tensor_logger()       # failing probes stay quiet
    try:
        on = _casts_seen(op, a, k, dtype, mode) or []
        out = _leading_casts(op, fakes, spec, on, pos, mode) if on else []
        if out is None:
            # a composite whose inner ops autocast casts (no prefix explains the casts):
            # the casts that the op itself makes appear with autocast off too
            for c in _casts_seen(op, a, k, None, mode) or []:
                if c in on:
                    on.remove(c)
            out = [(pos[i], d) for i, d in on if i in pos]
    finally:
        restore()
    _PROBED[key] = out
    return out


def _leading_casts(op, fakes, spec, on, pos, mode) -> "list | None":
    """Autocast's casts among ``on``, the casts seen below the autocast key with autocast
    on. ``AutocastCUDA`` casts the inputs first, then calls the op below itself with
    autocast excluded (``WrapFunction_``, autocast_mode.h), where the op may cast again:
    the math attention upcasts 16-bit query, key and value to fp32, *including an input
    autocast left alone* (a bf16 value beside fp32 query and key). So autocast's casts are
    the shortest prefix of ``on`` (casts of distinct inputs) such that the op, run with
    autocast off on the inputs cast that way, makes exactly the rest. Returns
    ``[(input position, dtype)]``, or None when no prefix explains ``on``."""
    want = [(pos.get(i), d) for i, d in on]
    for n in range(len(want) + 1):
        head = want[:n]
        done = {p for p, _ in head}
        if None in done or len(done) < n:
            return None             # autocast casts only inputs, each once
        cast = list(fakes)
        with torch.no_grad(), mode:
            for p, d in head:
                cast[p] = cast[p].to(d)
        ids = {id(f): i for i, f in enumerate(cast)
               if isinstance(f, torch.Tensor) and i not in done}
        body = _casts_seen(op, *spec.unflatten(cast), None, mode)
        if body is not None and head + [(ids.get(i), d) for i, d in body] == want:
            return head
    return None


def _casts_seen(op, args, kwargs, dtype, mode) -> "list | None":
    """The ``(tensor id, dtype)`` casts below the autocast key when ``op`` runs with CUDA
    autocast at ``dtype`` (None: autocast off); None when the op fails on these inputs."""
    probe = _CastProbe()
    prev = (torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda"),
            torch.is_autocast_cache_enabled())
    torch.set_autocast_enabled("cuda", dtype is not None)
    torch.set_autocast_dtype("cuda", dtype or prev[1])
    torch.set_autocast_cache_enabled(False)     # every cast is seen; the pass caches
    try:
        with torch.no_grad(), mode, probe:
            op(*args, **kwargs)
    except Exception:  # noqa: BLE001 - an op the fake kernels cannot run
        return None
    finally:
        torch.set_autocast_enabled("cuda", prev[0])
        torch.set_autocast_dtype("cuda", prev[1])
        torch.set_autocast_cache_enabled(prev[2])
    return probe.casts


def _is(node, name: str) -> bool:
    return node.op == "call_function" and getattr(node.target, "__name__", "") == name


def _cacheable(val) -> bool:
    """``cached_cast`` (autocast_mode.cpp): a fp32 CUDA leaf that requires grad and is no
    view, cast to the region's lower-precision dtype."""
    return (isinstance(val, torch.Tensor) and val.dtype == torch.float32
            and val.requires_grad and val.is_leaf and not val._is_view())


def make_casts_explicit(gm, inputs=()) -> int:
    """Insert, in place, the ``aten._to_copy`` casts that ``AutocastCUDA`` launches before
    each op of an enabled ``torch.autocast("cuda")`` region of the pre-dispatch trace
    ``gm`` (whose values already carry autocast's dtypes). Parameters cast to the region's
    dtype are cast once per outermost region (autocast's weight cache) and held to its end
    (recorded in ``gm.meta["py_deaths"]``). ``inputs``: what was traced (the placeholders'
    values lose ``requires_grad``; these tell the parameters). Returns casts inserted."""
    graph = gm.graph
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    leaves = tree_flatten(inputs)[0]
    if len(leaves) != len(placeholders):
        leaves = [None] * len(placeholders)
    leaf = {n: _cacheable(t) for n, t in zip(placeholders, leaves)}
    # (device, dtype, enabled) per open region. The cache flag the trace records is
    # make_fx's (it turns autocast's cache off while tracing), so eager's default, on, holds
    stack: list[tuple] = []
    cache: dict = {}                # (placeholder, dtype) -> cast node, outermost region
    held: list = []                 # cached casts, freed when the outermost region exits
    deaths = gm.meta.setdefault("py_deaths", {})
    inserted = 0
    prev = None
    for node in list(graph.nodes):
        if _is(node, _ENTER):
            dev, dt, en = (list(node.args) + [None] * 3)[:3]
            stack.append((dev, dt, bool(en)))
        elif _is(node, _EXIT):
            if stack:
                stack.pop()
            if not stack:
                for c in held:      # clear_autocast_cache: the copies are dropped here
                    deaths[c.name] = prev.name if prev is not None else None
                held, cache = [], {}
        elif node.op == "call_function" and hasattr(node.target, "_schema") \
                and node.meta.get("autocast", True):
            region = next((r for r in reversed(stack) if r[0] == "cuda"), None)
            if region is not None and region[2]:
                inserted += _cast_inputs(gm, node, region, cache, held, leaf)
        if node.op == "call_function" and not _is(node, _EXIT):
            prev = node
    if inserted:
        graph.lint()
        gm.recompile()
    return inserted


def _cast_inputs(gm, node, region, cache, held, leaf) -> int:
    """Cast ``node``'s inputs as autocast does; returns the casts inserted."""
    dtype = region[1]
    vals = tree_map(lambda a: a.meta.get("val") if isinstance(a, torch.fx.Node) else a,
                    (node.args, node.kwargs))
    casts = autocast_casts(node.target, vals[0], vals[1], dtype)
    if not casts:
        return 0
    flat, spec = tree_flatten((node.args, node.kwargs))
    n = 0
    for i, to in casts:
        src = flat[i]
        if not isinstance(src, torch.fx.Node):
            continue
        key = (src, to)
        if to == dtype and leaf.get(src) and key in cache:
            flat[i] = cache[key]
            continue
        with gm.graph.inserting_before(node):
            c = gm.graph.call_function(_aten._to_copy.default, (src,), {"dtype": to})
        v = src.meta.get("val")
        if isinstance(v, torch.Tensor):
            c.meta["val"] = _cast_val(v, to)
        n += 1
        if to == dtype and leaf.get(src):
            cache[key] = c
            held.append(c)
        flat[i] = c
    args, kwargs = spec.unflatten(flat)
    node.args, node.kwargs = tuple(args), dict(kwargs)
    return n


def _cast_val(v, dtype):
    """The fake value of ``v.to(dtype)`` (same shape and strides)."""
    mode = getattr(v, "fake_mode", None) or _probe_mode()
    with mode:
        return torch.empty_strided(tuple(v.shape), tuple(v.stride()), dtype=dtype,
                                   device=v.device)


class autocast_off:
    """While tracing, a section that runs below the autocast key (an op's fallback that
    autocast has already cast for: the math attention): CUDA autocast is off inside, and
    the FX nodes traced in it are marked ``meta["autocast"] = False`` so that
    :func:`make_casts_explicit` leaves them alone. (A ``torch.autocast(enabled=False)``
    inside a ``TorchFunctionMode`` handler records no region in the graph.)"""

    def __enter__(self):
        self.on = torch.is_autocast_enabled("cuda")
        self.graph, self.last = None, None
        if not self.on:
            return self
        from torch.fx.experimental.proxy_tensor import get_proxy_mode
        mode = get_proxy_mode()
        if mode is not None:
            self.graph = mode.tracer.graph
            self.last = next(iter(reversed(self.graph.nodes)), None)
        torch.set_autocast_enabled("cuda", False)
        return self

    def __exit__(self, *exc):
        if not self.on:
            return False
        torch.set_autocast_enabled("cuda", True)
        if self.graph is not None:
            started = self.last is None
            for n in self.graph.nodes:
                if started:
                    n.meta["autocast"] = False
                started = started or n is self.last
        return False


def autocast_dtype(t) -> "torch.dtype | None":
    """The dtype autocast's lower-precision cast gives ``t`` (None: not cast)."""
    if isinstance(t, torch.Tensor) and torch.is_autocast_enabled("cuda") and \
            t.device.type == "cuda" and t.dtype == torch.float32:
        return torch.get_autocast_dtype("cuda")
    return None


def lower_precision(*tensors):
    """``tensors`` as autocast's lower-precision cast leaves them (fp32 CUDA tensors to the
    enabled CUDA autocast dtype), for tracing code that stands in for an op autocast casts
    (:class:`gpusim.capture.sdpa.MathAttention`'s ``matmul`` and attention)."""
    if not torch.is_autocast_enabled("cuda"):
        return tensors
    dt = torch.get_autocast_dtype("cuda")
    return tuple(t.to(dt) if isinstance(t, torch.Tensor) and t.device.type == "cuda"
                 and t.dtype == torch.float32 else t for t in tensors)


__all__ = ["AMP_DTYPES", "GpuAutocast", "amp_dtype", "amp_name", "autocast_casts",
           "autocast_dtype", "autocast_off",
           "lower_precision", "make_casts_explicit", "to_fake_cuda", "under_autocast",
           "uses_cuda_autocast"]
