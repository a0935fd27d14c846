"""ATen's reduction kernel (``at::native::reduce_kernel``) over the layouts and sizes models reduce: the data of
the launch-configuration law (:mod:`gpusim.cost.aten_reduce`; issue 35).

``python3 -m validation.measure.aten_reduce --out FILE.jsonl [--budget-s 150] [--reps 10] [--device cpu]``

Why: in the held-out eager records ATen's reductions run up to 2.2x their predicted time (ConvNeXt-V2's spatial
L2 norm over a channels-last activation: 7.3-14.8 us a kernel, predicted 2.3-3.5, a stream over its bytes), and
the cnn_convs sweep's 32 such norms run 2.5-12x theirs: 27.8 us for 0.5 MB at batch 1, 9.7 us for 8 MB at batch
16. ``setReduceConfig`` (ATen ``Reduce.cuh``) sizes the grid by the outputs and splits the reduction over threads,
warps and blocks by fixed rules, so a reduction with few outputs leaves each thread a long serial loop of
dependent loads, and one split over blocks adds a global pass. This sweep spans those regimes: reductions over
the innermost dims and over outer ones, few and many outputs, to one element, split over blocks or not.
Nothing here is a held-out or published model.

Points (float32 and bfloat16): ``spatial``: ``x.mean((2, 3))`` of an NCHW activation (N, C, HW, HW) (a pooled
head, a squeeze-excite); ``nhwc``: ``torch.linalg.vector_norm(x, dim=(1, 2))`` of (N, HW, HW, C) (ConvNeXt-V2's
GRN); ``rows``: ``x.sum(-1)`` and ``x.amax(-1)`` of (M, K); ``cols``: ``x.sum(0)`` of (M, K); ``all``: ``x.sum()``
of n elements. ``warm`` points run ``y = x * 1.0`` first and reduce ``y`` (its input L2-resident, as in a
model, where a reduction reads what the kernel before it wrote). Each point is warmed up, then profiled:
``reps`` calls in one profiler session, L2 flushed before each (:func:`validation.measure.timing.profile_call`),
median device time per kernel; PyTorch's default flags. Output: JSONL, an environment line (``kind:
environment``) then one line per point (``kind: aten_reduce``: op, red, shape, dims, dtype, warm, kernels
[{name, us}]), flushed after each; points are interleaved so a cut sweep still spans the grid, and stop starting
after ``--budget-s`` seconds (listed as ``not_reached`` in the closing ``kind: summary`` line).
"""

from __future__ import annotations

import torch

from validation.measure.bench_common import profiled_run, sweep_main

DTYPES = ("float32", "bfloat16")
#: (C, HW) of NCHW spatial means: pooled heads and squeeze-excite inputs of ResNet / EfficientNet / RegNet
SPATIAL = ((64, 112), (64, 56), (256, 28), (512, 14), (1024, 7), (2048, 7), (96, 40), (1280, 8))
#: (C, HW) of channels-last spatial norms: ConvNeXt-V2's GRN at 160-256 px, and wider / coarser maps
NHWC = ((80, 64), (320, 56), (640, 28), (1280, 14), (2560, 7), (96, 56), (384, 28), (768, 14))
BATCHES = (1, 8, 32)
#: (M, K) of 2-D reductions
ROWS = tuple((m, k) for m in (1, 64, 1024, 8192) for k in (256, 1024, 4096, 32768))
ALL = tuple(1 << e for e in (12, 14, 16, 18, 20, 22, 24, 26))


def points(small: bool = False) -> list[dict]:
    """Every point, interleaved (families alternate, so a cut sweep keeps each)."""
    if small:
        return [{"op": "spatial", "red": "mean", "shape": [1, 4, 8, 8], "dims": [2, 3], "dtype": "float32", "warm": w}
                for w in (False, True)] + [
                {"op": "nhwc", "red": "norm", "shape": [1, 8, 8, 4], "dims": [1, 2], "dtype": "float32", "warm": False},
                {"op": "rows", "red": "amax", "shape": [4, 16], "dims": [1], "dtype": "float32", "warm": False},
                {"op": "all", "red": "sum", "shape": [64], "dims": [0], "dtype": "float32", "warm": False}]
    fams = [
        [{"op": "spatial", "red": "mean", "shape": [n, c, hw, hw], "dims": [2, 3], "dtype": dt, "warm": w}
         for (c, hw) in SPATIAL for n in BATCHES for dt in DTYPES for w in (False, True)],
        [{"op": "nhwc", "red": "norm", "shape": [n, hw, hw, c], "dims": [1, 2], "dtype": dt, "warm": w}
         for (c, hw) in NHWC for n in BATCHES for dt in DTYPES for w in (False, True)],
        [{"op": "rows", "red": r, "shape": [m, k], "dims": [1], "dtype": dt, "warm": False}
         for (m, k) in ROWS for r in ("sum", "amax") for dt in DTYPES],
        [{"op": "cols", "red": "sum", "shape": [m, k], "dims": [0], "dtype": dt, "warm": False}
         for (m, k) in ROWS if m > 1 for dt in DTYPES],
        [{"op": "all", "red": "sum", "shape": [n], "dims": [0], "dtype": dt, "warm": False}
         for n in ALL for dt in DTYPES],
    ]
    out = []
    for i in range(max(len(f) for f in fams)):
        out += [f[i] for f in fams if i < len(f)]
    return out


def reducer(p: dict):
    """The point's reduction of ``x``."""
    d = tuple(p["dims"])
    return {"mean": lambda x: x.mean(d), "sum": lambda x: x.sum(d), "amax": lambda x: x.amax(d),
            "norm": lambda x: torch.linalg.vector_norm(x, dim=d)}[p["red"]]


def make(p: dict, device: str):
    """``(fn, args)`` of one point."""
    x = torch.randn(*p["shape"], device=device, dtype=getattr(torch, p["dtype"]))
    red = reducer(p)
    if p["warm"]:
        return (lambda x: red(x * 1.0)), (x,)
    return red, (x,)


def describe(p: dict) -> str:
    return f"{p['op']:<7} {p['red']:<4} {'x'.join(map(str, p['shape'])):<16} {p['dtype']:<8} {'warm' if p['warm'] else 'cold'}"


def main(argv=None) -> int:
    return sweep_main(argv, __doc__, "aten_reduce", points, profiled_run("aten_reduce", make), describe, 150.0)


if __name__ == "__main__":
    raise SystemExit(main())
