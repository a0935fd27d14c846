"""What every capture path shares: the error a failed trace raises, the traced result, and the
fake-tensor plumbing (flattening inputs, silencing torch's fake-tensor logger, one line for a failure)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

from gpusim.graph.opgraph import OpGraph
from gpusim.util.errors import GpusimError


class CaptureError(GpusimError):
    """The model could not be traced; the message says why and what to do."""


@dataclass
class Captured:
    """The result of tracing: the FX graph (runnable), its flat inputs, and the OpGraph."""

    gm: "torch.fx.GraphModule"
    flat_inputs: list
    input_names: list[str]
    graph: OpGraph
    seconds: float


def _flatten_tensors(x, out):
    if isinstance(x, torch.Tensor):
        out.append(x)
    elif isinstance(x, (list, tuple)):
        for y in x:
            _flatten_tensors(y, out)
    elif isinstance(x, dict):
        for y in x.values():
            _flatten_tensors(y, out)
    return out


def _quiet_fake_tensor_logger():
    """Silence torch's fake-tensor logger while tracing (it prints a whole traceback for
    errors that capture turns into one line); returns the function that restores it."""
    log = logging.getLogger("torch._subclasses.fake_tensor")
    level = log.level
    log.setLevel(logging.CRITICAL)
    return lambda: log.setLevel(level)


def _explain_trace_failure(e: Exception) -> str:
    msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    name = type(e).__name__
    data_dep = ("DataDependent" in name or "data-dependent" in str(e).lower()
                or "data dependent" in str(e).lower() or "item()" in str(e)
                or "GuardOnDataDependent" in str(e) or "nonzero" in str(e))
    if data_dep:
        return ("the model has data-dependent output shapes or uses a tensor's value as a "
                "number (" + msg[:160] + "); gpusim traces on fake tensors without data: "
                "boolean checks such as `if mask.all():` are answered as eager would typically "
                "take them, but sizes from .item(), .nonzero() and boolean-mask indexing are "
                "unknown; use fixed sizes or torch.where")
    return (f"could not trace the model: {name}: {msg[:200]}; check that it runs on the "
            "example args (shapes, dtypes, devices) and has no data-dependent control flow")


#: types :func:`plain` returns as they are (exact types: torch's symbolic numbers are none of them)
_LEAVES = frozenset({int, float, str, bool, type(None)})


def plain(v):
    """``v`` with torch's symbolic numbers (``SymInt``, ``SymFloat``, ``SymBool``: what a compiled
    trace's fake tensors carry in their shapes) turned into the numbers they stand for, through
    dicts, lists and tuples, so that a graph, and every prediction made from it, holds plain
    numbers only."""
    if type(v) in _LEAVES:      # most of a graph's attributes: nothing to turn (fast path)
        return v
    if isinstance(v, torch.SymInt):
        return int(v)
    if isinstance(v, torch.SymFloat):
        return float(v)
    if isinstance(v, torch.SymBool):
        return bool(v)
    if isinstance(v, dict):
        return {k: plain(x) for k, x in v.items()}
    if isinstance(v, list):
        return [plain(x) for x in v]
    if isinstance(v, tuple):
        if type(v) is tuple and all(type(x) in _LEAVES for x in v):
            return v            # a shape of plain numbers
        items = [plain(x) for x in v]
        return type(v)(*items) if hasattr(v, "_fields") else type(v)(items)
    return v
