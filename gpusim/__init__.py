"""gpusim: predict how fast PyTorch computations run on NVIDIA GPUs, how the kernels
that really run (eager, torch.compile, CUDA graphs, a fusion partition) spend their
time, and what fusion buys — before writing a kernel.

The pipeline, one package per stage (``docs/architecture.md``; ``lint-imports`` keeps the order)::

    capture -> graph -> lower -> cost -> sim -> predict -> report
    (hw: GPU specs, architectures, hosts;  models: the zoo and examples)
    fusion: partitions scored through lower -> cost -> sim;  sweep and cli on top

>>> import torch, gpusim
>>> p = gpusim.predict(lambda x: torch.relu(x * 2), (torch.empty(2**20, device="meta"),), gpu="h100")
>>> [k.name for k in p.kernels]
['mul', 'relu']
"""

import importlib
import sys
import types

from gpusim.util.errors import GpusimError

# The API by where it lives; loaded on first use (PEP 562) so that `import gpusim` and
# `gpusim --help` stay cheap and never import torch.
_API = {"predict": "predict.api", "Prediction": "predict.pipeline", "search": "fusion.search",
        "whatif": "fusion.search", "SearchResult": "fusion.search", "capture": "capture.tracing",
        "lower": "predict.pipeline", "load_spec": "hw.spec", "load_host": "hw.host",
        "load_model": "models.resolve", "Partition": "lower.partition", "rollup": "report.rollup",
        "sweep": "sweep.run", "generate": "predict.generate",
        "GenerateResult": "predict.generate"}

__all__ = ["predict", "search", "whatif", "capture", "lower", "load_spec", "load_host", "load_model",
           "Partition", "Prediction", "SearchResult", "GpusimError", "rollup", "sweep", "generate", "GenerateResult"]


def __getattr__(name):
    if name in _API:
        value = getattr(importlib.import_module(f".{_API[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'gpusim' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))


class _Package(types.ModuleType):
    """The stages ``gpusim.capture``, ``gpusim.lower``, ``gpusim.predict`` and ``gpusim.sweep`` are
    packages that share their name with an API function. Importing one must not rebind the
    package attribute to the subpackage: ``gpusim.capture(...)`` stays the function (loaded by
    :func:`__getattr__`), and the subpackage is reached by ``from gpusim.capture import tracing``."""

    def __setattr__(self, name, value):
        if name in _API and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
