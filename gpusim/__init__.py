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

from .capture import capture
from .errors import GpusimError
from .hardware import load_spec
from .lower import lower
from .models import load_model
from .partition import Partition
from .predict import Prediction, predict
from .search import SearchResult, search, whatif

__all__ = ["predict", "search", "whatif", "capture", "lower", "load_spec", "load_model",
           "Partition", "Prediction", "SearchResult", "GpusimError"]
