"""Record graphs lowered once per process: the scores' predictions and memory estimates.

The zoo's scores price the same captured graph many times over: the device-time rows on
the calibrated spec, the end-to-end rows and the host leases' walls (three host profiles
a case, one lowering: lowering does not depend on the host), torch.compile's speed-up
rows, the memory rows (``zoo_report``, the memory guard, the MemTracker comparisons,
``holdout_report``) and the fresh-process rows. A lowering is a pure function of the
captured graph (:func:`validation.records.store.record_graph` returns one object per
record graph for the process), the mode and the GPU spec (a frozen dataclass, hashed by
value), and so is a memory estimate of it: both are kept here, keyed by those three.

:func:`predicted` is :func:`gpusim.predict.pipeline.predict` of an OpGraph with no
partition and default cost options, step for step (``predict_lowering(lower(graph, mode,
spec=spec), spec, host=host)``), with the lowering reused; nothing is approximated. The
kept lowerings and estimates are frozen or only read by their callers.
"""

from __future__ import annotations

import functools

from gpusim.predict.pipeline import as_spec, check_mode, lower, predict_lowering
from validation.records.store import record_graph


@functools.lru_cache(maxsize=4096)      # a few hundred record graphs x modes x specs
def lowered(graph, mode: str, spec):
    """``lower(graph, mode, spec=spec)``, memoised by graph object, mode and spec."""
    check_mode(mode)
    return lower(graph, mode, spec=spec)


def predicted(graph, spec, mode: str = "eager", host=None):
    """``predict(graph, gpu=spec, mode=mode, host=host)`` for an OpGraph, the lowering
    memoised (:func:`lowered`); the pricing runs afresh for every host."""
    spec = as_spec(spec)
    return predict_lowering(lowered(graph, mode, spec), spec, host=host)


@functools.lru_cache(maxsize=4096)
def _memory(graph, mode: str, spec):
    from gpusim.sim.memory import simulate_memory
    return simulate_memory(lowered(graph, mode, spec), spec=spec)


def record_memory(rec: dict, mode: str, spec):
    """``simulate_memory(lower(record_graph(rec), mode, spec=spec), spec=spec)``, memoised."""
    return _memory(record_graph(rec), mode, spec)
