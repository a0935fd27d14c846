"""gpusim: predict how fast PyTorch computations run on NVIDIA GPUs, how the kernels
that really run (eager, torch.compile, CUDA graphs, a fusion partition) spend their
time, and what fusion buys — before writing a kernel.

The pipeline, one module per stage::

    capture -> graph -> lower -> cost -> simulate -> report
                          ^
    fusion: legality + partition + scoring + search choose among lowerings

>>> import torch, gpusim
>>> p = gpusim.predict(lambda x: torch.relu(x * 2), (torch.empty(2**20, device="meta"),), gpu="h100")
>>> [k.name for k in p.kernels]
['mul', 'relu']
"""

import importlib
import sys
import types

from .errors import GpusimError

# The API by where it lives; loaded on first use (PEP 562) so that `import gpusim` and
# `gpusim --help` stay cheap and never import torch.
_API = {"predict": "predict", "Prediction": "predict", "search": "search", "whatif": "search",
        "SearchResult": "search", "capture": "capture", "lower": "lower",
        "load_spec": "hardware", "load_host": "host", "load_model": "models",
        "Partition": "partition", "rollup": "modules", "sweep": "sweep"}

__all__ = ["predict", "search", "whatif", "capture", "lower", "load_spec", "load_host", "load_model",
           "Partition", "Prediction", "SearchResult", "GpusimError", "rollup", "sweep"]


def __getattr__(name):
    if name in _API:
        value = getattr(importlib.import_module(f".{_API[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'gpusim' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))


class _Package(types.ModuleType):
    """Importing a submodule that shares an API name (``gpusim.predict``,
    ``gpusim.capture``, ...) binds the package attribute to the function, as an eager
    ``from .predict import predict`` would, not to the submodule."""

    def __setattr__(self, name, value):
        if name in _API and isinstance(value, types.ModuleType) and hasattr(value, name):
            value = getattr(value, name)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
