"""A sweep's table: its key columns and figures, the file formats it writes, and the optional pandas import (``gpusim[sweep]``)."""

from __future__ import annotations
from gpusim.util.errors import UserError


#: The columns that name a row; one row per key in a results file.
KEY = ("model", "sizes", "dtype", "train", "amp", "gpu", "mode", "host")


#: The scalar figures of ``Prediction.to_dict()`` (``gpusim predict --json``) a row carries.
FIGURES = ("device_us", "end_to_end_us", "latency_us", "idle_us", "host_us", "python_us",
           "n_kernels", "flops", "bytes")


#: ``memory`` figures of ``predict --json``, as ``memory_<name>`` columns (the per-kernel
#: timelines stay out of a row, as the per-kernel table does: ``gpusim predict`` has them).
MEMORY = ("weights_bytes", "inputs_bytes", "peak_bytes", "peak_reserved_bytes",
          "reserved_for_peak_bytes", "steady_reserved_bytes", "first_call_reserved_bytes",
          "total_reserved_bytes", "peak_kernel", "peak_ops", "output_bytes", "total_bytes",
          "fits", "capacity_bytes")


FORMATS = (".parquet", ".csv")


INSTALL = "pip install 'gpusim[sweep]'"


AMP_OFF = "off"


def _pandas():
    try:
        import pandas
    except ImportError:
        raise UserError(f"gpusim sweep needs pandas (the sweep extra): {INSTALL}") from None
    return pandas


# ---------------------------------------------------------------- one task (on a worker)
def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text}" if text else type(e).__name__
