"""Python lifetimes of traced tensors: when eager PyTorch really frees each activation.

In eager mode a tensor's memory goes back to the caching allocator when its last Python
reference goes (reference counting), not after its last use by an op. Python holds many
activations past their last use: a module's arguments live until the module returns
(``nn.Module.__call__`` keeps them), a residual ``x`` lives for the whole block, the
output of an embedding lives while an encoder it was passed to runs, a loop variable
holds the previous layer's output. A liveness by last graph use therefore misses part of
the eager peak (the measured zoo: 10-30% too low on transformers and CNNs).

Capture runs the model's own Python once (``make_fx`` on fake tensors), so those
lifetimes can be observed rather than guessed: :class:`PythonLifetimes` puts a
``weakref.finalize`` on every tensor object the tracer hands back to the model's code and
notes the last graph node created when the object dies. A storage is free once every
tensor object on it is gone (views share it). Node values that the FX graph keeps
(``meta["val"]``) are detached copies, other objects: they keep no model tensor alive.

Observed deaths must not depend on anything but the model's code. Two things outside it
can hold a tensor past its last reference, and :class:`PythonLifetimes` shuts both out while
it watches:

* the cyclic garbage collector: a tensor held by a reference cycle dies when a collection
  runs, which depends on how many objects the process allocated before (its history: a
  sweep worker's earlier tasks). Collection is off during the trace (collected before,
  restored after), so such a tensor lives to the end of the call, in every process;
* another thread holding one of the tracing thread's frames: a sampling profiler (the Dask
  worker's, every 10 ms) takes ``sys._current_frames()``, and a frame it holds while the
  model's function returns keeps that function's locals (the previous layer's output)
  alive until the profiler lets go (a sweep worker's ``conv_bn_relu`` peak: three
  activations instead of two, now and then). During the trace ``sys._current_frames()``
  shows that thread as the frame that entered the trace, which outlives it.

:func:`python_frees` turns that into ``graph.meta["py_free"]``: per OpGraph node, the
node after whose kernel Python has dropped the tensor (``None``: still referenced when the
call returns, e.g. an output or a tensor the model cached). :mod:`gpusim.sim.memory` frees an
eager storage after ``max(last use, py_free)``.
"""

from __future__ import annotations

import gc
import sys
import threading
import weakref

#: what ``py_free`` says of a tensor still referenced when the forward returns
ALIVE = None


class PythonLifetimes:
    """Context for :func:`torch.fx.experimental.proxy_tensor.make_fx`: records, for each
    FX node whose value the model's code held, the FX node that was last in the graph when
    that tensor object died. ``deaths[name]`` is that node's name, or :data:`ALIVE` when
    the object outlived the trace (outputs, tensors cached on modules)."""

    def __init__(self):
        self.deaths: dict[str, str | None] = {}
        self._finalizers: list = []
        self._saved = None
        self._open = False

    def __enter__(self):
        import torch.fx.experimental.proxy_tensor as pt
        self._saved = pt.track_tensor
        orig, life = pt.track_tensor, self

        def track_tensor(tensor, proxy, *, constant, tracer):
            orig(tensor, proxy, constant=constant, tracer=tracer)
            life._watch(tensor, proxy.node.name, tracer.graph)
        _shut_out(sys._getframe(1))
        pt.track_tensor = track_tensor
        self._open = True
        return self

    def _watch(self, tensor, name: str, graph) -> None:
        try:
            f = weakref.finalize(tensor, self._died, name, graph)
        except TypeError:          # an object that takes no weak reference
            return
        f.atexit = False
        self._finalizers.append(f)

    def _died(self, name: str, graph) -> None:
        if not self._open:
            return
        nodes = graph.nodes
        last = next(iter(reversed(nodes)), None) if len(nodes) else None
        self.deaths[name] = ALIVE if last is None or last.op == "output" else last.name

    def __exit__(self, *exc):
        import torch.fx.experimental.proxy_tensor as pt
        pt.track_tensor = self._saved
        self._open = False
        try:
            for f in self._finalizers:
                if f.alive:        # still referenced after the trace: alive at the end
                    name = f.peek()[2][0]
                    self.deaths[name] = ALIVE
                    f.detach()
            self._finalizers = []
        finally:
            _let_in()
        return False


_LOCK = threading.Lock()
_HIDDEN: dict = {}          # tracing thread -> the frame sys._current_frames() shows for it
_SAVED: dict = {}           # what the first trace in found: gc on or off, sys._current_frames


def _current_frames():
    frames = _SAVED["frames"]()
    for ident, outer in list(_HIDDEN.items()):
        if ident in frames:
            frames[ident] = outer
    return frames


def _shut_out(outer) -> None:
    """For the calling thread, until :func:`_let_in`: no cyclic collection (one collection
    first), and ``sys._current_frames()`` shows it as ``outer`` (a frame that outlives
    the trace below it). Traces in several threads nest: the first in saves, the last out
    restores."""
    with _LOCK:
        if not _HIDDEN:
            _SAVED.update(gc=gc.isenabled(), frames=sys._current_frames)
            gc.collect()        # earlier garbage does not die during the trace
            gc.disable()
            sys._current_frames = _current_frames
        _HIDDEN[threading.get_ident()] = outer


def _let_in() -> None:
    with _LOCK:
        _HIDDEN.pop(threading.get_ident(), None)
        if not _HIDDEN and _SAVED:
            sys._current_frames = _SAVED.pop("frames")
            if _SAVED.pop("gc"):
                gc.enable()


def python_frees(gm, graph, deaths: dict) -> dict:
    """``{OpGraph node: OpGraph node after which Python has dropped it, or None}`` from
    :attr:`PythonLifetimes.deaths` of the trace ``gm`` that became ``graph``. A death
    between two graph nodes is attributed to the last OpGraph node before it (FX nodes
    that became no OpGraph node, ``sym_size`` say, carry no kernel)."""
    g = graph.g
    fx_to_g = {g.nodes[n].get("fx_name", n): n for n in g.nodes}
    at: dict[str, str | None] = {}
    last = None
    for node in gm.graph.nodes:
        if node.name in fx_to_g and node.op != "placeholder":
            last = fx_to_g[node.name]
        at[node.name] = last
    out = {}
    for name, when in deaths.items():
        n = fx_to_g.get(name)
        if n is None or g.nodes[n]["kind"] == "input":
            continue
        out[n] = ALIVE if when is ALIVE else at.get(when, ALIVE)
    return out
