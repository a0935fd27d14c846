"""ATen's kernel classes (broadcast adds, row reductions, layer norms) against a plain
stream of the same bytes, and the floors of tiny reductions and GEMMs: measured on the
GPU by ``gpusim calibrate`` and fitted into the spec's ``aten_*`` figures.
"""

from __future__ import annotations

import numpy as np
import torch

from gpusim.cost.classes import NORM_CALIBRATION_COLS
from validation.measure import timing as measure


def aten_microbenchmarks() -> dict:
    """Eager PyTorch's kernel classes against a contiguous elementwise add on the same
    dtype and about 512 MiB (far past L2), plus floors of tiny reductions and GEMMs.
    Times are profiled kernel durations, L2 flushed."""
    dev = "cuda"

    def kern(fn, *a):
        ks = measure.profile_kernels(lambda: fn(*a), flush=True, reps=5)["kernels"]
        return sum(k["us"] for k in ks)
    out = {}
    cols = NORM_CALIBRATION_COLS
    for dt in (torch.float32, torch.bfloat16):
        name = str(dt).replace("torch.", "")
        rows = (256 << 20) // (cols * dt.itemsize)          # 256 MiB per operand
        x = torch.randn(rows, cols, device=dev, dtype=dt)
        y = torch.randn(rows, cols, device=dev, dtype=dt)
        b = torch.randn(cols, device=dev, dtype=dt)
        w = torch.randn(cols, device=dev, dtype=dt)
        nb = x.numel() * dt.itemsize
        r = {"bytes_operand": nb}
        r["add_contiguous_us"] = kern(torch.add, x, y)       # reads 2, writes 1 operand
        r["add_broadcast_us"] = kern(torch.add, x, b)        # reads 1, writes 1
        r["sum_rows_us"] = kern(lambda t: t.sum(-1), x)     # reads 1
        r["layer_norm_us"] = kern(lambda t: torch.nn.functional.layer_norm(t, (cols,), w, b), x)
        out[name] = r
        del x, y
    small = torch.randn(8, 128, device=dev)
    out["floor_sum_us"] = kern(lambda t: t.sum(-1), small)
    out["floor_layer_norm_us"] = kern(lambda t: torch.nn.functional.layer_norm(t, (128,)), small)
    floors = []
    for dt in (torch.float32, torch.bfloat16):
        a = torch.randn(8, 128, device=dev, dtype=dt)
        m = torch.randn(128, 128, device=dev, dtype=dt)
        floors.append(kern(torch.mm, a, m))
    out["floor_mm_us"] = floors
    return out


def fit_aten(aten: dict) -> dict:
    """Fractions of a plain stream's bandwidth for ATen's kernel classes, and floors.

    A contiguous add moves 3 operands' bytes; a broadcast add 2, a row sum 1 and a layer
    norm 2 (reads x, writes y): each class's bandwidth over the add's.
    """
    out = {}
    for name, key in (("float32", ""), ("bfloat16", "_16bit")):
        r = aten.get(name)
        if not r:
            continue
        nb = r["bytes_operand"]
        stream = 3 * nb / r["add_contiguous_us"]
        out["aten_strided_efficiency" + key] = min(1.0, 2 * nb / r["add_broadcast_us"] / stream)
        out["aten_norm_efficiency" + key] = min(1.0, 2 * nb / r["layer_norm_us"] / stream)
        if name == "float32":
            out["aten_reduction_efficiency"] = min(1.0, nb / r["sum_rows_us"] / stream)
    if "floor_sum_us" in aten:
        out["reduction_min_us"] = float(np.median([aten["floor_sum_us"], aten["floor_layer_norm_us"]]))
    if "floor_mm_us" in aten:
        out["gemm_min_us"] = float(min(aten["floor_mm_us"]))
    return out
