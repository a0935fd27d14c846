"""The cyclic garbage collector around what loads for good (torch, a model library, the user's
model): off while it loads, then the loaded objects frozen (:func:`loading_for_good`).

A command imports torch and a model library: about a million objects that live as long as the
process. With the collector on, each of them is scanned by a young collection (gpusim's
thresholds, :data:`gpusim.cli.commands.GC_THRESHOLD`: 100,000 new objects each) that finds next
to nothing: ~0.3 s of ``gpusim generate`` on a 32-layer 7B decoder, 7 collections finding 0.1-6
thousand objects each. Frozen, they are never scanned again (a capture's collection before it
traces, :mod:`gpusim.capture.lifetimes`, included). Predictions do not depend on the collector:
a traced tensor dies by its reference count, and tracing runs with the collector off."""

from __future__ import annotations

import contextlib
import gc


@contextlib.contextmanager
def loading_for_good():
    """The collector off while the block runs; then what the process holds is frozen
    (``gc.freeze``: moved out of every generation, the youngest's count zeroed, so no
    collection of it follows) and the collector is back as it was. Garbage the block left is
    frozen with the rest, until ``gc.unfreeze()``. On an exception nothing is frozen."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
        gc.freeze()
    finally:
        if collecting:
            gc.enable()


__all__ = ["loading_for_good"]
