"""What the model's own Python does while capture traces it: host reads of device values
answered as eager takes them (:class:`HostReads`), the branch ``torch.compile`` takes
(:class:`Compiling`), and the counts the host profile prices the model's Python by
(:class:`TorchCalls`: top-level torch calls; ``nn.Module`` calls are counted by a forward
pre-hook in :func:`gpusim.capture.tracing.trace_fx`).

Counting, not clocking: the model's Python per forward is ``module_calls`` and
``torch_calls`` times the host's per-call figures (:func:`gpusim.hw.host.python_us`), so a
prediction never depends on the speed of the machine running gpusim.
"""

from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode

from gpusim.graph import ops


class TorchCalls(TorchFunctionMode):
    """Counts the torch calls the traced function makes itself (``torch.relu``,
    ``F.linear``, ``Tensor.view``, ...): a call made while handling another is not
    seen (the mode is off inside its own handler), so this is what the model's Python
    issues, the same count on every run. Entered inside the traced function so that the
    tracer's own torch calls are not counted."""

    def __init__(self, where=None):
        super().__init__()
        self.calls = 0
        self.where = where      # () -> a label of the code running now (a training step's region)
        self.by: dict = {}      # label -> calls made under it

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.calls += 1
        if self.where is not None:
            key = self.where()
            self.by[key] = self.by.get(key, 0) + 1
        return func(*args, **(kwargs or {}))


class Compiling:
    """Context for tracing what ``torch.compile`` would trace: ``torch.compiler.is_compiling()``
    answers True, so library code takes its compile-time branch (Hugging Face then builds
    its attention masks as tensors instead of checking ``mask.all()`` on the host, and
    passes them to attention)."""

    def __enter__(self):
        import torch.compiler as tc
        self._saved = tc.is_compiling
        tc.is_compiling = lambda: True
        return self

    def __exit__(self, *exc):
        import torch.compiler as tc
        tc.is_compiling = self._saved
        return False


#: Reductions whose typical answer, read on the host, is False (``if x.isnan().any():``);
#: every other host-read boolean is assumed True (``if mask.all():``, padding absent).
_FALSE_BY_DEFAULT = ("any", "isnan", "isinf", "isneginf", "isposinf")

#: Draws uniform on [0, 1) (``torch.rand([]) < p``: LayerDrop, stochastic depth drawn on the host)
_UNIFORM = ("rand", "rand_like", "uniform", "uniform_")
#: comparisons ``x OP c``: whether a uniform draw's outcome is True when ``c`` is ``p``
_UNIFORM_TRUE = {"lt": lambda c: c, "le": lambda c: c, "gt": lambda c: 1 - c, "ge": lambda c: 1 - c}


def uniform_draw_answer(node) -> "bool | None":
    """The likelier answer to a host read of ``node`` when it compares a uniform draw on [0, 1)
    with a number (``if torch.rand([]) < self.layerdrop: continue``, OPT's and Whisper's
    LayerDrop; 0.0 by default, so the branch is never taken and every layer runs); None when
    ``node`` is not such a comparison. Eager takes the branch with probability ``c`` (``lt``,
    ``le``) or ``1 - c`` (``gt``, ``ge``): the answer is whether that exceeds one half."""
    if not isinstance(node, torch.fx.Node) or len(node.args) != 2:
        return None
    name = ops.packet_name(str(node.target))
    src, c = node.args
    if name not in _UNIFORM_TRUE or not isinstance(c, (int, float)) or \
            not isinstance(src, torch.fx.Node) or ops.packet_name(str(src.target)) not in _UNIFORM:
        return None
    return _UNIFORM_TRUE[name](float(c)) > 0.5


class HostReads:
    """Context for tracing: answers host reads of device values as eager PyTorch meets them.

    On fake tensors ``bool(t)`` / ``t.item()`` have no value. Inside this context a
    boolean read of a traced fake tensor records an ``aten._local_scalar_dense`` node
    (the device-to-host copy eager runs, which waits for the stream), and returns the
    typical answer: False when the value comes from ``any``/``isnan``/``isinf``, else
    True (``mask.all()``: no padding), or the answer ``forced[i]`` for the i-th read.
    Numeric ``.item()`` is recorded but left symbolic. ``sites`` lists each read:
    ``{"op": producer aten op, "answer": bool or None}``.

    Hugging Face transformers takes its traced code path when it sees a FakeTensor
    (``is_tracing``): materialised masks instead of eager's ``.all()`` checks and
    ``is_causal`` attention. Inside this context it sees no FakeTensor, so the captured
    graph is what eager runs.
    """

    def __init__(self, forced: dict | None = None):
        self.forced = dict(forced or {})
        self.sites: list[dict] = []
        self._saved: list = []

    def __enter__(self):
        import sys
        from torch._subclasses.fake_tensor import FakeTensor

        orig_bool, orig_item = torch.Tensor.__bool__, torch.Tensor.item
        reads = self

        def read_bool(t, orig):
            if not isinstance(t, FakeTensor) or t.numel() != 1:
                return orig(t)
            v = torch.ops.aten._local_scalar_dense.default(t)
            if not isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
                return bool(v)          # a constant the fake tensor knows: no real read
            return reads._answer(t)

        def __bool__(self):
            return read_bool(self, orig_bool)

        def item(self):
            if self.dtype == torch.bool:
                return read_bool(self, orig_item)
            if isinstance(self, FakeTensor):
                reads.sites.append({"op": reads._producer(self), "answer": None})
            return orig_item(self)

        self._saved = [(torch.Tensor, "__bool__", torch.Tensor.__dict__.get("__bool__")),
                       (torch.Tensor, "item", torch.Tensor.__dict__.get("item"))]
        torch.Tensor.__bool__ = __bool__
        torch.Tensor.item = item
        hf = sys.modules.get("transformers.utils.import_utils")
        if hf is not None and hasattr(hf, "is_fake_tensor"):
            self._saved.append((hf, "is_fake_tensor", hf.is_fake_tensor))
            hf.is_fake_tensor = lambda x: False
        return self

    def __exit__(self, *exc):
        for obj, attr, old in reversed(self._saved):
            if old is None:
                delattr(obj, attr)
            else:
                setattr(obj, attr, old)
        self._saved = []
        return False

    @staticmethod
    def _producer_node(t):
        """The FX node that made ``t`` in the trace under way (None: not known)."""
        try:
            from torch.fx.experimental.proxy_tensor import get_proxy_mode, get_proxy_slot
            mode = get_proxy_mode()
            return get_proxy_slot(t, mode.tracer).proxy.node
        except Exception:  # noqa: BLE001 - the producer is a nicety, not a need
            return None

    @classmethod
    def _producer(cls, t) -> str:
        node = cls._producer_node(t)
        return "?" if node is None else str(node.target)

    def _answer(self, t) -> bool:
        i = len(self.sites)
        node = self._producer_node(t)
        op = "?" if node is None else str(node.target)
        default = uniform_draw_answer(node)
        if default is None:
            default = ops.packet_name(op) not in _FALSE_BY_DEFAULT
        answer = self.forced.get(i, default)
        self.sites.append({"op": op, "answer": answer})
        return answer


