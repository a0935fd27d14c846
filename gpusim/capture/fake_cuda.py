"""Fake CUDA tensors on a CPU-only build of PyTorch.

Autocast capture traces on fake CUDA tensors (:mod:`gpusim.capture.amp`). A ``FakeTensorMode``
makes and runs them without a GPU, but a few of PyTorch's Python entry points take a CUDA
*device guard* (``c10::DeviceGuard``) in C++ before they reach the dispatcher: indexing
(``Tensor.__getitem__``/``__setitem__``, ``THPVariable_getitem`` in
``torch/csrc/autograd/python_variable_indexing.cpp``), ``Tensor.to("cuda")`` and ``.cuda()``
(which ask the guard for the current device) and ``Tensor.new_tensor``. A CUDA build has the
guard (``libc10_cuda``) even on a machine without a GPU; a CPU-only build (the README's
``torch==2.13.0`` install) has none, and every one of these raises "PyTorch is not linked with
support for cuda devices": a timm model that indexes a relative-position table failed under
``--amp``.

:class:`FakeCudaEntryPoints` (entered by :class:`gpusim.capture.amp.GpuAutocast` where the
guard is missing, :func:`cuda_guard_missing`) answers those calls on fake CUDA tensors with the
ATen ops their C++ code calls (``applySlicing``: ``select``, ``slice``, ``unsqueeze``, ``alias``,
``index``; ``copy_``/``fill_``/``index_put_`` for assignment), so the traced graph is the one a
CUDA build traces.
"""

from __future__ import annotations

import functools
import operator
import types

import torch
from torch.overrides import TorchFunctionMode

_aten = torch.ops.aten
#: the error a CPU-only build raises for a CUDA device guard (c10/core/impl/DeviceGuardImplInterface.h)
NOT_LINKED = "PyTorch is not linked with support for cuda devices"


