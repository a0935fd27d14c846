"""Model inputs and outputs that are not plain tensors: what capture does with them.

``make_fx`` takes and returns pytrees (tensors in tuples, lists, dicts and registered
classes such as Hugging Face's ``ModelOutput``). Models also pass objects torch does not
know: a Hugging Face cache (``DynamicCache``, ``EncoderDecoderCache``: a T5 called with
``decoder_input_ids`` returns one inside its ``Seq2SeqLMOutput``), a dataclass of
tensors. Capture takes such an object apart into its tensors (:func:`tensors_of`: its
attributes, walked depth first in definition order) and

* as an output, returns those tensors instead (:func:`plain_outputs`): they stay graph
  outputs, alive when the call returns, as the caller holds them in eager;
* as an input, traces its tensors as inputs and hands the model a copy of the object
  that holds the traced tensors (:func:`split_inputs`); the tensors the object no longer
  holds when the call returns are released inputs (:func:`released`: eager frees them,
  ``graph.meta["released_inputs"]``, :mod:`gpusim.sim.memory`).
"""

from __future__ import annotations

import copy

import torch
from torch.utils import _pytree as pytree

_PLAIN = (torch.Tensor, int, float, bool, complex, str, bytes, type(None), torch.dtype,
          torch.device, torch.Size)
_MAX_DEPTH = 8


def _opaque(x) -> bool:
    """A pytree leaf that holds tensors but is no tensor: make_fx cannot take it apart."""
    return not isinstance(x, _PLAIN) and bool(tensors_of(x))


def tensors_of(obj, depth: int = 0, seen=None) -> list:
    """The tensors inside ``obj`` (tensors, containers, objects' attributes), each once,
    in a fixed order (definition order of attributes)."""
    seen = set() if seen is None else seen
    out: list = []
    if id(obj) in seen or depth > _MAX_DEPTH:
        return out
    if isinstance(obj, torch.Tensor):
        seen.add(id(obj))
        return [obj]
    if isinstance(obj, (_PLAIN, torch.nn.Module, type)) or callable(obj):
        return out
    seen.add(id(obj))
    if isinstance(obj, dict):
        items = list(obj.values())
    elif isinstance(obj, (list, tuple, set, frozenset)):
        items = list(obj)
    elif hasattr(obj, "__dict__"):
        items = list(vars(obj).values())
    else:
        items = [getattr(obj, s) for s in getattr(type(obj), "__slots__", ()) if hasattr(obj, s)]
    for x in items:
        out += tensors_of(x, depth + 1, seen)
    return out


def plain_outputs(out):
    """``out`` with every object make_fx cannot return replaced by the list of its
    tensors (:func:`tensors_of`); ``out`` itself when there is none."""
    leaves, spec = pytree.tree_flatten(out)
    if not any(_opaque(x) for x in leaves):
        return out
    return pytree.tree_unflatten([tensors_of(x) if _opaque(x) else x for x in leaves], spec)


def _rebuild(obj, table: dict, depth: int = 0, memo=None):
    """A copy of ``obj`` whose tensors are replaced through ``table`` (id -> tensor)."""
    memo = {} if memo is None else memo
    if isinstance(obj, torch.Tensor):
        return table.get(id(obj), obj)
    if id(obj) in memo:
        return memo[id(obj)]
    if isinstance(obj, (_PLAIN, torch.nn.Module, type)) or callable(obj) or depth > _MAX_DEPTH:
        return obj
    if isinstance(obj, dict):
        new = type(obj)((k, _rebuild(v, table, depth + 1, memo)) for k, v in obj.items()) \
            if type(obj) is dict else copy.copy(obj)
        if type(obj) is not dict:
            for k, v in obj.items():
                new[k] = _rebuild(v, table, depth + 1, memo)
    elif isinstance(obj, (list, tuple)):
        items = [_rebuild(x, table, depth + 1, memo) for x in obj]
        new = items if type(obj) is list else (type(obj)(*items) if hasattr(obj, "_fields")
                                              else type(obj)(items))
    elif hasattr(obj, "__dict__"):
        new = copy.copy(obj)
        memo[id(obj)] = new
        for k, v in vars(obj).items():
            setattr(new, k, _rebuild(v, table, depth + 1, memo))
    else:
        return obj
    memo[id(obj)] = new
    return new


def split_inputs(args: tuple):
    """``(args_for_make_fx, rebuild)``. When an argument holds objects make_fx cannot take
    apart (pytree leaves that hold tensors), ``args_for_make_fx`` is the flat list of the
    arguments' pytree leaves, each such object replaced by the list of its tensors, and
    ``rebuild(*traced)`` gives back the model's arguments with those objects copied
    around the traced tensors. Otherwise ``(args, None)``."""
    leaves, spec = pytree.tree_flatten(tuple(args))
    opaque = {i: tensors_of(x) for i, x in enumerate(leaves) if _opaque(x)}
    if not opaque:
        return tuple(args), None
    flat = tuple(opaque[i] if i in opaque else x for i, x in enumerate(leaves))

    def rebuild(*traced):
        out = list(traced)
        rebuild.made = []
        for i, ts in opaque.items():
            out[i] = _rebuild(leaves[i], {id(t): f for t, f in zip(ts, traced[i])})
            rebuild.made.append((out[i], list(traced[i])))
        return tuple(pytree.tree_unflatten(out, spec))
    rebuild.made = []
    return flat, rebuild


def released(rebuild) -> list:
    """After the call: the traced input tensors the rebuilt objects held when the model got
    them and hold no more (a ``DynamicCache`` layer whose ``keys`` the ``cat`` replaced).
    The object was the only holder (the caller holds the object, not its tensors), so eager
    frees such a tensor once the model has dropped it."""
    out = []
    for obj, ts in getattr(rebuild, "made", ()):
        held = {id(t) for t in tensors_of(obj)}
        out += [t for t in ts if id(t) not in held]
    return out


__all__ = ["plain_outputs", "released", "split_inputs", "tensors_of"]
