"""When a second capture may reuse the first: the **signature** of a call's arguments.

Capture traces a function on fake tensors, which carry no values: what a trace can observe of
its arguments is their structure (containers, object attributes, Python numbers and strings),
each tensor's metadata (shape, strides, offset, dtype, device, subclass) and which tensors are
the same object or share a storage. :func:`signature` writes all of that down; where two calls
of the same function on the same module have equal signatures, their traces are the same
graph, so the second capture may reuse the first's.

``generate`` meets this with a static cache: its decode step sees the same shapes at every
context, and a full-attention ``StaticLayer`` keeps the context only in a tensor's value, so
the step at the first and last context is one graph (captured once). A sliding-window layer
keeps it in a Python int as well (``cumulative_length_int``, which picks its update path), so
its signatures differ and each context is captured: nothing here knows a cache class.

Anything the walk cannot describe (an object without ``__dict__``, a type it does not know)
makes the signature ``None``: never equal, always captured. Modules, functions and classes are
taken by identity (the same object in both calls).
"""

from __future__ import annotations

import types

import torch

_PLAIN = (type(None), bool, int, float, complex, str, bytes)
_BY_IDENTITY = (torch.nn.Module, types.FunctionType, types.BuiltinFunctionType, types.MethodType,
                types.ModuleType, type)


class _Opaque(Exception):
    """An argument the signature cannot describe."""


def signature(args) -> tuple | None:
    """A hashable description of everything a trace of ``args`` can observe (see the module
    docstring), or None when some object in them cannot be described.

    >>> x = torch.empty(2, 3, device="meta")
    >>> signature((x, x)) == signature((x, torch.empty(2, 3, device="meta")))   # aliasing counts
    False
    >>> signature((x, 1)) == signature((torch.empty(2, 3, device="meta"), 1))
    True
    """
    walk = _Walk()
    try:
        return walk(args)
    except _Opaque:
        return None


def _slots(cls) -> list[str]:
    """Attributes a class keeps outside ``__dict__`` (``__slots__`` along its bases)."""
    out = []
    for k in cls.__mro__:
        names = getattr(k, "__slots__", ())
        out += [n for n in ((names,) if isinstance(names, str) else names)
                if n not in ("__dict__", "__weakref__")]
    return out


class _Walk:
    def __init__(self):
        self.objects: dict[int, int] = {}     # id -> first-seen index (aliasing of objects)
        self.storages: dict[int, int] = {}    # storage -> first-seen index (aliasing of memory)
        self.keep: list = []                  # keeps walked objects alive: no id is reused

    def __call__(self, x):
        if isinstance(x, _PLAIN):
            return (type(x).__name__, x)
        if isinstance(x, (torch.dtype, torch.device, torch.layout, torch.memory_format)):
            return (type(x).__name__, str(x))
        if x is _Opaque:        # an unset slot
            return ("unset",)
        if isinstance(x, _BY_IDENTITY):
            return ("id", id(x))
        seen = self.objects.get(id(x))
        if seen is not None:
            return ("seen", seen)
        self.objects[id(x)] = len(self.objects)
        self.keep.append(x)
        if isinstance(x, torch.Tensor):
            return self.tensor(x)
        if isinstance(x, (tuple, list)):
            return (type(x).__qualname__, tuple(self(v) for v in x))
        if isinstance(x, dict):
            return (type(x).__qualname__, tuple((self(k), self(v)) for k, v in x.items()))
        if hasattr(x, "__dict__"):
            cls = type(x)
            slots = tuple((s, self(getattr(x, s, _Opaque))) for s in _slots(cls))
            return ("obj", cls.__module__, cls.__qualname__, self(vars(x)), slots)
        raise _Opaque(type(x).__qualname__)

    def tensor(self, t: torch.Tensor) -> tuple:
        key = t.untyped_storage()._cdata
        storage = self.storages.setdefault(key, len(self.storages))
        return ("tensor", type(t).__qualname__, tuple(t.shape), tuple(t.stride()), t.storage_offset(),
                str(t.dtype), str(t.device), t.layout == torch.strided, t.requires_grad,
                t._is_view(), storage, self(vars(t)) if vars(t) else ())