@functools.lru_cache(maxsize=None)
def cuda_guard_missing() -> bool:
    """Whether this PyTorch has no CUDA device guard (a CPU-only build): indexing a fake
    CUDA tensor raises :data:`NOT_LINKED`."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    try:
        with FakeTensorMode():
            torch.empty(2, device="cuda:0")[0]
    except RuntimeError as e:
        return NOT_LINKED in str(e)
    return False


def _on_cuda(t) -> bool:
    return isinstance(t, torch.Tensor) and t.device.type == "cuda"


def _cuda0(device):
    """``"cuda"`` (no index: the guard's current device) as ``cuda:0``."""
    if isinstance(device, (str, torch.device)):
        d = torch.device(device)
        if d.type == "cuda" and d.index is None:
            return torch.device("cuda", 0)
    return device


def _as_tuple(index) -> tuple:
    """``index`` as the tuple of indices ``applySlicing`` walks (``treatSequenceAsTuple``: a
    list holding a tensor, a sequence, a slice, Ellipsis or None is a tuple of indices)."""
    if isinstance(index, tuple):
        return index
    if isinstance(index, list) and len(index) < 32 and any(
            isinstance(x, (torch.Tensor, list, tuple, slice)) or x is None or x is Ellipsis
            for x in index):
        return tuple(index)
    return (index,)


def _consumes(x) -> int:
    """Dimensions of the indexed tensor an index uses up."""
    if x is None or x is Ellipsis or isinstance(x, bool):
        return 0
    if isinstance(x, torch.Tensor) and x.dtype in (torch.bool, torch.uint8):
        return x.dim()
    return 1


def _whole(s: slice, step, length) -> bool:
    """``applySlice``'s no-op: start 0, stop at least the length, step 1 (no slice op)."""
    return step == 1 and s.start in (None, 0) and (s.stop is None or s.stop >= length)


def _slicing(self, index):
    """``applySlicing``: the basic indices applied (select, slice, unsqueeze) and the tensor
    indices left for ``aten.index``/``index_put_`` (None for a dimension taken whole)."""
    items = _as_tuple(index)
    result, dim, tensors = self, 0, []
    for x in items:
        if x is Ellipsis:
            dim += self.dim() - sum(_consumes(y) for y in items)
        elif x is None or x is True:
            result = _aten.unsqueeze.default(result, dim)
            dim += 1
        elif isinstance(x, bool):
            raise NotImplementedError("indexing with False")
        elif isinstance(x, slice):
            step = 1 if x.step is None else x.step
            if not _whole(x, step, result.shape[dim]):      # applySlice returns self for these
                result = _aten.slice.Tensor(result, dim, x.start, x.stop, step)
            dim += 1
        elif isinstance(x, (torch.Tensor, list, tuple)):
            t = x if isinstance(x, torch.Tensor) else torch.tensor(x)
            tensors += [None] * (dim - len(tensors)) + [t]
            dim += _consumes(t)
        else:
            result = _aten.select.int(result, dim, operator.index(x))
    return result, tensors


def fake_getitem(self, index):
    """``self[index]`` by the ATen ops ``THPVariable_getitem`` calls."""
    result, tensors = _slicing(self, index)
    if tensors:
        return _aten.index.Tensor(result, tensors)
    return _aten.alias.default(result) if result is self else result


def fake_setitem(self, index, value) -> None:
    """``self[index] = value`` by the ATen ops ``THPVariable_setitem`` calls (a Python number
    is a 0-dim CPU tensor of ``self``'s dtype, as ``valueToTensor`` makes it for CUDA)."""
    if not isinstance(value, torch.Tensor):
        from torch.utils._python_dispatch import _disable_current_modes
        with _disable_current_modes():      # made in C++, below every mode: a constant
            value = torch.tensor(value, dtype=self.dtype)
        value = _aten.lift_fresh.default(value)
    dst, tensors = _slicing(self, index)
    if tensors:
        _aten.index_put_.default(dst, tensors, value)
    elif tuple(dst.shape) == tuple(value.shape):
        dst.copy_(value)
    elif value.dim() == 0 and value.device.type == "cpu":
        dst.fill_(value)
    else:
        dst.copy_(value.expand_as(dst))


def _to(orig, self, *args, **kwargs):
    args = tuple(_cuda0(a) for a in args)
    if "device" in kwargs:
        kwargs["device"] = _cuda0(kwargs["device"])
    return orig(self, *args, **kwargs)


def _cuda(orig, self, device=None, non_blocking=False, memory_format=torch.preserve_format):
    device = torch.device("cuda", 0) if device is None else _cuda0(
        torch.device("cuda", device) if isinstance(device, int) else device)
    return self.to(device, non_blocking=non_blocking, memory_format=memory_format)


def _new_tensor(orig, self, data, dtype=None, device=None, requires_grad=False, **_):
    return torch.tensor(data, dtype=dtype or self.dtype, device=_cuda0(device or self.device),
                        requires_grad=requires_grad)


def _contiguous(orig, self, memory_format=torch.contiguous_format):
    return _aten.contiguous.default(self, memory_format=memory_format)


#: the ``torch.Tensor`` bindings that take a CUDA device guard before they dispatch, and what
#: answers them on a fake CUDA tensor instead (torch's own fake and meta kernels call
#: ``contiguous`` and indexing too: the 1-d convolution's, ``im2col``'s decomposition)
_METHODS = {"__getitem__": lambda orig, *a: fake_getitem(*a),
            "__setitem__": lambda orig, *a: fake_setitem(*a),
            "contiguous": _contiguous, "to": _to, "cuda": _cuda, "new_tensor": _new_tensor}


def _guarded(orig, substitute):
    """``orig``, answered by ``substitute(orig, ...)`` where it raises :data:`NOT_LINKED`."""
    @functools.wraps(orig)
    def call(*args, **kwargs):
        try:
            return orig(*args, **kwargs)
        except RuntimeError as e:
            if NOT_LINKED not in str(e):
                raise
            return substitute(orig, *args, **kwargs)
    return call


def _aten_packet(func):
    """The ATen op that a C binding of the same name calls (``Tensor.copy_``,
    ``torch._C._nn.im2col``); None for Python functions (``F.unfold`` calls ``im2col``, not
    ``aten.unfold``) and names with no op."""
    if not isinstance(func, (types.BuiltinFunctionType, types.MethodDescriptorType,
                             types.WrapperDescriptorType)):
        return None
    name = getattr(func, "__name__", "")
    return getattr(_aten, name, None) if name and not name.startswith("__") else None


class FakeCudaEntryPoints(TorchFunctionMode):
    """While tracing on a CPU-only build: the ``torch.Tensor`` bindings that take a CUDA device
    guard (:data:`_METHODS`) run, on a fake CUDA tensor, as the ATen ops they stand for; any
    other C binding that raises :data:`NOT_LINKED` (``copy_``, ``split``, ...) runs as the ATen
    op of its name. The guard is taken before anything is dispatched, so nothing was traced
    twice."""

    def __enter__(self):
        self._saved = {k: torch.Tensor.__dict__.get(k) for k in _METHODS}
        for name, substitute in _METHODS.items():
            setattr(torch.Tensor, name, _guarded(getattr(torch.Tensor, name), substitute))
        return super().__enter__()

    def __exit__(self, *exc):
        for name, old in self._saved.items():
            if old is None:
                delattr(torch.Tensor, name)
            else:
                setattr(torch.Tensor, name, old)
        return super().__exit__(*exc)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        try:
            return func(*args, **kwargs)
        except RuntimeError as e:
            packet = _aten_packet(func)
            if NOT_LINKED not in str(e) or packet is None:
                raise
            return packet(*args, **kwargs)


__all__ = ["FakeCudaEntryPoints", "NOT_LINKED", "cuda_guard_missing", "fake_getitem",
           "fake_setitem"]
